//! The job-store contract against the embedded (redb) store, plus restart persistence.

mod contract;

use std::sync::Arc;

use contract::fixtures::{event, job, ok};
use contract::job_store_contract;
use tuneplane_core::job::JobState;
use tuneplane_core::store::{Idempotency, JobStore};
use tuneplane_stores::EmbeddedJobStore;

async fn make() -> (Arc<dyn JobStore>, tempfile::TempDir) {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let store = ok(EmbeddedJobStore::open(dir.path()), "open embedded store");
    (Arc::new(store), dir)
}

job_store_contract!(make);

#[tokio::test]
async fn data_survives_a_restart_of_the_store() {
    let dir = ok(tempfile::tempdir(), "tempdir");
    {
        let store = ok(EmbeddedJobStore::open(dir.path()), "open");
        let idem = Idempotency {
            key: "k".into(),
            request_sha256: "a".repeat(64),
            ttl_seconds: 3600,
        };
        let created = ok(
            store
                .create_job(&job("j-1", "acme", 5, 0), Some(&idem))
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
    }
    // A new process opening the same directory (the store above is dropped, closing the file).
    let reopened = ok(EmbeddedJobStore::open(dir.path()), "reopen");
    let job =
        ok(reopened.get_job("j-1").await, "get").unwrap_or_else(|| panic!("job lost on restart"));
    assert_eq!((job.state, job.version), (JobState::Admitted, 2));
    assert_eq!(ok(reopened.list_active().await, "active").len(), 1);
    assert_eq!(
        ok(reopened.list_events("j-1", 10, None).await, "events")
            .items
            .len(),
        1
    );
    assert_eq!(
        ok(reopened.get_capacity().await, "capacity"),
        Some(serde_json::json!({"h200": 8}))
    );
    let idem = Idempotency {
        key: "k".into(),
        request_sha256: "a".repeat(64),
        ttl_seconds: 3600,
    };
    let repeat = ok(
        reopened.create_job(&job_with_other_id(), Some(&idem)).await,
        "repeat",
    );
    assert_eq!(
        repeat.record().id,
        "j-1",
        "idempotency keys survive restarts too"
    );
}

fn job_with_other_id() -> tuneplane_core::job::JobRecord {
    job("j-2", "acme", 7, 0)
}
