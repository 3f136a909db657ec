//! The UI's own CSS and JavaScript, compiled into the binary.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../assets/heddle.css");
const JS: &str = include_str!("../assets/heddle.js");

/// The URL of an asset; the version in the query string makes a new release's assets bypass
/// caches.
pub fn url(file: &str) -> String {
    format!("/static/{file}?v={}", env!("CARGO_PKG_VERSION"))
}

pub async fn serve(Path(file): Path<String>) -> Response {
    let (body, mime) = match file.as_str() {
        "heddle.css" => (CSS, "text/css; charset=utf-8"),
        "heddle.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    ([(header::CONTENT_TYPE, mime), (header::CACHE_CONTROL, "public, max-age=3600")], body)
        .into_response()
}
