//! API keys on SQLite: `api_keys`, a revocation time per key.

use async_trait::async_trait;
use heddle_proto::time::Micros;
use rusqlite::{OptionalExtension, Row, params};

use super::SqliteStore;
use super::writer::backend;
use crate::keys::{key_id, only_key, parse_key_id};
use crate::{KeyInfo, KeyRecord, KeyStore, Result};

const INSERT_KEY: &str = "INSERT INTO api_keys (key_hash, entity, created_at) VALUES (?1, ?2, ?3)";
const SELECT_KEY: &str = "SELECT entity FROM api_keys WHERE key_hash = ?1 AND revoked_at IS NULL";
const ANY_ADMIN_KEY: &str =
    "SELECT EXISTS (SELECT 1 FROM api_keys WHERE entity IS NULL AND revoked_at IS NULL)";
/// What `keys list` shows of every key (`key_info` reads the row).
const LIST_KEYS: &str = "SELECT key_hash, entity, created_at, revoked_at FROM api_keys
ORDER BY created_at, key_hash";
const KEY_INFO: &str =
    "SELECT key_hash, entity, created_at, revoked_at FROM api_keys WHERE key_hash = ?1";
/// The hashes a key id (their prefix) names.
const KEYS_WITH_ID: &str =
    "SELECT key_hash FROM api_keys WHERE substr(key_hash, 1, length(?1)) = ?1";
/// Keeps the first revocation time of a key revoked again.
const REVOKE_KEY: &str =
    "UPDATE api_keys SET revoked_at = ?2 WHERE key_hash = ?1 AND revoked_at IS NULL";

/// A row of `LIST_KEYS` or `KEY_INFO`.
fn key_info(r: &Row<'_>) -> rusqlite::Result<KeyInfo> {
    let hash: String = r.get(0)?;
    Ok(KeyInfo {
        id: key_id(&hash).to_owned(),
        entity: r.get(1)?,
        created_at: Micros(r.get(2)?),
        revoked_at: r.get::<_, Option<i64>>(3)?.map(Micros),
    })
}

#[async_trait]
impl KeyStore for SqliteStore {
    async fn create_key(&self, key_hash: &str, entity: Option<&str>) -> Result<()> {
        let (hash, entity) = (key_hash.to_owned(), entity.map(str::to_owned));
        self.writer
            .exec(move |conn| {
                conn.execute(INSERT_KEY, params![hash, entity, Micros::now().0])
                    .map_err(backend)?;
                Ok(())
            })
            .await
    }

    async fn lookup_key(&self, key_hash: &str) -> Result<Option<KeyRecord>> {
        let hash = key_hash.to_owned();
        self.read(move |conn| {
            conn.query_row(SELECT_KEY, params![hash], |r| r.get::<_, Option<String>>(0))
                .optional()
                .map(|found| found.map(|entity| KeyRecord { entity }))
                .map_err(backend)
        })
        .await
    }

    async fn has_admin_key(&self) -> Result<bool> {
        self.read(|conn| conn.query_row(ANY_ADMIN_KEY, [], |r| r.get(0)).map_err(backend)).await
    }

    async fn list_keys(&self) -> Result<Vec<KeyInfo>> {
        self.read(|conn| {
            conn.prepare(LIST_KEYS)
                .and_then(|mut stmt| stmt.query_map([], key_info)?.collect())
                .map_err(backend)
        })
        .await
    }

    async fn revoke_key(&self, id: &str) -> Result<KeyInfo> {
        let id = parse_key_id(id)?;
        // One writer job: the lookup and the update commit together.
        self.writer
            .exec(move |conn| {
                let hashes: Vec<String> = conn
                    .prepare(KEYS_WITH_ID)
                    .and_then(|mut stmt| stmt.query_map([&id], |r| r.get(0))?.collect())
                    .map_err(backend)?;
                let hash = only_key(&id, &hashes)?;
                conn.execute(REVOKE_KEY, params![hash, Micros::now().0]).map_err(backend)?;
                conn.query_row(KEY_INFO, [&hash], key_info).map_err(backend)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SqliteOptions, migrations};
    use super::*;
    use crate::StoreError;

    #[tokio::test]
    async fn keys_are_listed_and_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let (admin, alice, bob) = ("a0".repeat(32), "b1".repeat(32), "c2".repeat(32));
        {
            // A key stored before keys could be revoked keeps working after the upgrade.
            let conn = migrations::database_at(dir.path(), 6);
            conn.execute(INSERT_KEY, params![admin, None::<String>, 1]).unwrap();
        }
        let store = SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap();
        store.create_key(&alice, Some("alice")).await.unwrap();
        store.create_key(&bob, Some("bob")).await.unwrap();
        assert!(store.has_admin_key().await.unwrap());

        let listed = store.list_keys().await.unwrap();
        let ids: Vec<(&str, Option<&str>)> =
            listed.iter().map(|k| (k.id.as_str(), k.entity.as_deref())).collect();
        assert_eq!(
            ids,
            [
                ("a0a0a0a0a0a0", None),
                ("b1b1b1b1b1b1", Some("alice")),
                ("c2c2c2c2c2c2", Some("bob"))
            ]
        );
        assert!(listed.iter().all(|k| k.revoked_at.is_none() && k.created_at.0 > 0));

        let revoked = store.revoke_key("B1B1B1B1B1B1").await.unwrap();
        assert_eq!(revoked.entity.as_deref(), Some("alice"));
        let at = revoked.revoked_at.expect("revoked");
        assert_eq!(store.lookup_key(&alice).await.unwrap(), None);
        assert_eq!(
            store.lookup_key(&bob).await.unwrap(),
            Some(KeyRecord { entity: Some("bob".into()) })
        );
        // Again: nothing changes, the first revocation time stays.
        assert_eq!(store.revoke_key("b1b1b1b1b1b1").await.unwrap().revoked_at, Some(at));
        let listed = store.list_keys().await.unwrap();
        assert_eq!(listed[1].revoked_at, Some(at));
        assert_eq!((listed[0].revoked_at, listed[2].revoked_at), (None, None));

        // Revoking the only admin key leaves none: the next `serve` generates a new one.
        store.revoke_key("a0a0a0a0a0a0").await.unwrap();
        assert!(!store.has_admin_key().await.unwrap());
        assert_eq!(store.lookup_key(&admin).await.unwrap(), None);

        assert!(matches!(store.revoke_key("d3d3d3d3d3d3").await, Err(StoreError::NotFound(_))));
        for bad in ["b1b1", "b1b1b1b1b1b1b1", "b1b1b1b1b1bx", "%"] {
            assert!(matches!(store.revoke_key(bad).await, Err(StoreError::Invalid(_))), "{bad}");
        }
        assert_eq!(store.lookup_key(&bob).await.unwrap().unwrap().entity.as_deref(), Some("bob"));
    }
}
