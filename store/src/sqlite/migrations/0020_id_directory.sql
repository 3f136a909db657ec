-- Calls unique by bucket, found by id through a directory (docs/storage.md#id-directory,
-- store/src/sqlite/id_directory.rs). Span ids are random, so the unique `(project_key, id)`
-- index took each new row onto a leaf of its own, anywhere in the index: on a large project a
-- commit wrote about one 16 KiB page per span into the WAL, and the checkpoint wrote it again.
-- Rows are now unique by `(project_key, bucket, id)`, whose new entries fall in the newest
-- bucket's leaves. `call_ids` maps each id of the buckets up to `call_ids_merged.merged` to its
-- bucket; the writer adds sealed buckets to it in sorted runs. A lookup by id reads the
-- directory and probes the few buckets after it.
--
-- The constraint is part of the table's definition, so the table is rebuilt, each row with its
-- rowid (the substring index is by rowid), as migration 17 did. Every row is then in the
-- directory, and every bucket holding a row is listed for its project, bucket 0 too: lookups by
-- trace and parent no longer probe bucket 0 unlisted.
CREATE TABLE calls_by_bucket (
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
    bucket          INTEGER NOT NULL,
    otel_resource   INTEGER,
    UNIQUE (project_key, bucket, id)
);
INSERT INTO calls_by_bucket (rowid, project_key, id, trace_id, parent_id, op_name, display_name,
                             name_updated, thread_id, turn_id, started_at, ended_at, attributes,
                             inputs, output, summary, exception, otel_dump, wb_user_id, wb_run_id,
                             wb_run_step, wb_run_step_end, deleted_at, end_status, bucket,
                             otel_resource)
SELECT rowid, project_key, id, trace_id, parent_id, op_name, display_name, name_updated,
       thread_id, turn_id, started_at, ended_at, attributes, inputs, output, summary, exception,
       otel_dump, wb_user_id, wb_run_id, wb_run_step, wb_run_step_end, deleted_at, end_status,
       bucket, otel_resource
FROM calls ORDER BY rowid;
DROP TABLE calls;
ALTER TABLE calls_by_bucket RENAME TO calls;
CREATE INDEX calls_live_by_start ON calls (project_key, started_at) WHERE deleted_at IS NULL;
CREATE INDEX calls_by_op ON calls (project_key, op_name, deleted_at, started_at);
CREATE INDEX calls_by_trace ON calls (project_key, bucket, trace_id, deleted_at, started_at);
CREATE INDEX calls_by_parent ON calls (project_key, bucket, parent_id, deleted_at, started_at);
-- The expression is STATUS_SQL in store/src/sqlite/compile.rs, character for character.
CREATE INDEX calls_live_by_status ON calls (project_key, (COALESCE(end_status, CASE WHEN exception IS NOT NULL THEN 'error' WHEN ended_at IS NULL THEN 'running' WHEN json_type(summary, '$.status_counts.error') IN ('integer', 'real') AND json_extract(summary, '$.status_counts.error') > 0 THEN 'descendant_error' ELSE 'success' END)), started_at) WHERE deleted_at IS NULL;
CREATE INDEX calls_turns
    ON calls (project_key, bucket, thread_id, id, started_at, ended_at, deleted_at)
    WHERE turn_id = id AND thread_id != '';

CREATE TABLE call_ids (
    project_key INTEGER NOT NULL,
    id          TEXT NOT NULL,
    bucket      INTEGER NOT NULL,
    PRIMARY KEY (project_key, id)
) WITHOUT ROWID;
INSERT INTO call_ids (project_key, id, bucket)
SELECT project_key, id, bucket FROM calls ORDER BY project_key, id;
-- The newest bucket whose ids, and every earlier bucket's, are in `call_ids`: one row.
CREATE TABLE call_ids_merged (merged INTEGER NOT NULL);
INSERT INTO call_ids_merged (merged) SELECT IFNULL(MAX(bucket), -1) FROM calls;
-- A row deleted (retention) leaves no entry behind.
CREATE TRIGGER call_ids_forget AFTER DELETE ON calls BEGIN
    DELETE FROM call_ids WHERE project_key = old.project_key AND id = old.id AND bucket = old.bucket;
END;
INSERT OR IGNORE INTO call_buckets (project_key, bucket) SELECT DISTINCT project_key, bucket FROM calls;
