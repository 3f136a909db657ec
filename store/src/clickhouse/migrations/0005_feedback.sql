-- heddle's ClickHouse schema, version 5: feedback (CONTRACT §7). Idempotent like version 1.
--
-- One row per (project_id, id). Inserts skip ids already stored (client-chosen ids make a
-- retried batch a no-op); a racing duplicate collapses in the ReplacingMergeTree, and reads use
-- FINAL (feedback is small next to calls, and never read on the calls hot path unless a query
-- asks for it). `payload_q` is the payload with every number as a string of its exact text when
-- ClickHouse would not reproduce it, else '' (like the `_q` columns of call_parts). `extra` holds
-- the scorer_* / span_* members as one JSON object. Purge is a lightweight DELETE.
CREATE TABLE IF NOT EXISTS feedback (
    project_id     String,
    id             String,
    weave_ref      String,
    feedback_type  String,
    creator        Nullable(String),
    payload        String CODEC(ZSTD(1)),
    payload_q      String CODEC(ZSTD(1)),
    created_at     DateTime64(6, 'UTC'),
    wb_user_id     Nullable(String),
    annotation_ref Nullable(String),
    runnable_ref   Nullable(String),
    call_ref       Nullable(String),
    trigger_ref    Nullable(String),
    queue_id       Nullable(String),
    extra          String,
    INDEX by_ref weave_ref TYPE bloom_filter GRANULARITY 4
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, id);
