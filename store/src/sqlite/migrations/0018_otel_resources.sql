-- OTLP resources stored once per project (docs/storage.md#otlp-resources,
-- store/src/sqlite/otel_resources.rs). Each span's `otel_dump` carried its resource, the same
-- service, SDK, host and process attributes for every span of a process: a tenth of an LLM
-- span's row. A span's row now names its resource in `otel_resource`, and its dump holds `null`
-- in the resource's place until it is read. Rows from before keep their whole dump (NULL here).
CREATE TABLE otel_resources (
    id          INTEGER PRIMARY KEY,
    project_key INTEGER NOT NULL,
    resource    TEXT NOT NULL,
    UNIQUE (project_key, resource)
);
ALTER TABLE calls ADD COLUMN otel_resource INTEGER;
