//! All SQL of the SQLite backend: fixed statements, and the compiler that renders a validated
//! [`CallsQuery`] as one parameterised statement. User values only ever travel as bound
//! parameters; the only text spliced in is column names and operators chosen from enums here.

use heddle_proto::objects::{ObjSortField, ObjectsQuery};
use heddle_proto::query::Direction;

/// Upsert of one call part. A start part has `started_at` set, an end part `ended_at`; each
/// half only overwrites its own columns, so parts commute and duplicates are no-ops.
pub const UPSERT_CALL_PART: &str = "
INSERT INTO calls (project_id, id, trace_id, op_name, display_name, parent_id, thread_id, turn_id,
                   started_at, attributes, inputs, otel_dump, wb_user_id, wb_run_id, wb_run_step,
                   ended_at, summary, output, exception, wb_run_step_end)
VALUES (?1, ?2, ?3, ?4, NULLIF(?5, ''), ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
        ?16, ?17, ?18, ?19, ?20)
ON CONFLICT (project_id, id) DO UPDATE SET
    trace_id        = COALESCE(excluded.trace_id, calls.trace_id),
    op_name         = IIF(excluded.started_at IS NULL, calls.op_name, excluded.op_name),
    display_name    = IIF(excluded.started_at IS NULL OR calls.name_updated,
                          calls.display_name, excluded.display_name),
    parent_id       = IIF(excluded.started_at IS NULL, calls.parent_id, excluded.parent_id),
    thread_id       = IIF(excluded.started_at IS NULL, calls.thread_id, excluded.thread_id),
    turn_id         = IIF(excluded.started_at IS NULL, calls.turn_id, excluded.turn_id),
    started_at      = COALESCE(excluded.started_at, calls.started_at),
    attributes      = IIF(excluded.started_at IS NULL, calls.attributes, excluded.attributes),
    inputs          = IIF(excluded.started_at IS NULL, calls.inputs, excluded.inputs),
    otel_dump       = IIF(excluded.started_at IS NULL, calls.otel_dump, excluded.otel_dump),
    wb_user_id      = IIF(excluded.started_at IS NULL, calls.wb_user_id, excluded.wb_user_id),
    wb_run_id       = IIF(excluded.started_at IS NULL, calls.wb_run_id, excluded.wb_run_id),
    wb_run_step     = IIF(excluded.started_at IS NULL, calls.wb_run_step, excluded.wb_run_step),
    ended_at        = COALESCE(excluded.ended_at, calls.ended_at),
    summary         = IIF(excluded.ended_at IS NULL, calls.summary, excluded.summary),
    output          = IIF(excluded.ended_at IS NULL, calls.output, excluded.output),
    exception       = IIF(excluded.ended_at IS NULL, calls.exception, excluded.exception),
    wb_run_step_end = IIF(excluded.ended_at IS NULL, calls.wb_run_step_end, excluded.wb_run_step_end)
";

pub const SET_DISPLAY_NAME: &str = "
INSERT INTO calls (project_id, id, display_name, name_updated) VALUES (?1, ?2, NULLIF(?3, ''), 1)
ON CONFLICT (project_id, id) DO UPDATE SET display_name = excluded.display_name, name_updated = 1
";

/// Soft delete of the listed calls (?2, a JSON array) and every descendant.
pub const DELETE_CALLS: &str = "
WITH RECURSIVE doomed(id) AS (
    SELECT id FROM calls WHERE project_id = ?1 AND id IN (SELECT value FROM json_each(?2))
    UNION
    SELECT c.id FROM calls c JOIN doomed d ON c.parent_id = d.id WHERE c.project_id = ?1
)
UPDATE calls SET deleted_at = ?3
WHERE project_id = ?1 AND deleted_at IS NULL AND started_at IS NOT NULL
  AND id IN (SELECT id FROM doomed)
";

pub const INSERT_OBJECT: &str = "
INSERT INTO objects (project_id, object_id, digest, version_index, kind, base_object_class,
                     leaf_object_class, val, created_at, wb_user_id)
SELECT ?1, ?2, ?3,
       COALESCE((SELECT MAX(version_index) + 1 FROM objects WHERE project_id = ?1 AND object_id = ?2), 0),
       ?4, ?5, ?6, ?7, ?8, ?9
ON CONFLICT (project_id, object_id, digest) DO UPDATE SET deleted_at = NULL
";

/// Whether a version is the object's latest: the newest non-deleted version (served by the
/// partial index `objects_live`).
const IS_LATEST: &str = "(o.version_index = (SELECT MAX(version_index) FROM objects l
                       WHERE l.project_id = o.project_id AND l.object_id = o.object_id
                         AND l.deleted_at IS NULL))";

/// Columns of an object version in the order `row_to_object` reads them; the value and its
/// size only when wanted.
fn object_columns(val: bool, size: bool) -> String {
    format!(
        "o.object_id, o.digest, o.version_index, {IS_LATEST} AS is_latest, o.kind,
         o.base_object_class, o.leaf_object_class, {}, o.created_at, o.deleted_at, o.wb_user_id,
         {}",
        if val { "o.val" } else { "NULL" },
        if size { "length(CAST(o.val AS BLOB))" } else { "NULL" },
    )
}

pub fn select_object(by: ObjectBy) -> String {
    let cond = match by {
        ObjectBy::Digest => "o.digest = ?3",
        ObjectBy::Index => "o.version_index = ?3",
        ObjectBy::Latest => "o.deleted_at IS NULL ORDER BY o.version_index DESC LIMIT 1",
    };
    format!(
        "SELECT {} FROM objects o WHERE o.project_id = ?1 AND o.object_id = ?2 AND {cond}",
        object_columns(true, false)
    )
}

#[derive(Debug, Clone, Copy)]
pub enum ObjectBy {
    Digest,
    Index,
    Latest,
}

/// 1 when the version exists and is live, 0 when it is deleted, no row when it never existed.
pub const OBJECT_VERSION_LIVE: &str = "SELECT deleted_at IS NULL FROM objects WHERE project_id = ?1 AND object_id = ?2 AND digest = ?3";

/// The live versions of one object.
pub const LIVE_OBJECT_VERSIONS: &str = "
SELECT digest, version_index, base_object_class, leaf_object_class FROM objects
WHERE project_id = ?1 AND object_id = ?2 AND deleted_at IS NULL ORDER BY version_index";

/// Soft delete of the live versions of one object whose digests are in ?3 (a JSON array).
pub const DELETE_OBJECT_VERSIONS: &str = "
UPDATE objects SET deleted_at = ?4
WHERE project_id = ?1 AND object_id = ?2 AND deleted_at IS NULL
  AND digest IN (SELECT value FROM json_each(?3))";

/// `/objs/query`: the project's live versions matching the filter, sorted and paged.
pub fn select_objects(q: &ObjectsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ")
        .push(&object_columns(!q.metadata_only, q.include_storage_size))
        .push(" FROM objects o WHERE o.project_id = ")
        .bind(q.project.as_str().to_owned())
        .push(" AND o.deleted_at IS NULL");
    if let Some(ids) = &q.object_ids {
        sql.push(" AND o.object_id IN ").bind_list(ids);
    }
    match q.is_op {
        Some(true) => sql.push(" AND o.kind = 'op'"),
        Some(false) => sql.push(" AND o.kind != 'op'"),
        None => &mut sql,
    };
    if q.latest_only {
        sql.push(" AND ").push(IS_LATEST);
    }
    if let Some(classes) = &q.base_object_classes {
        sql.push(" AND o.base_object_class IN ").bind_list(classes);
    }
    if let Some(classes) = &q.exclude_base_object_classes {
        sql.push(" AND (o.base_object_class IS NULL OR o.base_object_class NOT IN ")
            .bind_list(classes)
            .push(")");
    }
    if let Some(classes) = &q.leaf_object_classes {
        sql.push(" AND o.leaf_object_class IN ").bind_list(classes);
    }
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in q.sort.iter().enumerate() {
        sql.push(if i > 0 { ", " } else { "" }).push(match field {
            ObjSortField::ObjectId => "o.object_id",
            ObjSortField::CreatedAt => "o.created_at",
            ObjSortField::VersionIndex => "o.version_index",
        });
        sql.push(match dir {
            Direction::Asc => " ASC",
            Direction::Desc => " DESC",
        });
    }
    if q.limit.is_some() || q.offset > 0 {
        let limit = q.limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
        sql.push(" LIMIT ").bind(limit).push(" OFFSET ").bind(q.offset.min(i64::MAX as u64) as i64);
    }
    sql
}

pub const INSERT_FILE: &str = "
INSERT INTO files (project_id, digest, size_bytes, n_chunks, content, created_at)
VALUES (?1, ?2, ?3, ?4, x'', ?5)
ON CONFLICT (project_id, digest) DO NOTHING
";

pub const INSERT_FILE_CHUNK: &str = "
INSERT INTO file_chunks (project_id, digest, chunk_index, data) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (project_id, digest, chunk_index) DO NOTHING
";

pub const FILE_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM files WHERE project_id = ?1 AND digest = ?2)";

/// Size, chunk count, and the inline content of a file stored before chunking.
pub const SELECT_FILE: &str =
    "SELECT size_bytes, n_chunks, content FROM files WHERE project_id = ?1 AND digest = ?2";

pub const SELECT_FILE_CHUNKS: &str =
    "SELECT data FROM file_chunks WHERE project_id = ?1 AND digest = ?2 ORDER BY chunk_index";

pub const FILES_SIZE: &str = "SELECT COALESCE(SUM(size_bytes), 0) FROM files WHERE project_id = ?1";

pub const INSERT_TABLE_ROW: &str = "
INSERT INTO table_rows (project_id, digest, val, size_bytes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (project_id, digest) DO NOTHING
";

/// ?4 is the row digests as a JSON array.
pub const INSERT_TABLE: &str = "
INSERT INTO tables (project_id, digest, row_count, row_digests, created_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (project_id, digest) DO NOTHING
";

pub const TABLE_COUNT: &str = "SELECT row_count FROM tables WHERE project_id = ?1 AND digest = ?2";

/// A page of a table's row list, in table order (?3 = limit, -1 for all; ?4 = offset).
pub const TABLE_PAGE: &str = "
SELECT j.value FROM tables t, json_each(t.row_digests) j
WHERE t.project_id = ?1 AND t.digest = ?2
ORDER BY j.key LIMIT ?3 OFFSET ?4
";

/// The stored rows among ?2 (a JSON array of digests); the value only when ?3 is true.
pub const SELECT_TABLE_ROWS: &str = "
SELECT digest, size_bytes, CASE WHEN ?3 THEN val END FROM table_rows
WHERE project_id = ?1 AND digest IN (SELECT value FROM json_each(?2))
";

// --- costs and threads ------------------------------------------------------------------------

pub const INSERT_COST: &str = "
INSERT INTO llm_token_prices (project_id, id, llm_id, provider_id, prompt_token_cost,
    completion_token_cost, prompt_token_cost_unit, completion_token_cost_unit,
    cache_read_input_token_cost, cache_creation_input_token_cost, effective_date, created_at,
    created_by)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
ON CONFLICT (project_id, id) DO NOTHING
";

/// Columns in the order `row_to_cost` reads them.
pub const SELECT_COSTS: &str = "
SELECT id, llm_id, provider_id, prompt_token_cost, completion_token_cost, prompt_token_cost_unit,
       completion_token_cost_unit, cache_read_input_token_cost, cache_creation_input_token_cost,
       effective_date, created_at, created_by
FROM llm_token_prices WHERE project_id = ?1
";

/// ?2: the ids as a JSON array.
pub const DELETE_COSTS: &str = "
DELETE FROM llm_token_prices WHERE project_id = ?1 AND id IN (SELECT value FROM json_each(?2))
";

/// The live turn calls of a project (served by the partial index `calls_turns`); ?2 is NULL or
/// a JSON array of the thread ids wanted.
pub const SELECT_TURNS: &str = "
SELECT thread_id, id, started_at, ended_at FROM calls
WHERE project_id = ?1 AND turn_id = id AND thread_id != ''
  AND deleted_at IS NULL AND started_at IS NOT NULL
  AND (?2 IS NULL OR thread_id IN (SELECT value FROM json_each(?2)))
";

pub const INSERT_KEY: &str =
    "INSERT INTO api_keys (key_hash, entity, created_at) VALUES (?1, ?2, ?3)";
pub const SELECT_KEY: &str =
    "SELECT entity FROM api_keys WHERE key_hash = ?1 AND revoked_at IS NULL";
pub const ANY_ADMIN_KEY: &str =
    "SELECT EXISTS (SELECT 1 FROM api_keys WHERE entity IS NULL AND revoked_at IS NULL)";
/// What `keys list` shows of every key (`key_info` reads the row).
pub const LIST_KEYS: &str = "SELECT key_hash, entity, created_at, revoked_at FROM api_keys
ORDER BY created_at, key_hash";
pub const KEY_INFO: &str =
    "SELECT key_hash, entity, created_at, revoked_at FROM api_keys WHERE key_hash = ?1";
/// The hashes a key id (their prefix) names.
pub const KEYS_WITH_ID: &str =
    "SELECT key_hash FROM api_keys WHERE substr(key_hash, 1, length(?1)) = ?1";
/// Keeps the first revocation time of a key revoked again.
pub const REVOKE_KEY: &str =
    "UPDATE api_keys SET revoked_at = ?2 WHERE key_hash = ?1 AND revoked_at IS NULL";

pub use super::compile::*;

#[cfg(test)]
mod tests {
    use heddle_proto::calls::CallsQueryReq;
    use serde_json::json;

    use super::*;

    fn compile(body: serde_json::Value) -> Sql {
        let req: CallsQueryReq = serde_json::from_value(body).unwrap();
        select_calls(&req.validate().unwrap())
    }

    #[test]
    fn user_values_are_always_bound() {
        let evil = "x'); DROP TABLE calls; --";
        let sql = compile(json!({
            "project_id": "e/p",
            "filter": {"op_names": [evil, format!("{evil}:*")], "call_ids": [evil],
                       "input_refs": [evil]},
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": "inputs.a"}, {"$literal": evil}]},
                {"$contains": {"input": {"$getField": "op_name"}, "substr": {"$literal": evil}}},
                {"$in": [{"$getField": "display_name"}, [{"$literal": evil}]]}
            ]}},
            "sort_by": [{"field": "inputs.a", "direction": "desc"}]
        }));
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        assert_eq!(sql.text.matches('?').count(), sql.params.len());
    }

    #[test]
    fn feedback_values_are_always_bound() {
        let evil = "x'); DROP TABLE feedback; --";
        let calls = compile(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": format!("feedback.[{evil}].payload.{evil}.0")},
                         {"$literal": evil}]},
                {"$eq": [{"$getField": "feedback.[*].runnable_ref"}, {"$literal": evil}]},
            ]}},
            "sort_by": [{"field": format!("feedback.[{evil}].trigger_ref"), "direction": "desc"}]
        }));
        let fq: heddle_proto::feedback::FeedbackQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$or": [
                {"$eq": [{"$getField": format!("payload.{evil}")}, {"$literal": evil}]},
                {"$in": [{"$getField": "weave_ref"}, [{"$literal": evil}]]},
                {"$contains": {"input": {"$getField": "creator"}, "substr": {"$literal": evil}}}
            ]}},
            "sort_by": [{"field": format!("payload.{evil}"), "direction": "asc"}],
            "limit": 3, "offset": 1
        }))
        .unwrap();
        let (fq, _) = fq.validate().unwrap();
        for sql in [calls, select_feedback(&fq), count_feedback(&fq)] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            assert_eq!(sql.text.matches('?').count(), sql.params.len(), "{}", sql.text);
        }
    }

    #[test]
    fn object_queries_bind_user_values() {
        let evil = "x'); DROP TABLE objects; --";
        let req: heddle_proto::objects::ObjQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "filter": {"object_ids": [evil], "base_object_classes": [evil],
                       "exclude_base_object_classes": [evil], "leaf_object_classes": [evil],
                       "is_op": false, "latest_only": true},
            "sort_by": [{"field": "created_at", "direction": "desc"}],
            "limit": 3, "offset": 1, "metadata_only": true, "include_storage_size": true
        }))
        .unwrap();
        let sql = select_objects(&req.validate().unwrap());
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        assert_eq!(sql.text.matches('?').count(), sql.params.len());
        assert!(
            sql.text.contains(
                "ORDER BY o.created_at DESC, o.object_id ASC, o.version_index ASC LIMIT ? OFFSET ?"
            ),
            "{}",
            sql.text
        );
    }

    #[test]
    fn default_order_and_paging() {
        let sql = compile(json!({"project_id": "e/p", "limit": 10, "offset": 5}));
        assert!(
            sql.text.contains("ORDER BY started_at ASC, id ASC LIMIT ? OFFSET ?"),
            "{}",
            sql.text
        );
    }

    #[test]
    fn json_paths() {
        assert_eq!(json_path(&["a".into(), "0".into(), "b.c".into()]), "$.\"a\"[0].\"b.c\"");
    }
}
