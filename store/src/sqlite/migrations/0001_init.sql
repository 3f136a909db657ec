-- Calls: one row per (project, call id), the union of its start and end parts.
-- Timestamps are microseconds since the Unix epoch; JSON members are stored as text.
CREATE TABLE calls (
    project_id      TEXT NOT NULL,
    id              TEXT NOT NULL,
    trace_id        TEXT,
    parent_id       TEXT,
    op_name         TEXT,
    display_name    TEXT,
    -- 1 once /call/update set display_name: later parts must not overwrite it.
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
    UNIQUE (project_id, id)
);
CREATE INDEX calls_by_start ON calls (project_id, started_at);
CREATE INDEX calls_by_trace ON calls (project_id, trace_id);
CREATE INDEX calls_by_parent ON calls (project_id, parent_id);
CREATE INDEX calls_by_op ON calls (project_id, op_name);

-- Object versions, content-addressed per (project, object_id).
CREATE TABLE objects (
    project_id        TEXT NOT NULL,
    object_id         TEXT NOT NULL,
    digest            TEXT NOT NULL,
    version_index     INTEGER NOT NULL,
    kind              TEXT NOT NULL,
    base_object_class TEXT,
    leaf_object_class TEXT,
    val               TEXT NOT NULL,
    created_at        INTEGER NOT NULL,
    deleted_at        INTEGER,
    wb_user_id        TEXT,
    PRIMARY KEY (project_id, object_id, digest),
    UNIQUE (project_id, object_id, version_index)
);

-- File contents, content-addressed per project.
CREATE TABLE files (
    project_id TEXT NOT NULL,
    digest     TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    content    BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, digest)
);

-- API keys, stored as SHA-256 of the key. entity NULL = admin key (any entity).
CREATE TABLE api_keys (
    key_hash   TEXT PRIMARY KEY,
    entity     TEXT,
    created_at INTEGER NOT NULL
);
