-- OTLP log records (/otel/v1/logs, docs/otlp.md "Log records"): one row per record, stored once
-- per (project, trace, span, id); the id is a digest of the record. A span's records are read
-- by the primary key's prefix when its call is read; a project's records by time with the
-- second index (/otel/logs/query). Records that name no trace or span have '' there.
CREATE TABLE otel_logs (
    project_id      TEXT NOT NULL,
    trace_id        TEXT NOT NULL,
    span_id         TEXT NOT NULL,
    id              TEXT NOT NULL,
    time_unix_nano  INTEGER NOT NULL,
    seq             INTEGER NOT NULL,
    event_name      TEXT NOT NULL,
    severity_number INTEGER NOT NULL,
    severity_text   TEXT NOT NULL,
    body            TEXT NOT NULL,
    attributes      TEXT NOT NULL,
    dump            TEXT NOT NULL,
    wb_user_id      TEXT,
    PRIMARY KEY (project_id, trace_id, span_id, id)
);

CREATE INDEX otel_logs_by_time ON otel_logs (project_id, time_unix_nano, seq);
