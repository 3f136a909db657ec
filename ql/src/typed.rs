//! Type checking: resolves field names against a resource's catalog and checks that every
//! comparison has a common type, producing a typed tree that a SQL dialect renders without
//! making any semantic decision of its own. Literals are normalised here (timestamps to
//! microseconds, numbers to i64/f64), so dialects bind them as parameters unchanged.

use serde_json::Value;

use crate::QlError;
use crate::ast::{CmpOp, ConvertTo, Expr, Operand, Query};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    String,
    Int,
    Float,
    Bool,
    Timestamp,
    /// The literal `null`.
    Null,
}

impl ValueType {
    fn numeric(self) -> bool {
        matches!(self, ValueType::Int | ValueType::Float)
    }
}

/// A resource's field catalog (calls, feedback, costs): maps a `$getField` name to the
/// resource's field type `F` and its value type. Its errors are the resource's own (typing
/// errors convert into them).
pub trait Catalog {
    type Field: Clone + std::fmt::Debug;
    type Error: From<QlError>;
    fn resolve(&self, name: &str) -> Result<(Self::Field, ValueType), Self::Error>;
}

#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Micros(i64),
}

#[derive(Debug, Clone)]
pub enum TExpr<F> {
    And(Vec<TExpr<F>>),
    Or(Vec<TExpr<F>>),
    Not(Box<TExpr<F>>),
    Cmp(CmpOp, TOperand<F>, TOperand<F>),
    IsNull(TOperand<F>),
    In(TOperand<F>, Vec<TOperand<F>>),
    Contains { input: TOperand<F>, substr: TOperand<F>, case_insensitive: bool },
}

#[derive(Debug, Clone)]
pub enum TOperand<F> {
    Lit(Lit),
    Field(F),
    /// Cast of `input` (whose type is the second member) to the target.
    Convert(Box<TOperand<F>>, ValueType, ConvertTo),
    Expr(Box<TExpr<F>>),
}

fn no_common_type(a: ValueType, b: ValueType) -> QlError {
    QlError::invalid(format!(
        "invalid query: no common type between {a:?} and {b:?}; JSON fields compare as strings, \
         use $convert to compare numerically"
    ))
}

impl Query {
    pub fn typed<C: Catalog>(&self, catalog: &C) -> Result<TExpr<C::Field>, C::Error> {
        lower_expr(&self.expr, catalog)
    }
}

fn lower_expr<C: Catalog>(e: &Expr, c: &C) -> Result<TExpr<C::Field>, C::Error> {
    Ok(match e {
        Expr::And(xs) => TExpr::And(xs.iter().map(|x| lower_expr(x, c)).collect::<Result<_, _>>()?),
        Expr::Or(xs) => TExpr::Or(xs.iter().map(|x| lower_expr(x, c)).collect::<Result<_, _>>()?),
        Expr::Not(x) => TExpr::Not(Box::new(lower_expr(x, c)?)),
        Expr::Cmp(op, a, b) => {
            let (a, ta) = lower_operand(a, c)?;
            let (b, tb) = lower_operand(b, c)?;
            match (ta, tb) {
                (ValueType::Null, ValueType::Null) => {
                    return Err(
                        QlError::invalid("invalid query: cannot compare null with null").into()
                    );
                }
                (ValueType::Null, _) | (_, ValueType::Null) if *op != CmpOp::Eq => {
                    return Err(
                        QlError::invalid("invalid query: only $eq accepts a null literal").into()
                    );
                }
                (ValueType::Null, _) => TExpr::IsNull(b),
                (_, ValueType::Null) => TExpr::IsNull(a),
                _ => {
                    let (a, b) = unify(a, ta, b, tb)?;
                    TExpr::Cmp(*op, a, b)
                }
            }
        }
        Expr::In(a, bs) => {
            let (a, ta) = lower_operand(a, c)?;
            let mut out = Vec::with_capacity(bs.len());
            for b in bs {
                let (b, tb) = lower_operand(b, c)?;
                let (_, b) = unify(a.clone(), ta, b, tb)?;
                out.push(b);
            }
            TExpr::In(a, out)
        }
        Expr::Contains { input, substr, case_insensitive } => {
            let (input, ti) = lower_operand(input, c)?;
            let (substr, ts) = lower_operand(substr, c)?;
            if ti != ValueType::String || ts != ValueType::String {
                return Err(QlError::invalid(
                    "invalid query: $contains takes string operands (use $convert to string)",
                )
                .into());
            }
            TExpr::Contains { input, substr, case_insensitive: *case_insensitive }
        }
    })
}

fn lower_operand<C: Catalog>(
    o: &Operand,
    c: &C,
) -> Result<(TOperand<C::Field>, ValueType), C::Error> {
    Ok(match o {
        Operand::Literal(v) => lower_literal(v)?,
        Operand::Field(name) => {
            let (f, t) = c.resolve(name)?;
            (TOperand::Field(f), t)
        }
        Operand::Convert(inner, to) => {
            let (inner, t) = lower_operand(inner, c)?;
            let out = match to {
                ConvertTo::Double => ValueType::Float,
                ConvertTo::Int => ValueType::Int,
                ConvertTo::Bool | ConvertTo::Exists => ValueType::Bool,
                ConvertTo::String => ValueType::String,
            };
            // Converting a literal is folded here so dialects never see it.
            if let TOperand::Lit(lit) = &inner
                && let Some(folded) = fold_convert(lit, *to)
            {
                return Ok(folded);
            }
            (TOperand::Convert(Box::new(inner), t, *to), out)
        }
        Operand::Expr(e) => (TOperand::Expr(Box::new(lower_expr(e, c)?)), ValueType::Bool),
    })
}

fn lower_literal<F>(v: &Value) -> Result<(TOperand<F>, ValueType), QlError> {
    let (lit, t) = match v {
        Value::Null => {
            return Ok((TOperand::Lit(Lit::Str(String::new())), ValueType::Null));
        }
        Value::Bool(b) => (Lit::Bool(*b), ValueType::Bool),
        Value::String(s) => (Lit::Str(s.clone()), ValueType::String),
        Value::Number(n) => match n.as_i64() {
            Some(i) => (Lit::Int(i), ValueType::Int),
            None => match n.as_f64() {
                Some(f) if f.is_finite() => (Lit::Float(f), ValueType::Float),
                _ => return Err(QlError::invalid(format!("invalid query: bad number {n}"))),
            },
        },
        Value::Array(_) | Value::Object(_) => {
            return Err(QlError::invalid(
                "invalid query: list and object literals can only be compared inside $in",
            ));
        }
    };
    Ok((TOperand::Lit(lit), t))
}

fn fold_convert<F>(lit: &Lit, to: ConvertTo) -> Option<(TOperand<F>, ValueType)> {
    let out = match (lit, to) {
        (Lit::Int(i), ConvertTo::Double) => (Lit::Float(*i as f64), ValueType::Float),
        (Lit::Float(f), ConvertTo::Int) => (Lit::Int(*f as i64), ValueType::Int),
        (Lit::Str(s), ConvertTo::Double) => (Lit::Float(s.trim().parse().ok()?), ValueType::Float),
        (Lit::Str(s), ConvertTo::Int) => (Lit::Int(s.trim().parse().ok()?), ValueType::Int),
        (Lit::Int(i), ConvertTo::String) => (Lit::Str(i.to_string()), ValueType::String),
        (Lit::Str(s), ConvertTo::String) => (Lit::Str(s.clone()), ValueType::String),
        (Lit::Bool(b), ConvertTo::String) => (Lit::Str(b.to_string()), ValueType::String),
        (l, ConvertTo::Double) if matches!(l, Lit::Float(_)) => (l.clone(), ValueType::Float),
        (l, ConvertTo::Int) if matches!(l, Lit::Int(_)) => (l.clone(), ValueType::Int),
        _ => return None,
    };
    Some((TOperand::Lit(out.0), out.1))
}

/// Brings two operands to a common type or explains why there is none. Timestamp columns
/// accept ISO strings, dates and unix seconds as literals.
fn unify<F>(
    a: TOperand<F>,
    ta: ValueType,
    b: TOperand<F>,
    tb: ValueType,
) -> Result<(TOperand<F>, TOperand<F>), QlError> {
    if ta == tb || (ta.numeric() && tb.numeric()) {
        return Ok((a, b));
    }
    match (ta, tb) {
        (ValueType::Timestamp, _) => Ok((a, timestamp_literal(b)?)),
        (_, ValueType::Timestamp) => Ok((timestamp_literal(a)?, b)),
        _ => Err(no_common_type(ta, tb)),
    }
}

fn timestamp_literal<F>(o: TOperand<F>) -> Result<TOperand<F>, QlError> {
    let v = match &o {
        TOperand::Lit(Lit::Str(s)) => Value::String(s.clone()),
        TOperand::Lit(Lit::Int(i)) => Value::from(*i),
        TOperand::Lit(Lit::Float(f)) => {
            serde_json::Number::from_f64(*f).map(Value::Number).unwrap_or(Value::Null)
        }
        _ => {
            return Err(QlError::invalid(
                "invalid query: timestamps compare only with timestamp literals",
            ));
        }
    };
    Ok(TOperand::Lit(Lit::Micros(crate::time::parse_micros_loose(&v)?)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A toy catalog: `s` is a string column, `n` an int column, `t` a timestamp column, and
    /// anything under `j.` a JSON path.
    struct Toy;
    impl Catalog for Toy {
        type Field = String;
        type Error = QlError;
        fn resolve(&self, name: &str) -> Result<(String, ValueType), QlError> {
            let t = match name {
                "s" => ValueType::String,
                "n" => ValueType::Int,
                "t" => ValueType::Timestamp,
                n if n.starts_with("j.") => ValueType::String,
                "secret" => return Err(QlError::Forbidden("secret is not filterable".into())),
                other => return Err(QlError::invalid(format!("unknown field {other:?}"))),
            };
            Ok((name.to_owned(), t))
        }
    }

    fn typed(q: Value) -> Result<TExpr<String>, QlError> {
        Query::parse(&json!({ "$expr": q }))?.typed(&Toy)
    }

    #[test]
    fn accepts_well_typed_queries() {
        for q in [
            json!({"$eq": [{"$getField": "s"}, {"$literal": "x"}]}),
            json!({"$gt": [{"$getField": "n"}, {"$literal": 1.5}]}),
            json!({"$gte": [{"$getField": "t"}, {"$literal": "2026-01-01"}]}),
            json!({"$lt": [{"$getField": "t"}, {"$literal": 1700000000}]}),
            json!({"$eq": [{"$getField": "j.x"}, {"$literal": "1"}]}),
            json!({"$gt": [{"$convert": {"input": {"$getField": "j.x"}, "to": "double"}}, {"$literal": 1}]}),
            json!({"$eq": [{"$getField": "s"}, {"$literal": null}]}),
            json!({"$in": [{"$getField": "t"}, [{"$literal": "2026-01-01T00:00:00Z"}]]}),
            json!({"$eq": [{"$literal": "1"}, {"$literal": "1"}]}),
            json!({"$eq": [{"$convert": {"input": {"$getField": "j.x"}, "to": "exists"}}, {"$literal": true}]}),
        ] {
            typed(q.clone()).unwrap_or_else(|e| panic!("{q}: {e}"));
        }
    }

    #[test]
    fn null_literal_means_is_null() {
        let e = typed(json!({"$eq": [{"$getField": "s"}, {"$literal": null}]})).unwrap();
        assert!(matches!(e, TExpr::IsNull(TOperand::Field(ref f)) if f == "s"), "{e:?}");
    }

    #[test]
    fn timestamp_literals_become_micros() {
        let e = typed(json!({"$gt": [{"$getField": "t"}, {"$literal": "2026-11-21"}]})).unwrap();
        let TExpr::Cmp(_, _, TOperand::Lit(Lit::Micros(m))) = e else { panic!("{e:?}") };
        assert_eq!(m, 1_795_219_200_000_000);
    }

    #[test]
    fn rejects_ill_typed_queries() {
        for (q, needle) in [
            (json!({"$eq": [{"$getField": "j.x"}, {"$literal": 1}]}), "no common type"),
            (json!({"$eq": [{"$getField": "s"}, {"$literal": true}]}), "no common type"),
            (json!({"$gt": [{"$getField": "s"}, {"$literal": null}]}), "null"),
            (json!({"$eq": [{"$getField": "t"}, {"$literal": "not a date"}]}), "timestamp"),
            (
                json!({"$contains": {"input": {"$getField": "n"}, "substr": {"$literal": "1"}}}),
                "string",
            ),
            (json!({"$eq": [{"$getField": "nope"}, {"$literal": 1}]}), "unknown field"),
            (json!({"$eq": [{"$getField": "s"}, {"$literal": [1]}]}), "$in"),
            (json!({"$in": [{"$getField": "j.x"}, [{"$literal": 1}]]}), "no common type"),
        ] {
            let err = typed(q.clone()).expect_err(&q.to_string());
            assert!(matches!(err, QlError::Invalid(_)), "{q}: {err:?}");
            assert!(err.to_string().contains(needle), "{q}: {err}");
        }
        let err = typed(json!({"$eq": [{"$getField": "secret"}, {"$literal": 1}]})).unwrap_err();
        assert!(matches!(err, QlError::Forbidden(_)));
    }
}
