//! Projects on ClickHouse: the call parts of the projects' primary-key range aggregated per
//! call (started, deleted, start time), then per project, in one statement.

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::time::Micros;
use serde::Deserialize;

use super::sql::{Param, Sql};
use super::{ClickHouseStore, backend};
use crate::{ProjectInfo, ProjectStore, Result, StorageSizes};

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

/// Content bytes per resource, as written: every stored part of the project's calls that are not
/// deleted (a call sent as start and end counts both halves once each), live object versions,
/// and table rows; each statement with the project as its one parameter (`{p0:String}`, used
/// wherever it stands).
fn select_sizes(project: &str) -> [Sql; 3] {
    [
        "SELECT toUInt64(sum(length(attributes) + length(inputs) + length(ifNull(output, '')) \
           + length(summary) + length(ifNull(exception, '')) + length(ifNull(otel_dump, '')))) \
         FROM call_parts WHERE project_id = {p0:String} AND kind = 'part' \
         AND id NOT IN (SELECT id FROM call_parts WHERE project_id = {p0:String} \
                        AND kind = 'delete')",
        "SELECT toUInt64(sum(length(val))) FROM objects FINAL \
         WHERE project_id = {p0:String} AND deleted_at IS NULL",
        "SELECT toUInt64(sum(size_bytes)) FROM table_rows FINAL WHERE project_id = {p0:String}",
    ]
    .map(|text| Sql { text: text.to_owned(), params: vec![Param::Str(project.to_owned())] })
}

#[async_trait]
impl ProjectStore for ClickHouseStore {
    async fn storage_sizes(&self, project: &ProjectId) -> Result<StorageSizes> {
        let mut sizes = [0u64; 3];
        for (size, sql) in sizes.iter_mut().zip(select_sizes(project.as_str())) {
            *size = sql.query(&self.client).fetch_one().await.map_err(backend)?;
        }
        let [traces, objects, tables] = sizes;
        Ok(StorageSizes { traces, objects, tables })
    }

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
        for sql in select_sizes("acme'--") {
            assert!(!sql.text.contains("acme"), "{}", sql.text);
        }
    }
}
