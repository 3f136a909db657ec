//! Signing in with an API key, and out. The key is posted in a form body (never in a URL),
//! checked like an API request's key, and exchanged for a session cookie (docs/ui.md,
//! "Sessions").

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use heddle_api::auth::hash_key;
use heddle_api::{ApiError, AppState};
use maud::{Markup, html};
use serde::Deserialize;

use crate::viewer::{Viewer, local_path, same_origin, secure};
use crate::{UiConfig, UiError, layout, session};

#[derive(Deserialize)]
pub struct Next {
    next: Option<String>,
}

fn form_page(next: &str, error: Option<&str>) -> Markup {
    layout::bare(
        "Sign in",
        html! {
            main.narrow #main {
                h1 { "Sign in" }
                p { "Paste an API key: the admin key " code { "heddle serve" } " printed, or a key from "
                    code { "heddle keys create --entity <entity>" } "." }
                @if let Some(e) = error {
                    p.error-message role="alert" { (e) }
                }
                form.signin method="post" action="/signin" autocomplete="off" {
                    input type="hidden" name="next" value=(next);
                    label for="key" { "API key" }
                    input #key type="password" name="key" required autofocus
                        autocomplete="off" spellcheck="false";
                    button type="submit" { "Sign in" }
                }
            }
        },
    )
}

pub async fn form(Query(q): Query<Next>) -> Markup {
    form_page(&local_path(q.next.as_deref()), None)
}

#[derive(Deserialize)]
pub struct SigninForm {
    key: String,
    next: Option<String>,
}

pub async fn submit(
    State(state): State<Arc<AppState>>,
    Extension(config): Extension<Arc<UiConfig>>,
    headers: HeaderMap,
    Form(f): Form<SigninForm>,
) -> Result<Response, UiError> {
    // Signing in from another site's form would sign the browser in as someone else.
    if !same_origin(&headers) {
        return Err(UiError::Forbidden("the form was sent from another site".into()));
    }
    let next = local_path(f.next.as_deref());
    let hash = hash_key(f.key.trim());
    match state.auth.authenticate_hash(&hash).await {
        Ok(_) => {}
        Err(ApiError::Unauthorized(_)) => {
            let page = form_page(&next, Some("That key is not valid (or was revoked)."));
            return Ok((StatusCode::UNAUTHORIZED, page).into_response());
        }
        Err(e) => return Err(e.into()),
    }
    let value = config
        .secret
        .issue(&hash, SystemTime::now())
        .ok_or_else(|| UiError::Internal("a key hash is 32 bytes of hex".into()))?;
    let cookie = session::set_cookie(&value, secure(&config, &headers));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(&next)).into_response())
}

#[derive(Deserialize)]
pub struct CsrfForm {
    csrf: String,
}

pub async fn signout(
    viewer: Viewer,
    headers: HeaderMap,
    Form(f): Form<CsrfForm>,
) -> Result<Response, UiError> {
    viewer.check_form(&headers, &f.csrf)?;
    let cookie = session::clear_cookie(secure(&viewer.config, &headers));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/signin")).into_response())
}
