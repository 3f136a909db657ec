//! Versioned schema migrations, tracked in SQLite's `user_version`. Each migration runs in its
//! own transaction, so a crash mid-migration leaves the previous version intact.

use rusqlite::Connection;

/// Migrations in order; `MIGRATIONS[i]` brings the schema from version `i` to `i + 1`.
/// Append only: never edit a migration that has shipped.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_live_calls_index.sql"),
    include_str!("migrations/0003_objects_files.sql"),
    include_str!("migrations/0004_tables.sql"),
    include_str!("migrations/0005_feedback.sql"),
    include_str!("migrations/0006_costs.sql"),
    include_str!("migrations/0007_key_revocation.sql"),
    include_str!("migrations/0008_blobs.sql"),
    include_str!("migrations/0009_filter_indexes.sql"),
    include_str!("migrations/0010_tags_aliases.sql"),
    include_str!("migrations/0011_annotation_queues.sql"),
    include_str!("migrations/0012_project_settings.sql"),
    include_str!("migrations/0013_otel_logs.sql"),
    include_str!("migrations/0014_end_status.sql"),
    include_str!("migrations/0015_text_index.sql"),
    include_str!("migrations/0016_call_buckets.sql"),
    include_str!("migrations/0017_project_keys.sql"),
    include_str!("migrations/0018_otel_resources.sql"),
    include_str!("migrations/0019_turns_by_bucket.sql"),
    include_str!("migrations/0020_id_directory.sql"),
    include_str!("migrations/0021_writer_generation.sql"),
    include_str!("migrations/0022_op_keys.sql"),
    include_str!("migrations/0023_text_index_merges.sql"),
];

pub const LATEST: i64 = MIGRATIONS.len() as i64;

/// Applies every migration newer than the database's version; a no-op when up to date.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<i64> {
    migrate_to(conn, LATEST)
}

/// Applies the migrations up to version `target` (tests build older schemas with it).
pub(crate) fn migrate_to(conn: &mut Connection, target: i64) -> rusqlite::Result<i64> {
    loop {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let Some(sql) = MIGRATIONS.get(version as usize).filter(|_| version < target) else {
            return Ok(version);
        };
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version + 1)?;
        tx.commit()?;
    }
}

/// A database in `dir` at schema version `version`, as an older heddle left it, for tests of
/// what the migrations after it do.
#[cfg(test)]
pub(crate) fn database_at(dir: &std::path::Path, version: i64) -> Connection {
    let mut conn = Connection::open(dir.join(super::DB_FILE)).unwrap();
    assert_eq!(migrate_to(&mut conn, version).unwrap(), version);
    conn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_from_empty_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("db")).unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            tables,
            [
                "annotation_queue_items",
                "annotation_queue_progress",
                "annotation_queues",
                "api_keys",
                "call_blob_chunks",
                "call_buckets",
                "call_ids",
                "call_ids_merged",
                "call_ops",
                "calls",
                "calls_text",
                // FTS5's own tables behind `calls_text`.
                "calls_text_config",
                "calls_text_data",
                "calls_text_docsize",
                "calls_text_idx",
                "calls_text_pending",
                "feedback",
                "file_chunks",
                "files",
                "heddle_health",
                "llm_token_prices",
                "object_aliases",
                "object_tags",
                "objects",
                "otel_logs",
                "otel_resources",
                "project_keys",
                "project_settings",
                "table_rows",
                "tables"
            ]
        );
    }

    #[test]
    fn the_substring_index_merges_eight_segments_a_level() {
        // FTS5 keeps the setting in its config table, for every later connection to read.
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("db")).unwrap();
        migrate(&mut conn).unwrap();
        let automerge: i64 = conn
            .query_row("SELECT v FROM calls_text_config WHERE k = 'automerge'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(automerge, 8);
    }

    #[test]
    fn refuses_nothing_from_a_newer_binary() {
        // A database written by a newer heddle stays untouched by an older one.
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("db")).unwrap();
        conn.pragma_update(None, "user_version", LATEST + 5).unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), LATEST + 5);
    }
}
