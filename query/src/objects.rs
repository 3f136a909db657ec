//! `/obj/create`, `/obj/read`, `/objs/query` and `/obj/delete` (docs/api/objects.md), and the
//! read of a version by digest, index, `latest` or alias that refs share.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::ProjectId;
use heddle_proto::ProtoError;
use heddle_proto::digest::object_digest;
use heddle_proto::objects::{
    ObjCreateReq, ObjCreateRes, ObjDeleteReq, ObjDeleteRes, ObjQueryReq, ObjReadReq, ObjSchema,
    VersionSel, check_object_id, object_classes, object_kind,
};
use heddle_store::{NewObject, Store, StoreError};
use serde_json::{Value, json};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/obj/create", post(create))
        .route("/obj/read", post(read))
        .route("/objs/query", post(query))
        .route("/obj/delete", post(delete))
}

async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ObjCreateReq>,
) -> Result<axum::Json<ObjCreateRes>, ApiError> {
    let mut o = req.obj;
    who.check(&o.project_id)?;
    check_object_id(&o.object_id)?;
    // The digest is of the value as stored, i.e. after a built-in class stamped it.
    let stored = o.stored_val()?;
    let digest = object_digest(&stored);
    if let Some(expected) = o.expected_digest.filter(|d| *d != digest) {
        return Err(ProtoError::DigestMismatch { expected, actual: digest }.into());
    }
    let (base, leaf) = object_classes(&stored);
    let val = serde_json::to_string(&stored).map_err(|e| ApiError::Internal(e.to_string()))?;
    state
        .store
        .create_object(NewObject {
            project: o.project_id,
            object_id: o.object_id.clone(),
            digest: digest.clone(),
            val,
            kind: object_kind(&stored),
            base_object_class: base,
            leaf_object_class: leaf,
            wb_user_id: Some(who.user_id().to_owned()),
        })
        .await?;
    Ok(axum::Json(ObjCreateRes { digest, object_id: o.object_id }))
}

async fn read(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ObjReadReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    check_object_id(&req.object_id)?;
    let version = VersionSel::parse(&req.digest);
    let metadata_only = req.metadata_only.unwrap_or(false);
    let obj = read_version(&*state.store, &req.project_id, &req.object_id, &version, metadata_only)
        .await?;
    let obj = if req.include_tags_and_aliases == Some(true) {
        with_labels(&*state.store, &req.project_id, vec![obj]).await?.remove(0)
    } else {
        obj
    };
    Ok(axum::Json(json!({ "obj": obj })))
}

async fn query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ObjQueryReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let q = req.validate()?;
    let (project, tags_and_aliases) = (q.project.clone(), q.include_tags_and_aliases);
    let mut objs = state.store.query_objects(q).await?;
    if tags_and_aliases {
        objs = with_labels(&*state.store, &project, objs).await?;
    }
    Ok(axum::Json(json!({ "objs": objs })))
}

/// Reads a version; a selector that names no version by digest is tried as an alias of the
/// object (docs/api/objects.md#tags-and-aliases), so `name:production` reads like
/// `name:<digest>` wherever a version is read (`/obj/read`, refs).
pub(crate) async fn read_version(
    store: &dyn Store,
    project: &ProjectId,
    object_id: &str,
    version: &VersionSel,
    metadata_only: bool,
) -> Result<ObjSchema, StoreError> {
    match store.read_object(project, object_id, version, metadata_only).await {
        Err(StoreError::NotFound(m)) => {
            let VersionSel::Digest(alias) = version else { return Err(StoreError::NotFound(m)) };
            match store.resolve_alias(project, object_id, alias).await? {
                Some(digest) => {
                    let target = VersionSel::Digest(digest);
                    store.read_object(project, object_id, &target, metadata_only).await
                }
                None => Err(StoreError::NotFound(m)),
            }
        }
        other => other,
    }
}

/// Fills each version's tags and aliases (`include_tags_and_aliases`), one store read for all.
async fn with_labels(
    store: &dyn Store,
    project: &ProjectId,
    objs: Vec<ObjSchema>,
) -> Result<Vec<ObjSchema>, StoreError> {
    let keys: Vec<_> = objs.iter().map(|o| (o.object_id.clone(), o.digest.clone())).collect();
    let mut labels = store.labels(project, &keys).await?;
    Ok(objs
        .into_iter()
        .zip(keys)
        .map(|(o, key)| {
            let l = labels.remove(&key).unwrap_or_default();
            o.with_tags_and_aliases(l.tags, l.aliases)
        })
        .collect())
}

async fn delete(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ObjDeleteReq>,
) -> Result<axum::Json<ObjDeleteRes>, ApiError> {
    who.check(&req.project_id)?;
    let deleted = state.store.delete_objects(req.validate()?).await?;
    Ok(axum::Json(ObjDeleteRes { num_deleted: deleted.len() as u64, deleted_versions: deleted }))
}
