//! The bounds of one query (`docs/limits.md` lists them for users).

/// Dot-separated segments of one expand column or query field path.
pub const MAX_PATH_SEGMENTS: usize = 64;
/// Terms of one query expression (every operator and operand counted once).
pub const MAX_QUERY_TERMS: usize = 1000;
/// Entries of a `sort_by`.
pub const MAX_SORT_TERMS: usize = 32;
/// Nesting of one query expression (`$and` in `$or` in `$not` ...).
pub const MAX_QUERY_DEPTH: usize = 32;
/// Longest literal or field name in a query, in bytes.
pub const MAX_QUERY_STRING_BYTES: usize = 64 * 1024;
