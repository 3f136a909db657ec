//! Versioned schema migrations for ClickHouse, recorded in `heddle_schema_migrations`.
//!
//! ClickHouse has no transactions, so a migration cannot be applied atomically. Instead every
//! statement of a migration is idempotent (`IF NOT EXISTS`, ...): a migration interrupted
//! half-way is simply applied again from its first statement, and its version is recorded only
//! after all its statements succeeded. Two processes migrating at once both run idempotent
//! statements and both record the version; reads take distinct versions.
//!
//! Numbering is shared with SQLite (`sqlite/migrations/`): a change of the schema carries the
//! same number in both backends, and a number one backend has no use for is skipped by the
//! other (2, the SQLite partial index on live calls, and 9, SQLite's filter indexes, are
//! SQLite's only). Databases created before the numbering was shared recorded objects-and-files
//! chunks as 2 and tables as 3; they need nothing done, see [`migrate`].

use clickhouse::Client;

/// Migrations in order: `(version, statements)`. Append only: never edit one that has shipped.
const MIGRATIONS: &[(u32, &str)] = &[
    (1, include_str!("migrations/0001_init.sql")),
    (3, include_str!("migrations/0003_objects_files.sql")),
    (4, include_str!("migrations/0004_tables.sql")),
    (5, include_str!("migrations/0005_feedback.sql")),
    (6, include_str!("migrations/0006_costs.sql")),
    (7, include_str!("migrations/0007_key_revocation.sql")),
    (8, include_str!("migrations/0008_blobs.sql")),
    (10, include_str!("migrations/0010_tags_aliases.sql")),
    (11, include_str!("migrations/0011_annotation_queues.sql")),
    (12, include_str!("migrations/0012_project_settings.sql")),
    (13, include_str!("migrations/0013_otel_logs.sql")),
];

pub const LATEST: u32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Every version this binary knows, in order.
pub fn versions() -> Vec<u32> {
    MIGRATIONS.iter().map(|(v, _)| *v).collect()
}

const CREATE_LOG: &str = "CREATE TABLE IF NOT EXISTS heddle_schema_migrations (
    version    UInt32,
    applied_at DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = ReplacingMergeTree ORDER BY version";

/// The statements of a migration file: comment lines dropped, split at a `;` ending a line.
pub fn statements(file: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in file.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") || trimmed.is_empty() {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') {
            let stmt = current.trim().trim_end_matches(';').trim().to_owned();
            if !stmt.is_empty() {
                out.push(stmt);
            }
            current.clear();
        }
    }
    let rest = current.trim();
    if !rest.is_empty() {
        out.push(rest.to_owned());
    }
    out
}

/// Versions recorded as applied.
pub async fn applied(client: &Client) -> clickhouse::error::Result<Vec<u32>> {
    client.query_raw(CREATE_LOG).with_setting("wait_end_of_query", "1").execute().await?;
    client
        .query_raw("SELECT DISTINCT version FROM heddle_schema_migrations ORDER BY version")
        .fetch_all::<u32>()
        .await
}

/// Applies every migration not yet recorded; returns the versions applied now (empty when the
/// schema was up to date). Versions recorded by a newer heddle are left alone.
///
/// A database from before the shared numbering records 1, 2 (objects and files, now 3) and
/// 3 (tables, now 4), and is handled without a translation: its versions were applied in
/// order and each change's number only grew, so a recorded version still implies that every
/// migration numbered up to it now has been applied (old 3 implies old 2, now 3); a migration
/// whose new number is not recorded (4, tables) is run again, and its statements are
/// idempotent. A stale 2 stays in the log and means nothing to ClickHouse.
pub async fn migrate(client: &Client) -> clickhouse::error::Result<Vec<u32>> {
    let done = applied(client).await?;
    let mut now = Vec::new();
    for (version, file) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        for stmt in statements(file) {
            client.query_raw(&stmt).with_setting("wait_end_of_query", "1").execute().await?;
        }
        client
            .query_raw("INSERT INTO heddle_schema_migrations (version) VALUES ({v:UInt32})")
            .param("v", version)
            .with_setting("wait_end_of_query", "1")
            .execute()
            .await?;
        tracing::info!(version, "applied ClickHouse migration");
        now.push(*version);
    }
    Ok(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_statements_at_line_ends() {
        let file = "-- a comment; not a statement\nCREATE TABLE a (x String DEFAULT ';')\nENGINE = Log;\n\n-- more\nCREATE TABLE b (y UInt8) ENGINE = Log;\n";
        assert_eq!(
            statements(file),
            [
                "CREATE TABLE a (x String DEFAULT ';')\nENGINE = Log",
                "CREATE TABLE b (y UInt8) ENGINE = Log"
            ]
        );
        let ours = statements(MIGRATIONS[0].1);
        assert_eq!(ours.len(), 4, "{ours:#?}");
        assert!(ours.iter().all(|s| s.starts_with("CREATE TABLE IF NOT EXISTS")), "{ours:#?}");
        let v3 = statements(MIGRATIONS[1].1);
        assert_eq!(v3.len(), 2, "{v3:#?}");
        assert!(v3.iter().all(|s| s.contains(" IF NOT EXISTS ")), "idempotent: {v3:#?}");
        let tables = statements(MIGRATIONS[2].1);
        assert_eq!(tables.len(), 2, "{tables:#?}");
        assert!(tables.iter().all(|s| s.starts_with("CREATE TABLE IF NOT EXISTS")), "{tables:#?}");
    }

    #[test]
    fn feedback_migration_is_idempotent() {
        let (version, file) = MIGRATIONS.iter().find(|(v, _)| *v == 5).expect("version 5");
        let stmts = statements(file);
        assert_eq!((*version, stmts.len()), (5, 1), "{stmts:#?}");
        assert!(stmts[0].starts_with("CREATE TABLE IF NOT EXISTS feedback"), "{stmts:#?}");
        assert!(stmts[0].contains("ORDER BY (project_id, id)"), "{stmts:#?}");
    }

    #[test]
    fn blobs_migration_is_idempotent() {
        let (_, file) = MIGRATIONS.iter().find(|(v, _)| *v == 8).expect("version 8");
        let stmts = statements(file);
        assert_eq!(stmts.len(), 2, "{stmts:#?}");
        assert!(stmts.iter().all(|s| s.starts_with("CREATE TABLE IF NOT EXISTS")), "{stmts:#?}");
    }

    #[test]
    fn versions_increase() {
        assert!(MIGRATIONS.windows(2).all(|w| w[0].0 < w[1].0));
    }

    /// Every statement of every migration can run again: what makes a database from before the
    /// shared numbering safe to migrate (see `migrate`).
    #[test]
    fn every_statement_is_idempotent() {
        for (version, file) in MIGRATIONS {
            for stmt in statements(file) {
                assert!(stmt.contains(" IF NOT EXISTS "), "version {version}: {stmt}");
            }
        }
    }

    /// A change of the schema carries the same number and name in both backends; ClickHouse
    /// only skips numbers (2: a SQLite index).
    #[test]
    fn numbering_is_shared_with_sqlite() {
        let names = |dir: &str| -> Vec<String> {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        let ours = names("src/clickhouse/migrations");
        let sqlite = names("src/sqlite/migrations");
        for name in &ours {
            assert!(sqlite.contains(name), "{name} has no SQLite counterpart: {sqlite:?}");
        }
        let numbers: Vec<u32> = ours.iter().map(|n| n[..4].parse().unwrap()).collect();
        assert_eq!(numbers, versions(), "every file is a migration, in order");
        let sqlite_numbers: Vec<u32> = sqlite.iter().map(|n| n[..4].parse().unwrap()).collect();
        assert_eq!(sqlite_numbers, (1..=sqlite.len() as u32).collect::<Vec<_>>());
    }
}
