//! Stateless sessions (docs/ui.md, "Sessions"). The cookie holds a random nonce, an expiry and
//! the API key's SHA-256 hash encrypted with a pad derived from the server secret and the nonce,
//! all authenticated with HMAC-SHA256 under the same secret. Neither the key nor its hash is
//! readable from the cookie, and nothing is kept on the server, so every query replica that
//! shares the secret accepts the session. Each request still asks the key store (through the
//! API's key cache), so a revoked key's sessions end within the cache's TTL.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The session cookie's name.
pub const COOKIE: &str = "heddle_session";

/// How long a session lasts after signing in.
pub const SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

const VERSION: u8 = 1;
const NONCE_LEN: usize = 16;
const HASH_LEN: usize = 32;
const MAC_LEN: usize = 32;
const COOKIE_LEN: usize = 1 + NONCE_LEN + 8 + HASH_LEN + MAC_LEN;

/// The server secret that signs sessions; replicas serving the same users must share it.
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the UI secret must be at least 32 characters long")]
    TooShort,
    #[error("reading or writing the UI secret file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Secret {
    /// A secret from configuration text (`--ui-secret`): any string of at least 32 characters,
    /// stretched to a key with SHA-256.
    pub fn from_text(text: &str) -> Result<Secret, SecretError> {
        if text.trim().len() < 32 {
            return Err(SecretError::TooShort);
        }
        Ok(Secret(sha256(text.trim().as_bytes())))
    }

    /// A fresh random secret (sessions then end when the process does).
    pub fn random() -> Secret {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random source is available");
        Secret(bytes)
    }

    /// The secret kept in `path`, created (readable by the owner only) on first use: the
    /// embedded server's sessions then survive restarts without any configuration.
    pub fn load_or_create(path: &Path) -> Result<Secret, SecretError> {
        let io = |source| SecretError::Io { path: path.display().to_string(), source };
        match std::fs::read_to_string(path) {
            Ok(text) => return Secret::from_text(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random source is available");
        let text = hex::encode(bytes);
        write_private(path, &text).map_err(io)?;
        Secret::from_text(&text)
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length")
    }

    fn prf(&self, label: &[u8], data: &[&[u8]]) -> [u8; 32] {
        let mut m = self.mac();
        m.update(label);
        for d in data {
            m.update(d);
        }
        m.finalize().into_bytes().into()
    }

    /// A new session cookie value for the key with `key_hash` (hex SHA-256, as the key store
    /// keeps it), valid until `now + SESSION_TTL`.
    pub fn issue(&self, key_hash: &str, now: SystemTime) -> Option<String> {
        let hash: [u8; HASH_LEN] = hex::decode(key_hash).ok()?.try_into().ok()?;
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).expect("the OS random source is available");
        let expiry = unix_secs(now) + SESSION_TTL.as_secs();
        let pad = self.prf(b"heddle-session-pad", &[&nonce]);
        let mut out = Vec::with_capacity(COOKIE_LEN);
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&expiry.to_be_bytes());
        out.extend(hash.iter().zip(pad).map(|(h, p)| h ^ p));
        let tag = self.prf(b"heddle-session-mac", &[&out]);
        out.extend_from_slice(&tag);
        Some(URL_SAFE_NO_PAD.encode(out))
    }

    /// The session in a cookie value, if it is authentic and unexpired at `now`.
    pub fn open(&self, cookie: &str, now: SystemTime) -> Option<Session> {
        let raw = URL_SAFE_NO_PAD.decode(cookie.as_bytes()).ok()?;
        if raw.len() != COOKIE_LEN || raw[0] != VERSION {
            return None;
        }
        let (body, tag) = raw.split_at(COOKIE_LEN - MAC_LEN);
        let mut m = self.mac();
        m.update(b"heddle-session-mac");
        m.update(body);
        m.verify_slice(tag).ok()?; // constant time
        let nonce: [u8; NONCE_LEN] = body[1..1 + NONCE_LEN].try_into().ok()?;
        let expiry = u64::from_be_bytes(body[1 + NONCE_LEN..1 + NONCE_LEN + 8].try_into().ok()?);
        if unix_secs(now) >= expiry {
            return None;
        }
        let pad = self.prf(b"heddle-session-pad", &[&nonce]);
        let hash: Vec<u8> = body[1 + NONCE_LEN + 8..].iter().zip(pad).map(|(c, p)| c ^ p).collect();
        let csrf = hex::encode(&self.prf(b"heddle-session-csrf", &[&nonce])[..16]);
        Some(Session { key_hash: hex::encode(hash), csrf })
    }
}

/// An authentic, unexpired session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The hex SHA-256 of the API key that signed in.
    pub key_hash: String,
    /// The session's CSRF token: forms that change state must carry it.
    pub csrf: String,
}

fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    Sha256::digest(data).into()
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(unix)]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

/// `Set-Cookie` for a new session.
pub fn set_cookie(value: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
        SESSION_TTL.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// `Set-Cookie` that ends the session in the browser.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The session cookie's value among a request's `Cookie` headers.
pub fn cookie_value(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";

    #[test]
    fn a_session_opens_with_its_secret_only_until_it_expires() {
        let s = Secret::random();
        let now = SystemTime::now();
        let cookie = s.issue(HASH, now).unwrap();
        let session = s.open(&cookie, now).unwrap();
        assert_eq!(session.key_hash, HASH);
        assert!(!cookie.contains(HASH), "the hash travels encrypted");
        assert!(Secret::random().open(&cookie, now).is_none(), "another secret");
        assert!(s.open(&cookie, now + SESSION_TTL).is_none(), "expired");
        // Two sessions of one key have different cookies and CSRF tokens.
        let other = s.open(&s.issue(HASH, now).unwrap(), now).unwrap();
        assert_ne!(other.csrf, session.csrf);
    }

    #[test]
    fn tampered_cookies_are_refused() {
        let s = Secret::random();
        let now = SystemTime::now();
        let cookie = s.issue(HASH, now).unwrap();
        let mut raw = URL_SAFE_NO_PAD.decode(&cookie).unwrap();
        for i in [0, 1, 20, 30, raw.len() - 1] {
            raw[i] ^= 1;
            assert!(s.open(&URL_SAFE_NO_PAD.encode(&raw), now).is_none(), "byte {i}");
            raw[i] ^= 1;
        }
        for bad in ["", "x", "!!!", &cookie[..cookie.len() - 2]] {
            assert!(s.open(bad, now).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn secrets_from_text_and_files() {
        assert!(matches!(Secret::from_text("short"), Err(SecretError::TooShort)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ui-secret");
        let a = Secret::load_or_create(&path).unwrap();
        let b = Secret::load_or_create(&path).unwrap();
        let now = SystemTime::now();
        assert!(b.open(&a.issue(HASH, now).unwrap(), now).is_some(), "the same secret again");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn cookie_header_parsing() {
        let mut h = axum::http::HeaderMap::new();
        h.append("cookie", "a=1; heddle_session=abc; b=2".parse().unwrap());
        assert_eq!(cookie_value(&h), Some("abc"));
        assert!(set_cookie("v", true).contains("; Secure"));
        assert!(set_cookie("v", false).contains("HttpOnly; SameSite=Lax"));
    }
}
