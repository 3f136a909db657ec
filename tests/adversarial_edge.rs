//! Adversarial clients at the network edge of both servers (`docs/limits.md`, "Network
//! limits"): headers and bodies trickled in, silent and idle sockets beyond the connection cap
//! and the open-files limit, and OTLP/gRPC requests that must be refused before their message
//! is read. Servers run with short timeouts and low caps (flags) to keep the file fast.

mod common;

use std::io::Write;
use std::time::Duration;

use bytes::{Buf, BufMut};
use common::{Server, started, uid};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};
use tonic::codec::{CompressionEncoding, DecodeBuf, EncodeBuf};

const P: &str = "edge-ent/edge-proj";
/// How long a test waits for the server to close a connection it should close after ~1 s.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

fn addr(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// The test process holds over a thousand sockets at once.
fn raise_own_open_files_limit() {
    rlimit::increase_nofile_limit(u64::MAX).expect("raising the open-files limit");
}

/// Writes `head`, then one byte of `trickle` every 100 ms (cycling), reading what the server
/// sends meanwhile. Returns what it sent once it closed the connection, or `None` if it is
/// still open after `limit`.
async fn trickle(
    stream: &mut TcpStream,
    head: &[u8],
    trickle: &[u8],
    limit: Duration,
) -> Option<Vec<u8>> {
    stream.write_all(head).await.expect("sending the head");
    let deadline = Instant::now() + limit;
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let mut next = trickle.iter().cycle();
    while Instant::now() < deadline {
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Some(received),
                Ok(n) => received.extend_from_slice(&buf[..n]),
            },
            () = sleep(Duration::from_millis(100)) => {
                // The server may already have closed its side; the read above will tell.
                let _ = stream.write_all(&[*next.next().expect("cycle")]).await;
            }
        }
    }
    None
}

/// Reads until the server closes the connection; `None` if it is still open after `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    timeout(limit, read_all).await.ok()?;
    Some(received)
}

/// An HTTP/1.1 response read off a raw socket: its status and its body as JSON.
fn parse_response(raw: &[u8]) -> (u16, Value) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head: {text}"));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// `n` TCP connections that never send anything.
async fn idle_sockets(url: &str, n: usize) -> Vec<TcpStream> {
    let connects = (0..n).map(|_| TcpStream::connect(addr(url).to_owned()));
    let sockets = futures::future::join_all(connects).await;
    sockets.into_iter().map(|s| s.expect("connecting an idle socket")).collect()
}

fn call_start_head(server: &Server, content_length: usize) -> Vec<u8> {
    format!(
        "POST /call/start HTTP/1.1\r\nHost: heddle\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n",
        common::basic(&server.admin_key)
    )
    .into_bytes()
}

#[tokio::test]
async fn slow_and_silent_headers_are_cut_off() {
    let server = Server::start_with(&["--http-header-timeout-secs", "1"]);
    // Slowloris: a request head trickled in a byte at a time, never finished.
    let mut slow = TcpStream::connect(addr(&server.url)).await.unwrap();
    let head = b"GET /health HTTP/1.1\r\nHost: heddle\r\nX-Slow: ";
    let closed = trickle(&mut slow, head, b"a", CLOSE_WITHIN).await;
    assert!(closed.is_some(), "a trickled request head held its connection open");
    // A client that connects and says nothing at all.
    let mut silent = TcpStream::connect(addr(&server.url)).await.unwrap();
    let closed = closed_within(&mut silent, CLOSE_WITHIN).await;
    assert_eq!(closed.as_deref(), Some(&b""[..]), "a silent connection was kept");
    // A kept-alive connection waiting for its next request is held no longer either.
    let mut kept = TcpStream::connect(addr(&server.url)).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: heddle\r\n\r\n").await.unwrap();
    let answered = closed_within(&mut kept, CLOSE_WITHIN).await.expect("closed after a while");
    assert_eq!(parse_response(&answered).1, json!({"status": "ok"}));
    assert_eq!(server.admin().get("/health").await.ok()["status"], "ok");
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_gets_408() {
    let server = Server::start_with(&["--http-body-timeout-secs", "1"]);
    // 2,000 bytes announced, one sent every 100 ms: each gap is short, the whole is too slow.
    let mut slow = TcpStream::connect(addr(&server.url)).await.unwrap();
    let answer = trickle(&mut slow, &call_start_head(&server, 2000), b" ", CLOSE_WITHIN)
        .await
        .expect("the server gave up on the body");
    let (status, body) = parse_response(&answer);
    assert_eq!(status, 408, "{}", String::from_utf8_lossy(&answer));
    assert!(body["reason"].as_str().is_some_and(|r| r.contains("body")), "{body}");
    assert_eq!(server.admin().get("/health").await.ok()["status"], "ok");
}

#[tokio::test]
async fn idle_connections_close_but_requests_in_progress_do_not() {
    let server = Server::start_with(&[
        "--http-idle-timeout-secs",
        "1",
        "--http-header-timeout-secs",
        "30",
        "--http-body-timeout-secs",
        "30",
    ]);
    // After its response, a kept-alive connection is closed by the idle timeout, long before
    // the header timeout would.
    let mut kept = TcpStream::connect(addr(&server.url)).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: heddle\r\n\r\n").await.unwrap();
    let answered =
        closed_within(&mut kept, CLOSE_WITHIN).await.expect("the idle timeout closed it");
    assert_eq!(parse_response(&answered).0, 200);

    // A request whose body takes longer than the idle timeout (but within the body timeout)
    // is in progress, not idle: it is answered.
    let id = uid();
    let body = serde_json::to_vec(&json!({ "start": started(P, &id, json!({})) })).unwrap();
    let mut slow = TcpStream::connect(addr(&server.url)).await.unwrap();
    slow.write_all(&call_start_head(&server, body.len())).await.unwrap();
    let pieces = body.chunks(body.len().div_ceil(5));
    for piece in pieces {
        sleep(Duration::from_millis(500)).await;
        slow.write_all(piece).await.expect("the connection stays open while the body arrives");
    }
    let answered = closed_within(&mut slow, CLOSE_WITHIN).await.expect("closed once idle");
    let (status, answer) = parse_response(&answered);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], id);
    server.wait_visible().await;
    assert_eq!(server.admin().read_call(P, &id).await["id"], id);
}

#[tokio::test]
async fn idle_sockets_beyond_the_cap_do_not_lock_clients_out() {
    raise_own_open_files_limit();
    let server = Server::start_with(&[
        "--http-max-connections",
        "64",
        "--http-header-timeout-secs",
        "30",
        "--http-idle-timeout-secs",
        "30",
    ]);
    let _idle = idle_sockets(&server.url, 1100).await;
    let api = server.admin();
    assert_eq!(api.get("/health").await.ok()["status"], "ok");
    let id = uid();
    assert_eq!(api.call_start(started(P, &id, json!({}))).await["id"], id);
    assert_eq!(api.read_call(P, &id).await["id"], id);

    // Many clients at once, each on its own connections, while the idle sockets stay open.
    let ids: Vec<String> = (0..32).map(|_| uid()).collect();
    let clients = ids.iter().map(|id| {
        let api = server.admin();
        async move {
            assert_eq!(api.get("/health").await.ok()["status"], "ok");
            assert_eq!(api.call_start(started(P, id, json!({}))).await["id"], *id);
        }
    });
    futures::future::join_all(clients).await;
    for id in &ids {
        assert_eq!(api.read_call(P, id).await["id"], *id);
    }
}

/// With its defaults, a server started under a low soft open-files limit raises it to the
/// hard limit and its connection caps stay below it: over a thousand idle sockets do not make
/// it unreachable.
#[tokio::test]
async fn the_open_files_limit_is_raised_and_the_default_caps_fit_under_it() {
    raise_own_open_files_limit();
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
    let server = Server::start_with_open_files_limit(1024.min(hard), &[]);
    let limits = server.proc_limits();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("open files");
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[3], fields[4], "soft limit not raised to the hard one: {line}");

    let _idle = idle_sockets(&server.url, 1100).await;
    let api = server.admin();
    assert_eq!(api.get("/health").await.ok()["status"], "ok");
    let id = uid();
    assert_eq!(api.call_start(started(P, &id, json!({}))).await["id"], id);
    assert_eq!(api.read_call(P, &id).await["id"], id);
}

// ---- OTLP/gRPC ----

const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Sends messages as given bytes (the test's gzip bomb is not a message worth building).
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

async fn grpc(server: &Server) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(server.grpc_url.clone())
        .unwrap()
        .connect()
        .await
        .expect("connecting to OTLP/gRPC");
    tonic::client::Grpc::new(channel)
        .send_compressed(CompressionEncoding::Gzip)
        .max_encoding_message_size(usize::MAX)
}

/// Sends `message` (gzipped on the wire) to TraceService/Export.
async fn export_raw(
    server: &Server,
    message: Vec<u8>,
    key: Option<&str>,
) -> Result<Vec<u8>, tonic::Status> {
    let mut client = grpc(server).await;
    client.ready().await.expect("channel ready");
    let mut req = tonic::Request::new(message);
    if let Some(key) = key {
        req.metadata_mut().insert("authorization", common::basic(key).parse().unwrap());
        req.metadata_mut().insert("project_id", P.parse().unwrap());
    }
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT);
    client.unary(req, path, RawCodec).await.map(tonic::Response::into_inner)
}

/// 15 MB of empty `resource_spans` (field 1, length 0): about 15 KB gzipped, and millions of
/// structs once decoded.
fn empty_resource_spans(bytes: usize) -> Vec<u8> {
    [0x0a, 0x00].repeat(bytes / 2)
}

/// A valid export with one span, as bytes.
fn one_span_export() -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let span = Span {
        trace_id: uuid::Uuid::new_v4().as_bytes().to_vec(),
        span_id: uuid::Uuid::new_v4().as_bytes()[..8].to_vec(),
        name: "edge_op".into(),
        start_time_unix_nano: 1_772_366_400_000_000_000,
        end_time_unix_nano: 1_772_366_401_000_000_000,
        ..Default::default()
    };
    let scope = ScopeSpans { spans: vec![span], ..Default::default() };
    let resource = ResourceSpans { scope_spans: vec![scope], ..Default::default() };
    ExportTraceServiceRequest { resource_spans: vec![resource] }.encode_to_vec()
}

/// Peak resident memory growth of the server, in MiB, while `f` runs.
async fn peak_growth_mib<T>(server: &Server, f: impl Future<Output = T>) -> (T, u64) {
    let before = server.memory_kib("VmHWM");
    let out = f.await;
    (out, server.memory_kib("VmHWM").saturating_sub(before) / 1024)
}

#[tokio::test]
async fn grpc_refuses_a_bomb_without_a_key_before_reading_it() {
    let bomb = empty_resource_spans(15 * 1024 * 1024);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&bomb).unwrap();
    assert!(gz.finish().unwrap().len() < 200_000, "the bomb is small on the wire");

    // Within the default message limit: decoding it would take gigabytes.
    let server = Server::start();
    let (res, grown) = peak_growth_mib(&server, export_raw(&server, bomb.clone(), None)).await;
    assert_eq!(res.unwrap_err().code(), tonic::Code::Unauthenticated);
    assert!(grown < 40, "the server grew by {grown} MiB for an unauthenticated request");
    let (res, _) = peak_growth_mib(&server, export_raw(&server, bomb.clone(), Some("nope"))).await;
    assert_eq!(res.unwrap_err().code(), tonic::Code::Unauthenticated);

    // Beyond the message limit: without a key still UNAUTHENTICATED (authentication comes
    // first); with one, refused as too large while decompressing, without ballooning.
    let server = Server::start_with(&["--otlp-grpc-max-message-bytes", "4000000"]);
    let res = export_raw(&server, bomb.clone(), None).await;
    assert_eq!(res.unwrap_err().code(), tonic::Code::Unauthenticated);
    let key = server.admin_key.clone();
    let (res, grown) = peak_growth_mib(&server, export_raw(&server, bomb, Some(&key))).await;
    let code = res.unwrap_err().code();
    assert!(
        matches!(code, tonic::Code::OutOfRange | tonic::Code::ResourceExhausted),
        "a too-large message got {code:?}"
    );
    assert!(grown < 40, "the server grew by {grown} MiB for a message over its limit");
    // And a real export still works.
    export_raw(&server, one_span_export(), Some(&key)).await.expect("a valid export");
}

#[tokio::test]
async fn grpc_silent_idle_and_stalled_connections_are_bounded() {
    raise_own_open_files_limit();
    let server = Server::start_with(&[
        "--otlp-grpc-max-connections",
        "16",
        "--otlp-grpc-header-timeout-secs",
        "1",
        "--otlp-grpc-idle-timeout-secs",
        "1",
        "--otlp-grpc-timeout-secs",
        "1",
    ]);
    let key = server.admin_key.clone();
    // A silent socket, and one that sends only the HTTP/2 preface, are closed.
    let mut silent = TcpStream::connect(addr(&server.grpc_url)).await.unwrap();
    let mut preface = TcpStream::connect(addr(&server.grpc_url)).await.unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    assert!(closed_within(&mut silent, CLOSE_WITHIN).await.is_some(), "silent socket kept");
    assert!(closed_within(&mut preface, CLOSE_WITHIN).await.is_some(), "preface-only kept");

    // Far more silent sockets than the cap do not keep exporters out.
    let _idle = idle_sockets(&server.grpc_url, 200).await;
    let exports = (0..8).map(|_| export_raw(&server, one_span_export(), Some(&key)));
    for res in futures::future::join_all(exports).await {
        res.expect("an export while idle sockets are held");
    }

    // A request whose message never arrives ends with DEADLINE_EXCEEDED.
    let mut client = grpc(&server).await;
    client.ready().await.unwrap();
    let mut req = tonic::Request::new(futures::stream::pending::<Vec<u8>>());
    req.metadata_mut().insert("authorization", common::basic(&key).parse().unwrap());
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT);
    let stalled = timeout(CLOSE_WITHIN, client.client_streaming(req, path, RawCodec)).await;
    let status = stalled.expect("the stalled export was ended").unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
}
