//! Project settings on SQLite (`project_settings`, one row per setting) and the retention
//! purge: each batch deletes at most `limit` rows of a kind in one short writer job, so ingest's
//! commits run between batches (docs/storage.md#retention).

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::project_settings::{ProjectSetting, ProjectSettings};
use heddle_proto::time::Micros;
use rusqlite::params;

use super::SqliteStore;
use super::project_keys::key_of;
use super::values::project_id;
use super::writer::backend;
use crate::Result;
use crate::project_settings::{ProjectSettingsStore, Purged};

const SELECT_SETTINGS: &str = "SELECT name, value FROM project_settings WHERE project_id = ?1";

const UPSERT_SETTING: &str = "
INSERT INTO project_settings (project_id, name, value, updated_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (project_id, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
";

const RETENTION_PROJECTS: &str = "SELECT project_id, value FROM project_settings \
    WHERE name = 'retention_days' AND value != 'null' ORDER BY project_id";

/// Calls started before the cutoff, deleted or not (docs/storage.md#retention).
const PURGE_CALLS: &str = concat!(
    "DELETE FROM calls WHERE rowid IN (
    SELECT rowid FROM calls WHERE project_key = ",
    key_of!("?1"),
    " AND started_at < ?2 LIMIT ?3)"
);

const PURGE_FEEDBACK: &str = "DELETE FROM feedback WHERE rowid IN (
    SELECT rowid FROM feedback WHERE project_id = ?1 AND created_at < ?2 LIMIT ?3)";

/// Files created before ?2 that nothing still stored in the project names: no object version,
/// table row, or call (calls older than the cutoff are purged first, so these are the younger
/// ones). Run on a reader: the scan may be long, and must not hold the writer.
const UNREFERENCED_FILES: &str = concat!(
    "
SELECT f.digest FROM files f INDEXED BY files_by_created
WHERE f.project_id = ?1 AND f.created_at < ?2
  AND NOT EXISTS (SELECT 1 FROM objects o WHERE o.project_id = ?1 AND instr(o.val, f.digest) > 0)
  AND NOT EXISTS (SELECT 1 FROM table_rows t WHERE t.project_id = ?1 AND instr(t.val, f.digest) > 0)
  AND NOT EXISTS (SELECT 1 FROM calls c WHERE c.project_key = ",
    key_of!("?1"),
    "
                  AND (instr(c.inputs, f.digest) > 0 OR instr(c.output, f.digest) > 0
                       OR instr(c.attributes, f.digest) > 0))
ORDER BY f.created_at LIMIT ?3"
);

/// Deletes a file found unreferenced, unless something written since the search began (?4, less
/// [`RECHECK_SLACK_MICROS`] for calls, whose times the client sets) names it. Recent rows are found
/// through the time indexes, so the re-check is cheap on the writer.
const PURGE_FILE: &str = concat!(
    "
DELETE FROM files WHERE project_id = ?1 AND digest = ?2 AND created_at < ?3
  AND NOT EXISTS (SELECT 1 FROM objects o WHERE o.project_id = ?1 AND o.created_at >= ?4
                  AND instr(o.val, ?2) > 0)
  AND NOT EXISTS (SELECT 1 FROM table_rows t WHERE t.project_id = ?1 AND t.created_at >= ?4
                  AND instr(t.val, ?2) > 0)
  AND NOT EXISTS (SELECT 1 FROM calls c WHERE c.project_key = ",
    key_of!("?1"),
    " AND c.started_at >= ?5
                  AND (instr(c.inputs, ?2) > 0 OR instr(c.output, ?2) > 0
                       OR instr(c.attributes, ?2) > 0))"
);

/// How far before the search calls are re-checked: a client may report a start a little in the
/// past.
const RECHECK_SLACK_MICROS: i64 = 3_600 * 1_000_000;
const PURGE_FILE_CHUNKS: &str = "DELETE FROM file_chunks WHERE project_id = ?1 AND digest = ?2";

#[async_trait]
impl ProjectSettingsStore for SqliteStore {
    async fn project_settings(&self, project: &ProjectId) -> Result<ProjectSettings> {
        let project = project.clone();
        self.read(move |conn| {
            let mut st = conn.prepare_cached(SELECT_SETTINGS).map_err(backend)?;
            let mut rows = st.query(params![project.as_str()]).map_err(backend)?;
            let mut settings = ProjectSettings::default();
            while let Some(r) = rows.next().map_err(backend)? {
                let (name, value): (String, String) =
                    (r.get(0).map_err(backend)?, r.get(1).map_err(backend)?);
                ProjectSetting::apply_stored(&mut settings, &name, &value);
            }
            Ok(settings)
        })
        .await
    }

    async fn set_project_setting(
        &self,
        project: &ProjectId,
        setting: ProjectSetting,
    ) -> Result<()> {
        let project = project.clone();
        self.writer
            .exec(move |conn| {
                conn.prepare_cached(UPSERT_SETTING)
                    .and_then(|mut st| {
                        st.execute(params![
                            project.as_str(),
                            setting.name(),
                            setting.value_json(),
                            Micros::now().0
                        ])
                    })
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn retention_projects(&self) -> Result<Vec<(ProjectId, i64)>> {
        self.read(|conn| {
            let mut st = conn.prepare_cached(RETENTION_PROJECTS).map_err(backend)?;
            let rows = st
                .query_map([], |r| {
                    Ok((project_id(&r.get::<_, String>(0)?)?, r.get::<_, String>(1)?))
                })
                .map_err(backend)?;
            let mut out = Vec::new();
            for row in rows {
                let (project, value) = row.map_err(backend)?;
                let mut s = ProjectSettings::default();
                ProjectSetting::apply_stored(&mut s, "retention_days", &value);
                if let Some(days) = s.retention_days {
                    out.push((project, days));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn purge_expired(
        &self,
        project: &ProjectId,
        cutoff: Micros,
        limit: u64,
    ) -> Result<Purged> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let p = project.as_str().to_owned();
        // Calls and feedback: one short writer job each.
        let calls = {
            let p = p.clone();
            self.writer
                .exec(move |conn| {
                    conn.prepare_cached(PURGE_CALLS)
                        .and_then(|mut st| st.execute(params![p, cutoff.0, limit]))
                        .map_err(backend)
                })
                .await? as u64
        };
        let feedback = {
            let p = p.clone();
            self.writer
                .exec(move |conn| {
                    conn.prepare_cached(PURGE_FEEDBACK)
                        .and_then(|mut st| st.execute(params![p, cutoff.0, limit]))
                        .map_err(backend)
                })
                .await? as u64
        };
        // Files: found on a reader, deleted on the writer.
        let searched_at = Micros::now().0;
        let digests: Vec<String> = {
            let p = p.clone();
            self.read(move |conn| {
                let mut st = conn.prepare_cached(UNREFERENCED_FILES).map_err(backend)?;
                let rows =
                    st.query_map(params![p, cutoff.0, limit], |r| r.get(0)).map_err(backend)?;
                rows.collect::<rusqlite::Result<_>>().map_err(backend)
            })
            .await?
        };
        let files = if digests.is_empty() {
            0
        } else {
            self.writer
                .exec(move |conn| {
                    let mut n = 0;
                    for d in &digests {
                        let gone = conn
                            .prepare_cached(PURGE_FILE)
                            .and_then(|mut st| {
                                st.execute(params![
                                    p,
                                    d,
                                    cutoff.0,
                                    searched_at,
                                    searched_at - RECHECK_SLACK_MICROS
                                ])
                            })
                            .map_err(backend)?;
                        if gone > 0 {
                            conn.prepare_cached(PURGE_FILE_CHUNKS)
                                .and_then(|mut st| st.execute(params![p, d]))
                                .map_err(backend)?;
                            n += 1;
                        }
                    }
                    Ok(n)
                })
                .await?
        };
        Ok(Purged { calls, feedback, files })
    }
}
