//! Group commit: one thread owns SQLite's single write connection and applies every write job
//! queued while the previous commit was in flight in one transaction, each job in its own
//! savepoint. One fsync then acknowledges many requests, and one failing job rolls back alone.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::{BoxError, Result, StoreError};

/// Most jobs folded into one transaction; bounds the latency of the first job in a batch.
const MAX_JOBS_PER_COMMIT: usize = 4096;

trait Job: Send {
    /// Runs inside a savepoint of the batch's transaction.
    fn run(&mut self, tx: &mut Transaction<'_>);
    /// Reports the job's outcome once the batch's commit has succeeded or failed.
    fn finish(self: Box<Self>, commit: &std::result::Result<(), Arc<rusqlite::Error>>);
}

struct TypedJob<T, F> {
    work: Option<F>,
    outcome: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T> + Send,
{
    fn run(&mut self, tx: &mut Transaction<'_>) {
        let Some(work) = self.work.take() else { return };
        let outcome = match tx.savepoint() {
            Ok(mut sp) => {
                let out = std::panic::catch_unwind(AssertUnwindSafe(|| work(&sp)))
                    .unwrap_or_else(|_| Err(StoreError::Backend("write job panicked".into())));
                let ended = if out.is_ok() {
                    sp.commit()
                } else {
                    sp.rollback().and_then(|()| sp.finish())
                };
                ended.map_err(backend).and(out)
            }
            Err(e) => Err(backend(e)),
        };
        self.outcome = Some(outcome);
    }

    fn finish(self: Box<Self>, commit: &std::result::Result<(), Arc<rusqlite::Error>>) {
        let out = match (commit, self.outcome) {
            (Err(e), _) => Err(backend(CommitFailed(e.clone()))),
            (Ok(()), Some(outcome)) => outcome,
            (Ok(()), None) => Err(StoreError::Backend("write job did not run".into())),
        };
        // The requester may have gone away (client disconnected); the write stands anyway.
        let _ = self.reply.send(out);
    }
}

/// A backend error with `e` as its source.
pub(crate) fn backend(e: impl Into<BoxError>) -> StoreError {
    StoreError::Backend(e.into())
}

/// The batch a job was in did not commit; every job of the batch gets the same cause.
#[derive(Debug, thiserror::Error)]
#[error("commit failed: {0}")]
struct CommitFailed(#[source] Arc<rusqlite::Error>);

/// Handle to the writer thread. Cloning is cheap; the thread stops when all handles are gone.
#[derive(Clone)]
pub(crate) struct Writer {
    queue: SyncSender<Box<dyn Job>>,
}

impl Writer {
    /// Starts the writer thread on `conn`, with room for `capacity` queued jobs.
    pub fn start(conn: Connection, capacity: usize) -> Writer {
        let (queue, jobs) = mpsc::sync_channel(capacity);
        std::thread::Builder::new()
            .name("heddle-sqlite-writer".into())
            .spawn(move || run(conn, jobs))
            .expect("spawning the writer thread");
        Writer { queue }
    }

    /// Queues `work` and waits until it is committed. A full queue answers `Overloaded` at once
    /// rather than letting memory grow.
    pub async fn exec<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(TypedJob { work: Some(work), outcome: None, reply });
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(StoreError::Overloaded),
            Err(TrySendError::Disconnected(_)) => return Err(backend("writer stopped")),
        }
        answer.await.map_err(|_| backend("writer stopped before answering"))?
    }
}

/// How often the planner's statistics are refreshed while writes come in.
const ANALYZE_EVERY: Duration = Duration::from_secs(30);

/// Rows ANALYZE samples per index: enough for the planner to tell a selective filter (one
/// trace, one op) from an unselective one, in milliseconds on a database of millions of calls.
const ANALYSIS_LIMIT: u32 = 1000;

/// Refreshes the statistics the query planner chooses indexes by (`sqlite_stat1`). Without
/// them SQLite guesses, and on a large project it reads a trace through the time index instead
/// of the trace index, hundreds of times slower. Failure only costs plan quality, so it is
/// logged, not returned.
pub fn analyze(conn: &Connection) {
    let sql = format!("PRAGMA analysis_limit = {ANALYSIS_LIMIT}; ANALYZE;");
    if let Err(e) = conn.execute_batch(&sql) {
        tracing::warn!(error = %e, "sqlite ANALYZE failed");
    }
}

fn run(mut conn: Connection, jobs: Receiver<Box<dyn Job>>) {
    analyze(&conn);
    let mut analyzed_at = Instant::now();
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_JOBS_PER_COMMIT {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let commit = apply(&mut conn, &mut batch).map_err(Arc::new);
        if let Err(e) = &commit {
            tracing::error!(error = %e, jobs = batch.len(), "sqlite commit failed");
        }
        for job in batch {
            job.finish(&commit);
        }
        if analyzed_at.elapsed() >= ANALYZE_EVERY {
            analyze(&conn);
            analyzed_at = Instant::now();
        }
    }
}

fn apply(conn: &mut Connection, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in batch.iter_mut() {
        job.run(&mut tx);
    }
    tx.commit()
}
