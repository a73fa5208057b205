//! API keys: bearer secrets stored only as their SHA-256, each acting for one tenant with scopes.
//!
//! A secret looks like `tp_<40 hex>`; the prefix lets secret scanners recognise leaked keys.

use super::{Result, SubmitError};
use crate::store::{ApiKeyRecord, JobStore, hash_api_key};

/// Prefix of every API key secret.
pub const API_KEY_PREFIX: &str = "tp_";
/// Scope to read jobs, events, logs, capacity and playgrounds.
pub const SCOPE_JOBS_READ: &str = "jobs:read";
/// Scope to submit and stop jobs, create uploads and playgrounds.
pub const SCOPE_JOBS_WRITE: &str = "jobs:write";
/// Scope that implies every other scope.
pub const SCOPE_ADMIN: &str = "admin";

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Tenant the caller acts for.
    pub tenant: crate::ids::TenantId,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// Key label (for logs; never the secret).
    pub key_name: String,
    /// The key's id (`k-` and 16 hex digits of its hash), as the audit trail and
    /// `tuneplane admin keys list` name it.
    pub key_id: String,
}

impl Principal {
    /// Fails with [`SubmitError::Forbidden`] unless the caller holds `scope` (or `admin`).
    pub fn require(&self, scope: &str) -> Result<()> {
        if self.scopes.iter().any(|s| s == scope || s == SCOPE_ADMIN) {
            Ok(())
        } else {
            Err(SubmitError::Forbidden {
                scope: scope.to_owned(),
            })
        }
    }

    /// This caller as the actor of changes made through `source` in request `request_id`.
    pub fn actor(
        &self,
        source: crate::audit::AuditSource,
        request_id: &str,
    ) -> crate::audit::Actor {
        crate::audit::Actor {
            key_id: self.key_id.clone(),
            source,
            request_id: request_id.to_owned(),
        }
    }
}

/// Looks up the key of an `Authorization` header value (`Bearer <secret>`).
pub async fn authenticate(jobs: &dyn JobStore, authorization: Option<&str>) -> Result<Principal> {
    let secret = authorization
        .and_then(|h| {
            let (scheme, rest) = h.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .filter(|s| s.starts_with(API_KEY_PREFIX) && s.len() <= 200)
        .ok_or(SubmitError::Unauthenticated)?;
    let record = jobs
        .get_api_key(&hash_api_key(secret))
        .await?
        .ok_or(SubmitError::Unauthenticated)?;
    principal_of(record)
}

/// The principal of a stored key; a revoked key is [`SubmitError::Unauthenticated`], the same
/// answer as an unknown one (whether a key ever existed is not revealed).
pub fn principal_of(record: ApiKeyRecord) -> Result<Principal> {
    if !record.is_active() {
        return Err(SubmitError::Unauthenticated);
    }
    Ok(Principal {
        key_id: record.id(),
        tenant: record.tenant,
        scopes: record.scopes,
        key_name: record.name,
    })
}

/// A new key from 20 random bytes: the secret to hand out once, and the record to store.
pub fn new_api_key(
    random: [u8; 20],
    tenant: &crate::ids::TenantId,
    scopes: Vec<String>,
    name: &str,
    now_ms: i64,
) -> (String, ApiKeyRecord) {
    let secret = format!("{API_KEY_PREFIX}{}", hex::encode(random));
    let record = ApiKeyRecord {
        key_sha256: hash_api_key(&secret),
        tenant: tenant.to_owned(),
        scopes,
        name: name.to_owned(),
        created_at_ms: now_ms,
        revoked_at_ms: None,
        session_epoch: 0,
    };
    (secret, record)
}
