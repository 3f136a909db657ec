//! The query role: every endpoint that reads, plus the low-volume writes whose answer must
//! reflect them immediately (call update/delete, objects, files, tables).

use std::sync::Arc;

use axum::Router;
use heddle_api::AppState;

mod calls;
mod costs;
mod expand;
mod feedback;
mod files;
mod graphql;
mod objects;
mod otel_logs;
mod refs;
mod service;
mod tables;
mod threads;

pub use service::GeoIp;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .merge(service::routes())
        .merge(graphql::routes())
        .merge(calls::routes())
        .merge(feedback::routes())
        .merge(objects::routes())
        .merge(files::routes())
        .merge(tables::routes())
        .merge(refs::routes())
        .merge(costs::routes())
        .merge(threads::routes())
        .merge(otel_logs::routes())
}

/// Routes that need no API key.
pub fn public_routes() -> Router<Arc<AppState>> {
    service::public_routes()
}
