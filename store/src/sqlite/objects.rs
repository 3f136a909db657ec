//! Objects on SQLite: one row per version in `objects`, its index assigned in the insert.

use async_trait::async_trait;
use heddle_proto::ProjectId;
use heddle_proto::objects::{
    DeletedVersion, ObjSchema, ObjSortField, ObjectsDelete, ObjectsQuery, VersionSel,
};
use heddle_proto::time::Micros;
use heddle_ql::Direction;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::sql::Sql;
use super::values::raw;
use super::writer::backend;
use crate::objects::{self, LiveVersion, version_text};
use crate::{NewObject, ObjectStore, Result, StoreError};

const INSERT_OBJECT: &str = "
INSERT INTO objects (project_id, object_id, digest, version_index, kind, base_object_class,
                     leaf_object_class, val, created_at, wb_user_id)
SELECT ?1, ?2, ?3,
       COALESCE((SELECT MAX(version_index) + 1 FROM objects WHERE project_id = ?1 AND object_id = ?2), 0),
       ?4, ?5, ?6, ?7, ?8, ?9
ON CONFLICT (project_id, object_id, digest) DO UPDATE SET deleted_at = NULL
";

/// Whether a version is the object's latest: the newest non-deleted version (served by the
/// partial index `objects_live`).
const IS_LATEST: &str = "(o.version_index = (SELECT MAX(version_index) FROM objects l
                       WHERE l.project_id = o.project_id AND l.object_id = o.object_id
                         AND l.deleted_at IS NULL))";

/// Columns of an object version in the order `row_to_object` reads them; the value and its
/// size only when wanted.
fn object_columns(val: bool, size: bool) -> String {
    format!(
        "o.object_id, o.digest, o.version_index, {IS_LATEST} AS is_latest, o.kind,
         o.base_object_class, o.leaf_object_class, {}, o.created_at, o.deleted_at, o.wb_user_id,
         {}",
        if val { "o.val" } else { "NULL" },
        if size { "length(CAST(o.val AS BLOB))" } else { "NULL" },
    )
}

fn select_object(by: ObjectBy) -> String {
    let cond = match by {
        ObjectBy::Digest => "o.digest = ?3",
        ObjectBy::Index => "o.version_index = ?3",
        ObjectBy::Latest => "o.deleted_at IS NULL ORDER BY o.version_index DESC LIMIT 1",
    };
    format!(
        "SELECT {} FROM objects o WHERE o.project_id = ?1 AND o.object_id = ?2 AND {cond}",
        object_columns(true, false)
    )
}

#[derive(Debug, Clone, Copy)]
enum ObjectBy {
    Digest,
    Index,
    Latest,
}

/// 1 when the version exists and is live, 0 when it is deleted, no row when it never existed.
const OBJECT_VERSION_LIVE: &str = "SELECT deleted_at IS NULL FROM objects WHERE project_id = ?1 AND object_id = ?2 AND digest = ?3";

/// The live versions of one object.
const LIVE_OBJECT_VERSIONS: &str = "
SELECT digest, version_index, base_object_class, leaf_object_class FROM objects
WHERE project_id = ?1 AND object_id = ?2 AND deleted_at IS NULL ORDER BY version_index";

/// Soft delete of the live versions of one object whose digests are in ?3 (a JSON array).
const DELETE_OBJECT_VERSIONS: &str = "
UPDATE objects SET deleted_at = ?4
WHERE project_id = ?1 AND object_id = ?2 AND deleted_at IS NULL
  AND digest IN (SELECT value FROM json_each(?3))";

/// A delete drops the deleted versions' tags and the aliases naming them (store/src/tags.rs).
const DELETE_VERSION_TAGS: &str = "DELETE FROM object_tags WHERE project_id = ?1 AND object_id = ?2
    AND digest IN (SELECT value FROM json_each(?3))";
const DELETE_VERSION_ALIASES: &str = "DELETE FROM object_aliases
    WHERE project_id = ?1 AND object_id = ?2 AND digest IN (SELECT value FROM json_each(?3))";

/// `/objs/query`: the project's live versions matching the filter, sorted and paged.
fn select_objects(q: &ObjectsQuery) -> Sql {
    let mut sql = Sql::default();
    sql.push("SELECT ")
        .push(&object_columns(!q.metadata_only, q.include_storage_size))
        .push(" FROM objects o WHERE o.project_id = ")
        .bind(q.project.as_str().to_owned())
        .push(" AND o.deleted_at IS NULL");
    if let Some(ids) = &q.object_ids {
        sql.push(" AND o.object_id IN ").bind_list(ids);
    }
    match q.is_op {
        Some(true) => sql.push(" AND o.kind = 'op'"),
        Some(false) => sql.push(" AND o.kind != 'op'"),
        None => &mut sql,
    };
    if q.latest_only {
        sql.push(" AND ").push(IS_LATEST);
    }
    if let Some(classes) = &q.base_object_classes {
        sql.push(" AND o.base_object_class IN ").bind_list(classes);
    }
    if let Some(classes) = &q.exclude_base_object_classes {
        sql.push(" AND (o.base_object_class IS NULL OR o.base_object_class NOT IN ")
            .bind_list(classes)
            .push(")");
    }
    if let Some(classes) = &q.leaf_object_classes {
        sql.push(" AND o.leaf_object_class IN ").bind_list(classes);
    }
    if let Some(tags) = &q.tags {
        sql.push(
            " AND EXISTS (SELECT 1 FROM object_tags t WHERE t.project_id = o.project_id \
             AND t.object_id = o.object_id AND t.digest = o.digest AND t.tag IN ",
        )
        .bind_list(tags)
        .push(")");
    }
    if let Some(aliases) = &q.aliases {
        // Any of: a stored alias naming the version, or `latest` and the version is the latest.
        sql.push(
            " AND (EXISTS (SELECT 1 FROM object_aliases a WHERE a.project_id = o.project_id \
             AND a.object_id = o.object_id AND a.digest = o.digest AND a.alias IN ",
        )
        .bind_list(&aliases.stored)
        .push(")");
        if aliases.latest {
            sql.push(" OR ").push(IS_LATEST);
        }
        sql.push(")");
    }
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in q.sort.iter().enumerate() {
        sql.push(if i > 0 { ", " } else { "" }).push(match field {
            ObjSortField::ObjectId => "o.object_id",
            ObjSortField::CreatedAt => "o.created_at",
            ObjSortField::VersionIndex => "o.version_index",
        });
        sql.push(match dir {
            Direction::Asc => " ASC",
            Direction::Desc => " DESC",
        });
    }
    if q.limit.is_some() || q.offset > 0 {
        let limit = q.limit.map_or(-1, |l| l.min(i64::MAX as u64) as i64);
        sql.push(" LIMIT ").bind(limit).push(" OFFSET ").bind(q.offset.min(i64::MAX as u64) as i64);
    }
    sql
}

fn row_to_object(
    project: &ProjectId,
    r: &Row<'_>,
    metadata_only: bool,
) -> rusqlite::Result<ObjSchema> {
    Ok(ObjSchema {
        project_id: project.clone(),
        object_id: r.get(0)?,
        digest: r.get(1)?,
        version_index: r.get(2)?,
        is_latest: r.get::<_, Option<bool>>(3)?.unwrap_or(false) as i64,
        kind: r.get(4)?,
        base_object_class: r.get(5)?,
        leaf_object_class: r.get(6)?,
        val: if metadata_only { None } else { raw(r.get(7)?)? },
        created_at: Micros(r.get(8)?),
        deleted_at: r.get::<_, Option<i64>>(9)?.map(Micros),
        wb_user_id: r.get(10)?,
        size_bytes: r.get(11)?,
        tags: None,
        aliases: None,
    })
}

fn row_to_live_version(r: &Row<'_>) -> rusqlite::Result<LiveVersion> {
    Ok(LiveVersion {
        digest: r.get(0)?,
        version_index: r.get(1)?,
        base_object_class: r.get(2)?,
        leaf_object_class: r.get(3)?,
    })
}

fn live_versions(
    conn: &Connection,
    project: &ProjectId,
    object_id: &str,
) -> Result<Vec<LiveVersion>> {
    conn.prepare_cached(LIVE_OBJECT_VERSIONS)
        .and_then(|mut st| {
            st.query_map(params![project.as_str(), object_id], row_to_live_version)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(backend)
}

#[async_trait]
impl ObjectStore for SqliteStore {
    async fn create_object(&self, o: NewObject) -> Result<()> {
        self.writer
            .exec(move |conn| {
                let live: Option<bool> = conn
                    .query_row(
                        OBJECT_VERSION_LIVE,
                        params![o.project.as_str(), o.object_id, o.digest],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                if live == Some(true) {
                    return Ok(()); // the version exists: a no-op
                }
                let versions = live_versions(conn, &o.project, &o.object_id)?;
                let latest = versions.last().map(|v| v.base_object_class.as_deref());
                objects::check_class(&o.object_id, latest, o.base_object_class.as_deref())?;
                // New, or a deleted version revived with its version index.
                conn.prepare_cached(INSERT_OBJECT)
                    .and_then(|mut st| {
                        st.execute(params![
                            o.project.as_str(),
                            o.object_id,
                            o.digest,
                            o.kind,
                            o.base_object_class,
                            o.leaf_object_class,
                            o.val,
                            Micros::now().0,
                            o.wb_user_id,
                        ])
                    })
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn read_object(
        &self,
        project: &ProjectId,
        object_id: &str,
        version: &VersionSel,
        metadata_only: bool,
    ) -> Result<ObjSchema> {
        let (project, object_id, version) =
            (project.clone(), object_id.to_owned(), version.clone());
        self.read(move |conn| {
            let (by, selector): (ObjectBy, Option<rusqlite::types::Value>) = match &version {
                VersionSel::Latest => (ObjectBy::Latest, None),
                VersionSel::Index(i) => (ObjectBy::Index, Some((*i).into())),
                VersionSel::Digest(d) => (ObjectBy::Digest, Some(d.clone().into())),
            };
            let args = [project.as_str().to_owned().into(), object_id.clone().into()]
                .into_iter()
                .chain(selector);
            let found = conn
                .query_row(&select_object(by), rusqlite::params_from_iter(args), |r| {
                    row_to_object(&project, r, metadata_only)
                })
                .optional()
                .map_err(backend)?;
            let what = || format!("object {object_id}:{}", version_text(&version));
            match found {
                None => Err(StoreError::NotFound(format!("{} not found", what()))),
                Some(ObjSchema { deleted_at: Some(at), .. }) => {
                    Err(StoreError::Deleted { what: what(), deleted_at: at })
                }
                Some(obj) => Ok(obj),
            }
        })
        .await
    }

    async fn query_objects(&self, q: ObjectsQuery) -> Result<Vec<ObjSchema>> {
        let statement = select_objects(&q);
        self.read(move |conn| {
            let mut st = conn.prepare(&statement.text).map_err(backend)?;
            st.query_map(rusqlite::params_from_iter(statement.params.iter()), |r| {
                row_to_object(&q.project, r, q.metadata_only)
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(backend)
        })
        .await
    }

    async fn delete_objects(&self, d: ObjectsDelete) -> Result<Vec<DeletedVersion>> {
        self.writer
            .exec(move |conn| {
                let live = live_versions(conn, &d.project, &d.object_id)?;
                let doomed = objects::resolve_deletion(&d.object_id, &live, d.versions.as_deref())?;
                let digests: Vec<&str> = doomed.iter().map(|v| v.digest.as_str()).collect();
                let digests = serde_json::to_string(&digests).map_err(backend)?;
                let (p, o) = (d.project.as_str(), d.object_id.as_str());
                conn.execute(DELETE_OBJECT_VERSIONS, params![p, o, digests, Micros::now().0])
                    .map_err(backend)?;
                for cascade in [DELETE_VERSION_TAGS, DELETE_VERSION_ALIASES] {
                    conn.execute(cascade, params![p, o, digests]).map_err(backend)?;
                }
                Ok(doomed.into_iter().map(DeletedVersion::from).collect())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn object_queries_bind_user_values() {
        let evil = "x'); DROP TABLE objects; --";
        let req: heddle_proto::objects::ObjQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "filter": {"object_ids": [evil], "base_object_classes": [evil],
                       "exclude_base_object_classes": [evil], "leaf_object_classes": [evil],
                       "is_op": false, "latest_only": true, "tags": [evil],
                       "aliases": [evil, "latest"]},
            "sort_by": [{"field": "created_at", "direction": "desc"}],
            "limit": 3, "offset": 1, "metadata_only": true, "include_storage_size": true
        }))
        .unwrap();
        let sql = select_objects(&req.validate().unwrap());
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        assert_eq!(sql.text.matches('?').count(), sql.params.len());
        assert!(
            sql.text.contains(
                "ORDER BY o.created_at DESC, o.object_id ASC, o.version_index ASC LIMIT ? OFFSET ?"
            ),
            "{}",
            sql.text
        );
    }
}
