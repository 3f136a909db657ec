//! The query role: every endpoint that reads, plus the low-volume writes whose answer must
//! reflect them immediately (call update/delete, objects and their tags and aliases, files,
//! tables, annotation queues).

use std::sync::Arc;

use axum::Router;
use heddle_api::AppState;

mod agents;
mod annotation_queues;
mod calls;
mod costs;
mod expand;
mod feedback;
mod feedback_stats;
mod files;
mod graphql;
mod jsonl;
mod objects;
mod otel_logs;
mod project_settings;
mod projects;
mod refs;
mod service;
mod tables;
mod tags;
mod threads;
mod unsupported;
mod usage;

pub use service::GeoIp;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .merge(service::routes())
        .merge(graphql::routes())
        .merge(calls::routes())
        .merge(feedback::routes())
        .merge(objects::routes())
        .merge(tags::routes())
        .merge(annotation_queues::routes())
        .merge(files::routes())
        .merge(tables::routes())
        .merge(refs::routes())
        .merge(costs::routes())
        .merge(threads::routes())
        .merge(agents::routes())
        .merge(unsupported::routes())
        .merge(usage::routes())
        .merge(feedback_stats::routes())
        .merge(projects::routes())
        .merge(project_settings::routes())
        .merge(otel_logs::routes())
}

/// Routes that need no API key.
pub fn public_routes() -> Router<Arc<AppState>> {
    service::public_routes()
}
