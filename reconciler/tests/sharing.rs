//! Tenants share the fleet, on kubesim and on the real control plane: the tenant holding less is
//! served first (a late tenant is not queued behind another's hundred jobs), a hard quota caps
//! what a tenant has admitted and holds the rest with `QuotaExceeded`, and with borrowing the
//! tenant uses idle nodes but yields the next opening to a tenant within its quota.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use tuneplane_core::job::{JobRecord, JobState, PendingReason};
use tuneplane_core::quota::TenantQuota;

/// A one-node, 8-GPU h200 job of `tenant`, submitted now.
fn h200(tenant: &str, id: &str) -> JobRecord {
    let mut j = finishing(pre_running(gpu_job(id, "h200", 1, 8), 600));
    j.tenant = tenant.parse().unwrap();
    j
}

fn holds(j: &JobRecord) -> bool {
    matches!(j.state, JobState::Admitted | JobState::Running)
}

/// Submits `b`, waits for its admission, and counts the jobs of `a` admitted no later.
async fn submit_and_count_before(h: &Harness, b: &JobRecord, a: &[String]) -> usize {
    h.submit(b).await;
    let b = h
        .wait_job(60, &b.id, "admitted", |j| j.admitted_at_ms.is_some())
        .await;
    let b_at = b.admitted_at_ms.unwrap_or(i64::MAX);
    all(h, a)
        .await
        .iter()
        .filter(|j| j.admitted_at_ms.is_some_and(|t| t <= b_at))
        .count()
}

async fn all(h: &Harness, ids: &[String]) -> Vec<JobRecord> {
    let mut out = Vec::new();
    for id in ids {
        out.push(h.job(id).await);
    }
    out
}

/// Pods that exist now of the jobs whose ids start with `prefix`.
async fn pods_of(h: &Harness, prefix: &str) -> usize {
    let pods = h.pods().list(&Default::default()).await.unwrap();
    pods.items
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(tuneplane_core::constants::JOB_ID_LABEL))
                .is_some_and(|id| id.starts_with(prefix))
        })
        .count()
}

/// A pass decides every job that fits at once, but keeps only about a second of the client's rate
/// of creates in flight, the rest queued with tenants taking turns: a tenant that arrives while
/// another tenant's hundred jobs (which all fit) wait decided for their workloads is decided at
/// the next pass, and its workload is created in the first slot that frees after that, not behind
/// the backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_tenant_is_not_created_behind_another_tenants_creation_backlog() {
    const CPU_NODES: &str = "node_groups:\n  - {name: cpu, count: 4, cpus: 64, memory_gb: 256}\n";
    let h = start(sim_config(CPU_NODES, Duration::from_secs(3), None)).await;
    let config = tuneplane_reconciler::Config {
        kube_qps: 20,
        kube_burst: 20,
        pass_interval: Duration::from_millis(500),
        ..test_config("r1")
    };
    assert_eq!(config.requests_per_pass(), 10);
    let (_task, _ctx) = h.reconciler(config).await;
    let a: Vec<String> = (0..100).map(|i| format!("a-{i:03}")).collect();
    for id in &a {
        let mut j = cpu_job(id);
        j.tenant = "team-a".parse().unwrap();
        h.submit(&j).await;
    }
    wait_for(30, "a's first pods", || async {
        (pods_of(&h, "a-").await > 0).then_some(())
    })
    .await;
    let mut b = cpu_job("b-000");
    b.tenant = "team-b".parse().unwrap();
    h.submit(&b).await;
    let decided = h
        .wait_job(60, &b.id, "decided", |j| j.admitted_at_ms.is_some())
        .await;
    let a_pods_at_decision = pods_of(&h, "a-").await;
    wait_for(60, "b's pod", || async {
        (pods_of(&h, "b-").await == 1).then_some(())
    })
    .await;
    let a_pods = pods_of(&h, "a-").await;
    eprintln!("a's pods: {a_pods_at_decision} when b was decided, {a_pods} when b's pod came");
    // All of a's jobs fit, so they are all decided before b came; their 100 creates take five
    // seconds of the client's rate. b is decided at the next pass and created as soon as a slot
    // frees after it.
    let a_decided_first = all(&h, &a)
        .await
        .iter()
        .filter(|j| {
            j.admitted_at_ms
                .is_some_and(|t| t <= decided.admitted_at_ms.unwrap_or(i64::MAX))
        })
        .count();
    assert!(
        a_decided_first >= 90,
        "only {a_decided_first} of a's 100 jobs were decided before b: decisions are still paced by the creates"
    );
    // b came while a's creates were still under way (otherwise this shows nothing) and its create
    // started in the first slot that freed: behind the 5 requests in flight at this rate and the
    // pass that decided it (kubesim: 5-13 of a's pods in all, the real tier 2-6), not behind the
    // 50-odd a still had to create.
    assert!(
        a_pods_at_decision <= 85,
        "a had {a_pods_at_decision} pods when b was decided: its backlog was nearly done, so the test shows nothing"
    );
    assert!(
        a_pods - a_pods_at_decision <= 20,
        "b's pod came after {a_pods} of a's pods, {} of them created after b was decided: it waited behind a backlog decided before it came",
        a_pods - a_pods_at_decision
    );
}

/// Tenant a queues 100 jobs and fills both h200 nodes; tenant b queues one job afterwards. b's
/// job takes the next node that frees, ahead of a's 98 earlier jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_tenant_gets_the_next_opening_not_a_place_behind_another_tenants_hundred_jobs() {
    let h = start(sim_config(FLEET, Duration::from_secs(3), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    let a: Vec<String> = (0..100).map(|i| format!("a-{i:03}")).collect();
    for id in &a {
        h.submit(&h200("team-a", id)).await;
    }
    // a fills the two h200 nodes; the rest waits.
    wait_for(30, "two of a's jobs admitted", || async {
        let held = all(&h, &a[..4]).await.iter().filter(|j| holds(j)).count();
        (held == 2).then_some(())
    })
    .await;
    let a_before = submit_and_count_before(&h, &h200("team-b", "b-000"), &a).await;
    // The two first jobs, plus at most one admitted in the same pass when both nodes freed.
    assert!(
        a_before <= 3,
        "b admitted after {a_before} of a's jobs; it should have had the next opening"
    );
}

/// A tenant with no quota of its own gets the configured default: with a default of 8 h200
/// GPUs, a new tenant's second 8-GPU job waits with the quota reason while a node stays idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_without_a_quota_gets_the_default_one() {
    let h = start(sim_config(H200_X3, Duration::from_secs(30), None)).await;
    let default = tuneplane_core::quota::DefaultQuota::parse(
        r#"{"series": {"h200": {"gpus": 8, "borrow": false}}}"#,
    )
    .expect("default quota");
    let config = tuneplane_reconciler::Config {
        default_quota: default,
        ..test_config("r1")
    };
    let (_task, _ctx) = h.reconciler(config).await;
    let ids = ["new-0".to_owned(), "new-1".to_owned()];
    for id in &ids {
        h.submit(&h200("newcomer", id)).await;
    }
    let waiting = wait_for(30, "the second job held by the default quota", || async {
        let jobs = all(&h, &ids).await;
        let holding = jobs.iter().filter(|j| holds(j)).count();
        let held: Vec<String> = jobs
            .iter()
            .filter_map(|j| {
                let p = j.pending.as_ref()?;
                (p.reason == PendingReason::QuotaExceeded).then(|| p.message.clone())
            })
            .collect();
        (holding == 1 && held.len() == 1).then_some(held)
    })
    .await;
    assert_eq!(
        waiting[0],
        "tenant newcomer uses 8 of 8 h200 GPUs; this job needs 8"
    );
}

/// A quota of 16 h200 GPUs without borrowing: a never holds more than 16, its other jobs wait
/// with `QuotaExceeded` though a node is idle. With `borrow: true` a takes the idle node, and
/// the next opening goes to tenant b, which is within its quota, before a's further jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_quota_caps_a_tenant_and_borrowing_uses_idle_nodes_but_yields_to_others() {
    let h = start(sim_config(H200_X3, Duration::from_secs(8), None)).await;
    let mut quota = TenantQuota::unlimited(&"team-a".parse().unwrap());
    quota.set_gpu_limit("h200", 16, false);
    h.jobs.put_quota(&quota).await.expect("put quota");
    let (_task, ctx) = h.reconciler(test_config("r1")).await;
    let a: Vec<String> = (0..6).map(|i| format!("a-{i}")).collect();
    for id in &a {
        let mut j = h200("team-a", id);
        // On the real control plane GPU jobs end by their run deadline: long enough that a's
        // first jobs still run while borrowing is switched on and b arrives.
        if h.is_real() {
            j.spec.deadlines.run_seconds = 20;
        }
        h.submit(&j).await;
    }
    // Until a's first jobs end: never more than 16 GPUs (two jobs) admitted, the rest held by
    // the quota with the tenant's usage in the message, the third node idle.
    let held_by_quota = wait_for(30, "a's other jobs held by its quota", || async {
        let jobs = all(&h, &a).await;
        let holding = jobs.iter().filter(|j| holds(j)).count();
        assert!(
            holding <= 2,
            "a holds {holding} jobs of 8 GPUs over a 16-GPU quota"
        );
        let held: Vec<JobRecord> = jobs
            .into_iter()
            .filter(|j| {
                j.pending
                    .as_ref()
                    .is_some_and(|p| p.reason == PendingReason::QuotaExceeded)
            })
            .collect();
        (holding == 2 && held.len() == 4).then_some(held)
    })
    .await;
    let message = held_by_quota[0]
        .pending
        .as_ref()
        .map(|p| p.message.clone())
        .unwrap_or_default();
    assert_eq!(
        message,
        "tenant team-a uses 16 of 16 h200 GPUs; this job needs 8"
    );
    // The per-tenant gauges and the published snapshot show the same usage.
    wait_for(10, "tenant gauges and snapshot usage", || async {
        let text = ctx.metrics.render();
        let snapshot = h.jobs.get_capacity().await.ok().flatten()?;
        let gpus = snapshot
            .pointer("/tenants/team-a/admitted/gpus/h200")?
            .as_u64()?;
        let queued = snapshot.pointer("/tenants/team-a/queued_jobs")?.as_u64()?;
        (text.contains("tuneplane_tenant_admitted_gpus{tenant=\"team-a\",series=\"h200\"} 16")
            && text.contains("tuneplane_tenant_queued_jobs{tenant=\"team-a\"} 4")
            && gpus == 16
            && queued == 4)
            .then_some(())
    })
    .await;
    // Borrowing on: a takes the idle third node at once (it is still running its first two).
    quota.set_gpu_limit("h200", 16, true);
    h.jobs.put_quota(&quota).await.expect("put quota");
    wait_for(20, "a borrows the idle node", || async {
        let holding = all(&h, &a).await.iter().filter(|j| holds(j)).count();
        (holding == 3).then_some(())
    })
    .await;
    // b (no quota, holding nothing) queues one job: it gets the next node that frees, before a's
    // three remaining jobs, which wait as borrowers.
    let queued_before: Vec<String> = all(&h, &a)
        .await
        .into_iter()
        .filter(|j| j.state == JobState::Queued)
        .map(|j| j.id.to_string())
        .collect();
    assert!(
        queued_before.len() >= 2,
        "a should still have jobs queued when b arrives: {queued_before:?}"
    );
    let b = h200("team-b", "b-0");
    h.submit(&b).await;
    let b = h
        .wait_job(60, &b.id, "admitted", |j| j.admitted_at_ms.is_some())
        .await;
    let b_at = b.admitted_at_ms.unwrap_or(i64::MAX);
    // Of a's jobs queued when b arrived, at most one may start before b (a pass already under
    // way when b's record was written); in queue order they would all have gone first.
    let before_b: Vec<String> = all(&h, &queued_before)
        .await
        .into_iter()
        .filter(|j| j.admitted_at_ms.is_some_and(|t| t < b_at))
        .map(|j| j.id.to_string())
        .collect();
    assert!(
        before_b.len() <= 1,
        "b should take the first opening, but {before_b:?} of a's queued jobs started before it"
    );
}
