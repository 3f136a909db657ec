//! Threads on ClickHouse: the turn calls aggregated per call, then per thread, in one statement.

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::threads::{Thread, ThreadSortField, ThreadsQuery};
use heddle_proto::time::Micros;
use heddle_ql::Direction;
use serde::Deserialize;

use super::sql::{Param, Sql, paging};
use super::{ClickHouseStore, backend};
use crate::{Result, ThreadStore};

/// What `select_threads` selects.
#[derive(Debug, Row, Deserialize)]
struct ThreadRow {
    pub thread_id: String,
    pub turn_count: u64,
    pub start_time_us: i64,
    pub last_updated_us: i64,
    pub first_turn_id: String,
    pub last_turn_id: String,
    pub p50_turn_duration_ms: Option<f64>,
    pub p99_turn_duration_ms: Option<f64>,
}

/// `/threads/stream_query` (semantics: `heddle_proto::threads`). Three levels, all within the
/// project's range of the primary key: the turn calls' rows are found first (a start row with
/// `turn_id = id` and a thread), then aggregated per call like `CALLS_AGG` but for the few
/// columns threads need, then per thread.
fn select_threads(q: &ThreadsQuery) -> Sql {
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

#[async_trait]
impl ThreadStore for ClickHouseStore {
    async fn query_threads(&self, q: ThreadsQuery) -> Result<Vec<Thread>> {
        if q.thread_ids.as_ref().is_some_and(|l| l.is_empty()) {
            return Ok(Vec::new());
        }
        let rows: Vec<ThreadRow> =
            select_threads(&q).query(&self.client).fetch_all().await.map_err(backend)?;
        Ok(rows
            .into_iter()
            .map(|r| Thread {
                thread_id: r.thread_id,
                turn_count: r.turn_count,
                start_time: Micros(r.start_time_us),
                last_updated: Micros(r.last_updated_us),
                first_turn_id: Some(r.first_turn_id),
                last_turn_id: Some(r.last_turn_id),
                p50_turn_duration_ms: r.p50_turn_duration_ms,
                p99_turn_duration_ms: r.p99_turn_duration_ms,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
