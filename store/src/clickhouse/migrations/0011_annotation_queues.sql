-- heddle's ClickHouse schema, version 11: annotation queues (docs/api/annotation-queues.md).
-- Idempotent like version 1.
--
-- Queues: every create, update and delete writes the whole queue again; a queue is its newest
-- row by `row_version`. Items: one row per call and queue, the id derived from both, so a
-- repeated or racing add writes an identical item that reads collapse (`LIMIT 1 BY id`).
-- Progress: a row per change of an annotator's state on an item; the newest row is current.
CREATE TABLE IF NOT EXISTS annotation_queues (
    project_id  String,
    id          String,
    name        String,
    description String,
    scorer_refs Array(String),
    created_at  DateTime64(6, 'UTC'),
    created_by  String,
    updated_at  DateTime64(6, 'UTC'),
    deleted_at  Nullable(DateTime64(6, 'UTC')),
    row_version UInt64
) ENGINE = MergeTree
ORDER BY (project_id, id);

CREATE TABLE IF NOT EXISTS annotation_queue_items (
    project_id      String,
    queue_id        String,
    id              String,
    call_id         String,
    call_started_at DateTime64(6, 'UTC'),
    call_ended_at   Nullable(DateTime64(6, 'UTC')),
    call_op_name    String,
    call_trace_id   String,
    display_fields  Array(String),
    added_by        Nullable(String),
    created_at      DateTime64(6, 'UTC'),
    created_by      String
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, queue_id, id);

CREATE TABLE IF NOT EXISTS annotation_queue_progress (
    project_id  String,
    queue_id    String,
    item_id     String,
    annotator   String,
    state       String,
    updated_at  DateTime64(6, 'UTC'),
    row_version UInt64
) ENGINE = MergeTree
ORDER BY (project_id, queue_id, item_id, annotator);
