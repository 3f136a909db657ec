//! The SQLite compiler of the query language: renders a validated [`CallsQuery`] or
//! [`FeedbackQuery`] as one parameterised statement. User values only ever travel as bound
//! parameters; the only text spliced in is column names and operators chosen from enums here.

use heddle_proto::calls::{
    CallColumn, CallField, CallsFilter, CallsQuery, FeedbackSel, FeedbackTarget, JsonRoot,
};
use heddle_proto::feedback::{FeedbackField, FeedbackQuery};
use heddle_ql::sql::{Cast, Dialect, FieldSql, and_expr, order_by};
use heddle_ql::{ConvertTo, Direction, Lit, ValueType};
use rusqlite::types::Value;

use super::buckets::in_project;
use super::id_directory::by_id;
use super::op_keys::op_keys_of;
use super::otel_resources::RESOURCE_OF_ROW;
use super::project_keys::{ID_OF_ROW, key_of};

/// The select list of a call row, in the order `row_to_call` reads it. The project is the
/// query's, not read from the row; the last column is the resource taken out of `otel_dump`.
pub fn call_columns(q: &CallsQuery) -> String {
    let keep = |wanted: bool, col: &str| if wanted { col.to_owned() } else { "NULL".to_owned() };
    let c = q.columns;
    format!(
        "id, op_name, display_name, trace_id, parent_id, thread_id, turn_id, \
         started_at, ended_at, {}, {}, {}, exception, summary, {}, wb_user_id, wb_run_id, \
         wb_run_step, wb_run_step_end, deleted_at, {}",
        keep(c.is_none_or(|c| c.attributes), "attributes"),
        keep(c.is_none_or(|c| c.inputs), "inputs"),
        keep(c.is_none_or(|c| c.output), "output"),
        keep(c.is_none_or(|c| c.otel_dump), "otel_dump"),
        keep(c.is_none_or(|c| c.otel_dump), RESOURCE_OF_ROW),
    )
}

/// A statement under construction: text plus its positional parameters.
#[derive(Debug, Default)]
pub struct Sql {
    pub text: String,
    pub params: Vec<Value>,
}

impl Sql {
    pub(crate) fn push(&mut self, s: &str) -> &mut Self {
        self.text.push_str(s);
        self
    }

    pub(crate) fn bind(&mut self, v: impl Into<Value>) -> &mut Self {
        self.text.push('?');
        self.params.push(v.into());
        self
    }

    pub(crate) fn bind_list(&mut self, items: &[String]) -> &mut Self {
        self.push("(SELECT value FROM json_each(")
            .bind(serde_json::to_string(items).expect("strings serialise"))
            .push("))")
    }
}

impl Dialect for Sql {
    fn push(&mut self, s: &str) -> &mut Self {
        Sql::push(self, s)
    }
    fn literal(&mut self, l: &Lit) {
        match l {
            Lit::Str(s) => self.bind(s.clone()),
            Lit::Int(i) | Lit::Micros(i) => self.bind(*i),
            Lit::Float(f) => self.bind(*f),
            Lit::Bool(b) => self.bind(*b as i64),
        };
    }
    const NULL_AS_FALSE: &'static str = "COALESCE";
    const IN_AS_EQUALITIES: bool = false;
    const POSITION: &'static str = "instr";
    // hd_fold is registered in functions.rs.
    const FOLD: &'static str = "hd_fold";
    // Registered in functions.rs; parsing a row's JSON is most of a `$contains` scan.
    const SUBSTRING_PRETEST: Option<&'static str> = Some("hd_may_contain");
    fn cast(to: ConvertTo, from: ValueType) -> Cast {
        use ValueType as T;
        let (pre, post) = match (to, from) {
            (ConvertTo::Double, T::Timestamp) => ("(CAST(", " AS REAL) / 1e6)"),
            (ConvertTo::Double, T::Int | T::Float | T::Bool) => ("CAST(", " AS REAL)"),
            (ConvertTo::Double, _) => ("hd_to_double(", ")"),
            (ConvertTo::Int, T::Timestamp) => ("(", " / 1000000)"),
            (ConvertTo::Int, T::Float) => ("CAST(", " AS INTEGER)"),
            (ConvertTo::Int, _) => ("hd_to_int(", ")"),
            (ConvertTo::Bool, _) => ("hd_to_bool(", ")"),
            (ConvertTo::String, T::Bool) => ("(CASE WHEN ", " THEN 'true' ELSE 'false' END)"),
            (ConvertTo::String, _) => ("CAST(", " AS TEXT)"),
            (ConvertTo::Exists, _) => unreachable!("rendered by the walker"),
        };
        Cast::Wrap(pre, post)
    }
    /// SQLite sorts NULLs as the smallest value already.
    fn nulls(_: Direction) -> &'static str {
        ""
    }
}

/// The calls table, with the index a filter on trace or parent ids must use. The planner's
/// sampled statistics cannot tell one trace (a handful of rows) from a whole project on a large
/// database, and walking the time index for a trace's page took most of a second at a million
/// calls; through the trace index it takes a millisecond (docs/storage.md#indexes). Both
/// indexes are bucketed: [`where_clause`] names the buckets to probe.
fn bucketed_table(f: &CallsFilter) -> Option<&'static str> {
    match (listed_ids(f), &f.trace_ids, &f.parent_ids) {
        (None, Some(_), _) => Some("calls INDEXED BY calls_by_trace"),
        (None, None, Some(_)) => Some("calls INDEXED BY calls_by_parent"),
        _ => None,
    }
}

/// The calls table, read by rowid alone when the filter lists call ids: [`where_clause`] finds
/// their rowids through the id directory. Otherwise the planner weighs that list against an index
/// of the project by statistics, which the writer takes at most every half minute, and while they
/// were older than the directory's contents it walked the time index of a million calls for one
/// call (60 ms; 600 ms before the directory, by the unique index).
fn calls_table(f: &CallsFilter) -> &'static str {
    match listed_ids(f) {
        Some(_) => "calls NOT INDEXED",
        None => bucketed_table(f).unwrap_or("calls"),
    }
}

/// The call ids the filter lists, if it lists any (an empty list filters nothing).
fn listed_ids(f: &CallsFilter) -> Option<&[String]> {
    f.call_ids.as_deref().filter(|ids| !ids.is_empty())
}

pub fn select_calls(q: &CallsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(&call_columns(q)).push(" FROM ");
    if let (Some(_), Some(table)) = (q.limit, bucketed_table(&q.filter)) {
        // A page of a trace's or a call's children: the bucketed index yields their rows per
        // bucket, and SQLite sorts them. Its sorter holds whole result rows, so a page of 100
        // of 20,000 children read and sorted 20,000 rows with their members (75 ms). The page's
        // rowids are chosen first (the index, and the start of each row for `id`), and only
        // those rows are read whole (24 ms). The sort ends in `id`, so both sorts agree.
        sql.push("calls WHERE rowid IN (SELECT rowid FROM ").push(table).push(" WHERE ");
        where_clause(&mut sql, q);
        order_by(&mut sql, &q.sort);
        page(&mut sql, q);
        sql.push(")");
        order_by(&mut sql, &q.sort);
        return sql;
    }
    sql.push(calls_table(&q.filter)).push(" WHERE ");
    where_clause(&mut sql, q);
    order_by(&mut sql, &q.sort);
    page(&mut sql, q);
    sql
}

fn page(sql: &mut Sql, q: &CallsQuery) {
    if q.limit.is_some() || q.offset > 0 {
        let limit = q.limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
        sql.push(" LIMIT ").bind(limit).push(" OFFSET ").bind(q.offset.min(i64::MAX as u64) as i64);
    }
}

pub fn count_calls(q: &CallsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT COUNT(*) FROM (SELECT 1 FROM ").push(calls_table(&q.filter));
    sql.push(" WHERE ");
    where_clause(&mut sql, q);
    if let Some(limit) = q.limit {
        sql.push(" LIMIT ").bind(limit.min(i64::MAX as u64) as i64);
    }
    sql.push(")");
    sql
}

pub(crate) fn where_clause(sql: &mut Sql, q: &CallsQuery) {
    let project = || Value::Text(q.project.as_str().to_owned());
    sql.push("project_key = ").push(key_of!("?"));
    sql.params.push(project());
    sql.push(" AND deleted_at IS NULL AND started_at IS NOT NULL");
    // The trace and parent indexes have the bucket after the project: without its buckets
    // neither can seek to a trace, a parent or the roots (docs/storage.md#buckets).
    let f = &q.filter;
    if f.trace_ids.is_some() || f.parent_ids.is_some() || f.trace_roots_only == Some(true) {
        sql.push(" AND ").push(in_project!("?"));
        sql.params.push(project());
    }
    // Rows are unique by bucket and id, so listed ids are found through the id directory and
    // read by rowid (docs/storage.md#id-directory).
    if let Some(ids) = listed_ids(f) {
        let ids = Value::Text(serde_json::to_string(ids).expect("strings serialise"));
        let by_id = by_id!("c.rowid", key_of!("?"), "?");
        sql.push(" AND rowid IN (").push(by_id).push(")");
        sql.params.extend([ids.clone(), project(), ids, project()]);
    }
    filter(sql, &q.filter, project);
    and_expr(sql, q.expr.as_ref());
}

/// `project` gives the query's project id as a parameter, for the statements that need its key.
fn filter(sql: &mut Sql, f: &CallsFilter, project: impl Fn() -> Value) {
    // Listed call ids are found by rowid in `where_clause`; testing each row's id again would
    // add nothing.
    for (col, list) in f.memberships().filter(|&(col, _)| col != "id") {
        sql.push(" AND ").push(col).push(" IN ").bind_list(list);
    }
    // Ops are indexed by key: the names select the project's keys (docs/storage.md#op-keys).
    if let Some((exact, prefixes)) = f.op_name_patterns() {
        sql.push(" AND op_key IN (").push(op_keys_of!(key_of!("?")));
        sql.params.push(project());
        sql.push(" AND (name IN ").bind_list(&exact);
        for prefix in prefixes {
            sql.push(" OR substr(name, 1, ")
                .bind(prefix.chars().count() as i64)
                .push(") = ")
                .bind(prefix.to_owned());
        }
        sql.push("))");
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

pub(crate) fn json_column(root: JsonRoot) -> &'static str {
    match root {
        JsonRoot::Inputs => "inputs",
        JsonRoot::Output => "output",
        JsonRoot::Attributes => "attributes",
        JsonRoot::Summary => "summary",
    }
}

/// SQLite JSON path for path segments: decimal segments index arrays, others are quoted keys.
pub(crate) fn json_path(segs: &[String]) -> String {
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
/// `''` for missing, null, objects and arrays (docs/api/query.md#typing).
pub(crate) fn json_string(sql: &mut Sql, root: JsonRoot, segs: &[String]) {
    json_string_in(sql, json_column(root), segs)
}

pub(crate) fn json_string_in(sql: &mut Sql, col: &str, segs: &[String]) {
    let path = json_path(segs);
    sql.push("COALESCE(CASE json_type(").push(col).push(", ").bind(path.clone());
    sql.push(") WHEN 'text' THEN ").push(col).push(" ->> ").bind(path.clone());
    sql.push(" WHEN 'integer' THEN ").push(col).push(" -> ").bind(path.clone());
    sql.push(" WHEN 'real' THEN ").push(col).push(" -> ").bind(path);
    sql.push(" WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' END, '')");
}

pub(crate) fn json_exists(sql: &mut Sql, root: JsonRoot, segs: &[String]) {
    json_exists_in(sql, json_column(root), segs)
}

pub(crate) fn json_exists_in(sql: &mut Sql, col: &str, segs: &[String]) {
    sql.push("(COALESCE(json_type(")
        .push(col)
        .push(", ")
        .bind(json_path(segs))
        .push("), 'null') != 'null')");
}

/// `summary.weave.status`: stored with the call's end (`end_status`), else computed. Migration
/// 0014 indexes this very expression (`calls_live_by_status`): change both together
/// (store/tests/sqlite_plans.rs fails when the index goes unused).
const STATUS_SQL: &str = "COALESCE(end_status, CASE WHEN exception IS NOT NULL THEN 'error' \
     WHEN ended_at IS NULL THEN 'running' \
     WHEN json_type(summary, '$.status_counts.error') IN ('integer', 'real') \
     AND json_extract(summary, '$.status_counts.error') > 0 \
     THEN 'descendant_error' ELSE 'success' END)";

pub(crate) fn field(sql: &mut Sql, f: &CallField) {
    match f {
        // Rows name their project by its key (docs/storage.md#project-keys).
        CallField::Column(CallColumn::ProjectId) => {
            sql.push(ID_OF_ROW);
        }
        CallField::Column(c) => {
            sql.push(c.name());
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

impl FieldSql<Sql> for CallField {
    fn value(&self, sql: &mut Sql) {
        field(sql, self)
    }
    fn exists(&self, sql: &mut Sql) {
        if let CallField::Json(root, segs) = self {
            json_exists(sql, *root, segs)
        }
    }
    fn json_document(&self) -> Option<&'static str> {
        match self {
            CallField::Json(root, _) => Some(json_column(*root)),
            _ => None,
        }
    }
    fn substring_candidates(&self, sql: &mut Sql, needle: &str, case_insensitive: bool) -> bool {
        matches!(self, CallField::Json(JsonRoot::Inputs | JsonRoot::Output, _))
            && super::text_index::candidates(sql, needle, case_insensitive)
    }
}

/// `feedback.[<type>]...` of the call (docs/api/query.md#calls-fields): of the call's feedback rows
/// of the type, the newest non-empty value, else `''`. A correlated subquery on `feedback_by_ref`.
pub(crate) fn feedback_of_call(sql: &mut Sql, sel: &FeedbackSel) {
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
    sql.push(" AS v, f.created_at AS t, f.id AS i FROM feedback f WHERE f.project_id = ");
    sql.push(ID_OF_ROW).push(" AND f.weave_ref = 'weave:///' || ").push(ID_OF_ROW);
    sql.push(" || '/call/' || calls.id");
    if let Some(ty) = &sel.feedback_type {
        sql.push(" AND f.feedback_type = ").bind(ty.clone());
    }
    sql.push(") WHERE v != '' ORDER BY t DESC, i DESC LIMIT 1), '')");
}

impl FieldSql<Sql> for FeedbackField {
    fn value(&self, sql: &mut Sql) {
        match self {
            FeedbackField::Column(c) => {
                sql.push(c.name());
            }
            FeedbackField::Payload(segs) => json_string_in(sql, "payload", segs),
        }
    }
    fn exists(&self, sql: &mut Sql) {
        if let FeedbackField::Payload(segs) = self {
            json_exists_in(sql, "payload", segs)
        }
    }
    fn json_document(&self) -> Option<&'static str> {
        match self {
            FeedbackField::Payload(_) => Some("payload"),
            FeedbackField::Column(_) => None,
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

pub(crate) fn feedback_where(sql: &mut Sql, q: &FeedbackQuery) {
    sql.push(" FROM feedback WHERE project_id = ").bind(q.project.as_str().to_owned());
    and_expr(sql, q.expr.as_ref());
}

/// `/feedback/query`: the project's rows matching the query, sorted and paged.
pub fn select_feedback(q: &FeedbackQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(FEEDBACK_COLUMNS);
    feedback_where(&mut sql, q);
    order_by(&mut sql, &q.sort);
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
