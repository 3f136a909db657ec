//! WAL checkpoints off the writer's path. SQLite's automatic checkpoint runs inside the commit
//! that crosses the threshold, so the one writer thread would stop taking writes while it copies
//! the WAL into the database and fsyncs it. Here a thread with its own connection runs PASSIVE
//! checkpoints beside the writer instead (docs/storage.md#wal-and-checkpoints): they copy what
//! is committed without blocking writers or readers. The writer keeps a much larger automatic
//! threshold as a backstop, so the WAL stays bounded even if this thread fell behind.
//!
//! Under sustained writes the WAL never catches up by itself (new frames arrive while the old
//! are copied), so it works at the backstop's size; once writes stop and everything is copied,
//! this thread cuts the file to nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::Connection;

/// WAL size after which the writer checkpoints itself (SQLite's default is 1000 pages, 4 MiB
/// of 4 KiB pages). Under sustained span ingest the WAL reaches it, and at 64 MiB the writer
/// spent 13% of its time checkpointing (docs/benchmarks.md, "Savepoints only on failure").
/// Set in pages of the database's own size.
pub(crate) const WRITER_AUTOCHECKPOINT_BYTES: i64 = 256 << 20;

/// Bytes the WAL file is cut back to when it restarts after a complete checkpoint. Not below the
/// backstop, the size the WAL works at under sustained writes: a file cut back below its working
/// size must grow again, and the kernel's freeing and reallocating of its pages cost a quarter of
/// the span ingest at 16 MiB (docs/benchmarks.md, "Savepoints only on failure"). At rest the
/// thread below cuts it to nothing.
pub(crate) const WAL_SIZE_LIMIT: i64 = 256 << 20;

/// How often the checkpointer looks at the WAL.
const INTERVAL: Duration = Duration::from_millis(100);

/// Stops the thread when dropped.
pub(crate) struct Checkpointer {
    stop: Arc<AtomicBool>,
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Checkpointer {
    pub(crate) fn start(path: PathBuf) -> rusqlite::Result<Checkpointer> {
        let conn = Connection::open(path)?;
        super::configure(&conn)?;
        // Cutting the WAL must wait for no reader and no writer: if one is busy, it waits for
        // the next quiet moment instead.
        conn.busy_timeout(Duration::ZERO)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("heddle-sqlite-checkpoint".into())
            .spawn(move || run(conn, &stopped))
            .expect("spawning the checkpoint thread");
        Ok(Checkpointer { stop })
    }
}

fn run(conn: Connection, stop: &AtomicBool) {
    let mut last_frames = 0;
    while !stop.load(Ordering::Relaxed) {
        // A WAL with nothing new costs a look at the shared-memory index only.
        match checkpoint(&conn, "PASSIVE") {
            // At rest: nothing written since the last look, and all of it copied.
            Ok((frames, copied)) if frames > 0 && copied == frames && frames == last_frames => {
                // A busy reader or writer is not an error: the checkpoint reports it and the
                // WAL is cut at a later quiet moment.
                if let Err(e) = checkpoint(&conn, "TRUNCATE") {
                    tracing::warn!(error = %e, "sqlite WAL truncation failed");
                }
                last_frames = 0;
            }
            Ok((frames, _)) => last_frames = frames,
            Err(e) => tracing::warn!(error = %e, "sqlite WAL checkpoint failed"),
        }
        std::thread::sleep(INTERVAL);
    }
}

/// Runs a checkpoint of `mode`; returns the frames in the WAL and how many of them are copied
/// into the database. A checkpoint that could not finish (a reader or the writer was busy)
/// still reports what it did.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<(i64, i64)> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| Ok((r.get(1)?, r.get(2)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal_len(dir: &std::path::Path) -> u64 {
        std::fs::metadata(dir.join("t.db-wal")).map_or(0, |m| m.len())
    }

    #[test]
    fn a_wal_at_rest_is_cut_to_nothing_and_the_data_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        writer.execute("CREATE TABLE t (v BLOB)", []).unwrap();
        for _ in 0..50 {
            writer.execute("INSERT INTO t VALUES (zeroblob(10000))", []).unwrap();
        }
        assert!(wal_len(dir.path()) > 500_000, "the writes are in the WAL");
        // A reader inside a snapshot keeps the WAL in use: it must not be cut under it.
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM t;").unwrap();
        let _checkpointer = Checkpointer::start(path.clone()).unwrap();
        std::thread::sleep(INTERVAL * 5);
        assert!(wal_len(dir.path()) > 0, "not cut while a reader may need it");
        reader.execute_batch("COMMIT").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while wal_len(dir.path()) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(INTERVAL);
        }
        assert_eq!(wal_len(dir.path()), 0, "cut to nothing once at rest");
        let n: i64 = reader.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 50);
    }
}
