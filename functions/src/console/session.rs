//! Console sessions and CSRF tokens, all derived from one server-side HMAC key.
//!
//! The session cookie never holds the API key itself: it holds the key's SHA-256 (the form the
//! store looks keys up by, and the key's identity), the key's session epoch, a random session id
//! and an expiry, signed with HMAC-SHA256. The hash is useless against `/v1` (which needs the
//! secret). Every request looks the key record up again: a revoked key, or a key whose epoch has
//! moved on (sign-out raises it in the store), ends the session at once, server-side, so a copied
//! cookie dies with its key and with sign-out.
//!
//! CSRF tokens are HMACs of the session id (or of a sign-in nonce kept in its own short-lived
//! cookie before a session exists): a page can only post a form it was served by this server.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "tp_session";
/// Name of the short-lived cookie that binds the sign-in form's CSRF token.
pub const SIGNIN_COOKIE: &str = "tp_signin";
/// Session lifetime, seconds.
pub const SESSION_TTL_SECONDS: i64 = 8 * 3600;
/// Lifetime of the sign-in nonce cookie, seconds.
pub const SIGNIN_TTL_SECONDS: i64 = 15 * 60;
/// Environment variable holding the console's signing secret (parsed with the rest of the
/// functions' [`Config`](crate::config::Config)).
pub use crate::config::ENV_CONSOLE_SECRET;

const VERSION: &str = "v2";

/// The HMAC key behind sessions and CSRF tokens.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

/// A verified session cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Random session id (hex), the anchor of the CSRF token.
    pub sid: String,
    /// SHA-256 (hex) of the API key the user signed in with.
    pub key_sha256: String,
    /// The key's session epoch when the session was issued; valid only while the stored key
    /// still has this epoch.
    pub epoch: u64,
    /// Expiry, Unix seconds.
    pub expires_at: i64,
}

impl SessionKey {
    /// A key derived from a configured secret (any length; hashed to 32 bytes).
    pub fn from_secret(secret: &[u8]) -> SessionKey {
        use sha2::Digest;
        let digest = Sha256::digest([b"tuneplane-console-v1\n".as_slice(), secret].concat());
        SessionKey(digest.into())
    }

    /// A fresh random key (sessions end when the process does).
    pub fn random() -> SessionKey {
        SessionKey(crate::random::random_bytes::<32>())
    }

    fn mac(&self, parts: &[&str]) -> Vec<u8> {
        // HMAC accepts keys of any length, so this cannot fail; fall back to an empty tag anyway.
        let Ok(mut mac) = HmacSha256::new_from_slice(&self.0) else {
            return Vec::new();
        };
        for p in parts {
            mac.update(p.as_bytes());
            mac.update(b"|");
        }
        mac.finalize().into_bytes().to_vec()
    }

    fn verify(&self, parts: &[&str], tag_hex: &str) -> bool {
        let Ok(tag) = hex::decode(tag_hex) else {
            return false;
        };
        let Ok(mut mac) = HmacSha256::new_from_slice(&self.0) else {
            return false;
        };
        for p in parts {
            mac.update(p.as_bytes());
            mac.update(b"|");
        }
        // Constant-time comparison.
        mac.verify_slice(&tag).is_ok()
    }

    /// The cookie value of a new session for `key_sha256` at session epoch `epoch`, valid until
    /// `now + SESSION_TTL_SECONDS`.
    pub fn issue(&self, key_sha256: &str, epoch: u64, now_s: i64) -> String {
        let sid = hex::encode(crate::random::random_bytes::<16>());
        let expires = now_s.saturating_add(SESSION_TTL_SECONDS).to_string();
        let epoch = epoch.to_string();
        let tag = hex::encode(self.mac(&["session", VERSION, &sid, key_sha256, &epoch, &expires]));
        format!("{VERSION}.{sid}.{key_sha256}.{epoch}.{expires}.{tag}")
    }

    /// Verifies a session cookie value; `None` when forged, malformed or expired at `now_s`.
    pub fn open(&self, value: &str, now_s: i64) -> Option<Session> {
        if value.len() > 256 {
            return None;
        }
        let mut it = value.split('.');
        let (v, sid, key, epoch, expires, tag) = (
            it.next()?,
            it.next()?,
            it.next()?,
            it.next()?,
            it.next()?,
            it.next()?,
        );
        if it.next().is_some() || v != VERSION || !is_hex(sid, 32) || !is_hex(key, 64) {
            return None;
        }
        if !self.verify(&["session", VERSION, sid, key, epoch, expires], tag) {
            return None;
        }
        let epoch: u64 = epoch.parse().ok()?;
        let expires_at: i64 = expires.parse().ok()?;
        (expires_at > now_s).then(|| Session {
            sid: sid.to_owned(),
            key_sha256: key.to_owned(),
            epoch,
            expires_at,
        })
    }

    /// The CSRF token of the forms of a session.
    pub fn csrf_token(&self, sid: &str) -> String {
        hex::encode(self.mac(&["csrf", sid]))
    }

    /// True if `token` is the CSRF token of session `sid`.
    pub fn check_csrf(&self, sid: &str, token: &str) -> bool {
        self.verify(&["csrf", sid], token)
    }

    /// A new sign-in nonce (the value of the sign-in cookie).
    pub fn signin_nonce(&self) -> String {
        hex::encode(crate::random::random_bytes::<16>())
    }

    /// The CSRF token of the sign-in form bound to `nonce`.
    pub fn signin_token(&self, nonce: &str) -> String {
        hex::encode(self.mac(&["signin", nonce]))
    }

    /// True if `token` belongs to the sign-in nonce `nonce`.
    pub fn check_signin_token(&self, nonce: &str, token: &str) -> bool {
        is_hex(nonce, 32) && self.verify(&["signin", nonce], token)
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The value of cookie `name` in a `Cookie` request header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// A `Set-Cookie` value: HttpOnly, Secure, SameSite=Strict, scoped to `path`. `max_age` 0 deletes.
///
/// `Secure` is always set: browsers treat `http://127.0.0.1` and `http://localhost` as
/// potentially trustworthy origins and keep Secure cookies there (`tuneplane dev`), and every
/// other deployment is HTTPS (API Gateway).
pub fn set_cookie(name: &str, value: &str, path: &str, max_age: i64) -> String {
    format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; Secure; SameSite=Strict")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_session_opens_until_it_expires() {
        let key = SessionKey::from_secret(b"test secret");
        let cookie = key.issue(&"ab".repeat(32), 3, 1_000);
        let s = key.open(&cookie, 1_001).expect("session");
        assert_eq!(
            (s.key_sha256.as_str(), s.epoch),
            ("ab".repeat(32).as_str(), 3)
        );
        assert!(key.open(&cookie, 1_000 + SESSION_TTL_SECONDS).is_none());
    }

    #[test]
    fn tampered_or_foreign_sessions_are_refused() {
        let key = SessionKey::from_secret(b"one");
        let cookie = key.issue(&"ab".repeat(32), 0, 0);
        let other = SessionKey::from_secret(b"two");
        assert!(other.open(&cookie, 1).is_none());
        let forged = cookie.replace(&"ab".repeat(32), &"cd".repeat(32));
        assert!(key.open(&forged, 1).is_none());
        let longer = cookie.replacen(".2", ".9", 1);
        assert!(longer == cookie || key.open(&longer, 1).is_none());
        assert!(key.open("garbage", 1).is_none());
        // Moving the session to a later epoch (to outlive a sign-out) breaks the tag.
        let moved = cookie.replacen(
            &format!("{}.0.", "ab".repeat(32)),
            &format!("{}.1.", "ab".repeat(32)),
            1,
        );
        assert_ne!(moved, cookie);
        assert!(key.open(&moved, 1).is_none());
        // A v1 cookie of the previous format is refused (its holder signs in again).
        assert!(key.open(&cookie.replacen("v2.", "v1.", 1), 1).is_none());
    }

    #[test]
    fn csrf_tokens_are_bound_to_their_session() {
        let key = SessionKey::random();
        let token = key.csrf_token(&"1".repeat(32));
        assert!(key.check_csrf(&"1".repeat(32), &token));
        assert!(!key.check_csrf(&"2".repeat(32), &token));
        assert!(!key.check_csrf(&"1".repeat(32), "zz"));
        let nonce = key.signin_nonce();
        assert!(key.check_signin_token(&nonce, &key.signin_token(&nonce)));
        assert!(!key.check_signin_token(&nonce, &token));
    }

    #[test]
    fn cookie_header_values_are_found_by_exact_name() {
        let h = "a=1; tp_session=v1.x; tp_session_old=2";
        assert_eq!(cookie(h, SESSION_COOKIE), Some("v1.x"));
        assert_eq!(cookie(h, "tp"), None);
    }
}
