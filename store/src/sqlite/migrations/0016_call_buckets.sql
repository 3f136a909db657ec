-- The trace and parent indexes partitioned by when a row was written (docs/storage.md#buckets,
-- store/src/sqlite/buckets.rs). Span and trace ids are random, so each new row landed on its own
-- leaf of both indexes, anywhere in them: past a few hundred thousand calls, every commit wrote
-- one 16 KiB page per new row and index, several times the row itself. With `bucket`, the
-- rowid's stretch of 8,192 rows at insert, after `project_id`, new rows only touch the leaves of
-- the newest bucket. A lookup probes each bucket its project has (listed in `call_buckets`) and
-- bucket 0, which holds every row from before this migration (the column's default: nothing is
-- rewritten) and any row written without one.
ALTER TABLE calls ADD COLUMN bucket INTEGER NOT NULL DEFAULT 0;
CREATE TABLE call_buckets (
    project_id TEXT NOT NULL,
    bucket     INTEGER NOT NULL,
    PRIMARY KEY (project_id, bucket)
) WITHOUT ROWID;
DROP INDEX calls_by_trace;
DROP INDEX calls_by_parent;
CREATE INDEX calls_by_trace ON calls (project_id, bucket, trace_id, deleted_at, started_at);
CREATE INDEX calls_by_parent ON calls (project_id, bucket, parent_id, deleted_at, started_at);
