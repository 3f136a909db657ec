//! The few W&B GraphQL operations `weave.init` needs (docs/api/service.md#graphql), matched by
//! operation name. Projects exist implicitly: any project of an entity the key may use.

use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal};
use serde::Deserialize;
use serde_json::{Map, Value, json};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/graphql", post(graphql))
}

#[derive(Deserialize)]
struct GraphqlReq {
    query: Option<String>,
    #[serde(rename = "operationName")]
    operation_name: Option<String>,
    variables: Option<Map<String, Value>>,
}

/// The name of the first operation in a GraphQL document: `query Name`/`mutation Name`.
fn operation_name(doc: &str) -> Option<&str> {
    let mut words =
        doc.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty());
    while let Some(w) = words.next() {
        if w == "query" || w == "mutation" {
            return words.next();
        }
    }
    None
}

fn error(message: String, code: Option<&str>) -> Value {
    let mut e = json!({ "message": message });
    if let Some(code) = code {
        e["extensions"] = json!({ "code": code });
    }
    json!({ "errors": [e] })
}

async fn graphql(
    who: Principal,
    Json(req): Json<GraphqlReq>,
) -> Result<axum::Json<Value>, ApiError> {
    let vars = req.variables.unwrap_or_default();
    let var = |k: &str| vars.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let op = req
        .operation_name
        .clone()
        .or_else(|| req.query.as_deref().and_then(operation_name).map(str::to_owned))
        .unwrap_or_default();
    let denied = |entity: &str| {
        error(format!("this API key may not access entity {entity:?}"), Some("PERMISSION_ERROR"))
    };
    let body = match op.as_str() {
        "Project" => {
            let (entity, name) = (var("entityName"), var("name"));
            if !who.may_use_entity(&entity) {
                denied(&entity)
            } else {
                json!({"data": {"project": {"id": format!("{entity}/{name}"), "name": name,
                                            "entityName": entity}}})
            }
        }
        "UpsertModel" => {
            let (entity, name) = (var("entity"), var("name"));
            if !who.may_use_entity(&entity) {
                denied(&entity)
            } else {
                json!({"data": {"upsertModel": {"inserted": true, "model": {
                    "id": format!("{entity}/{name}"), "name": name, "entityName": entity,
                    "description": vars.get("description").cloned().unwrap_or(Value::Null)}}}})
            }
        }
        "DefaultEntity" | "Viewer" => {
            let user = who.user_id();
            json!({"data": {"viewer": {"id": user, "username": user, "entity": user,
                                       "defaultEntity": {"id": user, "name": user}}}})
        }
        other => error(format!("unsupported GraphQL operation {other:?}"), None),
    };
    Ok(axum::Json(body))
}

#[cfg(test)]
mod tests {
    use super::operation_name;

    #[test]
    fn finds_operation_names() {
        assert_eq!(operation_name("query Project($name: String!) { x }"), Some("Project"));
        assert_eq!(operation_name("\n  mutation UpsertModel(\n"), Some("UpsertModel"));
        assert_eq!(operation_name("{ viewer { id } }"), None);
    }
}
