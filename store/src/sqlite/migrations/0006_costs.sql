-- Prices of LLMs per project (/cost/create), CONTRACT §6. Per-token costs in their unit;
-- effective_date and created_at in microseconds since the epoch. Purge deletes rows.
CREATE TABLE llm_token_prices (
    project_id                      TEXT NOT NULL,
    id                              TEXT NOT NULL,
    llm_id                          TEXT NOT NULL,
    provider_id                     TEXT NOT NULL,
    prompt_token_cost               REAL NOT NULL,
    completion_token_cost           REAL NOT NULL,
    prompt_token_cost_unit          TEXT NOT NULL,
    completion_token_cost_unit      TEXT NOT NULL,
    cache_read_input_token_cost     REAL NOT NULL,
    cache_creation_input_token_cost REAL NOT NULL,
    effective_date                  INTEGER NOT NULL,
    created_at                      INTEGER NOT NULL,
    created_by                      TEXT,
    PRIMARY KEY (project_id, id)
);

-- The turn calls of a project by thread (/threads/stream_query reads only these).
CREATE INDEX calls_turns ON calls (project_id, thread_id) WHERE turn_id = id AND thread_id != '';
