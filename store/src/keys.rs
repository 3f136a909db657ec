//! API keys: stored as SHA-256 hashes, never in clear; revoked, never deleted.

use async_trait::async_trait;
use heddle_proto::time::Micros;

use crate::{Result, StoreError};

/// Who an API key belongs to. `entity: None` is an admin key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub entity: Option<String>,
}

/// An API key as `heddle keys list` shows it: never the key, nor its full hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// [`key_id`] of the key's hash.
    pub id: String,
    /// `None` for an admin key.
    pub entity: Option<String>,
    pub created_at: Micros,
    /// When the key was first revoked; `None` while it works.
    pub revoked_at: Option<Micros>,
}

#[async_trait]
pub trait KeyStore: Send + Sync {
    async fn create_key(&self, key_hash: &str, entity: Option<&str>) -> Result<()>;

    /// Who the key with this hash belongs to; `None` when it is unknown or revoked.
    async fn lookup_key(&self, key_hash: &str) -> Result<Option<KeyRecord>>;

    /// Whether any unrevoked admin key exists (so `serve` knows whether to generate one).
    async fn has_admin_key(&self) -> Result<bool>;

    /// Every key, revoked ones too, oldest first.
    async fn list_keys(&self) -> Result<Vec<KeyInfo>>;

    /// Revokes the key with id `id` ([`key_id`]) and returns it. Idempotent: revoking a revoked
    /// key changes nothing and returns its first revocation time. [`StoreError::NotFound`] when
    /// no key has this id, [`StoreError::Invalid`] when `id` is not a key id.
    async fn revoke_key(&self, id: &str) -> Result<KeyInfo>;
}

/// Hex characters of a key's hash that make its id.
pub const KEY_ID_LEN: usize = 12;

/// A key's stable, non-secret id: the first [`KEY_ID_LEN`] hex characters of its SHA-256 hash.
/// Keys are 256-bit random secrets, so this much of their hash tells nothing about them, and 48
/// bits keep the ids of even many thousands of keys apart (a clash is refused on revocation).
pub fn key_id(key_hash: &str) -> &str {
    &key_hash[..KEY_ID_LEN.min(key_hash.len())]
}

/// `id` if it has the shape of a key id (any case; returned in lowercase), else
/// [`StoreError::Invalid`].
pub fn parse_key_id(id: &str) -> Result<String> {
    if id.len() == KEY_ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id.to_ascii_lowercase())
    } else {
        Err(StoreError::Invalid(format!(
            "{id:?} is not an API key id ({KEY_ID_LEN} hex characters, as `heddle keys list` shows)"
        )))
    }
}

/// The one key among `hashes` (those starting with `id`) that a revocation of `id` means.
#[cfg_attr(not(any(feature = "sqlite", feature = "clickhouse")), allow(dead_code))]
pub(crate) fn only_key(id: &str, hashes: &[String]) -> Result<String> {
    match hashes {
        [one] => Ok(one.clone()),
        [] => Err(StoreError::NotFound(format!("no API key with id {id}"))),
        _ => Err(StoreError::Invalid(format!(
            "API key id {id} names {} keys; none was revoked",
            hashes.len()
        ))),
    }
}
