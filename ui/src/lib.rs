//! heddle's web UI: server-rendered pages behind the links the SDKs print (`/{entity}/{project}
//! /weave`, `/{entity}/{project}/r/call/{id}`, ...), read straight from the store through the
//! same `Store` methods and request types as the API. The URL space, sessions and the bounds
//! that keep pages fast on large projects are in docs/ui.md.

use std::sync::Arc;

use axum::Router;
use axum::http::HeaderValue;
use axum::response::Response;
use axum::routing::{get, post};
use heddle_api::AppState;

mod assets;
mod charts;
mod error;
mod fmt;
mod json_view;
mod layout;
mod pages;
pub mod session;
mod viewer;

pub use error::UiError;
pub use session::Secret;

/// How the UI is set up in this process.
#[derive(Debug, Clone)]
pub struct UiConfig {
    /// Signs and encrypts session cookies; query replicas must share it.
    pub secret: Secret,
    /// Mark cookies `Secure` even when the request did not arrive over TLS (behind a proxy that
    /// does not say `X-Forwarded-Proto: https`).
    pub secure_cookies: bool,
}

/// The UI's routes. They sit beside the API's without sharing a path with any of them: every
/// page lives under `/{entity}/{project}/weave`, `/{entity}/{project}/r/`, `/signin`,
/// `/signout`, `/static/` or is `/` (docs/ui.md, "URL space").
pub fn routes(config: UiConfig) -> Router<Arc<AppState>> {
    use pages::*;
    Router::new()
        .route("/", get(projects::page))
        .route("/signin", get(signin::form).post(signin::submit))
        .route("/signout", post(signin::signout))
        .route("/static/{file}", get(assets::serve))
        .route("/{entity}/{project}/weave", get(overview::page))
        .route("/{entity}/{project}/weave/calls", get(calls::page))
        .route("/{entity}/{project}/r/call/{id}", get(trace::page))
        .route("/{entity}/{project}/r/call/{id}/feedback", post(trace::add_feedback))
        .route("/{entity}/{project}/r/call/{id}/feedback/delete", post(trace::delete_feedback))
        .route("/{entity}/{project}/weave/ops", get(objects::ops_list))
        .route("/{entity}/{project}/weave/ops/{name}/versions/{digest}", get(objects::op_version))
        .route("/{entity}/{project}/weave/objects", get(objects::objects_list))
        .route(
            "/{entity}/{project}/weave/objects/{name}/versions/{digest}",
            get(objects::object_version),
        )
        .route("/{entity}/{project}/weave/evaluations", get(evaluations::list))
        .route("/{entity}/{project}/weave/evaluations/compare", get(evaluations::compare))
        .route("/{entity}/{project}/weave/evaluations/{id}", get(evaluations::detail))
        .route("/{entity}/{project}/weave/threads", get(threads::list))
        .route("/{entity}/{project}/weave/threads/{id}", get(threads::detail))
        .layer(axum::Extension(Arc::new(config)))
        .layer(axum::middleware::map_response(page_headers))
}

/// Headers every UI answer carries: pages hold a user's data, so they are not cached, framed
/// by other sites, or allowed to load anything but this server's own assets.
async fn page_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, k: &'static str, v: &'static str| {
        h.entry(k).or_insert(HeaderValue::from_static(v));
    };
    set(h, "cache-control", "no-store");
    set(h, "x-frame-options", "DENY");
    set(h, "x-content-type-options", "nosniff");
    set(h, "referrer-policy", "same-origin");
    set(
        h,
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    resp
}
