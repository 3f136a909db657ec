//! Objects on ClickHouse: rows in `objects`, the newest row per digest (by `row_version`)
//! standing for the version; a delete writes the row again with `deleted_at`.

use std::collections::HashMap;

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::ProjectId;
use heddle_proto::objects::{
    DeletedVersion, ObjSchema, ObjSortField, ObjectsDelete, ObjectsQuery, VersionSel,
};
use heddle_proto::time::Micros;
use heddle_ql::Direction;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::sql::{Param, Sql, paging};
use super::{ClickHouseStore, backend, insert_error, next_version, tags};
use crate::objects::{self, LiveVersion, version_text};
use crate::{NewObject, ObjectStore, Result, StoreError};

/// One row of `objects`.
#[derive(Debug, Row, Serialize)]
struct ObjectRow {
    pub project_id: String,
    pub object_id: String,
    pub digest: String,
    pub version_index: i64,
    pub kind: String,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
    pub val: String,
    pub created_at: i64,
    pub deleted_at: Option<i64>,
    pub wb_user_id: Option<String>,
    pub row_version: u64,
}

/// A version's metadata as `select_object` and `select_objects` select it.
#[derive(Debug, Row, Deserialize)]
struct ObjectMetaRow {
    pub object_id: String,
    pub digest: String,
    pub version_index: i64,
    pub is_latest: u8,
    pub kind: String,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
    pub created_us: i64,
    pub deleted_us: Option<i64>,
    pub wb_user_id: Option<String>,
    pub size_bytes: Option<i64>,
}

/// What `live_object_versions` selects.
#[derive(Debug, Row, Deserialize)]
struct LiveVersionRow {
    pub digest: String,
    pub version_index: i64,
    pub base_object_class: Option<String>,
    pub leaf_object_class: Option<String>,
}

/// What `select_object_vals` selects.
#[derive(Debug, Row, Deserialize)]
struct ObjectValRow {
    pub object_id: String,
    pub digest: String,
    pub val_text: String,
}

/// What `object_state` selects.
#[derive(Debug, Row, Deserialize)]
struct ObjectStateRow {
    pub versions: u64,
    pub max_index: i64,
    pub found: u8,
    /// (version_index, created_at µs, deleted, wb_user_id) of the digest's newest row.
    pub mine: (i64, i64, u8, Option<String>),
    /// Base class of the newest live version (meaningless when `live_versions` is 0).
    pub live_base: (Option<String>,),
    pub live_versions: u64,
}

/// The versions of objects, newest row per digest, with `is_latest` (the highest non-deleted
/// version of the object), in the columns of `ObjectMetaRow`. [`object_versions`] completes the
/// text with the rows' condition; a condition on the versions may follow.
const OBJECT_VERSIONS: &str = "SELECT object_id, digest, version_index, is_latest, kind,
    base_object_class, leaf_object_class, created_us, deleted_us, wb_user_id, size_bytes
FROM (
    SELECT object_id, digest, v.1 AS version_index, v.2 AS kind, v.3 AS base_object_class,
           v.4 AS leaf_object_class, v.5 AS created_us, v.6 AS deleted_us, v.7 AS wb_user_id,
           v.8 AS size_bytes,
           ifNull(version_index = max(if(deleted_us IS NULL, version_index, NULL))
                                  OVER (PARTITION BY object_id), 0) AS is_latest
    FROM (
        SELECT object_id, digest,
               argMax(tuple(version_index, CAST(kind, 'String'), base_object_class,
                            leaf_object_class, toUnixTimestamp64Micro(created_at),
                            toUnixTimestamp64Micro(deleted_at), wb_user_id, ";

/// Starts a statement over the versions of the project's objects (one object, or the listed
/// ones, or all); `with_size` reads the values to measure them.
fn object_versions(project: &str, objects: ObjectsIn<'_>, with_size: bool) -> Sql {
    let mut sql = Sql::new(OBJECT_VERSIONS);
    sql.push(if with_size {
        "CAST(length(val), 'Nullable(Int64)')"
    } else {
        "CAST(NULL, 'Nullable(Int64)')"
    });
    sql.push("), row_version) AS v FROM objects WHERE project_id = ").bind_str(project);
    match objects {
        ObjectsIn::One(id) => sql.push(" AND object_id = ").bind_str(id),
        ObjectsIn::List(ids) => sql.push(" AND object_id IN ").bind(Param::StrList(ids.to_vec())),
        ObjectsIn::All => &mut sql,
    };
    sql.push(" GROUP BY object_id, digest))");
    sql
}

#[derive(Debug, Clone, Copy)]
enum ObjectsIn<'a> {
    One(&'a str),
    List(&'a [String]),
    All,
}

#[derive(Debug, Clone, PartialEq)]
enum ObjectBy {
    Digest(String),
    Index(i64),
    Latest,
}

/// One version of one object (deleted or not: the caller tells deleted versions apart).
fn select_object(project: &str, object_id: &str, by: &ObjectBy) -> Sql {
    let mut sql = object_versions(project, ObjectsIn::One(object_id), false);
    match by {
        ObjectBy::Digest(d) => sql.push(" WHERE digest = ").bind_str(d),
        ObjectBy::Index(i) => {
            sql.push(" WHERE version_index = ").bind(Param::Int(*i)).push(" ORDER BY created_us")
        }
        ObjectBy::Latest => sql.push(" WHERE deleted_us IS NULL ORDER BY version_index DESC"),
    };
    sql.push(" LIMIT 1");
    sql
}

/// `/objs/query` without the values: the project's live versions matching the filter, sorted
/// and paged. Every version of an object shares its base class (`objects::check_class`), so
/// filtering after `is_latest` is computed over all of an object's versions is exact.
fn select_objects(q: &ObjectsQuery) -> Sql {
    let objects = q.object_ids.as_deref().map_or(ObjectsIn::All, ObjectsIn::List);
    let mut sql = object_versions(q.project.as_str(), objects, q.include_storage_size);
    sql.push(" WHERE deleted_us IS NULL");
    match q.is_op {
        Some(true) => sql.push(" AND kind = 'op'"),
        Some(false) => sql.push(" AND kind != 'op'"),
        None => &mut sql,
    };
    if q.latest_only {
        sql.push(" AND is_latest = 1");
    }
    if let Some(classes) = &q.base_object_classes {
        sql.push(" AND base_object_class IN ").bind(Param::StrList(classes.clone()));
    }
    if let Some(classes) = &q.exclude_base_object_classes {
        sql.push(" AND (base_object_class IS NULL OR base_object_class NOT IN ")
            .bind(Param::StrList(classes.clone()))
            .push(")");
    }
    if let Some(classes) = &q.leaf_object_classes {
        sql.push(" AND leaf_object_class IN ").bind(Param::StrList(classes.clone()));
    }
    if let Some(tags) = &q.tags {
        sql.push(" AND (object_id, digest) IN (SELECT object_id, digest FROM object_tags");
        sql.push(" WHERE project_id = ").bind_str(q.project.as_str());
        sql.push(" AND tag IN ").bind(Param::StrList(tags.clone()));
        sql.push(" GROUP BY object_id, digest, tag HAVING argMax(present, row_version) = 1)");
    }
    if let Some(aliases) = &q.aliases {
        // Any of: a current alias naming the version, or `latest` and the version is the latest.
        sql.push(" AND ((object_id, digest) IN (SELECT object_id, argMax(digest, row_version)");
        sql.push(" FROM object_aliases WHERE project_id = ").bind_str(q.project.as_str());
        sql.push(" AND alias IN ").bind(Param::StrList(aliases.stored.clone()));
        sql.push(" GROUP BY object_id, alias)");
        if aliases.latest {
            sql.push(" OR is_latest = 1");
        }
        sql.push(")");
    }
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in q.sort.iter().enumerate() {
        sql.push(if i > 0 { ", " } else { "" }).push(match field {
            ObjSortField::ObjectId => "object_id",
            ObjSortField::CreatedAt => "created_us",
            ObjSortField::VersionIndex => "version_index",
        });
        sql.push(match dir {
            Direction::Asc => " ASC",
            Direction::Desc => " DESC",
        });
    }
    paging(&mut sql, q.limit, q.offset);
    sql
}

/// The stored values of the listed versions, as `(object_id, digest, val)`: a superset when
/// several objects are listed (any listed object with any listed digest); callers pick theirs.
fn select_object_vals(project: &str, object_ids: &[String], digests: &[String]) -> Sql {
    let mut sql = Sql::new(
        "SELECT object_id, digest, argMax(val, row_version) AS val_text FROM objects WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND object_id IN ").bind(Param::StrList(object_ids.to_vec()));
    sql.push(" AND digest IN ").bind(Param::StrList(digests.to_vec()));
    sql.push(" GROUP BY object_id, digest");
    sql
}

/// The stored value of one version (the newest row of the digest).
fn select_object_val(project: &str, object_id: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT argMax(val, row_version) FROM objects WHERE project_id = ");
    sql.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    sql.push(" AND digest = ").bind_str(digest);
    sql
}

/// What `create_object` needs to know, over the newest row per digest: whether the digest
/// exists (and its row, to revive it), the next version index, and the base class of the newest
/// live version (in a one-element tuple, so that NULL is a value).
fn object_state(project: &str, object_id: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT count() AS versions, max(v.1) AS max_index, countIf(digest = ");
    sql.bind_str(digest).push(") > 0 AS found, argMaxIf(tuple(v.1, v.2, v.3, v.4), v.1, digest = ");
    sql.bind_str(digest).push(") AS mine, ");
    sql.push("argMaxIf(tuple(v.5), v.1, v.3 = 0) AS live_base, countIf(v.3 = 0) AS live_versions");
    sql.push(" FROM (SELECT digest, argMax(tuple(version_index, ");
    sql.push("toUnixTimestamp64Micro(created_at), deleted_at IS NOT NULL, wb_user_id, ");
    sql.push("base_object_class), row_version) AS v");
    sql.push(" FROM objects WHERE project_id = ").bind_str(project);
    sql.push(" AND object_id = ").bind_str(object_id);
    sql.push(" GROUP BY digest)");
    sql
}

/// The live versions of one object, in the columns of `LiveVersionRow`.
fn live_object_versions(project: &str, object_id: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT digest, v.1 AS version_index, v.2 AS base_object_class, v.3 AS leaf_object_class
         FROM (SELECT digest, argMax(tuple(version_index, base_object_class, leaf_object_class,
                                           deleted_at IS NULL), row_version) AS v
               FROM objects WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    sql.push(" GROUP BY digest) WHERE v.4 ORDER BY version_index");
    sql
}

/// Soft delete of versions of one object: each digest's newest row written again with
/// `deleted_at` and a newer `row_version` (ClickHouse copies the value itself).
fn delete_object_versions(
    project: &str,
    object_id: &str,
    digests: &[String],
    deleted_at: i64,
    row_version: u64,
) -> Sql {
    let mut sql = Sql::new(
        "INSERT INTO objects (project_id, object_id, digest, version_index, kind,
             base_object_class, leaf_object_class, val, created_at, deleted_at, wb_user_id,
             row_version)
         SELECT project_id, object_id, digest, v.1, v.2, v.3, v.4, v.5, v.6,
                fromUnixTimestamp64Micro(",
    );
    sql.bind(Param::Int(deleted_at)).push(", 'UTC'), v.7, ").bind(Param::UInt(row_version));
    sql.push(
        " FROM (SELECT project_id, object_id, digest,
                    argMax(tuple(version_index, kind, base_object_class, leaf_object_class, val,
                                 created_at, wb_user_id), row_version) AS v
                FROM objects WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    sql.push(" AND digest IN ").bind(Param::StrList(digests.to_vec()));
    sql.push(" GROUP BY project_id, object_id, digest)");
    sql
}

fn to_schema(project: &ProjectId, meta: ObjectMetaRow, val: Option<Box<RawValue>>) -> ObjSchema {
    ObjSchema {
        project_id: project.clone(),
        object_id: meta.object_id,
        digest: meta.digest,
        version_index: meta.version_index,
        is_latest: meta.is_latest as i64,
        kind: meta.kind,
        base_object_class: meta.base_object_class,
        leaf_object_class: meta.leaf_object_class,
        val,
        created_at: Micros(meta.created_us),
        deleted_at: meta.deleted_us.map(Micros),
        wb_user_id: meta.wb_user_id,
        size_bytes: meta.size_bytes,
        tags: None,
        aliases: None,
    }
}

#[async_trait]
impl ObjectStore for ClickHouseStore {
    /// Version indexes are `max + 1` per object. ClickHouse has no transactions, so two
    /// concurrent creates of new digests could take the same index: this assumes ONE writer of
    /// objects per (project, object_id) — the query role of a single process (objects are a
    /// low-volume write) — and serialises creates in-process. Duplicates of one digest are
    /// harmless anyway: reads take one row per digest.
    async fn create_object(&self, o: NewObject) -> Result<()> {
        let _guard = self.object_lock(&o.project, &o.object_id).lock().await;
        let state: ObjectStateRow = object_state(o.project.as_str(), &o.object_id, &o.digest)
            .query(&self.client)
            .fetch_one()
            .await
            .map_err(backend)?;
        if state.found > 0 && state.mine.2 == 0 {
            return Ok(()); // the version exists: a no-op
        }
        let latest_base = (state.live_versions > 0).then_some(state.live_base.0.as_deref());
        objects::check_class(&o.object_id, latest_base, o.base_object_class.as_deref())?;
        let (version_index, created_at, wb_user_id) = if state.found > 0 {
            // Revive the deleted version as it was (a newer row of the same digest).
            let (index, created_at, _, wb_user_id) = state.mine;
            (index, created_at, wb_user_id)
        } else if state.versions == 0 {
            (0, Micros::now().0, o.wb_user_id)
        } else {
            (state.max_index + 1, Micros::now().0, o.wb_user_id)
        };
        let row = ObjectRow {
            project_id: o.project.as_str().to_owned(),
            object_id: o.object_id,
            digest: o.digest,
            version_index,
            kind: o.kind.to_owned(),
            base_object_class: o.base_object_class,
            leaf_object_class: o.leaf_object_class,
            val: o.val,
            created_at,
            deleted_at: None,
            wb_user_id,
            row_version: next_version(),
        };
        self.insert::<ObjectRow>("objects", &[row]).await
    }

    async fn read_object(
        &self,
        project: &ProjectId,
        object_id: &str,
        version: &VersionSel,
        metadata_only: bool,
    ) -> Result<ObjSchema> {
        let by = match version {
            VersionSel::Latest => ObjectBy::Latest,
            VersionSel::Index(i) => ObjectBy::Index(*i),
            VersionSel::Digest(d) => ObjectBy::Digest(d.clone()),
        };
        let found: Option<ObjectMetaRow> = select_object(project.as_str(), object_id, &by)
            .query(&self.client)
            .fetch_optional()
            .await
            .map_err(backend)?;
        let what = || format!("object {object_id}:{}", version_text(version));
        let meta = found.ok_or_else(|| StoreError::NotFound(format!("{} not found", what())))?;
        if let Some(at) = meta.deleted_us {
            return Err(StoreError::Deleted { what: what(), deleted_at: Micros(at) });
        }
        let val = if metadata_only {
            None
        } else {
            let text: String = select_object_val(project.as_str(), object_id, &meta.digest)
                .query(&self.client)
                .fetch_one()
                .await
                .map_err(backend)?;
            Some(RawValue::from_string(text).map_err(backend)?)
        };
        Ok(to_schema(project, meta, val))
    }

    /// Metadata first (sorted and paged by ClickHouse), then the values of that page only.
    async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>> {
        let metas: Vec<ObjectMetaRow> =
            select_objects(&q).query(&self.client).fetch_all().await.map_err(backend)?;
        let mut vals = HashMap::new();
        if !q.metadata_only && !metas.is_empty() {
            let dedup = |mut v: Vec<String>| {
                v.sort_unstable();
                v.dedup();
                v
            };
            let ids = dedup(metas.iter().map(|m| m.object_id.clone()).collect());
            let digests = dedup(metas.iter().map(|m| m.digest.clone()).collect());
            let rows: Vec<ObjectValRow> = select_object_vals(q.project.as_str(), &ids, &digests)
                .query(&self.client)
                .fetch_all()
                .await
                .map_err(backend)?;
            vals.extend(rows.into_iter().map(|r| ((r.object_id, r.digest), r.val_text)));
        }
        metas
            .into_iter()
            .map(|meta| {
                let val = match vals.remove(&(meta.object_id.clone(), meta.digest.clone())) {
                    Some(text) => Some(RawValue::from_string(text).map_err(backend)?),
                    None => None,
                };
                Ok(to_schema(&q.project, meta, val))
            })
            .collect()
    }

    async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>> {
        // The same lock as creates: a create reviving a version and a delete of it serialise.
        let _guard = self.object_lock(&d.project, &d.object_id).lock().await;
        let rows: Vec<LiveVersionRow> = live_object_versions(d.project.as_str(), &d.object_id)
            .query(&self.client)
            .fetch_all()
            .await
            .map_err(backend)?;
        let live: Vec<LiveVersion> = rows
            .into_iter()
            .map(|r| LiveVersion {
                digest: r.digest,
                version_index: r.version_index,
                base_object_class: r.base_object_class,
                leaf_object_class: r.leaf_object_class,
            })
            .collect();
        let doomed = objects::resolve_deletion(&d.object_id, &live, d.versions.as_deref())?;
        let digests: Vec<String> = doomed.iter().map(|v| v.digest.clone()).collect();
        delete_object_versions(
            d.project.as_str(),
            &d.object_id,
            &digests,
            Micros::now().0,
            next_version(),
        )
        .query(&self.client)
        .with_setting("wait_end_of_query", "1")
        .with_setting("async_insert", "0")
        .execute()
        .await
        .map_err(insert_error)?;
        // The deleted versions lose their tags and the aliases naming them (store/src/tags.rs).
        let cascade =
            tags::cascade_delete(d.project.as_str(), &d.object_id, &digests, next_version());
        tags::run_cascade(self, cascade).await?;
        Ok(doomed.into_iter().map(DeletedVersion::from).collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn object_statements_bind_user_values() {
        let evil = "x'); DROP TABLE objects; --";
        for by in [ObjectBy::Digest(evil.into()), ObjectBy::Index(3), ObjectBy::Latest] {
            let sql = select_object(evil, evil, &by);
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
        let objs: heddle_proto::objects::ObjQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "filter": {"object_ids": [evil], "base_object_classes": [evil],
                       "exclude_base_object_classes": [evil], "leaf_object_classes": [evil],
                       "is_op": true, "latest_only": true, "tags": [evil],
                       "aliases": [evil, "latest"]},
            "sort_by": [{"field": "created_at", "direction": "desc"}],
            "limit": 3, "offset": 1, "include_storage_size": true
        }))
        .unwrap();
        let list = [evil.to_owned()];
        for sql in [
            object_state(evil, evil, evil),
            select_object_val(evil, evil, evil),
            select_objects(&objs.validate().unwrap()),
            select_object_vals(evil, &list, &list),
            live_object_versions(evil, evil),
            delete_object_versions(evil, evil, &list, 1, 2),
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
    }
}
