//! Tables (docs/api/tables.md, docs/api/tables.md#create-a-table-from-row-digests):
//! request/response shapes and the pure rules — row validation, applying `/table/update` edits to a
//! row list, and the row order of `sort_by`.
//!
//! A table is an ordered list of row digests (duplicates allowed); rows are stored once per
//! (project, row digest). Everything here works on those lists, so both backends share it.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::ProtoError;
use crate::digest::{is_valid_digest, row_digest, table_digest};
use crate::ids::ProjectId;
use crate::limits;
use heddle_ql::{Direction, SortBy, split_path};

#[derive(Debug, Deserialize)]
pub struct TableCreateReq {
    pub table: TableCreate,
}

#[derive(Debug, Deserialize)]
pub struct TableCreate {
    pub project_id: ProjectId,
    pub rows: Vec<Value>,
    pub expected_digest: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TableCreateRes {
    pub digest: String,
    pub row_digests: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct TableCreateFromDigestsReq {
    pub project_id: ProjectId,
    pub row_digests: Vec<String>,
    pub expected_digest: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TableCreateFromDigestsRes {
    pub digest: String,
}

#[derive(Debug, Deserialize)]
pub struct TableUpdateReq {
    pub project_id: ProjectId,
    pub base_digest: String,
    pub updates: Vec<TableUpdate>,
}

/// One edit of `/table/update`: `{"append": {"row": …}}`, `{"pop": {"index": i}}` or
/// `{"insert": {"index": i, "row": …}}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableUpdate {
    Append { row: Value },
    Pop { index: i64 },
    Insert { index: i64, row: Value },
}

#[derive(Debug, Serialize)]
pub struct TableUpdateRes {
    pub digest: String,
    pub updated_row_digests: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct TableRowFilter {
    pub row_digests: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub struct TableQueryReq {
    pub project_id: ProjectId,
    pub digest: String,
    pub filter: Option<TableRowFilter>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    #[serde(default, deserialize_with = "heddle_ql::sort_list")]
    pub sort_by: Option<Vec<SortBy>>,
}

/// One row of a `/table/query` answer.
#[derive(Debug, Serialize)]
pub struct TableRowSchema {
    pub digest: String,
    pub val: Box<RawValue>,
    pub original_index: u64,
}

#[derive(Debug, Serialize)]
pub struct TableQueryRes {
    pub rows: Vec<TableRowSchema>,
}

#[derive(Debug, Deserialize)]
pub struct TableQueryStatsReq {
    pub project_id: ProjectId,
    pub digest: String,
}

#[derive(Debug, Deserialize)]
pub struct TableQueryStatsBatchReq {
    pub project_id: ProjectId,
    pub digests: Option<Vec<String>>,
    pub include_storage_size: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct TableStats {
    pub digest: String,
    pub count: u64,
    pub storage_size_bytes: Option<u64>,
}

/// A validated row: its digest and its JSON text as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub digest: String,
    pub val: String,
}

/// Rows must be JSON objects (the SDK's dataset rows are dicts); anything else is a 400.
pub fn check_row(v: Value, position: &str) -> Result<Row, ProtoError> {
    if !v.is_object() {
        return Err(ProtoError::invalid(format!(
            "table row {position} is not a JSON object: rows must be objects"
        )));
    }
    let digest = row_digest(&v);
    Ok(Row { digest, val: v.to_string() })
}

/// The rows of `/table/create`, validated, in order.
pub fn check_rows(rows: Vec<Value>) -> Result<Vec<Row>, ProtoError> {
    check_table_len(rows.len())?;
    rows.into_iter().enumerate().map(|(i, v)| check_row(v, &i.to_string())).collect()
}

/// 409 when a client-computed digest differs from ours.
pub fn check_expected(expected: Option<String>, actual: &str) -> Result<(), ProtoError> {
    match expected {
        Some(expected) if expected != actual => {
            Err(ProtoError::DigestMismatch { expected, actual: actual.to_owned() })
        }
        _ => Ok(()),
    }
}

/// A `/table/update` applied to a row list.
#[derive(Debug, PartialEq)]
pub struct Updated {
    /// The resulting row list and its table digest.
    pub row_digests: Vec<String>,
    pub digest: String,
    /// Per update, in order: the digest of the appended, inserted or popped row.
    pub updated_row_digests: Vec<String>,
    /// Rows the updates brought in (to be stored).
    pub new_rows: Vec<Row>,
}

/// Applies `updates` in order to `base`. Indexes out of range (or negative) are a 400; more
/// than [`limits::MAX_TABLE_UPDATES`] edits, or a result longer than
/// [`limits::MAX_TABLE_ROWS`], too. The list is a persistent vector, so an edit anywhere costs
/// O(log n) rather than a shift of every row after it (index-0 inserts were quadratic).
pub fn apply_updates(rows: Vec<String>, updates: Vec<TableUpdate>) -> Result<Updated, ProtoError> {
    if updates.len() > limits::MAX_TABLE_UPDATES {
        return Err(ProtoError::invalid(format!(
            "{} updates in one request: at most {} are accepted",
            updates.len(),
            limits::MAX_TABLE_UPDATES
        )));
    }
    let mut rows: imbl::Vector<String> = rows.into_iter().collect();
    let mut updated = Vec::with_capacity(updates.len());
    let mut new_rows = Vec::new();
    for (i, u) in updates.into_iter().enumerate() {
        match u {
            TableUpdate::Append { row } => {
                let row = check_row(row, &format!("of update {i}"))?;
                rows.push_back(row.digest.clone());
                updated.push(row.digest.clone());
                new_rows.push(row);
            }
            TableUpdate::Pop { index } => {
                let at = index_in(index, rows.len(), i, "pop")?;
                updated.push(rows.remove(at));
            }
            TableUpdate::Insert { index, row } => {
                let at = index_in(index, rows.len() + 1, i, "insert")?;
                let row = check_row(row, &format!("of update {i}"))?;
                rows.insert(at, row.digest.clone());
                updated.push(row.digest.clone());
                new_rows.push(row);
            }
        }
    }
    let rows: Vec<String> = rows.into_iter().collect();
    check_table_len(rows.len())?;
    let digest = table_digest(&rows);
    Ok(Updated { row_digests: rows, digest, updated_row_digests: updated, new_rows })
}

/// A table may hold at most [`limits::MAX_TABLE_ROWS`] rows.
pub fn check_table_len(rows: usize) -> Result<(), ProtoError> {
    if rows > limits::MAX_TABLE_ROWS {
        return Err(ProtoError::invalid(format!(
            "a table of {rows} rows: at most {} rows are accepted",
            limits::MAX_TABLE_ROWS
        )));
    }
    Ok(())
}

fn index_in(index: i64, bound: usize, update: usize, what: &str) -> Result<usize, ProtoError> {
    usize::try_from(index).ok().filter(|i| *i < bound).ok_or_else(|| {
        ProtoError::invalid(format!(
            "update {update}: {what} index {index} is out of range for a table of {} rows",
            if what == "insert" { bound - 1 } else { bound }
        ))
    })
}

/// Row digests of `/table/create_from_digests` must at least look like row digests (400).
pub fn check_row_digests(digests: &[String]) -> Result<(), ProtoError> {
    check_table_len(digests.len())?;
    match digests.iter().position(|d| !is_valid_digest(d)) {
        Some(i) => Err(ProtoError::invalid(format!(
            "row_digests[{i}] = {:?} is not a row digest",
            digests[i]
        ))),
        None => Ok(()),
    }
}

/// Non-negative `limit`/`offset` (400 otherwise).
pub fn non_negative(name: &str, v: Option<i64>) -> Result<Option<u64>, ProtoError> {
    v.map(|n| u64::try_from(n).map_err(|_| ProtoError::invalid(format!("{name} must be >= 0"))))
        .transpose()
}

/// `sort_by` of `/table/query`: dot paths into the row value.
#[derive(Debug, Clone)]
pub struct RowOrder {
    keys: Vec<(Vec<String>, Direction)>,
}

impl RowOrder {
    pub fn new(sort_by: &[SortBy]) -> Result<RowOrder, ProtoError> {
        let keys = sort_by
            .iter()
            .map(|s| {
                if s.field.is_empty() {
                    return Err(ProtoError::invalid("sort_by field must not be empty"));
                }
                Ok((split_path(&s.field), s.direction))
            })
            .collect::<Result<_, _>>()?;
        Ok(RowOrder { keys })
    }

    /// Orders two rows: key by key; present values before missing/null ones in either
    /// direction; then numbers (numerically), strings, booleans, other values (by their JSON
    /// text). Ties keep table order (the caller sorts stably).
    pub fn compare(&self, a: &Value, b: &Value) -> Ordering {
        for (path, dir) in &self.keys {
            let (x, y) = (lookup(a, path), lookup(b, path));
            let ord = match (x, y) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(x), Some(y)) => {
                    let o = compare_values(x, y);
                    if *dir == Direction::Desc { o.reverse() } else { o }
                }
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    }
}

/// The value at `path` (object keys; decimal segments also index arrays); null reads as absent.
fn lookup<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path {
        cur = match cur {
            Value::Object(m) => m.get(seg)?,
            Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    (!cur.is_null()).then_some(cur)
}

fn compare_values(x: &Value, y: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            _ => 3,
        }
    }
    match (x, y) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
            a.total_cmp(&b)
        }
        (Value::String(a), Value::String(b)) => a.cmp(b),
        (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
        _ if rank(x) != rank(y) => rank(x).cmp(&rank(y)),
        _ => x.to_string().cmp(&y.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn d(v: Value) -> String {
        row_digest(&v)
    }

    #[test]
    fn rows_must_be_objects() {
        assert!(check_rows(vec![json!({"a": 1}), json!({})]).is_ok());
        for bad in [json!(1), json!("x"), json!([1]), json!(null)] {
            let err = check_rows(vec![json!({"a": 1}), bad.clone()]).unwrap_err();
            assert!(err.to_string().contains("row 1"), "{bad}: {err}");
        }
        let rows = check_rows(vec![json!({"a": 1}), json!({"a": 2})]).unwrap();
        assert_eq!(rows[0].digest, "XdhgKMbg1k4iUYb5astpM4ssWXZN95FiEH9cS7NNExA");
        assert_eq!(rows[1].digest, "5anVsDAOD1DTcuWp3fokIIqsmpQM6aNvJHOHIhriBf4");
    }

    #[test]
    fn updates_apply_in_order() {
        let (a, b, c) = (d(json!({"r": "a"})), d(json!({"r": "b"})), d(json!({"r": "c"})));
        let updates: Vec<TableUpdate> = serde_json::from_value(json!([
            {"append": {"row": {"r": "c"}}},
            {"insert": {"index": 0, "row": {"r": "b"}}},
            {"pop": {"index": 1}},
            {"insert": {"index": 2, "row": {"r": "a"}}},
        ]))
        .unwrap();
        let out = apply_updates(vec![a.clone()], updates).unwrap();
        assert_eq!(out.row_digests, [b.clone(), c.clone(), a.clone()]);
        assert_eq!(out.updated_row_digests, [c.clone(), b.clone(), a.clone(), a.clone()]);
        assert_eq!(out.digest, table_digest(&[&b, &c, &a]));
        assert_eq!(out.new_rows.len(), 3);
    }

    #[test]
    fn bad_indexes_are_rejected() {
        let base = vec![d(json!({"r": 1}))];
        for u in [
            json!({"pop": {"index": 1}}),
            json!({"pop": {"index": -1}}),
            json!({"insert": {"index": 2, "row": {}}}),
            json!({"insert": {"index": -1, "row": {}}}),
            json!({"append": {"row": 5}}),
        ] {
            let updates: Vec<TableUpdate> = serde_json::from_value(json!([u])).unwrap();
            assert!(apply_updates(base.clone(), updates).is_err(), "{u}");
        }
        let empty: Vec<TableUpdate> =
            serde_json::from_value(json!([{"pop": {"index": 0}}])).unwrap();
        assert!(apply_updates(vec![], empty).is_err());
    }

    #[test]
    fn sort_order() {
        let order = RowOrder::new(&[
            SortBy { field: "a.b".into(), direction: Direction::Desc },
            SortBy { field: "n".into(), direction: Direction::Asc },
        ])
        .unwrap();
        let mut rows = [
            json!({"a": {"b": 1}, "n": 2}),
            json!({"n": 0}),
            json!({"a": {"b": 10}, "n": 1}),
            json!({"a": {"b": 1}, "n": 1}),
            json!({"a": {"b": "x"}}),
            json!({"a": {"b": null}, "n": -1}),
        ];
        rows.sort_by(|x, y| order.compare(x, y));
        let want = [
            json!({"a": {"b": "x"}}),
            json!({"a": {"b": 10}, "n": 1}),
            json!({"a": {"b": 1}, "n": 1}),
            json!({"a": {"b": 1}, "n": 2}),
            json!({"a": {"b": null}, "n": -1}),
            json!({"n": 0}),
        ];
        assert_eq!(rows, want);
    }
}
