//! Thread statistics: how the turn calls of a thread become one `/threads/stream_query` row
//! (docs/api/threads.md). ClickHouse computes them in SQL; backends without percentile
//! aggregates (SQLite) read the turns and call [`aggregate`], which is the reference for both.

use heddle_proto::threads::{Thread, ThreadSortField, ThreadsQuery};
use heddle_proto::time::Micros;
use heddle_ql::Direction;

use crate::quantile::quantile;

/// A turn call, as a backend that aggregates in Rust reads it.
#[derive(Debug, Clone)]
pub struct Turn {
    pub thread_id: String,
    pub id: String,
    pub started_at: Micros,
    pub ended_at: Option<Micros>,
}

/// Aggregates turns (of one project, in any order) into the threads `q` asks for: filtered,
/// sorted and paged.
pub fn aggregate(q: &ThreadsQuery, turns: impl IntoIterator<Item = Turn>) -> Vec<Thread> {
    let mut by_thread: std::collections::HashMap<String, Vec<Turn>> = Default::default();
    for t in turns {
        if t.thread_id.is_empty() {
            continue;
        }
        by_thread.entry(t.thread_id.clone()).or_default().push(t);
    }
    let mut threads: Vec<Thread> = by_thread
        .into_iter()
        .filter(|(id, _)| q.thread_ids.as_ref().is_none_or(|l| l.contains(id)))
        .map(|(thread_id, turns)| {
            let end = |t: &Turn| t.ended_at.unwrap_or(t.started_at);
            let first = turns
                .iter()
                .min_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)))
                .expect("a thread has a turn");
            let last = turns
                .iter()
                .max_by(|a, b| end(a).cmp(&end(b)).then(a.id.cmp(&b.id)))
                .expect("a thread has a turn");
            let mut durations: Vec<f64> = turns
                .iter()
                .filter_map(|t| Some((t.ended_at?.0 - t.started_at.0) as f64 / 1000.0))
                .collect();
            durations.sort_by(f64::total_cmp);
            Thread {
                thread_id,
                turn_count: turns.len() as u64,
                start_time: first.started_at,
                last_updated: end(last),
                first_turn_id: Some(first.id.clone()),
                last_turn_id: Some(last.id.clone()),
                p50_turn_duration_ms: quantile(&durations, 0.5),
                p99_turn_duration_ms: quantile(&durations, 0.99),
            }
        })
        .filter(|t| q.after.is_none_or(|a| t.start_time > a))
        .filter(|t| q.before.is_none_or(|b| t.last_updated < b))
        .collect();
    threads.sort_by(|a, b| {
        use std::cmp::Ordering;
        for (f, dir) in &q.sort {
            let ord = match f {
                ThreadSortField::ThreadId => a.thread_id.cmp(&b.thread_id),
                ThreadSortField::TurnCount => a.turn_count.cmp(&b.turn_count),
                ThreadSortField::StartTime => a.start_time.cmp(&b.start_time),
                ThreadSortField::LastUpdated => a.last_updated.cmp(&b.last_updated),
                ThreadSortField::P50TurnDurationMs | ThreadSortField::P99TurnDurationMs => {
                    let get = |t: &Thread| match f {
                        ThreadSortField::P50TurnDurationMs => t.p50_turn_duration_ms,
                        _ => t.p99_turn_duration_ms,
                    };
                    match (get(a), get(b)) {
                        (Some(x), Some(y)) => x.total_cmp(&y),
                        (None, None) => Ordering::Equal,
                        // NULLs last whatever the direction.
                        (None, Some(_)) => return Ordering::Greater,
                        (Some(_), None) => return Ordering::Less,
                    }
                }
            };
            let ord = if *dir == Direction::Desc { ord.reverse() } else { ord };
            if ord.is_ne() {
                return ord;
            }
        }
        Ordering::Equal
    });
    threads.into_iter().skip(q.offset as usize).take(q.limit.unwrap_or(u64::MAX) as usize).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use heddle_proto::ProtoError;
    use heddle_proto::threads::ThreadsQueryReq;

    use super::*;

    fn turn(thread: &str, id: &str, start_s: i64, dur_ms: Option<i64>) -> Turn {
        Turn {
            thread_id: thread.into(),
            id: id.into(),
            started_at: Micros(start_s * 1_000_000),
            ended_at: dur_ms.map(|d| Micros(start_s * 1_000_000 + d * 1000)),
        }
    }

    fn query(v: serde_json::Value) -> Result<ThreadsQuery, ProtoError> {
        serde_json::from_value::<ThreadsQueryReq>(v).unwrap().validate()
    }

    #[test]
    fn aggregates_sorts_filters_and_pages() {
        let turns = vec![
            turn("a", "a1", 10, Some(100)),
            turn("a", "a2", 20, Some(300)),
            turn("b", "b1", 5, Some(1000)),
            turn("c", "c1", 30, None),
            turn("", "x", 1, Some(1)),
        ];
        let q = query(json!({"project_id": "e/p"})).unwrap();
        let out = aggregate(&q, turns.clone());
        let ids: Vec<&str> = out.iter().map(|t| t.thread_id.as_str()).collect();
        assert_eq!(ids, ["c", "a", "b"], "last_updated desc");
        let a = &out[1];
        assert_eq!(a.turn_count, 2);
        assert_eq!(
            (a.first_turn_id.as_deref(), a.last_turn_id.as_deref()),
            (Some("a1"), Some("a2"))
        );
        assert_eq!(a.p50_turn_duration_ms, Some(200.0));
        assert_eq!(out[0].p50_turn_duration_ms, None);

        let q = query(json!({"project_id": "e/p",
            "sort_by": [{"field": "p50_turn_duration_ms", "direction": "desc"}]}))
        .unwrap();
        let ids: Vec<String> =
            aggregate(&q, turns.clone()).into_iter().map(|t| t.thread_id).collect();
        assert_eq!(ids, ["b", "a", "c"], "null last");
        let q = query(json!({"project_id": "e/p",
            "sort_by": [{"field": "p50_turn_duration_ms", "direction": "asc"}]}))
        .unwrap();
        let ids: Vec<String> =
            aggregate(&q, turns.clone()).into_iter().map(|t| t.thread_id).collect();
        assert_eq!(ids, ["a", "b", "c"], "null last");

        let q = query(
            json!({"project_id": "e/p", "filter": {"after_datetime": "1970-01-01T00:00:06Z"},
            "sort_by": [{"field": "thread_id"}], "limit": 1, "offset": 1}),
        )
        .unwrap();
        let ids: Vec<String> =
            aggregate(&q, turns.clone()).into_iter().map(|t| t.thread_id).collect();
        assert_eq!(ids, ["c"]);
        let q = query(json!({"project_id": "e/p", "filter": {"thread_ids": []}})).unwrap();
        assert!(aggregate(&q, turns).is_empty());
        assert!(query(json!({"project_id": "e/p", "sort_by": [{"field": "op_name"}]})).is_err());
        assert!(query(json!({"project_id": "e/p", "limit": -1})).is_err());
    }
}
