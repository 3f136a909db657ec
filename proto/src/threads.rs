//! Threads (docs/api/threads.md): `/threads/stream_query` aggregates the turn calls of a project
//! (calls with `id == turn_id` and a non-empty `thread_id`, not deleted) per thread.
//!
//! Semantics both backends implement:
//! * `turn_count`: turn calls in the thread;
//! * `start_time`: earliest `started_at`; `first_turn_id`: the turn that started first;
//! * `last_updated`: latest end (`ended_at`, or `started_at` for a turn still running);
//!   `last_turn_id`: the turn with that latest end (ties: the greater id / earlier id for first);
//! * `p50`/`p99_turn_duration_ms`: percentiles, linearly interpolated between the closest ranks
//!   (numpy's default; ClickHouse's `quantileExactInclusive`), of the durations in milliseconds
//!   of the ended turns; null when no turn has ended;
//! * `filter.after_datetime`: threads whose `start_time` is after it; `before_datetime`: threads
//!   whose `last_updated` is before it; `thread_ids`: only these (an empty list: none);
//! * sort by the six fields (others: 400), default `last_updated desc`; `thread_id asc` breaks
//!   ties; NULL percentiles sort last in both directions.

use serde::{Deserialize, Serialize};

use crate::ProtoError;
use crate::ids::ProjectId;
use crate::time::Micros;
use heddle_ql::{Direction, SortBy};

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ThreadsFilter {
    pub after_datetime: Option<Micros>,
    pub before_datetime: Option<Micros>,
    pub thread_ids: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ThreadsQueryReq {
    pub project_id: ProjectId,
    pub filter: Option<ThreadsFilter>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub sort_by: Option<Vec<SortBy>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadSortField {
    ThreadId,
    TurnCount,
    StartTime,
    LastUpdated,
    P50TurnDurationMs,
    P99TurnDurationMs,
}

impl ThreadSortField {
    pub fn name(self) -> &'static str {
        match self {
            ThreadSortField::ThreadId => "thread_id",
            ThreadSortField::TurnCount => "turn_count",
            ThreadSortField::StartTime => "start_time",
            ThreadSortField::LastUpdated => "last_updated",
            ThreadSortField::P50TurnDurationMs => "p50_turn_duration_ms",
            ThreadSortField::P99TurnDurationMs => "p99_turn_duration_ms",
        }
    }
}

const SORT_FIELDS: [ThreadSortField; 6] = [
    ThreadSortField::ThreadId,
    ThreadSortField::TurnCount,
    ThreadSortField::StartTime,
    ThreadSortField::LastUpdated,
    ThreadSortField::P50TurnDurationMs,
    ThreadSortField::P99TurnDurationMs,
];

/// A validated threads query.
#[derive(Debug, Clone)]
pub struct ThreadsQuery {
    pub project: ProjectId,
    pub after: Option<Micros>,
    pub before: Option<Micros>,
    pub thread_ids: Option<Vec<String>>,
    /// Ends with `thread_id` so paging is deterministic.
    pub sort: Vec<(ThreadSortField, Direction)>,
    pub limit: Option<u64>,
    pub offset: u64,
}

impl ThreadsQueryReq {
    pub fn validate(self) -> Result<ThreadsQuery, ProtoError> {
        let mut sort = Vec::new();
        for s in self.sort_by.unwrap_or_default() {
            let field = SORT_FIELDS.into_iter().find(|f| f.name() == s.field).ok_or_else(|| {
                ProtoError::invalid(format!(
                    "unsupported sort field {:?}: expected one of {:?}",
                    s.field,
                    SORT_FIELDS.map(ThreadSortField::name)
                ))
            })?;
            sort.push((field, s.direction));
        }
        if sort.is_empty() {
            sort.push((ThreadSortField::LastUpdated, Direction::Desc));
        }
        if !sort.iter().any(|(f, _)| *f == ThreadSortField::ThreadId) {
            sort.push((ThreadSortField::ThreadId, Direction::Asc));
        }
        let non_negative = |what: &str, v: Option<i64>| match v {
            Some(n) if n < 0 => Err(ProtoError::invalid(format!("{what} must be >= 0, got {n}"))),
            v => Ok(v.map(|n| n as u64)),
        };
        let f = self.filter.unwrap_or_default();
        Ok(ThreadsQuery {
            project: self.project_id,
            after: f.after_datetime,
            before: f.before_datetime,
            thread_ids: f.thread_ids,
            sort,
            limit: non_negative("limit", self.limit)?,
            offset: non_negative("offset", self.offset)?.unwrap_or(0),
        })
    }
}

/// One row of `/threads/stream_query`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thread {
    pub thread_id: String,
    pub turn_count: u64,
    pub start_time: Micros,
    pub last_updated: Micros,
    pub first_turn_id: Option<String>,
    pub last_turn_id: Option<String>,
    pub p50_turn_duration_ms: Option<f64>,
    pub p99_turn_duration_ms: Option<f64>,
}
