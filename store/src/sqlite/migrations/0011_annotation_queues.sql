-- Annotation queues (docs/api/annotation-queues.md). Queues are soft-deleted (deleted_at);
-- `scorer_refs` and `display_fields` are JSON arrays of strings. An item is one call in one
-- queue, its id derived from both (so adding a call twice names one item), the call's fields
-- copied in when it was added. Progress holds each annotator's current state on an item.
CREATE TABLE annotation_queues (
    project_id  TEXT NOT NULL,
    id          TEXT NOT NULL,
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    scorer_refs TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    created_by  TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    deleted_at  INTEGER,
    PRIMARY KEY (project_id, id)
);
CREATE TABLE annotation_queue_items (
    project_id      TEXT NOT NULL,
    queue_id        TEXT NOT NULL,
    id              TEXT NOT NULL,
    call_id         TEXT NOT NULL,
    call_started_at INTEGER NOT NULL,
    call_ended_at   INTEGER,
    call_op_name    TEXT NOT NULL,
    call_trace_id   TEXT NOT NULL,
    display_fields  TEXT NOT NULL,
    added_by        TEXT,
    created_at      INTEGER NOT NULL,
    created_by      TEXT NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (project_id, queue_id, id)
);
CREATE TABLE annotation_queue_progress (
    project_id TEXT NOT NULL,
    queue_id   TEXT NOT NULL,
    item_id    TEXT NOT NULL,
    annotator  TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, queue_id, item_id, annotator)
);
