-- Blobs of the distributed write path (see store/src/blobs.rs): call parts too large for a Kafka
-- record, in chunks of at most 1 MiB, content-addressed per project.
CREATE TABLE call_blob_chunks (
    project_id  TEXT NOT NULL,
    digest      TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    data        BLOB NOT NULL,
    PRIMARY KEY (project_id, digest, chunk_index)
);
-- One row, rewritten by the consumer's write probe (Store::probe_write).
CREATE TABLE heddle_health (
    id        INTEGER PRIMARY KEY,
    probed_at INTEGER NOT NULL
);
