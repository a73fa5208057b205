//! The job-store contract against DynamoDB (moto_server on 127.0.0.1, see `contract::aws_env`),
//! plus the request count of one job's lifecycle.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract;

use std::collections::BTreeMap;
use std::sync::Arc;

use contract::aws_env::{sdk_config, unique_name};
use contract::fixtures::{event, idem, job, ok};
use contract::job_store_contract;
use tuneplane_core::job::JobState;
use tuneplane_core::store::prelude::*;
use tuneplane_core::store::{EventQuery, JobStore, NewJob};
use tuneplane_stores::DynamoJobStore;
use tuneplane_stores::aws::{RequestCounter, dynamodb_client};
use tuneplane_stores::dynamo::table::create_table;

async fn store_with(counter: Option<RequestCounter>) -> DynamoJobStore {
    let config = sdk_config().await;
    let client = dynamodb_client(&config, counter);
    let table = unique_name("tp-jobs");
    ok(create_table(&client, &table).await, "create table");
    DynamoJobStore::new(client, table)
}

async fn make() -> (Arc<dyn JobStore>, ()) {
    (Arc::new(store_with(None).await), ())
}

job_store_contract!(make);

#[tokio::test]
async fn creating_the_table_twice_is_harmless() {
    let config = sdk_config().await;
    let client = dynamodb_client(&config, None);
    let table = unique_name("tp-jobs");
    ok(create_table(&client, &table).await, "first");
    ok(create_table(&client, &table).await, "second");
}

/// Submit → admit → running → succeeded, with events at each step, as the functions and the
/// reconciler perform it. The count is the running cost of one job.
#[tokio::test]
async fn one_job_lifecycle_costs_five_writes_plus_the_shared_active_scan() {
    let counter = RequestCounter::new();
    let store = store_with(Some(counter.clone())).await;
    counter.reset();

    // Submit (functions): job, idempotency key and the submission event in one transaction.
    let idem = idem("req-1", "a", 86_400);
    let created = ok(
        store
            .create(NewJob {
                job: &job("j-life", "acme", 1_000, 0),
                idem: Some(&idem),
                events: &[event(1_000, "submitted", "submitted")],
                audit: None,
            })
            .await,
        "submit",
    );
    let submit = counter.snapshot();

    // One reconciler pass reads the active index once for all jobs (one Query per shard).
    counter.reset();
    let active = ok(store.list_active().await, "list active");
    assert_eq!(active.len(), 1);
    let scan = counter.snapshot();

    counter.reset();
    // The reconciler writes each state change with its event in one transaction.
    let mut record = created.record().clone();
    ok(record.transition(JobState::Admitted, 2_000), "admit");
    let admitted = [event(2_000, "state-ADMITTED", "admitted")];
    let mut record = ok(
        store.update_job_with_events(&record, &admitted).await,
        "admit write",
    );
    // Kubernetes warnings are copied as a batch.
    let warnings = [
        event(2_500, "uid-1", "pulling"),
        event(2_600, "uid-2", "pulled"),
    ];
    ok(store.append_events("j-life", &warnings).await, "events");
    ok(record.transition(JobState::Running, 3_000), "run");
    let running = [event(3_000, "state-RUNNING", "running")];
    let mut record = ok(
        store.update_job_with_events(&record, &running).await,
        "run write",
    );
    ok(record.transition(JobState::Succeeded, 4_000), "succeed");
    record.logs_key = Some("logs/j-life/logs.tar.gz".into());
    let succeeded = [event(4_000, "state-SUCCEEDED", "succeeded")];
    ok(
        store.update_job_with_events(&record, &succeeded).await,
        "terminal write",
    );
    let follow = counter.snapshot();

    let map = |pairs: &[(&str, u64)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(submit, map(&[("TransactWriteItems", 1)]));
    assert_eq!(scan, map(&[("Query", 4)]));
    assert_eq!(
        follow,
        map(&[("BatchWriteItem", 1), ("TransactWriteItems", 3)])
    );
    let per_job: u64 = submit.values().chain(follow.values()).sum();
    assert_eq!(per_job, 5);
    let events = ok(
        store.list_events("j-life", &EventQuery::first(20)).await,
        "events",
    )
    .items;
    assert_eq!(events.len(), 6, "{events:?}");
    println!(
        "requests per job lifecycle: submit {submit:?}, follow {follow:?}; per reconciler pass: {scan:?}"
    );
    assert!(
        ok(store.list_active().await, "list active").is_empty(),
        "terminal job left the active index"
    );
}

/// A playground item exactly as the previous version wrote it (no `pod_namespace`, no `status`
/// in its body, a `pg-pg-` pod name) still decodes, lists, and takes the new fields on update.
#[tokio::test]
async fn a_playground_item_of_the_previous_version_decodes_and_updates() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use tuneplane_core::store::{PlaygroundState, PlaygroundStatus};
    let config = sdk_config().await;
    let client = dynamodb_client(&config, None);
    let table = unique_name("tp-jobs");
    ok(create_table(&client, &table).await, "create table");
    let body = r#"{"id":"pg-0a1b","tenant":"acme","model":"qwen","series":"l40s","gpus":1,"pod_name":"pg-pg-0a1b","created_at_ms":1,"expires_at_ms":9999999999999,"version":1}"#;
    let s = |v: &str| AttributeValue::S(v.to_owned());
    ok(
        client
            .put_item()
            .table_name(&table)
            .item("pk", s("PG#pg-0a1b"))
            .item("sk", s("PG"))
            .item("body", s(body))
            .item("version", AttributeValue::N("1".into()))
            .item("tenant", s("acme"))
            .item("apk", s("PLAYGROUNDS"))
            .item("ask", s("pg-0a1b"))
            .send()
            .await
            .map(|_| ()),
        "raw put",
    );
    let store = DynamoJobStore::new(client, table);
    let old = ok(store.get_playground("pg-0a1b").await, "get old").expect("old playground missing");
    assert_eq!(old.pod_name.as_deref(), Some("pg-pg-0a1b"));
    assert_eq!(
        (old.pod_namespace.clone(), old.status.clone()),
        (None, None)
    );
    assert_eq!(
        ok(store.list_playgrounds().await, "list"),
        vec![old.clone()]
    );
    let mut next = old;
    next.status = Some(PlaygroundStatus {
        state: PlaygroundState::Pending,
        reason: Some("ImagePull".into()),
        message: "pod pg-pg-0a1b: ErrImagePull: not found".into(),
        since_ms: 2,
        updated_ms: 2,
    });
    let stored = ok(store.put_playground(&next).await, "update old");
    assert_eq!(stored.version, 2);
    assert_eq!(
        ok(store.get_playground("pg-0a1b").await, "get updated"),
        Some(stored)
    );
}

/// Quotas live in the table, not in the client: a new client (a restarted process) reads them.
#[tokio::test]
async fn quotas_survive_a_new_client() {
    let config = sdk_config().await;
    let table = unique_name("tp-jobs");
    {
        let client = dynamodb_client(&config, None);
        ok(create_table(&client, &table).await, "create table");
        let store = DynamoJobStore::new(client, table.clone());
        let mut quota = tuneplane_core::quota::TenantQuota::unlimited(&"acme".parse().unwrap());
        quota.set_gpu_limit("h200", 16, false);
        ok(store.put_quota(&quota).await, "put quota");
    }
    let store = DynamoJobStore::new(dynamodb_client(&sdk_config().await, None), table);
    let quotas = ok(store.list_quotas().await, "list quotas");
    assert_eq!(quotas.len(), 1);
    assert_eq!(quotas[0].series["h200"].gpus, 16);
}
