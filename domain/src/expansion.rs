//! `expand_columns` of `/calls/stream_query` and `/calls/query_stats`
//! (docs/api/calls.md#count-calls, docs/api/calls.md#stream-calls): the plan that splits a calls
//! query into what SQL answers and what must wait until refs are resolved, and the in-memory
//! evaluation of that second part. Pure code; the query crate does the reading and resolving.
//!
//! As in the reference server: expand columns are dot paths (`inputs.example`, `output`) into a
//! call; a ref string found there (dict keys only, no list indexes) is replaced by the value it
//! points at, shallower paths first so `inputs.model.prompt` resolves inside the expanded
//! `inputs.model`. A `$getField` or `sort_by` field that goes *through* an expand column
//! (`inputs.example.label` with `inputs.example` listed) reads the resolved value. Such
//! conditions cannot be SQL here (the store would have to join objects and table rows in both
//! dialects), so they run in Rust on the expanded rows, with the semantics the SQL renderers
//! give every other field (string semantics of JSON paths, NULL rules, sort order).

use serde_json::Value;
use serde_json::value::RawValue;

use heddle_proto::ProtoError;
use heddle_proto::calls::{
    CallColumn, CallField, CallsFilter, CallsQuery, CallsQueryReq, Columns, JsonRoot,
    derive_status, op_display_name,
};
use heddle_proto::ids::ProjectId;
use heddle_proto::limits;
use heddle_proto::refs;
use heddle_ql::eval::{Cell, Row, path};
use heddle_ql::{Direction, TExpr, TOperand, split_path};

/// What a calls request needs: plain SQL, or SQL for the candidates plus work on expanded rows.
#[derive(Debug, Clone)]
pub enum Planned {
    Sql(CallsQuery),
    Expand { candidates: CallsQuery, plan: Box<ExpandPlan> },
}

#[derive(Debug, Clone)]
pub struct ExpandPlan {
    /// Refs resolve only inside this project (tenancy; the reference server's rule too).
    pub project: ProjectId,
    /// Expand columns as path segments, root member first (`["inputs", "example"]`), shallowest
    /// first; columns outside `inputs`/`output`/`attributes`/`summary` are dropped.
    pub columns: Vec<Vec<String>>,
    /// `return_expanded_column_values`: false = expand only to filter and sort.
    pub return_values: bool,
    /// The conjuncts of `query` that read through an expand column; the candidates query holds
    /// the rest. `None` when every condition is SQL.
    pub residual: Option<TExpr<CallField>>,
    /// The whole order, when any key reads through an expand column (then the candidates come
    /// unordered and are sorted here). `None` when SQL orders.
    pub sort: Option<Vec<(CallField, Direction)>>,
    /// Paging of the final result, when the candidates query cannot apply it.
    pub limit: Option<u64>,
    pub offset: u64,
    /// The projection the client asked for (the candidates query may read more).
    pub user_columns: Option<Columns>,
}

impl ExpandPlan {
    /// Whether rows must be filtered or ordered after expansion (rather than only expanded).
    pub fn in_memory(&self) -> bool {
        self.residual.is_some() || self.sort.is_some()
    }
}

fn root_of(name: &str) -> Option<JsonRoot> {
    Some(match name {
        "inputs" => JsonRoot::Inputs,
        "output" => JsonRoot::Output,
        "attributes" => JsonRoot::Attributes,
        "summary" => JsonRoot::Summary,
        _ => return None,
    })
}

fn root_name(root: JsonRoot) -> &'static str {
    match root {
        JsonRoot::Inputs => "inputs",
        JsonRoot::Output => "output",
        JsonRoot::Attributes => "attributes",
        JsonRoot::Summary => "summary",
    }
}

/// Whether `field` reads strictly below one of `columns`.
fn through(field: &CallField, columns: &[Vec<String>]) -> bool {
    let CallField::Json(root, segs) = field else { return false };
    columns.iter().any(|col| {
        col[0] == root_name(*root)
            && col.len() - 1 < segs.len()
            && col[1..] == segs[..col.len() - 1]
    })
}

fn expr_through(e: &TExpr<CallField>, columns: &[Vec<String>]) -> bool {
    let mut hit = false;
    visit_fields(e, &mut |f| hit |= through(f, columns));
    hit
}

fn visit_fields(e: &TExpr<CallField>, f: &mut impl FnMut(&CallField)) {
    match e {
        TExpr::And(xs) | TExpr::Or(xs) => xs.iter().for_each(|x| visit_fields(x, f)),
        TExpr::Not(x) => visit_fields(x, f),
        TExpr::Cmp(_, a, b) => {
            visit_operand(a, f);
            visit_operand(b, f);
        }
        TExpr::IsNull(a) => visit_operand(a, f),
        TExpr::In(a, bs) => {
            visit_operand(a, f);
            bs.iter().for_each(|b| visit_operand(b, f));
        }
        TExpr::Contains { input, substr, .. } => {
            visit_operand(input, f);
            visit_operand(substr, f);
        }
    }
}

fn visit_operand(o: &TOperand<CallField>, f: &mut impl FnMut(&CallField)) {
    match o {
        TOperand::Lit(_) => {}
        TOperand::Field(x) => f(x),
        TOperand::Convert(inner, ..) => visit_operand(inner, f),
        TOperand::Expr(e) => visit_fields(e, f),
    }
}

fn and(mut xs: Vec<TExpr<CallField>>) -> Option<TExpr<CallField>> {
    match xs.len() {
        0 => None,
        1 => xs.pop(),
        _ => Some(TExpr::And(xs)),
    }
}

/// Validates `req` like [`CallsQueryReq::validate`] and decides how its `expand_columns` are
/// served.
pub fn plan(mut req: CallsQueryReq) -> Result<Planned, ProtoError> {
    let expand = req.expand_columns.take().unwrap_or_default();
    if expand.len() > limits::MAX_EXPAND_COLUMNS {
        return Err(ProtoError::invalid(format!(
            "{} expand_columns: at most {} are accepted",
            expand.len(),
            limits::MAX_EXPAND_COLUMNS
        )));
    }
    if let Some(c) = expand.iter().find(|c| c.split('.').count() > limits::MAX_PATH_SEGMENTS) {
        let head: String = c.chars().take(64).collect();
        return Err(ProtoError::invalid(format!(
            "expand column {head:?}... has more than {} segments",
            limits::MAX_PATH_SEGMENTS
        )));
    }
    let return_values = req.return_expanded_column_values.unwrap_or(true);
    let mut q = req.validate()?;
    let mut columns: Vec<Vec<String>> = expand
        .iter()
        .map(|c| split_path(c))
        .filter(|segs| root_of(&segs[0]).is_some() && segs.iter().all(|s| !s.is_empty()))
        .collect();
    columns.sort();
    columns.dedup();
    columns.sort_by_key(Vec::len);
    if columns.is_empty() {
        return Ok(Planned::Sql(q));
    }
    let (sql, residual) = match q.expr.take() {
        None => (None, None),
        Some(TExpr::And(xs)) => {
            let (through, plain): (Vec<_>, Vec<_>) =
                xs.into_iter().partition(|x| expr_through(x, &columns));
            (and(plain), and(through))
        }
        Some(e) if expr_through(&e, &columns) => (None, Some(e)),
        Some(e) => (Some(e), None),
    };
    q.expr = sql;
    let sort = q.sort.iter().any(|(f, _)| through(f, &columns)).then(|| q.sort.clone());
    // Feedback fields live in the store, not in the call row the in-memory part evaluates.
    let mut feedback_in_memory = false;
    if let Some(r) = &residual {
        visit_fields(r, &mut |f| feedback_in_memory |= matches!(f, CallField::Feedback(_)));
    }
    if let Some(sort) = &sort {
        feedback_in_memory |= sort.iter().any(|(f, _)| matches!(f, CallField::Feedback(_)));
    }
    if feedback_in_memory {
        return Err(ProtoError::invalid(
            "feedback fields cannot be combined with expanded columns in one condition or \
             sort yet: put them in separate $and terms",
        ));
    }
    if !return_values && residual.is_none() && sort.is_none() {
        return Ok(Planned::Sql(q));
    }
    let plan = ExpandPlan {
        project: q.project.clone(),
        columns,
        return_values,
        residual,
        sort,
        limit: q.limit,
        offset: q.offset,
        user_columns: q.columns,
    };
    if plan.in_memory() {
        // The candidates: every call the SQL part matches, whole (the conditions may read
        // any member), paged here after filtering.
        q.limit = None;
        q.offset = 0;
        q.columns = None;
        if plan.sort.is_some() {
            q.sort = vec![(CallField::Column(CallColumn::Id), Direction::Asc)];
        }
    }
    Ok(Planned::Expand { candidates: q, plan: Box::new(plan) })
}

/// A calls request without sorting, paging or projection, for counting: `query_stats` takes a
/// `CallsQueryReq` body but only its filters matter.
pub fn for_count(req: CallsQueryReq) -> CallsQueryReq {
    CallsQueryReq { sort_by: None, offset: None, columns: None, ..req }
}

// ---------------------------------------------------------------------------------------------
// Rows with parsed members

/// A call with its JSON members parsed, so expand columns can be replaced and conditions
/// evaluated; written back into the call only when the client wants expanded values.
#[derive(Debug)]
pub struct CallValues {
    pub call: heddle_proto::calls::Call,
    pub inputs: Value,
    pub output: Value,
    pub attributes: Value,
}

fn parse_raw(raw: Option<&RawValue>) -> Value {
    raw.and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or(Value::Null)
}

impl CallValues {
    pub fn new(call: heddle_proto::calls::Call) -> CallValues {
        CallValues {
            inputs: parse_raw(Some(&call.inputs)),
            output: parse_raw(call.output.as_deref()),
            attributes: parse_raw(Some(&call.attributes)),
            call,
        }
    }

    pub fn root(&self, root: JsonRoot) -> &Value {
        match root {
            JsonRoot::Inputs => &self.inputs,
            JsonRoot::Output => &self.output,
            JsonRoot::Attributes => &self.attributes,
            JsonRoot::Summary => &self.call.summary,
        }
    }

    fn root_mut(&mut self, root: JsonRoot) -> &mut Value {
        match root {
            JsonRoot::Inputs => &mut self.inputs,
            JsonRoot::Output => &mut self.output,
            JsonRoot::Attributes => &mut self.attributes,
            JsonRoot::Summary => &mut self.call.summary,
        }
    }

    /// The value at an expand column (dict keys only, as the reference server walks them).
    fn at(&self, col: &[String]) -> Option<&Value> {
        let mut v = self.root(root_of(&col[0])?);
        for seg in &col[1..] {
            v = v.as_object()?.get(seg)?;
        }
        Some(v)
    }

    fn at_mut(&mut self, col: &[String]) -> Option<&mut Value> {
        let mut v = self.root_mut(root_of(&col[0])?);
        for seg in &col[1..] {
            v = v.as_object_mut()?.get_mut(seg)?;
        }
        Some(v)
    }

    /// The ref string at an expand column, if that is what it holds.
    pub fn ref_at(&self, col: &[String]) -> Option<&str> {
        self.at(col).and_then(Value::as_str).filter(|s| refs::is_ref(s))
    }

    /// Replaces the ref at `col` by what it resolved to; a dict gets `_ref` (the original ref
    /// string) unless it has one — the reference server's rule.
    pub fn replace(&mut self, col: &[String], mut val: Value) {
        let Some(slot) = self.at_mut(col) else { return };
        if let (Value::Object(m), Value::String(uri)) = (&mut val, &*slot)
            && !m.contains_key("_ref")
        {
            m.insert("_ref".to_owned(), Value::String(uri.clone()));
        }
        *slot = val;
    }

    /// The call to return: with the expanded members when `expanded`, else as read.
    pub fn into_call(self, expanded: bool) -> heddle_proto::calls::Call {
        let mut call = self.call;
        if expanded {
            let raw = |v: &Value| serde_json::value::to_raw_value(v).expect("JSON serialises");
            call.inputs = raw(&self.inputs);
            call.attributes = raw(&self.attributes);
            call.output = (!self.output.is_null()).then(|| raw(&self.output));
        }
        call
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation: the query language's evaluator (`heddle_ql::eval`) over a call's fields.

pub use heddle_ql::eval::{KeyPart, Val, compare_keys, eval, sort_key};

fn opt_str(s: &Option<String>) -> Val {
    s.as_ref().map_or(Val::Null, |s| Val::Str(s.clone()))
}

fn column(c: &CallValues, col: CallColumn) -> Val {
    use CallColumn::*;
    let call = &c.call;
    match col {
        Id => Val::Str(call.id.clone()),
        ProjectId => Val::Str(call.project_id.as_str().to_owned()),
        OpName => Val::Str(call.op_name.clone()),
        DisplayName => opt_str(&call.display_name),
        TraceId => Val::Str(call.trace_id.clone()),
        ParentId => opt_str(&call.parent_id),
        ThreadId => opt_str(&call.thread_id),
        TurnId => opt_str(&call.turn_id),
        Exception => opt_str(&call.exception),
        WbUserId => opt_str(&call.wb_user_id),
        WbRunId => opt_str(&call.wb_run_id),
        WbRunStep => call.wb_run_step.map_or(Val::Null, Val::Int),
        WbRunStepEnd => call.wb_run_step_end.map_or(Val::Null, Val::Int),
        StartedAt => Val::Int(call.started_at.0),
        EndedAt => call.ended_at.map_or(Val::Null, |m| Val::Int(m.0)),
        DeletedAt => call.deleted_at.map_or(Val::Null, |m| Val::Int(m.0)),
    }
}

impl Row<CallField> for CallValues {
    fn cell(&self, f: &CallField) -> Cell<'_> {
        let call = &self.call;
        Cell::Val(match f {
            CallField::Column(col) => column(self, *col),
            CallField::Json(root, segs) => return Cell::Json(path(self.root(*root), segs)),
            CallField::Status => Val::Str(
                derive_status(call.exception.is_some(), call.ended_at.is_some(), &call.summary)
                    .to_owned(),
            ),
            CallField::LatencyMs => {
                call.ended_at.map_or(Val::Null, |e| Val::Int((e.0 - call.started_at.0) / 1000))
            }
            CallField::TraceName => Val::Str(match call.display_name.as_deref() {
                Some(d) if !d.is_empty() => d.to_owned(),
                _ => op_display_name(&call.op_name).to_owned(),
            }),
            // `plan` keeps feedback fields out of the in-memory part.
            CallField::Feedback(_) => unreachable!("feedback fields are evaluated in SQL"),
        })
    }
}

/// A call-ids filter for fetching a page of already chosen calls.
pub fn by_ids(project: &ProjectId, ids: Vec<String>, columns: Option<Columns>) -> CallsQuery {
    CallsQuery {
        project: project.clone(),
        filter: CallsFilter { call_ids: Some(ids), ..Default::default() },
        expr: None,
        sort: vec![(CallField::Column(CallColumn::Id), Direction::Asc)],
        limit: None,
        offset: 0,
        columns,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use heddle_proto::calls::Call;
    use heddle_proto::time::Micros;

    fn req(body: Value) -> CallsQueryReq {
        serde_json::from_value(body).unwrap()
    }

    fn call(inputs: Value, output: Value) -> CallValues {
        let raw = |v: &Value| serde_json::value::to_raw_value(v).unwrap();
        CallValues::new(Call {
            id: "c1".into(),
            project_id: ProjectId::parse("e/p").unwrap(),
            op_name: "weave:///e/p/op/f:abc".into(),
            display_name: None,
            trace_id: "t".into(),
            parent_id: None,
            thread_id: None,
            turn_id: None,
            started_at: Micros(1_000_000),
            ended_at: Some(Micros(3_500_000)),
            attributes: raw(&json!({})),
            inputs: raw(&inputs),
            output: (!output.is_null()).then(|| raw(&output)),
            exception: None,
            summary: json!({}),
            otel_dump: None,
            wb_user_id: None,
            wb_username: None,
            wb_run_id: None,
            wb_run_step: Some(3),
            wb_run_step_end: None,
            deleted_at: None,
            expire_at: None,
            storage_size_bytes: None,
            total_storage_size_bytes: None,
        })
    }

    fn residual_of(body: Value) -> (CallsQuery, ExpandPlan) {
        match plan(req(body)).unwrap() {
            Planned::Expand { candidates, plan } => (candidates, *plan),
            Planned::Sql(q) => panic!("expected an expand plan, got {q:?}"),
        }
    }

    #[test]
    fn plans_split_sql_from_expanded_conditions() {
        // No expand columns, or only unrelated ones with nothing to return: plain SQL.
        assert!(matches!(plan(req(json!({"project_id": "e/p"}))).unwrap(), Planned::Sql(_)));
        let q = json!({"project_id": "e/p", "expand_columns": ["inputs.x", "op_name"],
                       "return_expanded_column_values": false});
        assert!(matches!(plan(req(q)).unwrap(), Planned::Sql(_)));

        // Expansion only: SQL pages as usual.
        let (q, plan) = residual_of(json!({"project_id": "e/p", "expand_columns": ["inputs.x"],
                                           "limit": 5, "offset": 2}));
        assert!(!plan.in_memory());
        assert_eq!((q.limit, q.offset), (Some(5), 2));

        // A conjunct through `inputs.x` moves out of SQL; the rest stays.
        let (q, plan) = residual_of(json!({
            "project_id": "e/p", "expand_columns": ["inputs.x.y", "inputs.x", "inputs.x.y"],
            "limit": 5,
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": "inputs.x.label"}, {"$literal": "a"}]},
                {"$eq": [{"$getField": "inputs.x"}, {"$literal": "ref"}]},
                {"$eq": [{"$getField": "op_name"}, {"$literal": "f"}]}
            ]}}
        }));
        assert!(matches!(q.expr, Some(TExpr::And(ref xs)) if xs.len() == 2), "{:?}", q.expr);
        assert!(matches!(plan.residual, Some(TExpr::Cmp(..))));
        assert_eq!(plan.columns, [vec!["inputs", "x"], vec!["inputs", "x", "y"]]);
        assert_eq!((q.limit, plan.limit, plan.sort.is_none()), (None, Some(5), true));

        // Sorting through an expand column sorts in memory.
        let (q, plan) = residual_of(json!({
            "project_id": "e/p", "expand_columns": ["output"],
            "sort_by": [{"field": "output.score", "direction": "desc"}]
        }));
        assert_eq!(plan.sort.unwrap().len(), 2, "id is the tiebreaker");
        assert_eq!(q.sort, [(CallField::Column(CallColumn::Id), Direction::Asc)]);
    }

    #[test]
    fn expansion_replaces_refs_and_adds_ref_to_dicts() {
        let r = "weave:///e/p/object/ds:abc/attr/rows/id/r1";
        let mut c =
            call(json!({"example": r, "n": 1, "m": "weave:///e/p/object/m:d"}), json!(null));
        let col = vec!["inputs".to_owned(), "example".to_owned()];
        assert_eq!(c.ref_at(&col), Some(r));
        assert_eq!(c.ref_at(&["inputs".to_owned(), "n".to_owned()]), None);
        c.replace(&col, json!({"label": "a"}));
        let m = vec!["inputs".to_owned(), "m".to_owned()];
        c.replace(&m, json!([1, 2]));
        let call = c.into_call(true);
        let inputs: Value = serde_json::from_str(call.inputs.get()).unwrap();
        assert_eq!(inputs, json!({"example": {"label": "a", "_ref": r}, "n": 1, "m": [1, 2]}));
    }

    #[test]
    fn evaluation_follows_sql_semantics() {
        let c = call(json!({"x": {"label": "Abc", "n": 2.5, "flag": true, "nil": null}}), json!(7));
        let cases = [
            (json!({"$eq": [{"$getField": "inputs.x.label"}, {"$literal": "Abc"}]}), Some(true)),
            (json!({"$eq": [{"$getField": "inputs.x.n"}, {"$literal": "2.5"}]}), Some(true)),
            (json!({"$eq": [{"$getField": "inputs.x.flag"}, {"$literal": "true"}]}), Some(true)),
            (json!({"$eq": [{"$getField": "inputs.x"}, {"$literal": ""}]}), Some(true)),
            (json!({"$eq": [{"$getField": "inputs.x.nil"}, {"$literal": null}]}), Some(true)),
            (
                json!({"$gt": [{"$convert": {"input": {"$getField": "inputs.x.n"}, "to": "double"}}, {"$literal": 2}]}),
                Some(true),
            ),
            (
                json!({"$gt": [{"$convert": {"input": {"$getField": "inputs.x.label"}, "to": "double"}}, {"$literal": 2}]}),
                None,
            ),
            (
                json!({"$not": [{"$gt": [{"$convert": {"input": {"$getField": "inputs.x.label"}, "to": "double"}}, {"$literal": 2}]}]}),
                Some(true),
            ),
            (
                json!({"$eq": [{"$convert": {"input": {"$getField": "inputs.x.nil"}, "to": "exists"}}, {"$literal": false}]}),
                Some(true),
            ),
            (
                json!({"$contains": {"input": {"$getField": "inputs.x.label"}, "substr": {"$literal": "ab"}, "case_insensitive": true}}),
                Some(true),
            ),
            (
                json!({"$contains": {"input": {"$getField": "inputs.x.label"}, "substr": {"$literal": "ab"}}}),
                Some(false),
            ),
            (
                json!({"$in": [{"$getField": "output"}, [{"$literal": "6"}, {"$literal": "7"}]]}),
                Some(true),
            ),
            (
                json!({"$eq": [{"$getField": "summary.weave.status"}, {"$literal": "success"}]}),
                Some(true),
            ),
            (
                json!({"$eq": [{"$getField": "summary.weave.latency_ms"}, {"$literal": 2500}]}),
                Some(true),
            ),
            (
                json!({"$eq": [{"$getField": "summary.weave.trace_name"}, {"$literal": "f"}]}),
                Some(true),
            ),
            (json!({"$gte": [{"$getField": "started_at"}, {"$literal": 1}]}), Some(true)),
            (json!({"$eq": [{"$getField": "wb_run_step"}, {"$literal": 3}]}), Some(true)),
            (json!({"$eq": [{"$getField": "parent_id"}, {"$literal": "p"}]}), None),
            (
                json!({"$or": [{"$eq": [{"$getField": "parent_id"}, {"$literal": "p"}]}, {"$eq": [{"$literal": 1}, {"$literal": 1}]}]}),
                Some(true),
            ),
        ];
        for (q, want) in cases {
            let e = heddle_ql::Query::parse(&json!({ "$expr": q.clone() }))
                .unwrap()
                .typed(&heddle_proto::calls::CallCatalog)
                .unwrap();
            assert_eq!(eval(&e, &c), want, "{q}");
        }
    }

    #[test]
    fn sort_keys_order_like_sql() {
        let sort = vec![(CallField::Json(JsonRoot::Inputs, vec!["k".into()]), Direction::Desc)];
        let rows =
            [json!({"k": "b"}), json!({"k": 10}), json!({}), json!({"k": 9}), json!({"k": "a"})];
        let mut keyed: Vec<(Vec<KeyPart>, usize)> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (sort_key(&sort, &call(r.clone(), json!(null))), i))
            .collect();
        keyed.sort_by(|a, b| compare_keys(&sort, &a.0, &b.0));
        let order: Vec<usize> = keyed.iter().map(|k| k.1).collect();
        // Present first; numbers (desc) before text (desc); missing last.
        assert_eq!(order, [1, 3, 0, 4, 2]);
    }
}
