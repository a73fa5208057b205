//! Array jobs end to end on the executing dev stack (kubesim runs the pods on this machine),
//! through the HTTP API and the CLI as a user would: `examples/sweep` (6 CPU children,
//! `parallelism: 2`, each printing its index) runs with never more than 2 children admitted or
//! running at once, all 6 end SUCCEEDED with their own index in their logs, and `tuneplane jobs`
//! shows the array as one line `6/6 succeeded`; a stop of a running 6-child array ends its
//! running children STOPPED and its queued ones STOPPED without ever starting.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::time::{Duration, Instant};

use serde_json::Value;
use stack_support::{archived_logs, examples, stop, submit_dir, submit_example, wait_until};
use tuneplane::client::Api;
use tuneplane_core::array::child_id;
use tuneplane_core::job::{JobRecord, JobState, PendingReason};

mod cli_support;
mod stack_support;

/// Every child of array `parent` as listed with `children=true`.
async fn children(api: &Api, parent: &str) -> Vec<JobRecord> {
    let page: Value = api.get("/jobs?limit=1000&children=true").await.unwrap();
    let all: Vec<JobRecord> = serde_json::from_value(page["jobs"].clone()).unwrap();
    let mut kids: Vec<JobRecord> = all
        .into_iter()
        .filter(|j| j.array_child().is_some_and(|c| c.parent == parent))
        .collect();
    kids.sort_by_key(|j| j.array_child().map(|c| c.index));
    kids
}

/// The most children of `kids` that were admitted or running at one instant, from their clocks
/// (admission to end).
fn most_at_once(kids: &[JobRecord]) -> usize {
    let spans: Vec<(i64, i64)> = kids
        .iter()
        .filter_map(|k| Some((k.admitted_at_ms?, k.finished_at_ms.unwrap_or(i64::MAX))))
        .collect();
    spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_array_runs_its_children_at_most_parallelism_at_once_and_summarises_them() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(tuneplane::dev::Backend::Embedded, dir.path()).await;
    let parent = submit_example(&api, "sweep").await;
    assert!(parent.is_array_parent(), "{parent:?}");
    assert_eq!(parent.array_size(), Some(6));

    // Watch while it runs: never more than 2 children admitted or running.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut most = 0;
    let mut saw_held = false;
    loop {
        let kids = children(&api, &parent.id).await;
        let holding = kids
            .iter()
            .filter(|k| matches!(k.state, JobState::Admitted | JobState::Running))
            .count();
        most = most.max(holding);
        saw_held |= kids.iter().any(|k| {
            k.pending
                .as_ref()
                .is_some_and(|p| p.reason == PendingReason::ArrayParallelism)
        });
        let now: JobRecord = api.get(&format!("/jobs/{}", parent.id)).await.unwrap();
        if now.is_terminal() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the array did not end in 240 s: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(most <= 2, "{most} children at once");
    assert!(saw_held, "no child waited with ArrayParallelism");

    let done: JobRecord = api.get(&format!("/jobs/{}", parent.id)).await.unwrap();
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    let book = done.array_parent().unwrap();
    assert_eq!(book.counts.summary(6), "6/6 succeeded");
    assert_eq!(book.created, 6);
    let kids = children(&api, &parent.id).await;
    assert_eq!(kids.len(), 6);
    assert!(most_at_once(&kids) <= 2, "clocks overlap: {kids:?}");
    for (i, kid) in kids.iter().enumerate() {
        assert_eq!(kid.id, child_id(&parent.id, i as u32));
        assert_eq!(kid.state, JobState::Succeeded, "{kid:?}");
        assert_eq!(kid.capsule_sha256, parent.capsule_sha256, "one capsule");
        let logs: String = archived_logs(&api, &kid.id)
            .await
            .into_iter()
            .map(|(_, text)| text)
            .collect();
        assert!(logs.contains(&format!("child {i} of 6")), "{i}: {logs}");
        for other in (0..6).filter(|o| *o != i) {
            assert!(
                !logs.contains(&format!("child {other} of 6")),
                "{i}: {logs}"
            );
        }
    }

    // The CLI: one line for the array, its children with --children, a child's logs by index.
    let key = stack.api_key.clone();
    let url = stack.api_url.clone();
    let listed = cli_support::ok(&cli_support::client(&url, &key, "jobs", &[]).await);
    let lines: Vec<&str> = listed.lines().filter(|l| l.contains("sweep")).collect();
    assert_eq!(lines.len(), 1, "{listed}");
    assert!(lines[0].contains("6/6 succeeded"), "{listed}");
    let all = cli_support::ok(&cli_support::client(&url, &key, "jobs", &["--children"]).await);
    assert_eq!(
        all.lines().filter(|l| l.contains("sweep")).count(),
        7,
        "{all}"
    );
    let logs = cli_support::ok(
        &cli_support::client(&url, &key, "logs", &[&parent.id, "--index", "4"]).await,
    );
    assert!(logs.contains("child 4 of 6"), "{logs}");
    let bare = cli_support::client(&url, &key, "logs", &[&parent.id]).await;
    assert!(!bare.status.success());
    let said = cli_support::text(&bare.stderr);
    assert!(said.contains("--index"), "{said}");
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_an_array_stops_its_running_children_and_never_starts_the_queued_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(tuneplane::dev::Backend::Embedded, dir.path()).await;
    // Children that run long enough to be stopped while they run.
    let spec = std::fs::read_to_string(examples().join("sweep/tuneplane.yaml"))
        .unwrap()
        .replace(
            "entrypoint: python3 sweep.py",
            "entrypoint: python3 sweep.py && sleep 120",
        );
    let parent = submit_dir(&api, &examples().join("sweep"), &spec).await;
    // Two children run.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let kids = children(&api, &parent.id).await;
        let running = kids.iter().filter(|k| k.state == JobState::Running).count();
        if running == 2 && kids.len() == 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "two children never ran: {kids:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop(&api, &parent.id).await;
    let done = wait_until(&api, &parent.id, 180, "stopped", |j| j.is_terminal()).await;
    assert_eq!(done.state, JobState::Stopped, "{done:?}");
    let kids = children(&api, &parent.id).await;
    let ran: Vec<_> = kids.iter().filter(|k| k.running_at_ms.is_some()).collect();
    assert_eq!(ran.len(), 2, "{kids:?}");
    for kid in &kids {
        assert_eq!(kid.state, JobState::Stopped, "{kid:?}");
    }
    for kid in kids.iter().filter(|k| k.running_at_ms.is_none()) {
        assert_eq!(kid.admitted_at_ms, None, "a queued child started: {kid:?}");
    }
    assert_eq!(
        done.array_parent().unwrap().counts.summary(6),
        "0/6 succeeded, 6 stopped"
    );
    stack.shutdown().await;
}
