//! The audit trail: every change a person (or their schedule, webhook or inbox) makes, appended
//! once to the job store and never edited. The product has no way to change or delete an entry:
//! the store offers append and list only.
//!
//! An entry's id is a digest of what makes the change one change (tenant, action, target and
//! the request that made it), so a retried request stores its entry once: stores append with
//! put-if-absent on the id. A submission's entry is written in the same write as the job.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Where a change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditSource {
    /// The HTTPS API with an API key.
    Api,
    /// The web console (a session of an API key).
    Console,
    /// A signed inbound webhook.
    Webhook,
    /// A schedule firing.
    Schedule,
    /// An archive dropped in the bucket's inbox.
    Inbox,
    /// An EventBridge submission event.
    Event,
    /// `tuneplane admin ...` on an operator's machine.
    AdminCli,
    /// The reconciler itself (a preemption).
    Reconciler,
}

impl AuditSource {
    /// Every source, in the order `--source` help and docs list them.
    pub const ALL: [AuditSource; 8] = [
        AuditSource::Api,
        AuditSource::Console,
        AuditSource::Webhook,
        AuditSource::Schedule,
        AuditSource::Inbox,
        AuditSource::Event,
        AuditSource::AdminCli,
        AuditSource::Reconciler,
    ];

    /// The name stored and printed (`api`, `admin_cli`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditSource::Api => "api",
            AuditSource::Console => "console",
            AuditSource::Webhook => "webhook",
            AuditSource::Schedule => "schedule",
            AuditSource::Inbox => "inbox",
            AuditSource::Event => "event",
            AuditSource::AdminCli => "admin_cli",
            AuditSource::Reconciler => "reconciler",
        }
    }
}

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuditAction {
    /// A job was submitted (created; an idempotent repeat changes nothing).
    #[serde(rename = "job.submit")]
    JobSubmit,
    /// A job's stop was requested.
    #[serde(rename = "job.stop")]
    JobStop,
    /// A running job was preempted (its attempt stopped and queued again) by the platform.
    #[serde(rename = "job.preempt")]
    JobPreempt,
    /// A playground was created.
    #[serde(rename = "playground.create")]
    PlaygroundCreate,
    /// A playground was deleted.
    #[serde(rename = "playground.delete")]
    PlaygroundDelete,
    /// A tenant's quota or fair-share weight was set.
    #[serde(rename = "quota.set")]
    QuotaSet,
    /// A tenant's quota was removed (or one of its series).
    #[serde(rename = "quota.unset")]
    QuotaUnset,
    /// An API key was created.
    #[serde(rename = "key.create")]
    KeyCreate,
    /// An API key was revoked.
    #[serde(rename = "key.revoke")]
    KeyRevoke,
    /// An API key was rotated (a new key created, the old one revoked).
    #[serde(rename = "key.rotate")]
    KeyRotate,
    /// A callback subscription was created.
    #[serde(rename = "subscription.create")]
    SubscriptionCreate,
    /// A callback subscription was deleted.
    #[serde(rename = "subscription.delete")]
    SubscriptionDelete,
    /// The tenant's callback signing secret was replaced.
    #[serde(rename = "subscription.secret_rotate")]
    CallbackSecretRotate,
}

impl AuditAction {
    /// The name stored and printed (`job.submit`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::JobSubmit => "job.submit",
            AuditAction::JobStop => "job.stop",
            AuditAction::JobPreempt => "job.preempt",
            AuditAction::PlaygroundCreate => "playground.create",
            AuditAction::PlaygroundDelete => "playground.delete",
            AuditAction::QuotaSet => "quota.set",
            AuditAction::QuotaUnset => "quota.unset",
            AuditAction::KeyCreate => "key.create",
            AuditAction::KeyRevoke => "key.revoke",
            AuditAction::KeyRotate => "key.rotate",
            AuditAction::SubscriptionCreate => "subscription.create",
            AuditAction::SubscriptionDelete => "subscription.delete",
            AuditAction::CallbackSecretRotate => "subscription.secret_rotate",
        }
    }
}

/// Who made a change and through which door: the part of an entry every change of one request
/// shares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The API key's id (`k-` and 16 hex digits) for the API and the console; the schedule,
    /// webhook source or inbox object for triggers; the operator's user for the admin CLI.
    pub key_id: String,
    /// Where the change came from.
    pub source: AuditSource,
    /// The request id (the API's `x-request-id`; a trigger's event id; a fresh id per admin
    /// command).
    pub request_id: String,
}

/// One change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Stable id (see the module docs): 24 hex digits.
    pub id: String,
    /// When the change was made (ms since the epoch).
    pub at_ms: i64,
    /// The tenant whose job, playground, quota or key changed.
    pub tenant: crate::ids::TenantId,
    /// Who made it.
    pub actor: Actor,
    /// What changed.
    pub action: AuditAction,
    /// The job, playground, key or tenant the change is about.
    pub target: String,
    /// The change itself (a quota's new limits, a key's scopes, a job's capsule...).
    #[serde(default)]
    pub change: serde_json::Value,
}

impl AuditEntry {
    /// The entry of `action` on `target` of `tenant`, made by `actor` at `at_ms`.
    pub fn new(
        actor: &Actor,
        tenant: &crate::ids::TenantId,
        action: AuditAction,
        target: &str,
        change: serde_json::Value,
        at_ms: i64,
    ) -> AuditEntry {
        AuditEntry {
            id: entry_id(tenant, action, target, &actor.request_id),
            at_ms,
            tenant: tenant.to_owned(),
            actor: actor.clone(),
            action,
            target: target.to_owned(),
            change,
        }
    }

    /// Sort key of listings: oldest first, ties by id.
    pub fn sort_key(&self) -> (i64, &str) {
        (self.at_ms, &self.id)
    }
}

/// The id of a change: a digest of tenant, action, target and request id.
pub fn entry_id(tenant: &str, action: AuditAction, target: &str, request_id: &str) -> String {
    let mut h = Sha256::new();
    for part in [tenant, action.as_str(), target, request_id] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..12])
}

/// Which entries a listing returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this tenant's (all tenants when `None`: operators only).
    pub tenant: Option<crate::ids::TenantId>,
    /// Made at or after this time (ms).
    pub since_ms: Option<i64>,
    /// Made before this time (ms).
    pub until_ms: Option<i64>,
    /// At most this many, the newest kept when there are more (0: the default of 1,000).
    pub limit: usize,
}

/// The default and the largest number of entries of one listing.
pub const AUDIT_LIST_LIMIT: usize = 1_000;

impl AuditQuery {
    /// True if `entry` is in the listing's window and tenant.
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == entry.tenant)
            && self.since_ms.is_none_or(|s| entry.at_ms >= s)
            && self.until_ms.is_none_or(|u| entry.at_ms < u)
    }

    /// The listing's result from every matching entry (any order): oldest first, at most
    /// `limit`, the newest kept.
    pub fn finish(&self, mut entries: Vec<AuditEntry>) -> Vec<AuditEntry> {
        entries.retain(|e| self.matches(e));
        entries.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        let limit = match self.limit {
            0 => AUDIT_LIST_LIMIT,
            n => n.min(AUDIT_LIST_LIMIT),
        };
        let skip = entries.len().saturating_sub(limit);
        entries.drain(..skip);
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(request: &str) -> Actor {
        Actor {
            key_id: "k-0123456789abcdef".into(),
            source: AuditSource::Api,
            request_id: request.into(),
        }
    }

    #[test]
    fn the_same_change_of_one_request_has_one_id_and_any_other_another() {
        let a = AuditEntry::new(
            &actor("r1"),
            &"acme".parse().unwrap(),
            AuditAction::JobStop,
            "j1",
            serde_json::Value::Null,
            1,
        );
        let again = AuditEntry::new(
            &actor("r1"),
            &"acme".parse().unwrap(),
            AuditAction::JobStop,
            "j1",
            serde_json::Value::Null,
            9,
        );
        assert_eq!(a.id, again.id);
        assert_eq!(a.id.len(), 24);
        for other in [
            AuditEntry::new(
                &actor("r2"),
                &"acme".parse().unwrap(),
                AuditAction::JobStop,
                "j1",
                serde_json::Value::Null,
                1,
            ),
            AuditEntry::new(
                &actor("r1"),
                &"beta".parse().unwrap(),
                AuditAction::JobStop,
                "j1",
                serde_json::Value::Null,
                1,
            ),
            AuditEntry::new(
                &actor("r1"),
                &"acme".parse().unwrap(),
                AuditAction::JobSubmit,
                "j1",
                serde_json::Value::Null,
                1,
            ),
            AuditEntry::new(
                &actor("r1"),
                &"acme".parse().unwrap(),
                AuditAction::JobStop,
                "j2",
                serde_json::Value::Null,
                1,
            ),
        ] {
            assert_ne!(a.id, other.id, "{other:?}");
        }
    }

    #[test]
    fn entries_serialise_with_their_stored_names() {
        let e = AuditEntry::new(
            &actor("r"),
            &"acme".parse().unwrap(),
            AuditAction::KeyRotate,
            "k-1",
            serde_json::json!({"scopes": ["admin"]}),
            5,
        );
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["action"], "key.rotate");
        assert_eq!(v["actor"]["source"], "api");
        assert_eq!(serde_json::from_value::<AuditEntry>(v).unwrap(), e);
        for s in AuditSource::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn a_listing_keeps_its_window_and_tenant_oldest_first_and_the_newest_when_cut() {
        let mk = |tenant: &str, at: i64| {
            AuditEntry::new(
                &actor(&format!("r{at}")),
                &tenant.parse().unwrap(),
                AuditAction::JobStop,
                "j",
                serde_json::Value::Null,
                at,
            )
        };
        let all = vec![
            mk("acme", 30),
            mk("beta", 20),
            mk("acme", 10),
            mk("acme", 40),
        ];
        let q = AuditQuery {
            tenant: Some("acme".parse().unwrap()),
            since_ms: Some(10),
            until_ms: Some(40),
            limit: 0,
        };
        let got: Vec<i64> = q.finish(all.clone()).iter().map(|e| e.at_ms).collect();
        assert_eq!(got, vec![10, 30]);
        let newest = AuditQuery {
            limit: 2,
            ..AuditQuery::default()
        };
        let got: Vec<i64> = newest.finish(all).iter().map(|e| e.at_ms).collect();
        assert_eq!(got, vec![30, 40]);
    }
}
