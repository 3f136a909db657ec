//! The query language (docs/query-language.md): a subset of MongoDB aggregation expressions,
//! parsed from JSON into an AST ([`ast`]), typed against a resource's field catalog
//! ([`typed`]), then either evaluated in memory ([`eval`]) or rendered as parameterised SQL
//! ([`sql`]). Both back ends give the same answers; `tests/ql_conformance.rs` checks it.

pub mod ast;
pub mod error;
pub mod eval;
pub mod limits;
pub mod sql;
pub mod time;
pub mod typed;

pub use ast::{
    CmpOp, ConvertTo, Direction, Expr, MAX_DEPTH, MAX_NODES, Operand, Query, SortBy,
    check_field_name, sort_list, split_path,
};
pub use error::QlError;
pub use typed::{Catalog, Lit, TExpr, TOperand, ValueType};
