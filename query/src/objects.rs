//! `/obj/create` and `/obj/read` (CONTRACT §9).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use heddle_proto::ProtoError;
use heddle_proto::digest::object_digest;
use heddle_proto::objects::{
    ObjCreateReq, ObjCreateRes, ObjReadReq, VersionSel, check_object_id, object_classes,
    object_kind,
};
use heddle_store::NewObject;
use serde_json::{Value, json};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/obj/create", post(create)).route("/obj/read", post(read))
}

async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<ObjCreateReq>,
) -> Result<axum::Json<ObjCreateRes>, ApiError> {
    let o = req.obj;
    who.check(&o.project_id)?;
    check_object_id(&o.object_id)?;
    let digest = object_digest(&o.val);
    if let Some(expected) = o.expected_digest.filter(|d| *d != digest) {
        return Err(ProtoError::DigestMismatch { expected, actual: digest }.into());
    }
    let (base, leaf) = object_classes(&o.val);
    let val = serde_json::to_string(&o.val).map_err(|e| ApiError::Internal(e.to_string()))?;
    state
        .store
        .create_object(NewObject {
            project: o.project_id,
            object_id: o.object_id.clone(),
            digest: digest.clone(),
            val,
            kind: object_kind(&o.val),
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
    let obj = state
        .store
        .read_object(&req.project_id, &req.object_id, &version, req.metadata_only.unwrap_or(false))
        .await?;
    Ok(axum::Json(json!({ "obj": obj })))
}
