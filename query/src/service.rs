//! Service information (CONTRACT §4).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use heddle_api::{AppState, Principal};
use serde_json::{Value, json};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn public_routes() -> Router<Arc<AppState>> {
    Router::new().route("/health", get(|| async { axum::Json(json!({"status": "ok"})) }))
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/version", get(version))
        .route("/server_info", get(server_info))
        .route("/geolocate", get(geolocate))
}

async fn version(_: Principal) -> axum::Json<Value> {
    axum::Json(json!(VERSION))
}

async fn server_info(_: Principal) -> axum::Json<Value> {
    axum::Json(json!({
        // Any client at least this new may trace; a higher value disables older SDKs.
        "min_required_weave_python_version": "0.0.1",
        "trace_server_version": VERSION,
    }))
}

/// The caller's address. heddle ships no GeoIP database and fetches nothing from outside, so
/// there is no location to add.
async fn geolocate(_: Principal, ConnectInfo(addr): ConnectInfo<SocketAddr>) -> axum::Json<Value> {
    axum::Json(json!({"ip": addr.ip().to_string()}))
}
