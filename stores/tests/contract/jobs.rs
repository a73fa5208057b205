//! Contract cases for `JobStore`.

use std::sync::Arc;

use serde_json::json;
use tuneplane_core::job::{JobEvent, JobRecord, JobState, PendingReason};
use tuneplane_core::store::{
    ApiKeyRecord, CreateOutcome, EventQuery, Idempotency, JobQuery, JobStore, JobUpdate, NewJob,
    PlaygroundRecord, PlaygroundState, PlaygroundStatus, ScheduleRecord, ScheduleStep, StoreError,
    hash_api_key,
};

use super::fixtures::{event, idem, job, ok, spec};

type Store = Arc<dyn JobStore>;

async fn create(
    store: &Store,
    id: &str,
    tenant: &str,
    submitted: i64,
    priority: i32,
) -> tuneplane_core::job::JobRecord {
    let outcome = ok(
        store
            .create_job(&job(id, tenant, submitted, priority), None)
            .await,
        "create",
    );
    outcome.record().clone()
}

/// Creates job `id` of `tenant` (priority 0) under the idempotency key `key`.
async fn create_keyed(
    store: &Store,
    id: &str,
    tenant: &str,
    submitted: i64,
    key: Idempotency,
) -> Result<CreateOutcome, StoreError> {
    store
        .create_job(&job(id, tenant, submitted, 0), Some(&key))
        .await
}

/// The ids of `jobs`, in order.
fn ids(jobs: &[JobRecord]) -> Vec<&str> {
    jobs.iter().map(|j| j.id.as_str()).collect()
}

pub async fn create_then_get_returns_version_one(store: Store) {
    let created = create(&store, "j-1", "acme", 1_000, 0).await;
    let read = ok(store.get_job("j-1").await, "get");
    assert_eq!(created.version, 1);
    assert_eq!(read, Some(created.clone()));
    assert_eq!(ok(store.get_job("absent").await, "get absent"), None);
    // The marks of a follower and of a one-off reader of the job's logs round trip.
    let mut followed = created;
    followed.logs_followed_until_ms = Some(61_000);
    followed.logs_wanted_at_ms = Some(51_000);
    // So does the count of failed log archives (a restarted reconciler goes on from it).
    followed.archive_failures = 3;
    let stored = ok(store.update_job(&followed).await, "follow write");
    let read = ok(store.get_job("j-1").await, "get followed");
    assert_eq!(
        read.map(|j| (
            j.logs_followed_until_ms,
            j.logs_wanted_at_ms,
            j.archive_failures
        )),
        Some((Some(61_000), Some(51_000), 3))
    );
    assert_eq!(stored.logs_followed_until_ms, Some(61_000));
    assert_eq!(stored.logs_wanted_at_ms, Some(51_000));
    assert_eq!(stored.archive_failures, 3);
}

pub async fn same_idempotency_key_and_request_returns_the_first_job(store: Store) {
    let first = ok(
        create_keyed(&store, "j-a", "acme", 1, idem("k1", "a", 3600)).await,
        "first",
    );
    let again = ok(
        create_keyed(&store, "j-b", "acme", 2, idem("k1", "a", 3600)).await,
        "again",
    );
    assert!(matches!(first, CreateOutcome::Created(_)));
    assert_eq!(again, CreateOutcome::Existing(first.record().clone()));
    assert_eq!(
        ok(store.get_job("j-b").await, "get j-b"),
        None,
        "a repeat must not store a second job"
    );
    // The same key belongs to each tenant separately.
    let other = ok(
        create_keyed(&store, "j-c", "other", 3, idem("k1", "b", 3600)).await,
        "other",
    );
    assert!(matches!(other, CreateOutcome::Created(_)));
}

pub async fn same_idempotency_key_with_another_request_is_a_mismatch(store: Store) {
    ok(
        create_keyed(&store, "j-a", "acme", 1, idem("k1", "a", 3600)).await,
        "first",
    );
    let err = create_keyed(&store, "j-b", "acme", 2, idem("k1", "b", 3600))
        .await
        .err();
    match err {
        Some(StoreError::IdempotencyMismatch {
            tenant,
            key,
            job_id,
        }) => {
            assert_eq!(
                (tenant.as_str(), key.as_str(), job_id.as_str()),
                ("acme", "k1", "j-a")
            );
        }
        other => panic!("expected IdempotencyMismatch, got {other:?}"),
    }
    assert_eq!(ok(store.get_job("j-b").await, "get j-b"), None);
}

pub async fn concurrent_identical_submissions_create_one_job(store: Store) {
    let mut tasks = Vec::new();
    for n in 0..6 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let candidate = job(&format!("j-{n}"), "acme", n, 0);
            store
                .create_job(&candidate, Some(&idem("retry", "a", 3600)))
                .await
        }));
    }
    let (mut created, mut ids) = (0, Vec::new());
    for task in tasks {
        match ok(ok(task.await, "join"), "create") {
            CreateOutcome::Created(job) => {
                created += 1;
                ids.push(job.id);
            }
            CreateOutcome::Existing(job) => ids.push(job.id),
        }
    }
    ids.dedup();
    assert_eq!(
        (created, ids.len()),
        (1, 1),
        "one job for six identical requests: {ids:?}"
    );
    let page = ok(
        store
            .list_jobs(&"acme".parse().unwrap(), &JobQuery::default())
            .await,
        "list",
    );
    assert_eq!(page.items.len(), 1);
}

pub async fn expired_idempotency_key_can_be_used_again(store: Store) {
    ok(
        create_keyed(&store, "j-a", "acme", 1, idem("k1", "a", 0)).await,
        "first",
    );
    let second = ok(
        create_keyed(&store, "j-b", "acme", 2, idem("k1", "b", 3600)).await,
        "second",
    );
    assert_eq!(second.record().id, "j-b");
    assert!(matches!(second, CreateOutcome::Created(_)));
}

pub async fn creating_an_existing_job_id_fails(store: Store) {
    create(&store, "j-1", "acme", 1, 0).await;
    let err = store
        .create_job(&job("j-1", "acme", 2, 0), None)
        .await
        .err();
    assert!(
        matches!(err, Some(StoreError::AlreadyExists { ref key, .. }) if key.contains("j-1")),
        "{err:?}"
    );
}

pub async fn stale_writer_gets_a_conflict_not_an_overwrite(store: Store) {
    let v1 = create(&store, "j-1", "acme", 1, 0).await;
    let mut a = v1.clone();
    a.workload_name = Some("from-a".into());
    let mut b = v1.clone();
    b.workload_name = Some("from-b".into());
    let stored = ok(store.update_job(&a).await, "first writer");
    assert_eq!(stored.version, 2);
    let err = store.update_job(&b).await.err();
    assert!(
        matches!(err, Some(StoreError::Conflict { ref key, expected: 1, .. }) if key.contains("j-1")),
        "{err:?}"
    );
    let read = ok(store.get_job("j-1").await, "get").map(|j| (j.version, j.workload_name));
    assert_eq!(read, Some((2, Some("from-a".to_owned()))));
    let missing = store.update_job(&job("absent", "acme", 1, 0)).await.err();
    assert!(
        matches!(missing, Some(StoreError::Conflict { .. })),
        "{missing:?}"
    );
}

pub async fn racing_writers_exactly_one_wins_per_version(store: Store) {
    let v1 = create(&store, "j-race", "acme", 1, 0).await;
    // Round 1: every task writes against the same version; exactly one may win.
    let mut tasks = Vec::new();
    for n in 0..8 {
        let (store, mut record) = (Arc::clone(&store), v1.clone());
        tasks.push(tokio::spawn(async move {
            record.workload_name = Some(format!("writer-{n}"));
            store.update_job(&record).await
        }));
    }
    let mut wins = 0;
    for task in tasks {
        match ok(task.await, "join") {
            Ok(_) => wins += 1,
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(wins, 1, "exactly one writer wins version 1");
    // Round 2: read-modify-write loops; every version is won by exactly one writer.
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for _ in 0..4 {
                let current = ok(store.get_job("j-race").await, "get").expect("job vanished");
                match store.update_job(&current).await {
                    Ok(stored) => won.push(stored.version),
                    Err(StoreError::Conflict { .. }) => {}
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
            won
        }));
    }
    let mut versions = Vec::new();
    for task in tasks {
        versions.extend(ok(task.await, "join"));
    }
    versions.sort_unstable();
    let final_version = ok(store.get_job("j-race").await, "get").map(|j| j.version);
    let expected: Vec<u64> = (3..=final_version.unwrap_or(0)).collect();
    assert_eq!(
        versions, expected,
        "each version from 3 on has exactly one winner"
    );
}

pub async fn terminal_jobs_are_final(store: Store) {
    let mut record = create(&store, "j-1", "acme", 1, 0).await;
    ok(record.transition(JobState::Stopped, 5), "transition");
    let stopped = ok(store.update_job(&record).await, "stop");
    let mut revived = stopped.clone();
    revived.state = JobState::Queued;
    let err = store.update_job(&revived).await.err();
    assert!(matches!(err, Some(StoreError::Conflict { .. })), "{err:?}");
    assert_eq!(
        ok(store.get_job("j-1").await, "get").map(|j| j.state),
        Some(JobState::Stopped)
    );
}

pub async fn active_index_is_in_admission_order_and_drops_terminal_jobs(store: Store) {
    create(&store, "j-low-early", "acme", 100, 0).await;
    create(&store, "j-high-late", "beta", 300, 10).await;
    create(&store, "j-low-late", "acme", 200, 0).await;
    create(&store, "j-negative", "acme", 50, -5).await;
    let mut done = create(&store, "j-done", "acme", 10, 0).await;
    let active = ok(store.list_active().await, "list active");
    let order = ids(&active);
    assert_eq!(
        order,
        [
            "j-high-late",
            "j-done",
            "j-low-early",
            "j-low-late",
            "j-negative"
        ]
    );

    ok(done.transition(JobState::Admitted, 20), "admit");
    done.pending = Some(tuneplane_core::job::Pending {
        reason: PendingReason::Starting,
        message: "pulling".into(),
        since_ms: 20,
    });
    let mut done = ok(store.update_job(&done).await, "admit write");
    let active = ok(store.list_active().await, "list active");
    let order = ids(&active);
    assert_eq!(order.len(), 5, "admitted jobs stay active: {order:?}");
    ok(done.transition(JobState::Running, 30), "run");
    let mut done = ok(store.update_job(&done).await, "run write");
    ok(done.transition(JobState::Succeeded, 40), "succeed");
    ok(store.update_job(&done).await, "succeed write");
    let active = ok(store.list_active().await, "list active");
    let order = ids(&active);
    assert_eq!(
        order,
        ["j-high-late", "j-low-early", "j-low-late", "j-negative"]
    );
}

pub async fn queue_position_counts_queued_jobs_ahead_in_admission_order(store: Store) {
    let first = create(&store, "j-a", "acme", 100, 0).await;
    let urgent = create(&store, "j-urgent", "beta", 300, 5).await;
    let later = create(&store, "j-b", "acme", 200, 0).await;
    let mut running = create(&store, "j-running", "acme", 50, 0).await;
    ok(running.transition(JobState::Admitted, 60), "admit");
    let running = ok(store.update_job(&running).await, "admit write");
    let mut stopping = create(&store, "j-stopping", "acme", 60, 0).await;
    stopping.stop_requested = true;
    ok(store.update_job(&stopping).await, "stop write");
    let pos = |p: Result<Option<u64>, tuneplane_core::store::StoreError>| ok(p, "position");
    // Higher priority first; admitted and stopping jobs do not count.
    assert_eq!(pos(store.queue_position(&urgent).await), Some(1));
    assert_eq!(pos(store.queue_position(&first).await), Some(2));
    assert_eq!(pos(store.queue_position(&later).await), Some(3));
    assert_eq!(pos(store.queue_position(&running).await), None);
}

pub async fn tenant_listing_pages_newest_first_with_state_filter(store: Store) {
    for n in 1..=5 {
        create(&store, &format!("j-{n}"), "acme", n * 1_000, 0).await;
    }
    create(&store, "j-other", "beta", 2_500, 0).await;
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None, 0);
    loop {
        let query = JobQuery {
            state: None,
            limit: 2,
            cursor: cursor.clone(),
        };
        let page = ok(
            store.list_jobs(&"acme".parse().unwrap(), &query).await,
            "list page",
        );
        pages += 1;
        seen.extend(page.items.into_iter().map(|j| j.id));
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(seen, ["j-5", "j-4", "j-3", "j-2", "j-1"]);
    assert_eq!(pages, 3);

    for id in ["j-2", "j-4"] {
        let mut record =
            ok(store.get_job(id).await, "get").unwrap_or_else(|| panic!("{id} missing"));
        ok(record.transition(JobState::Admitted, 9_000), "admit");
        ok(store.update_job(&record).await, "admit write");
    }
    let query = JobQuery {
        state: Some(JobState::Admitted),
        limit: 1,
        cursor: None,
    };
    let first = ok(
        store.list_jobs(&"acme".parse().unwrap(), &query).await,
        "filtered",
    );
    assert_eq!(ids(&first.items), ["j-4"]);
    let query = JobQuery {
        cursor: first.next,
        ..query
    };
    let second = ok(
        store.list_jobs(&"acme".parse().unwrap(), &query).await,
        "filtered page 2",
    );
    assert_eq!(ids(&second.items), ["j-2"]);
    assert_eq!(second.next, None);

    let bad = JobQuery {
        cursor: Some("not-a-cursor".into()),
        ..JobQuery::default()
    };
    assert!(matches!(
        store.list_jobs(&"acme".parse().unwrap(), &bad).await,
        Err(StoreError::InvalidCursor { .. })
    ));
}

pub async fn events_list_in_time_order_and_repeats_are_stored_once(store: Store) {
    create(&store, "j-1", "acme", 1, 0).await;
    let batch = [
        event(300, "c", "third"),
        event(100, "a", "first"),
        event(200, "b", "second"),
    ];
    ok(store.append_events("j-1", &batch).await, "append");
    ok(
        store
            .append_events(
                "j-1",
                &[event(100, "a", "first"), event(200, "b2", "second too")],
            )
            .await,
        "append again",
    );
    let many: Vec<_> = (0..30)
        .map(|n| event(1_000 + n, &format!("bulk-{n:02}"), "bulk"))
        .collect();
    ok(store.append_events("j-1", &many).await, "append bulk");

    let (mut keys, mut query) = (Vec::new(), EventQuery::first(4));
    loop {
        let page = ok(store.list_events("j-1", &query).await, "list events");
        keys.extend(page.items.into_iter().map(|e| e.key));
        query.cursor = page.next;
        if query.cursor.is_none() {
            break;
        }
    }
    let mut expected = vec!["a".to_owned(), "b".into(), "b2".into(), "c".into()];
    expected.extend((0..30).map(|n| format!("bulk-{n:02}")));
    assert_eq!(keys, expected);
    let other = ok(
        store.list_events("j-2", &EventQuery::first(10)).await,
        "other job",
    );
    assert!(other.items.is_empty() && other.next.is_none());
}

pub async fn a_state_change_and_its_events_land_together_or_not_at_all(store: Store) {
    let v1 = create(&store, "j-1", "acme", 1, 0).await;
    let mut admitted = v1.clone();
    admitted.state = JobState::Admitted;
    let stored = ok(
        store
            .update_job_with_events(
                &admitted,
                &[
                    event(500, "state-ADMITTED", "admitted"),
                    event(500, "note", "n"),
                ],
            )
            .await,
        "update with events",
    );
    assert_eq!(stored.version, 2);
    // A stale writer (version 1 again) changes neither the record nor the history.
    let mut stale = v1.clone();
    stale.state = JobState::Stopped;
    let err = store
        .update_job_with_events(&stale, &[event(600, "state-STOPPED", "stopped")])
        .await
        .err();
    assert!(
        matches!(err, Some(StoreError::Conflict { expected: 1, .. })),
        "{err:?}"
    );
    let read = ok(store.get_job("j-1").await, "get").map(|j| (j.version, j.state));
    assert_eq!(read, Some((2, JobState::Admitted)));
    let keys: Vec<String> = ok(
        store.list_events("j-1", &EventQuery::first(10)).await,
        "events",
    )
    .items
    .into_iter()
    .map(|e| e.key)
    .collect();
    assert_eq!(keys, ["note", "state-ADMITTED"]);
    // A missing job is a conflict too, and writes no orphan event.
    let missing = store
        .update_job_with_events(&job("absent", "acme", 1, 0), &[event(1, "x", "x")])
        .await
        .err();
    assert!(
        matches!(missing, Some(StoreError::Conflict { .. })),
        "{missing:?}"
    );
    let orphan = ok(
        store.list_events("absent", &EventQuery::first(10)).await,
        "events of a missing job",
    );
    assert!(orphan.items.is_empty(), "{:?}", orphan.items);
}

pub async fn a_batch_of_updates_lands_except_the_one_that_conflicts(store: Store) {
    let mut next = Vec::new();
    for i in 0..5 {
        let mut j = create(&store, &format!("j-{i}"), "acme", i, 0).await;
        j.state = JobState::Admitted;
        next.push(j);
    }
    // j-2 changed by another writer since it was read: its update is stale.
    let mut other = next[2].clone();
    other.state = JobState::Queued;
    other.stop_requested = true;
    ok(store.update_job(&other).await, "the other writer");
    let events: Vec<Vec<JobEvent>> = (0..5)
        .map(|i| vec![event(100 + i, "state-ADMITTED", "admitted")])
        .collect();
    let updates: Vec<JobUpdate<'_>> = next
        .iter()
        .zip(&events)
        .map(|(job, events)| JobUpdate { job, events })
        .collect();
    let outcomes = store.update_jobs_with_events(&updates).await;
    assert_eq!(outcomes.len(), 5);
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 2 {
            assert!(
                matches!(outcome, Err(StoreError::Conflict { .. })),
                "the stale update: {outcome:?}"
            );
        } else {
            let stored = outcome.as_ref().expect("the other updates land");
            assert_eq!((stored.version, stored.state), (2, JobState::Admitted));
        }
    }
    for i in 0..5 {
        let id = format!("j-{i}");
        let read = ok(store.get_job(&id).await, "get").expect("stored");
        let keys: Vec<String> = ok(
            store.list_events(&id, &EventQuery::first(10)).await,
            "events",
        )
        .items
        .into_iter()
        .map(|e| e.key)
        .collect();
        if i == 2 {
            // The other writer's change stands, and the stale update wrote no event.
            assert!(
                read.stop_requested && read.state == JobState::Queued,
                "{read:?}"
            );
            assert!(keys.is_empty(), "{keys:?}");
        } else {
            assert_eq!(read.state, JobState::Admitted);
            assert_eq!(keys, ["state-ADMITTED"]);
        }
    }
    assert!(store.update_jobs_with_events(&[]).await.is_empty());
}

/// Creates job `id` of acme, submitted at `at` with its `submitted` event saying `message`.
async fn create_with_event(
    store: &Store,
    id: &str,
    at: i64,
    key: Option<&Idempotency>,
    message: &str,
) -> Result<CreateOutcome, StoreError> {
    store
        .create(NewJob {
            job: &job(id, "acme", at, 0),
            idem: key,
            events: &[event(at, "submitted", message)],
            audit: None,
        })
        .await
}

pub async fn a_new_job_and_its_first_events_land_together_and_repeats_add_none(store: Store) {
    let key = idem("sub-1", "a", 3600);
    let first = ok(
        create_with_event(&store, "j-1", 1, Some(&key), "first").await,
        "create with events",
    );
    assert!(matches!(first, CreateOutcome::Created(_)), "{first:?}");
    // The same request again (another id, as a retried request gets): the first job, no event.
    let again = ok(
        create_with_event(&store, "j-2", 2, Some(&key), "again").await,
        "repeat",
    );
    assert!(
        matches!(&again, CreateOutcome::Existing(j) if j.id == "j-1"),
        "{again:?}"
    );
    // An existing job id without a key: refused, and no event lands on the existing job.
    let taken = create_with_event(&store, "j-1", 3, None, "taken")
        .await
        .err();
    assert!(
        matches!(taken, Some(StoreError::AlreadyExists { .. })),
        "{taken:?}"
    );
    // Without a key, a new job and its event land together.
    ok(
        create_with_event(&store, "j-3", 4, None, "x").await,
        "create without key",
    );
    for (id, expected) in [("j-1", vec!["first"]), ("j-2", vec![]), ("j-3", vec!["x"])] {
        let messages: Vec<String> = ok(
            store.list_events(id, &EventQuery::first(10)).await,
            "events",
        )
        .items
        .into_iter()
        .map(|e| e.message)
        .collect();
        assert_eq!(messages, expected, "events of {id}");
    }
}

pub async fn capacity_api_keys_schedules_and_playgrounds_round_trip(store: Store) {
    assert_eq!(ok(store.get_capacity().await, "capacity"), None);
    let snapshot = json!({"series": {"h200": {"capacity": 16, "used": 8}}});
    ok(store.put_capacity(&snapshot).await, "put capacity");
    assert_eq!(ok(store.get_capacity().await, "capacity"), Some(snapshot));

    let hash = hash_api_key("tp_secret");
    let key = ApiKeyRecord {
        key_sha256: hash.clone(),
        tenant: "acme".parse().unwrap(),
        scopes: vec!["jobs:write".into()],
        name: "ci".into(),
        created_at_ms: 1,
        revoked_at_ms: None,
        session_epoch: 0,
    };
    ok(store.put_api_key(&key).await, "put key");
    assert_eq!(ok(store.get_api_key(&hash).await, "get key"), Some(key));
    assert_eq!(
        ok(store.get_api_key(&hash_api_key("other")).await, "get other"),
        None
    );

    let schedule = ScheduleRecord {
        id: "nightly".into(),
        tenant: "acme".parse().unwrap(),
        expression: "cron(0 2 * * ? *)".into(),
        spec: spec(0),
        capsule_sha256: "cd".repeat(32),
        enabled: true,
        created_at_ms: 1,
        version: 0,
        steps: Vec::new(),
    };
    let stored = ok(store.put_schedule(&schedule).await, "create schedule");
    assert_eq!(stored.version, 1);
    assert!(matches!(
        store.put_schedule(&schedule).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    let paused = ok(
        store
            .put_schedule(&ScheduleRecord {
                enabled: false,
                ..stored.clone()
            })
            .await,
        "pause",
    );
    assert!(matches!(
        store.put_schedule(&stored).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        ok(store.get_schedule("nightly").await, "get schedule"),
        Some(paused)
    );
    ok(store.delete_schedule("nightly").await, "delete schedule");
    assert_eq!(
        ok(store.get_schedule("nightly").await, "get schedule"),
        None
    );

    // A pipeline schedule keeps its steps, each with its spec, capsule and `after`, in order.
    let mut train = spec(0);
    train.name = "train".into();
    train.depends_on = vec![tuneplane_core::spec::Dependency {
        job: "j-prepare".into(),
        when: tuneplane_core::spec::DependencyWhen::Ended,
        n_to_n: false,
    }];
    let steps = vec![
        ScheduleStep {
            name: "prepare".into(),
            spec: spec(0),
            capsule_sha256: "ab".repeat(32),
            after: Vec::new(),
        },
        ScheduleStep {
            name: "train".into(),
            spec: train.clone(),
            capsule_sha256: "cd".repeat(32),
            after: vec!["prepare".into()],
        },
    ];
    let pipeline = ScheduleRecord {
        id: "nightly-pipeline".into(),
        spec: train,
        steps,
        ..schedule.clone()
    };
    let stored = ok(
        store.put_schedule(&pipeline).await,
        "create pipeline schedule",
    );
    assert_eq!(
        ok(
            store.get_schedule("nightly-pipeline").await,
            "get pipeline schedule"
        ),
        Some(ScheduleRecord {
            version: 1,
            ..pipeline
        })
    );
    assert_eq!(stored.steps.len(), 2);

    let pg = PlaygroundRecord {
        id: "pg-1".into(),
        tenant: "acme".parse().unwrap(),
        model: "qwen".into(),
        series: "l40s".into(),
        gpus: 1,
        pod_name: None,
        created_at_ms: 1,
        expires_at_ms: 3_600_000,
        version: 0,
        pod_namespace: None,
        status: None,
        node: None,
        pod_ip: None,
        server_key: None,
        admitted_at_ms: None,
        ended_at_ms: None,
    };
    let pg = ok(store.put_playground(&pg).await, "create playground");
    let pg2 = ok(
        store
            .put_playground(&PlaygroundRecord {
                id: "pg-2".into(),
                version: 0,
                ..pg.clone()
            })
            .await,
        "second",
    );
    let mut all = ok(store.list_playgrounds().await, "list playgrounds");
    all.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(all, vec![pg.clone(), pg2]);
    ok(store.delete_playground("pg-1").await, "delete playground");
    assert_eq!(ok(store.get_playground("pg-1").await, "get"), None);
    assert_eq!(ok(store.list_playgrounds().await, "list").len(), 1);

    // Reclaimed: the live record goes and its retired copy stays for the tenant's usage.
    let mut retired = ok(store.get_playground("pg-2").await, "get").expect("pg-2");
    retired.ended_at_ms = Some(99);
    ok(store.retire_playground(&retired).await, "retire");
    assert_eq!(ok(store.get_playground("pg-2").await, "get"), None);
    assert!(ok(store.list_playgrounds().await, "list").is_empty());
    let kept = ok(store.list_retired_playgrounds(&pg.tenant).await, "retired");
    assert_eq!(kept, vec![retired]);
    assert!(
        ok(
            store
                .list_retired_playgrounds(&"someone-else".parse().unwrap())
                .await,
            "other"
        )
        .is_empty(),
        "per tenant"
    );
}

pub async fn playground_pod_and_status_round_trip_and_updates_are_versioned(store: Store) {
    let pg = PlaygroundRecord {
        id: "pg-0a1b2c".into(),
        tenant: "acme".parse().unwrap(),
        model: "Qwen/Qwen2.5-0.5B-Instruct".into(),
        series: "l40s".into(),
        gpus: 2,
        pod_name: None,
        created_at_ms: 1,
        expires_at_ms: 3_600_000,
        version: 0,
        pod_namespace: None,
        status: None,
        node: None,
        pod_ip: None,
        server_key: None,
        admitted_at_ms: None,
        ended_at_ms: None,
    };
    let created = ok(store.put_playground(&pg).await, "create playground");
    assert_eq!(created.version, 1);
    assert_eq!(
        ok(store.get_playground(&pg.id).await, "get new"),
        Some(created.clone())
    );
    // What the reconciler records: the pod, its namespace and why it is not running.
    let pending = PlaygroundRecord {
        pod_name: Some("pg-0a1b2c".into()),
        pod_namespace: Some("tuneplane-jobs".into()),
        status: Some(PlaygroundStatus {
            state: PlaygroundState::Pending,
            reason: Some("InsufficientGpu".into()),
            message: "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector.".into(),
            since_ms: 5,
            updated_ms: 5,
        }),
        ..created.clone()
    };
    let stored = ok(store.put_playground(&pending).await, "record status");
    assert_eq!(stored.version, 2);
    let read = ok(store.get_playground(&pg.id).await, "get pending").expect("playground missing");
    assert_eq!(read, stored);
    assert_eq!(
        read.status.as_ref().and_then(|s| s.reason.as_deref()),
        Some("InsufficientGpu")
    );
    assert_eq!(
        ok(store.list_playgrounds().await, "list"),
        vec![stored.clone()]
    );
    // A writer holding the version before the status (a delete racing the reconciler) conflicts
    // instead of erasing it.
    let stale = PlaygroundRecord {
        expires_at_ms: 2,
        ..created
    };
    assert!(matches!(
        store.put_playground(&stale).await,
        Err(StoreError::Conflict { .. })
    ));
    // The status changes and goes back to none when a newer record drops it.
    let running = PlaygroundRecord {
        status: Some(PlaygroundStatus {
            state: PlaygroundState::Running,
            reason: None,
            message: "pod pg-0a1b2c runs on node l40s-0".into(),
            since_ms: 9,
            updated_ms: 9,
        }),
        ..stored
    };
    let stored = ok(store.put_playground(&running).await, "record running");
    let read = ok(store.get_playground(&pg.id).await, "get running");
    assert_eq!(read.as_ref(), Some(&stored));
    assert_eq!(
        read.and_then(|r| r.status).map(|s| s.state),
        Some(PlaygroundState::Running)
    );
    let cleared = ok(
        store
            .put_playground(&PlaygroundRecord {
                status: None,
                ..stored
            })
            .await,
        "clear status",
    );
    assert_eq!(
        ok(store.get_playground(&pg.id).await, "get cleared"),
        Some(cleared)
    );
}

pub async fn quotas_round_trip_list_by_tenant_and_delete(store: Store) {
    use tuneplane_core::quota::{CpuLimit, SeriesLimit, TenantQuota};
    assert_eq!(
        ok(
            store.get_quota(&"team-a".parse().unwrap()).await,
            "get absent"
        ),
        None
    );
    assert!(ok(store.list_quotas().await, "list empty").is_empty());
    let mut a = TenantQuota::unlimited(&"team-a".parse().unwrap());
    a.set_gpu_limit("h200", 16, true);
    a.cpu = Some(CpuLimit {
        cpus: Some(64.0),
        memory_gb: None,
        borrow: false,
    });
    a.weight = 2.0;
    a.updated_at_ms = 7;
    let mut b = TenantQuota::unlimited(&"team-b".parse().unwrap());
    b.set_gpu_limit("l40s", 4, false);
    // Written out of order: listing sorts by tenant.
    ok(store.put_quota(&b).await, "put b");
    ok(store.put_quota(&a).await, "put a");
    assert_eq!(
        ok(store.get_quota(&"team-a".parse().unwrap()).await, "get a"),
        Some(a.clone())
    );
    let tenants: Vec<String> = ok(store.list_quotas().await, "list")
        .into_iter()
        .map(|q| q.tenant.into_string())
        .collect();
    assert_eq!(tenants, ["team-a", "team-b"]);
    // A put replaces the tenant's record whole.
    a.series.clear();
    ok(store.put_quota(&a).await, "replace a");
    assert_eq!(
        ok(
            store.get_quota(&"team-a".parse().unwrap()).await,
            "get replaced"
        )
        .map(|q| q.series.len()),
        Some(0)
    );
    ok(
        store.delete_quota(&"team-b".parse().unwrap()).await,
        "delete b",
    );
    ok(
        store.delete_quota(&"team-b".parse().unwrap()).await,
        "delete absent",
    );
    assert_eq!(
        ok(
            store.get_quota(&"team-b".parse().unwrap()).await,
            "get deleted"
        ),
        None
    );
    assert_eq!(ok(store.list_quotas().await, "list after delete").len(), 1);
    // Quotas are not jobs, schedules or playgrounds.
    assert!(ok(store.list_active().await, "active").is_empty());
    assert!(ok(store.list_playgrounds().await, "playgrounds").is_empty());
}

pub async fn several_jobs_land_in_one_write_or_none_of_them(store: Store) {
    let jobs: Vec<JobRecord> = (0..3)
        .map(|i| job(&format!("j-step-{i}"), "acme", 1_000 + i, 0))
        .collect();
    let events: Vec<_> = (0..3)
        .map(|i| event(1_000 + i, "submitted", "submitted"))
        .collect();
    let news: Vec<NewJob> = jobs
        .iter()
        .zip(&events)
        .map(|(j, e)| NewJob {
            job: j,
            idem: None,
            events: std::slice::from_ref(e),
            audit: None,
        })
        .collect();
    let created = ok(store.create_all(&news).await, "create all");
    assert_eq!(ids(&created), ["j-step-0", "j-step-1", "j-step-2"]);
    for j in &jobs {
        let read = ok(store.get_job(&j.id).await, "get").expect("stored");
        assert_eq!(read.version, 1);
        let page = ok(
            store.list_events(&j.id, &EventQuery::first(10)).await,
            "events",
        );
        assert_eq!(page.items.len(), 1, "{}", j.id);
    }
    // One id already taken: nothing of the write lands.
    let again = [
        job("j-new-a", "acme", 2_000, 0),
        job("j-step-1", "acme", 2_001, 0),
    ];
    let news: Vec<NewJob> = again
        .iter()
        .map(|j| NewJob {
            job: j,
            idem: None,
            events: &[],
            audit: None,
        })
        .collect();
    let err = store.create_all(&news).await.expect_err("a taken id");
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");
    assert_eq!(
        ok(store.get_job("j-new-a").await, "get"),
        None,
        "half a write landed"
    );
    // Too many at once is refused before anything is written.
    let many: Vec<JobRecord> = (0..=tuneplane_core::store::MAX_CREATE_ALL)
        .map(|i| job(&format!("j-many-{i}"), "acme", 3_000, 0))
        .collect();
    let news: Vec<NewJob> = many
        .iter()
        .map(|j| NewJob {
            job: j,
            idem: None,
            events: &[],
            audit: None,
        })
        .collect();
    assert!(store.create_all(&news).await.is_err());
    assert_eq!(ok(store.get_job("j-many-0").await, "get"), None);
}

pub async fn array_and_dependency_fields_round_trip(store: Store) {
    use tuneplane_core::array::{ArrayChild, ArrayRole};
    let mut parent = job("j-arr", "acme", 1_000, 0);
    parent.spec.array = Some(tuneplane_core::spec::ArraySpec {
        size: 3,
        parallelism: Some(2),
    });
    parent.array = Some(ArrayRole::Parent(Default::default()));
    let created = ok(store.create_job(&parent, None).await, "create")
        .record()
        .clone();
    let mut next = created.clone();
    if let Some(ArrayRole::Parent(book)) = &mut next.array {
        book.created = 3;
        book.counts.running = 1;
        book.counts.succeeded = 2;
    }
    let stored = ok(store.update_job(&next).await, "update");
    let read = ok(store.get_job("j-arr").await, "get").expect("stored");
    assert_eq!(read, stored);
    assert_eq!(read.array_parent().map(|b| b.counts.succeeded), Some(2));
    let mut child = job("j-arr-1", "acme", 1_000, 0);
    child.spec = read.spec.clone();
    child.spec.depends_on = vec![tuneplane_core::spec::Dependency {
        job: "j-prep".into(),
        when: tuneplane_core::spec::DependencyWhen::Ended,
        n_to_n: false,
    }];
    child.array = Some(ArrayRole::Child(ArrayChild {
        parent: "j-arr".parse().unwrap(),
        index: 1,
    }));
    let created = ok(store.create_job(&child, None).await, "create child")
        .record()
        .clone();
    let read = ok(store.get_job("j-arr-1").await, "get").expect("stored");
    assert_eq!(read, created);
    assert_eq!(read.array_child().map(|c| c.index), Some(1));
    assert_eq!(read.spec.depends_on.len(), 1);
}
