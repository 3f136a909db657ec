//! Tags and aliases of object versions (docs/api/objects.md#tags-and-aliases):
//! `PUT /objs/{object_id}/versions/{digest}/tags`, `POST .../tags/remove`,
//! `PUT /objs/{object_id}/aliases`, `POST /objs/{object_id}/aliases/remove`, `GET /tags`,
//! `GET /aliases`. The project is in the body (the query string for the lists); the key must
//! be allowed to use it before anything is read.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::routing::{get, post, put};
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::ProjectId;
use heddle_proto::objects::{VersionSel, check_object_id};
use heddle_proto::tags::{
    AliasRemoveReq, AliasSetReq, ProjectParam, TagsReq, check_alias, check_tag, checked_names,
};
use heddle_store::{Store, StoreError};
use serde_json::{Value, json};

use crate::objects::read_version;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/objs/{object_id}/versions/{digest}/tags", put(add_tags))
        .route("/objs/{object_id}/versions/{digest}/tags/remove", post(remove_tags))
        .route("/objs/{object_id}/aliases", put(set_aliases))
        .route("/objs/{object_id}/aliases/remove", post(remove_aliases))
        .route("/tags", get(list_tags))
        .route("/aliases", get(list_aliases))
}

/// Path parameters, a malformed one answered like a malformed body.
pub(crate) fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t).map_err(|e| ApiError::bad_request(format!("invalid path: {e}")))
}

pub(crate) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t).map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))
}

/// The digest of the live version `selector` names (a digest, `latest`, `v<n>` or an alias).
async fn resolve_digest(
    store: &dyn Store,
    project: &ProjectId,
    object_id: &str,
    selector: &str,
) -> Result<String, StoreError> {
    let obj = read_version(store, project, object_id, &VersionSel::parse(selector), true).await?;
    Ok(obj.digest)
}

async fn add_tags(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<(String, String)>, PathRejection>,
    Json(req): Json<TagsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (object_id, selector) = path(p)?;
    check_object_id(&object_id)?;
    let tags = checked_names("tags", req.tags, check_tag)?;
    let digest = resolve_digest(&*state.store, &req.project_id, &object_id, &selector).await?;
    state.store.add_tags(&req.project_id, &object_id, &digest, &tags, who.user_id()).await?;
    Ok(axum::Json(json!({})))
}

/// Removing from a version that does not resolve changes nothing (the hosted service's answer).
async fn remove_tags(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<(String, String)>, PathRejection>,
    Json(req): Json<TagsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let (object_id, selector) = path(p)?;
    check_object_id(&object_id)?;
    let tags = checked_names("tags", req.tags, check_tag)?;
    let digest = match resolve_digest(&*state.store, &req.project_id, &object_id, &selector).await {
        Ok(d) => d,
        Err(StoreError::NotFound(_) | StoreError::Deleted { .. }) => {
            return Ok(axum::Json(json!({})));
        }
        Err(e) => return Err(e.into()),
    };
    state.store.remove_tags(&req.project_id, &object_id, &digest, &tags).await?;
    Ok(axum::Json(json!({})))
}

async fn set_aliases(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<String>, PathRejection>,
    Json(req): Json<AliasSetReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let object_id = path(p)?;
    check_object_id(&object_id)?;
    let aliases = checked_names("aliases", req.aliases, check_alias)?;
    let digest = resolve_digest(&*state.store, &req.project_id, &object_id, &req.digest).await?;
    state.store.set_aliases(&req.project_id, &object_id, &digest, &aliases, who.user_id()).await?;
    Ok(axum::Json(json!({})))
}

/// Removal takes any name, reserved ones included: they are simply not there.
async fn remove_aliases(
    State(state): State<Arc<AppState>>,
    who: Principal,
    p: Result<Path<String>, PathRejection>,
    Json(req): Json<AliasRemoveReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let object_id = path(p)?;
    check_object_id(&object_id)?;
    let aliases = checked_names("aliases", req.aliases, |a| {
        if a.is_empty() || a.chars().count() > heddle_proto::limits::MAX_ALIAS_CHARS {
            return check_alias(a);
        }
        Ok(())
    })?;
    state.store.remove_aliases(&req.project_id, &object_id, &aliases).await?;
    Ok(axum::Json(json!({})))
}

async fn list_tags(
    State(state): State<Arc<AppState>>,
    who: Principal,
    q: Result<Query<ProjectParam>, QueryRejection>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = query(q)?;
    who.check(&q.project_id)?;
    let tags = state.store.list_tags(&q.project_id).await?;
    Ok(axum::Json(json!({ "tags": tags })))
}

async fn list_aliases(
    State(state): State<Arc<AppState>>,
    who: Principal,
    q: Result<Query<ProjectParam>, QueryRejection>,
) -> Result<axum::Json<Value>, ApiError> {
    let q = query(q)?;
    who.check(&q.project_id)?;
    let aliases = state.store.list_aliases(&q.project_id).await?;
    Ok(axum::Json(json!({ "aliases": aliases })))
}
