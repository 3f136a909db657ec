//! The network edge both servers share (`docs/limits.md`, "Network limits"): an accept loop
//! over hyper's connection builder with a cap on open connections, a deadline for each new
//! connection's first request, an idle timeout, HTTP/1.1 header timeouts and HTTP/2 stream
//! limits and keep-alive pings. The caps are only safe below the process's open-files limit,
//! which [`raise_open_files_limit`] lifts as far as allowed at start.

pub mod body_deadline;
mod conns;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use bytes::Bytes;
use conns::{Conn, Conns, InFlight};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tower::{Service, ServiceExt};

/// How one listener treats its connections.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Open connections at most; at the cap a new one evicts the longest-idle one.
    pub max_connections: usize,
    /// A new connection's first request must have arrived (headers complete) by then, and on
    /// HTTP/1.1 every later request's headers too, counted from when the server waits for them.
    pub header_timeout: Duration,
    /// A connection with no request in progress for this long is closed.
    pub idle_timeout: Duration,
    /// Serve HTTP/2 only (gRPC); otherwise HTTP/1.1 and HTTP/2 with prior knowledge.
    pub http2_only: bool,
    /// HTTP/2: streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// HTTP/2: ping an open connection this often (none: never) ...
    pub keepalive_interval: Option<Duration>,
    /// ... and close it when the answer takes longer than this.
    pub keepalive_timeout: Duration,
}

/// Serves `listener` until `shutdown`, then stops accepting and waits for the open
/// connections to finish their requests. `make` builds the service of each new connection;
/// every request carries the peer's `ConnectInfo<SocketAddr>`.
pub async fn serve<M, S, B>(
    listener: TcpListener,
    make: M,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) where
    M: Fn() -> S,
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let conns = Arc::new(Conns::new(limits.max_connections));
    let builder = Arc::new(builder(&limits));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        let Some(conn) = conns.admit() else {
            tracing::debug!(%peer, "every connection has a request in progress: closing a new one");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let connection = Connection {
            conn,
            conns: conns.clone(),
            builder: builder.clone(),
            limits: limits.clone(),
            stop: stop_rx.clone(),
        };
        tokio::spawn(connection.serve(tcp, peer, make()));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    conns.drained().await;
}

fn builder(limits: &ConnLimits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    if limits.http2_only {
        builder = builder.http2_only();
    }
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .keep_alive_interval(limits.keepalive_interval)
        .keep_alive_timeout(limits.keepalive_timeout);
    builder
}

/// Connections the kernel queues for accepting (capped by `net.core.somaxconn`, 4096 by
/// default). tokio's own listener queues 1024: a burst of more connects than that (a fleet of
/// exporters reconnecting at once) overflows it, and each connect beyond it waits a second for
/// its client to retry. A new client's connection then arrives in the middle of that second
/// burst, and before its first request is read, enough connects behind it can evict it as the
/// longest-idle one.
const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`].
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Accept errors are mostly about one connection (reset before it was accepted); running out
/// of file descriptors is not, and retrying at once would spin, so that waits a little.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted) {
        return;
    }
    tracing::warn!(error = %e, "accepting a connection failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// How long an idle connection may take to close politely before it is dropped.
const CLOSING_GRACE: Duration = Duration::from_secs(1);

/// One accepted connection and what it needs to be served.
struct Connection {
    conn: Arc<Conn>,
    conns: Arc<Conns>,
    builder: Arc<Builder<TokioExecutor>>,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
}

impl Connection {
    async fn serve<S, B>(mut self, tcp: TcpStream, peer: SocketAddr, service: S)
    where
        S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let conn = self.conn.clone();
        let per_request = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let in_flight = conn.begin();
            req.extensions_mut().insert(ConnectInfo(peer));
            let call = service.clone().oneshot(req);
            async move { Ok::<_, Infallible>(track(call.await?, in_flight)) }
        });
        let mut served = pin!(self.builder.serve_connection(TokioIo::new(tcp), per_request));
        let mut stopping = false;
        loop {
            tokio::select! {
                result = served.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    break;
                }
                _ = self.stop.changed(), if !stopping => {
                    served.as_mut().graceful_shutdown();
                    stopping = true;
                }
                _ = self.conn.first_request_timeout(self.limits.header_timeout) => {
                    tracing::debug!(%peer, "no request within the header timeout: closing");
                    break;
                }
                _ = self.conn.idle_timeout(self.limits.idle_timeout) => {
                    // Politely: HTTP/2 clients get a GOAWAY, so none sends a request into a
                    // closing connection.
                    tracing::debug!(%peer, "idle connection: closing");
                    served.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(CLOSING_GRACE, served.as_mut()).await;
                    break;
                }
                _ = self.conn.evicted() => {
                    tracing::debug!(%peer, "idle connection evicted for a new one");
                    break;
                }
            }
        }
        self.conns.remove(&self.conn);
    }
}

/// The response, with the request counted as in progress until its body has been sent.
fn track<B>(response: Response<B>, in_flight: InFlight) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    response.map(|body| {
        Body::new(body.map_frame(move |frame| {
            let _in_flight = &in_flight;
            frame
        }))
    })
}

/// File descriptors left out of the default connection caps: the store's files, the Kafka and
/// ClickHouse clients' sockets, logs.
const RESERVED_FILES: u64 = 256;

/// Raises the soft open-files limit to the hard one (every connection holds a descriptor);
/// returns the limit now in force.
pub fn raise_open_files_limit() -> u64 {
    #[cfg(unix)]
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => return limit,
        Err(e) => tracing::warn!(error = %e, "could not raise the open-files limit"),
    }
    open_files_limit()
}

/// The soft open-files limit (a generous guess where there is none to read).
pub fn open_files_limit() -> u64 {
    #[cfg(unix)]
    if let Ok((soft, _)) = rlimit::getrlimit(rlimit::Resource::NOFILE) {
        return soft;
    }
    65_536
}

/// A listener's default connection cap: `preferred`, or its `share` of the open-files limit
/// beyond [`RESERVED_FILES`] if that is lower, so that the caps of all listeners together
/// stay well under the limit.
pub fn default_max_connections(preferred: usize, share: f64) -> usize {
    let budget = open_files_limit().saturating_sub(RESERVED_FILES) as f64 * share;
    (budget as usize).clamp(16, preferred.max(16))
}
