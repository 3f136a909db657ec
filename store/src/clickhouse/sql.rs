//! All SQL of the ClickHouse backend: fixed statements, and the compiler that renders a
//! validated [`CallsQuery`] as one statement with server-side parameters (`{p0:String}`).
//! User values only ever travel as parameters; the only text spliced in is column names,
//! operators and function names chosen from enums here.
//!
//! Calls are aggregated at read time from their rows in `call_parts` ([`CALLS_AGG`]): filters,
//! sorting and paging run on the aggregated rows, so a call's start, end, rename and delete
//! rows may arrive in any order and any number of times.

use std::fmt::Write as _;

use heddle_proto::objects::{ObjSortField, ObjectsQuery};
use heddle_proto::query::Direction;
use heddle_proto::threads::{ThreadSortField, ThreadsQuery};

/// A server-side query parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Str(String),
    Int(i64),
    UInt(u64),
    Float(f64),
    StrList(Vec<String>),
}

impl Param {
    fn type_name(&self) -> &'static str {
        match self {
            Param::Str(_) => "String",
            Param::Int(_) => "Int64",
            Param::UInt(_) => "UInt64",
            Param::Float(_) => "Float64",
            Param::StrList(_) => "Array(String)",
        }
    }
}

/// A statement under construction: text with `{pN:Type}` placeholders plus the values.
#[derive(Debug, Default, Clone)]
pub struct Sql {
    pub text: String,
    pub params: Vec<Param>,
}

impl Sql {
    pub fn new(text: &str) -> Sql {
        Sql { text: text.to_owned(), params: Vec::new() }
    }

    pub fn push(&mut self, s: &str) -> &mut Self {
        self.text.push_str(s);
        self
    }

    pub fn bind(&mut self, p: Param) -> &mut Self {
        let _ = write!(self.text, "{{p{}:{}}}", self.params.len(), p.type_name());
        self.params.push(p);
        self
    }

    pub fn bind_str(&mut self, s: &str) -> &mut Self {
        self.bind(Param::Str(s.to_owned()))
    }

    /// The query, ready to run on `client` (raw: no client-side `?` binding).
    pub fn query(&self, client: &clickhouse::Client) -> clickhouse::query::Query {
        let mut q = client.query_raw(&self.text);
        for (i, p) in self.params.iter().enumerate() {
            let name = format!("p{i}");
            q = match p {
                Param::Str(s) => q.param(&name, s),
                Param::Int(n) => q.param(&name, n),
                Param::UInt(n) => q.param(&name, n),
                Param::Float(f) => q.param(&name, f),
                Param::StrList(l) => q.param(&name, l),
            };
        }
        q
    }
}

// ---------------------------------------------------------------------------------------------
// Calls

/// Table the call rows are written to (see migrations/0001_init.sql).
pub const CALL_PARTS: &str = "call_parts";

/// One call per `(project_id, id)`, aggregated from its rows. Every half is taken from the
/// newest row carrying it (`argMaxIf` by `version`); nullable members go through a one-element
/// tuple so that a newer NULL wins over an older value (aggregates skip bare NULLs). A rename
/// row wins over the display name of any start row, whenever either arrived. Duplicate rows
/// change no aggregate. The `WHERE` of the rows (project, and id pre-filters) follows this text.
/// Requires ClickHouse's analyzer (24.3+): aliases equal to column names are resolved to the
/// columns inside the aggregates.
pub(crate) const CALLS_AGG: &str = "SELECT project_id, id,
    argMaxIf(trace_id, version, trace_id IS NOT NULL) AS trace_id,
    countIf(has_start = 1) > 0 AS started,
    countIf(has_end = 1) > 0 AS ended,
    argMaxIf(op_name, version, has_start = 1) AS op_name,
    if(countIf(kind = 'rename') > 0,
       argMaxIf(tuple(display_name), version, kind = 'rename').1,
       argMaxIf(tuple(display_name), version, has_start = 1).1) AS display_name,
    argMaxIf(tuple(parent_id), version, has_start = 1).1 AS parent_id,
    argMaxIf(tuple(thread_id), version, has_start = 1).1 AS thread_id,
    argMaxIf(tuple(turn_id), version, has_start = 1).1 AS turn_id,
    argMaxIf(started_at, version, has_start = 1) AS started_at,
    argMaxIf(attributes, version, has_start = 1) AS attributes,
    argMaxIf(attributes_q, version, has_start = 1) AS attributes_q,
    argMaxIf(inputs, version, has_start = 1) AS inputs,
    argMaxIf(inputs_q, version, has_start = 1) AS inputs_q,
    argMaxIf(input_refs, version, has_start = 1) AS input_refs,
    argMaxIf(tuple(otel_dump), version, has_start = 1).1 AS otel_dump,
    argMaxIf(tuple(wb_user_id), version, has_start = 1).1 AS wb_user_id,
    argMaxIf(tuple(wb_run_id), version, has_start = 1).1 AS wb_run_id,
    argMaxIf(tuple(wb_run_step), version, has_start = 1).1 AS wb_run_step,
    if(ended, argMaxIf(ended_at, version, has_end = 1), NULL) AS ended_at,
    argMaxIf(summary, version, has_end = 1) AS summary,
    argMaxIf(summary_q, version, has_end = 1) AS summary_q,
    argMaxIf(tuple(output), version, has_end = 1).1 AS output,
    argMaxIf(output_q, version, has_end = 1) AS output_q,
    argMaxIf(output_refs, version, has_end = 1) AS output_refs,
    argMaxIf(tuple(exception), version, has_end = 1).1 AS exception,
    argMaxIf(tuple(wb_run_step_end), version, has_end = 1).1 AS wb_run_step_end,
    if(countIf(kind = 'delete') > 0, minIf(deleted_at, kind = 'delete'), NULL) AS deleted_at
FROM call_parts
WHERE project_id = ";

pub use super::compile::*;

// ---------------------------------------------------------------------------------------------
// Call writes

/// The calls among `{ids}` (and all their descendants) that are live, for a soft delete.
/// Descent goes through deleted calls too (their children may have arrived later); the path
/// guard makes a parent cycle terminate. Depth is bounded by ClickHouse's
/// `max_recursive_cte_evaluation_depth` (1000 by default).
pub fn doomed_calls(project: &str, ids: &[String]) -> Sql {
    let mut sql = Sql::default();
    sql.push(
        "WITH RECURSIVE links AS (
            SELECT id, argMaxIf(tuple(parent_id), version, has_start = 1).1 AS parent,
                   countIf(kind = 'delete') > 0 AS deleted
            FROM call_parts WHERE project_id = ",
    )
    .bind_str(project)
    .push(
        " GROUP BY id HAVING countIf(has_start = 1) > 0
        ),
        doomed AS (
            SELECT id, deleted, [id] AS path FROM links WHERE id IN ",
    )
    .bind(Param::StrList(ids.to_vec()))
    .push(
        " UNION ALL
            SELECT links.id, links.deleted, arrayPushBack(doomed.path, links.id)
            FROM links JOIN doomed ON links.parent = doomed.id
            WHERE NOT has(doomed.path, links.id)
        )
        SELECT DISTINCT id FROM doomed WHERE NOT deleted",
    );
    sql
}

// ---------------------------------------------------------------------------------------------
// Objects, files, keys

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
pub enum ObjectBy {
    Digest(String),
    Index(i64),
    Latest,
}

/// One version of one object (deleted or not: the caller tells deleted versions apart).
pub fn select_object(project: &str, object_id: &str, by: &ObjectBy) -> Sql {
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
pub fn select_objects(q: &ObjectsQuery) -> Sql {
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
pub fn select_object_vals(project: &str, object_ids: &[String], digests: &[String]) -> Sql {
    let mut sql = Sql::new(
        "SELECT object_id, digest, argMax(val, row_version) AS val_text FROM objects WHERE project_id = ",
    );
    sql.bind_str(project).push(" AND object_id IN ").bind(Param::StrList(object_ids.to_vec()));
    sql.push(" AND digest IN ").bind(Param::StrList(digests.to_vec()));
    sql.push(" GROUP BY object_id, digest");
    sql
}

/// The stored value of one version (the newest row of the digest).
pub fn select_object_val(project: &str, object_id: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT argMax(val, row_version) FROM objects WHERE project_id = ");
    sql.bind_str(project).push(" AND object_id = ").bind_str(object_id);
    sql.push(" AND digest = ").bind_str(digest);
    sql
}

/// What `create_object` needs to know, over the newest row per digest: whether the digest
/// exists (and its row, to revive it), the next version index, and the base class of the newest
/// live version (in a one-element tuple, so that NULL is a value).
pub fn object_state(project: &str, object_id: &str, digest: &str) -> Sql {
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
pub fn live_object_versions(project: &str, object_id: &str) -> Sql {
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
pub fn delete_object_versions(
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

/// The file row: size, chunk count and (files stored before chunking) the inline content.
pub fn select_file(project: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT size_bytes, n_chunks, content FROM files WHERE project_id = ");
    sql.bind_str(project).push(" AND digest = ").bind_str(digest).push(" LIMIT 1");
    sql
}

/// A file's chunks in order, each once (a repeated upload may have stored them twice).
pub fn select_file_chunks(project: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT data FROM file_chunks WHERE project_id = ");
    sql.bind_str(project).push(" AND digest = ").bind_str(digest);
    sql.push(" ORDER BY chunk_index LIMIT 1 BY chunk_index");
    sql
}

pub fn file_exists(project: &str, digest: &str) -> Sql {
    let mut sql = Sql::new("SELECT count() FROM files WHERE project_id = ");
    sql.bind_str(project).push(" AND digest = ").bind_str(digest);
    sql
}

/// Total bytes of a project's files, each digest once.
pub fn files_size(project: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT toUInt64(sum(size)) FROM (SELECT any(size_bytes) AS size FROM files WHERE project_id = ",
    );
    sql.bind_str(project).push(" GROUP BY digest)");
    sql
}

/// The entity of the unrevoked key with this hash (see migrations/0007_key_revocation.sql).
pub fn select_key(key_hash: &str) -> Sql {
    let mut sql = Sql::new("SELECT entity FROM api_keys WHERE key_hash = ");
    sql.bind_str(key_hash)
        .push(" AND key_hash NOT IN (SELECT key_hash FROM api_key_revocations WHERE key_hash = ")
        .bind_str(key_hash)
        .push(") LIMIT 1");
    sql
}

pub const ANY_ADMIN_KEY: &str = "SELECT count() FROM api_keys WHERE entity IS NULL \
    AND key_hash NOT IN (SELECT key_hash FROM api_key_revocations)";

/// `rows::KeyInfoRow` of every key, oldest first, or of the key with hash `only`.
pub fn key_infos(only: Option<&str>) -> Sql {
    let mut sql = Sql::new(
        "SELECT k.key_hash AS key_hash, k.entity AS entity, k.created_us AS created_us, \
         r.revoked_us AS revoked_us \
         FROM (SELECT key_hash, any(entity) AS entity, \
               toUnixTimestamp64Micro(min(created_at)) AS created_us \
               FROM api_keys GROUP BY key_hash) AS k \
         LEFT JOIN (SELECT key_hash, toNullable(toUnixTimestamp64Micro(min(revoked_at))) AS revoked_us \
               FROM api_key_revocations GROUP BY key_hash) AS r ON k.key_hash = r.key_hash",
    );
    if let Some(hash) = only {
        sql.push(" WHERE k.key_hash = ").bind_str(hash);
    }
    sql.push(" ORDER BY created_us, key_hash");
    sql
}

/// The hashes a key id (their prefix) names.
pub fn keys_with_id(id: &str) -> Sql {
    let mut sql = Sql::new("SELECT DISTINCT key_hash FROM api_keys WHERE startsWith(key_hash, ");
    sql.bind_str(id).push(")");
    sql
}

// ---------------------------------------------------------------------------------------------
// Tables

/// Table rows are written to this table, tables to [`TABLES`] (see migrations/0003_tables.sql).
pub const TABLE_ROWS: &str = "table_rows";
pub const TABLES: &str = "tables";

/// A table's row count and the digests at `[offset, offset + limit)`: only the slice of the
/// (possibly long) array leaves ClickHouse. Duplicate rows of one table are identical: LIMIT 1.
pub fn table_slice(project: &str, digest: &str, offset: u64, limit: Option<u64>) -> Sql {
    let mut sql = Sql::new("SELECT row_count, arraySlice(row_digests, 1 + ");
    sql.bind(Param::UInt(offset));
    if let Some(limit) = limit {
        sql.push(", ").bind(Param::UInt(limit));
    }
    sql.push(") AS page FROM tables WHERE project_id = ").bind_str(project);
    sql.push(" AND digest = ").bind_str(digest).push(" LIMIT 1");
    sql
}

/// The stored rows among `digests`, one per digest (duplicates are identical); `val` is ''
/// unless `with_val`, so size lookups do not read the values.
pub fn select_table_rows(project: &str, digests: &[String], with_val: bool) -> Sql {
    let val = if with_val { "val" } else { "'' AS val" };
    let mut sql = Sql::new("SELECT digest, size_bytes, ");
    sql.push(val).push(" FROM table_rows WHERE project_id = ").bind_str(project);
    sql.push(" AND digest IN ").bind(Param::StrList(digests.to_vec()));
    sql.push(" LIMIT 1 BY digest");
    sql
}

// ---------------------------------------------------------------------------------------------
// Costs and threads

pub const COSTS: &str = "llm_token_prices";

/// The newest row of each of the project's prices, tombstones included (the caller drops them).
pub fn select_costs(project: &str) -> Sql {
    let mut sql = Sql::new(
        "SELECT project_id, id, row_version, deleted, llm_id, provider_id, prompt_token_cost, \
         completion_token_cost, prompt_token_cost_unit, completion_token_cost_unit, \
         cache_read_input_token_cost, cache_creation_input_token_cost, \
         toUnixTimestamp64Micro(effective_date) AS effective_date, \
         toUnixTimestamp64Micro(created_at) AS created_at, created_by \
         FROM llm_token_prices WHERE project_id = ",
    );
    sql.bind_str(project).push(" ORDER BY id, row_version DESC LIMIT 1 BY id");
    sql
}

/// `/threads/stream_query` (semantics: `heddle_proto::threads`). Three levels, all within the
/// project's range of the primary key: the turn calls' rows are found first (a start row with
/// `turn_id = id` and a thread), then aggregated per call like `CALLS_AGG` but for the few
/// columns threads need, then per thread.
pub fn select_threads(q: &ThreadsQuery) -> Sql {
    let project = q.project.as_str();
    let mut sql = Sql::new(
        "SELECT thread_key AS thread_id, count() AS turn_count, \
         min(start_us) AS start_time_us, max(end_us) AS last_updated_us, \
         argMin(id, (start_us, id)) AS first_turn_id, argMax(id, (end_us, id)) AS last_turn_id, \
         if(countIf(ended) > 0, quantileExactInclusiveIf(0.5)(dur_ms, ended), NULL) \
           AS p50_turn_duration_ms, \
         if(countIf(ended) > 0, quantileExactInclusiveIf(0.99)(dur_ms, ended), NULL) \
           AS p99_turn_duration_ms \
         FROM (SELECT id, assumeNotNull(t_thread) AS thread_key, t_start AS start_us, \
               if(t_ended, t_end, t_start) AS end_us, t_ended AS ended, \
               if(t_ended, (t_end - t_start) / 1000.0, 0.0) AS dur_ms \
           FROM (SELECT id, \
                 argMaxIf(tuple(thread_id), version, has_start = 1).1 AS t_thread, \
                 argMaxIf(tuple(turn_id), version, has_start = 1).1 AS t_turn, \
                 countIf(has_start = 1) > 0 AS t_started, \
                 countIf(has_end = 1) > 0 AS t_ended, \
                 toUnixTimestamp64Micro(argMaxIf(started_at, version, has_start = 1)) AS t_start, \
                 toUnixTimestamp64Micro(argMaxIf(ended_at, version, has_end = 1)) AS t_end, \
                 countIf(kind = 'delete') > 0 AS t_deleted \
               FROM call_parts WHERE project_id = ",
    );
    sql.bind_str(project);
    sql.push(" AND id IN (SELECT id FROM call_parts WHERE project_id = ");
    sql.bind_str(project);
    sql.push(" AND has_start = 1 AND turn_id = id AND ifNull(thread_id, '') != ''");
    if let Some(ids) = &q.thread_ids {
        sql.push(" AND thread_id IN ").bind(Param::StrList(ids.clone()));
    }
    sql.push(
        ") GROUP BY id) \
         WHERE t_started AND NOT t_deleted AND ifNull(t_turn, '') = id \
           AND ifNull(t_thread, '') != ''",
    );
    if let Some(ids) = &q.thread_ids {
        sql.push(" AND t_thread IN ").bind(Param::StrList(ids.clone()));
    }
    sql.push(") GROUP BY thread_key HAVING 1");
    if let Some(after) = q.after {
        sql.push(" AND start_time_us > ").bind(Param::Int(after.0));
    }
    if let Some(before) = q.before {
        sql.push(" AND last_updated_us < ").bind(Param::Int(before.0));
    }
    sql.push(" ORDER BY ");
    for (i, (field, dir)) in q.sort.iter().enumerate() {
        sql.push(if i > 0 { ", " } else { "" }).push(match field {
            ThreadSortField::ThreadId => "thread_id",
            ThreadSortField::TurnCount => "turn_count",
            ThreadSortField::StartTime => "start_time_us",
            ThreadSortField::LastUpdated => "last_updated_us",
            ThreadSortField::P50TurnDurationMs => "p50_turn_duration_ms",
            ThreadSortField::P99TurnDurationMs => "p99_turn_duration_ms",
        });
        sql.push(match dir {
            Direction::Asc => " ASC NULLS LAST",
            Direction::Desc => " DESC NULLS LAST",
        });
    }
    paging(&mut sql, q.limit, q.offset);
    sql
}

#[cfg(test)]
mod tests {
    use heddle_proto::calls::{CallsQuery, CallsQueryReq};
    use serde_json::json;

    use super::*;

    fn compile(body: serde_json::Value) -> CallsQuery {
        let req: CallsQueryReq = serde_json::from_value(body).unwrap();
        req.validate().unwrap()
    }

    /// Every `{pN:Type}` placeholder names parameter N with its type, in order.
    fn check_placeholders(sql: &Sql) {
        let mut rest = sql.text.as_str();
        let mut n = 0;
        while let Some(at) = rest.find("{p") {
            let end = rest[at..].find('}').expect("closed placeholder") + at;
            let want = format!("{{p{n}:{}}}", sql.params[n].type_name());
            assert_eq!(&rest[at..=end], want, "{}", sql.text);
            n += 1;
            rest = &rest[end..];
        }
        assert_eq!(n, sql.params.len(), "{}", sql.text);
    }

    #[test]
    fn feedback_values_are_always_bound() {
        let evil = "x'); DROP TABLE feedback; --";
        let calls = compile(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": format!("feedback.[{evil}].payload.{evil}.0")},
                         {"$literal": evil}]},
                {"$eq": [{"$getField": "feedback.[*].runnable_ref"}, {"$literal": evil}]},
            ]}},
            "sort_by": [{"field": format!("feedback.[{evil}].trigger_ref"), "direction": "desc"}],
            "limit": 10
        }));
        let fq: heddle_proto::feedback::FeedbackQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "query": {"$expr": {"$or": [
                {"$eq": [{"$getField": format!("payload.{evil}")}, {"$literal": evil}]},
                {"$in": [{"$getField": "weave_ref"}, [{"$literal": evil}]]},
                {"$contains": {"input": {"$getField": "creator"}, "substr": {"$literal": evil}}}
            ]}},
            "sort_by": [{"field": format!("payload.{evil}"), "direction": "asc"}],
            "limit": 3, "offset": 1
        }))
        .unwrap();
        let (fq, _) = fq.validate().unwrap();
        let ids = [evil.to_owned()];
        for sql in [
            select_calls(&calls),
            count_calls(&calls),
            select_feedback(&fq),
            count_feedback(&fq),
            feedback_by_ids(evil, &ids),
            feedback_for_refs(evil, &ids),
            purge_feedback(evil, &ids),
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
        assert!(select_calls(&calls).text.contains("LEFT JOIN"), "feedback fields join");
        assert!(!select_calls(&compile(json!({"project_id": "e/p"}))).text.contains("JOIN"));
    }

    #[test]
    fn user_values_are_always_bound() {
        let evil = "x'); DROP TABLE call_parts; --";
        let q = compile(json!({
            "project_id": "e/p",
            "filter": {"op_names": [evil, format!("{evil}:*")], "call_ids": [evil],
                       "input_refs": [evil], "output_refs": [evil], "trace_ids": [evil],
                       "parent_ids": [evil], "thread_ids": [evil], "turn_ids": [evil],
                       "wb_user_ids": [evil], "wb_run_ids": [evil], "trace_roots_only": true},
            "query": {"$expr": {"$and": [
                {"$eq": [{"$getField": format!("inputs.{evil}.0")}, {"$literal": evil}]},
                {"$contains": {"input": {"$getField": "op_name"}, "substr": {"$literal": evil},
                               "case_insensitive": true}},
                {"$in": [{"$getField": "display_name"}, [{"$literal": evil}]]},
                {"$gt": [{"$convert": {"input": {"$getField": "output.a"}, "to": "double"}},
                         {"$literal": 1.5}]},
                {"$not": [{"$eq": [{"$convert": {"input": {"$getField": "attributes.b"},
                                                 "to": "bool"}}, {"$literal": true}]}]},
                {"$lt": [{"$getField": "started_at"}, {"$literal": "2026-01-01"}]}
            ]}},
            "sort_by": [{"field": format!("summary.{evil}"), "direction": "desc"}],
            "limit": 10, "offset": 5
        }));
        for sql in [select_calls(&q), count_calls(&q), doomed_calls(evil, &[evil.to_owned()])] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
            let bound = |p: &Param| match p {
                Param::Str(s) => s.contains(evil),
                Param::StrList(l) => l.iter().any(|s| s.contains(evil)),
                _ => false,
            };
            assert!(sql.params.iter().any(bound), "{:?}", sql.params);
        }
        for by in [ObjectBy::Digest(evil.into()), ObjectBy::Index(3), ObjectBy::Latest] {
            let sql = select_object(evil, evil, &by);
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
        let objs: heddle_proto::objects::ObjQueryReq = serde_json::from_value(json!({
            "project_id": "e/p",
            "filter": {"object_ids": [evil], "base_object_classes": [evil],
                       "exclude_base_object_classes": [evil], "leaf_object_classes": [evil],
                       "is_op": true, "latest_only": true},
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
            file_exists(evil, evil),
            select_file(evil, evil),
            select_file_chunks(evil, evil),
            files_size(evil),
            table_slice(evil, evil, 3, Some(4)),
            table_slice(evil, evil, 0, None),
            select_table_rows(evil, &[evil.to_owned()], true),
            select_key(evil),
            key_infos(Some(evil)),
            keys_with_id(evil),
        ] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
    }

    /// (name, request, fragments the SQL must contain, parameters it must bind)
    type Case = (&'static str, serde_json::Value, Vec<&'static str>, Vec<Param>);

    #[test]
    fn renders_the_query_language() {
        let s = |v: &str| Param::Str(v.to_owned());
        let cases: Vec<Case> = vec![
            (
                "default order and paging",
                json!({"project_id": "e/p", "limit": 10, "offset": 5}),
                vec![
                    "ORDER BY started_at ASC NULLS FIRST, id ASC NULLS FIRST LIMIT {p2:UInt64} \
                     OFFSET {p3:UInt64}) GROUP BY project_id, id) AS c ORDER BY started_at ASC",
                    "WHERE started AND deleted_at IS NULL",
                ],
                vec![s("e/p"), s("e/p"), Param::UInt(10), Param::UInt(5)],
            ),
            (
                "offset without limit",
                json!({"project_id": "e/p", "offset": 3}),
                vec!["OFFSET {p1:UInt64} ROWS"],
                vec![s("e/p"), Param::UInt(3)],
            ),
            (
                "array indexes are 1-based and only apply to arrays",
                json!({"project_id": "e/p", "query": {"$expr": {"$eq": [
                    {"$getField": "inputs.a.0"}, {"$literal": "x"}]}}}),
                vec!["if(empty(inputs_q), inputs, inputs_q)", "= 'Array'", "JSONExtractString("],
                vec![s("e/p"), s("a"), s("a"), Param::Int(1)],
            ),
            (
                "timestamps compare as DateTime64",
                json!({"project_id": "e/p", "query": {"$expr": {"$gt": [
                    {"$getField": "started_at"}, {"$literal": 1_700_000_000}]}}}),
                vec!["(started_at > fromUnixTimestamp64Micro({p1:Int64}, 'UTC'))"],
                vec![s("e/p"), Param::Int(1_700_000_000_000_000)],
            ),
            (
                "call ids narrow the aggregation by primary key",
                json!({"project_id": "e/p", "filter": {"call_ids": ["a", "b"]}}),
                vec!["WHERE project_id = {p0:String} AND id IN {p1:Array(String)}"],
                vec![s("e/p"), Param::StrList(vec!["a".into(), "b".into()])],
            ),
            (
                "empty thread ids match nothing",
                json!({"project_id": "e/p", "filter": {"thread_ids": []}}),
                vec!["ifNull(thread_id IN {p1:Array(String)}, 0)"],
                vec![s("e/p"), Param::StrList(vec![])],
            ),
            (
                "op name wildcards are prefixes",
                json!({"project_id": "e/p", "filter": {"op_names": ["weave:///e/p/op/f:*"]}}),
                vec!["(op_name IN {p1:Array(String)} OR startsWith(op_name, {p2:String}))"],
                vec![s("e/p"), Param::StrList(vec![]), s("weave:///e/p/op/f:")],
            ),
            (
                "negation treats NULL as false",
                json!({"project_id": "e/p", "query": {"$expr": {"$not": [{"$eq": [
                    {"$getField": "display_name"}, {"$literal": "x"}]}]}}}),
                vec!["(NOT ifNull(((display_name = {p1:String})), 0))"],
                vec![s("e/p"), s("x")],
            ),
            (
                "json sort: present, numeric, then text",
                json!({"project_id": "e/p", "sort_by": [{"field": "inputs.n", "direction": "desc"}]}),
                vec!["!= 'Null') DESC, if(isFinite(", "DESC NULLS LAST, multiIf("],
                vec![s("e/p"), s("n"), s("n")],
            ),
        ];
        for (name, body, fragments, params) in cases {
            let sql = select_calls(&compile(body));
            check_placeholders(&sql);
            for f in fragments {
                assert!(sql.text.contains(f), "{name}: no {f:?} in\n{}", sql.text);
            }
            assert_eq!(sql.params[..params.len()], params[..], "{name}: {}", sql.text);
        }
    }

    #[test]
    fn count_caps_at_limit_and_ignores_order() {
        let q = compile(json!({"project_id": "e/p", "limit": 7,
                               "sort_by": [{"field": "op_name", "direction": "desc"}]}));
        let sql = count_calls(&q);
        assert!(sql.text.starts_with("SELECT count() FROM (SELECT 1 FROM ("), "{}", sql.text);
        assert!(sql.text.ends_with("LIMIT {p1:UInt64})"), "{}", sql.text);
        assert!(!sql.text.contains("ORDER BY"), "{}", sql.text);
    }

    #[test]
    fn threads_query_binds_user_values_and_stays_in_the_project() {
        let evil = "x'); DROP TABLE call_parts; --";
        let req: heddle_proto::threads::ThreadsQueryReq = serde_json::from_value(
            serde_json::json!({"project_id": format!("e/{}", "p"), "filter": {"thread_ids": [evil],
                "after_datetime": "2026-01-01T00:00:00Z", "before_datetime": "2026-02-01T00:00:00Z"},
                "sort_by": [{"field": "p99_turn_duration_ms", "direction": "desc"}],
                "limit": 5, "offset": 2}),
        )
        .unwrap();
        let sql = select_threads(&req.validate().unwrap());
        assert!(!sql.text.contains("DROP"), "{}", sql.text);
        assert_eq!(sql.text.matches("{p").count(), sql.params.len());
        // Every read of call_parts is narrowed to the project (the primary key's prefix).
        assert_eq!(sql.text.matches("FROM call_parts WHERE project_id = {p").count(), 2);
        assert!(sql.text.contains("p99_turn_duration_ms DESC NULLS LAST, thread_id ASC"));
    }
}
