//! Service information (docs/api/service.md).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::{Extension, Router};
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

/// An optional GeoIP database (MaxMind DB format, e.g. GeoLite2-City), read from local disk at
/// start. heddle never fetches one: without it `/geolocate` answers with the address alone.
#[derive(Clone, Default)]
pub struct GeoIp(Option<Arc<maxminddb::Reader<Vec<u8>>>>);

impl GeoIp {
    pub fn open(path: &std::path::Path) -> Result<GeoIp, maxminddb::MaxMindDbError> {
        Ok(GeoIp(Some(Arc::new(maxminddb::Reader::open_readfile(path)?))))
    }

    /// The database's city-level record for `ip`, if it has one.
    fn locate(&self, ip: std::net::IpAddr) -> Option<Value> {
        let reader = self.0.as_ref()?;
        let found = reader.lookup(ip).and_then(|r| r.decode::<maxminddb::geoip2::City>());
        match found {
            Ok(city) => city.and_then(|c| serde_json::to_value(c).ok()),
            Err(e) => {
                tracing::warn!(%ip, error = %e, "GeoIP lookup failed");
                None
            }
        }
    }
}

/// The caller's address, and its location when a GeoIP database is configured.
async fn geolocate(
    _: Principal,
    Extension(geo): Extension<GeoIp>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
) -> axum::Json<Value> {
    let ip = addr.ip().to_canonical();
    let mut body = json!({"ip": ip.to_string()});
    if let Some(location) = geo.locate(ip) {
        body["location"] = location;
    }
    axum::Json(body)
}
