//! The query language from structured input: requests built from the grammar of
//! `/calls/stream_query` and `/feedback/query` (operators, known and arbitrary fields, JSON
//! paths, literals, filters, sorting, paging, expand columns), so most inputs get past parsing
//! and typing into the SQL renderers of both dialects.
//!
//! Properties (docs/fuzzing.md): nothing panics; user strings (literals, path segments,
//! feedback types, filter ids, op names), which all carry a marker with SQL metacharacters,
//! never appear in the SQL text, only as bound parameters; one placeholder per parameter;
//! the SQLite statements run on a small database without an error.
#![no_main]

use arbitrary::Arbitrary;
use heddle_fuzz::{PROJECT, calls_request, feedback_request};
use heddle_proto::calls::CallsQueryReq;
use heddle_proto::feedback::FeedbackQueryReq;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

/// Found in the SQL text only if a user value were spliced into it.
const MARKER: &str = "'); DROP TABLE hd_marker; --";
const MARKER_CORE: &str = "hd_marker";

/// A user string: arbitrary text around the marker (or without it).
#[derive(Arbitrary, Debug)]
struct Text {
    pre: String,
    marked: bool,
    post: String,
}

impl Text {
    fn render(&self) -> String {
        let mark = if self.marked { MARKER } else { "" };
        format!("{}{mark}{}", self.pre, self.post)
    }
}

/// Names the catalogs know, and segments the seeded rows hold.
const COLUMNS: &[&str] = &[
    "id",
    "project_id",
    "op_name",
    "display_name",
    "trace_id",
    "parent_id",
    "thread_id",
    "turn_id",
    "exception",
    "wb_user_id",
    "wb_run_id",
    "wb_run_step",
    "wb_run_step_end",
    "started_at",
    "ended_at",
    "deleted_at",
    "summary.weave.status",
    "summary.weave.latency_ms",
    "summary.weave.trace_name",
    "storage_size_bytes",
    "output",
    "weave_ref",
    "feedback_type",
    "creator",
    "created_at",
    "annotation_ref",
    "runnable_ref",
    "call_ref",
    "trigger_ref",
    "queue_id",
];
const ROOTS: &[&str] = &["inputs", "output", "attributes", "summary", "payload", "feedback"];
const SEGMENTS: &[&str] = &[
    "x",
    "s",
    "l",
    "o",
    "k",
    "0",
    "1",
    "2",
    "a",
    "b",
    "c",
    "n",
    "y",
    "z",
    "usage",
    "m",
    "t",
    "status_counts",
    "error",
    "output",
    "score",
    "note",
    "weave",
    "",
];
const CONVERT_TO: &[&str] = &["double", "int", "bool", "string", "exists", "float"];
const CMP: &[&str] = &["$eq", "$gt", "$gte", "$lt", "$lte"];

fn pick(list: &[&str], i: u8) -> String {
    list[i as usize % list.len()].to_owned()
}

#[derive(Arbitrary, Debug)]
enum Seg {
    Known(u8),
    Index(u16),
    Key(Text),
    /// A key with an escaped dot (`k\.x`).
    Dotted(u8, u8),
}

impl Seg {
    fn render(&self) -> String {
        match self {
            Seg::Known(i) => pick(SEGMENTS, *i),
            Seg::Index(i) => i.to_string(),
            Seg::Key(t) => t.render(),
            Seg::Dotted(a, b) => format!("{}\\.{}", pick(SEGMENTS, *a), pick(SEGMENTS, *b)),
        }
    }
}

fn path(root: String, segs: &[Seg]) -> String {
    segs.iter().fold(root, |p, s| format!("{p}.{}", s.render()))
}

#[derive(Arbitrary, Debug)]
enum FeedbackTarget {
    Payload(Vec<Seg>),
    RunnableRef,
    TriggerRef,
    Other(Text),
}

#[derive(Arbitrary, Debug)]
enum Field {
    Column(u8),
    Json(u8, Vec<Seg>),
    /// `feedback.[<type>].<target>`; `None` is `*`.
    Feedback(Option<Text>, FeedbackTarget),
    Raw(Text),
}

impl Field {
    fn render(&self) -> String {
        match self {
            Field::Column(i) => pick(COLUMNS, *i),
            Field::Json(root, segs) => path(pick(ROOTS, *root), segs),
            Field::Feedback(ty, target) => {
                let ty = ty.as_ref().map_or("*".to_owned(), Text::render);
                let target = match target {
                    FeedbackTarget::Payload(segs) => path("payload".into(), segs),
                    FeedbackTarget::RunnableRef => "runnable_ref".into(),
                    FeedbackTarget::TriggerRef => "trigger_ref".into(),
                    FeedbackTarget::Other(t) => t.render(),
                };
                format!("feedback.[{ty}].{target}")
            }
            Field::Raw(t) => t.render(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Scalar {
    Str(Text),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
    /// Timestamps as the SDK sends them, for timestamp columns.
    Time(u32),
    /// Digits as text: numeric-looking strings.
    Numeric(i32),
}

impl Scalar {
    fn render(&self) -> Value {
        match self {
            Scalar::Str(t) => Value::String(t.render()),
            Scalar::Int(i) => json!(i),
            Scalar::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Scalar::Bool(b) => json!(b),
            Scalar::Null => Value::Null,
            Scalar::Time(s) => {
                let (d, r) = (s / 86_400 % 28 + 1, s % 86_400);
                json!(format!("2026-01-{d:02}T{:02}:{:02}:{:02}Z", r / 3600, r / 60 % 60, r % 60))
            }
            Scalar::Numeric(n) => json!(n.to_string()),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Literal {
    Scalar(Scalar),
    List(Vec<Scalar>),
}

#[derive(Arbitrary, Debug)]
enum Operand {
    Lit(Literal),
    Field(Field),
    Convert(Box<Operand>, u8),
    Expr(Box<Expr>),
}

impl Operand {
    fn render(&self) -> Value {
        match self {
            Operand::Lit(Literal::Scalar(s)) => json!({"$literal": s.render()}),
            Operand::Lit(Literal::List(l)) => {
                json!({"$literal": l.iter().map(Scalar::render).collect::<Vec<_>>()})
            }
            Operand::Field(f) => json!({"$getField": f.render()}),
            Operand::Convert(inner, to) => {
                json!({"$convert": {"input": inner.render(), "to": pick(CONVERT_TO, *to)}})
            }
            Operand::Expr(e) => e.render(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Cmp(u8, Operand, Operand),
    In(Operand, Vec<Operand>),
    Contains(Operand, Operand, Option<bool>),
}

impl Expr {
    fn render(&self) -> Value {
        match self {
            Expr::And(xs) => json!({"$and": xs.iter().map(Expr::render).collect::<Vec<_>>()}),
            Expr::Or(xs) => json!({"$or": xs.iter().map(Expr::render).collect::<Vec<_>>()}),
            Expr::Not(x) => json!({"$not": [x.render()]}),
            Expr::Cmp(op, a, b) => {
                let mut m = Map::new();
                m.insert(pick(CMP, *op), json!([a.render(), b.render()]));
                Value::Object(m)
            }
            Expr::In(a, bs) => {
                json!({"$in": [a.render(), bs.iter().map(Operand::render).collect::<Vec<_>>()]})
            }
            Expr::Contains(a, b, ci) => {
                let mut args = json!({"input": a.render(), "substr": b.render()});
                if let Some(ci) = ci {
                    args["case_insensitive"] = json!(ci);
                }
                json!({"$contains": args})
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct OpName {
    name: Text,
    wildcard: bool,
}

#[derive(Arbitrary, Debug)]
struct Filter {
    op_names: Option<Vec<OpName>>,
    input_refs: Option<Vec<Text>>,
    output_refs: Option<Vec<Text>>,
    parent_ids: Option<Vec<Text>>,
    trace_ids: Option<Vec<Text>>,
    call_ids: Option<Vec<Text>>,
    thread_ids: Option<Vec<Text>>,
    turn_ids: Option<Vec<Text>>,
    wb_user_ids: Option<Vec<Text>>,
    wb_run_ids: Option<Vec<Text>>,
    trace_roots_only: Option<bool>,
}

fn texts(l: &Option<Vec<Text>>) -> Value {
    l.as_ref().map_or(Value::Null, |l| json!(l.iter().map(Text::render).collect::<Vec<_>>()))
}

impl Filter {
    fn render(&self) -> Value {
        let ops = self.op_names.as_ref().map_or(Value::Null, |l| {
            json!(
                l.iter()
                    .map(|o| o.name.render() + if o.wildcard { ":*" } else { "" })
                    .collect::<Vec<_>>()
            )
        });
        json!({
            "op_names": ops,
            "input_refs": texts(&self.input_refs), "output_refs": texts(&self.output_refs),
            "parent_ids": texts(&self.parent_ids), "trace_ids": texts(&self.trace_ids),
            "call_ids": texts(&self.call_ids), "thread_ids": texts(&self.thread_ids),
            "turn_ids": texts(&self.turn_ids), "wb_user_ids": texts(&self.wb_user_ids),
            "wb_run_ids": texts(&self.wb_run_ids), "trace_roots_only": self.trace_roots_only,
        })
    }
}

#[derive(Arbitrary, Debug)]
struct Request {
    query: Option<Expr>,
    filter: Option<Filter>,
    sort_by: Option<Vec<(Field, bool)>>,
    limit: Option<i64>,
    offset: Option<i64>,
    columns: Option<Vec<Field>>,
    expand_columns: Option<Vec<Field>>,
    return_expanded_column_values: Option<bool>,
}

impl Request {
    fn render(&self) -> Value {
        let fields =
            |l: &Option<Vec<Field>>| l.as_ref().map(|l| l.iter().map(Field::render).collect());
        let columns: Option<Vec<String>> = fields(&self.columns);
        let expand: Option<Vec<String>> = fields(&self.expand_columns);
        let sort = self.sort_by.as_ref().map(|s| {
            s.iter()
                .map(|(f, desc)| {
                    json!({"field": f.render(), "direction": if *desc { "desc" } else { "asc" }})
                })
                .collect::<Vec<_>>()
        });
        json!({
            "project_id": PROJECT,
            "query": self.query.as_ref().map(|e| json!({"$expr": e.render()})),
            "filter": self.filter.as_ref().map(Filter::render),
            "sort_by": sort,
            "limit": self.limit,
            "offset": self.offset,
            "columns": columns,
            "expand_columns": expand,
            "return_expanded_column_values": self.return_expanded_column_values,
        })
    }
}

fuzz_target!(|r: Request| {
    let body = r.render();
    if let Ok(req) = serde_json::from_value::<CallsQueryReq>(body.clone()) {
        calls_request(req, Some(MARKER_CORE));
    }
    if let Ok(req) = serde_json::from_value::<FeedbackQueryReq>(body) {
        feedback_request(req, Some(MARKER_CORE));
    }
});
