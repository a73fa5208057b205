//! A failed callback delivery's error, which goes to the reconciler's log, the outbox and the
//! job's events, never repeats the URL's query: it may hold the receiver's token.

// Test code: an unwrapped error is a failed test that names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use tuneplane_core::callback::{EventKind, Format, Notify};
use tuneplane_core::job::{EventSource, JobEvent};
use tuneplane_core::store::{JobStore, NewJob};
use tuneplane_reconciler::callback::{CallbackMetrics, CallbackSettings, Sender};

#[tokio::test]
async fn a_receiver_that_cannot_be_reached_leaves_no_query_token_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let jobs: Arc<dyn JobStore> =
        Arc::new(tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap());
    // A loopback port nothing listens on: the connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut job = common::cpu_job("cb-unreachable");
    job.spec.notify = vec![Notify {
        url: format!("http://127.0.0.1:{port}/hook?token=SECRET-TOKEN"),
        events: EventKind::ALL.to_vec(),
        format: Format::Json,
    }];
    let submitted = JobEvent {
        at_ms: job.submitted_at_ms,
        key: "submitted".into(),
        source: EventSource::Platform,
        kind: "Normal".into(),
        reason: "Submitted".into(),
        message: "Submitted (test)".into(),
        object: None,
    };
    jobs.create(NewJob {
        job: &job,
        idem: None,
        events: &[submitted],
        audit: None,
    })
    .await
    .unwrap();
    let settings = CallbackSettings {
        allow_loopback: true,
        ..CallbackSettings::default()
    };
    let sender = Sender::new(jobs.clone(), settings, Arc::new(CallbackMetrics::default()));

    let tick = sender.tick().await.unwrap();

    assert_eq!(tick.attempts, 1, "{tick:?}");
    let entries = jobs.list_outbox(10).await.unwrap();
    let errors: Vec<String> = entries
        .iter()
        .flat_map(|e| e.deliveries.iter().flatten())
        .filter_map(|d| d.last_error.clone())
        .collect();
    assert_eq!(errors.len(), 1, "{entries:#?}");
    assert!(errors[0].starts_with("could not connect"), "{}", errors[0]);
    assert!(!errors[0].contains("SECRET-TOKEN"), "{}", errors[0]);
}
