-- API keys can be revoked (`heddle keys revoke`): revoked_at is when, in microseconds since the
-- epoch; NULL while the key works. A revoked key stays listed.
ALTER TABLE api_keys ADD COLUMN revoked_at INTEGER;
