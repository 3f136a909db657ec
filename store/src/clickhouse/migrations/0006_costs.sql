-- heddle's ClickHouse schema, version 6: LLM prices per project (/cost/create, CONTRACT §6).
-- Idempotent like version 1.
--
-- One row per write: a price is written once (deleted = 0); /cost/purge writes a tombstone of
-- the same (project_id, id) with deleted = 1 and a higher row_version. Reads take the newest
-- row per id (LIMIT 1 BY id) and drop tombstones; merges eventually keep only the newest row.
-- A project's prices are few, so reads take all of them (the project is the key's prefix).
CREATE TABLE IF NOT EXISTS llm_token_prices (
    project_id                      String,
    id                              String,
    row_version                     UInt64,
    deleted                         UInt8,
    llm_id                          String,
    provider_id                     String,
    prompt_token_cost               Float64,
    completion_token_cost           Float64,
    prompt_token_cost_unit          String,
    completion_token_cost_unit      String,
    cache_read_input_token_cost     Float64,
    cache_creation_input_token_cost Float64,
    effective_date                  DateTime64(6, 'UTC'),
    created_at                      DateTime64(6, 'UTC'),
    created_by                      Nullable(String)
) ENGINE = ReplacingMergeTree(row_version)
ORDER BY (project_id, id);
