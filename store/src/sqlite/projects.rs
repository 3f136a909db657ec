//! The project list of the web UI on SQLite: one pass over the live-calls index
//! (`calls_live_by_start`), which holds every column the aggregation needs.

use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use rusqlite::{Connection, params};

use super::writer::backend;
use crate::{ProjectInfo, Result};

/// `?1`/`?2` bound the project ids to one entity (`entity/` up to `entity0`: `0` follows `/`).
const LIST: &str = "SELECT project_id, COUNT(*), MAX(started_at) FROM calls \
                    WHERE deleted_at IS NULL AND started_at IS NOT NULL \
                    AND project_id >= ?1 AND project_id < ?2 \
                    GROUP BY project_id ORDER BY 3 DESC, 1 LIMIT ?3";

pub(super) fn list(
    conn: &Connection,
    entity: Option<&str>,
    limit: u64,
) -> Result<Vec<ProjectInfo>> {
    let (lo, hi) = match entity {
        Some(e) => (format!("{e}/"), format!("{e}0")),
        None => (String::new(), "\u{10FFFF}".to_owned()),
    };
    let limit = limit.min(i64::MAX as u64) as i64;
    let rows = conn
        .prepare_cached(LIST)
        .and_then(|mut st| {
            st.query_map(params![lo, hi, limit], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)?;
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
