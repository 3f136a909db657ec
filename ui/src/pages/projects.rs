//! `/`: the projects this key may see.

use std::sync::Arc;

use axum::extract::State;
use heddle_api::AppState;
use maud::{Markup, html};

use crate::viewer::Viewer;
use crate::{UiError, layout};

pub async fn page(State(_state): State<Arc<AppState>>, viewer: Viewer) -> Result<Markup, UiError> {
    let body = html! {
        h1 { "Projects" }
    };
    Ok(layout::plain_page(&viewer.chrome(), "Projects", body))
}
