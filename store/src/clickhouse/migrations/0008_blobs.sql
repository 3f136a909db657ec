-- heddle's ClickHouse schema, version 7: blobs of the distributed write path (see
-- store/src/blobs.rs) and the consumer's write probe. Idempotent like version 1.
--
-- Call parts too large for a Kafka record, in chunks of at most 1 MiB, content-addressed per
-- project. A repeated write brings identical rows, which merges collapse and reads skip
-- (LIMIT 1 BY chunk_index). `created_at` leaves room for a retention TTL.
CREATE TABLE IF NOT EXISTS call_blob_chunks (
    project_id  String,
    digest      String,
    chunk_index UInt32,
    data        String CODEC(ZSTD(1)),
    created_at  DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, digest, chunk_index);

-- One row (id = 1), rewritten by Store::probe_write; merges keep the newest.
CREATE TABLE IF NOT EXISTS heddle_health (
    id        UInt8,
    probed_at DateTime64(6, 'UTC') DEFAULT now64(6)
) ENGINE = ReplacingMergeTree(probed_at)
ORDER BY id;
