//! The job-store contract against the embedded (redb) store, plus restart persistence.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract;

use std::sync::Arc;

use contract::fixtures::{event, idem, job, ok};
use contract::job_store_contract;
use tuneplane_core::job::JobState;
use tuneplane_core::store::prelude::*;
use tuneplane_core::store::{EventQuery, JobStore};
use tuneplane_stores::EmbeddedJobStore;

async fn make() -> (Arc<dyn JobStore>, tempfile::TempDir) {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let store = ok(EmbeddedJobStore::open(dir.path()), "open embedded store");
    (Arc::new(store), dir)
}

job_store_contract!(make);

/// The embedded store writes no outbox entry that nothing could want (the job names no callback
/// and its tenant has no subscription, read in the same transaction); once the tenant subscribes,
/// its next change has its entry.
#[tokio::test]
async fn changes_nothing_could_want_leave_no_outbox_entry() {
    let (store, _dir) = make().await;
    let submitted = event(5, "submitted", "submitted");
    let new = tuneplane_core::store::NewJob {
        job: &job("j-1", "acme", 5, 0),
        idem: None,
        events: std::slice::from_ref(&submitted),
        audit: None,
    };
    ok(store.create(new).await, "create");
    assert!(ok(store.list_outbox(10).await, "list").is_empty());
    contract::callbacks::subscribe(&store, "acme").await;
    let mut admitted = ok(store.get_job("j-1").await, "get").expect("j-1");
    ok(admitted.transition(JobState::Admitted, 7), "admit");
    ok(
        store
            .update_job_with_events(&admitted, &[event(7, "state-ADMITTED", "admitted")])
            .await,
        "admit write",
    );
    let listed = ok(store.list_outbox(10).await, "list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].event.state, JobState::Admitted);
    // Another tenant's subscription does not count.
    let other = tuneplane_core::store::NewJob {
        job: &job("j-2", "acme-2", 5, 0),
        idem: None,
        events: std::slice::from_ref(&submitted),
        audit: None,
    };
    ok(store.create(other).await, "create other");
    assert_eq!(ok(store.list_outbox(10).await, "list").len(), 1);
}

#[tokio::test]
async fn data_survives_a_restart_of_the_store() {
    let dir = ok(tempfile::tempdir(), "tempdir");
    {
        let store = ok(EmbeddedJobStore::open(dir.path()), "open");
        let created = ok(
            store
                .create_job(&job("j-1", "acme", 5, 0), Some(&idem("k", "a", 3600)))
                .await,
            "create",
        );
        let mut record = created.record().clone();
        ok(record.transition(JobState::Admitted, 6), "admit");
        ok(store.update_job(&record).await, "update");
        ok(
            store
                .append_events("j-1", &[event(6, "admitted", "admitted")])
                .await,
            "events",
        );
        ok(
            store.put_capacity(&serde_json::json!({"h200": 8})).await,
            "capacity",
        );
        let mut quota = tuneplane_core::quota::TenantQuota::unlimited(&"acme".parse().unwrap());
        quota.weight = 3.0;
        ok(store.put_quota(&quota).await, "quota");
    }
    // A new process opening the same directory (the store above is dropped, closing the file).
    let reopened = ok(EmbeddedJobStore::open(dir.path()), "reopen");
    let job = ok(reopened.get_job("j-1").await, "get").expect("job lost on restart");
    assert_eq!((job.state, job.version), (JobState::Admitted, 2));
    assert_eq!(ok(reopened.list_active().await, "active").len(), 1);
    assert_eq!(
        ok(
            reopened.list_events("j-1", &EventQuery::first(10)).await,
            "events"
        )
        .items
        .len(),
        1
    );
    assert_eq!(
        ok(reopened.get_capacity().await, "capacity"),
        Some(serde_json::json!({"h200": 8}))
    );
    assert_eq!(
        ok(reopened.get_quota(&"acme".parse().unwrap()).await, "quota").map(|q| q.weight),
        Some(3.0),
        "quotas survive restarts"
    );
    let repeat = ok(
        reopened
            .create_job(&job_with_other_id(), Some(&idem("k", "a", 3600)))
            .await,
        "repeat",
    );
    assert_eq!(
        repeat.record().id,
        "j-1",
        "idempotency keys survive restarts too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_on_one_directory_see_each_others_writes() {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let api = ok(EmbeddedJobStore::open(dir.path()), "open for the API");
    let reconciler = ok(
        EmbeddedJobStore::open(dir.path()),
        "open for the reconciler",
    );
    let created = ok(
        api.create_job(&job("j-1", "acme", 5, 0), None).await,
        "create",
    );
    let seen = ok(reconciler.list_active().await, "list active");
    assert_eq!(
        seen.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["j-1"]
    );
    let mut record = created.record().clone();
    ok(record.transition(JobState::Admitted, 6), "admit");
    ok(reconciler.update_job(&record).await, "admit write");
    let stale = api.update_job(created.record()).await.err();
    assert!(
        matches!(
            stale,
            Some(tuneplane_core::store::StoreError::Conflict { .. })
        ),
        "{stale:?}"
    );
    // Writers on different handles race on one version: the file lock lets exactly one win.
    let current = ok(api.get_job("j-1").await, "get").expect("job missing");
    let mut tasks = Vec::new();
    for n in 0..8 {
        let store = if n % 2 == 0 {
            api.clone()
        } else {
            reconciler.clone()
        };
        let record = current.clone();
        tasks.push(tokio::spawn(async move {
            store.update_job(&record).await.is_ok()
        }));
    }
    let mut wins = 0;
    for task in tasks {
        wins += usize::from(ok(task.await, "join"));
    }
    assert_eq!(wins, 1);
}

fn job_with_other_id() -> tuneplane_core::job::JobRecord {
    job("j-2", "acme", 7, 0)
}
