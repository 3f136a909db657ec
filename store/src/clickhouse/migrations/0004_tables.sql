-- heddle's ClickHouse schema, version 3: tables (CONTRACT §12). Idempotent like version 1.
--
-- Table rows, content-addressed per project: one row per (project_id, digest). A racing
-- duplicate insert is the same row and collapses in the ReplacingMergeTree; reads take one row
-- per digest. `size_bytes` is the length of `val`, so storage stats need not read it.
CREATE TABLE IF NOT EXISTS table_rows (
    project_id String,
    digest     String,
    val        String CODEC(ZSTD(1)),
    size_bytes UInt64,
    created_at DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, digest);

-- Tables, content-addressed per project: the ordered row digests as one array (duplicates
-- allowed). A page is arraySlice(...) of the one row, so only the page's digests travel, and
-- the rows themselves are then read by primary key.
CREATE TABLE IF NOT EXISTS tables (
    project_id  String,
    digest      String,
    row_count   UInt64,
    row_digests Array(String) CODEC(ZSTD(1)),
    created_at  DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, digest);
