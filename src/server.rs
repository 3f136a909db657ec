//! Composes the roles' routes into one service with the cross-cutting layers: body limit,
//! auth-free `/health`, JSON 404/405 answers, and panic containment; and serves it, and
//! OTLP/gRPC, with the network limits of `src/net` (`docs/limits.md`, "Network limits").

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::http::{Request, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use heddle_api::{ApiError, AppState, BodyLimits, Principal};
use heddle_ingest::otlp::OtlpIngest;
use heddle_pipeline::Sink;
use heddle_pipeline::metrics::Metrics;
use heddle_query::GeoIp;
use heddle_store::Store;
use hyper::body::Incoming;
use tower::ServiceExt;
use tower::limit::ConcurrencyLimit;
use tower_http::catch_panic::CatchPanicLayer;

use crate::net::{self, ConnLimits};

/// Which route sets a process serves.
#[derive(Clone)]
pub struct Roles {
    pub ingest: bool,
    pub query: bool,
    /// Serve these pipeline metrics at `/metrics` (API key required, like every endpoint).
    pub metrics: Option<Arc<Metrics>>,
    /// Serve the web UI (with the query role) with this configuration.
    pub ui: Option<heddle_ui::UiConfig>,
}

// The ingest and consumer roles exist only with Kafka.
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
impl Roles {
    pub const ALL: Roles = Roles { ingest: true, query: true, metrics: None, ui: None };
    pub const INGEST: Roles = Roles { ingest: true, query: false, metrics: None, ui: None };
    pub const QUERY: Roles = Roles { ingest: false, query: true, metrics: None, ui: None };
    pub const NONE: Roles = Roles { ingest: false, query: false, metrics: None, ui: None };
}

pub fn app(
    store: Arc<dyn Store>,
    sink: Option<Arc<dyn Sink>>,
    admin_key: Option<&str>,
    limits: BodyLimits,
    geoip: GeoIp,
    roles: Roles,
) -> (Router, Option<Arc<OtlpIngest>>) {
    let state = AppState::new(store, sink, admin_key, limits);
    let otlp = roles.ingest.then(|| OtlpIngest::new(state.clone()));
    let mut router = Router::new().merge(heddle_query::public_routes());
    if roles.query {
        router = router.merge(heddle_query::routes());
        if let Some(ui) = roles.ui {
            router = router.merge(heddle_ui::routes(ui));
        }
    }
    if roles.ingest {
        router = router.merge(heddle_ingest::routes());
    }
    if let Some(otlp) = &otlp {
        router = router.merge(heddle_ingest::otlp::routes(otlp.clone()));
    }
    if roles.metrics.is_some() || roles.ingest {
        // The pipeline's metrics (Kafka roles) and ingest's own (sampling).
        let (pipeline, ingest) = (roles.metrics, roles.ingest);
        let render = move |State(state): State<Arc<AppState>>, _: Principal| {
            let mut text = pipeline.as_ref().map(|m| m.render()).unwrap_or_default();
            if ingest {
                text.push_str(&state.ingest_metrics.render());
            }
            async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        };
        router = router.route("/metrics", get(render));
    }
    let router = router
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async {
            let body = serde_json::json!({"reason": "method not allowed"});
            (StatusCode::METHOD_NOT_ALLOWED, axum::Json(body))
        })
        .layer(Extension(geoip))
        // A decoded body's share of the memory budget is held until its handler has answered.
        .layer(axum::middleware::from_fn(heddle_api::budget::hold_admissions))
        // Bodies are limited (and oversized ones drained) by heddle_api::extract instead.
        .layer(DefaultBodyLimit::disable())
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state);
    (router, otlp)
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal("internal error while handling the request".into()).into_response()
}

/// The HTTP port's network limits (`docs/limits.md`, "Network limits").
#[derive(Debug, Clone)]
pub struct HttpLimits {
    pub conn: ConnLimits,
    /// A request's body must have arrived in full this long after its headers (408 otherwise).
    pub body_timeout: Duration,
}

impl HttpLimits {
    /// The defaults (as `heddle serve`'s flags), for the `consume` role's small server.
    pub fn defaults() -> HttpLimits {
        HttpLimits {
            conn: ConnLimits {
                max_connections: net::default_max_connections(4096, 0.5),
                header_timeout: Duration::from_secs(30),
                idle_timeout: Duration::from_secs(60),
                http2_only: false,
                max_concurrent_streams: 200,
                keepalive_interval: None,
                keepalive_timeout: Duration::from_secs(20),
            },
            body_timeout: Duration::from_secs(60),
        }
    }
}

/// Serves the HTTP API on `listener` until a shutdown signal.
pub async fn run(listener: tokio::net::TcpListener, app: Router, limits: HttpLimits) {
    let app = app.layer(axum::middleware::from_fn_with_state(
        limits.body_timeout,
        net::body_deadline::enforce,
    ));
    net::serve(listener, move || app.clone(), limits.conn, shutdown_signal()).await;
}

/// The OTLP/gRPC port's network limits (`docs/limits.md`, "Network limits").
#[derive(Debug, Clone)]
pub struct GrpcLimits {
    pub conn: ConnLimits,
    /// A whole export (receiving, decoding and storing it) must finish within this.
    pub request_timeout: Duration,
    /// Exports one connection may have in progress at once; more wait for their turn.
    pub concurrency_per_connection: usize,
}

/// Serves OTLP/gRPC (`routes`, see `OtlpIngest::grpc_service`) on `listener` until a shutdown
/// signal. An export past its timeout fails with DEADLINE_EXCEEDED.
pub async fn run_grpc(
    listener: tokio::net::TcpListener,
    routes: tonic::service::Routes,
    limits: GrpcLimits,
) {
    let timeout = limits.request_timeout;
    let per_connection = move || {
        let limited = ConcurrencyLimit::new(routes.clone(), limits.concurrency_per_connection);
        tower::service_fn(move |req: Request<Incoming>| {
            let call = limited.clone().oneshot(req);
            async move {
                let Ok(response) = tokio::time::timeout(timeout, call).await else {
                    let msg =
                        format!("the export did not finish within {} s", timeout.as_secs_f64());
                    return Ok(tonic::Status::deadline_exceeded(msg).into_http());
                };
                response
            }
        })
    };
    net::serve(listener, per_connection, limits.conn, shutdown_signal()).await;
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}
