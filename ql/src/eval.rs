//! The in-memory evaluator: one three-valued evaluation of a typed expression over any row
//! type, with the semantics the SQL walker gives every field (docs/query-language.md): string
//! semantics of JSON paths, SQL's NULL rules, `$convert`, Unicode case folding, and the sort
//! order of `ORDER BY` with its null ordering. Calls evaluate here when a condition reads
//! through an expanded ref; prices always do.

use std::cmp::Ordering;

use serde_json::Value;

use crate::{CmpOp, ConvertTo, Direction, Lit, TExpr, TOperand, ValueType};

/// A value during evaluation; timestamps are microseconds, as the typed tree's literals.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Null,
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Val {
    fn num(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) => Some(*f),
            Val::Bool(b) => Some(*b as i64 as f64),
            _ => None,
        }
    }

    fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            Val::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// SQL order: NULL smallest, numbers before text (SQLite's order of storage classes).
    fn sql_cmp(&self, other: &Val) -> Ordering {
        match (self, other) {
            (Val::Null, Val::Null) => Ordering::Equal,
            (Val::Null, _) => Ordering::Less,
            (_, Val::Null) => Ordering::Greater,
            (Val::Str(a), Val::Str(b)) => a.cmp(b),
            (Val::Str(_), _) => Ordering::Greater,
            (_, Val::Str(_)) => Ordering::Less,
            (a, b) => match (a.int(), b.int()) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => a.num().unwrap_or(0.0).total_cmp(&b.num().unwrap_or(0.0)),
            },
        }
    }
}

/// What a row's field reads as.
pub enum Cell<'a> {
    /// A column value (NULL when absent).
    Val(Val),
    /// A JSON path into a document, `None` when the path is missing: it reads as a string
    /// (scalars as JSON text, `""` otherwise) and `exists` tests presence.
    Json(Option<&'a Value>),
}

/// A row the evaluator reads: yields the value of each field of the resource's catalog.
pub trait Row<F> {
    fn cell(&self, field: &F) -> Cell<'_>;
}

/// The value at a query path (segments from [`crate::split_path`]): decimal segments index
/// arrays.
pub fn path<'a>(root: &'a Value, segs: &[String]) -> Option<&'a Value> {
    let mut v = root;
    for seg in segs {
        v = match v {
            Value::Object(m) => m.get(seg)?,
            Value::Array(a) if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) => {
                a.get(seg.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    Some(v)
}

/// String semantics of a JSON path: scalars as JSON text, `""` otherwise.
fn json_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn json_exists(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_null())
}

fn to_double(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|f| f.is_finite())
}

/// Case folding of `$contains` with `case_insensitive`: full Unicode lower case, as the SQL
/// dialects do (docs/query-language.md).
pub fn fold_case(s: &str) -> String {
    s.to_lowercase()
}

fn field<F, R: Row<F>>(row: &R, f: &F) -> Val {
    match row.cell(f) {
        Cell::Val(v) => v,
        Cell::Json(v) => Val::Str(json_string(v)),
    }
}

fn lit(l: &Lit) -> Val {
    match l {
        Lit::Str(s) => Val::Str(s.clone()),
        Lit::Int(i) | Lit::Micros(i) => Val::Int(*i),
        Lit::Float(f) => Val::Float(*f),
        Lit::Bool(b) => Val::Bool(*b),
    }
}

fn operand<F, R: Row<F>>(row: &R, o: &TOperand<F>) -> Val {
    match o {
        TOperand::Lit(l) => lit(l),
        TOperand::Field(f) => field(row, f),
        TOperand::Expr(e) => eval(e, row).map_or(Val::Null, Val::Bool),
        TOperand::Convert(inner, from, to) => convert(row, inner, *from, *to),
    }
}

/// `$convert`, as the SQL walker renders it.
fn convert<F, R: Row<F>>(row: &R, inner: &TOperand<F>, from: ValueType, to: ConvertTo) -> Val {
    if to == ConvertTo::Exists {
        if let TOperand::Field(f) = inner
            && let Cell::Json(v) = row.cell(f)
        {
            return Val::Bool(json_exists(v));
        }
        return Val::Bool(operand(row, inner) != Val::Null);
    }
    let v = operand(row, inner);
    if v == Val::Null {
        return Val::Null;
    }
    let timestamp = from == ValueType::Timestamp;
    match (to, v) {
        (ConvertTo::Double, Val::Int(i)) if timestamp => Val::Float(i as f64 / 1e6),
        (ConvertTo::Double, Val::Str(s)) => to_double(&s).map_or(Val::Null, Val::Float),
        (ConvertTo::Double, v) => v.num().map_or(Val::Null, Val::Float),
        (ConvertTo::Int, Val::Int(i)) if timestamp => Val::Int(i / 1_000_000),
        (ConvertTo::Int, Val::Float(f)) => Val::Int(f as i64),
        (ConvertTo::Int, Val::Str(s)) => s.trim().parse().map_or(Val::Null, Val::Int),
        (ConvertTo::Int, v) => v.int().map_or(Val::Null, Val::Int),
        (ConvertTo::Bool, Val::Str(s)) => match s.as_str() {
            "true" | "1" => Val::Bool(true),
            "false" | "0" => Val::Bool(false),
            _ => Val::Null,
        },
        (ConvertTo::Bool, Val::Int(_)) if timestamp => Val::Bool(true),
        (ConvertTo::Bool, v) => v.num().map_or(Val::Null, |n| Val::Bool(n != 0.0)),
        (ConvertTo::String, Val::Bool(b)) => Val::Str(b.to_string()),
        (ConvertTo::String, Val::Int(i)) => Val::Str(i.to_string()),
        (ConvertTo::String, Val::Float(f)) if f.fract() == 0.0 && f.abs() < 1e15 => {
            Val::Str(format!("{f:.1}"))
        }
        (ConvertTo::String, Val::Float(f)) => Val::Str(f.to_string()),
        (ConvertTo::String, v) => v,
        (ConvertTo::Exists, _) => unreachable!("handled above"),
    }
}

fn compare(a: &Val, b: &Val) -> Option<Ordering> {
    if *a == Val::Null || *b == Val::Null {
        return None;
    }
    Some(a.sql_cmp(b))
}

/// Evaluates a condition with SQL's three-valued logic: `None` is NULL (a comparison with
/// NULL), which filters like false; `$not` of NULL is true (the SQL walker COALESCEs it).
pub fn eval<F, R: Row<F>>(e: &TExpr<F>, row: &R) -> Option<bool> {
    match e {
        TExpr::And(xs) => {
            let mut out = Some(true);
            for x in xs {
                match eval(x, row) {
                    Some(false) => return Some(false),
                    None => out = None,
                    Some(true) => {}
                }
            }
            out
        }
        TExpr::Or(xs) => {
            let mut out = Some(false);
            for x in xs {
                match eval(x, row) {
                    Some(true) => return Some(true),
                    None => out = None,
                    Some(false) => {}
                }
            }
            out
        }
        TExpr::Not(x) => Some(!eval(x, row).unwrap_or(false)),
        TExpr::Cmp(op, a, b) => {
            let ord = compare(&operand(row, a), &operand(row, b))?;
            Some(match op {
                CmpOp::Eq => ord == Ordering::Equal,
                CmpOp::Gt => ord == Ordering::Greater,
                CmpOp::Gte => ord != Ordering::Less,
                CmpOp::Lt => ord == Ordering::Less,
                CmpOp::Lte => ord != Ordering::Greater,
            })
        }
        TExpr::IsNull(a) => Some(match a {
            // Missing and JSON null read as "".
            TOperand::Field(f) => match row.cell(f) {
                Cell::Json(v) => json_string(v).is_empty(),
                Cell::Val(v) => v == Val::Null,
            },
            a => operand(row, a) == Val::Null,
        }),
        TExpr::In(a, bs) => {
            let a = operand(row, a);
            if a == Val::Null {
                return if bs.is_empty() { Some(false) } else { None };
            }
            let mut out = Some(false);
            for b in bs {
                match compare(&a, &operand(row, b)) {
                    Some(Ordering::Equal) => return Some(true),
                    None => out = None,
                    Some(_) => {}
                }
            }
            out
        }
        TExpr::Contains { input, substr, case_insensitive } => {
            let (Val::Str(s), Val::Str(sub)) = (operand(row, input), operand(row, substr)) else {
                return None;
            };
            Some(if *case_insensitive {
                fold_case(&s).contains(&fold_case(&sub))
            } else {
                s.contains(&sub)
            })
        }
    }
}

/// One sort key of a row: JSON paths order by (present first, number, string), as SQL does.
#[derive(Debug, Clone)]
pub enum KeyPart {
    Json { exists: bool, num: Option<f64>, text: String },
    Plain(Val),
}

impl KeyPart {
    /// Bytes this key holds on the heap, roughly (for bounding memory).
    pub fn heap_size(&self) -> usize {
        match self {
            KeyPart::Json { text, .. } | KeyPart::Plain(Val::Str(text)) => text.len(),
            KeyPart::Plain(_) => 0,
        }
    }
}

pub fn sort_key<F, R: Row<F>>(sort: &[(F, Direction)], row: &R) -> Vec<KeyPart> {
    sort.iter()
        .map(|(f, _)| match row.cell(f) {
            Cell::Json(v) => {
                let text = json_string(v);
                KeyPart::Json { exists: json_exists(v), num: to_double(&text), text }
            }
            Cell::Val(v) => KeyPart::Plain(v),
        })
        .collect()
}

/// Orders two rows' keys like the SQL walker's `ORDER BY`: NULLs smallest (first ascending,
/// last descending); for JSON paths present values first in both directions, non-numeric after
/// numeric in both directions.
pub fn compare_keys<F>(sort: &[(F, Direction)], a: &[KeyPart], b: &[KeyPart]) -> Ordering {
    for ((_, dir), (x, y)) in sort.iter().zip(a.iter().zip(b)) {
        let flip = |o: Ordering| if *dir == Direction::Desc { o.reverse() } else { o };
        let o = match (x, y) {
            (
                KeyPart::Json { exists: ea, num: na, text: ta },
                KeyPart::Json { exists: eb, num: nb, text: tb },
            ) => eb
                .cmp(ea)
                .then_with(|| match (na, nb) {
                    (Some(p), Some(q)) => flip(p.total_cmp(q)),
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) => Ordering::Equal,
                })
                .then_with(|| flip(ta.cmp(tb))),
            (KeyPart::Plain(p), KeyPart::Plain(q)) => flip(p.sql_cmp(q)),
            _ => Ordering::Equal,
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// Sorts rows by `sort` (stable: ties keep their order).
pub fn sort_rows<F, R: Row<F>>(rows: &mut Vec<R>, sort: &[(F, Direction)]) {
    if sort.is_empty() {
        return;
    }
    let mut keyed: Vec<(Vec<KeyPart>, R)> =
        rows.drain(..).map(|r| (sort_key(sort, &r), r)).collect();
    keyed.sort_by(|(a, _), (b, _)| compare_keys(sort, a, b));
    rows.extend(keyed.into_iter().map(|(_, r)| r));
}
