//! Tags and aliases on ClickHouse: append-only rows in `object_tags` and `object_aliases`
//! (migration 10), the state of each tag or alias its newest row by `row_version`. Writes take
//! the object's lock (`objects.rs`), so the check that a version is live, the write, and the
//! removals a delete of the version appends are serialised.

use std::collections::HashMap;

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::limits::{MAX_ALIASES_PER_OBJECT, MAX_LISTED_NAMES, MAX_TAGS_PER_VERSION};
use heddle_proto::time::Micros;
use serde::{Deserialize, Serialize};

use super::sql::{Param, Sql};
use super::{ClickHouseStore, backend, insert_error, next_version};
use crate::{Labels, Result, StoreError, TagStore, VersionKey};

#[derive(Debug, Row, Serialize)]
struct TagRow {
    project_id: String,
    object_id: String,
    digest: String,
    tag: String,
    /// 1: the version has the tag; 0: it was removed.
    present: u8,
    created_at: i64,
    wb_user_id: Option<String>,
    row_version: u64,
}

#[derive(Debug, Row, Serialize)]
struct AliasRow {
    project_id: String,
    object_id: String,
    alias: String,
    /// The version the alias names; '' once removed.
    digest: String,
    created_at: i64,
    wb_user_id: Option<String>,
    row_version: u64,
}

#[derive(Debug, Row, Deserialize)]
struct LabelRow {
    object_id: String,
    digest: String,
    name: String,
}

/// How many live versions `(object_id, digest)` has: 1 or 0.
fn version_live(project: &str, object_id: &str, digest: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT count() FROM (SELECT argMax(deleted_at IS NULL, row_version) AS live FROM objects WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    sql.push(" AND digest = ").bind_str(digest).push(" GROUP BY digest) WHERE live");
    sql
}

/// Current tags of versions, as `(object_id, digest, tag)`; `objects` and `digests` narrow the
/// rows (any listed object with any listed digest).
pub(super) fn current_tags(project: &str, objects: &[String], digests: &[String]) -> Sql {
    let mut sql =
        Sql::new("SELECT object_id, digest, tag AS name FROM object_tags WHERE project_id = ");
    sql.bind_str(project);
    sql.push(" AND object_id IN ").bind(Param::StrList(objects.to_vec()));
    sql.push(" AND digest IN ").bind(Param::StrList(digests.to_vec()));
    sql.push(" GROUP BY object_id, digest, tag HAVING argMax(present, row_version) = 1");
    sql
}

/// Current aliases of objects, as `(object_id, digest, alias)`.
fn current_aliases(project: &str, objects: &[String]) -> Sql {
    let mut sql = Sql::new(
        "SELECT object_id, digest, name FROM (SELECT object_id, alias AS name,
             argMax(digest, row_version) AS digest FROM object_aliases WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND object_id IN ").bind(Param::StrList(objects.to_vec()));
    sql.push(" GROUP BY object_id, alias) WHERE digest != ''");
    sql
}

/// The project's distinct current tags or aliases, sorted, bounded.
fn list_names(project: &str, tags: bool) -> Sql {
    let mut sql = Sql::new(if tags {
        "SELECT DISTINCT tag FROM (SELECT tag FROM object_tags WHERE project_id = "
    } else {
        "SELECT DISTINCT alias FROM (SELECT alias FROM object_aliases WHERE project_id = "
    });
    sql.bind_str(project);
    sql.push(if tags {
        " GROUP BY object_id, digest, tag HAVING argMax(present, row_version) = 1) ORDER BY tag"
    } else {
        " GROUP BY object_id, alias HAVING argMax(digest, row_version) != '') ORDER BY alias"
    });
    sql.push(" LIMIT ").bind(Param::UInt(MAX_LISTED_NAMES as u64));
    sql
}

fn resolve(project: &str, object_id: &str, alias: &str) -> Sql {
    let mut sql =
        Sql::new("SELECT argMax(digest, row_version) FROM object_aliases WHERE project_id = ");
    sql.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    sql.push(" AND alias = ").bind_str(alias);
    sql
}

/// Rows a delete of versions appends: removal of each of their current tags, and of each alias
/// naming one of them (called by `objects.rs` under the object's lock).
pub(super) fn cascade_delete(
    project: &str,
    object_id: &str,
    digests: &[String],
    row_version: u64,
) -> [Sql; 2] {
    let mut tags = Sql::new(
        "INSERT INTO object_tags (project_id, object_id, digest, tag, present, created_at,
             wb_user_id, row_version)
         SELECT project_id, object_id, digest, tag, 0, now64(6), NULL, ",
    );
    tags.bind(Param::UInt(row_version)).push(" FROM object_tags WHERE project_id = ");
    tags.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    tags.push(" AND digest IN ").bind(Param::StrList(digests.to_vec()));
    tags.push(
        " GROUP BY project_id, object_id, digest, tag HAVING argMax(present, row_version) = 1",
    );
    let mut aliases = Sql::new(
        "INSERT INTO object_aliases (project_id, object_id, alias, digest, created_at,
             wb_user_id, row_version)
         SELECT project_id, object_id, alias, '', now64(6), NULL, ",
    );
    aliases.bind(Param::UInt(row_version)).push(" FROM object_aliases WHERE project_id = ");
    aliases.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    aliases.push(" GROUP BY project_id, object_id, alias HAVING argMax(digest, row_version) IN ");
    aliases.bind(Param::StrList(digests.to_vec()));
    [tags, aliases]
}

impl ClickHouseStore {
    async fn check_live(&self, project: &str, object_id: &str, digest: &str) -> Result<()> {
        let n: u64 = version_live(project, object_id, digest)
            .query(&self.client)
            .fetch_one()
            .await
            .map_err(backend)?;
        if n == 0 {
            return Err(StoreError::NotFound(format!(
                "object version {object_id}:{digest} not found"
            )));
        }
        Ok(())
    }

    async fn labels_of(&self, sql: Sql) -> Result<Vec<LabelRow>> {
        sql.query(&self.client).fetch_all().await.map_err(backend)
    }

    async fn version_tags(
        &self,
        project: &str,
        object_id: &str,
        digest: &str,
    ) -> Result<Vec<String>> {
        let sql = current_tags(project, &[object_id.to_owned()], &[digest.to_owned()]);
        Ok(self.labels_of(sql).await?.into_iter().map(|r| r.name).collect())
    }

    async fn object_aliases(&self, project: &str, object_id: &str) -> Result<Vec<LabelRow>> {
        self.labels_of(current_aliases(project, &[object_id.to_owned()])).await
    }
}

#[async_trait]
impl TagStore for ClickHouseStore {
    async fn add_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
        wb_user_id: &str,
    ) -> Result<()> {
        let _guard = self.object_lock(project, object_id).lock().await;
        let p = project.as_str();
        self.check_live(p, object_id, digest).await?;
        let have = self.version_tags(p, object_id, digest).await?;
        let new: Vec<&String> = tags.iter().filter(|t| !have.contains(t)).collect();
        if have.len() + new.len() > MAX_TAGS_PER_VERSION {
            return Err(StoreError::Invalid(format!(
                "a version holds at most {MAX_TAGS_PER_VERSION} tags"
            )));
        }
        let (now, version) = (Micros::now().0, next_version());
        let rows: Vec<TagRow> = new
            .into_iter()
            .map(|t| TagRow {
                project_id: p.to_owned(),
                object_id: object_id.to_owned(),
                digest: digest.to_owned(),
                tag: t.clone(),
                present: 1,
                created_at: now,
                wb_user_id: Some(wb_user_id.to_owned()),
                row_version: version,
            })
            .collect();
        self.insert::<TagRow>("object_tags", &rows).await
    }

    async fn remove_tags(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        tags: &[String],
    ) -> Result<()> {
        let _guard = self.object_lock(project, object_id).lock().await;
        let p = project.as_str();
        let have = self.version_tags(p, object_id, digest).await?;
        let (now, version) = (Micros::now().0, next_version());
        let rows: Vec<TagRow> = tags
            .iter()
            .filter(|t| have.contains(t))
            .map(|t| TagRow {
                project_id: p.to_owned(),
                object_id: object_id.to_owned(),
                digest: digest.to_owned(),
                tag: t.clone(),
                present: 0,
                created_at: now,
                wb_user_id: None,
                row_version: version,
            })
            .collect();
        self.insert::<TagRow>("object_tags", &rows).await
    }

    async fn set_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        digest: &str,
        aliases: &[String],
        wb_user_id: &str,
    ) -> Result<()> {
        let _guard = self.object_lock(project, object_id).lock().await;
        let p = project.as_str();
        self.check_live(p, object_id, digest).await?;
        let have = self.object_aliases(p, object_id).await?;
        let new = aliases.iter().filter(|a| !have.iter().any(|h| &h.name == *a)).count();
        if have.len() + new > MAX_ALIASES_PER_OBJECT {
            return Err(StoreError::Invalid(format!(
                "an object holds at most {MAX_ALIASES_PER_OBJECT} aliases"
            )));
        }
        let (now, version) = (Micros::now().0, next_version());
        let rows: Vec<AliasRow> = aliases
            .iter()
            .map(|a| AliasRow {
                project_id: p.to_owned(),
                object_id: object_id.to_owned(),
                alias: a.clone(),
                digest: digest.to_owned(),
                created_at: now,
                wb_user_id: Some(wb_user_id.to_owned()),
                row_version: version,
            })
            .collect();
        self.insert::<AliasRow>("object_aliases", &rows).await
    }

    async fn remove_aliases(
        &self,
        project: &ProjectId,
        object_id: &str,
        aliases: &[String],
    ) -> Result<()> {
        let _guard = self.object_lock(project, object_id).lock().await;
        let p = project.as_str();
        let have = self.object_aliases(p, object_id).await?;
        let (now, version) = (Micros::now().0, next_version());
        let rows: Vec<AliasRow> = aliases
            .iter()
            .filter(|a| have.iter().any(|h| &h.name == *a))
            .map(|a| AliasRow {
                project_id: p.to_owned(),
                object_id: object_id.to_owned(),
                alias: a.clone(),
                digest: String::new(),
                created_at: now,
                wb_user_id: None,
                row_version: version,
            })
            .collect();
        self.insert::<AliasRow>("object_aliases", &rows).await
    }

    async fn list_tags(&self, project: &ProjectId) -> Result<Vec<String>> {
        list_names(project.as_str(), true).query(&self.client).fetch_all().await.map_err(backend)
    }

    async fn list_aliases(&self, project: &ProjectId) -> Result<Vec<String>> {
        list_names(project.as_str(), false).query(&self.client).fetch_all().await.map_err(backend)
    }

    async fn labels(
        &self,
        project: &ProjectId,
        versions: &[VersionKey],
    ) -> Result<HashMap<VersionKey, Labels>> {
        let mut out: HashMap<VersionKey, Labels> = HashMap::new();
        if versions.is_empty() {
            return Ok(out);
        }
        let dedup = |mut v: Vec<String>| {
            v.sort_unstable();
            v.dedup();
            v
        };
        let objects = dedup(versions.iter().map(|v| v.0.clone()).collect());
        let digests = dedup(versions.iter().map(|v| v.1.clone()).collect());
        let p = project.as_str();
        let tags = self.labels_of(current_tags(p, &objects, &digests)).await?;
        let aliases = self.labels_of(current_aliases(p, &objects)).await?;
        // The statements read a superset (any listed object with any listed digest).
        let wanted: std::collections::HashSet<&VersionKey> = versions.iter().collect();
        for (rows, is_tag) in [(tags, true), (aliases, false)] {
            for r in rows {
                let key = (r.object_id, r.digest);
                if !wanted.contains(&key) {
                    continue;
                }
                let l = out.entry(key).or_default();
                if is_tag { l.tags.push(r.name) } else { l.aliases.push(r.name) }
            }
        }
        Ok(out)
    }

    async fn resolve_alias(
        &self,
        project: &ProjectId,
        object_id: &str,
        alias: &str,
    ) -> Result<Option<String>> {
        let digest: String = resolve(project.as_str(), object_id, alias)
            .query(&self.client)
            .fetch_one()
            .await
            .map_err(backend)?;
        Ok(Some(digest).filter(|d| !d.is_empty()))
    }
}

/// Runs the removal rows of [`cascade_delete`].
pub(super) async fn run_cascade(store: &ClickHouseStore, statements: [Sql; 2]) -> Result<()> {
    for sql in statements {
        sql.query(&store.client)
            .with_setting("wait_end_of_query", "1")
            .with_setting("async_insert", "0")
            .execute()
            .await
            .map_err(insert_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn tag_statements_bind_user_values() {
        let evil = "x'); DROP TABLE objects; --";
        let list = [evil.to_owned()];
        let [a, b] = cascade_delete(evil, evil, &list, 1);
        for sql in [
            version_live(evil, evil, evil),
            current_tags(evil, &list, &list),
            current_aliases(evil, &list),
            list_names(evil, true),
            list_names(evil, false),
            resolve(evil, evil, evil),
            a,
            b,
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
    }
}
