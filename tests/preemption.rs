//! Preemption end to end on the executing dev stack (`examples/fleet.yaml`: three schedulable
//! h200 nodes; kubesim runs the pods on this machine), through the HTTP API as tenants would:
//! team-b borrows the whole series with three 1×8-GPU training jobs (two save a checkpoint every
//! 5 s, one never does); team-a, within its 16-GPU quota, submits one job. team-a's job runs
//! within the grace plus 30 s; one saving team-b job is preempted (never the one that never
//! saves), resumes as a later attempt from a checkpoint at most 5 steps behind what it had printed
//! and ends SUCCEEDED; the other two run on untouched. Beside it, a non-preemptible job of team-b
//! waits `QuotaExceeded` and never borrows.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::time::{Duration, Instant};

use stack_support::preemption::{
    GRACE_SECONDS, assert_preempted_and_resumed, h200_quota, job, ray_training,
    running_with_checkpoints, submit, tenant_api,
};
use stack_support::{example_fleet, wait_until};
use tuneplane::dev::{Backend, ClusterChoice, StackOptions, UNPULLABLE_IMAGE};
use tuneplane_core::job::{JobState, PendingReason};

mod stack_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_takes_back_its_quota_from_a_borrower_that_loses_almost_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (stack, _) = stack_support::start_with(StackOptions {
        data_dir: dir.path().to_path_buf(),
        port: 0,
        fleet: example_fleet(),
        execute: true,
        unpullable_images: vec![UNPULLABLE_IMAGE.into()],
        pass_interval: Duration::from_millis(200),
        backend: Backend::Embedded,
        cluster: ClusterChoice::Simulated,
        webhooks: None,
        capsule_delivery: tuneplane_core::render::CapsuleDelivery::Presigned,
        blob_tls: None,
        // Preempt after 5 s of running (the default, 10 minutes, would outlast the test).
        preemption_min_run: Some(Duration::from_secs(5)),
    })
    .await;
    h200_quota(&stack, "team-b", 8, true).await;
    h200_quota(&stack, "team-a", 16, false).await;
    let b = tenant_api(&stack, "team-b").await;
    let a = tenant_api(&stack, "team-a").await;

    const STEPS: u32 = 60;
    let saving = [
        submit(&b, &ray_training(1, STEPS, 5)).await,
        submit(&b, &ray_training(1, STEPS, 5)).await,
    ];
    let never = submit(&b, &ray_training(1, STEPS, 100_000)).await;
    for j in &saving {
        running_with_checkpoints(&b, &j.id, 2, 120).await;
    }
    wait_until(&b, &never.id, 120, "running", |j| {
        j.state == JobState::Running
    })
    .await;

    // A non-preemptible job of team-b above its quota never borrows.
    let pinned_spec = format!("{}\npreemptible: false\n", ray_training(1, 5, 5));
    let pinned = submit(&b, &pinned_spec).await;
    let pinned = wait_until(&b, &pinned.id, 30, "held by its quota", |j| {
        j.pending
            .as_ref()
            .is_some_and(|p| p.reason == PendingReason::QuotaExceeded)
    })
    .await;
    let message = &pinned.pending.as_ref().unwrap().message;
    assert!(message.contains("not preemptible"), "{message}");

    let submitted = Instant::now();
    let mine = submit(&a, &ray_training(1, 10, 5)).await;
    let running = wait_until(&a, &mine.id, GRACE_SECONDS + 60, "running", |j| {
        j.state == JobState::Running
    })
    .await;
    let took = submitted.elapsed();
    eprintln!("team-a's job ran {took:?} after its submission");
    assert!(
        took <= Duration::from_secs(GRACE_SECONDS + 30),
        "team-a's job ran only after {took:?}"
    );
    let preempting = running.preempting.clone();
    assert!(preempting.is_none(), "cleared once running: {preempting:?}");
    assert_eq!(
        job(&b, &pinned.id).await.admitted_at_ms,
        None,
        "the non-preemptible job borrowed"
    );

    // Exactly one victim, one of the saving jobs.
    let mut victims = Vec::new();
    for j in saving.iter().chain([&never]) {
        let now = job(&b, &j.id).await;
        if now.attempt > 1 || now.preempt.is_some() {
            victims.push(j.id.clone());
        }
    }
    assert_eq!(victims.len(), 1, "{victims:?}");
    assert_ne!(
        victims[0], never.id,
        "the job without checkpoints was preempted"
    );
    let untouched: Vec<_> = saving
        .iter()
        .chain([&never])
        .filter(|j| j.id != victims[0])
        .collect();
    assert_preempted_and_resumed(
        &b,
        &victims[0],
        "preempted by quota reclaim",
        "team-a",
        STEPS,
    )
    .await;
    for j in untouched {
        let done = wait_until(&b, &j.id, 200, "terminal", |j| j.state.is_terminal()).await;
        assert_eq!(
            (done.state, done.attempt),
            (JobState::Succeeded, 1),
            "{done:?}"
        );
    }
    stack.shutdown().await;
}
