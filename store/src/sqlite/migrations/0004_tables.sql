-- Table rows, content-addressed per project: a row held by many tables (or many times by one)
-- is stored once. `size_bytes` is the length of `val`, kept so storage stats need not read it.
CREATE TABLE table_rows (
    project_id TEXT NOT NULL,
    digest     TEXT NOT NULL,
    val        TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, digest)
);

-- Tables, content-addressed per project: the ordered row digests as one JSON array (duplicates
-- allowed). One row per table keeps create/update a single insert however long the table; a
-- page is read with json_each(...) LIMIT/OFFSET, which walks the array inside SQLite and
-- returns only the page.
CREATE TABLE tables (
    project_id  TEXT NOT NULL,
    digest      TEXT NOT NULL,
    row_count   INTEGER NOT NULL,
    row_digests TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (project_id, digest)
);
