//! Composes the roles' routes into one service with the cross-cutting layers: body limit,
//! auth-free `/health`, JSON 404/405 answers, and panic containment.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use heddle_api::{ApiError, AppState, CallSink, Principal};
use heddle_ingest::metrics::Metrics;
use heddle_ingest::otlp::OtlpIngest;
use heddle_query::GeoIp;
use heddle_store::Store;
use tower_http::catch_panic::CatchPanicLayer;

/// Which route sets a process serves.
#[derive(Clone)]
pub struct Roles {
    pub ingest: bool,
    pub query: bool,
    /// Serve these pipeline metrics at `/metrics` (API key required, like every endpoint).
    pub metrics: Option<Arc<Metrics>>,
}

impl Roles {
    pub const ALL: Roles = Roles { ingest: true, query: true, metrics: None };
    pub const INGEST: Roles = Roles { ingest: true, query: false, metrics: None };
    pub const QUERY: Roles = Roles { ingest: false, query: true, metrics: None };
    pub const NONE: Roles = Roles { ingest: false, query: false, metrics: None };
}

pub fn app(
    store: Arc<dyn Store>,
    calls: Option<Arc<dyn CallSink>>,
    admin_key: Option<&str>,
    max_body_bytes: usize,
    geoip: GeoIp,
    roles: Roles,
) -> (Router, Option<Arc<OtlpIngest>>) {
    let state = AppState::new(store, calls, admin_key, max_body_bytes);
    let otlp = roles.ingest.then(|| OtlpIngest::new(state.clone()));
    let mut router = Router::new().merge(heddle_query::public_routes());
    if roles.query {
        router = router.merge(heddle_query::routes());
    }
    if roles.ingest {
        router = router.merge(heddle_ingest::routes());
    }
    if let Some(otlp) = &otlp {
        router = router.merge(heddle_ingest::otlp::routes(otlp.clone()));
    }
    if let Some(metrics) = roles.metrics {
        let render = move |_: Principal| {
            let text = metrics.render();
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
        // Bodies are limited (and oversized ones drained) by heddle_api::extract instead.
        .layer(DefaultBodyLimit::disable())
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state);
    (router, otlp)
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    ApiError::Internal("internal error while handling the request".into()).into_response()
}

pub async fn run(listener: tokio::net::TcpListener, app: Router) -> anyhow::Result<()> {
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
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
