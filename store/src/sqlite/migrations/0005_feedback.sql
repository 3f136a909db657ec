-- Feedback (CONTRACT §7): one row per (project, id); client-chosen ids are kept, so a retried
-- batch inserts nothing new. `payload` is the JSON object text; `extra` holds the scorer_* /
-- span_* members as one JSON object. Reads by target go through (project_id, weave_ref): the
-- feedback of a call (include_feedback, feedback.[type] fields in call queries).
CREATE TABLE feedback (
    project_id     TEXT NOT NULL,
    id             TEXT NOT NULL,
    weave_ref      TEXT NOT NULL,
    feedback_type  TEXT NOT NULL,
    creator        TEXT,
    payload        TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    wb_user_id     TEXT,
    annotation_ref TEXT,
    runnable_ref   TEXT,
    call_ref       TEXT,
    trigger_ref    TEXT,
    queue_id       TEXT,
    extra          TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (project_id, id)
);
CREATE INDEX feedback_by_ref ON feedback (project_id, weave_ref, created_at);
