//! Tenants: fair share, quotas, borrowing.

use super::*;

fn of(tenant: &str, mut j: JobRecord) -> JobRecord {
    j.tenant = tenant.parse().unwrap();
    j
}

fn holding(tenant: &str, id: &str, gpus: u32) -> JobRecord {
    let mut j = of(
        tenant,
        job(id, 0, 0, vec![pool("main", Some("h200"), 1, gpus)]),
    );
    j.state = JobState::Running;
    j
}

fn h200_job(tenant: &str, id: &str, submitted: i64) -> JobRecord {
    of(
        tenant,
        job(id, 0, submitted, vec![pool("main", Some("h200"), 1, 8)]),
    )
}

fn h200_quota(tenant: &str, gpus: u32, borrow: bool) -> TenantQuota {
    let mut q = TenantQuota::unlimited(&tenant.parse().unwrap());
    q.set_gpu_limit("h200", gpus, borrow);
    q
}

/// `n` h200 nodes of 8 GPUs; `used[i]` GPUs taken on node i.
fn h200_fleet(used: &[u32]) -> CapacitySnapshot {
    snapshot(
        used.iter()
            .enumerate()
            .map(|(i, u)| node(&format!("h200-{i}"), Some("h200"), 8, *u))
            .collect(),
    )
}

#[test]
fn a_tenant_holding_nothing_is_served_before_one_with_a_hundred_jobs_queued_earlier() {
    // Tenant a runs on h200-0 and queued 100 jobs first; b queued one later; one node is free.
    let mut queue = vec![holding("a", "a-running", 8)];
    queue.extend((0..100).map(|i| h200_job("a", &format!("a-{i:03}"), 10 + i)));
    queue.push(h200_job("b", "b-0", 1_000));
    let plan = plan_admissions(&queue, &h200_fleet(&[8, 0]), &[], &[]);
    assert_eq!(admitted(&plan), ["b-0"], "the next opening goes to b");
    assert_eq!(reason(&plan, "a-000"), Some(PendingReason::InsufficientGpu));
    assert_eq!(plan.waiting.len(), 100);
}

#[test]
fn tenants_with_equal_shares_take_turns_in_submission_order() {
    let queue = vec![
        h200_job("a", "a-1", 1),
        h200_job("a", "a-2", 2),
        h200_job("a", "a-3", 3),
        h200_job("b", "b-1", 10),
        h200_job("b", "b-2", 11),
    ];
    let plan = plan_admissions(&queue, &h200_fleet(&[0, 0, 0, 0]), &[], &[]);
    assert_eq!(admitted(&plan), ["a-1", "b-1", "a-2", "b-2"]);
    // A single tenant keeps plain priority-then-submission order.
    let one: Vec<JobRecord> = vec![
        h200_job("a", "late", 5),
        of(
            "a",
            job("urgent", 9, 6, vec![pool("main", Some("h200"), 1, 8)]),
        ),
        h200_job("a", "early", 1),
    ];
    let plan = plan_admissions(&one, &h200_fleet(&[0, 0]), &[], &[]);
    assert_eq!(admitted(&plan), ["urgent", "early"]);
}

#[test]
fn weights_scale_the_share() {
    // a holds 16 of 32 GPUs at weight 4 (share 0.125); b holds 8 at weight 1 (share 0.25).
    let mut queue = vec![
        holding("a", "a-r1", 8),
        holding("a", "a-r2", 8),
        holding("b", "b-r1", 8),
    ];
    queue.push(h200_job("b", "b-next", 1));
    queue.push(h200_job("a", "a-next", 2));
    let mut a = TenantQuota::unlimited(&"a".parse().unwrap());
    a.weight = 4.0;
    let plan = plan_admissions(&queue, &h200_fleet(&[8, 8, 8, 0]), &[], &[a]);
    assert_eq!(admitted(&plan), ["a-next"]);
    // Without the weight, b (holding less) goes first.
    let plan = plan_admissions(&queue, &h200_fleet(&[8, 8, 8, 0]), &[], &[]);
    assert_eq!(admitted(&plan), ["b-next"]);
}

#[test]
fn a_playground_is_its_own_kind_in_the_plan_and_its_messages_name_it() {
    // A playground's stand-in waits on the quota like a job, but the plan says it is a
    // playground (the reconciler routes it by that) and its text says "this playground needs".
    let mut pg = h200_job("a", "pg-1", 2);
    pg.spec.plugin = crate::claimant::PLAYGROUND_PLUGIN.into();
    pg.spec.preemptible = false;
    let queue = vec![holding("a", "a-run", 8), h200_job("a", "a-1", 1), pg];
    let quotas = [h200_quota("a", 16, false)];
    let plan = plan_admissions(&queue, &h200_fleet(&[8, 0, 0]), &[], &quotas);
    assert_eq!(admitted(&plan), ["a-1"]);
    assert_eq!(plan.admit[0].kind, Claimant::Job);
    let waiting = plan.waiting.iter().find(|w| w.job_id == "pg-1").unwrap();
    assert_eq!(waiting.kind, Claimant::Playground);
    assert_eq!(waiting.reason, PendingReason::QuotaExceeded);
    assert_eq!(
        &*waiting.message,
        "tenant a uses 16 of 16 h200 GPUs; this playground needs 8"
    );
    // Admitted, it is a playground's admission.
    let plan = plan_admissions(&queue[2..], &h200_fleet(&[0, 0, 0]), &[], &[]);
    assert_eq!(admitted(&plan), ["pg-1"]);
    assert_eq!(plan.admit[0].kind, Claimant::Playground);
}

#[test]
fn a_hard_quota_holds_the_tenants_further_jobs_with_quota_exceeded_and_reserves_nothing() {
    // a holds 8 of its 16: of two more 8-GPU jobs one fits the quota, the other waits for it.
    let queue = vec![
        holding("a", "a-run", 8),
        h200_job("a", "a-1", 1),
        h200_job("a", "a-2", 2),
    ];
    let quotas = [h200_quota("a", 16, false)];
    let plan = plan_admissions(&queue, &h200_fleet(&[8, 0, 0]), &[], &quotas);
    assert_eq!(admitted(&plan), ["a-1"]);
    assert_eq!(reason(&plan, "a-2"), Some(PendingReason::QuotaExceeded));
    assert_eq!(
        message(&plan, "a-2"),
        "tenant a uses 16 of 16 h200 GPUs; this job needs 8"
    );
    // A held job reserves nothing: a (lower share) is considered first and held by its quota,
    // and b's later job still gets the one free node.
    let queue = vec![
        holding("a", "a-run", 8),
        holding("b", "b-run-1", 8),
        holding("b", "b-run-2", 8),
        h200_job("a", "a-1", 1),
        h200_job("b", "b-1", 2),
    ];
    let plan = plan_admissions(
        &queue,
        &h200_fleet(&[8, 8, 8, 0]),
        &[],
        &[h200_quota("a", 8, false)],
    );
    assert_eq!(admitted(&plan), ["b-1"]);
    assert_eq!(reason(&plan, "a-1"), Some(PendingReason::QuotaExceeded));
}

#[test]
fn borrowing_uses_idle_nodes_only_after_jobs_within_quota() {
    // a's quota is 8 and it holds 8: its next job borrows. b (no quota) queued later.
    let queue = vec![
        holding("a", "a-run", 8),
        h200_job("a", "a-borrow-1", 1),
        h200_job("a", "a-borrow-2", 2),
        h200_job("b", "b-1", 10),
    ];
    let quotas = [h200_quota("a", 8, true)];
    // Two free nodes: b's job first, then one borrowed job.
    let plan = plan_admissions(&queue, &h200_fleet(&[8, 0, 0]), &[], &quotas);
    assert_eq!(admitted(&plan), ["b-1", "a-borrow-1"]);
    assert_eq!(
        reason(&plan, "a-borrow-2"),
        Some(PendingReason::QuotaExceeded)
    );
    assert!(
        message(&plan, "a-borrow-2")
            .starts_with("tenant a uses 16 of 8 h200 GPUs; this job needs 8; it may borrow only"),
        "{}",
        message(&plan, "a-borrow-2")
    );
    // Without b, a borrows both idle nodes.
    let alone: Vec<JobRecord> = queue[..3].to_vec();
    let plan = plan_admissions(&alone, &h200_fleet(&[8, 0, 0]), &[], &quotas);
    assert_eq!(admitted(&plan), ["a-borrow-1", "a-borrow-2"]);
    // A hard quota never borrows.
    let plan = plan_admissions(
        &alone,
        &h200_fleet(&[8, 0, 0]),
        &[],
        &[h200_quota("a", 8, false)],
    );
    assert!(plan.admit.is_empty());
}

#[test]
fn a_waiting_tenant_within_quota_keeps_its_nodes_from_borrowers() {
    // a holds 16 (8 of them borrowed) and queued another borrowing job; b waits for two whole
    // nodes, and only one is free: b reserves it, so a's borrower may not take it.
    let queue = vec![
        holding("a", "a-run-1", 8),
        holding("a", "a-run-2", 8),
        h200_job("a", "a-borrow", 1),
        of(
            "b",
            job("b-2x8", 0, 5, vec![pool("main", Some("h200"), 2, 8)]),
        ),
    ];
    let plan = plan_admissions(
        &queue,
        &h200_fleet(&[8, 8, 0, 4]),
        &[],
        &[h200_quota("a", 8, true)],
    );
    assert!(plan.admit.is_empty(), "{:?}", admitted(&plan));
    assert_eq!(
        reason(&plan, "a-borrow"),
        Some(PendingReason::QuotaExceeded)
    );
    assert_eq!(reason(&plan, "b-2x8"), Some(PendingReason::InsufficientGpu));
}

#[test]
fn cpu_limits_hold_cpu_only_jobs() {
    let cpu_job = |tenant: &str, id: &str, t: i64| {
        let mut p = pool("main", None, 1, 0);
        p["cpus"] = serde_json::json!(8.0);
        p["memory_gb"] = serde_json::json!(16.0);
        of(tenant, job(id, 0, t, vec![p]))
    };
    let queue = vec![cpu_job("a", "c-1", 1), cpu_job("a", "c-2", 2)];
    let mut q = TenantQuota::unlimited(&"a".parse().unwrap());
    q.cpu = Some(quota::CpuLimit {
        cpus: Some(12.0),
        memory_gb: None,
        borrow: false,
    });
    let fleet = snapshot(vec![node("cpu-0", None, 0, 0)]);
    let plan = plan_admissions(&queue, &fleet, &[], &[q]);
    assert_eq!(admitted(&plan), ["c-1"]);
    assert_eq!(
        message(&plan, "c-2"),
        "tenant a uses 8 of 12 CPUs for CPU-only jobs; this job needs 8"
    );
}

/// The quota reason texts of every way a job waits for its quota, as they read when each was one
/// `format!` of the limit's message.
#[test]
fn quota_wait_texts_read_as_before() {
    use super::reasons::{QuotaWait, quota};
    use crate::quota::Over;
    let over = Over::Gpus {
        series: "h200",
        used: 16,
        limit: 16,
        need: 8,
    };
    for kind in [Claimant::Job, Claimant::Playground] {
        let text = over.message("a", kind);
        let want = [
            (QuotaWait::Limit, text.clone()),
            (
                QuotaWait::Borrowing,
                format!(
                    "{text}; it may borrow only capacity that no other job waiting within its quota needs, and none is free now"
                ),
            ),
            (
                QuotaWait::NotPreemptible,
                if kind == Claimant::Playground {
                    format!(
                        "{text}; a playground is never preempted, so it never borrows above the quota: it starts when the tenant's own jobs leave room"
                    )
                } else {
                    format!(
                        "{text}; the job is not preemptible (preemptible: false), so it never borrows above the quota: it starts when the tenant's own jobs leave room"
                    )
                },
            ),
        ];
        for (wait, text) in want {
            assert_eq!(quota(&over, "a", kind, wait), text, "{kind:?} {wait:?}");
        }
    }
}
