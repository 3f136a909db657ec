//! API keys. Keys are random 256-bit secrets, so storing a plain SHA-256 of each is enough: a
//! slow password hash only helps against guessable secrets. Every request except `/health`
//! authenticates; a key is either the instance's admin key (any entity) or scoped to one entity.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use base64::Engine;
use heddle_proto::ProjectId;
use heddle_store::Store;
use sha2::{Digest, Sha256};

use crate::{ApiError, AppState};

/// Who a request acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Entity(String),
}

impl Principal {
    pub fn may_use_entity(&self, entity: &str) -> bool {
        match self {
            Principal::Admin => true,
            Principal::Entity(own) => own == entity,
        }
    }

    /// 403 unless this principal may touch `project`.
    pub fn check(&self, project: &ProjectId) -> Result<(), ApiError> {
        if self.may_use_entity(project.entity()) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!("this API key may not access project {project}")))
        }
    }

    /// The stable user id written into `wb_user_id`.
    pub fn user_id(&self) -> &str {
        match self {
            Principal::Admin => "admin",
            Principal::Entity(e) => e,
        }
    }
}

pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A fresh key: `hd_` and 64 hex characters (256 random bits).
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    format!("hd_{}", hex::encode(bytes))
}

/// The key from `Authorization: Basic base64(api:KEY)` (the SDK), `Authorization: Bearer KEY`,
/// or a `wandb-api-key` header (OTLP exporters).
pub fn key_from_headers(headers: &HeaderMap) -> Option<String> {
    if let Some(auth) = headers.get(axum::http::header::AUTHORIZATION) {
        let auth = auth.to_str().ok()?.trim();
        let (scheme, value) = auth.split_once(' ')?;
        let value = value.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            return Some(value.to_owned()).filter(|k| !k.is_empty());
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD.decode(value).ok()?;
            let pair = String::from_utf8(decoded).ok()?;
            let (_user, password) = pair.split_once(':')?;
            return Some(password.to_owned()).filter(|k| !k.is_empty());
        }
        return None;
    }
    let key = headers.get("wandb-api-key")?.to_str().ok()?.trim();
    Some(key.to_owned()).filter(|k| !k.is_empty())
}

pub struct Auth {
    store: Arc<dyn Store>,
    admin_hash: Option<String>,
    /// Keys are never revoked while a server runs, so known-good hashes can be cached.
    known: RwLock<HashMap<String, Principal>>,
}

impl Auth {
    pub fn new(store: Arc<dyn Store>, admin_key: Option<&str>) -> Auth {
        Auth { store, admin_hash: admin_key.map(hash_key), known: RwLock::default() }
    }

    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        let key = key_from_headers(headers).ok_or_else(|| {
            ApiError::Unauthorized(
                "missing API key: send Authorization: Basic base64(api:KEY) or Bearer KEY".into(),
            )
        })?;
        let hash = hash_key(&key);
        if self.admin_hash.as_deref() == Some(hash.as_str()) {
            return Ok(Principal::Admin);
        }
        if let Some(p) = self.known.read().expect("not poisoned").get(&hash) {
            return Ok(p.clone());
        }
        let found = self.store.lookup_key(&hash).await?;
        let principal = match found {
            None => return Err(ApiError::Unauthorized("invalid API key".into())),
            Some(rec) => rec.entity.map_or(Principal::Admin, Principal::Entity),
        };
        let mut known = self.known.write().expect("not poisoned");
        if known.len() > 10_000 {
            known.clear();
        }
        known.insert(hash, principal.clone());
        Ok(principal)
    }
}

impl FromRequestParts<Arc<AppState>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        state.auth.authenticate(&parts.headers).await
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use heddle_store::sqlite::{SqliteOptions, SqliteStore};

    use super::*;

    fn headers(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    fn basic(key: &str) -> String {
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("api:{key}")))
    }

    #[test]
    fn extracts_keys_from_every_scheme() {
        assert_eq!(
            key_from_headers(&headers("authorization", &basic("k1"))).as_deref(),
            Some("k1")
        );
        assert_eq!(key_from_headers(&headers("authorization", "Bearer k2")).as_deref(), Some("k2"));
        assert_eq!(key_from_headers(&headers("wandb-api-key", "k3")).as_deref(), Some("k3"));
        for bad in ["Basic !!!", "Bearer ", "Digest x", &basic("")] {
            assert_eq!(key_from_headers(&headers("authorization", bad)), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn admin_entity_and_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
        let alice = generate_key();
        store.create_key(&hash_key(&alice), Some("alice")).await.unwrap();
        let auth = Auth::new(store, Some("admin-secret"));

        let who = |k: &str| {
            let h = headers("authorization", &basic(k));
            let auth = &auth;
            async move { auth.authenticate(&h).await }
        };
        assert_eq!(who("admin-secret").await.unwrap(), Principal::Admin);
        let p = who(&alice).await.unwrap();
        assert_eq!(p, Principal::Entity("alice".into()));
        assert!(p.check(&ProjectId::parse("alice/x").unwrap()).is_ok());
        assert!(matches!(
            p.check(&ProjectId::parse("bob/x").unwrap()),
            Err(ApiError::Forbidden(_))
        ));
        assert!(matches!(who("nope").await, Err(ApiError::Unauthorized(_))));
        assert!(matches!(
            auth.authenticate(&HeaderMap::new()).await,
            Err(ApiError::Unauthorized(_))
        ));
    }
}
