-- heddle's ClickHouse schema, version 1. Every statement is idempotent (IF NOT EXISTS), so a
-- migration interrupted half-way is simply run again. Statements are separated by a `;` at the
-- end of a line (ClickHouse's HTTP interface takes one statement per request).
--
-- Calls: one append-only row per write. A call is the aggregation of its rows per
-- (project_id, id) at read time (see sql.rs, CALLS_AGG): the newest start row gives the start
-- half, the newest end row the end half, the newest rename row the display name, the first
-- delete row the deletion time. Parts commute (any order), and a duplicate row changes no
-- aggregate, so retries are invisible. No FINAL and no join on the read path.
--   kind = 'part':   has_start / has_end say which halves the row carries (both: a complete
--                    call); columns of an absent half hold their defaults and are never read.
--   kind = 'rename': /call/update; display_name is the new name (NULL = cleared).
--   kind = 'delete': /calls/delete; deleted_at is the deletion time.
-- `version` orders rows of one call: a per-process monotonic counter seeded from the clock.
-- JSON members are stored verbatim (`inputs`, ...). When a member holds a number whose text
-- ClickHouse would not reproduce (1.0, 1e-05, -0.0, 10**20), `<member>_q` holds a copy with
-- every number turned into a JSON string of its exact text, for the query language's string
-- semantics; otherwise it is '' and queries read the member itself. `input_refs`/`output_refs`
-- are the weave refs found anywhere in inputs/output (the input_refs/output_refs filters).
CREATE TABLE IF NOT EXISTS call_parts (
    project_id      String,
    id              String,
    version         UInt64,
    kind            Enum8('part' = 0, 'rename' = 1, 'delete' = 2),
    has_start       UInt8,
    has_end         UInt8,
    trace_id        Nullable(String),
    -- start half
    op_name         String,
    display_name    Nullable(String),
    parent_id       Nullable(String),
    thread_id       Nullable(String),
    turn_id         Nullable(String),
    started_at      DateTime64(6, 'UTC'),
    attributes      String CODEC(ZSTD(1)),
    attributes_q    String CODEC(ZSTD(1)),
    inputs          String CODEC(ZSTD(1)),
    inputs_q        String CODEC(ZSTD(1)),
    input_refs      Array(String),
    otel_dump       Nullable(String) CODEC(ZSTD(1)),
    wb_user_id      Nullable(String),
    wb_run_id       Nullable(String),
    wb_run_step     Nullable(Int64),
    -- end half
    ended_at        DateTime64(6, 'UTC'),
    summary         String CODEC(ZSTD(1)),
    summary_q       String CODEC(ZSTD(1)),
    output          Nullable(String) CODEC(ZSTD(1)),
    output_q        String CODEC(ZSTD(1)),
    output_refs     Array(String),
    exception       Nullable(String),
    wb_run_step_end Nullable(Int64),
    -- delete rows
    deleted_at      DateTime64(6, 'UTC'),
    INDEX by_trace trace_id TYPE bloom_filter GRANULARITY 4,
    INDEX by_parent parent_id TYPE bloom_filter GRANULARITY 4
) ENGINE = MergeTree
ORDER BY (project_id, id)
SETTINGS non_replicated_deduplication_window = 1000;

-- Object versions, content-addressed per (project_id, object_id). A version is written once;
-- reviving a deleted version writes the same (digest, version_index) again with a higher
-- row_version, so reads take the newest row per digest (argMax by row_version) and merges
-- eventually keep only that one.
CREATE TABLE IF NOT EXISTS objects (
    project_id        String,
    object_id         String,
    digest            String,
    version_index     Int64,
    kind              LowCardinality(String),
    base_object_class Nullable(String),
    leaf_object_class Nullable(String),
    val               String CODEC(ZSTD(1)),
    created_at        DateTime64(6, 'UTC'),
    deleted_at        Nullable(DateTime64(6, 'UTC')),
    wb_user_id        Nullable(String),
    row_version       UInt64
) ENGINE = ReplacingMergeTree(row_version)
ORDER BY (project_id, object_id, digest);

-- File contents, content-addressed per project: a duplicate upload is the same row.
CREATE TABLE IF NOT EXISTS files (
    project_id String,
    digest     String,
    size_bytes UInt64,
    content    String CODEC(ZSTD(1)),
    created_at DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY (project_id, digest);

-- API keys, stored as SHA-256 of the key. entity NULL = admin key (any entity). Keys belong to
-- no project, so they are ordered by their hash.
CREATE TABLE IF NOT EXISTS api_keys (
    key_hash   String,
    entity     Nullable(String),
    created_at DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY key_hash;
