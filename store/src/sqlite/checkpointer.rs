//! WAL checkpoints off the writer's path. SQLite's automatic checkpoint runs inside the commit
//! that crosses the threshold, so the one writer thread would stop taking writes while it copies
//! the WAL into the database and fsyncs it. Here a thread with its own connection runs PASSIVE
//! checkpoints beside the writer instead (docs/storage.md#wal-and-checkpoints): they copy what
//! is committed without blocking writers or readers. The writer keeps a much larger automatic
//! threshold as a backstop, so the WAL stays bounded even if this thread fell behind.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::Connection;

/// WAL size after which the writer checkpoints itself (SQLite's default is 1000 pages, 4 MiB
/// of 4 KiB pages): only when the checkpointer cannot keep up. Set in pages of the database's
/// own size.
pub(crate) const WRITER_AUTOCHECKPOINT_BYTES: i64 = 64 << 20;

/// Bytes the WAL file is cut back to when it restarts after a complete checkpoint, so a burst
/// does not leave a large WAL on disk. Above the ~100 MB the WAL reaches under sustained span
/// ingest: a file cut back below its working size must grow again, and the kernel's freeing and
/// reallocating of its pages cost a quarter of the ingest at 16 MiB (docs/benchmarks.md,
/// "Savepoints only on failure").
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
    while !stop.load(Ordering::Relaxed) {
        // Returns (busy, frames in the WAL, frames checkpointed); a WAL with nothing new costs
        // a look at the shared-memory index only.
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "sqlite WAL checkpoint failed");
        }
        std::thread::sleep(INTERVAL);
    }
}
