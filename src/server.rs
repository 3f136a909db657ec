//! Composes the roles' routes into one service with the cross-cutting layers: body limit,
//! auth-free `/health`, JSON 404/405 answers, and panic containment.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use heddle_api::{ApiError, AppState};
use heddle_query::GeoIp;
use heddle_store::Store;
use tower_http::catch_panic::CatchPanicLayer;

pub fn app(
    store: Arc<dyn Store>,
    admin_key: Option<&str>,
    max_body_bytes: usize,
    geoip: GeoIp,
) -> Router {
    let state = AppState::new(store, admin_key, max_body_bytes);
    Router::new()
        .merge(heddle_query::public_routes())
        .merge(heddle_query::routes())
        .merge(heddle_ingest::routes())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                axum::Json(serde_json::json!({"reason": "method not allowed"})),
            )
        })
        .layer(Extension(geoip))
        // Bodies are limited (and oversized ones drained) by heddle_api::extract instead.
        .layer(DefaultBodyLimit::disable())
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state)
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

async fn shutdown_signal() {
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
