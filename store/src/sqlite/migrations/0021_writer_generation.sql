-- Which writer wrote calls last, and how many jobs that may insert calls have committed
-- (docs/storage.md#id-filter). A writer keeps an in-memory filter of the ids the table holds; it
-- may trust it only while every such job since its filter's snapshot was its own, and these two
-- columns tell it whether another process (a separate role sharing the data directory) wrote
-- calls in between.
ALTER TABLE call_ids_merged ADD COLUMN writer INTEGER NOT NULL DEFAULT 0;
ALTER TABLE call_ids_merged ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
