//! Job-event callbacks end to end on kubesim: every state change reaches a receiver that fails
//! its first deliveries, once per event id after deduplication, in order and signed; a tenant's
//! subscription gets what it asked for; deliveries to internal addresses are refused before any
//! connection, with the reason on the job; and a sender killed at random points loses nothing.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod receiver;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use receiver::{Policy, Receiver, by_job};
use tuneplane_core::callback::outbox::{event_id, kind_of};
use tuneplane_core::callback::{EventKind, Format, Notify, Subscription};
use tuneplane_core::job::{EventSource, JobEvent, JobRecord, JobState};
use tuneplane_core::store::{JobStore, NewJob};
use tuneplane_reconciler::callback::{CallbackMetrics, CallbackSettings, Resolve, Sender};

/// Stores `job` with its submission event, as the submit service does (the `queued` callback).
async fn submit(jobs: &dyn JobStore, job: &JobRecord) {
    let event = platform_event(job.submitted_at_ms, "submitted", "Submitted");
    jobs.create(NewJob {
        job,
        idem: None,
        events: &[event],
        audit: None,
    })
    .await
    .expect("create");
}

fn platform_event(at_ms: i64, key: &str, reason: &str) -> JobEvent {
    JobEvent {
        at_ms,
        key: key.into(),
        source: EventSource::Platform,
        kind: "Normal".into(),
        reason: reason.into(),
        message: format!("{reason} (test)"),
        object: None,
    }
}

fn notify(url: String) -> Vec<Notify> {
    vec![Notify {
        url,
        events: EventKind::ALL.to_vec(),
        format: Format::Json,
    }]
}

async fn outbox_empty(jobs: &dyn JobStore, secs: u64) {
    wait_for(secs, "the outbox drained", || async {
        jobs.list_outbox(10).await.ok()?.is_empty().then_some(())
    })
    .await;
}

fn types(got: &[receiver::Got]) -> Vec<String> {
    got.iter()
        .map(|g| g.json()["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Tenant acme's subscription `sub_ends` to the ends of all its jobs, sent to `url` in `format`.
fn ends_subscription(url: String, format: Format) -> Subscription {
    Subscription {
        id: "sub_ends".into(),
        tenant: "acme".parse().unwrap(),
        url,
        events: EventKind::TERMINAL.to_vec(),
        format,
        created_ms: 0,
        created_by: "k-test".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_state_change_arrives_once_in_order_and_signed_although_the_first_three_fail() {
    let h = start(running_for(Duration::from_millis(600))).await;
    let rx = Receiver::start(
        Policy {
            fail_first: 3,
            ..Policy::default()
        },
        7,
    )
    .await;
    // A subscription of the tenant for the ends of all its jobs, in Slack's shape.
    h.jobs
        .put_subscription(&ends_subscription(rx.url("slack"), Format::Slack))
        .await
        .unwrap();
    let mut config = test_config("callbacks");
    config.callbacks = CallbackSettings {
        allow_loopback: true,
        public_url: Some("https://tp.example.com".into()),
        interval: Duration::from_millis(100),
        ..CallbackSettings::default()
    };
    let (task, ctx) = h.reconciler(config).await;
    let mut ids = Vec::new();
    for mut job in [
        cpu_job("cb-cpu"),
        finishing(gpu_job("cb-gpu", "h200", 1, 8)),
    ] {
        job.spec.notify = notify(rx.url("hook"));
        submit(h.jobs.as_ref(), &job).await;
        ids.push(job.id.clone());
    }
    for id in &ids {
        h.wait_job(60, id, "terminal", |j| j.is_terminal()).await;
    }
    outbox_empty(h.jobs.as_ref(), 60).await;
    task.abort();

    let secret = h
        .jobs
        .get_callback_secret(&"acme".parse().unwrap())
        .await
        .unwrap()
        .expect("secret made");
    let all = rx.got();
    assert!(
        all.iter().take(3).all(|g| g.status == 500),
        "the receiver failed the first three"
    );
    // Retried deliveries to one target carry the same event id and the same body.
    let mut bodies: HashMap<(String, String), Vec<u8>> = HashMap::new();
    for g in &all {
        let first = bodies
            .entry((g.path.clone(), g.id.clone()))
            .or_insert_with(|| g.body.clone());
        assert_eq!(first, &g.body, "a retry of {} changed its body", g.id);
    }
    let accepted = rx.accepted_once(&secret.secret);
    let hooks: Vec<receiver::Got> = accepted
        .iter()
        .filter(|g| g.path == "/hook")
        .cloned()
        .collect();
    let per_job = by_job(&hooks);
    for id in &ids {
        let job = h.job(id).await;
        let got = per_job.get(id.as_str()).cloned().unwrap_or_default();
        // The changes the job went through, as written with them: its platform events (a job
        // that ends between two passes goes from ADMITTED straight to its end).
        let mut changes: Vec<(i64, String, String)> = h
            .jobs
            .list_events(id, &tuneplane_core::store::EventQuery::first(100))
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(|e| kind_of(e).map(|k| (e.at_ms, event_id(id, &e.key), format!("job.{k}"))))
            .collect();
        changes.sort();
        let want_types: Vec<String> = changes.iter().map(|c| c.2.clone()).collect();
        let end = format!("job.{}", job.state.as_str().to_ascii_lowercase());
        assert_eq!(want_types.first().map(String::as_str), Some("job.queued"));
        assert_eq!(want_types.get(1).map(String::as_str), Some("job.admitted"));
        assert_eq!(want_types.last(), Some(&end));
        assert_eq!(
            types(&got),
            want_types,
            "job {id}: every state change, once, in order"
        );
        let expected: Vec<String> = changes.iter().map(|c| c.1.clone()).collect();
        let got_ids: Vec<String> = got.iter().map(|g| g.id.to_string()).collect();
        assert_eq!(got_ids, expected, "event ids are the platform events'");
        let last = got.last().unwrap();
        let body = last.json();
        assert_eq!(body["id"], last.id.as_str());
        assert_eq!(body["job"]["state"], job.state.as_str());
        assert_eq!(body["job"]["finished_at_ms"], job.finished_at_ms.unwrap());
        assert_eq!(
            body["links"]["console"],
            format!("https://tp.example.com/console/jobs/{id}")
        );
        let late = last.at_ms - job.finished_at_ms.unwrap();
        assert!(
            late < 30_000,
            "job {id}: the terminal event arrived {late} ms after the change"
        );
    }
    // The subscription: the two ends only, as Slack messages.
    let slack: Vec<&receiver::Got> = accepted.iter().filter(|g| g.path == "/slack").collect();
    assert_eq!(slack.len(), 2, "{slack:?}");
    for g in slack {
        let text = g.json()["text"].as_str().unwrap().to_owned();
        assert!(text.starts_with("TunePlane job *t* (`cb-"), "{text}");
        assert!(text.contains(" succeeded"), "{text}");
    }
    assert_eq!(
        ctx.metrics.callbacks.delivered(),
        all.iter().filter(|g| g.status == 200).count() as u64,
        "every accepted delivery counted once"
    );
}

/// An array reports through its children: each child's callbacks name it, its index and its
/// parent, and the parent, summarised from them, sends one end when the last child ended (with
/// the counts), never one per child, to its own callback and to a subscription of the ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_array_child_calls_back_and_its_parent_sends_one_terminal_callback() {
    use tuneplane_core::array::ArrayRole;
    use tuneplane_core::spec::ArraySpec;
    let h = start(running_for(Duration::from_millis(300))).await;
    let rx = Receiver::start(Policy::default(), 11).await;
    h.jobs
        .put_subscription(&ends_subscription(rx.url("ends"), Format::Json))
        .await
        .unwrap();
    let mut config = test_config("callbacks-array");
    config.callbacks = CallbackSettings {
        allow_loopback: true,
        interval: Duration::from_millis(100),
        ..CallbackSettings::default()
    };
    let (task, _ctx) = h.reconciler(config).await;
    let mut parent = cpu_job("cb-sweep");
    parent.spec.array = Some(ArraySpec {
        size: 3,
        parallelism: Some(2),
    });
    parent.array = Some(ArrayRole::Parent(Default::default()));
    parent.spec.notify = notify(rx.url("hook"));
    submit(h.jobs.as_ref(), &parent).await;
    let ended = h
        .wait_job(90, &parent.id, "terminal", |j| j.is_terminal())
        .await;
    assert_eq!(ended.state, JobState::Succeeded);
    outbox_empty(h.jobs.as_ref(), 60).await;
    // A later pass must not report the parent's end again.
    tokio::time::sleep(Duration::from_millis(600)).await;
    outbox_empty(h.jobs.as_ref(), 10).await;
    task.abort();

    let secret = h
        .jobs
        .get_callback_secret(&"acme".parse().unwrap())
        .await
        .unwrap()
        .expect("secret made");
    let accepted = rx.accepted_once(&secret.secret);
    for path in ["/hook", "/ends"] {
        let on_path: Vec<receiver::Got> = accepted
            .iter()
            .filter(|g| g.path == path)
            .cloned()
            .collect();
        let per_job = by_job(&on_path);
        let parents_ends: Vec<serde_json::Value> = per_job
            .get(parent.id.as_str())
            .into_iter()
            .flatten()
            .map(receiver::Got::json)
            .filter(|b| b["type"] != "job.queued")
            .collect();
        assert_eq!(
            parents_ends.len(),
            1,
            "{path}: the parent ends once: {parents_ends:?}"
        );
        let end = &parents_ends[0];
        assert_eq!(end["type"], "job.succeeded", "{end}");
        assert_eq!(end["job"]["array"]["size"], 3, "{end}");
        assert_eq!(end["job"]["array"]["counts"]["succeeded"], 3, "{end}");
        for index in 0..3u32 {
            let id = format!("{}-{index}", parent.id);
            let got: Vec<serde_json::Value> = per_job
                .get(&id)
                .into_iter()
                .flatten()
                .map(receiver::Got::json)
                .collect();
            let ends: Vec<&serde_json::Value> = got
                .iter()
                .filter(|b| b["type"] == "job.succeeded")
                .collect();
            assert_eq!(ends.len(), 1, "{path}: child {id} ends once: {got:?}");
            assert_eq!(ends[0]["job"]["array"]["parent"], parent.id.as_str());
            assert_eq!(ends[0]["job"]["array"]["index"], index);
            if path == "/hook" {
                // The child's own callback (its spec's, the parent's) hears every change.
                assert_eq!(
                    got.first().map(|b| b["type"].clone()),
                    Some(serde_json::json!("job.queued")),
                    "{got:?}"
                );
            }
        }
    }
}

/// A resolver with a fixed table (names a test made up; nothing is looked up).
struct Table(Vec<(&'static str, &'static str)>);

#[async_trait::async_trait]
impl Resolve for Table {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        self.0
            .iter()
            .filter(|(name, _)| *name == host)
            .map(|(_, ip)| Ok(SocketAddr::new(ip.parse().unwrap(), port)))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_to_internal_addresses_are_refused_before_connecting_with_the_reason_on_the_job()
{
    let dir = tempfile::tempdir().unwrap();
    let jobs: Arc<dyn JobStore> =
        Arc::new(tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap());
    let mut job = cpu_job("cb-internal");
    job.spec.notify = [
        "https://hooks.internal.test/x",
        "https://metadata.internal.test/latest",
        "https://loopback.internal.test/x",
    ]
    .iter()
    .flat_map(|u| notify((*u).to_owned()))
    .collect();
    submit(jobs.as_ref(), &job).await;
    let metrics = Arc::new(CallbackMetrics::default());
    let table = Table(vec![
        ("hooks.internal.test", "10.1.2.3"),
        ("metadata.internal.test", "169.254.169.254"),
        ("loopback.internal.test", "127.0.0.1"),
    ]);
    let sender = Sender::with_resolver(
        jobs.clone(),
        CallbackSettings::default(),
        metrics.clone(),
        Arc::new(table),
    );
    // Fan-out, then the attempts: each refused for good.
    let tick = sender.tick().await.unwrap();
    assert_eq!((tick.attempts, tick.finished), (3, 1), "{tick:?}");
    assert!(jobs.list_outbox(10).await.unwrap().is_empty());
    assert_eq!(metrics.given_up(), 3);
    assert_eq!(metrics.delivered(), 0);
    let events = jobs
        .list_events("cb-internal", &tuneplane_core::store::EventQuery::first(50))
        .await
        .unwrap()
        .items;
    let given_up: Vec<String> = events
        .iter()
        .filter(|e| e.reason == "CallbackGivenUp")
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(given_up.len(), 3, "{given_up:#?}");
    for words in [
        "resolved to 10.1.2.3: 10.1.2.3 is private (10.0.0.0/8)",
        "resolved to 169.254.169.254: 169.254.169.254 is the cloud metadata service",
        "resolved to 127.0.0.1: 127.0.0.1 is this machine (loopback",
    ] {
        assert!(
            given_up.iter().any(|m| m.contains(words)),
            "no event says {words:?}: {given_up:#?}"
        );
    }
}

/// Writes a job's life (queued, admitted, running, succeeded) straight to the store, each
/// change with its state event, as the reconciler does.
async fn live_a_life(jobs: &dyn JobStore, id: &str, notify_to: Vec<Notify>) -> Vec<String> {
    let mut job = cpu_job(id);
    job.spec.notify = notify_to;
    submit(jobs, &job).await;
    let mut job = jobs.get_job(id).await.unwrap().unwrap();
    let mut keys = vec!["submitted".to_owned()];
    for state in [JobState::Admitted, JobState::Running, JobState::Succeeded] {
        let now = tuneplane_core::clock::now_ms();
        job.transition(state, now).unwrap();
        let key = format!("state-{state}");
        let event = platform_event(now, &key, state.as_str());
        job = jobs.update_job_with_events(&job, &[event]).await.unwrap();
        keys.push(key);
    }
    keys.iter().map(|k| event_id(id, k)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_sender_at_random_points_loses_no_event_and_keeps_each_jobs_order() {
    const JOBS: usize = 100;
    const MAX_KILLS: usize = 200;
    let seed = scale_seed();
    let dir = tempfile::tempdir().unwrap();
    let jobs: Arc<dyn JobStore> =
        Arc::new(tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap());
    let rx = Receiver::start(
        Policy {
            fail_first: 0,
            fail_one_in: 5,
            max_delay: Duration::from_millis(30),
        },
        seed,
    )
    .await;
    let mut expected = HashMap::new();
    for i in 0..JOBS {
        let id = format!("cbk{i:03}");
        let ids = live_a_life(jobs.as_ref(), &id, notify(rx.url("hook"))).await;
        expected.insert(id, ids);
    }
    let settings = CallbackSettings {
        allow_loopback: true,
        interval: Duration::from_millis(20),
        ..CallbackSettings::default()
    };
    let mut rng = tuneplane_kubesim::SplitMix64::new(seed);
    let started = tokio::time::Instant::now();
    let mut kills = 0;
    while kills < MAX_KILLS && started.elapsed() < Duration::from_secs(20) {
        if jobs.list_outbox(1).await.unwrap().is_empty() {
            break;
        }
        let sender = Sender::new(
            jobs.clone(),
            settings.clone(),
            Arc::new(CallbackMetrics::default()),
        );
        let task = tokio::spawn(async move { sender.run(None).await });
        tokio::time::sleep(Duration::from_millis(rng.range(5, 120))).await;
        task.abort();
        let _ = task.await;
        kills += 1;
    }
    // One sender, undisturbed, finishes what is left (retries wait up to 20 s).
    let sender = Sender::new(jobs.clone(), settings, Arc::new(CallbackMetrics::default()));
    let last = tokio::spawn(async move { sender.run(None).await });
    outbox_empty(jobs.as_ref(), 90).await;
    last.abort();
    println!(
        "callbacks: seed {seed}: {kills} sender kills, {} requests",
        rx.got().len()
    );
    assert!(
        kills >= 10,
        "only {kills} kills: the test did not test much"
    );

    let secret = jobs
        .get_callback_secret(&"acme".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    let per_job = by_job(&rx.accepted_once(&secret.secret));
    for (id, ids) in &expected {
        let got: Vec<String> = per_job
            .get(id)
            .map(|g| g.iter().map(|g| g.id.clone()).collect())
            .unwrap_or_default();
        assert_eq!(&got, ids, "job {id}: every event once, in order");
    }
}

/// The kill schedule's seed (`TUNEPLANE_CRASH_SEED` replays one).
fn scale_seed() -> u64 {
    let seed = std::env::var("TUNEPLANE_CRASH_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0xC0FF_EE00);
    println!("callbacks: seed {seed} (TUNEPLANE_CRASH_SEED={seed} replays the kill schedule)");
    seed
}
