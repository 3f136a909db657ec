//! Tables on SQLite: rows in `table_rows` by digest, and each table's row list as a JSON array
//! in `tables` (pages read with `json_each`).

use std::collections::HashMap;

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use super::values::raw;
use super::writer::backend;
use crate::{NewTable, Result, StoredRow, TableSlice, TableStore};

const INSERT_TABLE_ROW: &str = "
INSERT INTO table_rows (project_id, digest, val, size_bytes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (project_id, digest) DO NOTHING
";

/// ?4 is the row digests as a JSON array.
const INSERT_TABLE: &str = "
INSERT INTO tables (project_id, digest, row_count, row_digests, created_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (project_id, digest) DO NOTHING
";

const TABLE_COUNT: &str = "SELECT row_count FROM tables WHERE project_id = ?1 AND digest = ?2";

/// A page of a table's row list, in table order (?3 = limit, -1 for all; ?4 = offset).
const TABLE_PAGE: &str = "
SELECT j.value FROM tables t, json_each(t.row_digests) j
WHERE t.project_id = ?1 AND t.digest = ?2
ORDER BY j.key LIMIT ?3 OFFSET ?4
";

/// The stored rows among ?2 (a JSON array of digests); the value only when ?3 is true.
const SELECT_TABLE_ROWS: &str = "
SELECT digest, size_bytes, CASE WHEN ?3 THEN val END FROM table_rows
WHERE project_id = ?1 AND digest IN (SELECT value FROM json_each(?2))
";

#[async_trait]
impl TableStore for SqliteStore {
    async fn create_table(&self, t: NewTable) -> Result<()> {
        let list = serde_json::to_string(&t.row_digests).map_err(backend)?;
        self.writer
            .exec(move |conn| {
                let now = Micros::now().0;
                let project = t.project.as_str();
                let mut insert_row = conn.prepare_cached(INSERT_TABLE_ROW).map_err(backend)?;
                for r in &t.rows {
                    insert_row
                        .execute(params![project, r.digest, r.val, r.val.len() as i64, now])
                        .map_err(backend)?;
                }
                conn.prepare_cached(INSERT_TABLE)
                    .and_then(|mut st| {
                        st.execute(params![
                            project,
                            t.digest,
                            t.row_digests.len() as i64,
                            list,
                            now
                        ])
                    })
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn table_slice(
        &self,
        project: &ProjectId,
        digest: &str,
        offset: u64,
        limit: Option<u64>,
    ) -> Result<Option<TableSlice>> {
        let (project, digest) = (project.clone(), digest.to_owned());
        self.read(move |conn| {
            let count: Option<i64> = conn
                .prepare_cached(TABLE_COUNT)
                .and_then(|mut st| {
                    st.query_row(params![project.as_str(), digest], |r| r.get(0)).optional()
                })
                .map_err(backend)?;
            let Some(count) = count else { return Ok(None) };
            let count = count as u64;
            if offset >= count || limit == Some(0) {
                return Ok(Some(TableSlice { count, row_digests: Vec::new() }));
            }
            let limit = limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
            let mut st = conn.prepare_cached(TABLE_PAGE).map_err(backend)?;
            let row_digests = st
                .query_map(params![project.as_str(), digest, limit, offset as i64], |r| r.get(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
                .map_err(backend)?;
            Ok(Some(TableSlice { count, row_digests }))
        })
        .await
    }

    async fn read_rows(
        &self,
        project: &ProjectId,
        digests: &[String],
        with_val: bool,
    ) -> Result<HashMap<String, StoredRow>> {
        if digests.is_empty() {
            return Ok(HashMap::new());
        }
        let project = project.clone();
        let list = serde_json::to_string(digests).map_err(backend)?;
        self.read(move |conn| {
            let mut st = conn.prepare_cached(SELECT_TABLE_ROWS).map_err(backend)?;
            let rows = st
                .query_map(params![project.as_str(), list, with_val], |r| {
                    let row =
                        StoredRow { size_bytes: r.get::<_, i64>(1)? as u64, val: raw(r.get(2)?)? };
                    Ok((r.get::<_, String>(0)?, row))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<HashMap<_, _>>>())
                .map_err(backend)?;
            Ok(rows)
        })
        .await
    }
}
