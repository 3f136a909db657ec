-- heddle's ClickHouse schema, version 15: OTLP log records (/otel/v1/logs, docs/otlp.md "Log
-- records"). Idempotent like version 1.
--
-- One row per record; the id is a digest of the record, so a record written twice (a client
-- retry, a Kafka redelivery) is the same row: inserts from the consumer carry a deduplication
-- token, merges keep one row per key, and reads take one row per id (LIMIT 1 BY) until then.
-- A span's records are read by the key's prefix when its call is read. Records that name no
-- trace or span have '' there.
CREATE TABLE IF NOT EXISTS otel_logs (
    project_id      String,
    trace_id        String,
    span_id         String,
    id              String,
    time_unix_nano  Int64,
    seq             Int64,
    event_name      String,
    severity_number Int32,
    severity_text   String,
    body            String,
    attributes      String,
    dump            String,
    wb_user_id      Nullable(String)
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, trace_id, span_id, id)
SETTINGS non_replicated_deduplication_window = 1000;
