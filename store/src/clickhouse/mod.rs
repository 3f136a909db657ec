//! The distributed backend: ClickHouse over its HTTP interface (the `clickhouse` crate, LZ4
//! compressed). Schema: `migrations/`; the statement builder and what the query language's
//! compiler shares: [`sql`]. Each resource's statements, row types and trait implementation
//! live in the module named for it; this one connects, migrates and inserts.
//!
//! Writes are synchronous inserts (no `async_insert`): when a call returns, the rows are in
//! ClickHouse and visible to the next read. Calls are append-only rows aggregated per call at
//! read time, which gives order tolerance and idempotency without transactions (see
//! `sql::CALLS_AGG`). Objects need a version index per new digest, which ClickHouse cannot
//! assign atomically: see `objects.rs`.

mod annotation_queues;
mod blobs;
mod calls;
mod compile;
mod costs;
mod feedback;
mod files;
mod json;
mod keys;
pub mod migrations;
mod objects;
mod otel_logs;
mod project_settings;
mod projects;
pub mod sql;
mod tables;
mod tags;
mod threads;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use clickhouse::Client;
use heddle_proto::ProjectId;

use crate::{BoxError, Result, StoreError};

/// A backend error with `e` (a `clickhouse` error, mostly) as its source.
fn backend(e: impl Into<BoxError>) -> StoreError {
    StoreError::Backend(e.into())
}

/// ClickHouse error codes that mean the inserted data itself is unacceptable (parse and type
/// errors, oversized strings): retrying the same rows cannot succeed.
const DATA_ERROR_CODES: &[u32] = &[6, 26, 27, 38, 41, 69, 72, 117, 131];

/// The server's `Code: N.` of an error, if it is one.
fn error_code(e: &clickhouse::error::Error) -> Option<u32> {
    let clickhouse::error::Error::BadResponse(text) = e else { return None };
    let rest = &text[text.find("Code: ")? + 6..];
    rest[..rest.find('.')?].trim().parse().ok()
}

/// An insert's error: [`StoreError::Rejected`] when the data is at fault, else a backend error.
fn insert_error(e: clickhouse::error::Error) -> StoreError {
    match error_code(&e) {
        Some(code) if DATA_ERROR_CODES.contains(&code) => StoreError::Rejected(Box::new(e)),
        _ => backend(e),
    }
}

/// Orders the rows of one call (and of one object digest): a per-process monotonic counter
/// seeded from the clock in nanoseconds, so rows written later by this or (with roughly
/// synchronised clocks) another process compare greater.
fn next_version() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let prev =
        LAST.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |prev| Some(now.max(prev + 1)));
    now.max(prev.expect("the update always succeeds") + 1)
}

/// Row digests per lookup query: 1,000 × 43 characters (plus quoting) stay well under the
/// 128 KiB a form field may hold.
const ROWS_PER_LOOKUP: usize = 1000;

/// Stripes of the object-version lock (see `objects.rs`).
const OBJECT_LOCKS: usize = 64;

pub struct ClickHouseStore {
    client: Client,
    /// Object creation per (project, object_id) is serialised through one of these stripes.
    object_locks: Vec<tokio::sync::Mutex<()>>,
}

impl ClickHouseStore {
    /// Connects to the ClickHouse HTTP interface at `url`, creates `database` when it is not
    /// `default`, and migrates the schema to the latest version.
    pub async fn connect(
        url: &str,
        user: &str,
        password: &str,
        database: &str,
    ) -> Result<ClickHouseStore> {
        let base = Client::default().with_url(url).with_user(user).with_password(password);
        if database != "default" {
            // An operator-chosen name, not a user value: checked, then quoted as an identifier.
            if database.is_empty()
                || !database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(backend(format!(
                    "invalid database name {database:?}: letters, digits and '_' only"
                )));
            }
            base.query_raw(&format!("CREATE DATABASE IF NOT EXISTS `{database}`"))
                .execute()
                .await
                .map_err(backend)?;
        }
        let client = base.with_database(database);
        migrations::migrate(&client).await.map_err(backend)?;
        let object_locks = (0..OBJECT_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect();
        Ok(ClickHouseStore { client, object_locks })
    }

    /// The client, e.g. for tests that look at the tables.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Inserts `rows` into `table` and returns once ClickHouse has stored them: synchronous
    /// (`async_insert = 0`), with the status sent only at the end of the query.
    async fn insert<T>(&self, table: &str, rows: &[T::Value<'_>]) -> Result<()>
    where
        T: clickhouse::Row + clickhouse::RowWrite,
    {
        self.insert_once::<T>(table, rows, None).await
    }

    /// Like `insert`; with a `token`, ClickHouse stores the insert once however often the same
    /// token arrives (`insert_deduplication_token`, within the table's
    /// `non_replicated_deduplication_window` of recent inserts).
    async fn insert_once<T>(
        &self,
        table: &str,
        rows: &[T::Value<'_>],
        token: Option<&str>,
    ) -> Result<()>
    where
        T: clickhouse::Row + clickhouse::RowWrite,
    {
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert = self
            .client
            .insert::<T>(table)
            .await
            .map_err(backend)?
            .with_setting("wait_end_of_query", "1")
            .with_setting("async_insert", "0");
        if let Some(token) = token {
            insert = insert.with_setting("insert_deduplication_token", token);
        }
        for row in rows {
            insert.write(row).await.map_err(insert_error)?;
        }
        insert.end().await.map_err(insert_error)
    }

    fn object_lock(&self, project: &ProjectId, object_id: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (project.as_str(), object_id).hash(&mut h);
        &self.object_locks[h.finish() as usize % OBJECT_LOCKS]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_errors_are_rejections() {
        let e = |text: &str| clickhouse::error::Error::BadResponse(text.to_owned());
        let bad = e(
            "Code: 27. DB::Exception: Cannot parse input: expected '\\t'. (CANNOT_PARSE_INPUT_ASSERTION_FAILED)",
        );
        assert_eq!(error_code(&bad), Some(27));
        assert!(matches!(insert_error(bad), StoreError::Rejected(_)));
        let transient =
            e("Code: 241. DB::Exception: Memory limit exceeded. (MEMORY_LIMIT_EXCEEDED)");
        assert!(matches!(insert_error(transient), StoreError::Backend(_)));
        assert!(matches!(insert_error(clickhouse::error::Error::TimedOut), StoreError::Backend(_)));
    }

    #[test]
    fn versions_increase() {
        let mut last = next_version();
        for _ in 0..10_000 {
            let v = next_version();
            assert!(v > last);
            last = v;
        }
    }
}
