//! Contract cases of callbacks: a state change's outbox entry lands in the same write as the
//! change (and only then), entries change only at their revision, and subscriptions and signing
//! secrets are kept per tenant.

use std::sync::Arc;

use tuneplane_core::callback::{CallbackSecret, EventKind, Format, Subscription};
use tuneplane_core::job::JobState;
use tuneplane_core::store::{JobStore, NewJob, StoreError};

use super::fixtures::{event, job, ok};

type Store = Arc<dyn JobStore>;

fn kinds(entries: &[tuneplane_core::callback::OutboxEntry]) -> Vec<(String, EventKind)> {
    entries
        .iter()
        .map(|e| (e.event.job_id.to_string(), e.event.kind))
        .collect()
}

/// Gives `tenant` a subscription, so that every store writes its jobs' outbox entries (the
/// embedded store leaves out entries nothing could want).
pub async fn subscribe(store: &Store, tenant: &str) {
    let sub = Subscription {
        id: "sub_all".into(),
        tenant: tenant.parse().unwrap(),
        url: "https://hooks.example.com/all".into(),
        events: EventKind::ALL.to_vec(),
        format: Format::Json,
        created_ms: 1,
        created_by: "k-1".into(),
    };
    ok(store.put_subscription(&sub).await, "subscribe");
}

pub async fn a_state_change_writes_its_outbox_entry_in_the_same_write_and_only_then(store: Store) {
    subscribe(&store, "acme").await;
    let submitted = event(5, "submitted", "submitted");
    for id in ["j-b", "j-a"] {
        let new = NewJob {
            job: &job(id, "acme", 5, 0),
            idem: None,
            events: std::slice::from_ref(&submitted),
            audit: None,
        };
        ok(store.create(new).await, "create");
    }
    let listed = ok(store.list_outbox(100).await, "list");
    assert_eq!(
        kinds(&listed),
        vec![
            ("j-a".to_owned(), EventKind::Queued),
            ("j-b".to_owned(), EventKind::Queued)
        ],
        "one entry per submission, listed by job"
    );
    assert_eq!(listed[0].rev, 1);
    assert_eq!(listed[0].event.state, JobState::Queued);

    // A write without a state event (a pending reason, a workload name) makes no entry.
    let mut a = ok(store.get_job("j-a").await, "get").expect("j-a");
    a.workload_name = Some("tp-j-a".into());
    let a = ok(store.update_job(&a).await, "plain update");
    let mut noted = a.clone();
    noted.logs_key = Some("x".into());
    let a = ok(
        store
            .update_job_with_events(&noted, &[event(6, "pending-Quota", "waits")])
            .await,
        "pending",
    );
    assert_eq!(ok(store.list_outbox(100).await, "list").len(), 2);

    // The admission and its event: one entry, after the submission's.
    let mut admitted = a.clone();
    ok(admitted.transition(JobState::Admitted, 7), "admit");
    let stored = ok(
        store
            .update_job_with_events(&admitted, &[event(7, "state-ADMITTED", "admitted")])
            .await,
        "admit write",
    );
    // A stale writer's change lands nowhere: neither the record nor an entry.
    let mut stale = a.clone();
    ok(stale.transition(JobState::Admitted, 8), "stale admit");
    let refused = store
        .update_job_with_events(&stale, &[event(8, "a2-state-ADMITTED", "again")])
        .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict { .. })),
        "{refused:?}"
    );
    let listed = ok(store.list_outbox(100).await, "list");
    assert_eq!(
        kinds(&listed),
        vec![
            ("j-a".to_owned(), EventKind::Queued),
            ("j-a".to_owned(), EventKind::Admitted),
            ("j-b".to_owned(), EventKind::Queued)
        ]
    );
    assert_eq!(listed[1].event.admitted_at_ms, stored.admitted_at_ms);
    assert!(listed[0].order < listed[1].order);
    assert_eq!(ok(store.list_outbox(2).await, "limit").len(), 2);
}

pub async fn outbox_entries_change_and_go_only_at_their_revision(store: Store) {
    subscribe(&store, "acme").await;
    let new = NewJob {
        job: &job("j-1", "acme", 5, 0),
        idem: None,
        events: &[event(5, "submitted", "submitted")],
        audit: None,
    };
    ok(store.create(new).await, "create");
    let first = ok(store.list_outbox(10).await, "list").remove(0);
    let mut fanned = first.clone();
    fanned.deliveries = Some(Vec::new());
    let stored = ok(store.update_outbox(&fanned).await, "update");
    assert_eq!(stored.rev, first.rev + 1);
    assert_eq!(
        ok(store.list_outbox(10).await, "list")[0].deliveries,
        Some(Vec::new())
    );
    // A sender that read the entry before (a killed one's stale copy) changes nothing.
    assert!(matches!(
        store.update_outbox(&first).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        store.delete_outbox(&first).await,
        Err(StoreError::Conflict { .. })
    ));
    ok(store.delete_outbox(&stored).await, "delete");
    assert!(ok(store.list_outbox(10).await, "list").is_empty());
    ok(
        store.delete_outbox(&stored).await,
        "a second delete is no error",
    );

    // Entries nobody wants go in bulk (more than one request's worth on DynamoDB).
    for i in 0..30 {
        let new = NewJob {
            job: &job(&format!("j-bulk-{i:02}"), "acme", 5, 0),
            idem: None,
            events: &[event(5, "submitted", "submitted")],
            audit: None,
        };
        ok(store.create(new).await, "create");
    }
    let all = ok(store.list_outbox(100).await, "list");
    assert_eq!(all.len(), 30);
    ok(store.discard_outbox(&all[..29]).await, "discard");
    let left = ok(store.list_outbox(100).await, "list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].event.job_id, "j-bulk-29");
    ok(store.discard_outbox(&[]).await, "nothing to discard");
}

pub async fn subscriptions_and_signing_secrets_are_kept_per_tenant(store: Store) {
    let sub = |tenant: &str, id: &str, at: i64| Subscription {
        id: id.into(),
        tenant: tenant.parse().unwrap(),
        url: format!("https://hooks.example.com/{id}"),
        events: vec![EventKind::Succeeded],
        format: Format::Slack,
        created_ms: at,
        created_by: "k-1".into(),
    };
    for s in [
        sub("acme", "sub_b", 2),
        sub("acme", "sub_a", 1),
        sub("acme-2", "sub_c", 3),
    ] {
        ok(store.put_subscription(&s).await, "put");
    }
    let acme = ok(
        store.list_subscriptions(&"acme".parse().unwrap()).await,
        "list",
    );
    assert_eq!(acme, vec![sub("acme", "sub_a", 1), sub("acme", "sub_b", 2)]);
    assert!(!ok(
        store
            .delete_subscription(&"acme".parse().unwrap(), "sub_c")
            .await,
        "other tenant's"
    ));
    assert!(ok(
        store
            .delete_subscription(&"acme".parse().unwrap(), "sub_a")
            .await,
        "delete"
    ));
    assert_eq!(
        ok(
            store.list_subscriptions(&"acme".parse().unwrap()).await,
            "list"
        )
        .len(),
        1
    );
    assert_eq!(
        ok(
            store.list_subscriptions(&"acme-2".parse().unwrap()).await,
            "list"
        )
        .len(),
        1
    );

    assert_eq!(
        ok(
            store.get_callback_secret(&"acme".parse().unwrap()).await,
            "none yet"
        ),
        None
    );
    let one = CallbackSecret::from_random(&"acme".parse().unwrap(), [1; 32], 10);
    let two = CallbackSecret::from_random(&"acme".parse().unwrap(), [2; 32], 20);
    assert_eq!(
        ok(store.put_callback_secret(&one, false).await, "first"),
        one
    );
    assert_eq!(
        ok(store.put_callback_secret(&two, false).await, "if absent"),
        one,
        "an existing secret is kept"
    );
    assert_eq!(
        ok(store.put_callback_secret(&two, true).await, "rotate"),
        two
    );
    assert_eq!(
        ok(
            store.get_callback_secret(&"acme".parse().unwrap()).await,
            "get"
        ),
        Some(two)
    );
    assert_eq!(
        ok(
            store.get_callback_secret(&"acme-2".parse().unwrap()).await,
            "other"
        ),
        None
    );
}
