//! Project settings on ClickHouse (`project_settings`, the newest row per setting wins) and the
//! retention purge as bounded lightweight DELETEs (docs/storage.md#retention).
//!
//! Why not a table TTL: a TTL expression can only read the row's own columns, so a per-project
//! retention would have to be frozen into each row at insert (an `expire_at` column), and a
//! changed setting would never reach rows already stored; a call's start and end rows could
//! even expire apart. The purge applies the setting as it is now, to whole calls.

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::project_settings::{ProjectSetting, ProjectSettings};
use heddle_proto::time::Micros;
use serde::{Deserialize, Serialize};

use super::sql::{Param, Sql};
use super::{ClickHouseStore, backend, next_version};
use crate::Result;
use crate::project_settings::{ProjectSettingsStore, Purged};

#[derive(Debug, Row, Serialize)]
struct SettingRow {
    pub project_id: String,
    pub name: String,
    pub value: String,
    pub updated_at: i64,
    pub version: u64,
}

#[derive(Debug, Row, Deserialize)]
struct NameValueRow {
    pub name: String,
    pub value: String,
}

/// File candidates examined per query while looking for unreferenced ones.
const FILE_PAGE: u64 = 200;

fn select_settings(project: &str) -> Sql {
    let mut sql = Sql::new("SELECT name, argMax(value, version) AS value FROM project_settings ");
    sql.push("WHERE project_id = ").bind_str(project).push(" GROUP BY name");
    sql
}

/// `(project_id, value)` of every project's newest retention setting, as `NameValueRow`. The
/// newest value is named apart from the column (`v`), so the filter reads the aggregate.
const RETENTION_PROJECTS: &str = "SELECT project_id AS name, v AS value FROM (\
    SELECT project_id, argMax(value, version) AS v FROM project_settings \
    WHERE name = 'retention_days' GROUP BY project_id) WHERE v != 'null' ORDER BY name";

fn before(sql: &mut Sql, column: &str, cutoff: Micros) {
    sql.push(" AND ").push(column).push(" < fromUnixTimestamp64Micro(");
    sql.bind(Param::Int(cutoff.0)).push(", 'UTC')");
}

/// Up to `limit` calls of the project that started before the cutoff.
fn expired_calls(project: &str, cutoff: Micros, limit: u64) -> Sql {
    let mut sql = Sql::new("SELECT DISTINCT id FROM call_parts WHERE project_id = ");
    sql.bind_str(project).push(" AND has_start = 1");
    before(&mut sql, "started_at", cutoff);
    sql.push(" LIMIT ").bind(Param::UInt(limit));
    sql
}

fn expired_feedback(project: &str, cutoff: Micros, limit: u64) -> Sql {
    let mut sql = Sql::new("SELECT DISTINCT id FROM feedback WHERE project_id = ");
    sql.bind_str(project);
    before(&mut sql, "created_at", cutoff);
    sql.push(" LIMIT ").bind(Param::UInt(limit));
    sql
}

/// A page of the project's files created before the cutoff, after digest `after`.
fn old_files(project: &str, cutoff: Micros, after: &str) -> Sql {
    let mut sql = Sql::new("SELECT DISTINCT digest FROM files WHERE project_id = ");
    sql.bind_str(project);
    before(&mut sql, "created_at", cutoff);
    sql.push(" AND digest > ").bind_str(after);
    sql.push(" ORDER BY digest LIMIT ").bind(Param::UInt(FILE_PAGE));
    sql
}

/// Which of `digests` an object version, table row or call of the project names.
fn referenced(project: &str, digests: &[String]) -> Sql {
    let mut sql = Sql::default();
    let sources = [
        ("objects", "val"),
        ("table_rows", "val"),
        ("call_parts", "concat(inputs, ifNull(output, ''), attributes)"),
    ];
    for (i, (table, text)) in sources.into_iter().enumerate() {
        if i > 0 {
            sql.push(" UNION DISTINCT ");
        }
        sql.push("SELECT DISTINCT arrayJoin(arrayFilter(d -> position(").push(text);
        sql.push(", d) > 0, ").bind(Param::StrList(digests.to_vec())).push(")) AS digest FROM ");
        sql.push(table).push(" WHERE project_id = ").bind_str(project);
    }
    sql
}

/// A lightweight DELETE of the rows of `table` in the project whose `column` is in `values`.
fn delete_in(table: &str, column: &str, project: &str, values: &[String]) -> Sql {
    let mut sql = Sql::new("DELETE FROM ");
    sql.push(table).push(" WHERE project_id = ").bind_str(project);
    sql.push(" AND ").push(column).push(" IN ").bind(Param::StrList(values.to_vec()));
    sql
}

impl ClickHouseStore {
    async fn run(&self, sql: Sql) -> Result<()> {
        sql.query(&self.client)
            .with_setting("wait_end_of_query", "1")
            .execute()
            .await
            .map_err(backend)
    }

    async fn strings(&self, sql: Sql) -> Result<Vec<String>> {
        sql.query(&self.client).fetch_all::<String>().await.map_err(backend)
    }

    /// Deletes up to `limit` unreferenced files created before `cutoff`, examining candidates a
    /// page at a time.
    async fn purge_files(&self, project: &str, cutoff: Micros, limit: u64) -> Result<u64> {
        let (mut after, mut deleted) = (String::new(), 0u64);
        while deleted < limit {
            let page = self.strings(old_files(project, cutoff, &after)).await?;
            let Some(last) = page.last() else { break };
            after = last.clone();
            let named = self.strings(referenced(project, &page)).await?;
            let mut doomed: Vec<String> = page.into_iter().filter(|d| !named.contains(d)).collect();
            doomed.truncate((limit - deleted) as usize);
            if !doomed.is_empty() {
                self.run(delete_in("file_chunks", "digest", project, &doomed)).await?;
                self.run(delete_in("files", "digest", project, &doomed)).await?;
                deleted += doomed.len() as u64;
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl ProjectSettingsStore for ClickHouseStore {
    async fn project_settings(&self, project: &ProjectId) -> Result<ProjectSettings> {
        let rows: Vec<NameValueRow> = select_settings(project.as_str())
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        let mut settings = ProjectSettings::default();
        for r in rows {
            ProjectSetting::apply_stored(&mut settings, &r.name, &r.value);
        }
        Ok(settings)
    }

    async fn set_project_setting(
        &self,
        project: &ProjectId,
        setting: ProjectSetting,
    ) -> Result<()> {
        let row = SettingRow {
            project_id: project.as_str().to_owned(),
            name: setting.name().to_owned(),
            value: setting.value_json(),
            updated_at: Micros::now().0,
            version: next_version(),
        };
        self.insert::<SettingRow>("project_settings", &[row]).await
    }

    async fn retention_projects(&self) -> Result<Vec<(ProjectId, i64)>> {
        let rows: Vec<NameValueRow> =
            self.client.query(RETENTION_PROJECTS).fetch_all().await.map_err(backend)?;
        let mut out = Vec::new();
        for r in rows {
            let mut s = ProjectSettings::default();
            ProjectSetting::apply_stored(&mut s, "retention_days", &r.value);
            if let (Ok(project), Some(days)) = (ProjectId::parse(&r.name), s.retention_days) {
                out.push((project, days));
            }
        }
        Ok(out)
    }

    async fn purge_expired(
        &self,
        project: &ProjectId,
        cutoff: Micros,
        limit: u64,
    ) -> Result<Purged> {
        let p = project.as_str();
        // Every row of an expired call goes (start, end, renames, deletes), so no half of it
        // outlives the other.
        let calls = self.strings(expired_calls(p, cutoff, limit)).await?;
        if !calls.is_empty() {
            self.run(delete_in("call_parts", "id", p, &calls)).await?;
        }
        let feedback = self.strings(expired_feedback(p, cutoff, limit)).await?;
        if !feedback.is_empty() {
            self.run(delete_in("feedback", "id", p, &feedback)).await?;
        }
        let files = self.purge_files(p, cutoff, limit).await?;
        // Blobs of parts offloaded from Kafka records: read once by the consumer, then dead
        // weight; whatever is older than the retention goes.
        let mut blobs = Sql::new("DELETE FROM call_blob_chunks WHERE project_id = ");
        blobs.bind_str(p);
        before(&mut blobs, "created_at", cutoff);
        self.run(blobs).await?;
        Ok(Purged { calls: calls.len() as u64, feedback: feedback.len() as u64, files })
    }
}
