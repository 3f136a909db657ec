//! All SQL of the SQLite backend: fixed statements, and the compiler that renders a validated
//! [`CallsQuery`] as one parameterised statement. User values only ever travel as bound
//! parameters; the only text spliced in is column names and operators chosen from enums here.

use heddle_proto::calls::{
    CallColumn, CallField, CallsFilter, CallsQuery, FeedbackSel, FeedbackTarget, JsonRoot,
};
use heddle_proto::feedback::{FeedbackField, FeedbackQuery};
use heddle_proto::objects::{ObjSortField, ObjectsQuery};
use heddle_proto::query::{ConvertTo, Direction, Lit, TExpr, TOperand, ValueType};
use rusqlite::types::Value;

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

/// The select list of a call row, in the order `row_to_call` reads it.
pub fn call_columns(q: &CallsQuery) -> String {
    let keep = |wanted: bool, col: &str| if wanted { col.to_owned() } else { "NULL".to_owned() };
    let c = q.columns;
    format!(
        "id, project_id, op_name, display_name, trace_id, parent_id, thread_id, turn_id, \
         started_at, ended_at, {}, {}, {}, exception, summary, {}, wb_user_id, wb_run_id, \
         wb_run_step, wb_run_step_end, deleted_at",
        keep(c.is_none_or(|c| c.attributes), "attributes"),
        keep(c.is_none_or(|c| c.inputs), "inputs"),
        keep(c.is_none_or(|c| c.output), "output"),
        keep(c.is_none_or(|c| c.otel_dump), "otel_dump"),
    )
}

/// A statement under construction: text plus its positional parameters.
#[derive(Debug, Default)]
pub struct Sql {
    pub text: String,
    pub params: Vec<Value>,
}

impl Sql {
    fn push(&mut self, s: &str) -> &mut Self {
        self.text.push_str(s);
        self
    }

    fn bind(&mut self, v: impl Into<Value>) -> &mut Self {
        self.text.push('?');
        self.params.push(v.into());
        self
    }

    fn bind_list(&mut self, items: &[String]) -> &mut Self {
        self.push("(SELECT value FROM json_each(")
            .bind(serde_json::to_string(items).expect("strings serialise"))
            .push("))")
    }
}

pub fn select_calls(q: &CallsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(&call_columns(q)).push(" FROM calls WHERE ");
    where_clause(&mut sql, q);
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in q.sort.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        order_term(&mut sql, field, *dir);
    }
    if q.limit.is_some() || q.offset > 0 {
        let limit = q.limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
        sql.push(" LIMIT ").bind(limit).push(" OFFSET ").bind(q.offset.min(i64::MAX as u64) as i64);
    }
    sql
}

pub fn count_calls(q: &CallsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT COUNT(*) FROM (SELECT 1 FROM calls WHERE ");
    where_clause(&mut sql, q);
    if let Some(limit) = q.limit {
        sql.push(" LIMIT ").bind(limit.min(i64::MAX as u64) as i64);
    }
    sql.push(")");
    sql
}

fn where_clause(sql: &mut Sql, q: &CallsQuery) {
    sql.push("project_id = ")
        .bind(q.project.as_str().to_owned())
        .push(" AND deleted_at IS NULL AND started_at IS NOT NULL");
    filter(sql, &q.filter);
    if let Some(e) = &q.expr {
        sql.push(" AND (");
        expr(sql, e);
        sql.push(")");
    }
}

fn filter(sql: &mut Sql, f: &CallsFilter) {
    // Empty lists mean "no constraint", except thread and turn ids where the real server
    // matches nothing (CONTRACT §5.10).
    let memberships: [(&str, &Option<Vec<String>>, bool); 7] = [
        ("parent_id", &f.parent_ids, false),
        ("trace_id", &f.trace_ids, false),
        ("id", &f.call_ids, false),
        ("wb_user_id", &f.wb_user_ids, false),
        ("wb_run_id", &f.wb_run_ids, false),
        ("thread_id", &f.thread_ids, true),
        ("turn_id", &f.turn_ids, true),
    ];
    for (col, list, empty_matches_nothing) in memberships {
        match list {
            Some(l) if !l.is_empty() || empty_matches_nothing => {
                sql.push(" AND ").push(col).push(" IN ").bind_list(l);
            }
            _ => {}
        }
    }
    if let Some(ops) = f.op_names.as_ref().filter(|o| !o.is_empty()) {
        let (wild, exact): (Vec<&String>, Vec<&String>) =
            ops.iter().partition(|o| o.ends_with(":*"));
        let exact: Vec<String> = exact.into_iter().cloned().collect();
        sql.push(" AND (op_name IN ").bind_list(&exact);
        for w in wild {
            let prefix = &w[..w.len() - 1];
            sql.push(" OR substr(op_name, 1, ")
                .bind(prefix.chars().count() as i64)
                .push(") = ")
                .bind(prefix.to_owned());
        }
        sql.push(")");
    }
    for (col, refs) in [("inputs", &f.input_refs), ("output", &f.output_refs)] {
        if let Some(refs) = refs.as_ref().filter(|r| !r.is_empty()) {
            sql.push(" AND EXISTS (SELECT 1 FROM json_tree(")
                .push(col)
                .push(") t WHERE t.type = 'text' AND t.atom IN ")
                .bind_list(refs)
                .push(")");
        }
    }
    if f.trace_roots_only == Some(true) {
        sql.push(" AND parent_id IS NULL");
    }
}

fn column_name(c: CallColumn) -> &'static str {
    use CallColumn::*;
    match c {
        Id => "id",
        ProjectId => "project_id",
        OpName => "op_name",
        DisplayName => "display_name",
        TraceId => "trace_id",
        ParentId => "parent_id",
        ThreadId => "thread_id",
        TurnId => "turn_id",
        Exception => "exception",
        WbUserId => "wb_user_id",
        WbRunId => "wb_run_id",
        WbRunStep => "wb_run_step",
        WbRunStepEnd => "wb_run_step_end",
        StartedAt => "started_at",
        EndedAt => "ended_at",
        DeletedAt => "deleted_at",
    }
}

fn json_column(root: JsonRoot) -> &'static str {
    match root {
        JsonRoot::Inputs => "inputs",
        JsonRoot::Output => "output",
        JsonRoot::Attributes => "attributes",
        JsonRoot::Summary => "summary",
    }
}

/// SQLite JSON path for path segments: decimal segments index arrays, others are quoted keys.
fn json_path(segs: &[String]) -> String {
    let mut p = String::from("$");
    for s in segs {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            p.push('[');
            p.push_str(s);
            p.push(']');
        } else {
            p.push_str(".\"");
            p.push_str(s);
            p.push('"');
        }
    }
    p
}

/// A JSON path with string semantics: scalars as their JSON text (strings unquoted), and
/// `''` for missing, null, objects and arrays (CONTRACT §2).
fn json_string(sql: &mut Sql, root: JsonRoot, segs: &[String]) {
    json_string_in(sql, json_column(root), segs)
}

fn json_string_in(sql: &mut Sql, col: &str, segs: &[String]) {
    let path = json_path(segs);
    sql.push("COALESCE(CASE json_type(").push(col).push(", ").bind(path.clone());
    sql.push(") WHEN 'text' THEN ").push(col).push(" ->> ").bind(path.clone());
    sql.push(" WHEN 'integer' THEN ").push(col).push(" -> ").bind(path.clone());
    sql.push(" WHEN 'real' THEN ").push(col).push(" -> ").bind(path);
    sql.push(" WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' END, '')");
}

fn json_exists(sql: &mut Sql, root: JsonRoot, segs: &[String]) {
    json_exists_in(sql, json_column(root), segs)
}

fn json_exists_in(sql: &mut Sql, col: &str, segs: &[String]) {
    sql.push("(COALESCE(json_type(")
        .push(col)
        .push(", ")
        .bind(json_path(segs))
        .push("), 'null') != 'null')");
}

const STATUS_SQL: &str = "(CASE WHEN exception IS NOT NULL THEN 'error' \
     WHEN ended_at IS NULL THEN 'running' \
     WHEN COALESCE(CAST(json_extract(summary, '$.status_counts.error') AS REAL), 0) > 0 \
     THEN 'descendant_error' ELSE 'success' END)";

fn field(sql: &mut Sql, f: &CallField) {
    match f {
        CallField::Column(c) => {
            sql.push(column_name(*c));
        }
        CallField::Json(root, segs) => json_string(sql, *root, segs),
        CallField::Status => {
            sql.push(STATUS_SQL);
        }
        CallField::LatencyMs => {
            sql.push("((ended_at - started_at) / 1000)");
        }
        CallField::TraceName => {
            sql.push("COALESCE(display_name, hd_op_name(op_name))");
        }
        CallField::Feedback(sel) => feedback_of_call(sql, sel),
    }
}

/// A field a query expression can read: calls and feedback rows have their own.
trait FieldSql {
    fn value(&self, sql: &mut Sql);
    /// Whether the field has JSON-path semantics (missing reads as `''`).
    fn is_json(&self) -> bool;
    /// "Present and not JSON null", for a field with `is_json`.
    fn exists(&self, sql: &mut Sql);
}

impl FieldSql for CallField {
    fn value(&self, sql: &mut Sql) {
        field(sql, self)
    }
    fn is_json(&self) -> bool {
        matches!(self, CallField::Json(..) | CallField::Feedback(_))
    }
    fn exists(&self, sql: &mut Sql) {
        match self {
            CallField::Json(root, segs) => json_exists(sql, *root, segs),
            other => {
                sql.push("(");
                field(sql, other);
                sql.push(" != '')");
            }
        }
    }
}

/// `feedback.[<type>]...` of the call (CONTRACT §2): of the call's feedback rows of the type,
/// the newest non-empty value, else `''`. A correlated subquery on `feedback_by_ref`.
fn feedback_of_call(sql: &mut Sql, sel: &FeedbackSel) {
    sql.push("COALESCE((SELECT v FROM (SELECT ");
    match &sel.target {
        FeedbackTarget::Payload(segs) => {
            // Objects and arrays read as their JSON text here, not as '' (the reference server
            // reads feedback with JSON_VALUE allowing complex values): the SDK's scored_by tests
            // `payload.output`, usually a dict, for non-emptiness.
            let path = json_path(segs);
            sql.push("CASE WHEN json_type(f.payload, ").bind(path.clone());
            sql.push(") IN ('object', 'array') THEN f.payload -> ").bind(path);
            sql.push(" ELSE ");
            json_string_in(sql, "f.payload", segs);
            sql.push(" END");
        }
        FeedbackTarget::RunnableRef => {
            sql.push("COALESCE(f.runnable_ref, '')");
        }
        FeedbackTarget::TriggerRef => {
            sql.push("COALESCE(f.trigger_ref, '')");
        }
    }
    sql.push(
        " AS v, f.created_at AS t, f.id AS i FROM feedback f WHERE f.project_id = calls.project_id \
         AND f.weave_ref = 'weave:///' || calls.project_id || '/call/' || calls.id",
    );
    if let Some(ty) = &sel.feedback_type {
        sql.push(" AND f.feedback_type = ").bind(ty.clone());
    }
    sql.push(") WHERE v != '' ORDER BY t DESC, i DESC LIMIT 1), '')");
}

impl FieldSql for FeedbackField {
    fn value(&self, sql: &mut Sql) {
        match self {
            FeedbackField::Column(c) => {
                sql.push(c.name());
            }
            FeedbackField::Payload(segs) => json_string_in(sql, "payload", segs),
        }
    }
    fn is_json(&self) -> bool {
        matches!(self, FeedbackField::Payload(_))
    }
    fn exists(&self, sql: &mut Sql) {
        if let FeedbackField::Payload(segs) = self {
            json_exists_in(sql, "payload", segs)
        }
    }
}

/// Columns of a feedback row in the order `row_to_feedback` reads them.
pub const FEEDBACK_COLUMNS: &str = "project_id, id, weave_ref, feedback_type, creator, payload, \
     created_at, wb_user_id, annotation_ref, runnable_ref, call_ref, trigger_ref, queue_id, extra";

pub const INSERT_FEEDBACK: &str = "
INSERT INTO feedback (project_id, id, weave_ref, feedback_type, creator, payload, created_at,
                      wb_user_id, annotation_ref, runnable_ref, call_ref, trigger_ref, queue_id,
                      extra)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
ON CONFLICT (project_id, id) DO NOTHING
";

pub fn select_feedback_by_id() -> String {
    format!("SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE project_id = ?1 AND id = ?2")
}

/// ?2 is a JSON array of ids.
pub const PURGE_FEEDBACK: &str =
    "DELETE FROM feedback WHERE project_id = ?1 AND id IN (SELECT value FROM json_each(?2))";

/// ?2 is a JSON array of refs.
pub fn feedback_for_refs() -> String {
    format!(
        "SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE project_id = ?1 \
         AND weave_ref IN (SELECT value FROM json_each(?2)) ORDER BY created_at, id"
    )
}

fn feedback_where(sql: &mut Sql, q: &FeedbackQuery) {
    sql.push(" FROM feedback WHERE project_id = ").bind(q.project.as_str().to_owned());
    if let Some(e) = &q.expr {
        sql.push(" AND (");
        expr(sql, e);
        sql.push(")");
    }
}

/// `/feedback/query`: the project's rows matching the query, sorted and paged.
pub fn select_feedback(q: &FeedbackQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(FEEDBACK_COLUMNS);
    feedback_where(&mut sql, q);
    sql.push(" ORDER BY ");
    for (i, (f, dir)) in q.sort.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        let d = match dir {
            Direction::Asc => " ASC",
            Direction::Desc => " DESC",
        };
        match f {
            FeedbackField::Payload(segs) => {
                json_exists_in(&mut sql, "payload", segs);
                sql.push(" DESC, hd_to_double(");
                json_string_in(&mut sql, "payload", segs);
                sql.push(")").push(d).push(" NULLS LAST, ");
                json_string_in(&mut sql, "payload", segs);
                sql.push(d);
            }
            FeedbackField::Column(c) => {
                sql.push(c.name()).push(d);
            }
        }
    }
    if q.limit.is_some() || q.offset > 0 {
        let limit = q.limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
        sql.push(" LIMIT ").bind(limit).push(" OFFSET ").bind(q.offset.min(i64::MAX as u64) as i64);
    }
    sql
}

/// How many rows `select_feedback` matches without paging.
pub fn count_feedback(q: &FeedbackQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT COUNT(*)");
    feedback_where(&mut sql, q);
    sql
}

fn literal(sql: &mut Sql, l: &Lit) {
    match l {
        Lit::Str(s) => sql.bind(s.clone()),
        Lit::Int(i) | Lit::Micros(i) => sql.bind(*i),
        Lit::Float(f) => sql.bind(*f),
        Lit::Bool(b) => sql.bind(*b as i64),
    };
}

fn operand<F: FieldSql>(sql: &mut Sql, o: &TOperand<F>) {
    match o {
        TOperand::Lit(l) => literal(sql, l),
        TOperand::Field(f) => f.value(sql),
        TOperand::Expr(e) => {
            sql.push("(");
            expr(sql, e);
            sql.push(")");
        }
        TOperand::Convert(inner, from, to) => convert(sql, inner, *from, *to),
    }
}

fn convert<F: FieldSql>(sql: &mut Sql, inner: &TOperand<F>, from: ValueType, to: ConvertTo) {
    use ValueType as T;
    if to == ConvertTo::Exists {
        if let TOperand::Field(f) = inner
            && f.is_json()
        {
            return f.exists(sql);
        }
        sql.push("(");
        operand(sql, inner);
        sql.push(" IS NOT NULL)");
        return;
    }
    let (pre, post) = match (to, from) {
        (ConvertTo::Double, T::Timestamp) => ("(CAST(", " AS REAL) / 1e6)"),
        (ConvertTo::Double, T::Int | T::Float | T::Bool) => ("CAST(", " AS REAL)"),
        (ConvertTo::Double, _) => ("hd_to_double(", ")"),
        (ConvertTo::Int, T::Timestamp) => ("(", " / 1000000)"),
        (ConvertTo::Int, T::Int | T::Bool) => ("(", ")"),
        (ConvertTo::Int, T::Float) => ("CAST(", " AS INTEGER)"),
        (ConvertTo::Int, _) => ("hd_to_int(", ")"),
        (ConvertTo::Bool, T::Bool) => ("(", ")"),
        (ConvertTo::Bool, T::Int | T::Float) => ("(", " != 0)"),
        (ConvertTo::Bool, T::Timestamp) => ("(", " IS NOT NULL)"),
        (ConvertTo::Bool, _) => ("hd_to_bool(", ")"),
        (ConvertTo::String, T::String) => ("(", ")"),
        (ConvertTo::String, T::Bool) => ("(CASE WHEN ", " THEN 'true' ELSE 'false' END)"),
        (ConvertTo::String, _) => ("CAST(", " AS TEXT)"),
        (ConvertTo::Exists, _) => unreachable!("handled above"),
    };
    sql.push(pre);
    operand(sql, inner);
    sql.push(post);
}

fn expr<F: FieldSql>(sql: &mut Sql, e: &TExpr<F>) {
    match e {
        TExpr::And(xs) | TExpr::Or(xs) => {
            let sep = if matches!(e, TExpr::And(_)) { " AND " } else { " OR " };
            sql.push("(");
            for (i, x) in xs.iter().enumerate() {
                if i > 0 {
                    sql.push(sep);
                }
                expr(sql, x);
            }
            sql.push(")");
        }
        TExpr::Not(x) => {
            // Comparisons with NULL are false, so their negation must be true: COALESCE.
            sql.push("(NOT COALESCE((");
            expr(sql, x);
            sql.push("), 0))");
        }
        TExpr::Cmp(op, a, b) => {
            sql.push("(");
            operand(sql, a);
            sql.push(" ").push(op.sql()).push(" ");
            operand(sql, b);
            sql.push(")");
        }
        TExpr::IsNull(a) => {
            if let TOperand::Field(f) = a
                && f.is_json()
            {
                // Missing and JSON null read as '' (CONTRACT §2).
                sql.push("(");
                operand(sql, a);
                sql.push(" = '')");
            } else {
                sql.push("(");
                operand(sql, a);
                sql.push(" IS NULL)");
            }
        }
        TExpr::In(a, bs) => {
            if bs.is_empty() {
                sql.push("0");
                return;
            }
            sql.push("(");
            operand(sql, a);
            sql.push(" IN (");
            for (i, b) in bs.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                operand(sql, b);
            }
            sql.push("))");
        }
        TExpr::Contains { input, substr, case_insensitive } => {
            let (pre, post) = if *case_insensitive { ("lower(", ")") } else { ("(", ")") };
            sql.push("(instr(").push(pre);
            operand(sql, input);
            sql.push(post).push(", ").push(pre);
            operand(sql, substr);
            sql.push(post).push(") > 0)");
        }
    }
}

fn order_term(sql: &mut Sql, f: &CallField, dir: Direction) {
    let d = match dir {
        Direction::Asc => " ASC",
        Direction::Desc => " DESC",
    };
    match f {
        CallField::Json(root, segs) => {
            // Present values first, then numerically, then as strings (CONTRACT §2).
            json_exists(sql, *root, segs);
            sql.push(" DESC, hd_to_double(");
            json_string(sql, *root, segs);
            // NULLS LAST: non-numeric values after numbers in both directions, as ClickHouse
            // orders NULLs, so both backends page identically.
            sql.push(")").push(d).push(" NULLS LAST, ");
            json_string(sql, *root, segs);
            sql.push(d);
        }
        other => {
            field(sql, other);
            sql.push(d);
        }
    }
}

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
