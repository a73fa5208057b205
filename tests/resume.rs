//! Failures handled knowingly, end to end on the executing dev stack (kubesim runs the pods on
//! this machine): `examples/resume` checkpoints every few seconds; its node is deleted mid-run;
//! the reconciler sees the infrastructure's loss, archives attempt 1, queues the job again as
//! attempt 2, which downloads the newest complete checkpoint, resumes from its step and ends
//! SUCCEEDED with its outputs. Beside it: an entrypoint that exits 1 fails once and is not
//! retried, a stopped job is not retried, a job losing more nodes than its retries allow ends
//! FAILED with the infrastructure cause. (Grants themselves: the functions' API suite, `grants`.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::time::{Duration, Instant};

use serde_json::Value;
use stack_support::{
    all_text, attempt_logs, checkpoint_steps, examples, last_step, resume_spec, resumed_step, stop,
    submit_dir, wait_until,
};
use tuneplane::client::Api;
use tuneplane::dev::{Backend, Stack};
use tuneplane_core::job::{FailureCause, FailureReason, JobRecord, JobState};

mod stack_support;

fn node_of(job: &JobRecord) -> String {
    job.placements[0].nodes[0].clone()
}

/// Waits until job `id` runs and has at least one complete checkpoint; its record then.
async fn running_with_a_checkpoint(api: &Api, id: &str) -> JobRecord {
    let job = wait_until(api, id, 120, "running", |j| j.state == JobState::Running).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while checkpoint_steps(api, id).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "no checkpoint of {id} within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    job
}

async fn delete_node(stack: &Stack, node: &str) {
    stack.sim.as_ref().unwrap().delete_node(node).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_that_loses_its_node_is_requeued_resumes_from_its_newest_checkpoint_and_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, dir.path()).await;
    let spec = resume_spec(
        r#"{STEPS: "40", STEP_SECONDS: "0.5", CHECKPOINT_SECONDS: "5"}"#,
        "{infrastructure: 2, application: 0}",
    );
    let job = submit_dir(&api, &examples().join("resume"), &spec).await;
    let running = running_with_a_checkpoint(&api, &job.id).await;
    let node = node_of(&running);
    let before = checkpoint_steps(&api, &job.id).await;
    delete_node(&stack, &node).await;
    let lost_at = Instant::now();

    // Requeued as attempt 2 once the loss is visible, at its original place (same submission
    // time), with attempt 1 listed with its cause and evidence.
    let requeued = wait_until(&api, &job.id, 60, "requeued", |j| j.attempt == 2).await;
    eprintln!(
        "requeued {:?} after the node was deleted",
        lost_at.elapsed()
    );
    assert_eq!(requeued.submitted_at_ms, job.submitted_at_ms);
    let first = &requeued.attempts[0];
    assert_eq!(first.number, 1);
    assert_eq!(first.failure.reason, FailureReason::NodeLost);
    assert_eq!(first.failure.cause, FailureCause::Infrastructure);
    assert!(
        first
            .failure
            .evidence
            .contains(&format!("node/{node}: deleted")),
        "{first:?}"
    );
    assert!(first.logs_key.is_some(), "{first:?}");

    let done = wait_until(&api, &job.id, 120, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert_eq!(done.attempt, 2);
    assert_ne!(node_of(&done), node, "attempt 2 runs elsewhere");
    assert_eq!(done.attempts.len(), 1);

    // Both attempts' logs are archived, each its own.
    let one = all_text(&attempt_logs(&api, &job.id, 1).await);
    let two = all_text(&attempt_logs(&api, &job.id, 2).await);
    assert!(one.contains("attempt 1 starts from step 0"), "{one}");
    // Attempt 2 resumed from the newest checkpoint complete when the node went (or one the
    // dying attempt completed after the list above): at most one interval lost.
    let newest_before = *before.iter().max().unwrap();
    let resumed = resumed_step(&two, 2);
    assert!(
        resumed >= newest_before,
        "resumed {resumed} < {newest_before}"
    );
    let last_step_one = last_step(&one);
    assert!(
        last_step_one - resumed <= 10,
        "lost {} steps (one interval is 10)",
        last_step_one - resumed
    );
    assert!(!two.contains("starts from step 0"), "{two}");
    assert!(two.contains("done at step 40"), "{two}");

    // Its outputs are kept, and only the newest two checkpoints.
    let outputs: Value = api.get(&format!("/jobs/{}/outputs", job.id)).await.unwrap();
    let model = outputs["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["path"] == "model.json")
        .unwrap_or_else(|| panic!("{outputs}"));
    let bytes = reqwest::get(model["url"].as_str().unwrap())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["step"], 40);
    assert!(checkpoint_steps(&api, &job.id).await.len() <= 2);

    // The record's events tell the story.
    let events = stack_support::events(&api, &job.id).await;
    let requeue = events
        .iter()
        .find(|e| e.reason == "Requeued")
        .expect("a Requeued event");
    assert_eq!(requeue.kind, "Warning");
    assert!(requeue.message.contains("infrastructure"), "{requeue:?}");
    assert!(events.iter().any(|e| e.key == "a2-state-SUCCEEDED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn application_failures_stops_and_exhausted_retries_are_final() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, dir.path()).await;
    let failing = dir.path().join("failing");
    std::fs::create_dir_all(&failing).unwrap();
    std::fs::write(failing.join("fail.sh"), "echo failing; exit 1\n").unwrap();
    let fail = submit_dir(&api, &failing, "name: fails\nimage: python:3.12-slim\nentrypoint: bash fail.sh\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\n").await;

    // Stopped while running: STOPPED, never retried.
    let slow = resume_spec(
        r#"{STEPS: "600", STEP_SECONDS: "0.5", CHECKPOINT_SECONDS: "5"}"#,
        "{infrastructure: 0, application: 0}",
    );
    let stopped = submit_dir(&api, &examples().join("resume"), &slow).await;
    // No infrastructure retries: losing the node ends it.
    let fragile = submit_dir(&api, &examples().join("resume"), &slow).await;

    let failed = wait_until(&api, &fail.id, 120, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!(failed.state, JobState::Failed);
    let f = failed.failure.as_ref().unwrap();
    assert_eq!(
        (f.reason, f.cause, f.exit_code),
        (
            FailureReason::EntrypointFailed,
            FailureCause::Application,
            Some(1)
        )
    );
    assert_eq!((failed.attempt, failed.attempts.len()), (1, 0));

    running_with_a_checkpoint(&api, &stopped.id).await;
    stop(&api, &stopped.id).await;
    let s = wait_until(&api, &stopped.id, 120, "terminal", |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!((s.state, s.attempt), (JobState::Stopped, 1));
    assert_eq!(s.failure.as_ref().unwrap().cause, FailureCause::User);
    // What the entrypoint printed in its grace, after SIGTERM, is in the attempt's archive: the
    // archive followed the log until the pod ended.
    let archived = all_text(&attempt_logs(&api, &stopped.id, 1).await);
    assert!(
        archived.contains("SIGTERM at step") && archived.contains(": saving and stopping"),
        "no grace-time output in the stopped attempt's archive:\n{archived}"
    );

    let running = wait_until(&api, &fragile.id, 120, "running", |j| {
        j.state == JobState::Running
    })
    .await;
    delete_node(&stack, &node_of(&running)).await;
    let lost = wait_until(&api, &fragile.id, 60, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!((lost.state, lost.attempt), (JobState::Failed, 1));
    let f = lost.failure.as_ref().unwrap();
    assert_eq!(
        (f.reason, f.cause),
        (FailureReason::NodeLost, FailureCause::Infrastructure)
    );
    assert!(!f.evidence.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_two_node_ray_job_that_loses_a_node_resumes_as_attempt_two() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, dir.path()).await;
    let spec = resume_spec(
        r#"{STEPS: "40", STEP_SECONDS: "0.5", CHECKPOINT_SECONDS: "5"}"#,
        "{infrastructure: 2, application: 0}",
    )
    .replace(
        "  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}",
        "  - {name: main, series: h200, nodes: 2, gpus_per_node: 8}",
    )
    .replace("image: python:3.12-slim", "image: rayproject/ray:2.60.0");
    let job = submit_dir(&api, &examples().join("resume"), &spec).await;
    let running = running_with_a_checkpoint(&api, &job.id).await;
    assert_eq!(running.placements[0].nodes.len(), 2);
    // The worker's node (the second planned one) goes.
    let node = running.placements[0].nodes[1].clone();
    let before = checkpoint_steps(&api, &job.id).await;
    delete_node(&stack, &node).await;
    let requeued = wait_until(&api, &job.id, 60, "requeued", |j| j.attempt == 2).await;
    let first = &requeued.attempts[0];
    assert_eq!(
        (first.failure.reason, first.failure.cause),
        (FailureReason::NodeLost, FailureCause::Infrastructure)
    );
    let done = wait_until(&api, &job.id, 180, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!(
        (done.state, done.attempt),
        (JobState::Succeeded, 2),
        "{done:?}"
    );
    assert!(!done.placements[0].nodes.contains(&node));
    let two = all_text(&attempt_logs(&api, &job.id, 2).await);
    let resumed = resumed_step(&two, 2);
    assert!(resumed >= *before.iter().max().unwrap());
    assert!(two.contains("done at step 40"), "{two}");
    // Attempt 1's archive is its own and has the Ray pods of attempt 1.
    let one = attempt_logs(&api, &job.id, 1).await;
    assert!(
        one.iter()
            .any(|(p, _)| p.contains(&format!("tp-{}-", job.id)) && !p.contains("-a2-")),
        "{:?}",
        one.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupted_job_saves_on_sigterm_and_the_next_attempt_starts_from_that_save() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(Backend::Embedded, dir.path()).await;
    let spec = resume_spec(
        r#"{STEPS: "60", STEP_SECONDS: "0.5", CHECKPOINT_SECONDS: "5"}"#,
        "{infrastructure: 2, application: 0}",
    )
    .replace("grace_seconds: 30", "grace_seconds: 8");
    let job = submit_dir(&api, &examples().join("resume"), &spec).await;
    let running = running_with_a_checkpoint(&api, &job.id).await;
    let node = node_of(&running);
    // A spot reclaim is announced on the node (Karpenter's disruption taint).
    stack
        .sim
        .as_ref()
        .unwrap()
        .taint_node(
            &node,
            serde_json::json!({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}),
        )
        .unwrap();
    let requeued = wait_until(&api, &job.id, 60, "requeued", |j| j.attempt == 2).await;
    let first = &requeued.attempts[0];
    assert_eq!(
        (first.failure.reason, first.failure.cause),
        (FailureReason::Interrupted, FailureCause::Infrastructure)
    );
    assert!(
        first.failure.evidence[0].contains("taint karpenter.sh/disrupted:NoSchedule"),
        "{first:?}"
    );
    let done = wait_until(&api, &job.id, 120, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!(
        (done.state, done.attempt),
        (JobState::Succeeded, 2),
        "{done:?}"
    );
    assert_ne!(node_of(&done), node, "the reclaimed node takes no new pod");
    // Attempt 1 saved on SIGTERM (after its archive was taken: the archive ends where the
    // attempt was stopped); attempt 2 started at or after the last step attempt 1 printed, past
    // its last periodic checkpoint: nothing was lost.
    let one = all_text(&attempt_logs(&api, &job.id, 1).await);
    let last_step = last_step(&one);
    let last_periodic: u64 = one
        .lines()
        .filter_map(|l| l.strip_prefix("checkpoint at step ")?.trim().parse().ok())
        .max()
        .unwrap();
    let two = all_text(&attempt_logs(&api, &job.id, 2).await);
    let resumed = resumed_step(&two, 2);
    assert!(
        resumed >= last_step && resumed > last_periodic,
        "resumed {resumed}, attempt 1 printed step {last_step}, last periodic checkpoint {last_periodic}"
    );
    assert!(two.contains("done at step 60"), "{two}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_ray_jobs_driver_saves_in_its_grace_and_says_so_in_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let (_stack, api) = stack_support::start(Backend::Embedded, dir.path()).await;
    let spec = resume_spec(
        r#"{STEPS: "600", STEP_SECONDS: "0.5", CHECKPOINT_SECONDS: "5"}"#,
        "{infrastructure: 0, application: 0}",
    )
    .replace(
        "  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}",
        "  - {name: main, series: h200, nodes: 1, gpus_per_node: 8}",
    )
    .replace("image: python:3.12-slim", "image: rayproject/ray:2.60.0")
    .replace("grace_seconds: 30", "grace_seconds: 8");
    let job = submit_dir(&api, &examples().join("resume"), &spec).await;
    running_with_a_checkpoint(&api, &job.id).await;

    stop(&api, &job.id).await;

    let s = wait_until(&api, &job.id, 120, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!((s.state, s.attempt), (JobState::Stopped, 1));
    // The driver's last words, printed after SIGTERM, are in the attempt's archive, and the
    // save they announce is the newest checkpoint.
    let archived = all_text(&attempt_logs(&api, &job.id, 1).await);
    let saved = stack_support::preemption::sigterm_step(&archived)
        .unwrap_or_else(|| panic!("no grace-time output in the archive:\n{archived}"));
    assert!(last_step(&archived) <= saved + 1, "{archived}");
    let newest = checkpoint_steps(&api, &job.id)
        .await
        .into_iter()
        .max()
        .unwrap();
    assert!(
        newest >= saved,
        "newest checkpoint {newest}, saved on SIGTERM {saved}"
    );
}
