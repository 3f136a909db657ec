//! What the statements of the ClickHouse backend share: the builder of statements with
//! server-side parameters (`{p0:String}`), the aggregation of a call's rows, and the compiler
//! of the query language ([`super::compile`]), re-exported here. Each resource's fixed
//! statements live in its module. User values only ever travel as parameters; the only text
//! spliced in is column names, operators and function names chosen from enums.
//!
//! Calls are aggregated at read time from their rows in `call_parts` ([`CALLS_AGG`]): filters,
//! sorting and paging run on the aggregated rows, so a call's start, end, rename and delete
//! rows may arrive in any order and any number of times.

use std::fmt::Write as _;

/// A server-side query parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Str(String),
    Int(i64),
    UInt(u64),
    Float(f64),
    StrList(Vec<String>),
}

impl Param {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Param::Str(_) => "String",
            Param::Int(_) => "Int64",
            Param::UInt(_) => "UInt64",
            Param::Float(_) => "Float64",
            Param::StrList(_) => "Array(String)",
        }
    }
}

/// A statement under construction: text with `{pN:Type}` placeholders plus the values.
#[derive(Debug, Default, Clone)]
pub struct Sql {
    pub text: String,
    pub params: Vec<Param>,
}

impl Sql {
    pub fn new(text: &str) -> Sql {
        Sql { text: text.to_owned(), params: Vec::new() }
    }

    pub fn push(&mut self, s: &str) -> &mut Self {
        self.text.push_str(s);
        self
    }

    pub fn bind(&mut self, p: Param) -> &mut Self {
        let _ = write!(self.text, "{{p{}:{}}}", self.params.len(), p.type_name());
        self.params.push(p);
        self
    }

    pub fn bind_str(&mut self, s: &str) -> &mut Self {
        self.bind(Param::Str(s.to_owned()))
    }

    /// The query, ready to run on `client` (raw: no client-side `?` binding).
    pub fn query(&self, client: &clickhouse::Client) -> clickhouse::query::Query {
        let mut q = client.query_raw(&self.text);
        for (i, p) in self.params.iter().enumerate() {
            let name = format!("p{i}");
            q = match p {
                Param::Str(s) => q.param(&name, s),
                Param::Int(n) => q.param(&name, n),
                Param::UInt(n) => q.param(&name, n),
                Param::Float(f) => q.param(&name, f),
                Param::StrList(l) => q.param(&name, l),
            };
        }
        q
    }
}

// ---------------------------------------------------------------------------------------------
// Calls

/// One call per `(project_id, id)`, aggregated from its rows. Every half is taken from the
/// newest row carrying it (`argMaxIf` by `version`); nullable members go through a one-element
/// tuple so that a newer NULL wins over an older value (aggregates skip bare NULLs). A rename
/// row wins over the display name of any end row, and an end row's name (the TypeScript SDK
/// names calls at their end) over any start row's, whenever each arrived. Duplicate rows
/// change no aggregate. The `WHERE` of the rows (project, and id pre-filters) follows this text.
/// Requires ClickHouse's analyzer (24.3+): aliases equal to column names are resolved to the
/// columns inside the aggregates.
pub(crate) const CALLS_AGG: &str = "SELECT project_id, id,
    argMaxIf(trace_id, version, trace_id IS NOT NULL) AS trace_id,
    countIf(has_start = 1) > 0 AS started,
    countIf(has_end = 1) > 0 AS ended,
    argMaxIf(op_name, version, has_start = 1) AS op_name,
    multiIf(countIf(kind = 'rename') > 0,
            argMaxIf(tuple(display_name), version, kind = 'rename').1,
            countIf(has_end = 1 AND display_name IS NOT NULL) > 0,
            argMaxIf(display_name, version, has_end = 1 AND display_name IS NOT NULL),
            argMaxIf(tuple(display_name), version, has_start = 1).1) AS display_name,
    argMaxIf(tuple(parent_id), version, has_start = 1).1 AS parent_id,
    argMaxIf(tuple(thread_id), version, has_start = 1).1 AS thread_id,
    argMaxIf(tuple(turn_id), version, has_start = 1).1 AS turn_id,
    argMaxIf(started_at, version, has_start = 1) AS started_at,
    argMaxIf(attributes, version, has_start = 1) AS attributes,
    argMaxIf(attributes_q, version, has_start = 1) AS attributes_q,
    argMaxIf(inputs, version, has_start = 1) AS inputs,
    argMaxIf(inputs_q, version, has_start = 1) AS inputs_q,
    argMaxIf(input_refs, version, has_start = 1) AS input_refs,
    argMaxIf(tuple(otel_dump), version, has_start = 1).1 AS otel_dump,
    argMaxIf(tuple(wb_user_id), version, has_start = 1).1 AS wb_user_id,
    argMaxIf(tuple(wb_run_id), version, has_start = 1).1 AS wb_run_id,
    argMaxIf(tuple(wb_run_step), version, has_start = 1).1 AS wb_run_step,
    if(ended, argMaxIf(ended_at, version, has_end = 1), NULL) AS ended_at,
    argMaxIf(summary, version, has_end = 1) AS summary,
    argMaxIf(summary_q, version, has_end = 1) AS summary_q,
    argMaxIf(tuple(output), version, has_end = 1).1 AS output,
    argMaxIf(output_q, version, has_end = 1) AS output_q,
    argMaxIf(output_refs, version, has_end = 1) AS output_refs,
    argMaxIf(tuple(exception), version, has_end = 1).1 AS exception,
    argMaxIf(tuple(wb_run_step_end), version, has_end = 1).1 AS wb_run_step_end,
    if(countIf(kind = 'delete') > 0, minIf(deleted_at, kind = 'delete'), NULL) AS deleted_at
FROM call_parts
WHERE project_id = ";

pub use super::compile::*;

/// Every `{pN:Type}` placeholder names parameter N with its type, in order (the tests of
/// every statement use it).
#[cfg(test)]
pub(crate) fn check_placeholders(sql: &Sql) {
    let mut rest = sql.text.as_str();
    let mut n = 0;
    while let Some(at) = rest.find("{p") {
        let end = rest[at..].find('}').expect("closed placeholder") + at;
        let want = format!("{{p{n}:{}}}", sql.params[n].type_name());
        assert_eq!(&rest[at..=end], want, "{}", sql.text);
        n += 1;
        rest = &rest[end..];
    }
    assert_eq!(n, sql.params.len(), "{}", sql.text);
}

#[cfg(test)]
mod tests {
    use heddle_proto::calls::{CallsQuery, CallsQueryReq};
    use serde_json::json;

    use super::*;

    fn compile(body: serde_json::Value) -> CallsQuery {
        let req: CallsQueryReq = serde_json::from_value(body).unwrap();
        req.validate().unwrap()
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
            "sort_by": [{"field": format!("feedback.[{evil}].trigger_ref"), "direction": "desc"}],
            "limit": 10
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
        let ids = [evil.to_owned()];
        for sql in [
            select_calls(&calls),
            count_calls(&calls),
            select_feedback(&fq),
            count_feedback(&fq),
            feedback_by_ids(evil, &ids),
            feedback_for_refs(evil, &ids),
            purge_feedback(evil, &ids),
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
        assert!(select_calls(&calls).text.contains("LEFT JOIN"), "feedback fields join");
        assert!(!select_calls(&compile(json!({"project_id": "e/p"}))).text.contains("JOIN"));
    }

    #[test]
    fn user_values_are_always_bound() {
        let evil = "x'); DROP TABLE call_parts; --";
        let q = compile(json!({
            "project_id": "e/p",
            "filter": {"op_names": [evil, format!("{evil}:*")], "call_ids": [evil],
                       "input_refs": [evil], "output_refs": [evil], "trace_ids": [evil],
                       "parent_ids": [evil], "thread_ids": [evil], "turn_ids": [evil],
                       "wb_user_ids": [evil], "wb_run_ids": [evil], "trace_roots_only": true},
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": format!("inputs.{evil}.0")}, {"$literal": evil}]},
                {"$contains": {"input": {"$getField": "op_name"}, "substr": {"$literal": evil},
                               "case_insensitive": true}},
                {"$in": [{"$getField": "display_name"}, [{"$literal": evil}]]},
                {"$gt": [{"$convert": {"input": {"$getField": "output.a"}, "to": "double"}},
                         {"$literal": 1.5}]},
                {"$not": [{"$eq": [{"$convert": {"input": {"$getField": "attributes.b"},
                                                 "to": "bool"}}, {"$literal": true}]}]},
                {"$lt": [{"$getField": "started_at"}, {"$literal": "2026-01-01"}]}
            ]}},
            "sort_by": [{"field": format!("summary.{evil}"), "direction": "desc"}],
            "limit": 10, "offset": 5
        }));
        for sql in [select_calls(&q), count_calls(&q)] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
            let bound = |p: &Param| match p {
                Param::Str(s) => s.contains(evil),
                Param::StrList(l) => l.iter().any(|s| s.contains(evil)),
                _ => false,
            };
            assert!(sql.params.iter().any(bound), "{:?}", sql.params);
        }
    }

    /// (name, request, fragments the SQL must contain, parameters it must bind)
    type Case = (&'static str, serde_json::Value, Vec<&'static str>, Vec<Param>);

    #[test]
    fn renders_the_query_language() {
        let s = |v: &str| Param::Str(v.to_owned());
        let cases: Vec<Case> = vec![
            (
                "default order and paging",
                json!({"project_id": "e/p", "limit": 10, "offset": 5}),
                vec![
                    "ORDER BY started_at ASC NULLS FIRST, id ASC NULLS FIRST LIMIT {p2:UInt64} \
                     OFFSET {p3:UInt64}) GROUP BY project_id, id) AS c ORDER BY started_at ASC",
                    "WHERE started AND deleted_at IS NULL",
                ],
                vec![s("e/p"), s("e/p"), Param::UInt(10), Param::UInt(5)],
            ),
            (
                "offset without limit",
                json!({"project_id": "e/p", "offset": 3}),
                vec!["OFFSET {p1:UInt64} ROWS"],
                vec![s("e/p"), Param::UInt(3)],
            ),
            (
                "array indexes are 1-based and only apply to arrays",
                json!({"project_id": "e/p", "query": {"$expr": {"$eq": [
                    {"$getField": "inputs.a.0"}, {"$literal": "x"}]}}}),
                vec!["if(empty(inputs_q), inputs, inputs_q)", "= 'Array'", "JSONExtractString("],
                vec![s("e/p"), s("a"), s("a"), Param::Int(1)],
            ),
            (
                "timestamps compare as DateTime64",
                json!({"project_id": "e/p", "query": {"$expr": {"$gt": [
                    {"$getField": "started_at"}, {"$literal": 1_700_000_000}]}}}),
                vec!["(started_at > fromUnixTimestamp64Micro({p1:Int64}, 'UTC'))"],
                vec![s("e/p"), Param::Int(1_700_000_000_000_000)],
            ),
            (
                "call ids narrow the aggregation by primary key",
                json!({"project_id": "e/p", "filter": {"call_ids": ["a", "b"]}}),
                vec!["WHERE project_id = {p0:String} AND id IN {p1:Array(String)}"],
                vec![s("e/p"), Param::StrList(vec!["a".into(), "b".into()])],
            ),
            (
                "empty thread ids match nothing",
                json!({"project_id": "e/p", "filter": {"thread_ids": []}}),
                vec!["ifNull(thread_id IN {p1:Array(String)}, 0)"],
                vec![s("e/p"), Param::StrList(vec![])],
            ),
            (
                "op name wildcards are prefixes",
                json!({"project_id": "e/p", "filter": {"op_names": ["weave:///e/p/op/f:*"]}}),
                vec!["(op_name IN {p1:Array(String)} OR startsWith(op_name, {p2:String}))"],
                vec![s("e/p"), Param::StrList(vec![]), s("weave:///e/p/op/f:")],
            ),
            (
                "negation treats NULL as false",
                json!({"project_id": "e/p", "query": {"$expr": {"$not": [{"$eq": [
                    {"$getField": "display_name"}, {"$literal": "x"}]}]}}}),
                vec!["(NOT ifNull(((display_name = {p1:String})), 0))"],
                vec![s("e/p"), s("x")],
            ),
            (
                "json sort: present, numeric, then text",
                json!({"project_id": "e/p", "sort_by": [{"field": "inputs.n", "direction": "desc"}]}),
                vec!["!= 'Null') DESC, if(isFinite(", "DESC NULLS LAST, multiIf("],
                vec![s("e/p"), s("n"), s("n")],
            ),
        ];
        for (name, body, fragments, params) in cases {
            let sql = select_calls(&compile(body));
            check_placeholders(&sql);
            for f in fragments {
                assert!(sql.text.contains(f), "{name}: no {f:?} in\n{}", sql.text);
            }
            assert_eq!(sql.params[..params.len()], params[..], "{name}: {}", sql.text);
        }
    }

    #[test]
    fn count_caps_at_limit_and_ignores_order() {
        let q = compile(json!({"project_id": "e/p", "limit": 7,
                               "sort_by": [{"field": "op_name", "direction": "desc"}]}));
        let sql = count_calls(&q);
        assert!(sql.text.starts_with("SELECT count() FROM (SELECT 1 FROM ("), "{}", sql.text);
        assert!(sql.text.ends_with("LIMIT {p1:UInt64})"), "{}", sql.text);
        assert!(!sql.text.contains("ORDER BY"), "{}", sql.text);
    }
}
