//! `/`: the projects the signed-in key may see (its entity's, or all for an admin key), with
//! their call counts and last activity, from the store's project list.

use std::sync::Arc;

use axum::extract::State;
use heddle_api::{AppState, Principal};
use maud::{Markup, html};

use crate::UiError;
use crate::fmt;
use crate::layout::{self, project_base};
use crate::viewer::Viewer;

/// Projects listed at most.
pub const MAX_PROJECTS: u64 = 500;

pub async fn page(State(state): State<Arc<AppState>>, viewer: Viewer) -> Result<Markup, UiError> {
    let entity = match &viewer.principal {
        Principal::Admin => None,
        Principal::Entity(e) => Some(e.as_str()),
    };
    let projects = state.store.list_projects(entity, MAX_PROJECTS).await?;
    let body = html! {
        h1 { "Projects" }
        @if projects.is_empty() {
            p.empty { "No project has calls yet. " code { "weave.init(\"<entity>/<project>\")" } " and a traced call make one." }
        } @else {
            div.table-wrap { table.projects {
                thead { tr {
                    th scope="col" { "Project" } th scope="col" class="num" { "Calls" }
                    th scope="col" { "Last call (UTC)" }
                } }
                tbody { @for p in &projects { tr {
                    td { a href=(project_base(&p.project)) { (p.project.as_str()) } }
                    td.num { (fmt::int(p.calls)) }
                    td { time datetime=(fmt::iso(p.last_call)) { (fmt::time(p.last_call)) } }
                } } }
            } }
            @if projects.len() as u64 == MAX_PROJECTS { p.muted { "The " (MAX_PROJECTS) " most recently active projects." } }
        }
    };
    Ok(layout::plain_page(&viewer.chrome(), "Projects", body))
}
