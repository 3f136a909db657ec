//! The parsed query (docs/query-language.md): JSON into an AST. Field names stay strings here;
//! each resource (calls, feedback, costs) resolves them against its own catalog ([`crate::typed`]).

use serde_json::Value;

use crate::QlError;
use crate::limits;

/// Bounds of one query ([`crate::limits`]): nesting, and terms (every operator and operand
/// counts once), so a query cannot blow up the SQL or the number of bound parameters.
pub const MAX_DEPTH: usize = limits::MAX_QUERY_DEPTH;
pub const MAX_NODES: usize = limits::MAX_QUERY_TERMS;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Cmp(CmpOp, Operand, Operand),
    In(Operand, Vec<Operand>),
    Contains { input: Operand, substr: Operand, case_insensitive: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Gt,
    Gte,
    Lt,
    Lte,
}

impl CmpOp {
    pub fn sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Gt => ">",
            CmpOp::Gte => ">=",
            CmpOp::Lt => "<",
            CmpOp::Lte => "<=",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Literal(Value),
    Field(String),
    Convert(Box<Operand>, ConvertTo),
    Expr(Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvertTo {
    Double,
    Int,
    Bool,
    String,
    Exists,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Asc,
    Desc,
}

/// One `sort_by` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortBy {
    pub field: String,
    pub direction: Direction,
}

impl<'de> serde::Deserialize<'de> for SortBy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Raw {
            field: String,
            direction: Option<String>,
        }
        let raw = Raw::deserialize(d)?;
        check_field_name(&raw.field).map_err(serde::de::Error::custom)?;
        let direction = match raw.direction.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("asc") => Direction::Asc,
            Some("desc") => Direction::Desc,
            Some(other) => {
                return Err(serde::de::Error::custom(format!(
                    "invalid sort direction {other:?}: expected \"asc\" or \"desc\""
                )));
            }
        };
        Ok(SortBy { field: raw.field, direction })
    }
}

/// A request's `query` member: `{"$expr": <Operation>}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub expr: Expr,
}

impl<'de> serde::Deserialize<'de> for Query {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Query::parse(&v).map_err(serde::de::Error::custom)
    }
}

impl Query {
    pub fn parse(v: &Value) -> Result<Query, QlError> {
        let obj =
            v.as_object().ok_or_else(|| invalid("query must be an object {\"$expr\": ...}"))?;
        if obj.len() != 1 || !obj.contains_key("$expr") {
            return Err(invalid("query must have exactly one key, \"$expr\""));
        }
        let mut p = Parser { nodes: 0 };
        Ok(Query { expr: p.expr(&obj["$expr"], 0)? })
    }

    /// Every `$getField` name in the query, for resources that validate fields up front.
    pub fn fields(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.expr.visit_fields(&mut |f| out.push(f));
        out
    }
}

impl Expr {
    pub fn visit_fields<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Expr::And(xs) | Expr::Or(xs) => xs.iter().for_each(|x| x.visit_fields(f)),
            Expr::Not(x) => x.visit_fields(f),
            Expr::Cmp(_, a, b) => {
                a.visit_fields(f);
                b.visit_fields(f);
            }
            Expr::In(a, bs) => {
                a.visit_fields(f);
                bs.iter().for_each(|b| b.visit_fields(f));
            }
            Expr::Contains { input, substr, .. } => {
                input.visit_fields(f);
                substr.visit_fields(f);
            }
        }
    }
}

impl Operand {
    fn visit_fields<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            Operand::Literal(_) => {}
            Operand::Field(name) => f(name),
            Operand::Convert(inner, _) => inner.visit_fields(f),
            Operand::Expr(e) => e.visit_fields(f),
        }
    }
}

fn invalid(msg: impl Into<String>) -> QlError {
    QlError::Invalid(format!("invalid query: {}", msg.into()))
}

struct Parser {
    nodes: usize,
}

impl Parser {
    fn enter(&mut self, depth: usize) -> Result<(), QlError> {
        self.nodes += 1;
        if depth > MAX_DEPTH {
            return Err(invalid(format!("nesting deeper than {MAX_DEPTH}")));
        }
        if self.nodes > MAX_NODES {
            return Err(invalid(format!("more than {MAX_NODES} nodes")));
        }
        Ok(())
    }

    /// `{"$op": args}` with exactly one key.
    fn single_key<'v>(v: &'v Value, what: &str) -> Result<(&'v str, &'v Value), QlError> {
        match v.as_object() {
            Some(obj) if obj.len() == 1 => {
                let (k, v) = obj.iter().next().expect("one entry");
                Ok((k.as_str(), v))
            }
            _ => Err(invalid(format!("{what} must be an object with exactly one operator key"))),
        }
    }

    fn expr(&mut self, v: &Value, depth: usize) -> Result<Expr, QlError> {
        self.enter(depth)?;
        let (op, args) = Self::single_key(v, "an operation")?;
        let d = depth + 1;
        Ok(match op {
            "$and" | "$or" => {
                let items = args
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| invalid(format!("{op} takes a non-empty array")))?;
                let xs = items.iter().map(|x| self.expr(x, d)).collect::<Result<Vec<_>, _>>()?;
                if op == "$and" { Expr::And(xs) } else { Expr::Or(xs) }
            }
            "$not" => match args.as_array().map(Vec::as_slice) {
                Some([x]) => Expr::Not(Box::new(self.expr(x, d)?)),
                _ => return Err(invalid("$not takes a one-element array")),
            },
            "$eq" | "$gt" | "$gte" | "$lt" | "$lte" => {
                let cmp = match op {
                    "$eq" => CmpOp::Eq,
                    "$gt" => CmpOp::Gt,
                    "$gte" => CmpOp::Gte,
                    "$lt" => CmpOp::Lt,
                    _ => CmpOp::Lte,
                };
                match args.as_array().map(Vec::as_slice) {
                    Some([a, b]) => Expr::Cmp(cmp, self.operand(a, d)?, self.operand(b, d)?),
                    _ => return Err(invalid(format!("{op} takes a two-element array"))),
                }
            }
            "$in" => match args.as_array().map(Vec::as_slice) {
                Some([a, Value::Array(bs)]) => {
                    let bs = bs.iter().map(|b| self.operand(b, d)).collect::<Result<_, _>>()?;
                    Expr::In(self.operand(a, d)?, bs)
                }
                _ => return Err(invalid("$in takes [operand, [operands...]]")),
            },
            "$contains" => {
                let obj = args
                    .as_object()
                    .ok_or_else(|| invalid("$contains takes {input, substr, case_insensitive?}"))?;
                let get =
                    |k: &str| obj.get(k).ok_or_else(|| invalid(format!("$contains needs {k:?}")));
                let case_insensitive = match obj.get("case_insensitive") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(invalid("$contains.case_insensitive must be a boolean")),
                };
                Expr::Contains {
                    input: self.operand(get("input")?, d)?,
                    substr: self.operand(get("substr")?, d)?,
                    case_insensitive,
                }
            }
            other => return Err(invalid(format!("unknown operation {other:?}"))),
        })
    }

    fn operand(&mut self, v: &Value, depth: usize) -> Result<Operand, QlError> {
        self.enter(depth)?;
        let (op, args) = Self::single_key(v, "an operand")?;
        let d = depth + 1;
        Ok(match op {
            "$literal" => {
                check_literal(args)?;
                Operand::Literal(args.clone())
            }
            "$getField" => match args {
                Value::String(s) => {
                    check_field_name(s)?;
                    Operand::Field(s.clone())
                }
                _ => return Err(invalid("$getField takes a non-empty string")),
            },
            "$convert" => {
                let obj = args.as_object().ok_or_else(|| invalid("$convert takes {input, to}"))?;
                let input = obj.get("input").ok_or_else(|| invalid("$convert needs \"input\""))?;
                let to = match obj.get("to").and_then(Value::as_str) {
                    Some("double") => ConvertTo::Double,
                    Some("int") => ConvertTo::Int,
                    Some("bool") => ConvertTo::Bool,
                    Some("string") => ConvertTo::String,
                    Some("exists") => ConvertTo::Exists,
                    other => {
                        return Err(invalid(format!(
                            "$convert.to must be one of double, int, bool, string, exists; got {other:?}"
                        )));
                    }
                };
                Operand::Convert(Box::new(self.operand(input, d)?), to)
            }
            _ => Operand::Expr(Box::new(self.expr(v, depth)?)),
        })
    }
}

/// A field name of `$getField` or `sort_by`: non-empty, printable (no NUL or other control
/// characters, which no stored key uses and some engines cannot bind), within
/// [`limits::MAX_QUERY_STRING_BYTES`] and [`limits::MAX_PATH_SEGMENTS`].
pub fn check_field_name(name: &str) -> Result<(), QlError> {
    if name.is_empty() {
        return Err(invalid("field names must not be empty"));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid(format!("field name {name:?} contains control characters")));
    }
    if name.len() > limits::MAX_QUERY_STRING_BYTES {
        return Err(invalid(format!(
            "a field name of {} bytes is longer than {}",
            name.len(),
            limits::MAX_QUERY_STRING_BYTES
        )));
    }
    if name.split('.').count() > limits::MAX_PATH_SEGMENTS {
        return Err(invalid(format!(
            "field name has more than {} dot-separated segments",
            limits::MAX_PATH_SEGMENTS
        )));
    }
    Ok(())
}

/// A `$literal` within [`limits::MAX_QUERY_STRING_BYTES`] (strings) and
/// [`limits::MAX_QUERY_TERMS`] elements (lists).
fn check_literal(v: &Value) -> Result<(), QlError> {
    fn nested<'a>(mut items: impl Iterator<Item = &'a Value>) -> bool {
        items.any(|x| matches!(x, Value::Array(_) | Value::Object(_)))
    }
    match v {
        Value::String(s) if s.len() > limits::MAX_QUERY_STRING_BYTES => Err(invalid(format!(
            "a literal of {} bytes is longer than {}",
            s.len(),
            limits::MAX_QUERY_STRING_BYTES
        ))),
        Value::Array(a) if a.len() > limits::MAX_QUERY_TERMS || nested(a.iter()) => {
            Err(invalid("literals are scalars or flat lists of scalars"))
        }
        Value::Object(m) if nested(m.values()) => {
            Err(invalid("literals are scalars or flat lists of scalars"))
        }
        Value::Array(items) => items.iter().try_for_each(check_literal),
        _ => Ok(()),
    }
}

/// A `sort_by` list: at most [`limits::MAX_SORT_TERMS`] entries. Every request's `sort_by`
/// member reads through this (`#[serde(deserialize_with)]`).
pub fn sort_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<SortBy>>, D::Error> {
    let list: Option<Vec<SortBy>> = serde::Deserialize::deserialize(d)?;
    if list.as_ref().is_some_and(|l| l.len() > limits::MAX_SORT_TERMS) {
        return Err(serde::de::Error::custom(format!(
            "sort_by has more than {} entries",
            limits::MAX_SORT_TERMS
        )));
    }
    Ok(list)
}

/// A `$getField` path split into segments: dots separate segments, `\.` is a literal dot.
pub fn split_path(path: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                chars.next();
                out.last_mut().expect("non-empty").push('.');
            }
            '.' => out.push(String::new()),
            c => out.last_mut().expect("non-empty").push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lit(v: Value) -> Operand {
        Operand::Literal(v)
    }
    fn field(s: &str) -> Operand {
        Operand::Field(s.into())
    }

    #[test]
    fn parses_every_operation() {
        let cases: Vec<(Value, Expr)> = vec![
            (
                json!({"$eq": [{"$getField": "op_name"}, {"$literal": "x"}]}),
                Expr::Cmp(CmpOp::Eq, field("op_name"), lit(json!("x"))),
            ),
            (
                json!({"$gt": [{"$getField": "a"}, {"$literal": 1}]}),
                Expr::Cmp(CmpOp::Gt, field("a"), lit(json!(1))),
            ),
            (
                json!({"$gte": [{"$getField": "a"}, {"$literal": 1}]}),
                Expr::Cmp(CmpOp::Gte, field("a"), lit(json!(1))),
            ),
            (
                json!({"$lt": [{"$getField": "a"}, {"$literal": 1}]}),
                Expr::Cmp(CmpOp::Lt, field("a"), lit(json!(1))),
            ),
            (
                json!({"$lte": [{"$getField": "a"}, {"$literal": 1}]}),
                Expr::Cmp(CmpOp::Lte, field("a"), lit(json!(1))),
            ),
            (
                json!({"$in": [{"$getField": "id"}, [{"$literal": "a"}, {"$literal": "b"}]]}),
                Expr::In(field("id"), vec![lit(json!("a")), lit(json!("b"))]),
            ),
            (
                json!({"$contains": {"input": {"$getField": "op_name"}, "substr": {"$literal": "x"}, "case_insensitive": true}}),
                Expr::Contains {
                    input: field("op_name"),
                    substr: lit(json!("x")),
                    case_insensitive: true,
                },
            ),
            (
                json!({"$not": [{"$eq": [{"$literal": 1}, {"$literal": 1}]}]}),
                Expr::Not(Box::new(Expr::Cmp(CmpOp::Eq, lit(json!(1)), lit(json!(1))))),
            ),
            (
                json!({"$and": [{"$eq": [{"$literal": 1}, {"$literal": 1}]}]}),
                Expr::And(vec![Expr::Cmp(CmpOp::Eq, lit(json!(1)), lit(json!(1)))]),
            ),
            (
                json!({"$or": [{"$eq": [{"$convert": {"input": {"$getField": "inputs.x"}, "to": "double"}}, {"$literal": 2.5}]}]}),
                Expr::Or(vec![Expr::Cmp(
                    CmpOp::Eq,
                    Operand::Convert(Box::new(field("inputs.x")), ConvertTo::Double),
                    lit(json!(2.5)),
                )]),
            ),
            (
                json!({"$eq": [{"$gt": [{"$getField": "a"}, {"$literal": 1}]}, {"$literal": true}]}),
                Expr::Cmp(
                    CmpOp::Eq,
                    Operand::Expr(Box::new(Expr::Cmp(CmpOp::Gt, field("a"), lit(json!(1))))),
                    lit(json!(true)),
                ),
            ),
        ];
        for (input, want) in cases {
            let q = Query::parse(&json!({ "$expr": input.clone() }))
                .unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.expr, want, "{input}");
        }
    }

    #[test]
    fn rejects_bad_input_with_a_reason() {
        let bad = vec![
            json!(null),
            json!([]),
            json!({}),
            json!({"$expr": {}, "extra": 1}),
            json!({"$match": {}}),
            json!({"$expr": {"$bogus": []}}),
            json!({"$expr": {"$eq": [{"$literal": 1}]}}),
            json!({"$expr": {"$eq": "x"}}),
            json!({"$expr": {"$and": []}}),
            json!({"$expr": {"$and": {}}}),
            json!({"$expr": {"$not": [{"$eq": [{"$literal": 1}, {"$literal": 1}]}, {"$eq": [{"$literal": 1}, {"$literal": 1}]}]}}),
            json!({"$expr": {"$in": [{"$getField": "id"}, {"$literal": ["a"]}]}}),
            json!({"$expr": {"$contains": {"input": {"$getField": "id"}}}}),
            json!({"$expr": {"$contains": {"input": {"$getField": "id"}, "substr": {"$literal": "x"}, "case_insensitive": "yes"}}}),
            json!({"$expr": {"$eq": [{"$getField": ""}, {"$literal": 1}]}}),
            json!({"$expr": {"$eq": [{"$getField": 5}, {"$literal": 1}]}}),
            json!({"$expr": {"$eq": [{"$convert": {"input": {"$literal": 1}, "to": "float"}}, {"$literal": 1}]}}),
            json!({"$expr": {"$eq": ["bare", {"$literal": 1}]}}),
        ];
        for q in bad {
            let err = Query::parse(&q).expect_err(&q.to_string());
            assert!(err.to_string().starts_with("invalid query: "), "{q}: {err}");
        }
    }

    #[test]
    fn hostile_nesting_is_rejected_not_a_stack_overflow() {
        let mut v = json!({"$eq": [{"$literal": 1}, {"$literal": 1}]});
        let wrap = |key: &str, inner: Value| {
            Value::Object(serde_json::Map::from_iter([(key.to_owned(), inner)]))
        };
        for _ in 0..10_000 {
            v = wrap("$not", Value::Array(vec![v]));
        }
        let q = wrap("$expr", v);
        let err = Query::parse(&q).unwrap_err();
        assert!(err.to_string().contains("nesting"), "{err}");
        // Dropping a Value this deep recurses; HTTP bodies never get here (serde_json stops at
        // depth 128), so leak the test's value rather than grow the test thread's stack.
        std::mem::forget(q);
    }

    #[test]
    fn splits_paths_with_escaped_dots() {
        assert_eq!(split_path("inputs.a.0.b"), ["inputs", "a", "0", "b"]);
        assert_eq!(split_path(r"attributes.k\.x.y"), ["attributes", "k.x", "y"]);
    }

    #[test]
    fn sort_by_directions() {
        let s: Vec<SortBy> =
            serde_json::from_value(json!([{"field": "a", "direction": "DESC"}, {"field": "b"}]))
                .unwrap();
        assert_eq!(s[0].direction, Direction::Desc);
        assert_eq!(s[1].direction, Direction::Asc);
        assert!(
            serde_json::from_value::<SortBy>(json!({"field": "a", "direction": "up"})).is_err()
        );
    }
}
