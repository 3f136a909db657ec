-- The turns index partitioned by when a row was written, and covering the threads query
-- (docs/storage.md#indexes, docs/storage.md#buckets). Thread ids are random (a conversation id, a
-- UUID), so keyed by them each new turn landed on a leaf of its own, anywhere in the index, and
-- as a project grew every commit wrote about one 16 KiB page per new turn. With `bucket` after
-- the project, new turns touch the newest bucket's leaves only. The threads query reads every
-- turn of its project through the project prefix, or seeks the threads it names in each bucket
-- (store/src/sqlite/threads.rs). The index now holds every column that query reads, so it no
-- longer reads each turn's row.
DROP INDEX calls_turns;
CREATE INDEX calls_turns
    ON calls (project_key, bucket, thread_id, id, started_at, ended_at, deleted_at)
    WHERE turn_id = id AND thread_id != '';
