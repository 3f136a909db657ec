-- heddle's ClickHouse schema, version 14: project settings (docs/api/project-settings.md).
-- Idempotent like version 1.
--
-- One row per write of a (project, setting); reads take the newest value per setting (argMax by
-- `version`, the per-process monotonic counter of call_parts), and merges keep only it. The
-- value is JSON text. Settings are read once per project and cache period, never per request.
CREATE TABLE IF NOT EXISTS project_settings (
    project_id String,
    name       String,
    value      String,
    updated_at DateTime64(6, 'UTC'),
    version    UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (project_id, name);
