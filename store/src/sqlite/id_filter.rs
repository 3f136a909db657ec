//! Ids the writer knows to be new without asking SQLite (docs/storage.md#id-filter).
//!
//! A call is in one bucket only, so every part written first looks its call up by id
//! ([`super::id_directory`]). Nearly all parts are of new calls (a span arrives once, and so do
//! the SDK's complete calls), and their lookups, which find nothing, were about a twentieth of
//! the server's CPU. A Bloom filter of every id the table holds answers "new" for most of them
//! in memory; for the rest it answers "maybe", and SQL is asked as before.
//!
//! The filter must never say "new" for an id the table holds, or that call would be written
//! twice:
//!
//! - It is built from a snapshot of the table on a thread of its own ([`build`]). The writer adds
//!   every id it inserts from the moment the build starts ([`IdFilter::inserted`]), and on
//!   receiving the build adds those the snapshot may have missed.
//! - Other processes may write calls to the same database: separate roles sharing the data
//!   directory. Every job that may insert calls stamps `call_ids_merged` with its writer's token
//!   and counts itself in `generation`, in its own transaction ([`IdFilter::start_job`]). A
//!   writer that finds a stamp other than the one its last job left drops its filter and builds
//!   another, at most every [`REBUILD_EVERY`]. So does one whose job rolled back.
//! - Ids of jobs that rolled back stay in the filter: a needless "maybe", never a false "new".

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use foldhash::quality::FixedState;
use rusqlite::{Connection, params};
use sbbf_rs_safe::Filter as BloomFilter;

/// Bits of the filter per id it has room for. A split-block Bloom filter sets and tests eight
/// bits in one 32-byte block per id, one cache line whatever its size; at ten bits per id it sends
/// about 1 to 2% of new ids to SQL all the same, each costing the lookup every id cost before.
const BITS_PER_ID: usize = 10;

/// Most ids the filter holds. Its layers take about 1.2 bytes for each id they have room for,
/// and have room for two to four times the ids they hold, so at most about 60 MiB. A writer whose
/// table holds more looks every id up in SQL, as before the filter.
const MAX_IDS: usize = 16 << 20;

/// Layers past which the writer builds the filter again, in one layer sized for the table: each
/// layer is a look more for every id, and adds to the share of new ids sent to SQL.
const MAX_LAYERS: usize = 3;

/// Ids the first layer has room for at least: about 1.2 MiB. A new database's filter then grows
/// to three layers, and is built again, only past three million calls; with room for 65,536 the
/// build thread took 0.8% of the server's CPU over the first 300K calls.
#[cfg(not(test))]
const MIN_ROOM: usize = 1 << 20;
/// Small enough for a test to fill three layers.
#[cfg(test)]
const MIN_ROOM: usize = 1 << 14;

/// Least time between two builds, when other processes keep writing calls to the database and
/// so keep making this writer's filter stale.
const REBUILD_EVERY: Duration = Duration::from_secs(60);

const LAST_STAMP: &str = "SELECT writer, generation FROM call_ids_merged";
const STAMP: &str = "UPDATE call_ids_merged SET writer = ?1, generation = ?2";

/// The filter of the ids in the table, as a snapshot at `generation` saw it.
struct Built {
    generation: i64,
    ids: Ids,
}

/// A build under way, and what this writer inserted meanwhile.
struct Building {
    done: Receiver<rusqlite::Result<Option<Built>>>,
    /// The generation of the job that inserted it, the project's key and the id.
    inserted: Vec<(i64, i64, Box<str>)>,
}

/// The writer's filter of the ids the table holds, and how far it can be trusted.
pub(crate) struct IdFilter {
    path: PathBuf,
    /// This writer's stamp in `call_ids_merged.writer`.
    token: i64,
    /// The generation this writer's last job stamped.
    last: Option<i64>,
    /// Every job stamped after this generation ran on this writer.
    since: i64,
    ready: Option<Ids>,
    building: Option<Building>,
    /// When the next build may start; `None` when the table holds more than [`MAX_IDS`].
    next_build: Option<Instant>,
}

impl IdFilter {
    /// A filter, not built yet, of the database at `path`.
    pub fn new(path: PathBuf) -> IdFilter {
        IdFilter {
            path,
            // Random per process: the stamp must tell this writer's jobs from any other's.
            token: RandomState::new().hash_one(std::process::id()) as i64,
            last: None,
            since: 0,
            ready: None,
            building: None,
            next_build: Some(Instant::now()),
        }
    }

    /// Stamps the job in the caller's transaction, before it inserts anything; drops the filter
    /// if another writer's job (or a job of this one that rolled back) came between this job
    /// and this writer's last, and installs a build or starts one.
    pub fn start_job(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let (writer, generation): (i64, i64) =
            conn.prepare_cached(LAST_STAMP)?.query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        if writer != self.token || self.last != Some(generation) {
            self.ready = None;
            self.since = generation;
        }
        let generation = generation + 1;
        conn.prepare_cached(STAMP)?.execute(params![self.token, generation])?;
        self.last = Some(generation);
        self.receive_build(false);
        // A filter dropped is built again at most every REBUILD_EVERY; one grown to too many
        // layers at once, as the build's cost is then spread over the ids added since the last.
        let due = match &self.ready {
            None => self.next_build.is_some_and(|at| Instant::now() >= at),
            Some(ids) => ids.layers.len() >= MAX_LAYERS,
        };
        if due && self.building.is_none() {
            // Started here, after the stamp: every job from this one on is recorded, and every
            // job before it committed before the build's snapshot.
            let (send, done) = mpsc::sync_channel(1);
            let path = self.path.clone();
            let spawned =
                std::thread::Builder::new().name("heddle-sqlite-ids".into()).spawn(move || {
                    let started = Instant::now();
                    let built = Connection::open(path).and_then(|conn| build(&conn));
                    if let Ok(Some(built)) = &built {
                        let (ids, ms) = (built.ids.len, started.elapsed().as_millis());
                        tracing::info!(ids, ms, "id filter built");
                    }
                    let _ = send.send(built);
                });
            match spawned {
                Ok(_) => self.building = Some(Building { done, inserted: Vec::new() }),
                Err(e) => tracing::warn!(error = %e, "starting the id filter's build failed"),
            }
            self.next_build = Some(Instant::now() + REBUILD_EVERY);
        }
        Ok(())
    }

    /// Installs a finished build, waiting for it if `wait`, if its snapshot saw every job this
    /// writer did not run.
    fn receive_build(&mut self, wait: bool) {
        let Some(building) = &mut self.building else { return };
        let received = if wait {
            building.done.recv().map_err(|_| TryRecvError::Disconnected)
        } else {
            building.done.try_recv()
        };
        let built = match received {
            Err(TryRecvError::Empty) => return,
            Ok(Ok(Some(built))) => built,
            Ok(Ok(None)) => {
                self.building = None;
                self.give_up();
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "building the id filter failed");
                self.building = None;
                return;
            }
            Err(TryRecvError::Disconnected) => {
                self.building = None;
                return;
            }
        };
        let building = self.building.take().expect("matched above");
        if built.generation < self.since {
            return;
        }
        let mut ids = built.ids;
        for (generation, project, id) in &building.inserted {
            if *generation > built.generation {
                ids.insert(hash(*project, id));
            }
        }
        self.ready = Some(ids);
    }

    /// Whether the table may hold the call `id` of the project of key `project`: false only
    /// when it surely does not.
    pub fn may_hold(&self, project: i64, id: &str) -> bool {
        self.ready.as_ref().is_none_or(|ids| ids.contains(hash(project, id)))
    }

    /// Records a row the current job inserted.
    pub fn inserted(&mut self, project: i64, id: &str) {
        if let Some(ids) = &mut self.ready {
            ids.insert(hash(project, id));
            if ids.len > MAX_IDS {
                self.give_up();
            }
        }
        if let (Some(building), Some(generation)) = (&mut self.building, self.last) {
            building.inserted.push((generation, project, id.into()));
        }
    }

    /// Drops the filter for good: the table holds more than [`MAX_IDS`] calls, and every id is
    /// looked up in SQL from now on.
    fn give_up(&mut self) {
        tracing::info!(max = MAX_IDS, "too many calls for the id filter; ids looked up");
        self.ready = None;
        self.next_build = None;
    }

    /// Waits for the build under way and installs it.
    #[cfg(test)]
    pub fn wait_for_build(&mut self) {
        self.receive_build(true);
    }

    #[cfg(test)]
    pub fn is_ready(&self) -> bool {
        self.ready.is_some()
    }
}

/// The filter of every id in the table, read in one snapshot; `None` past [`MAX_IDS`].
fn build(conn: &Connection) -> rusqlite::Result<Option<Built>> {
    super::configure(conn)?;
    let tx = conn.unchecked_transaction()?;
    let generation: i64 =
        tx.query_row("SELECT generation FROM call_ids_merged", [], |r| r.get(0))?;
    // Rowids only grow, so the largest is at least the number of rows: room for them and as many
    // again before the filter adds a layer.
    let newest: Option<i64> = tx.query_row("SELECT max(rowid) FROM calls", [], |r| r.get(0))?;
    let mut ids = Ids::with_room(2 * newest.unwrap_or(0).clamp(0, MAX_IDS as i64) as usize);
    let mut st = tx.prepare("SELECT project_key, id FROM calls")?;
    let mut rows = st.query([])?;
    while let Some(row) = rows.next()? {
        if ids.len >= MAX_IDS {
            return Ok(None);
        }
        ids.insert(hash(row.get(0)?, row.get_ref(1)?.as_str()?));
    }
    Ok(Some(Built { generation, ids }))
}

/// The hash of a call's project key and id that the filter keeps: computed once for all its
/// layers. The seed is fixed, so the build's thread and the writer agree.
fn hash(project: i64, id: &str) -> u64 {
    FixedState::with_seed(0x6865_6464_6c65).hash_one((project, id))
}

/// A Bloom filter that grows: a split-block filter has a fixed size, so once the last layer
/// holds the ids it has room for, a layer with twice the room is added, and a look tests every
/// layer. Each layer adds to the share of new ids sent to SQL, so at [`MAX_LAYERS`] the writer
/// builds it again.
struct Ids {
    layers: Vec<BloomFilter>,
    /// Ids the last layer has room for.
    room: usize,
    /// Ids inserted, counted again when inserted again.
    len: usize,
    /// Ids inserted into the last layer.
    in_last: usize,
}

impl Ids {
    fn with_room(room: usize) -> Ids {
        let room = room.max(MIN_ROOM);
        Ids { layers: vec![Self::layer(room)], room, len: 0, in_last: 0 }
    }

    fn layer(room: usize) -> BloomFilter {
        BloomFilter::new(BITS_PER_ID, room)
    }

    fn contains(&self, hash: u64) -> bool {
        self.layers.iter().any(|layer| layer.contains_hash(hash))
    }

    fn insert(&mut self, hash: u64) {
        if self.in_last >= self.room {
            self.room *= 2;
            self.layers.push(Self::layer(self.room));
            self.in_last = 0;
        }
        self.layers.last_mut().expect("never empty").insert_hash(hash);
        self.in_last += 1;
        self.len += 1;
    }
}

/// The filter, for the job running on the writer. A job that panicked holding it left no row
/// behind (its transaction rolled back), and the next job's stamp check finds the gap.
pub(crate) fn lock(filter: &Mutex<IdFilter>) -> MutexGuard<'_, IdFilter> {
    filter.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::super::migrations;
    use super::*;

    fn insert(conn: &Connection, id: &str) {
        conn.execute("INSERT INTO calls (project_key, id, bucket) VALUES (1, ?1, 0)", [id])
            .unwrap();
    }

    /// One job of `filter` in its own transaction, committed or rolled back.
    fn job(conn: &mut Connection, filter: &mut IdFilter, commit: bool) {
        let tx = conn.transaction().unwrap();
        filter.start_job(&tx).unwrap();
        if commit { tx.commit() } else { tx.rollback() }.unwrap();
    }

    /// The build reads a snapshot taken while the job that started it is still open: the ids
    /// that job inserts are not in it, and come from what the writer recorded.
    #[test]
    fn the_filter_holds_every_id_written_before_and_during_its_build() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = migrations::database_at(dir.path(), migrations::LATEST);
        let before: Vec<String> = (0..500).map(|i| format!("old-{i}")).collect();
        for id in &before {
            insert(&conn, id);
        }
        let mut filter = IdFilter::new(dir.path().join(super::super::DB_FILE));
        assert!(filter.may_hold(1, "anything"), "unbuilt, it knows nothing");
        let tx = conn.transaction().unwrap();
        filter.start_job(&tx).unwrap();
        insert(&tx, "during");
        filter.inserted(1, "during");
        filter.wait_for_build();
        tx.commit().unwrap();
        assert!(filter.is_ready());
        for id in before.iter().map(String::as_str).chain(["during"]) {
            assert!(filter.may_hold(1, id), "{id}");
        }
        let tx = conn.transaction().unwrap();
        filter.start_job(&tx).unwrap();
        insert(&tx, "after");
        filter.inserted(1, "after");
        tx.commit().unwrap();
        assert!(filter.may_hold(1, "after"));
        let unknown = (0..10_000).filter(|i| filter.may_hold(1, &format!("new-{i}"))).count();
        assert!(unknown < 300, "{unknown} of 10,000 new ids sent to SQL");
        let other_project = (0..10_000).filter(|i| filter.may_hold(2, &format!("old-{i}"))).count();
        assert!(other_project < 300, "{other_project} of 10,000 sent to SQL");
    }

    /// The filter is dropped when a job of another writer, or a job of this one that rolled back,
    /// came since this writer's last job.
    #[test]
    fn a_job_this_writer_did_not_commit_drops_the_filter() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = migrations::database_at(dir.path(), migrations::LATEST);
        let path = dir.path().join(super::super::DB_FILE);
        let ready = |conn: &mut Connection| {
            let mut filter = IdFilter::new(path.clone());
            job(conn, &mut filter, true);
            filter.wait_for_build();
            job(conn, &mut filter, true);
            assert!(filter.is_ready());
            filter
        };
        let mut a = ready(&mut conn);
        job(&mut conn, &mut a, true);
        assert!(a.is_ready(), "its own jobs keep it");
        job(&mut conn, &mut a, false);
        job(&mut conn, &mut a, true);
        assert!(!a.is_ready(), "after its own job rolled back");

        let mut b = ready(&mut conn);
        job(&mut conn, &mut a, true);
        job(&mut conn, &mut b, true);
        assert!(!b.is_ready(), "after another writer's job");

        let mut c = ready(&mut conn);

        // c's job rolled back, then a's committed in its place, with the generation c stamped.
        job(&mut conn, &mut c, false);
        job(&mut conn, &mut a, true);
        job(&mut conn, &mut c, true);
        assert!(!c.is_ready(), "after another writer's job at the same generation");
    }

    /// A filter that grew to [`MAX_LAYERS`] layers is built again in one, sized for the table,
    /// and holds every id all the while.
    #[test]
    fn a_filter_of_many_layers_is_built_again_in_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = migrations::database_at(dir.path(), migrations::LATEST);
        let mut filter = IdFilter::new(dir.path().join(super::super::DB_FILE));
        job(&mut conn, &mut filter, true);
        filter.wait_for_build();
        let ids: Vec<String> = (0..MIN_ROOM * 3 + 1).map(|i| format!("{i:x}")).collect();
        let tx = conn.transaction().unwrap();
        filter.start_job(&tx).unwrap();
        for id in &ids {
            insert(&tx, id);
            filter.inserted(1, id);
        }
        tx.commit().unwrap();
        assert_eq!(filter.ready.as_ref().unwrap().layers.len(), MAX_LAYERS);
        job(&mut conn, &mut filter, true);
        assert!(filter.building.is_some(), "a build started at once");
        assert!(ids.iter().all(|id| filter.may_hold(1, id)), "the old filter serves meanwhile");
        filter.wait_for_build();
        assert_eq!(filter.ready.as_ref().unwrap().layers.len(), 1);
        assert!(ids.iter().all(|id| filter.may_hold(1, id)));
    }
}
