//! Group commit: one thread owns SQLite's single write connection and applies every write job
//! queued while the previous commit was in flight in one transaction. One fsync then
//! acknowledges many requests. A job that fails must not take the others with it, so a batch in
//! which one fails is redone with each job in its own savepoint, and the failing one rolls back
//! alone (docs/storage.md#durability-and-group-commit).

use std::ops::Deref;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};

use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, ToSql, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use super::borrowed::{Param, Statements};
use crate::{BoxError, Result, StoreError};

/// Most jobs folded into one transaction; bounds the latency of the first job in a batch.
const MAX_JOBS_PER_COMMIT: usize = 4096;

/// What a write job works on: the writer's connection, inside the batch's transaction, and its
/// statements that bind text in place ([`super::borrowed`]).
pub(crate) struct WriteConn<'a> {
    conn: &'a Connection,
    statements: &'a Statements,
}

impl WriteConn<'_> {
    /// Runs one of the writer's hot statements, reading `params` in place; see
    /// [`Statements::execute`].
    pub fn execute_in_place(
        &self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> rusqlite::Result<u64> {
        self.statements.execute(self.conn, sql, params)
    }
}

impl Deref for WriteConn<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

trait Job: Send {
    /// Runs the work on the batch's transaction and keeps its outcome; true if it succeeded.
    /// May run twice: the batch is redone when a job in it fails.
    fn run(&mut self, conn: &WriteConn<'_>) -> bool;
    /// Runs the work in a savepoint of the batch's transaction, which is rolled back if it fails.
    fn run_in_savepoint(&mut self, tx: &mut Transaction<'_>, statements: &Statements);
    /// Reports the job's outcome once the batch's commit has succeeded or failed.
    fn finish(self: Box<Self>, commit: &std::result::Result<(), Arc<rusqlite::Error>>);
}

struct TypedJob<T, F> {
    work: F,
    outcome: Option<Result<T>>,
    /// Hands the work back with its outcome, so that what it owns (a batch of calls is
    /// thousands of strings) is freed on the requester's thread, not on the writer's, which
    /// bounds the store's throughput.
    reply: oneshot::Sender<(Result<T>, F)>,
}

impl<T, F> TypedJob<T, F>
where
    F: Fn(&WriteConn<'_>) -> Result<T>,
{
    fn attempt(&self, conn: &WriteConn<'_>) -> Result<T> {
        std::panic::catch_unwind(AssertUnwindSafe(|| (self.work)(conn)))
            .unwrap_or_else(|_| Err(StoreError::Backend("write job panicked".into())))
    }
}

impl<T, F> Job for TypedJob<T, F>
where
    T: Send,
    F: Fn(&WriteConn<'_>) -> Result<T> + Send,
{
    fn run(&mut self, conn: &WriteConn<'_>) -> bool {
        let outcome = self.attempt(conn);
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn run_in_savepoint(&mut self, tx: &mut Transaction<'_>, statements: &Statements) {
        let outcome = match tx.savepoint() {
            Ok(mut sp) => {
                let out = self.attempt(&WriteConn { conn: &sp, statements });
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
        let TypedJob { work, outcome, reply } = *self;
        let out = match (commit, outcome) {
            (Err(e), _) => Err(backend(CommitFailed(e.clone()))),
            (Ok(()), Some(outcome)) => outcome,
            (Ok(()), None) => Err(StoreError::Backend("write job did not run".into())),
        };
        // The requester may have gone away (client disconnected); the write stands anyway.
        let _ = reply.send((out, work));
    }
}

/// The rowid of the row `select` finds with `params`, inserted with `insert` (the same
/// `params`) when there is none: in the caller's transaction, on the writer, so no other
/// statement inserts it meanwhile.
pub(crate) fn rowid_or_insert(
    conn: &Connection,
    select: &str,
    insert: &str,
    params: &[&dyn ToSql],
) -> rusqlite::Result<i64> {
    if let Some(id) = conn.prepare_cached(select)?.query_row(params, |r| r.get(0)).optional()? {
        return Ok(id);
    }
    conn.prepare_cached(insert)?.execute(params)?;
    Ok(conn.last_insert_rowid())
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
    /// Starts the writer thread on `conn`, with room for `capacity` queued jobs. `idle` is
    /// work of the writer's own that may wait (the substring index, [`super::text_index`]),
    /// done in steps while no job is queued; see [`Idle`]. It is asked again after every batch.
    pub fn start(
        conn: Connection,
        capacity: usize,
        idle: impl FnMut(&mut Connection, Pause) -> Idle + Send + 'static,
    ) -> Writer {
        let (queue, jobs) = mpsc::sync_channel(capacity);
        std::thread::Builder::new()
            .name("heddle-sqlite-writer".into())
            .spawn(move || run(conn, jobs, idle))
            .expect("spawning the writer thread");
        Writer { queue }
    }

    /// Queues `work` and waits until it is committed. A full queue answers `Overloaded` at once
    /// rather than letting memory grow. `work` may run twice (the first attempt rolled back), so
    /// it must act only on the connection.
    pub async fn exec<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&WriteConn<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(TypedJob { work, outcome: None, reply });
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(StoreError::Overloaded),
            Err(TrySendError::Disconnected(_)) => return Err(backend("writer stopped")),
        }
        let (out, _work) = answer.await.map_err(|_| backend("writer stopped before answering"))?;
        out
    }
}

/// Whether writes have paused when the writer's idle work is asked for a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pause {
    /// The queue is empty now, but writes keep coming, at less than [`BUSY_FOR_GAPS`] of the
    /// writer's time: do a step only if it is a full one. Each step is a commit of its own, and
    /// many small ones cost more than their work (docs/benchmarks.md, "Substring index").
    Brief,
    /// No job has come for [`PAUSE`]: do whatever is left, however little.
    Lasting,
}

/// What the writer's idle work has left after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idle {
    Done,
    /// More than a full step: ask again as soon as the queue is empty.
    More,
    /// Less than a full step: ask again once writes pause.
    AtPause,
}

/// How long the queue must stay empty before idle work less than a full step is done.
const PAUSE: Duration = Duration::from_millis(20);

/// Share of its time the writer spends on jobs above which idle work waits for a pause rather
/// than taking the gaps between jobs: such a load is near what the machine takes, and idle work
/// in its gaps would take CPU from the requests (docs/benchmarks.md, "Substring index").
const BUSY_FOR_GAPS: f64 = 0.5;

/// The window over which the writer's busy share is measured.
const LOAD_WINDOW: Duration = Duration::from_millis(250);

/// The share of the writer's time spent on jobs, over the last whole [`LOAD_WINDOW`].
struct Load {
    since: Instant,
    busy: Duration,
    share: f64,
}

impl Load {
    fn new() -> Load {
        Load { since: Instant::now(), busy: Duration::ZERO, share: 0.0 }
    }

    fn record(&mut self, busy: Duration) {
        self.busy += busy;
        let window = self.since.elapsed();
        if window >= LOAD_WINDOW {
            self.share = self.busy.as_secs_f64() / window.as_secs_f64();
            self.busy = Duration::ZERO;
            self.since = Instant::now();
        }
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

/// The writer's connection and its statements. Fields drop in order: the statements are
/// finalized before the connection closes.
struct Owned {
    statements: Statements,
    conn: Connection,
}

fn run(
    conn: Connection,
    jobs: Receiver<Box<dyn Job>>,
    mut idle: impl FnMut(&mut Connection, Pause) -> Idle,
) {
    let mut owned = Owned { statements: Statements::new(&conn), conn };
    analyze(&owned.conn);
    let mut analyzed_at = Instant::now();
    let mut left = Idle::More;
    let mut load = Load::new();
    loop {
        let next = match left {
            Idle::Done => jobs.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Idle::More => jobs.try_recv().map_err(|e| match e {
                TryRecvError::Empty => RecvTimeoutError::Timeout,
                TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            }),
            Idle::AtPause => jobs.recv_timeout(PAUSE),
        };
        let first = match next {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                left = match left {
                    Idle::AtPause => idle(&mut owned.conn, Pause::Lasting),
                    _ if load.share < BUSY_FOR_GAPS => idle(&mut owned.conn, Pause::Brief),
                    _ => Idle::AtPause,
                };
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = vec![first];
        while batch.len() < MAX_JOBS_PER_COMMIT {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let commit = apply(&mut owned, &mut batch).map_err(Arc::new);
        load.record(started.elapsed());
        if let Err(e) = &commit {
            tracing::error!(error = %e, jobs = batch.len(), "sqlite commit failed");
        }
        for job in batch {
            job.finish(&commit);
        }
        left = Idle::More;
        if analyzed_at.elapsed() >= ANALYZE_EVERY {
            analyze(&owned.conn);
            analyzed_at = Instant::now();
        }
    }
}

/// Runs a batch in one transaction. Savepoints are kept for a batch in which a job fails: a
/// savepoint copies every page its job changes into a sub-journal (a temporary file once past
/// 64 KiB), and on random span ids that cost a sixth of the span ingest
/// (docs/benchmarks.md, "Savepoints only on failure").
fn apply(owned: &mut Owned, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    let Owned { statements, conn } = owned;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let write = WriteConn { conn: &tx, statements };
    if batch.iter_mut().all(|job| job.run(&write)) {
        return tx.commit();
    }
    tx.rollback()?;
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in batch.iter_mut() {
        job.run_in_savepoint(&mut tx, statements);
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queues jobs while the writer is held by a slow one, so they share one batch, and returns
    /// their outcomes in order with the rows the table ends up holding.
    async fn one_batch(jobs: Vec<(&'static str, Outcome)>) -> (Vec<Result<()>>, Vec<String>) {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute("CREATE TABLE t (v TEXT NOT NULL)", []).unwrap();
        let writer = Writer::start(conn, 64, |_, _| Idle::Done);
        let (held, hold) = std::sync::mpsc::channel::<()>();
        let hold = std::sync::Mutex::new(hold);
        let first = {
            let writer = writer.clone();
            tokio::spawn(async move {
                writer
                    .exec(move |_conn| {
                        let _ = hold.lock().unwrap().recv_timeout(Duration::from_secs(5));
                        Ok(())
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let queued: Vec<_> = jobs
            .into_iter()
            .map(|(value, outcome)| {
                let writer = writer.clone();
                tokio::spawn(async move {
                    writer
                        .exec(move |conn| {
                            conn.execute("INSERT INTO t VALUES (?1)", [value]).map_err(backend)?;
                            match outcome {
                                Outcome::Ok => Ok(()),
                                Outcome::Fails => Err(StoreError::Invalid("refused".into())),
                                Outcome::Panics => panic!("job panics after writing"),
                            }
                        })
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.send(()).unwrap();
        first.await.unwrap().unwrap();
        let mut outcomes = Vec::new();
        for job in queued {
            outcomes.push(job.await.unwrap());
        }
        let rows = writer
            .exec(|conn| {
                let mut st = conn.prepare("SELECT v FROM t ORDER BY v").map_err(backend)?;
                let rows = st.query_map([], |r| r.get(0)).map_err(backend)?;
                rows.collect::<rusqlite::Result<Vec<String>>>().map_err(backend)
            })
            .await
            .unwrap();
        (outcomes, rows)
    }

    #[derive(Clone, Copy)]
    enum Outcome {
        Ok,
        Fails,
        Panics,
    }

    #[tokio::test]
    async fn a_batch_without_failures_commits_every_job_once() {
        let (outcomes, rows) =
            one_batch(vec![("a", Outcome::Ok), ("b", Outcome::Ok), ("c", Outcome::Ok)]).await;
        assert!(outcomes.iter().all(Result::is_ok));
        assert_eq!(rows, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn failing_jobs_roll_back_alone_and_the_rest_commit_once() {
        let (outcomes, rows) = one_batch(vec![
            ("a", Outcome::Ok),
            ("b", Outcome::Fails),
            ("c", Outcome::Ok),
            ("d", Outcome::Panics),
            ("e", Outcome::Ok),
        ])
        .await;
        let failed: Vec<bool> = outcomes.iter().map(Result::is_err).collect();
        assert_eq!(failed, [false, true, false, true, false]);
        assert!(matches!(outcomes[1], Err(StoreError::Invalid(_))));
        assert_eq!(rows, ["a", "c", "e"], "each surviving job written once, no failed one");
    }
}
