//! The SQL walker of the typed tree ([`crate::typed`]): renders a query expression and a sort
//! list as SQL text with bound parameters, the same way for every back end. What differs
//! between SQL dialects (how a value is bound, function names, conversions, NULL ordering) is
//! asked of the [`Dialect`], which the back end's statement builder implements; what a field
//! reads (a column, a JSON path, a subquery) is asked of the field ([`FieldSql`]). User values
//! only ever reach the statement through [`Dialect::literal`], which binds them.

use crate::{ConvertTo, Direction, Lit, TExpr, TOperand, ValueType};

/// How an operand is wrapped to convert it from one type to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cast {
    /// `pre <operand> post`.
    Wrap(&'static str, &'static str),
    /// `pre <operand> mid <operand> post`: the operand rendered twice.
    Twice(&'static str, &'static str, &'static str),
}

/// A SQL dialect, implemented by its statement builder (text plus bound parameters).
pub trait Dialect {
    /// Appends SQL text chosen by the compiler, never a user value.
    fn push(&mut self, s: &str) -> &mut Self;
    /// Binds a literal as a parameter (with whatever wrapping the dialect's types need).
    fn literal(&mut self, l: &Lit);
    /// The function taking a condition and a default, so that NULL counts as false under NOT.
    const NULL_AS_FALSE: &'static str;
    /// `$in` as OR-ed equalities, for a dialect whose `IN` takes only constants.
    const IN_AS_EQUALITIES: bool;
    /// `POSITION(haystack, needle)`: 1-based, 0 when absent.
    const POSITION: &'static str;
    /// Full Unicode case folding, as the in-memory evaluator folds (docs/query-language.md).
    const FOLD: &'static str;
    /// A function `f(json_text, needle, case_insensitive)` that is false only when no value read
    /// from the JSON text can contain the needle: `$contains` on a JSON path with a literal needle
    /// tests it first, so that rows that cannot match are not parsed. `None` where extracting a
    /// value is cheap enough.
    const SUBSTRING_PRETEST: Option<&'static str>;
    /// A `$convert` that is not the same in every dialect (see [`convert`] for those that are).
    /// `(Double, String)` is also how JSON paths sort numerically.
    fn cast(to: ConvertTo, from: ValueType) -> Cast;
    /// What follows `ASC`/`DESC` of a plain field so that NULLs sort as the smallest value.
    fn nulls(dir: Direction) -> &'static str;
}

/// What a field is, the same in every dialect.
pub trait FieldKind {
    /// Whether the field has JSON-path semantics (missing and JSON null read as `''`).
    fn is_json(&self) -> bool;
    /// Whether the field is a JSON path proper, whose existence is its own test and which
    /// sorts present values first, then numerically, then as strings (docs/query-language.md).
    fn is_json_path(&self) -> bool;
}

/// A field a query expression can read: each resource and back end renders its own.
pub trait FieldSql<D: ?Sized>: FieldKind {
    fn value(&self, sql: &mut D);
    /// "Present and not JSON null", for a field with `is_json_path`.
    fn exists(&self, sql: &mut D);
    /// The column holding the JSON text the value is read from, for a JSON path into a stored
    /// document (see [`Dialect::SUBSTRING_PRETEST`]).
    fn json_document(&self) -> Option<&'static str> {
        None
    }
    /// For `$contains` of a literal `needle` in this field: renders a condition, answered from
    /// an index, that every row whose value can contain the needle meets, and returns true.
    /// Renders nothing and returns false where the field has no such index or the needle
    /// cannot use it.
    fn substring_candidates(&self, _sql: &mut D, _needle: &str, _case_insensitive: bool) -> bool {
        false
    }
}

/// ` AND (<e>)` when there is an expression.
pub fn and_expr<D: Dialect, F: FieldSql<D>>(sql: &mut D, e: Option<&TExpr<F>>) {
    if let Some(e) = e {
        sql.push(" AND (");
        expr(sql, e);
        sql.push(")");
    }
}

pub fn operand<D: Dialect, F: FieldSql<D>>(sql: &mut D, o: &TOperand<F>) {
    match o {
        TOperand::Lit(l) => sql.literal(l),
        TOperand::Field(f) => f.value(sql),
        TOperand::Expr(e) => {
            sql.push("(");
            expr(sql, e);
            sql.push(")");
        }
        TOperand::Convert(inner, from, to) => convert(sql, inner, *from, *to),
    }
}

/// Renders `render` wrapped by `cast`.
pub fn cast<D: Dialect>(sql: &mut D, cast: Cast, render: impl Fn(&mut D)) {
    match cast {
        Cast::Wrap(pre, post) => {
            sql.push(pre);
            render(sql);
            sql.push(post);
        }
        Cast::Twice(pre, mid, post) => {
            sql.push(pre);
            render(sql);
            sql.push(mid);
            render(sql);
            sql.push(post);
        }
    }
}

pub fn convert<D: Dialect, F: FieldSql<D>>(
    sql: &mut D,
    inner: &TOperand<F>,
    from: ValueType,
    to: ConvertTo,
) {
    use ValueType as T;
    if to == ConvertTo::Exists {
        if let TOperand::Field(f) = inner {
            if f.is_json_path() {
                return f.exists(sql);
            }
            if f.is_json() {
                // Missing and JSON null read as ''.
                sql.push("(");
                f.value(sql);
                sql.push(" != '')");
                return;
            }
        }
        sql.push("(");
        operand(sql, inner);
        sql.push(" IS NOT NULL)");
        return;
    }
    let c = match (to, from) {
        (ConvertTo::Int, T::Int | T::Bool)
        | (ConvertTo::Bool, T::Bool)
        | (ConvertTo::String, T::String) => Cast::Wrap("(", ")"),
        (ConvertTo::Bool, T::Int | T::Float) => Cast::Wrap("(", " != 0)"),
        (ConvertTo::Bool, T::Timestamp) => Cast::Wrap("(", " IS NOT NULL)"),
        _ => D::cast(to, from),
    };
    cast(sql, c, |s| operand(s, inner));
}

pub fn expr<D: Dialect, F: FieldSql<D>>(sql: &mut D, e: &TExpr<F>) {
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
            // Comparisons with NULL are NULL, so their negation must be true.
            sql.push("(NOT ").push(D::NULL_AS_FALSE).push("((");
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
            sql.push("(");
            operand(sql, a);
            if let TOperand::Field(f) = a
                && f.is_json()
            {
                // Missing and JSON null read as '' (docs/query-language.md).
                sql.push(" = '')");
            } else {
                sql.push(" IS NULL)");
            }
        }
        TExpr::In(a, bs) => {
            if bs.is_empty() {
                sql.push("0");
                return;
            }
            sql.push("(");
            if D::IN_AS_EQUALITIES {
                for (i, b) in bs.iter().enumerate() {
                    if i > 0 {
                        sql.push(" OR ");
                    }
                    sql.push("(");
                    operand(sql, a);
                    sql.push(" = ");
                    operand(sql, b);
                    sql.push(")");
                }
                sql.push(")");
            } else {
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
        }
        TExpr::Contains { input, substr, case_insensitive } => {
            let fold = |sql: &mut D| {
                if *case_insensitive {
                    sql.push(D::FOLD);
                }
                sql.push("(");
            };
            sql.push("(");
            if let (TOperand::Field(f), TOperand::Lit(Lit::Str(needle))) = (input, substr)
                && f.substring_candidates(sql, needle, *case_insensitive)
            {
                sql.push(" AND ");
            }
            if let (Some(pretest), TOperand::Field(f), TOperand::Lit(needle @ Lit::Str(_))) =
                (D::SUBSTRING_PRETEST, input, substr)
                && let Some(document) = f.json_document()
            {
                sql.push(pretest).push("(").push(document).push(", ");
                sql.literal(needle);
                sql.push(if *case_insensitive { ", 1) AND " } else { ", 0) AND " });
            }
            sql.push("(").push(D::POSITION).push("(");
            fold(sql);
            operand(sql, input);
            sql.push("), ");
            fold(sql);
            operand(sql, substr);
            sql.push(")) > 0))");
        }
    }
}

/// ` ORDER BY <term>, ...`.
pub fn order_by<D: Dialect, F: FieldSql<D>>(sql: &mut D, sort: &[(F, Direction)]) {
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in sort.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        order_term(sql, field, *dir);
    }
}

pub fn order_term<D: Dialect, F: FieldSql<D>>(sql: &mut D, f: &F, dir: Direction) {
    let d = match dir {
        Direction::Asc => " ASC",
        Direction::Desc => " DESC",
    };
    if f.is_json_path() {
        // Present values first, then numerically, then as strings (docs/query-language.md).
        // Non-numeric values sort after numbers in both directions (NULLS LAST), so every
        // back end pages identically.
        f.exists(sql);
        sql.push(" DESC, ");
        cast(sql, D::cast(ConvertTo::Double, ValueType::String), |s| f.value(s));
        sql.push(d).push(" NULLS LAST, ");
        f.value(sql);
        sql.push(d);
    } else {
        f.value(sql);
        sql.push(d).push(D::nulls(dir));
    }
}
