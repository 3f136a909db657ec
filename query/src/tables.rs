//! Tables (docs/api/tables.md, docs/api/tables.md#create-a-table-from-row-digests):
//! `/table/create`, `/table/update`, `/table/create_from_digests`, `/table/query`,
//! `/table/query_stats` and `/table/query_stats_batch`. The rules live in `heddle_proto::tables`;
//! the store keeps rows content-addressed and each table as its ordered list of row digests.
//!
//! `/table/query` in table order (what the SDK does: pages of 100) reads only the page's slice
//! of the row list and the page's rows. `filter.row_digests` and `sort_by` need the whole list,
//! and `sort_by` every row's value: those are ordered here, in memory.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use heddle_api::{ApiError, AppState, Json, Principal, blocking};
use heddle_proto::ProjectId;
use heddle_proto::digest::table_digest;
use heddle_proto::tables::{
    RowOrder, TableCreateFromDigestsReq, TableCreateFromDigestsRes, TableCreateReq, TableCreateRes,
    TableQueryReq, TableQueryRes, TableQueryStatsBatchReq, TableQueryStatsReq, TableRowSchema,
    TableStats, TableUpdateReq, TableUpdateRes, apply_updates, check_expected, check_row_digests,
    check_rows, non_negative,
};
use heddle_store::{NewTable, Store, StoredRow, TableSlice};
use serde_json::value::RawValue;
use serde_json::{Value, json};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/table/create", post(create))
        .route("/table/update", post(update))
        .route("/table/create_from_digests", post(create_from_digests))
        .route("/table/query", post(query))
        .route("/table/query_stats", post(query_stats))
        .route("/table/query_stats_batch", post(query_stats_batch))
}

fn unknown_table(digest: &str) -> ApiError {
    ApiError::NotFound(format!("table {digest} not found"))
}

/// The whole row list of a table, or 404.
async fn row_list(
    store: &dyn Store,
    project: &ProjectId,
    digest: &str,
) -> Result<TableSlice, ApiError> {
    store.table_slice(project, digest, 0, None).await?.ok_or_else(|| unknown_table(digest))
}

async fn create(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TableCreateReq>,
) -> Result<axum::Json<TableCreateRes>, ApiError> {
    let t = req.table;
    who.check(&t.project_id)?;
    let rows = blocking(move || check_rows(t.rows)).await?;
    let row_digests: Vec<String> = rows.iter().map(|r| r.digest.clone()).collect();
    let digest = table_digest(&row_digests);
    check_expected(t.expected_digest, &digest)?;
    state
        .store
        .create_table(NewTable {
            project: t.project_id,
            digest: digest.clone(),
            row_digests: row_digests.clone(),
            rows,
        })
        .await?;
    Ok(axum::Json(TableCreateRes { digest, row_digests }))
}

async fn update(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TableUpdateReq>,
) -> Result<axum::Json<TableUpdateRes>, ApiError> {
    who.check(&req.project_id)?;
    let base = row_list(&*state.store, &req.project_id, &req.base_digest).await?;
    let out = blocking(move || apply_updates(base.row_digests, req.updates)).await?;
    state
        .store
        .create_table(NewTable {
            project: req.project_id,
            digest: out.digest.clone(),
            row_digests: out.row_digests,
            rows: out.new_rows,
        })
        .await?;
    Ok(axum::Json(TableUpdateRes {
        digest: out.digest,
        updated_row_digests: out.updated_row_digests,
    }))
}

/// A table over rows already stored (the SDK's chunked upload combines its chunks with this).
/// Unknown rows are a 400, never a 404: the SDK reads a 404 here as "endpoint missing".
async fn create_from_digests(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TableCreateFromDigestsReq>,
) -> Result<axum::Json<TableCreateFromDigestsRes>, ApiError> {
    who.check(&req.project_id)?;
    check_row_digests(&req.row_digests)?;
    let digest = table_digest(&req.row_digests);
    check_expected(req.expected_digest, &digest)?;
    let mut distinct = req.row_digests.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let stored = state.store.read_rows(&req.project_id, &distinct, false).await?;
    let missing: Vec<&String> = distinct.iter().filter(|d| !stored.contains_key(*d)).collect();
    if let Some(first) = missing.first() {
        return Err(ApiError::bad_request(format!(
            "{} of the row digests are not stored in project {} (first: {first})",
            missing.len(),
            req.project_id
        )));
    }
    state
        .store
        .create_table(NewTable {
            project: req.project_id,
            digest: digest.clone(),
            row_digests: req.row_digests,
            rows: Vec::new(),
        })
        .await?;
    Ok(axum::Json(TableCreateFromDigestsRes { digest }))
}

async fn query(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TableQueryReq>,
) -> Result<axum::Json<TableQueryRes>, ApiError> {
    who.check(&req.project_id)?;
    let limit = non_negative("limit", req.limit)?;
    let offset = non_negative("offset", req.offset)?.unwrap_or(0);
    let order = req.sort_by.as_deref().filter(|s| !s.is_empty()).map(RowOrder::new).transpose()?;
    let only = req.filter.and_then(|f| f.row_digests);
    let (store, project) = (&*state.store, &req.project_id);

    // Table order without a filter: only the page is read.
    if order.is_none() && only.is_none() {
        let slice = store
            .table_slice(project, &req.digest, offset, limit)
            .await?
            .ok_or_else(|| unknown_table(&req.digest))?;
        let page: Vec<(u64, String)> = slice
            .row_digests
            .into_iter()
            .enumerate()
            .map(|(i, d)| (offset + i as u64, d))
            .collect();
        let vals = read_vals(store, project, &page).await?;
        return Ok(axum::Json(TableQueryRes { rows: with_vals(page, &vals)? }));
    }

    let list = row_list(store, project, &req.digest).await?;
    let mut picked: Vec<(u64, String)> =
        list.row_digests.into_iter().enumerate().map(|(i, d)| (i as u64, d)).collect();
    if let Some(only) = only {
        let only: std::collections::HashSet<String> = only.into_iter().collect();
        picked.retain(|(_, d)| only.contains(d));
    }
    let page = |rows: Vec<(u64, String)>| -> Vec<(u64, String)> {
        let rows = rows.into_iter().skip(offset.min(usize::MAX as u64) as usize);
        match limit {
            Some(l) => rows.take(l.min(usize::MAX as u64) as usize).collect(),
            None => rows.collect(),
        }
    };
    let Some(order) = order else {
        let page = page(picked);
        let vals = read_vals(store, project, &page).await?;
        return Ok(axum::Json(TableQueryRes { rows: with_vals(page, &vals)? }));
    };
    let vals = read_vals(store, project, &picked).await?;
    let parsed: HashMap<&str, Value> = vals
        .iter()
        .map(|(d, v)| serde_json::from_str::<Value>(v.get()).map(|v| (d.as_str(), v)))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::Internal(format!("stored row is not JSON: {e}")))?;
    let val_of = |d: &str| parsed.get(d).unwrap_or(&Value::Null);
    // Stable: rows that compare equal keep table order.
    picked.sort_by(|(_, a), (_, b)| order.compare(val_of(a), val_of(b)));
    Ok(axum::Json(TableQueryRes { rows: with_vals(page(picked), &vals)? }))
}

/// The values of the rows among `rows` (each distinct digest read once).
async fn read_vals(
    store: &dyn Store,
    project: &ProjectId,
    rows: &[(u64, String)],
) -> Result<HashMap<String, Box<RawValue>>, ApiError> {
    let mut distinct: Vec<String> = rows.iter().map(|(_, d)| d.clone()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let found = store.read_rows(project, &distinct, true).await?;
    Ok(found.into_iter().filter_map(|(d, StoredRow { val, .. })| Some((d, val?))).collect())
}

fn with_vals(
    rows: Vec<(u64, String)>,
    vals: &HashMap<String, Box<RawValue>>,
) -> Result<Vec<TableRowSchema>, ApiError> {
    rows.into_iter()
        .map(|(original_index, digest)| {
            // Tables are stored after their rows, so a missing row is a broken store.
            let val = vals
                .get(&digest)
                .ok_or_else(|| ApiError::Internal(format!("row {digest} of the table is missing")))?
                .clone();
            Ok(TableRowSchema { digest, val, original_index })
        })
        .collect()
}

async fn query_stats(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TableQueryStatsReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let slice = state
        .store
        .table_slice(&req.project_id, &req.digest, 0, Some(0))
        .await?
        .ok_or_else(|| unknown_table(&req.digest))?;
    Ok(axum::Json(json!({"count": slice.count})))
}

/// Stats of the listed tables; unknown ones are left out. Storage size counts every row of the
/// table (a row held twice counts twice), as the table's share of the row store.
async fn query_stats_batch(
    State(state): State<Arc<AppState>>,
    who: Principal,
    Json(req): Json<TableQueryStatsBatchReq>,
) -> Result<axum::Json<Value>, ApiError> {
    who.check(&req.project_id)?;
    let with_size = req.include_storage_size.unwrap_or(false);
    let mut digests = req.digests.unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    digests.retain(|d| seen.insert(d.clone()));
    let mut tables = Vec::with_capacity(digests.len());
    for digest in digests {
        let limit = if with_size { None } else { Some(0) };
        let Some(slice) = state.store.table_slice(&req.project_id, &digest, 0, limit).await? else {
            continue;
        };
        let storage_size_bytes = if with_size {
            let mut distinct = slice.row_digests.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let sizes = state.store.read_rows(&req.project_id, &distinct, false).await?;
            Some(slice.row_digests.iter().filter_map(|d| sizes.get(d)).map(|r| r.size_bytes).sum())
        } else {
            None
        };
        tables.push(TableStats { digest, count: slice.count, storage_size_bytes });
    }
    Ok(axum::Json(json!({ "tables": tables })))
}
