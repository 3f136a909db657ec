//! Projects on ClickHouse: the call parts of the projects' primary-key range aggregated per
//! call (started, deleted, start time), then per project, in one statement.

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use serde::Deserialize;

use super::sql::{Param, Sql};
use super::{ClickHouseStore, backend};
use crate::{ProjectInfo, ProjectStore, Result};

#[derive(Debug, Row, Deserialize)]
struct ProjectRow {
    project_id: String,
    calls: u64,
    last_us: i64,
}

/// A call counts once its start has arrived and until it is deleted, as on SQLite; its start
/// time is that of its newest start row.
fn select_projects(entity: Option<&str>, limit: u64) -> Sql {
    let mut q = Sql::new(
        "SELECT project_id, count() AS calls, max(start_us) AS last_us \
         FROM (SELECT project_id, id, countIf(has_start = 1) > 0 AS started, \
               countIf(kind = 'delete') > 0 AS deleted, \
               toUnixTimestamp64Micro(argMaxIf(started_at, version, has_start = 1)) AS start_us \
           FROM call_parts",
    );
    if let Some(e) = entity {
        q.push(" WHERE startsWith(project_id, ").bind(Param::Str(format!("{e}/"))).push(")");
    }
    q.push(
        " GROUP BY project_id, id) WHERE started AND NOT deleted \
         GROUP BY project_id ORDER BY last_us DESC, project_id LIMIT ",
    )
    .bind(Param::UInt(limit));
    q
}

#[async_trait]
impl ProjectStore for ClickHouseStore {
    async fn list_projects(&self, entity: Option<&str>, limit: u64) -> Result<Vec<ProjectInfo>> {
        let rows: Vec<ProjectRow> = select_projects(entity, limit)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                Some(ProjectInfo {
                    project: ProjectId::parse(&r.project_id).ok()?,
                    calls: r.calls,
                    last_call: Micros(r.last_us),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn entity_and_limit_are_parameters() {
        let q = select_projects(Some("acme'--"), 10);
        check_placeholders(&q);
        assert!(!q.text.contains("acme"), "{}", q.text);
        check_placeholders(&select_projects(None, 10));
    }
}
