-- heddle's ClickHouse schema, version 7: revoked API keys (`heddle keys revoke`). Idempotent like
-- version 1.
--
-- api_keys has no version column to update a key in place, so a revocation is a row of its own.
-- Revoking a key twice (or from two processes at once) may write two rows: reads take the
-- earliest. Keys are few, so reads take the whole small table.
CREATE TABLE IF NOT EXISTS api_key_revocations (
    key_hash   String,
    revoked_at DateTime64(6, 'UTC')
) ENGINE = MergeTree
ORDER BY key_hash;
