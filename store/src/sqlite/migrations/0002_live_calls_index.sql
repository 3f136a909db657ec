-- Every read filters `deleted_at IS NULL`: a partial index over live calls lets counts run on the
-- index alone and serves the default `started_at` order without touching deleted rows.
DROP INDEX calls_by_start;
CREATE INDEX calls_live_by_start ON calls (project_id, started_at) WHERE deleted_at IS NULL;
