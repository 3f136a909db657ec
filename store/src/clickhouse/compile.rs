//! The ClickHouse compiler of the query language: renders a validated [`CallsQuery`] or
//! [`FeedbackQuery`] as one statement with server-side parameters.

use super::sql::*;
use heddle_proto::calls::{
    CallField, CallsFilter, CallsQuery, FeedbackSel, FeedbackTarget, JsonRoot,
};
use heddle_proto::feedback::{FeedbackField, FeedbackQuery};
use heddle_ql::sql::{Cast, Dialect, FieldSql, and_expr, order_by};
use heddle_ql::{ConvertTo, Direction, Lit, TExpr, TOperand, ValueType};

/// The select list of a call row, in the order and with the names of `CallRow`. Aliases differ
/// from the aggregated columns so the `WHERE` and `ORDER BY` still see the columns.
pub fn call_columns(q: &CallsQuery) -> String {
    let keep = |wanted: bool, col: &str, alias: &str| {
        if wanted {
            format!("CAST({col}, 'Nullable(String)') AS {alias}")
        } else {
            format!("CAST(NULL, 'Nullable(String)') AS {alias}")
        }
    };
    let c = q.columns;
    format!(
        "id, project_id, op_name, display_name, trace_id, parent_id, thread_id, turn_id, \
         toUnixTimestamp64Micro(started_at) AS started_us, \
         toUnixTimestamp64Micro(ended_at) AS ended_us, {}, {}, {}, exception, summary, {}, \
         wb_user_id, wb_run_id, wb_run_step, wb_run_step_end",
        keep(c.is_none_or(|c| c.attributes), "attributes", "attributes_out"),
        keep(c.is_none_or(|c| c.inputs), "inputs", "inputs_out"),
        keep(c.is_none_or(|c| c.output), "output", "output_out"),
        keep(c.is_none_or(|c| c.otel_dump), "otel_dump", "otel_dump_out"),
    )
}

/// The calls of `q`, sorted and paged.
///
/// A page (`limit` without `call_ids`) is selected in two steps within the statement: the ids
/// of the page are found on an aggregation that needs only the columns the filter and the sort
/// read, then the page's rows are aggregated again in full, narrowed by primary key. The large
/// members (inputs, output, ...) are thus aggregated for the page, not for the whole project.
pub fn select_calls(q: &CallsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(&call_columns(q)).push(" FROM ");
    let paged = q.limit.is_some() && q.filter.call_ids.as_ref().is_none_or(|l| l.is_empty());
    if paged {
        sql.push("(").push(CALLS_AGG).bind_str(q.project.as_str());
        sql.push(" AND id IN (SELECT id FROM ");
        calls_from(&mut sql, q);
        order_by(&mut sql, &q.sort);
        paging(&mut sql, q.limit, q.offset);
        sql.push(") GROUP BY project_id, id) AS c");
        if uses_feedback(q, false) {
            feedback_join(&mut sql, q.project.as_str());
        }
        order_by(&mut sql, &q.sort);
    } else {
        calls_from(&mut sql, q);
        order_by(&mut sql, &q.sort);
        paging(&mut sql, q.limit, q.offset);
    }
    sql
}

impl Dialect for Sql {
    fn push(&mut self, s: &str) -> &mut Self {
        Sql::push(self, s)
    }
    fn literal(&mut self, l: &Lit) {
        match l {
            Lit::Str(s) => self.bind_str(s),
            Lit::Int(i) => self.bind(Param::Int(*i)),
            Lit::Float(f) => self.bind(Param::Float(*f)),
            Lit::Bool(b) => self.bind(Param::Int(*b as i64)),
            Lit::Micros(m) => {
                self.push("fromUnixTimestamp64Micro(").bind(Param::Int(*m)).push(", 'UTC')")
            }
        };
    }
    const NULL_AS_FALSE: &'static str = "ifNull";
    // The list of `$in` may hold fields as well as literals.
    const IN_AS_EQUALITIES: bool = true;
    const POSITION: &'static str = "position";
    const FOLD: &'static str = "lowerUTF8";
    // ClickHouse scans columns in parallel and has not been measured to need one.
    const SUBSTRING_PRETEST: Option<&'static str> = None;
    fn cast(to: ConvertTo, from: ValueType) -> Cast {
        use ValueType as T;
        let (pre, post) = match (to, from) {
            (ConvertTo::Double, T::Timestamp) => ("(toUnixTimestamp64Micro(", ") / 1e6)"),
            (ConvertTo::Double, T::Int | T::Float | T::Bool) => ("toFloat64(", ")"),
            // A string's number as `$convert` reads it: trimmed, NULL when not a finite
            // number. ClickHouse evaluates the twice-rendered operand once.
            (ConvertTo::Double, _) => {
                return Cast::Twice(
                    "if(isFinite(ifNull(toFloat64OrNull(trimBoth(",
                    ")), nan)), toFloat64OrNull(trimBoth(",
                    ")), NULL)",
                );
            }
            (ConvertTo::Int, T::Timestamp) => ("intDiv(toUnixTimestamp64Micro(", "), 1000000)"),
            (ConvertTo::Int, T::Float) => ("toInt64(", ")"),
            (ConvertTo::Int, _) => ("toInt64OrNull(trimBoth(", "))"),
            // A string to bool: 'true'/'1' and 'false'/'0', anything else NULL.
            (ConvertTo::Bool, _) => {
                return Cast::Twice(
                    "multiIf((",
                    ") IN ('true', '1'), 1, (",
                    ") IN ('false', '0'), 0, NULL)",
                );
            }
            (ConvertTo::String, T::Bool) => ("if(", ", 'true', 'false')"),
            (ConvertTo::String, T::Timestamp) => ("toString(toUnixTimestamp64Micro(", "))"),
            (ConvertTo::String, _) => ("toString(", ")"),
            (ConvertTo::Exists, _) => unreachable!("rendered by the walker"),
        };
        Cast::Wrap(pre, post)
    }
    /// NULLs sort as the smallest value, as in SQLite.
    fn nulls(dir: Direction) -> &'static str {
        if dir == Direction::Asc { " NULLS FIRST" } else { " NULLS LAST" }
    }
}

pub(crate) fn paging(sql: &mut Sql, limit: Option<u64>, offset: u64) {
    match limit {
        Some(limit) => {
            sql.push(" LIMIT ").bind(Param::UInt(limit)).push(" OFFSET ").bind(Param::UInt(offset));
        }
        None if offset > 0 => {
            sql.push(" OFFSET ").bind(Param::UInt(offset)).push(" ROWS");
        }
        None => {}
    }
}

/// What `select_calls` returns without paging, capped at `limit`.
pub fn count_calls(q: &CallsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT count() FROM (SELECT 1 FROM ");
    calls_from(&mut sql, q);
    if let Some(limit) = q.limit {
        sql.push(" LIMIT ").bind(Param::UInt(limit));
    }
    sql.push(")");
    sql
}

/// `(<aggregated calls>) AS c WHERE <live> AND <filter> AND <expr>`.
pub(crate) fn calls_from(sql: &mut Sql, q: &CallsQuery) {
    sql.push("(").push(CALLS_AGG).bind_str(q.project.as_str());
    prefilter(sql, q);
    sql.push(" GROUP BY project_id, id) AS c");
    if uses_feedback(q, true) {
        feedback_join(sql, q.project.as_str());
    }
    sql.push(" WHERE started AND deleted_at IS NULL");
    filter(sql, &q.filter);
    and_expr(sql, q.expr.as_ref());
}

/// Row-level pre-filters that narrow the aggregation to the calls that can match, using the
/// primary key (`id`) or the bloom-filter indexes (`trace_id`, `parent_id`). Each selects a
/// superset: the exact condition is applied again on the aggregated row.
pub(crate) fn prefilter(sql: &mut Sql, q: &CallsQuery) {
    let f = &q.filter;
    if let Some(ids) = f.call_ids.as_ref().filter(|l| !l.is_empty()) {
        sql.push(" AND id IN ").bind(Param::StrList(ids.clone()));
    }
    for (col, list) in [("trace_id", &f.trace_ids), ("parent_id", &f.parent_ids)] {
        if let Some(list) = list.as_ref().filter(|l| !l.is_empty()) {
            sql.push(" AND id IN (SELECT id FROM call_parts WHERE project_id = ")
                .bind_str(q.project.as_str())
                .push(" AND ")
                .push(col)
                .push(" IN ")
                .bind(Param::StrList(list.clone()))
                .push(")");
        }
    }
}

pub(crate) fn filter(sql: &mut Sql, f: &CallsFilter) {
    for (col, list) in f.memberships() {
        sql.push(" AND ifNull(").push(col).push(" IN ");
        sql.bind(Param::StrList(list.to_vec())).push(", 0)");
    }
    if let Some((exact, prefixes)) = f.op_name_patterns() {
        sql.push(" AND (op_name IN ").bind(Param::StrList(exact));
        for prefix in prefixes {
            sql.push(" OR startsWith(op_name, ").bind_str(prefix).push(")");
        }
        sql.push(")");
    }
    for (col, refs) in [("input_refs", &f.input_refs), ("output_refs", &f.output_refs)] {
        if let Some(refs) = refs.as_ref().filter(|r| !r.is_empty()) {
            sql.push(" AND hasAny(").push(col).push(", ").bind(Param::StrList(refs.clone()));
            sql.push(")");
        }
    }
    if f.trace_roots_only == Some(true) {
        sql.push(" AND parent_id IS NULL");
    }
}

/// The JSON text a path of `root` is read from: the string-semantics copy when the member has
/// one (numbers whose text ClickHouse would not reproduce), else the member itself.
pub(crate) fn json_source(root: JsonRoot) -> &'static str {
    match root {
        JsonRoot::Inputs => "if(empty(inputs_q), inputs, inputs_q)",
        JsonRoot::Output => "if(empty(output_q), ifNull(output, ''), output_q)",
        JsonRoot::Attributes => "if(empty(attributes_q), attributes, attributes_q)",
        JsonRoot::Summary => "if(empty(summary_q), summary, summary_q)",
    }
}

/// Where a JSON path is read from: a call's member, or an expression's JSON text (feedback).
pub(crate) trait JsonSrc: Copy {
    fn src(&self) -> &str;
}

impl JsonSrc for JsonRoot {
    fn src(&self) -> &str {
        json_source(*self)
    }
}

impl JsonSrc for &str {
    fn src(&self) -> &str {
        self
    }
}

/// A path segment as ClickHouse JSON functions take it: decimal segments index arrays
/// (1-based in ClickHouse, 0-based in the query language), others are object keys.
pub(crate) fn segment_index(seg: &str) -> Option<u64> {
    if seg.is_empty() || !seg.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seg.parse::<u64>().ok().filter(|i| *i < i64::MAX as u64)
}

/// `, seg1, seg2, ...` for the first `n` segments, each bound.
pub(crate) fn path_args(sql: &mut Sql, segs: &[String]) {
    for s in segs {
        sql.push(", ");
        match segment_index(s) {
            Some(i) => sql.bind(Param::Int(i as i64 + 1)),
            None => sql.bind_str(s),
        };
    }
}

/// `JSONType(src, path...)`.
pub(crate) fn json_type(sql: &mut Sql, root: impl JsonSrc, segs: &[String]) {
    sql.push("JSONType(").push(root.src());
    path_args(sql, segs);
    sql.push(")");
}

/// Whether every array index of the path applies to an array: ClickHouse would take an index on
/// an object as the n-th member, the query language (like SQLite's JSON paths) finds nothing.
pub(crate) fn index_guards(sql: &mut Sql, root: impl JsonSrc, segs: &[String]) {
    sql.push("1");
    for (i, s) in segs.iter().enumerate() {
        if segment_index(s).is_some() {
            sql.push(" AND ");
            json_type(sql, root, &segs[..i]);
            sql.push(" = 'Array'");
        }
    }
}

/// A JSON path with string semantics: scalars as their JSON text (strings unquoted), and
/// `''` for missing, null, objects and arrays (docs/api/query.md#typing). Numbers are either
/// integers that ClickHouse writes back exactly, or strings in the `_q` copy holding their exact
/// text.
pub(crate) fn json_string(sql: &mut Sql, root: impl JsonSrc, segs: &[String]) {
    sql.push("multiIf(NOT (");
    index_guards(sql, root, segs);
    sql.push("), '', ");
    json_type(sql, root, segs);
    sql.push(" = 'String', JSONExtractString(").push(root.src());
    path_args(sql, segs);
    sql.push("), ");
    json_type(sql, root, segs);
    sql.push(" IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(").push(root.src());
    path_args(sql, segs);
    sql.push("), '')");
}

/// Present and not JSON null.
pub(crate) fn json_exists(sql: &mut Sql, root: impl JsonSrc, segs: &[String]) {
    sql.push("(");
    index_guards(sql, root, segs);
    sql.push(" AND ");
    json_type(sql, root, segs);
    sql.push(" != 'Null')");
}

/// `summary.weave.status`, as `derive_status` computes it for the returned row.
const STATUS_SQL: &str = "multiIf(exception IS NOT NULL, 'error', ended_at IS NULL, 'running', \
     JSONType(summary, 'status_counts', 'error') IN ('Int64', 'UInt64', 'Double') \
     AND JSONExtractFloat(summary, 'status_counts', 'error') > 0, 'descendant_error', 'success')";

/// `summary.weave.trace_name`: the display name, else the op name of an op ref
/// (`weave:///e/p/op/NAME:digest`), else the raw op name (`op_display_name`).
const TRACE_NAME_SQL: &str = "ifNull(display_name, if(startsWith(op_name, 'weave:///') \
     AND position(substring(op_name, 10), '/op/') > 0, \
     splitByChar(':', substring(substring(op_name, 10), \
     position(substring(op_name, 10), '/op/') + 4))[1], op_name))";

const LATENCY_SQL: &str =
    "intDiv(toUnixTimestamp64Micro(ended_at) - toUnixTimestamp64Micro(started_at), 1000)";

pub(crate) fn field(sql: &mut Sql, f: &CallField) {
    match f {
        CallField::Column(c) => {
            sql.push(c.name());
        }
        CallField::Json(root, segs) => json_string(sql, *root, segs),
        CallField::Status => {
            sql.push(STATUS_SQL);
        }
        CallField::LatencyMs => {
            sql.push(LATENCY_SQL);
        }
        CallField::TraceName => {
            sql.push(TRACE_NAME_SQL);
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
}

// ---------------------------------------------------------------------------------------------
// Feedback on calls (`feedback.[<type>]...` fields of call queries)

/// Whether a calls query reads feedback fields, and so needs [`feedback_join`].
pub(crate) fn uses_feedback(q: &CallsQuery, with_expr: bool) -> bool {
    fn op(o: &TOperand<CallField>) -> bool {
        match o {
            TOperand::Lit(_) => false,
            TOperand::Field(f) => matches!(f, CallField::Feedback(_)),
            TOperand::Convert(inner, ..) => op(inner),
            TOperand::Expr(e) => ex(e),
        }
    }
    fn ex(e: &TExpr<CallField>) -> bool {
        match e {
            TExpr::And(xs) | TExpr::Or(xs) => xs.iter().any(ex),
            TExpr::Not(x) => ex(x),
            TExpr::Cmp(_, a, b) => op(a) || op(b),
            TExpr::IsNull(a) => op(a),
            TExpr::In(a, bs) => op(a) || bs.iter().any(op),
            TExpr::Contains { input, substr, .. } => op(input) || op(substr),
        }
    }
    q.sort.iter().any(|(f, _)| matches!(f, CallField::Feedback(_)))
        || (with_expr && q.expr.as_ref().is_some_and(ex))
}

/// Joins each aggregated call (`c`) with its feedback rows, newest first, as one array
/// `fb_rows` of `(created_at, id, feedback_type, payload JSON, runnable_ref, trigger_ref)`.
/// Calls without feedback get an empty array. Only queries reading feedback fields join.
pub(crate) fn feedback_join(sql: &mut Sql, project: &str) {
    sql.push(
        " LEFT JOIN (SELECT weave_ref, arrayReverseSort(groupArray(tuple(created_at, id, \
         feedback_type, if(empty(payload_q), payload, payload_q), ifNull(runnable_ref, ''), \
         ifNull(trigger_ref, '')))) AS fb_rows FROM feedback FINAL WHERE project_id = ",
    )
    .bind_str(project)
    .push(
        " GROUP BY weave_ref) AS fb ON fb.weave_ref = concat('weave:///', c.project_id, \
         '/call/', c.id)",
    );
}

/// `feedback.[<type>]...`: of the call's feedback rows of the type, the newest non-empty value,
/// else `''` (as SQLite's correlated subquery computes it).
pub(crate) fn feedback_of_call(sql: &mut Sql, sel: &FeedbackSel) {
    sql.push("arrayFirst(x -> x != '', arrayMap(r -> ");
    if let Some(ty) = &sel.feedback_type {
        sql.push("if(tupleElement(r, 3) = ").bind_str(ty).push(", ");
    }
    match &sel.target {
        FeedbackTarget::Payload(segs) => {
            // Objects and arrays read as their JSON text here, not as '' (the reference server
            // reads feedback with JSON_VALUE allowing complex values): the SDK's scored_by tests
            // `payload.output`, usually a dict, for non-emptiness.
            let src = "tupleElement(r, 4)";
            sql.push("if(");
            json_exists(sql, src, segs);
            sql.push(" AND ");
            json_type(sql, src, segs);
            sql.push(" IN ('Object', 'Array'), JSONExtractRaw(").push(src);
            path_args(sql, segs);
            sql.push("), ");
            json_string(sql, src, segs);
            sql.push(")");
        }
        FeedbackTarget::RunnableRef => {
            sql.push("tupleElement(r, 5)");
        }
        FeedbackTarget::TriggerRef => {
            sql.push("tupleElement(r, 6)");
        }
    }
    if sel.feedback_type.is_some() {
        sql.push(", '')");
    }
    sql.push(", fb_rows))");
}

// ---------------------------------------------------------------------------------------------
// Feedback rows (`/feedback/*`)

/// The payload's JSON text for the query language (see `FeedbackRow::payload_q`).
const PAYLOAD_SRC: &str = "if(empty(payload_q), payload, payload_q)";

impl FieldSql<Sql> for FeedbackField {
    fn value(&self, sql: &mut Sql) {
        match self {
            FeedbackField::Column(c) => {
                sql.push(c.name());
            }
            FeedbackField::Payload(segs) => json_string(sql, PAYLOAD_SRC, segs),
        }
    }
    fn exists(&self, sql: &mut Sql) {
        if let FeedbackField::Payload(segs) = self {
            json_exists(sql, PAYLOAD_SRC, segs)
        }
    }
}

/// Table feedback rows are written to (migrations/0005_feedback.sql).
pub const FEEDBACK: &str = "feedback";

/// Columns of a feedback row, in the order and with the names of `FeedbackReadRow`.
const FEEDBACK_COLUMNS: &str = "project_id, id, weave_ref, feedback_type, creator, payload, \
     toUnixTimestamp64Micro(created_at) AS created_us, wb_user_id, annotation_ref, runnable_ref, \
     call_ref, trigger_ref, queue_id, extra";

pub(crate) fn feedback_where(sql: &mut Sql, q: &FeedbackQuery) {
    sql.push(" FROM feedback FINAL WHERE project_id = ").bind_str(q.project.as_str());
    and_expr(sql, q.expr.as_ref());
}

/// `/feedback/query`: the project's rows matching the query, sorted and paged.
pub fn select_feedback(q: &FeedbackQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(FEEDBACK_COLUMNS);
    feedback_where(&mut sql, q);
    order_by(&mut sql, &q.sort);
    paging(&mut sql, q.limit, q.offset);
    sql
}

/// How many rows `select_feedback` matches without paging.
pub fn count_feedback(q: &FeedbackQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT count()");
    feedback_where(&mut sql, q);
    sql
}

/// The project's rows with these ids (to skip ids already stored).
pub fn feedback_by_ids(project: &str, ids: &[String]) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(FEEDBACK_COLUMNS);
    sql.push(" FROM feedback FINAL WHERE project_id = ").bind_str(project);
    sql.push(" AND id IN ").bind(Param::StrList(ids.to_vec()));
    sql
}

/// The project's rows on these targets, oldest first.
pub fn feedback_for_refs(project: &str, refs: &[String]) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ").push(FEEDBACK_COLUMNS);
    sql.push(" FROM feedback FINAL WHERE project_id = ").bind_str(project);
    sql.push(" AND weave_ref IN ").bind(Param::StrList(refs.to_vec()));
    sql.push(" ORDER BY created_at, id");
    sql
}

/// Hard delete (a lightweight DELETE: rows vanish from reads at once).
pub fn purge_feedback(project: &str, ids: &[String]) -> Sql {
    let mut sql = Sql::default();
    sql.push("DELETE FROM feedback WHERE project_id = ").bind_str(project);
    sql.push(" AND id IN ").bind(Param::StrList(ids.to_vec()));
    sql
}
