//! Preemption (docs/design.md §8, step 3b): a tenant within its quota takes back GPUs a borrowing tenant
//! holds above its own, choosing the victim that loses the least work since its newest complete
//! checkpoint; a non-preemptible job never borrows; a higher-priority job takes the place of its
//! own tenant's lower-priority one. The victim's attempt ends `Preempted`, is requeued in place and
//! does not count against its infrastructure retries.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use tuneplane_core::audit::{AuditAction, AuditQuery, AuditSource};
use tuneplane_core::job::{FailureCause, FailureReason, JobRecord, JobState, PendingReason};
use tuneplane_core::quota::TenantQuota;
use tuneplane_core::store::{BlobStore, EventQuery};

/// A one-node, 8-GPU h200 job of `tenant` that runs long (never ends by itself in the test).
fn h200(tenant: &str, id: &str) -> JobRecord {
    let mut j = pre_running(gpu_job(id, "h200", 1, 8), 600);
    j.tenant = tenant.parse().unwrap();
    j.spec.deadlines.grace_seconds = 5;
    j
}

/// Reconciler settings that preempt a job as soon as it runs.
fn preempting() -> tuneplane_reconciler::Config {
    tuneplane_reconciler::Config {
        preemption_min_run: Duration::ZERO,
        ..test_config("r1")
    }
}

async fn quota(h: &Harness, tenant: &str, gpus: u32, borrow: bool) {
    let mut q = TenantQuota::unlimited(&tenant.parse().unwrap());
    q.set_gpu_limit("h200", gpus, borrow);
    h.jobs.put_quota(&q).await.expect("put quota");
}

/// Records a complete checkpoint `name` of `job`, completed at `at_ms`, as the runner would.
async fn checkpoint(blobs: &dyn BlobStore, job: &JobRecord, name: &str, at_ms: i64) {
    let prefix = tuneplane_core::grant::checkpoints_prefix(&job.tenant, &job.id);
    blobs
        .put(&format!("{prefix}{name}/state.json"), b"{}".to_vec())
        .await
        .expect("checkpoint file");
    tuneplane_core::outputs::complete_checkpoint(blobs, &job.tenant, &job.id, name, 1, at_ms, 3)
        .await
        .expect("complete checkpoint");
}

async fn events(h: &Harness, id: &str) -> Vec<tuneplane_core::job::JobEvent> {
    h.jobs
        .list_events(id, &EventQuery::first(1000))
        .await
        .expect("events")
        .items
}

fn running(j: &JobRecord) -> bool {
    j.state == JobState::Running
}

/// team-b borrows the whole series with three jobs (two with checkpoints, one without); team-a,
/// within its 16-GPU guarantee, submits one job. The victim is the job that loses the least (the
/// newest checkpoint), never the one without any; its attempt ends `Preempted` and it is queued
/// again as attempt 2; team-a's job runs; the others run on untouched. A non-preemptible job of
/// team-b above its quota waits `QuotaExceeded` and never borrows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_within_its_quota_takes_back_borrowed_gpus_from_the_job_losing_the_least() {
    let h = start(sim_config(H200_X3, Duration::from_secs(3600), None)).await;
    quota(&h, "team-b", 8, true).await;
    quota(&h, "team-a", 16, false).await;
    let (_task, ctx) = h.reconciler(preempting()).await;
    // No infrastructure retries: a preemption that counted as one would not be run again.
    let b: Vec<JobRecord> = (0..3)
        .map(|i| {
            let mut j = h200("team-b", &format!("b-{i}"));
            j.spec.retries.infrastructure = 0;
            j
        })
        .collect();
    for j in &b {
        h.submit(j).await;
    }
    wait_for(60, "team-b's three jobs running", || async {
        let mut all = Vec::new();
        for j in &b {
            all.push(h.job(&j.id).await);
        }
        all.iter().all(running).then_some(())
    })
    .await;
    // After a few seconds of work, b-0 saved a moment ago, b-1 at the start of its run, b-2
    // never: b-0 loses the least (costs are whole GPU-seconds).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b1 = h.job("b-1").await;
    checkpoint(
        h.blobs.as_ref(),
        &b[1],
        "step-000001",
        b1.running_at_ms.unwrap(),
    )
    .await;
    let now = tuneplane_core::clock::now_ms();
    checkpoint(h.blobs.as_ref(), &b[0], "step-000005", now).await;

    // A non-preemptible job of team-b above its quota does not borrow.
    let mut pinned = h200("team-b", "b-pinned");
    pinned.spec.preemptible = false;
    h.submit(&pinned).await;
    let pinned = h
        .wait_pending(30, "b-pinned", PendingReason::QuotaExceeded)
        .await;
    let message = pinned.pending.unwrap().message;
    assert!(
        message.contains("not preemptible"),
        "the quota message should say why it may not borrow: {message}"
    );

    let a = h200("team-a", "a-0");
    h.submit(&a).await;
    let a = h.wait_state(60, "a-0", JobState::Running).await;
    let preempting = a.preempting.clone();
    assert!(
        preempting.as_ref().is_none_or(|p| p.victims.len() == 1),
        "one victim makes room for one 8-GPU job: {preempting:?}"
    );

    // b-0 was preempted: its first attempt ended Preempted, it is queued again as attempt 2.
    let b0 = h
        .wait_job(60, "b-0", "requeued as attempt 2", |j| j.attempt == 2)
        .await;
    let first = &b0.attempts[0];
    assert_eq!(first.failure.reason, FailureReason::Preempted);
    assert_eq!(first.failure.cause, FailureCause::Preempted);
    assert!(
        first.failure.message.contains("preempted by quota reclaim"),
        "{}",
        first.failure.message
    );
    assert!(
        first.failure.message.contains("step-000005"),
        "the message names the checkpoint it resumes from: {}",
        first.failure.message
    );
    assert!(
        !first.failure.message.contains("team-a") && !first.failure.message.contains("a-0"),
        "a victim's tenant never reads the other tenant or its job: {}",
        first.failure.message
    );
    assert!(first.failure.lost_seconds.is_some());
    assert!(b0.preempt.is_none(), "the notice is cleared on requeue");
    let warned = events(&h, "b-0").await;
    let preempted: Vec<_> = warned.iter().filter(|e| e.reason == "Preempted").collect();
    assert_eq!(preempted.len(), 1, "{warned:#?}");
    assert_eq!(preempted[0].kind, "Warning");
    assert!(warned.iter().any(|e| e.reason == "Requeued"), "{warned:#?}");

    // The others ran on, untouched, on their first attempt.
    for id in ["b-1", "b-2"] {
        let j = h.job(id).await;
        assert_eq!((j.state, j.attempt), (JobState::Running, 1), "{id}");
        assert!(j.preempt.is_none(), "{id}");
    }
    // b-0 waits as a borrower now: the series is full.
    let b0 = h.job("b-0").await;
    assert_eq!(b0.state, JobState::Queued);

    // Metrics and the audit trail.
    let text = ctx.metrics.render();
    let preemptions = |reason: &str| {
        tuneplane_testkit::metric(
            &text,
            &format!("tuneplane_preemptions_total{{reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(preemptions("reclaim"), Some(1.0), "{text}");
    assert_eq!(preemptions("priority"), Some(0.0), "{text}");
    let audit = h
        .jobs
        .list_audit(&AuditQuery {
            tenant: Some("team-b".parse().unwrap()),
            ..AuditQuery::default()
        })
        .await
        .expect("audit");
    let entry = audit
        .iter()
        .find(|e| e.action == AuditAction::JobPreempt)
        .expect("an audit entry for the preemption");
    assert_eq!(
        (entry.target.as_str(), entry.actor.source),
        ("b-0", AuditSource::Reconciler)
    );
    assert_eq!(entry.change["rule"], "reclaim");
    // The pinned job never got a node.
    assert_eq!(h.job("b-pinned").await.admitted_at_ms, None);
}

/// Within one tenant at its cap, a priority-10 job takes the place of its priority-0 job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_job_takes_the_place_of_its_own_tenants_lower_priority_job() {
    let h = start(sim_config(H200_X3, Duration::from_secs(3600), None)).await;
    quota(&h, "team-c", 8, false).await;
    let (_task, ctx) = h.reconciler(preempting()).await;
    h.submit(&h200("team-c", "low")).await;
    h.wait_state(60, "low", JobState::Running).await;
    let mut urgent = h200("team-c", "urgent");
    urgent.spec.priority = 10;
    h.submit(&urgent).await;
    let urgent = h.wait_state(60, "urgent", JobState::Running).await;
    assert_eq!(urgent.attempt, 1);
    let low = h
        .wait_job(60, "low", "requeued as attempt 2", |j| j.attempt == 2)
        .await;
    let failure = &low.attempts[0].failure;
    assert_eq!(failure.reason, FailureReason::Preempted);
    assert!(
        failure
            .message
            .contains("preempted by a higher-priority job of its own tenant"),
        "{}",
        failure.message
    );
    // It waits for its tenant's quota now, not for a node (two are idle).
    let low = h
        .wait_pending(30, "low", PendingReason::QuotaExceeded)
        .await;
    assert_eq!(low.state, JobState::Queued);
    let text = ctx.metrics.render();
    assert_eq!(
        tuneplane_testkit::metric(&text, "tuneplane_preemptions_total{reason=\"priority\"}"),
        Some(1.0),
        "{text}"
    );
}

/// With preemption off (`TUNEPLANE_PREEMPTION=off`) borrowed GPUs stay borrowed: the tenant
/// within its quota waits for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_preemption_off_nothing_is_preempted() {
    let h = start(sim_config(H200_X3, Duration::from_secs(3600), None)).await;
    quota(&h, "team-b", 8, true).await;
    quota(&h, "team-a", 16, false).await;
    let config = tuneplane_reconciler::Config {
        preemption: false,
        ..preempting()
    };
    let (_task, _ctx) = h.reconciler(config).await;
    for i in 0..3 {
        h.submit(&h200("team-b", &format!("b-{i}"))).await;
    }
    for i in 0..3 {
        h.wait_state(60, &format!("b-{i}"), JobState::Running).await;
    }
    h.submit(&h200("team-a", "a-0")).await;
    let a = h
        .wait_pending(30, "a-0", PendingReason::InsufficientGpu)
        .await;
    assert_eq!(a.state, JobState::Queued);
    // A few more passes: still nothing preempted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..3 {
        let j = h.job(&format!("b-{i}")).await;
        assert_eq!((j.state, j.attempt), (JobState::Running, 1));
    }
}
