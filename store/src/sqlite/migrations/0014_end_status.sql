-- `summary.weave.status` stored with a call's end (docs/storage.md#indexes). Indexing the status
-- expression made every insert parse the summary with json_extract on the writer; the status is
-- now read from the end part before it reaches the writer, and stored in `end_status`. Rows
-- without it (no end yet, or written before this migration) get the expression, which for them
-- is cheap (no end: 'running') or already indexed. Nothing is rewritten: the column is NULL in
-- every existing row.
-- The expression is STATUS_SQL in store/src/sqlite/compile.rs, character for character: SQLite
-- uses an expression index only for the same expression (store/tests/sqlite_plans.rs checks it).
-- It reads `status_counts.error` only when it is a number, as the status returned with a call
-- does (`derive_status`); the index before it also counted text such as "3".
ALTER TABLE calls ADD COLUMN end_status TEXT;
DROP INDEX calls_live_by_status;
CREATE INDEX calls_live_by_status ON calls (project_id, (COALESCE(end_status, CASE WHEN exception IS NOT NULL THEN 'error' WHEN ended_at IS NULL THEN 'running' WHEN json_type(summary, '$.status_counts.error') IN ('integer', 'real') AND json_extract(summary, '$.status_counts.error') > 0 THEN 'descendant_error' ELSE 'success' END)), started_at) WHERE deleted_at IS NULL;
