//! API keys on ClickHouse: `api_keys`, and revocations as rows of their own in
//! `api_key_revocations` (the first one counts).

use async_trait::async_trait;
use clickhouse::Row;
use heddle_proto::time::Micros;
use serde::{Deserialize, Serialize};

use super::sql::Sql;
use super::{ClickHouseStore, backend};
use crate::keys::{key_id, only_key, parse_key_id};
use crate::{KeyInfo, KeyRecord, KeyStore, Result, StoreError};

#[derive(Debug, Row, Serialize)]
struct KeyRow {
    pub key_hash: String,
    pub entity: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Row, Deserialize)]
struct KeyEntityRow {
    pub entity: Option<String>,
}

/// What `key_infos` selects.
#[derive(Debug, Row, Deserialize)]
struct KeyInfoRow {
    pub key_hash: String,
    pub entity: Option<String>,
    pub created_us: i64,
    pub revoked_us: Option<i64>,
}

impl KeyInfoRow {
    fn into_info(self) -> KeyInfo {
        KeyInfo {
            id: key_id(&self.key_hash).to_owned(),
            entity: self.entity,
            created_at: Micros(self.created_us),
            revoked_at: self.revoked_us.map(Micros),
        }
    }
}

#[derive(Debug, Row, Serialize)]
struct KeyRevocationRow {
    pub key_hash: String,
    pub revoked_at: i64,
}

/// The entity of the unrevoked key with this hash (see migrations/0007_key_revocation.sql).
fn select_key(key_hash: &str) -> Sql {
    let mut sql = Sql::new("SELECT entity FROM api_keys WHERE key_hash = ");
    sql.bind_str(key_hash)
        .push(" AND key_hash NOT IN (SELECT key_hash FROM api_key_revocations WHERE key_hash = ")
        .bind_str(key_hash)
        .push(") LIMIT 1");
    sql
}

const ANY_ADMIN_KEY: &str = "SELECT count() FROM api_keys WHERE entity IS NULL \
    AND key_hash NOT IN (SELECT key_hash FROM api_key_revocations)";

/// [`KeyInfoRow`] of every key, oldest first, or of the key with hash `only`.
fn key_infos(only: Option<&str>) -> Sql {
    let mut sql = Sql::new(
        "SELECT k.key_hash AS key_hash, k.entity AS entity, k.created_us AS created_us, \
         r.revoked_us AS revoked_us \
         FROM (SELECT key_hash, any(entity) AS entity, \
               toUnixTimestamp64Micro(min(created_at)) AS created_us \
               FROM api_keys GROUP BY key_hash) AS k \
         LEFT JOIN (SELECT key_hash, toNullable(toUnixTimestamp64Micro(min(revoked_at))) AS revoked_us \
               FROM api_key_revocations GROUP BY key_hash) AS r ON k.key_hash = r.key_hash",
    );
    if let Some(hash) = only {
        sql.push(" WHERE k.key_hash = ").bind_str(hash);
    }
    sql.push(" ORDER BY created_us, key_hash");
    sql
}

/// The hashes a key id (their prefix) names.
fn keys_with_id(id: &str) -> Sql {
    let mut sql = Sql::new("SELECT DISTINCT key_hash FROM api_keys WHERE startsWith(key_hash, ");
    sql.bind_str(id).push(")");
    sql
}

#[async_trait]
impl KeyStore for ClickHouseStore {
    async fn create_key(&self, key_hash: &str, entity: Option<&str>) -> Result<()> {
        let row = KeyRow {
            key_hash: key_hash.to_owned(),
            entity: entity.map(str::to_owned),
            created_at: Micros::now().0,
        };
        self.insert::<KeyRow>("api_keys", &[row]).await
    }

    async fn lookup_key(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        let found: Option<KeyEntityRow> =
            select_key(key_hash).query(&self.client).fetch_optional().await.map_err(backend)?;
        Ok(found.map(|r| KeyRecord { entity: r.entity }))
    }

    async fn has_admin_key(&self) -> Result<bool> {
        let n: u64 =
            Sql::new(ANY_ADMIN_KEY).query(&self.client).fetch_one().await.map_err(backend)?;
        Ok(n > 0)
    }

    async fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        let rows: Vec<KeyInfoRow> =
            key_infos(None).query(&self.client).fetch_all().await.map_err(backend)?;
        Ok(rows.into_iter().map(KeyInfoRow::into_info).collect())
    }

    async fn revoke_key(&self, id: &str) -> Result<KeyInfo> {
        let id = parse_key_id(id)?;
        let hashes: Vec<String> =
            keys_with_id(&id).query(&self.client).fetch_all().await.map_err(backend)?;
        let hash = only_key(&id, &hashes)?;
        let info = |hash: &str| {
            let q = key_infos(Some(hash)).query(&self.client);
            async move {
                let row: KeyInfoRow = q.fetch_one().await.map_err(backend)?;
                Ok::<_, StoreError>(row.into_info())
            }
        };
        let before = info(&hash).await?;
        if before.revoked_at.is_some() {
            return Ok(before);
        }
        let row = KeyRevocationRow { key_hash: hash.clone(), revoked_at: Micros::now().0 };
        self.insert::<KeyRevocationRow>("api_key_revocations", &[row]).await?;
        info(&hash).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::sql::check_placeholders;

    #[test]
    fn key_statements_bind_user_values() {
        let evil = "x'); DROP TABLE api_keys; --";
        for sql in [select_key(evil), key_infos(Some(evil)), keys_with_id(evil)] {
            assert!(!sql.text.contains("DROP"), "{}", sql.text);
            check_placeholders(&sql);
        }
    }
}
