//! A tenant's standing subscriptions (callbacks for all its jobs) and the secret every delivery
//! to the tenant is signed with.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{EventKind, Format};

/// Most subscriptions a tenant may keep (the default of `TUNEPLANE_SUBSCRIPTION_LIMIT`).
pub const DEFAULT_SUBSCRIPTION_LIMIT: usize = 10;
/// Most deliveries of one tenant waiting to succeed before new ones are given up (the default of
/// `TUNEPLANE_CALLBACK_MAX_OUTSTANDING`).
pub const DEFAULT_MAX_OUTSTANDING: usize = 1_000;

/// A tenant's subscription: every job's events of `events` go to `url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// `sub_` and 16 hex digits.
    pub id: String,
    /// The tenant it belongs to.
    pub tenant: crate::ids::TenantId,
    /// Where deliveries go (checked like a job's callback URL).
    pub url: String,
    /// The events it wants.
    pub events: Vec<EventKind>,
    /// The body's shape.
    #[serde(default)]
    pub format: Format,
    /// When it was made, Unix ms.
    pub created_ms: i64,
    /// The API key id that made it.
    pub created_by: String,
}

impl Subscription {
    /// The id of a subscription of `tenant` to `url` made at `at_ms` with `seed` (a random or
    /// request-unique value).
    pub fn new_id(tenant: &str, url: &str, at_ms: i64, seed: &str) -> String {
        let digest = Sha256::new()
            .chain_update(tenant.as_bytes())
            .chain_update([0])
            .chain_update(url.as_bytes())
            .chain_update([0])
            .chain_update(at_ms.to_be_bytes())
            .chain_update(seed.as_bytes())
            .finalize();
        format!("sub_{}", &hex::encode(digest)[..16])
    }
}

/// The secret a tenant's deliveries are signed with (HMAC-SHA256, the `t=…,v1=…` scheme of
/// inbound webhooks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackSecret {
    /// The tenant.
    pub tenant: crate::ids::TenantId,
    /// `whsec_` and 64 hex digits.
    pub secret: String,
    /// When it was made, Unix ms.
    pub created_ms: i64,
}

impl CallbackSecret {
    /// A secret of `tenant` from 32 random bytes.
    pub fn from_random(
        tenant: &crate::ids::TenantId,
        random: [u8; 32],
        now_ms: i64,
    ) -> CallbackSecret {
        CallbackSecret {
            tenant: tenant.to_owned(),
            secret: format!("whsec_{}", hex::encode(random)),
            created_ms: now_ms,
        }
    }
}
