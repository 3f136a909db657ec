//! Projects on SQLite: the list is one pass over the live-calls index (`calls_live_by_start`)
//! per project of the entity; storage sizes sum the content columns' bytes.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use rusqlite::params;

use super::SqliteStore;
use super::project_keys::key_of;
use super::writer::backend;
use crate::{ProjectInfo, ProjectStore, Result, StorageSizes};

/// `?1`/`?2` bound the project ids to one entity (`entity/` up to `entity0`: `0` follows `/`).
/// `CROSS JOIN` keeps `project_keys` the outer loop: the entity's projects are a range of its
/// unique index, and each one's calls a seek on `calls_live_by_start`, however many other
/// entities the database holds.
const LIST: &str = "SELECT k.project_id, COUNT(*), MAX(c.started_at) \
                    FROM project_keys k CROSS JOIN calls c ON c.project_key = k.project_key \
                    WHERE c.deleted_at IS NULL AND c.started_at IS NOT NULL \
                    AND k.project_id >= ?1 AND k.project_id < ?2 \
                    GROUP BY k.project_id ORDER BY 3 DESC, 1 LIMIT ?3";

/// Content bytes per resource (`octet_length`: bytes, where `length` counts characters). OTLP
/// resources count once each, as they are stored (docs/storage.md#otlp-resources).
const SIZES: &str = concat!(
    "SELECT \
    (SELECT COALESCE(SUM(COALESCE(octet_length(attributes), 0) + COALESCE(octet_length(inputs), 0) \
        + COALESCE(octet_length(output), 0) + COALESCE(octet_length(summary), 0) \
        + COALESCE(octet_length(exception), 0) + COALESCE(octet_length(otel_dump), 0)), 0) \
     FROM calls WHERE project_key = ",
    key_of!("?1"),
    " AND deleted_at IS NULL) + \
    (SELECT COALESCE(SUM(octet_length(resource)), 0) FROM otel_resources WHERE project_key = ",
    key_of!("?1"),
    "), \
    (SELECT COALESCE(SUM(octet_length(val)), 0) FROM objects \
     WHERE project_id = ?1 AND deleted_at IS NULL), \
    (SELECT COALESCE(SUM(size_bytes), 0) FROM table_rows WHERE project_id = ?1)"
);

#[async_trait]
impl ProjectStore for SqliteStore {
    async fn storage_sizes(&self, project: &ProjectId) -> Result<StorageSizes> {
        let project = project.as_str().to_owned();
        self.read(move |conn| {
            conn.prepare_cached(SIZES)
                .and_then(|mut st| {
                    st.query_row(params![project], |r| {
                        Ok(StorageSizes {
                            traces: r.get::<_, i64>(0)? as u64,
                            objects: r.get::<_, i64>(1)? as u64,
                            tables: r.get::<_, i64>(2)? as u64,
                        })
                    })
                })
                .map_err(backend)
        })
        .await
    }

    async fn list_projects(&self, entity: Option<&str>, limit: u64) -> Result<Vec<ProjectInfo>> {
        let (lo, hi) = match entity {
            Some(e) => (format!("{e}/"), format!("{e}0")),
            None => (String::new(), "\u{10FFFF}".to_owned()),
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .read(move |conn| {
                let mut st = conn.prepare_cached(LIST).map_err(backend)?;
                st.query_map(params![lo, hi, limit], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(backend)
            })
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(p, n, last)| {
                Some(ProjectInfo {
                    project: ProjectId::parse(&p).ok()?,
                    calls: n as u64,
                    last_call: Micros(last),
                })
            })
            .collect())
    }
}
