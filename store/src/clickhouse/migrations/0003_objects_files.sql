-- heddle's ClickHouse schema, version 2: files in chunks (see store/src/files.rs). Idempotent
-- like version 1.
--
-- The file row (`files`) now carries the chunk count; `content` stays empty for chunked files
-- and holds the whole content of files stored before version 2 (n_chunks = 0), which are read
-- as they are. The file row is written after its chunks, so a visible file is complete.
ALTER TABLE files ADD COLUMN IF NOT EXISTS n_chunks UInt32 DEFAULT 0;

-- One row per chunk of at most 1 MiB. A repeated upload writes identical rows, which merges
-- collapse and reads skip (LIMIT 1 BY chunk_index).
CREATE TABLE IF NOT EXISTS file_chunks (
    project_id  String,
    digest      String,
    chunk_index UInt32,
    data        String CODEC(ZSTD(1))
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, digest, chunk_index);
