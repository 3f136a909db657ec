//! Who is looking at a page: the signed-in session, checked on every request. A page reached
//! without a session answers with a redirect to `/signin?next=<the page>`.

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use heddle_api::{ApiError, AppState, Principal};
use heddle_proto::ProjectId;

use crate::fmt::enc;
use crate::layout::Chrome;
use crate::session;
use crate::{UiConfig, UiError};

pub struct Viewer {
    pub principal: Principal,
    /// The session's CSRF token, for forms.
    pub csrf: String,
    pub config: Arc<UiConfig>,
}

impl Viewer {
    /// The project `entity/project` if this viewer may see it: 403 otherwise, and 404 for a
    /// name that is not a project id.
    pub fn project(&self, entity: &str, project: &str) -> Result<ProjectId, UiError> {
        let id = ProjectId::from_parts(entity, project)
            .map_err(|e| UiError::NotFound(format!("no such project: {e}")))?;
        if !self.principal.may_use_entity(id.entity()) {
            return Err(UiError::Forbidden(format!(
                "the API key you signed in with may not see project {id}"
            )));
        }
        Ok(id)
    }

    pub fn chrome(&self) -> Chrome<'_> {
        let who = match &self.principal {
            Principal::Admin => "admin key",
            Principal::Entity(e) => e.as_str(),
        };
        Chrome { csrf: &self.csrf, who }
    }

    /// Checks a state-changing form: its CSRF token must be this session's, and a browser's
    /// `Origin` (sent with every POST by current browsers) must be this server.
    pub fn check_form(&self, headers: &HeaderMap, token: &str) -> Result<(), UiError> {
        if !same_origin(headers) {
            return Err(UiError::Forbidden("the form was sent from another site".into()));
        }
        let (a, b) = (token.as_bytes(), self.csrf.as_bytes());
        let equal =
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
        if !equal {
            return Err(UiError::Forbidden(
                "the form has expired or was not sent from this site; reload the page".into(),
            ));
        }
        Ok(())
    }
}

/// Whether a request's `Origin` (when it has one) is the host it was sent to.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let Ok(origin) = origin.to_str() else { return false };
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let host_of_origin = origin.split_once("://").map(|(_, rest)| rest);
    host_of_origin == Some(host)
}

/// Whether cookies set for this request must be `Secure`: configured so, or the request came
/// over TLS (heddle itself serves plain HTTP; a TLS proxy says so in `X-Forwarded-Proto`).
pub fn secure(config: &UiConfig, headers: &HeaderMap) -> bool {
    config.secure_cookies
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// `next` if it is a path on this server (`/...` but not `//host` or `/\host`), else `/`.
pub fn local_path(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.starts_with("/\\")
                && !n.chars().any(|c| c.is_control()) =>
        {
            n.to_owned()
        }
        _ => "/".to_owned(),
    }
}

fn to_signin(parts: &Parts, clear: Option<bool>) -> Response {
    let next = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let target = format!("/signin?next={}", enc(next));
    let mut resp = Redirect::to(&target).into_response();
    if let Some(secure) = clear {
        let cookie = session::clear_cookie(secure);
        resp.headers_mut().insert(header::SET_COOKIE, cookie.parse().expect("ASCII cookie"));
    }
    resp
}

impl FromRequestParts<Arc<AppState>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let config = parts
            .extensions
            .get::<Arc<UiConfig>>()
            .cloned()
            .expect("the UI routes carry their config");
        let Some(cookie) = session::cookie_value(&parts.headers) else {
            return Err(to_signin(parts, None));
        };
        let Some(s) = config.secret.open(cookie, SystemTime::now()) else {
            return Err(to_signin(parts, Some(secure(&config, &parts.headers))));
        };
        match state.auth.authenticate_hash(&s.key_hash).await {
            Ok(principal) => Ok(Viewer { principal, csrf: s.csrf, config }),
            // Revoked since signing in: the session is over.
            Err(ApiError::Unauthorized(_)) => {
                Err(to_signin(parts, Some(secure(&config, &parts.headers))))
            }
            Err(e) => Err(UiError::from(e).into_response()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed() {
        assert_eq!(local_path(Some("/acme/demo/weave?x=1")), "/acme/demo/weave?x=1");
        for bad in ["//evil.example/x", "/\\evil.example", "https://evil.example", "x", "/a\nb"] {
            assert_eq!(local_path(Some(bad)), "/", "{bad}");
        }
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn origins() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:6345".parse().unwrap());
        assert!(same_origin(&h), "no Origin: the CSRF token decides");
        h.insert(header::ORIGIN, "http://127.0.0.1:6345".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!same_origin(&h));
        h.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(!same_origin(&h));
    }
}
