-- Calls keyed by an integer per project (docs/storage.md#project-keys,
-- store/src/sqlite/project_keys.rs). Every index of `calls` began with the project's id, text of
-- a dozen to a few dozen bytes, so each entry carried it and each step of every descent compared
-- it. With one byte or two in its place the indexes are smaller, a commit dirties fewer of their
-- pages, and a key comparison is an integer's. The unique `(project, id)` constraint is part of
-- the table's definition, so the table is rebuilt: each row is copied once, with its rowid (the
-- substring index and the buckets are by rowid), and the indexes are built afterwards, sorted.
CREATE TABLE project_keys (
    project_key INTEGER PRIMARY KEY,
    project_id  TEXT NOT NULL UNIQUE
);
INSERT INTO project_keys (project_id) SELECT DISTINCT project_id FROM calls ORDER BY project_id;
CREATE TABLE calls_keyed (
    project_key     INTEGER NOT NULL,
    id              TEXT NOT NULL,
    trace_id        TEXT,
    parent_id       TEXT,
    op_name         TEXT,
    display_name    TEXT,
    -- 1 once /call/update set display_name, 2 once an end part did: see calls.rs UPSERT_CALL_PART.
    name_updated    INTEGER NOT NULL DEFAULT 0,
    thread_id       TEXT,
    turn_id         TEXT,
    started_at      INTEGER,
    ended_at        INTEGER,
    attributes      TEXT,
    inputs          TEXT,
    output          TEXT,
    summary         TEXT,
    exception       TEXT,
    otel_dump       TEXT,
    wb_user_id      TEXT,
    wb_run_id       TEXT,
    wb_run_step     INTEGER,
    wb_run_step_end INTEGER,
    deleted_at      INTEGER,
    end_status      TEXT,
    bucket          INTEGER NOT NULL DEFAULT 0,
    UNIQUE (project_key, id)
);
INSERT INTO calls_keyed (rowid, project_key, id, trace_id, parent_id, op_name, display_name,
                         name_updated, thread_id, turn_id, started_at, ended_at, attributes,
                         inputs, output, summary, exception, otel_dump, wb_user_id, wb_run_id,
                         wb_run_step, wb_run_step_end, deleted_at, end_status, bucket)
SELECT c.rowid, k.project_key, c.id, c.trace_id, c.parent_id, c.op_name, c.display_name,
       c.name_updated, c.thread_id, c.turn_id, c.started_at, c.ended_at, c.attributes, c.inputs,
       c.output, c.summary, c.exception, c.otel_dump, c.wb_user_id, c.wb_run_id, c.wb_run_step,
       c.wb_run_step_end, c.deleted_at, c.end_status, c.bucket
FROM calls c JOIN project_keys k ON k.project_id = c.project_id
ORDER BY c.rowid;
DROP TABLE calls;
ALTER TABLE calls_keyed RENAME TO calls;
CREATE INDEX calls_live_by_start ON calls (project_key, started_at) WHERE deleted_at IS NULL;
CREATE INDEX calls_turns ON calls (project_key, thread_id) WHERE turn_id = id AND thread_id != '';
CREATE INDEX calls_by_op ON calls (project_key, op_name, deleted_at, started_at);
CREATE INDEX calls_by_trace ON calls (project_key, bucket, trace_id, deleted_at, started_at);
CREATE INDEX calls_by_parent ON calls (project_key, bucket, parent_id, deleted_at, started_at);
-- The expression is STATUS_SQL in store/src/sqlite/compile.rs, character for character.
CREATE INDEX calls_live_by_status ON calls (project_key, (COALESCE(end_status, CASE WHEN exception IS NOT NULL THEN 'error' WHEN ended_at IS NULL THEN 'running' WHEN json_type(summary, '$.status_counts.error') IN ('integer', 'real') AND json_extract(summary, '$.status_counts.error') > 0 THEN 'descendant_error' ELSE 'success' END)), started_at) WHERE deleted_at IS NULL;
CREATE TABLE call_buckets_keyed (
    project_key INTEGER NOT NULL,
    bucket      INTEGER NOT NULL,
    PRIMARY KEY (project_key, bucket)
) WITHOUT ROWID;
INSERT INTO call_buckets_keyed (project_key, bucket)
SELECT k.project_key, b.bucket FROM call_buckets b JOIN project_keys k ON k.project_id = b.project_id;
DROP TABLE call_buckets;
ALTER TABLE call_buckets_keyed RENAME TO call_buckets;
