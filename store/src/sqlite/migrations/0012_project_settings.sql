-- Project settings (docs/api/project-settings.md): one row per (project, setting), the value as
-- JSON text, so updating one setting never rewrites another. Written with IF NOT EXISTS so the
-- migration is harmless wherever it lands in the sequence.
CREATE TABLE IF NOT EXISTS project_settings (
    project_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, name)
);
-- The retention purge deletes a project's oldest feedback first (docs/storage.md#retention).
CREATE INDEX IF NOT EXISTS feedback_by_created ON feedback (project_id, created_at);
-- ...and its oldest files.
CREATE INDEX IF NOT EXISTS files_by_created ON files (project_id, created_at);
