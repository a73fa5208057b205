//! A tenant's subscriptions and signing secret as the API, the console and the CLI change them:
//! one set of rules for every door (a checked URL, known events and format, at most the
//! configured number per tenant), each change appended to the audit trail.

use serde::Deserialize;

use crate::audit::{Actor, AuditAction, AuditEntry};
use crate::callback::{CallbackSecret, Subscription};
use crate::spec::FieldError;
use crate::spec::notify::{Format, check_url, parse_events};
use crate::store::{JobStore, StoreError};

/// What a caller asks for: `POST /v1/subscriptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionRequest {
    /// Where deliveries go.
    pub url: String,
    /// Event names (`terminal` for the three ends); none: every event.
    #[serde(default)]
    pub events: Vec<String>,
    /// `json` (default) or `slack`.
    #[serde(default)]
    pub format: Option<String>,
}

/// Why a subscription change was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    /// The request breaks rules; every problem is listed.
    #[error("the subscription is invalid")]
    Invalid(Vec<FieldError>),
    /// The tenant has as many as it may.
    #[error(
        "tenant {tenant} already has {count} subscriptions, the most a tenant may keep ({limit}): delete one (tuneplane subscriptions delete ID) first"
    )]
    Limit {
        /// The tenant.
        tenant: String,
        /// Its subscriptions.
        count: usize,
        /// `TUNEPLANE_SUBSCRIPTION_LIMIT`.
        limit: u32,
    },
    /// No such subscription of the tenant.
    #[error("no subscription {0} of this tenant: tuneplane subscriptions list shows them")]
    NotFound(String),
    /// Storage failed.
    #[error("storage failed: {0}")]
    Store(#[from] StoreError),
}

/// Checks a request; every problem with its field.
pub fn check(
    request: &SubscriptionRequest,
    allow_loopback: bool,
) -> Result<(Vec<crate::spec::notify::EventKind>, Format), Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut field = |path: &str, message: String| {
        errors.push(FieldError {
            path: path.into(),
            message,
        })
    };
    if let Err(why) = check_url(&request.url, allow_loopback) {
        field("url", format!("{:?}: {why}", request.url));
    }
    let events = parse_events(&request.events)
        .map_err(|why| field("events", why))
        .ok();
    let format = match request.format.as_deref() {
        None => Some(Format::Json),
        Some(f) => Format::parse(f).map_err(|why| field("format", why)).ok(),
    };
    match (events, format) {
        (Some(e), Some(f)) if errors.is_empty() => Ok((e, f)),
        _ => Err(errors),
    }
}

/// Stores a new subscription of `tenant` (after [`check`] and the `limit`), audited.
pub async fn create(
    jobs: &dyn JobStore,
    tenant: &crate::ids::TenantId,
    request: &SubscriptionRequest,
    (limit, allow_loopback): (u32, bool),
    actor: &Actor,
    now_ms: i64,
) -> Result<Subscription, SubscriptionError> {
    let (events, format) = check(request, allow_loopback).map_err(SubscriptionError::Invalid)?;
    let count = jobs.list_subscriptions(tenant).await?.len();
    if count >= limit as usize {
        return Err(SubscriptionError::Limit {
            tenant: tenant.to_string(),
            count,
            limit,
        });
    }
    let sub = Subscription {
        id: Subscription::new_id(tenant, &request.url, now_ms, &actor.request_id),
        tenant: tenant.to_owned(),
        url: request.url.clone(),
        events,
        format,
        created_ms: now_ms,
        created_by: actor.key_id.clone(),
    };
    jobs.put_subscription(&sub).await?;
    let change = serde_json::json!({
        "url": redacted(&sub.url),
        "events": sub.events,
        "format": sub.format,
    });
    let entry = AuditEntry::new(
        actor,
        tenant,
        AuditAction::SubscriptionCreate,
        &sub.id,
        change,
        now_ms,
    );
    jobs.append_audit(&entry).await?;
    Ok(sub)
}

/// Deletes subscription `id` of `tenant`, audited.
pub async fn delete(
    jobs: &dyn JobStore,
    tenant: &crate::ids::TenantId,
    id: &str,
    actor: &Actor,
    now_ms: i64,
) -> Result<(), SubscriptionError> {
    if !jobs.delete_subscription(tenant, id).await? {
        return Err(SubscriptionError::NotFound(id.to_owned()));
    }
    let entry = AuditEntry::new(
        actor,
        tenant,
        AuditAction::SubscriptionDelete,
        id,
        serde_json::Value::Null,
        now_ms,
    );
    jobs.append_audit(&entry).await?;
    Ok(())
}

/// The tenant's signing secret, made from `random` if it has none; with `rotate`, replaced by
/// one made from `random` (audited).
pub async fn secret(
    jobs: &dyn JobStore,
    tenant: &crate::ids::TenantId,
    rotate: bool,
    random: [u8; 32],
    actor: &Actor,
    now_ms: i64,
) -> Result<CallbackSecret, SubscriptionError> {
    let fresh = CallbackSecret::from_random(tenant, random, now_ms);
    if !rotate {
        if let Some(s) = jobs.get_callback_secret(tenant).await? {
            return Ok(s);
        }
        return Ok(jobs.put_callback_secret(&fresh, false).await?);
    }
    let stored = jobs.put_callback_secret(&fresh, true).await?;
    let entry = AuditEntry::new(
        actor,
        tenant,
        AuditAction::CallbackSecretRotate,
        tenant,
        serde_json::json!({"created_ms": now_ms}),
        now_ms,
    );
    jobs.append_audit(&entry).await?;
    Ok(stored)
}

/// `url` without what may hold a secret, for the audit trail, listings and logs: its query and
/// fragment become `?…` (`#…`), a user name or password `…@`. Works on text that is not a valid
/// URL too (a log line must never print more than this).
pub fn redacted(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let (base, tail) = url.split_at(end);
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => {
            // The authority ends at the path; `\` counts as `/` in http(s) URLs.
            let (authority, path) = rest.split_at(rest.find(['/', '\\']).unwrap_or(rest.len()));
            match authority.rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://…@{host}{path}"),
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(mark) = tail.chars().next() {
        out.push(mark);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_checked_field_by_field() {
        let bad = SubscriptionRequest {
            url: "https://192.168.0.9/x".into(),
            events: vec!["started".into()],
            format: Some("xml".into()),
        };
        let errs = check(&bad, false).unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["url", "events", "format"]);
        assert!(errs[0].message.contains("private (192.168.0.0/16)"));
        let good = SubscriptionRequest {
            url: "https://hooks.slack.com/services/T/B/x".into(),
            events: vec!["terminal".into()],
            format: Some("slack".into()),
        };
        let (events, format) = check(&good, false).unwrap();
        assert_eq!(events, crate::spec::notify::EventKind::TERMINAL.to_vec());
        assert_eq!(format, Format::Slack);
    }

    #[test]
    fn redacted_urls_keep_no_query_fragment_or_user_info() {
        let cases = [
            ("https://h.example.com/x", "https://h.example.com/x"),
            (
                "https://h.example.com/x?token=s",
                "https://h.example.com/x?…",
            ),
            ("https://h.example.com/x?a=1#s", "https://h.example.com/x?…"),
            ("https://h.example.com/x#s?t=2", "https://h.example.com/x#…"),
            (
                "https://user:s@h.example.com/x",
                "https://…@h.example.com/x",
            ),
            ("https://s@h.example.com", "https://…@h.example.com"),
            (
                "https://u:p@ss@h.example.com:8443/x?t=s",
                "https://…@h.example.com:8443/x?…",
            ),
            // An `@` in the path is not user info.
            (
                "https://h.example.com/u@x?t=s",
                "https://h.example.com/u@x?…",
            ),
            ("not a url?s", "not a url?…"),
        ];
        for (url, want) in cases {
            assert_eq!(redacted(url), want, "{url}");
        }
    }
}
