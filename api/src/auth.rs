//! API keys. Keys are random 256-bit secrets, so storing a plain SHA-256 of each is enough: a
//! slow password hash only helps against guessable secrets. Every request except `/health`
//! authenticates; a key is either the instance's admin key (any entity) or scoped to one entity.
//! Keys of the store can be revoked while servers run: each process trusts the store's answer
//! about a key for [`KEY_CACHE_TTL`] only.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use base64::Engine;
use heddle_proto::ProjectId;
use heddle_store::{KeyRecord, Store, StoreError};
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

/// How long a key the store confirmed is trusted without asking the store again. Within it a
/// hot key costs no store read; past it the next request asks again, so a key revoked with
/// `heddle keys revoke` stops working on every running process (each has its own cache) within
/// this time, without a restart.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);

/// When the store cannot answer (ClickHouse briefly unreachable, say), a key it confirmed within
/// this long is still accepted, so the ingest role keeps taking writes into Kafka through a
/// short store outage. A revocation takes effect once the store answers again.
pub const KEY_STALE_IF_ERROR: Duration = Duration::from_secs(300);

/// Most keys one process caches. Only keys the store confirmed are cached (an unknown key is
/// looked up every time and never remembered), so only real keys fill it. When full, entries
/// older than [`KEY_STALE_IF_ERROR`] are dropped, and all of them if that frees nothing.
pub const KEY_CACHE_MAX: usize = 10_000;

/// The limits of a [`KeyCache`]; [`Default`] is the documented constants.
#[derive(Debug, Clone, Copy)]
pub struct CachePolicy {
    pub ttl: Duration,
    pub stale_if_error: Duration,
    pub max_entries: usize,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            ttl: KEY_CACHE_TTL,
            stale_if_error: KEY_STALE_IF_ERROR,
            max_entries: KEY_CACHE_MAX,
        }
    }
}

#[derive(Clone)]
struct Cached {
    principal: Principal,
    /// When the store last confirmed the key.
    checked: Instant,
    /// Until when the entry is used without asking the store: `checked` + TTL, or, after a
    /// failed lookup, the failure + TTL (so a store outage costs one lookup per key and TTL).
    fresh_until: Instant,
}

/// The store's recent answers about key hashes (positive ones only).
struct KeyCache {
    policy: CachePolicy,
    entries: RwLock<HashMap<String, Cached>>,
}

impl KeyCache {
    fn new(policy: CachePolicy) -> KeyCache {
        KeyCache { policy, entries: RwLock::default() }
    }

    /// Who the key with `hash` belongs to at `now`, asking `lookup` (the store) unless the cache
    /// holds a fresh answer; `None` for an unknown or revoked key.
    async fn principal<F, Fut>(
        &self,
        hash: &str,
        now: Instant,
        lookup: F,
    ) -> Result<Option<Principal>, StoreError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<KeyRecord>, StoreError>>,
    {
        let cached = self.entries.read().expect("not poisoned").get(hash).cloned();
        if let Some(c) = &cached
            && now < c.fresh_until
        {
            return Ok(Some(c.principal.clone()));
        }
        match lookup().await {
            Ok(Some(rec)) => {
                let principal = rec.entity.map_or(Principal::Admin, Principal::Entity);
                self.remember(hash, principal.clone(), now);
                Ok(Some(principal))
            }
            Ok(None) => {
                self.entries.write().expect("not poisoned").remove(hash);
                Ok(None)
            }
            Err(e) => match cached {
                Some(c)
                    if now.saturating_duration_since(c.checked) < self.policy.stale_if_error =>
                {
                    tracing::warn!(error = %e, "key lookup failed; trusting the cached answer");
                    let retry = Cached { fresh_until: now + self.policy.ttl, ..c.clone() };
                    self.entries.write().expect("not poisoned").insert(hash.to_owned(), retry);
                    Ok(Some(c.principal))
                }
                _ => Err(e),
            },
        }
    }

    fn remember(&self, hash: &str, principal: Principal, now: Instant) {
        let mut entries = self.entries.write().expect("not poisoned");
        if entries.len() >= self.policy.max_entries && !entries.contains_key(hash) {
            let stale = self.policy.stale_if_error;
            entries.retain(|_, c| now.saturating_duration_since(c.checked) < stale);
            if entries.len() >= self.policy.max_entries {
                entries.clear();
            }
        }
        let fresh_until = now + self.policy.ttl;
        entries.insert(hash.to_owned(), Cached { principal, checked: now, fresh_until });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.read().expect("not poisoned").len()
    }
}

/// Authenticates requests: the `--api-key` admin key (compared in memory, so it cannot be
/// revoked from the store), else a key of the store, through a [`KeyCache`].
pub struct Auth {
    store: Arc<dyn Store>,
    admin_hash: Option<String>,
    keys: KeyCache,
}

impl Auth {
    pub fn new(store: Arc<dyn Store>, admin_key: Option<&str>) -> Auth {
        Auth::with_policy(store, admin_key, CachePolicy::default())
    }

    pub fn with_policy(
        store: Arc<dyn Store>,
        admin_key: Option<&str>,
        policy: CachePolicy,
    ) -> Auth {
        Auth { store, admin_hash: admin_key.map(hash_key), keys: KeyCache::new(policy) }
    }

    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        let key = key_from_headers(headers).ok_or_else(|| {
            ApiError::Unauthorized(
                "missing API key: send Authorization: Basic base64(api:KEY) or Bearer KEY".into(),
            )
        })?;
        self.authenticate_hash(&hash_key(&key)).await
    }

    /// Who the key with this [`hash_key`] hash belongs to, with the same cache and revocation
    /// rules as [`Auth::authenticate`]: the web UI's sessions hold a key's hash, not the key.
    pub async fn authenticate_hash(&self, hash: &str) -> Result<Principal, ApiError> {
        if self.admin_hash.as_deref() == Some(hash) {
            return Ok(Principal::Admin);
        }
        let lookup = || self.store.lookup_key(hash);
        match self.keys.principal(hash, Instant::now(), lookup).await? {
            Some(principal) => Ok(principal),
            None => Err(ApiError::Unauthorized("invalid or revoked API key".into())),
        }
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    #[tokio::test]
    async fn revoked_keys_stop_working_once_their_cache_entry_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path(), SqliteOptions::default()).unwrap());
        let (alice, bob) = (generate_key(), generate_key());
        store.create_key(&hash_key(&alice), Some("alice")).await.unwrap();
        store.create_key(&hash_key(&bob), Some("bob")).await.unwrap();
        let hour = CachePolicy { ttl: Duration::from_secs(3600), ..CachePolicy::default() };
        let cached = Auth::with_policy(store.clone(), Some("admin-secret"), hour);
        let uncached = Auth::with_policy(
            store.clone(),
            Some("admin-secret"),
            CachePolicy { ttl: Duration::ZERO, ..CachePolicy::default() },
        );
        async fn who(auth: &Auth, k: &str) -> Result<Principal, ApiError> {
            auth.authenticate(&headers("authorization", &basic(k))).await
        }
        for auth in [&cached, &uncached] {
            assert_eq!(who(auth, &alice).await.unwrap(), Principal::Entity("alice".into()));
        }

        let id = heddle_store::key_id(&hash_key(&alice)).to_owned();
        store.revoke_key(&id).await.unwrap();
        // Within its TTL the cached answer stands (no store read); past it the key is refused.
        assert_eq!(who(&cached, &alice).await.unwrap(), Principal::Entity("alice".into()));
        assert!(matches!(who(&uncached, &alice).await, Err(ApiError::Unauthorized(_))));
        assert_eq!(who(&uncached, &bob).await.unwrap(), Principal::Entity("bob".into()));
        // The command-line admin key is not in the store: nothing revokes it.
        assert_eq!(who(&uncached, "admin-secret").await.unwrap(), Principal::Admin);
    }

    /// A lookup answering `answer`, counting its calls in `n`.
    fn lookup<'a>(
        n: &'a AtomicUsize,
        answer: Result<Option<&'a str>, ()>,
    ) -> impl FnOnce() -> std::future::Ready<Result<Option<KeyRecord>, StoreError>> + 'a {
        move || {
            n.fetch_add(1, Ordering::SeqCst);
            std::future::ready(match answer {
                Ok(entity) => Ok(entity.map(|e| KeyRecord { entity: Some(e.to_owned()) })),
                Err(()) => Err(StoreError::Backend("injected".into())),
            })
        }
    }

    #[tokio::test]
    async fn the_cache_asks_the_store_once_per_ttl() {
        let policy = CachePolicy::default();
        let cache = KeyCache::new(policy);
        let (t0, n) = (Instant::now(), AtomicUsize::new(0));
        let alice = Some(Principal::Entity("alice".into()));
        let at = |d: Duration| t0 + d;
        assert_eq!(cache.principal("h", t0, lookup(&n, Ok(Some("alice")))).await.unwrap(), alice);
        let almost = at(policy.ttl - Duration::from_millis(1));
        assert_eq!(cache.principal("h", almost, lookup(&n, Ok(None))).await.unwrap(), alice);
        assert_eq!(n.load(Ordering::SeqCst), 1, "a fresh entry needs no lookup");

        // Past the TTL the store is asked again; a revoked key is forgotten.
        let later = at(policy.ttl);
        assert_eq!(cache.principal("h", later, lookup(&n, Ok(None))).await.unwrap(), None);
        assert_eq!((n.load(Ordering::SeqCst), cache.len()), (2, 0));
        assert_eq!(cache.principal("h", later, lookup(&n, Ok(None))).await.unwrap(), None);
        assert_eq!(n.load(Ordering::SeqCst), 3, "unknown keys are asked about every time");
    }

    #[tokio::test]
    async fn a_failing_store_keeps_recent_keys_working_for_a_while() {
        let policy = CachePolicy::default();
        let cache = KeyCache::new(policy);
        let (t0, n) = (Instant::now(), AtomicUsize::new(0));
        let alice = Some(Principal::Entity("alice".into()));
        cache.principal("h", t0, lookup(&n, Ok(Some("alice")))).await.unwrap();
        let stale = t0 + policy.ttl;
        assert_eq!(cache.principal("h", stale, lookup(&n, Err(()))).await.unwrap(), alice);
        // The failure is not retried for a TTL: an outage costs one lookup per key and TTL.
        let soon = stale + policy.ttl - Duration::from_millis(1);
        assert_eq!(cache.principal("h", soon, lookup(&n, Err(()))).await.unwrap(), alice);
        assert_eq!(n.load(Ordering::SeqCst), 2);
        let too_old = t0 + policy.stale_if_error;
        assert!(matches!(
            cache.principal("h", too_old, lookup(&n, Err(()))).await,
            Err(StoreError::Backend(_))
        ));
        // A key never confirmed gets the store's error.
        assert!(cache.principal("other", t0, lookup(&n, Err(()))).await.is_err());
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let policy = CachePolicy { max_entries: 3, ..CachePolicy::default() };
        let cache = KeyCache::new(policy);
        let (t0, n) = (Instant::now(), AtomicUsize::new(0));
        for i in 0..100 {
            // Unknown keys (what an attacker can send freely) are never cached.
            cache.principal(&format!("bad{i}"), t0, lookup(&n, Ok(None))).await.unwrap();
        }
        assert_eq!(cache.len(), 0);
        for i in 0..3 {
            cache.principal(&format!("old{i}"), t0, lookup(&n, Ok(Some("e")))).await.unwrap();
        }
        // Full: entries too old to be of use even on a store error go first...
        let later = t0 + policy.stale_if_error;
        cache.principal("new0", later, lookup(&n, Ok(Some("e")))).await.unwrap();
        assert_eq!(cache.len(), 1);
        // ...and when none is that old, all of them.
        for i in 1..4 {
            cache.principal(&format!("new{i}"), later, lookup(&n, Ok(Some("e")))).await.unwrap();
        }
        assert_eq!(cache.len(), 1);
        assert!(cache.entries.read().unwrap().contains_key("new3"));
    }
}
