//! The project list of the web UI on ClickHouse: call parts grouped by project. A call counts
//! once its start has arrived and until it is deleted (delete rows are counted apart).

use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use serde::Deserialize;

use super::sql::Sql;
use super::{ClickHouseStore, backend};
use crate::{ProjectInfo, Result};

#[derive(Debug, Row, Deserialize)]
struct ProjectRow {
    project_id: String,
    started: u64,
    deleted: u64,
    last_us: i64,
}

impl ClickHouseStore {
    pub(super) async fn projects(
        &self,
        entity: Option<&str>,
        limit: u64,
    ) -> Result<Vec<ProjectInfo>> {
        let mut q = Sql::new(
            "SELECT project_id, uniqExactIf(id, kind = 'part' AND has_start = 1) AS started, \
             uniqExactIf(id, kind = 'delete') AS deleted, \
             toUnixTimestamp64Micro(maxIf(started_at, kind = 'part' AND has_start = 1)) AS last_us \
             FROM call_parts",
        );
        if let Some(e) = entity {
            q.push(" WHERE startsWith(project_id, ").bind_str(&format!("{e}/")).push(")");
        }
        q.push(" GROUP BY project_id HAVING started > deleted ORDER BY last_us DESC, project_id LIMIT ");
        q.push(&limit.min(1_000_000).to_string());
        let rows: Vec<ProjectRow> = q.query(self.client()).fetch_all().await.map_err(backend)?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                Some(ProjectInfo {
                    project: ProjectId::parse(&r.project_id).ok()?,
                    calls: r.started.saturating_sub(r.deleted),
                    last_call: Micros(r.last_us),
                })
            })
            .collect())
    }
}
