//! Ops and objects with their versions: an op's code from its stored file, an object's value,
//! and a dataset's rows as a paged table (docs/ui.md, "Objects").

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use heddle_api::AppState;
use heddle_proto::ProjectId;
use heddle_proto::objects::{ObjQueryReq, ObjSchema, VersionSel};
use heddle_store::prelude::*;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::common;
use crate::UiError;
use crate::fmt::{self, enc};
use crate::json_view;
use crate::layout::{self, Tab, project_base};
use crate::viewer::Viewer;

/// Objects (latest versions) per list page, versions listed per object.
pub const LIST_PAGE: i64 = 100;
/// Dataset rows per page.
pub const ROWS_PAGE: u64 = 50;
/// Bytes of op code shown.
pub const MAX_CODE: usize = 200_000;

#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    #[serde(default)]
    offset: i64,
}

async fn latest(
    store: &dyn Store,
    project: &ProjectId,
    is_op: bool,
    offset: i64,
) -> Result<Vec<ObjSchema>, UiError> {
    let q = common::request::<ObjQueryReq>(json!({
        "project_id": project.as_str(),
        "filter": {"is_op": is_op, "latest_only": true},
        "sort_by": [{"field": "object_id", "direction": "asc"}],
        "limit": LIST_PAGE + 1,
        "offset": offset,
        "metadata_only": true,
    }))?;
    Ok(store.query_objects(q.validate()?).await?)
}

async fn versions(
    store: &dyn Store,
    project: &ProjectId,
    name: &str,
) -> Result<Vec<ObjSchema>, UiError> {
    let q = common::request::<ObjQueryReq>(json!({
        "project_id": project.as_str(),
        "filter": {"object_ids": [name]},
        "sort_by": [{"field": "created_at", "direction": "desc"}],
        "limit": LIST_PAGE,
        "metadata_only": true,
    }))?;
    Ok(store.query_objects(q.validate()?).await?)
}

fn list(
    project: &ProjectId,
    objs: &[ObjSchema],
    section: &str,
    offset: i64,
    is_op: bool,
) -> Markup {
    let base = project_base(project);
    let more = objs.len() as i64 > LIST_PAGE;
    html! {
        @if objs.is_empty() { p.empty { "None yet." } }
        @else {
            div.table-wrap { table.objects {
                thead { tr {
                    th scope="col" { "Name" }
                    @if !is_op { th scope="col" { "Class" } }
                    th scope="col" class="num" { "Versions" }
                    th scope="col" { "Last updated (UTC)" }
                    @if is_op { th scope="col" { "Calls" } }
                } }
                tbody {
                    @for o in objs.iter().take(LIST_PAGE as usize) {
                        tr {
                            td { a href={(base) "/" (section) "/" (enc(&o.object_id)) "/versions/" (enc(&o.digest))} { (o.object_id) } }
                            @if !is_op { td { (o.base_object_class.as_deref().or(o.leaf_object_class.as_deref()).unwrap_or("")) } }
                            td.num { (o.version_index + 1) }
                            td { time datetime=(fmt::iso(o.created_at)) { (fmt::time(o.created_at)) } }
                            @if is_op { td { a href={(base) "/calls" (fmt::query(&[("op", &o.object_id), ("all", "1")]))} { "calls" } } }
                        }
                    }
                }
            } }
        }
        (common::pager(
            (offset > 0).then(|| format!("{base}/{section}?offset={}", (offset - LIST_PAGE).max(0))),
            more.then(|| format!("{base}/{section}?offset={}", offset + LIST_PAGE)),
        ))
    }
}

pub async fn ops_list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project)): Path<(String, String)>,
    Query(p): Query<ListParams>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let offset = p.offset.max(0);
    let ops = latest(&*state.store, &project, true, offset).await?;
    let body = html! { h1 { "Ops" } (list(&project, &ops, "ops", offset, true)) };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Ops, "Ops", body))
}

pub async fn objects_list(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project)): Path<(String, String)>,
    Query(p): Query<ListParams>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let offset = p.offset.max(0);
    let objs = latest(&*state.store, &project, false, offset).await?;
    let body = html! { h1 { "Objects" } (list(&project, &objs, "objects", offset, false)) };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Objects, "Objects", body))
}

fn version_list(project: &ProjectId, section: &str, all: &[ObjSchema], current: &str) -> Markup {
    let base = project_base(project);
    html! {
        section.panel aria-labelledby="versions-h" {
            h2 #versions-h { "Versions" }
            ol.versions reversed {
                @for v in all {
                    li {
                        @let href = format!("{base}/{section}/{}/versions/{}", enc(&v.object_id), enc(&v.digest));
                        @if v.digest == current { strong { "v" (v.version_index) } }
                        @else { a href=(href) { "v" (v.version_index) } }
                        " " span.muted.small { code { (v.digest.get(..12).unwrap_or(&v.digest)) } " · " (fmt::time(v.created_at)) }
                    }
                }
            }
        }
    }
}

async fn read_version(
    store: &dyn Store,
    project: &ProjectId,
    name: &str,
    digest: &str,
) -> Result<(ObjSchema, Value), UiError> {
    let obj = store.read_object(project, name, &VersionSel::parse(digest), false).await?;
    let val =
        obj.val.as_ref().and_then(|v| serde_json::from_str(v.get()).ok()).unwrap_or(Value::Null);
    Ok((obj, val))
}

pub async fn op_version(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project, name, digest)): Path<(String, String, String, String)>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let store = &*state.store;
    let (obj, val) = read_version(store, &project, &name, &digest).await?;
    let all = versions(store, &project, &name).await?;
    // An op's code is a stored file: `files` maps file names to their digests.
    let mut files = Vec::new();
    if let Some(map) = val.get("files").and_then(Value::as_object) {
        for (file, d) in map.iter().take(10) {
            let Some(d) = d.as_str() else { continue };
            let code = match store.read_file(&project, d).await {
                Ok(bytes) => {
                    let text =
                        String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_CODE)]).into_owned();
                    Some(text)
                }
                Err(heddle_store::StoreError::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            };
            files.push((file.clone(), code));
        }
    }
    let base = project_base(&project);
    let body = html! {
        h1 { (obj.object_id) " " span.muted { "v" (obj.version_index) } }
        p { a href={(base) "/calls" (fmt::query(&[("op", &obj.object_id), ("all", "1")]))} { "Calls of this op" } }
        @for (file, code) in &files {
            section.panel aria-label={"File " (file)} {
                h2 { code { (file) } }
                @match code {
                    Some(c) => pre.code { code { (c) } },
                    None => p.muted { "The file is not stored." },
                }
            }
        }
        @if files.is_empty() {
            section.panel { h2 { "Value" } (json_view::tree(&val)) }
        }
        (version_list(&project, "ops", &all, &obj.digest))
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Ops, &obj.object_id, body))
}

#[derive(Debug, Default, Deserialize)]
pub struct RowParams {
    #[serde(default)]
    offset: u64,
}

pub async fn object_version(
    State(state): State<Arc<AppState>>,
    viewer: Viewer,
    Path((entity, project, name, digest)): Path<(String, String, String, String)>,
    Query(p): Query<RowParams>,
) -> Result<Markup, UiError> {
    let project = viewer.project(&entity, &project)?;
    let store = &*state.store;
    let (obj, val) = read_version(store, &project, &name, &digest).await?;
    let all = versions(store, &project, &name).await?;
    let table =
        match val.get("rows").and_then(Value::as_str).and_then(|r| table_digest(&project, r)) {
            Some(t) => Some(dataset_rows(store, &project, &t, p.offset).await?),
            None => None,
        };
    let here =
        format!("{}/objects/{}/versions/{}", project_base(&project), enc(&name), enc(&obj.digest));
    let body = html! {
        h1 { (obj.object_id) " " span.muted { "v" (obj.version_index) } }
        p.muted { (obj.base_object_class.as_deref().or(obj.leaf_object_class.as_deref()).unwrap_or(&obj.kind)) }
        @if let Some((count, rows)) = &table {
            section.panel aria-labelledby="rows-h" {
                h2 #rows-h { "Rows " span.muted { "(" (fmt::int(*count)) ")" } }
                (rows_table(rows))
                (common::pager(
                    (p.offset > 0).then(|| format!("{here}?offset={}", p.offset.saturating_sub(ROWS_PAGE))),
                    (p.offset + ROWS_PAGE < *count).then(|| format!("{here}?offset={}", p.offset + ROWS_PAGE)),
                ))
            }
        }
        section.panel aria-labelledby="val-h" { h2 #val-h { "Value" } (json_view::tree(&val)) }
        (version_list(&project, "objects", &all, &obj.digest))
    };
    Ok(layout::project_page(&viewer.chrome(), &project, Tab::Objects, &obj.object_id, body))
}

/// The digest of `weave:///{project}/table/<digest>`.
fn table_digest(project: &ProjectId, r: &str) -> Option<String> {
    let rest = r.strip_prefix("weave:///")?.strip_prefix(project.as_str())?;
    Some(rest.strip_prefix("/table/")?.to_owned()).filter(|d| !d.contains('/'))
}

/// A page of a table's rows, in table order, and its row count.
pub async fn dataset_rows(
    store: &dyn Store,
    project: &ProjectId,
    table: &str,
    offset: u64,
) -> Result<(u64, Vec<Value>), UiError> {
    let Some(slice) = store.table_slice(project, table, offset, Some(ROWS_PAGE)).await? else {
        return Err(UiError::NotFound(format!("no table {table}")));
    };
    let stored = store.read_rows(project, &slice.row_digests, true).await?;
    let rows = slice
        .row_digests
        .iter()
        .map(|d| {
            stored
                .get(d)
                .and_then(|r| r.val.as_ref())
                .and_then(|v| serde_json::from_str(v.get()).ok())
                .unwrap_or(Value::Null)
        })
        .collect();
    Ok((slice.count, rows))
}

/// Rows as a table: one column per key (in first-seen order), other values in one column.
pub fn rows_table(rows: &[Value]) -> Markup {
    let mut cols: Vec<String> = Vec::new();
    for r in rows {
        if let Some(o) = r.as_object() {
            for k in o.keys() {
                if !cols.contains(k) && cols.len() < 30 {
                    cols.push(k.clone());
                }
            }
        }
    }
    html! {
        div.table-wrap { table.rows {
            thead { tr { @for c in &cols { th scope="col" { (c) } } @if cols.is_empty() { th scope="col" { "Value" } } } }
            tbody {
                @for r in rows {
                    tr {
                        @if cols.is_empty() { td { (cell(r)) } }
                        @for c in &cols { td { (cell(r.get(c).unwrap_or(&Value::Null))) } }
                    }
                }
            }
        } }
    }
}

fn cell(v: &Value) -> Markup {
    match v {
        Value::String(s) => html! { (fmt::cut(s, 300).0) },
        Value::Null => html! {},
        Value::Number(_) | Value::Bool(_) => html! { (v.to_string()) },
        other => json_view::tree(other),
    }
}
