//! Tags and aliases on SQLite: rows in `object_tags` and `object_aliases`, written in the same
//! transaction as the check that the version is live (see `store/src/tags.rs`).

use std::collections::HashMap;

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::limits::{MAX_ALIASES_PER_OBJECT, MAX_LISTED_NAMES, MAX_TAGS_PER_VERSION};
use heddle_proto::time::Micros;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::writer::backend;
use crate::{Labels, Result, StoreError, TagStore, VersionKey};

const VERSION_LIVE: &str = "SELECT 1 FROM objects
WHERE project_id = ?1 AND object_id = ?2 AND digest = ?3 AND deleted_at IS NULL";

const INSERT_TAG: &str = "INSERT INTO object_tags (project_id, object_id, digest, tag, created_at,
    wb_user_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING";
const COUNT_TAGS: &str =
    "SELECT count(*) FROM object_tags WHERE project_id = ?1 AND object_id = ?2 AND digest = ?3";
const DELETE_TAGS: &str = "DELETE FROM object_tags WHERE project_id = ?1 AND object_id = ?2
    AND digest = ?3 AND tag IN (SELECT value FROM json_each(?4))";

const UPSERT_ALIAS: &str = "INSERT INTO object_aliases (project_id, object_id, alias, digest,
    created_at, wb_user_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (project_id, object_id, alias) DO UPDATE SET digest = excluded.digest,
    created_at = excluded.created_at, wb_user_id = excluded.wb_user_id";
const COUNT_ALIASES: &str =
    "SELECT count(*) FROM object_aliases WHERE project_id = ?1 AND object_id = ?2";
const DELETE_ALIASES: &str = "DELETE FROM object_aliases WHERE project_id = ?1 AND object_id = ?2
    AND alias IN (SELECT value FROM json_each(?3))";

const LIST_TAGS: &str =
    "SELECT DISTINCT tag FROM object_tags WHERE project_id = ?1 ORDER BY tag LIMIT ?2";
const LIST_ALIASES: &str =
    "SELECT DISTINCT alias FROM object_aliases WHERE project_id = ?1 ORDER BY alias LIMIT ?2";

/// Labels of the versions in ?2, a JSON array of `[object_id, digest]` pairs.
const VERSION_TAGS: &str = "SELECT t.object_id, t.digest, t.tag FROM object_tags t
JOIN json_each(?2) v ON t.object_id = v.value ->> 0 AND t.digest = v.value ->> 1
WHERE t.project_id = ?1";
const VERSION_ALIASES: &str = "SELECT a.object_id, a.digest, a.alias FROM object_aliases a
JOIN json_each(?2) v ON a.object_id = v.value ->> 0 AND a.digest = v.value ->> 1
WHERE a.project_id = ?1";

const RESOLVE_ALIAS: &str =
    "SELECT digest FROM object_aliases WHERE project_id = ?1 AND object_id = ?2 AND alias = ?3";

/// `NotFound` unless the version is live.
fn check_live(conn: &Connection, project: &str, object_id: &str, digest: &str) -> Result<()> {
    let live = conn
        .query_row(VERSION_LIVE, params![project, object_id, digest], |_| Ok(()))
        .optional()
        .map_err(backend)?;
    live.ok_or_else(|| {
        StoreError::NotFound(format!("object version {object_id}:{digest} not found"))
    })
}

fn json(list: &[String]) -> Result<String> {
    serde_json::to_string(list).map_err(backend)
}

fn names(conn: &Connection, sql: &str, project: &str) -> Result<Vec<String>> {
    let mut st = conn.prepare_cached(sql).map_err(backend)?;
    st.query_map(params![project, MAX_LISTED_NAMES as i64], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(backend)
}

#[async_trait]
impl TagStore for SqliteStore {
    async fn add_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
        wb_user_id: &str,
    ) -> Result<()> {
        let (p, o, d) = (project.as_str().to_owned(), object_id.to_owned(), digest.to_owned());
        let (tags, user) = (tags.to_vec(), wb_user_id.to_owned());
        self.writer
            .exec(move |conn| {
                check_live(conn, &p, &o, &d)?;
                let now = Micros::now().0;
                let mut st = conn.prepare_cached(INSERT_TAG).map_err(backend)?;
                for t in &tags {
                    st.execute(params![p, o, d, t, now, user]).map_err(backend)?;
                }
                let n: i64 =
                    conn.query_row(COUNT_TAGS, params![p, o, d], |r| r.get(0)).map_err(backend)?;
                if n as usize > MAX_TAGS_PER_VERSION {
                    // The job's savepoint rolls the inserts back.
                    return Err(StoreError::Invalid(format!(
                        "a version holds at most {MAX_TAGS_PER_VERSION} tags"
                    )));
                }
                Ok(())
            })
            .await
    }

    async fn remove_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
    ) -> Result<()> {
        let (p, o, d) = (project.as_str().to_owned(), object_id.to_owned(), digest.to_owned());
        let tags = json(tags)?;
        self.writer
            .exec(move |conn| {
                conn.execute(DELETE_TAGS, params![p, o, d, tags]).map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn set_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        aliases: &[String],
        wb_user_id: &str,
    ) -> Result<()> {
        let (p, o, d) = (project.as_str().to_owned(), object_id.to_owned(), digest.to_owned());
        let (aliases, user) = (aliases.to_vec(), wb_user_id.to_owned());
        self.writer
            .exec(move |conn| {
                check_live(conn, &p, &o, &d)?;
                let now = Micros::now().0;
                let mut st = conn.prepare_cached(UPSERT_ALIAS).map_err(backend)?;
                for a in &aliases {
                    st.execute(params![p, o, a, d, now, user]).map_err(backend)?;
                }
                let n: i64 =
                    conn.query_row(COUNT_ALIASES, params![p, o], |r| r.get(0)).map_err(backend)?;
                if n as usize > MAX_ALIASES_PER_OBJECT {
                    return Err(StoreError::Invalid(format!(
                        "an object holds at most {MAX_ALIASES_PER_OBJECT} aliases"
                    )));
                }
                Ok(())
            })
            .await
    }

    async fn remove_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        aliases: &[String],
    ) -> Result<()> {
        let (p, o) = (project.as_str().to_owned(), object_id.to_owned());
        let aliases = json(aliases)?;
        self.writer
            .exec(move |conn| {
                conn.execute(DELETE_ALIASES, params![p, o, aliases]).map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn list_tags(&self, project: &ProjectId) -> Result<Vec<String>> {
        let p = project.as_str().to_owned();
        self.read(move |conn| names(conn, LIST_TAGS, &p)).await
    }

    async fn list_aliases(&self, project: &ProjectId) -> Result<Vec<String>> {
        let p = project.as_str().to_owned();
        self.read(move |conn| names(conn, LIST_ALIASES, &p)).await
    }

    async fn labels(
        &self,
        project: &ProjectId,
        versions: &[VersionKey],
    ) -> Result<HashMap<VersionKey, Labels>> {
        if versions.is_empty() {
            return Ok(HashMap::new());
        }
        let p = project.as_str().to_owned();
        let pairs = serde_json::to_string(versions).map_err(backend)?;
        self.read(move |conn| {
            let mut out: HashMap<VersionKey, Labels> = HashMap::new();
            for (sql, is_tag) in [(VERSION_TAGS, true), (VERSION_ALIASES, false)] {
                let mut st = conn.prepare_cached(sql).map_err(backend)?;
                let rows = st
                    .query_map(params![p, pairs], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?))
                    })
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                    .map_err(backend)?;
                for (o, d, name) in rows {
                    let l = out.entry((o, d)).or_default();
                    if is_tag { l.tags.push(name) } else { l.aliases.push(name) }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn resolve_alias(
        &self,
        project: &ProjectId,
        object_id: &str,
        alias: &str,
    ) -> Result<Option<String>> {
        let (p, o, a) = (project.as_str().to_owned(), object_id.to_owned(), alias.to_owned());
        self.read(move |conn| {
            conn.query_row(RESOLVE_ALIAS, params![p, o, a], |r| r.get(0))
                .optional()
                .map_err(backend)
        })
        .await
    }
}
