//! Tables on ClickHouse: rows in `table_rows` by digest, and each table's row list as an
//! array in `tables` (pages sliced by ClickHouse).

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::sql::{Param, Sql};
use super::{ClickHouseStore, ROWS_PER_LOOKUP, backend};
use crate::{NewTable, Result, StoredRow, TableSlice, TableStore};

/// One row of `table_rows`.
#[derive(Debug, Row, Serialize)]
struct TableRowRow {
    pub project_id: String,
    pub digest: String,
    pub val: String,
    pub size_bytes: u64,
    pub created_at: i64,
}

/// One row of `tables`.
#[derive(Debug, Row, Serialize)]
struct TableListRow {
    pub project_id: String,
    pub digest: String,
    pub row_count: u64,
    pub row_digests: Vec<String>,
    pub created_at: i64,
}

/// What `table_slice` selects.
#[derive(Debug, Row, Deserialize)]
struct TableSliceRow {
    pub row_count: u64,
    /// The requested slice of `row_digests`.
    pub page: Vec<String>,
}

/// What `select_table_rows` selects.
#[derive(Debug, Row, Deserialize)]
struct StoredRowRow {
    pub digest: String,
    pub size_bytes: u64,
    pub val: String,
}

/// Table rows are written to this table, tables to [`TABLES`] (see migrations/0004_tables.sql).
const TABLE_ROWS: &str = "table_rows";

const TABLES: &str = "tables";

/// A table's row count and the digests at `[offset, offset + limit)`: only the slice of the
/// (possibly long) array leaves ClickHouse. Duplicate rows of one table are identical: LIMIT 1.
fn table_slice(project: &str, digest: &str, offset: u64, limit: Option<u64>) -> Sql {
    let mut sql = Sql::new("SELECT row_count, arraySlice(row_digests, 1 + ");
    sql.bind(Param::UInt(offset));
    if let Some(limit) = limit {
        sql.push(", ").bind(Param::UInt(limit));
    }
    sql.push(") AS page FROM tables WHERE project_id = ").bind_str(project);
    sql.push(" AND digest = ").bind_str(digest).push(" LIMIT 1");
    sql
}

/// The stored rows among `digests`, one per digest (duplicates are identical); `val` is ''
/// unless `with_val`, so size lookups do not read the values.
fn select_table_rows(project: &str, digests: &[String], with_val: bool) -> Sql {
    let val = if with_val { "val" } else { "'' AS val" };
    let mut sql = Sql::new("SELECT digest, size_bytes, ");
    sql.push(val).push(" FROM table_rows WHERE project_id = ").bind_str(project);
    sql.push(" AND digest IN ").bind(Param::StrList(digests.to_vec()));
    sql.push(" LIMIT 1 BY digest");
    sql
}

#[async_trait]
impl TableStore for ClickHouseStore {
    /// Content-addressed like files: rows and the table are inserted only when not yet stored
    /// (rows first, so a visible table has its rows). A racing duplicate is the same row and
    /// collapses in the ReplacingMergeTree; reads take one row per digest meanwhile.
    async fn create_table(&self, t: NewTable) -> Result<()> {
        let project = t.project.as_str();
        let mut wanted: Vec<String> = t.rows.iter().map(|r| r.digest.clone()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let stored = self.read_rows(&t.project, &wanted, false).await?;
        let now = Micros::now().0;
        let mut seen = HashSet::new();
        let rows: Vec<TableRowRow> = t
            .rows
            .into_iter()
            .filter(|r| !stored.contains_key(&r.digest) && seen.insert(r.digest.clone()))
            .map(|r| TableRowRow {
                project_id: project.to_owned(),
                size_bytes: r.val.len() as u64,
                digest: r.digest,
                val: r.val,
                created_at: now,
            })
            .collect();
        self.insert::<TableRowRow>(TABLE_ROWS, &rows).await?;
        if self.table_slice(&t.project, &t.digest, 0, Some(0)).await?.is_some() {
            return Ok(());
        }
        let table = TableListRow {
            project_id: project.to_owned(),
            digest: t.digest,
            row_count: t.row_digests.len() as u64,
            row_digests: t.row_digests,
            created_at: now,
        };
        self.insert::<TableListRow>(TABLES, &[table]).await
    }

    async fn table_slice(
        &self,
        project: &ProjectId,
        digest: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Option<TableSlice>> {
        let found: Option<TableSliceRow> = table_slice(project.as_str(), digest, offset, limit)
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        Ok(found.map(|r| TableSlice { count: r.row_count, row_digests: r.page }))
    }

    async fn read_rows(
        &self,
        project: &ProjectId,
        digests: &[String],
        with_val: bool,
    ) -> Result<HashMap<String, StoredRow>> {
        let mut out = HashMap::with_capacity(digests.len());
        // The digests travel as one query parameter, a form field of the request: batches
        // keep each under ClickHouse's `http_max_field_value_size` (128 KiB by default).
        for batch in digests.chunks(ROWS_PER_LOOKUP) {
            let rows: Vec<StoredRowRow> = select_table_rows(project.as_str(), batch, with_val)
                .query(&self.client)
                .fetch_all()
                .await
                .map_err(backend)?;
            for r in rows {
                let val = if with_val {
                    Some(RawValue::from_string(r.val).map_err(backend)?)
                } else {
                    None
                };
                out.insert(r.digest, StoredRow { size_bytes: r.size_bytes, val });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn table_statements_bind_user_values() {
        let evil = "x'); DROP TABLE tables; --";
        for sql in [
            table_slice(evil, evil, 3, Some(4)),
            table_slice(evil, evil, 0, None),
            select_table_rows(evil, &[evil.to_owned()], true),
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
    }
}
