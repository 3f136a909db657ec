-- The filters the SDK and the UI use at scale, answered from an index (docs/storage.md#indexes).
-- Each filter column is followed by deleted_at and started_at: `deleted_at IS NULL` is an equality
-- on the index, a page in time order reads it in order, and a count (`calls/query_stats`) never
-- touches the table. Full indexes, not partial ones: deleting a trace walks parent_id over
-- deleted calls too.
DROP INDEX calls_by_trace;
DROP INDEX calls_by_parent;
DROP INDEX calls_by_op;
CREATE INDEX calls_by_trace ON calls (project_id, trace_id, deleted_at, started_at);
CREATE INDEX calls_by_parent ON calls (project_id, parent_id, deleted_at, started_at);
CREATE INDEX calls_by_op ON calls (project_id, op_name, deleted_at, started_at);
-- `summary.weave.status`, as the query compiler renders it (compile.rs STATUS_SQL). SQLite uses an
-- expression index only for the same expression; store/tests/sqlite_plans.rs fails when it does not.
CREATE INDEX calls_live_by_status ON calls (project_id, (CASE WHEN exception IS NOT NULL THEN 'error' WHEN ended_at IS NULL THEN 'running' WHEN COALESCE(CAST(json_extract(summary, '$.status_counts.error') AS REAL), 0) > 0 THEN 'descendant_error' ELSE 'success' END), started_at) WHERE deleted_at IS NULL;
