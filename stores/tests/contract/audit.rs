//! Contract cases of the audit trail: append once by id, list by tenant and window, and a
//! submission's entry in the same write as its job.

use std::sync::Arc;

use tuneplane_core::audit::{Actor, AuditAction, AuditEntry, AuditQuery, AuditSource};
use tuneplane_core::store::{CreateOutcome, JobStore, NewJob, StoreError};

use super::fixtures::{event, idem, job, ok};

type Store = Arc<dyn JobStore>;

fn entry(tenant: &str, request: &str, target: &str, at_ms: i64) -> AuditEntry {
    let actor = Actor {
        key_id: "k-00000000000000aa".into(),
        source: AuditSource::Api,
        request_id: request.into(),
    };
    let change = serde_json::json!({"at": at_ms});
    AuditEntry::new(
        &actor,
        &tenant.parse().unwrap(),
        AuditAction::JobStop,
        target,
        change,
        at_ms,
    )
}

fn times(entries: &[AuditEntry]) -> Vec<i64> {
    entries.iter().map(|e| e.at_ms).collect()
}

pub async fn audit_entries_append_once_and_list_by_tenant_and_window_oldest_first(store: Store) {
    let all = AuditQuery::default();
    assert!(ok(store.list_audit(&all).await, "empty").is_empty());
    for e in [
        entry("acme", "r3", "j3", 30),
        entry("acme", "r1", "j1", 10),
        entry("globex", "r2", "j2", 20),
        entry("acme-2", "r4", "j4", 40),
    ] {
        ok(store.append_audit(&e).await, "append");
    }
    // The same change of a retried request (same tenant, action, target, request): kept once,
    // the first copy.
    ok(
        store.append_audit(&entry("acme", "r1", "j1", 99)).await,
        "retry",
    );

    assert_eq!(
        times(&ok(store.list_audit(&all).await, "all")),
        vec![10, 20, 30, 40]
    );
    let acme = AuditQuery {
        tenant: Some("acme".parse().unwrap()),
        ..AuditQuery::default()
    };
    let got = ok(store.list_audit(&acme).await, "acme");
    assert_eq!(
        times(&got),
        vec![10, 30],
        "another tenant's (acme-2) is not acme's"
    );
    assert_eq!(got[0], entry("acme", "r1", "j1", 10));
    let window = AuditQuery {
        since_ms: Some(20),
        until_ms: Some(40),
        ..AuditQuery::default()
    };
    assert_eq!(
        times(&ok(store.list_audit(&window).await, "window")),
        vec![20, 30]
    );
    let newest = AuditQuery {
        limit: 1,
        ..AuditQuery::default()
    };
    assert_eq!(
        times(&ok(store.list_audit(&newest).await, "newest")),
        vec![40]
    );
}

pub async fn a_submissions_audit_entry_lands_with_its_job_and_never_on_a_repeat(store: Store) {
    let key = idem("sub-1", "a", 3600);
    let first = entry("acme", "req-1", "j-1", 1);
    let created = ok(
        store
            .create(NewJob {
                job: &job("j-1", "acme", 1, 0),
                idem: Some(&key),
                events: &[event(1, "submitted", "first")],
                audit: Some(&first),
            })
            .await,
        "create",
    );
    assert!(matches!(created, CreateOutcome::Created(_)), "{created:?}");
    // The idempotent repeat (another request id, so another entry) changes nothing: no entry.
    let repeat = entry("acme", "req-2", "j-2", 2);
    let again = ok(
        store
            .create(NewJob {
                job: &job("j-2", "acme", 2, 0),
                idem: Some(&key),
                events: &[event(2, "submitted", "again")],
                audit: Some(&repeat),
            })
            .await,
        "repeat",
    );
    assert!(matches!(again, CreateOutcome::Existing(_)), "{again:?}");
    // A refused create writes no entry either.
    let taken = store
        .create(NewJob {
            job: &job("j-1", "acme", 3, 0),
            idem: None,
            events: &[],
            audit: Some(&entry("acme", "req-3", "j-1", 3)),
        })
        .await
        .err();
    assert!(
        matches!(taken, Some(StoreError::AlreadyExists { .. })),
        "{taken:?}"
    );
    let stored = ok(store.list_audit(&AuditQuery::default()).await, "list");
    assert_eq!(stored, vec![first]);
}
