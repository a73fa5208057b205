//! Preemption planning: the rules (reclaim, priority, limits, minimum run, preemptible) on small
//! fleets, and the victim choice against a brute-force search over every subset.

use super::*;
use crate::admission::plan_admissions;
use crate::capacity::{Holder, NodeCapacity};
use crate::quota::SeriesLimit;
use crate::spec::JobSpec;

const NOW: i64 = 10_000_000;
const MIN: i64 = 60_000;

fn rules() -> PreemptionRules {
    PreemptionRules {
        min_run_ms: MIN,
        ..PreemptionRules::at(NOW)
    }
}

fn spec(priority: i32, pools: serde_json::Value, preemptible: bool) -> JobSpec {
    serde_json::from_value(serde_json::json!({
        "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true", "env": {},
        "pools": pools, "deadlines": {"pre_running_seconds": 60, "run_seconds": 600},
        "priority": priority, "preemptible": preemptible, "labels": {}, "namespace": "ns",
        "platform_version": "0"
    }))
    .expect("spec")
}

fn gpus(series: &str, nodes: u32, g: u32) -> serde_json::Value {
    serde_json::json!([{"name": "main", "series": series, "nodes": nodes, "gpus_per_node": g,
        "cpus": 4.0, "memory_gb": 32.0}])
}

fn queued(id: &str, tenant: &str, priority: i32, pools: serde_json::Value) -> JobRecord {
    JobRecord::new_queued(
        id.parse().unwrap(),
        tenant.parse().unwrap(),
        spec(priority, pools, true),
        "ab",
        1,
    )
}

/// A job of `tenant` running since `running_at` on `nodes` (one machine each).
fn running(
    id: &str,
    tenant: &str,
    priority: i32,
    pools: serde_json::Value,
    nodes: &[&str],
    running_at: i64,
) -> JobRecord {
    let mut j = queued(id, tenant, priority, pools);
    j.state = JobState::Running;
    j.admitted_at_ms = Some(running_at - 1000);
    j.running_at_ms = Some(running_at);
    j.placements = vec![PoolPlacement {
        pool: "main".into(),
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
    }];
    j
}

/// Nodes of 8 h200 GPUs, with what `jobs` hold on them (their placements, by their pools).
fn fleet(names: &[&str], jobs: &[JobRecord]) -> CapacitySnapshot {
    let nodes = names
        .iter()
        .map(|n| {
            let mut node = NodeCapacity::ready(n, Some("h200"), 8, 64.0, 512.0);
            for j in jobs.iter().filter(|j| j.state == JobState::Running) {
                for p in &j.placements {
                    let pool = j.spec.pools.iter().find(|q| q.name == p.pool).unwrap();
                    for _ in p.nodes.iter().filter(|x| x == n) {
                        node.gpus_used += pool.gpus_per_node;
                        node.cpus_used += pool.cpus;
                        node.memory_gb_used += pool.memory_gb;
                        node.holders.push(Holder {
                            job_id: j.id.clone(),
                            gpus: pool.gpus_per_node,
                            cpus: pool.cpus,
                            memory_gb: pool.memory_gb,
                        });
                    }
                }
            }
            node
        })
        .collect();
    CapacitySnapshot::from_nodes(0, nodes)
}

fn quota(tenant: &str, gpus: u32, borrow: bool) -> TenantQuota {
    let mut q = TenantQuota::unlimited(&tenant.parse().unwrap());
    q.series.insert("h200".into(), SeriesLimit { gpus, borrow });
    q
}

fn plan_with(
    queue: &[JobRecord],
    cap: &CapacitySnapshot,
    quotas: &[TenantQuota],
    checkpoints: &[(&str, i64)],
) -> Vec<Preemption> {
    let plan = plan_admissions(queue, cap, &[], quotas);
    let ck: HashMap<String, i64> = checkpoints
        .iter()
        .map(|(j, t)| ((*j).to_owned(), *t))
        .collect();
    let lookup = move |j: &JobRecord| {
        ck.get(j.id.as_str()).map(|t| CheckpointSeen {
            name: format!("step-{t}"),
            completed_at_ms: *t,
        })
    };
    plan_preemptions(queue, cap, &[], quotas, &plan, &lookup, &rules())
}

fn victims(p: &Preemption) -> Vec<&str> {
    p.victims.iter().map(|v| v.job_id.as_str()).collect()
}

/// The scenario: team-b (limit 8, borrowing) fills three nodes; team-a (limit 16)
/// submits one 8-GPU job. One of team-b's jobs that saves checkpoints is taken, never the one that
/// never saved.
#[test]
fn a_tenant_within_its_quota_reclaims_the_cheapest_borrowed_job_never_the_one_without_checkpoints()
{
    let t0 = NOW - 600_000;
    let queue = vec![
        running("b-saves-1", "team-b", 0, gpus("h200", 1, 8), &["n1"], t0),
        running("b-never", "team-b", 0, gpus("h200", 1, 8), &["n2"], t0),
        running("b-saves-2", "team-b", 0, gpus("h200", 1, 8), &["n3"], t0),
        queued("a", "team-a", 0, gpus("h200", 1, 8)),
    ];
    let cap = fleet(&["n1", "n2", "n3"], &queue);
    let quotas = [quota("team-b", 8, true), quota("team-a", 16, false)];
    let got = plan_with(
        &queue,
        &cap,
        &quotas,
        &[("b-saves-1", NOW - 3_000), ("b-saves-2", NOW - 2_000)],
    );
    assert_eq!(got.len(), 1, "{got:?}");
    let p = &got[0];
    assert_eq!(p.job_id, "a");
    assert_eq!(p.rule, PreemptionRule::Reclaim);
    assert_eq!(
        victims(p),
        ["b-saves-2"],
        "the newest checkpoint loses least"
    );
    assert_eq!(p.placements[0].nodes, ["n3"]);
    assert_eq!(p.lost_gpu_seconds, 8 * 2);
    let n = &p.victims[0].notice;
    assert_eq!(n.lost_seconds, 2);
    assert_eq!(
        n.checkpoint.as_deref(),
        Some(&*format!("step-{}", NOW - 2_000))
    );
    assert_eq!(n.series.as_deref(), Some("h200"));
}

#[test]
fn reclaim_never_takes_a_tenant_below_its_own_limit_nor_a_tenant_within_it() {
    let t0 = NOW - 600_000;
    // team-b holds 16 with a limit of 8: one job may go, not two.
    let queue = vec![
        running("b1", "team-b", 0, gpus("h200", 1, 8), &["n1"], t0),
        running("b2", "team-b", 0, gpus("h200", 1, 8), &["n2"], t0),
        running("c1", "team-c", 0, gpus("h200", 1, 8), &["n3"], t0),
        queued("a", "team-a", 0, gpus("h200", 2, 8)),
    ];
    let cap = fleet(&["n1", "n2", "n3"], &queue);
    let quotas = [
        quota("team-a", 16, false),
        quota("team-b", 8, true),
        quota("team-c", 8, false),
    ];
    // a needs two nodes; only one job of team-b may go and team-c is within its limit.
    assert!(plan_with(&queue, &cap, &quotas, &[]).is_empty());
    // With team-c borrowing too (limit 0), one of each goes.
    let quotas = [
        quota("team-a", 16, false),
        quota("team-b", 8, true),
        quota("team-c", 0, true),
    ];
    let got = plan_with(&queue, &cap, &quotas, &[]);
    assert_eq!(got.len(), 1);
    let mut v = victims(&got[0]);
    v.sort();
    assert_eq!(v.len(), 2);
    assert!(v.contains(&"c1"), "{v:?}");
}

#[test]
fn a_tenant_above_its_limit_or_without_one_reclaims_nothing() {
    let t0 = NOW - 600_000;
    let queue = vec![
        running("b1", "team-b", 0, gpus("h200", 1, 8), &["n1"], t0),
        queued("a", "team-a", 0, gpus("h200", 1, 8)),
    ];
    let cap = fleet(&["n1"], &queue);
    // team-a has no limit: no guarantee to reclaim.
    assert!(plan_with(&queue, &cap, &[quota("team-b", 0, true)], &[]).is_empty());
    // team-a's limit is smaller than the job.
    let quotas = [quota("team-b", 0, true), quota("team-a", 4, true)];
    assert!(plan_with(&queue, &cap, &quotas, &[]).is_empty());
}

#[test]
fn jobs_that_ran_less_than_the_minimum_or_are_not_preemptible_are_never_victims() {
    let queue = vec![
        running(
            "young",
            "team-b",
            0,
            gpus("h200", 1, 8),
            &["n1"],
            NOW - MIN + 1,
        ),
        {
            let mut j = running(
                "pinned",
                "team-b",
                0,
                gpus("h200", 1, 8),
                &["n2"],
                NOW - 600_000,
            );
            j.spec.preemptible = false;
            j
        },
        queued("a", "team-a", 0, gpus("h200", 1, 8)),
    ];
    let cap = fleet(&["n1", "n2"], &queue);
    let quotas = [quota("team-b", 0, true), quota("team-a", 8, false)];
    assert!(plan_with(&queue, &cap, &quotas, &[]).is_empty());
}

#[test]
fn a_higher_priority_job_takes_the_place_of_its_own_tenants_lower_priority_job_at_the_cap() {
    let t0 = NOW - 600_000;
    let queue = vec![
        running("low-1", "acme", 0, gpus("h200", 1, 8), &["n1"], t0),
        running("low-2", "acme", 0, gpus("h200", 1, 8), &["n2"], t0 + 1000),
        queued("urgent", "acme", 10, gpus("h200", 1, 8)),
        queued("same", "acme", 0, gpus("h200", 1, 8)),
    ];
    // Free nodes exist, but the tenant is at its cap (16, no borrowing).
    let cap = fleet(&["n1", "n2", "n3", "n4"], &queue);
    let quotas = [quota("acme", 16, false)];
    let got = plan_with(&queue, &cap, &quotas, &[]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].job_id, "urgent");
    assert_eq!(got[0].rule, PreemptionRule::Priority);
    // Same work lost (no checkpoints, same size, one second apart): low-2 lost a second less.
    assert_eq!(victims(&got[0]), ["low-2"]);
    // Equal priority preempts nothing.
    let queue: Vec<JobRecord> = queue.into_iter().filter(|j| j.id != "urgent").collect();
    assert!(plan_with(&queue, &cap, &quotas, &[]).is_empty());
}

/// A tenant borrowing above its limit swaps a lower-priority job for a higher-priority one of
/// the same size (one victim), never needing to drop to its limit first.
#[test]
fn a_borrowing_tenant_swaps_one_job_for_a_higher_priority_one_without_growing() {
    let t0 = NOW - 600_000;
    let queue = vec![
        running("low-1", "acme", 0, gpus("h200", 1, 8), &["n1"], t0),
        running("low-2", "acme", 0, gpus("h200", 1, 8), &["n2"], t0 + 1000),
        queued("urgent", "acme", 10, gpus("h200", 1, 8)),
    ];
    let cap = fleet(&["n1", "n2"], &queue);
    let got = plan_with(&queue, &cap, &[quota("acme", 8, true)], &[]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(victims(&got[0]), ["low-2"]);
}

/// A CPU-only job held by its tenant's CPU limit takes the place of a lower-priority CPU-only
/// job of the tenant, enough of them that it fits the limit.
#[test]
fn a_cpu_only_job_at_its_tenants_cpu_limit_takes_the_place_of_a_lower_priority_one() {
    let t0 = NOW - 600_000;
    let cpu = |cpus: f64| {
        serde_json::json!([{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
            "cpus": cpus, "memory_gb": 8.0}])
    };
    let queue = vec![
        running("low-1", "acme", 0, cpu(24.0), &["c1"], t0),
        running("low-2", "acme", 0, cpu(24.0), &["c2"], t0 + 1000),
        queued("urgent", "acme", 10, cpu(24.0)),
    ];
    let nodes = ["c1", "c2", "c3"]
        .iter()
        .map(|n| {
            let mut node = NodeCapacity::ready(n, None, 0, 32.0, 128.0);
            for j in queue.iter().filter(|j| {
                j.placements
                    .iter()
                    .any(|p| p.nodes.contains(&(*n).to_owned()))
            }) {
                node.cpus_used += 24.0;
                node.memory_gb_used += 8.0;
                node.holders.push(Holder {
                    job_id: j.id.clone(),
                    gpus: 0,
                    cpus: 24.0,
                    memory_gb: 8.0,
                });
            }
            node
        })
        .collect();
    let cap = CapacitySnapshot::from_nodes(0, nodes);
    let mut q = TenantQuota::unlimited(&"acme".parse().unwrap());
    q.cpu = Some(crate::quota::CpuLimit {
        cpus: Some(48.0),
        memory_gb: None,
        borrow: false,
    });
    // c3 is free: only the limit holds it.
    let got = plan_with(&queue, &cap, std::slice::from_ref(&q), &[]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].rule, PreemptionRule::Priority);
    assert_eq!(victims(&got[0]), ["low-2"]);
    // With a limit of 24 one victim is not enough (24 - 24 + 24 fits, 48 - 24 + 24 does not):
    // both go, cheapest set that makes it fit.
    q.cpu = Some(crate::quota::CpuLimit {
        cpus: Some(24.0),
        memory_gb: None,
        borrow: false,
    });
    let got = plan_with(&queue, &cap, std::slice::from_ref(&q), &[]);
    assert_eq!(got.len(), 1, "{got:?}");
    let mut v = victims(&got[0]);
    v.sort_unstable();
    assert_eq!(v, ["low-1", "low-2"]);
}

#[test]
fn a_gang_is_never_left_short_victims_make_it_fit_on_distinct_nodes() {
    let t0 = NOW - 600_000;
    // Two half-node jobs share n1; one 8-GPU job holds n2. A 2×8 job needs two whole nodes:
    // taking only one half job would leave it short.
    let queue = vec![
        running("half-1", "team-b", 0, gpus("h200", 1, 4), &["n1"], t0),
        running("half-2", "team-b", 0, gpus("h200", 1, 4), &["n1"], t0),
        running("whole", "team-b", 0, gpus("h200", 1, 8), &["n2"], t0),
        queued("gang", "team-a", 0, gpus("h200", 2, 8)),
    ];
    let cap = fleet(&["n1", "n2"], &queue);
    let quotas = [quota("team-b", 0, true), quota("team-a", 16, false)];
    let got = plan_with(&queue, &cap, &quotas, &[]);
    assert_eq!(got.len(), 1);
    let mut v = victims(&got[0]);
    v.sort();
    assert_eq!(v, ["half-1", "half-2", "whole"]);
    let mut placed = got[0].placements[0].nodes.clone();
    placed.sort();
    assert_eq!(placed, ["n1", "n2"]);
}

#[test]
fn a_victim_is_taken_once_and_the_freed_nodes_go_to_the_first_waiting_job_only() {
    let t0 = NOW - 600_000;
    let queue = vec![
        running("b1", "team-b", 0, gpus("h200", 1, 8), &["n1"], t0),
        queued("a1", "team-a", 0, gpus("h200", 1, 8)),
        queued("a2", "team-a", 0, gpus("h200", 1, 8)),
    ];
    let cap = fleet(&["n1"], &queue);
    let quotas = [quota("team-b", 0, true), quota("team-a", 16, false)];
    let got = plan_with(&queue, &cap, &quotas, &[]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].job_id, "a1");
}

#[test]
fn playgrounds_neither_preempt_nor_are_preempted() {
    let t0 = NOW - 600_000;
    let mut pg = running("pg-1", "team-b", 0, gpus("h200", 1, 8), &["n1"], t0);
    pg.spec.plugin = "playground/vllm".into();
    pg.spec.preemptible = false;
    let queue = vec![pg, queued("a", "team-a", 0, gpus("h200", 1, 8))];
    let cap = fleet(&["n1"], &queue);
    let quotas = [quota("team-b", 0, true), quota("team-a", 8, false)];
    assert!(plan_with(&queue, &cap, &quotas, &[]).is_empty());

    let mut waiting = queued("pg-2", "team-a", 0, gpus("h200", 1, 8));
    waiting.spec.plugin = "playground/vllm".into();
    let queue = vec![
        running("b1", "team-b", 0, gpus("h200", 1, 8), &["n1"], t0),
        waiting,
    ];
    let cap = fleet(&["n1"], &queue);
    assert!(plan_with(&queue, &cap, &quotas, &[]).is_empty());
}

#[test]
fn a_job_that_is_not_preemptible_waits_quota_exceeded_instead_of_borrowing() {
    let mut j = queued("pinned", "team-b", 0, gpus("h200", 1, 8));
    j.spec.preemptible = false;
    let queue = vec![j, queued("free", "team-b", 0, gpus("h200", 1, 8))];
    let cap = fleet(&["n1", "n2"], &queue);
    let plan = plan_admissions(&queue, &cap, &[], &[quota("team-b", 0, true)]);
    let ids: Vec<&str> = plan.admit.iter().map(|a| a.job_id.as_str()).collect();
    assert_eq!(ids, ["free"], "the preemptible job borrows");
    let w = plan.waiting.iter().find(|w| w.job_id == "pinned").unwrap();
    assert_eq!(w.reason, PendingReason::QuotaExceeded);
    assert!(w.message.contains("not preemptible"), "{}", w.message);
}

#[test]
fn nothing_to_preempt_when_no_job_waits_for_room() {
    let queue = vec![running("b1", "team-b", 0, gpus("h200", 1, 8), &["n1"], 0)];
    let cap = fleet(&["n1", "n2"], &queue);
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert!(preemption_candidates(&queue, &plan, &[], &rules()).is_empty());
}

/// Jobs waiting for nodes in a fleet without quotas, all of one priority: nobody could preempt,
/// so no checkpoint is looked up; with a quota, only the borrowers of the series are candidates,
/// and with a higher priority waiting, only its own tenant's lower-priority jobs.
#[test]
fn candidates_are_only_jobs_some_waiting_job_could_take_by_a_rule() {
    let t0 = NOW - 600_000;
    let mut queue = vec![
        running("b1", "team-b", 0, gpus("h200", 1, 8), &["n1"], t0),
        running("b2", "team-b", 0, gpus("h200", 1, 8), &["n2"], t0),
        running("c1", "team-c", 0, gpus("h200", 1, 8), &["n3"], t0),
        queued("a", "team-a", 0, gpus("h200", 1, 8)),
    ];
    let cap = fleet(&["n1", "n2", "n3"], &queue);
    let ids = |v: Vec<&JobRecord>| v.into_iter().map(|j| j.id.clone()).collect::<Vec<_>>();
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert!(preemption_candidates(&queue, &plan, &[], &rules()).is_empty());
    // team-a within a limit; team-b above its own (8 of 16 held), team-c within its own.
    let quotas = [
        quota("team-a", 8, false),
        quota("team-b", 8, true),
        quota("team-c", 8, false),
    ];
    let plan = plan_admissions(&queue, &cap, &[], &quotas);
    assert_eq!(
        ids(preemption_candidates(&queue, &plan, &quotas, &rules())),
        ["b1", "b2"]
    );
    // A priority-5 job of team-c waits: team-c's lower-priority job becomes a candidate too.
    queue.push(queued("c-urgent", "team-c", 5, gpus("h200", 1, 8)));
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(
        ids(preemption_candidates(&queue, &plan, &[], &rules())),
        ["c1"]
    );
}

/// Small random fleets: whatever the search returns fits, respects the limits, and loses exactly
/// as little as the best of every subset (checked by enumerating them all).
#[test]
fn the_victim_choice_loses_no_more_than_the_best_subset_found_by_brute_force() {
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut found, mut none) = (0, 0);
    for round in 0..400 {
        let names: Vec<String> = (0..2 + rnd(4)).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut free = vec![8_u32; names.len()];
        let mut queue = Vec::new();
        for k in 0..2 + rnd(7) {
            let g = [1, 2, 4, 8][rnd(4) as usize];
            let machines = 1 + u32::from(rnd(4) == 0);
            let mut on = Vec::new();
            for (i, f) in free.iter_mut().enumerate() {
                if on.len() < machines as usize && *f >= g && rnd(3) > 0 {
                    *f -= g;
                    on.push(refs[i]);
                }
            }
            if on.len() < machines as usize {
                for n in &on {
                    let i = refs.iter().position(|r| r == n).unwrap();
                    free[i] += g;
                }
                continue;
            }
            let tenant = ["team-b", "team-c"][rnd(2) as usize];
            let started = NOW - 120_000 - rnd(600) as i64 * 1000;
            queue.push(running(
                &format!("r{k}"),
                tenant,
                rnd(3) as i32,
                gpus("h200", machines, g),
                &on,
                started,
            ));
        }
        let want = [4, 8][rnd(2) as usize];
        let machines = 1 + rnd(2) as u32;
        queue.push(queued("a", "team-a", 0, gpus("h200", machines, want)));
        let cap = fleet(&refs, &queue);
        let quotas = [
            quota("team-a", 16, false),
            quota("team-b", rnd(3) as u32 * 4, true),
            quota("team-c", 0, true),
        ];
        let mut ck: Vec<(String, i64)> = Vec::new();
        for j in queue.iter().filter(|j| j.state == JobState::Running) {
            if rnd(2) == 0 {
                ck.push((String::from(&j.id), NOW - rnd(100) as i64 * 1000));
            }
        }
        let ck_refs: Vec<(&str, i64)> = ck.iter().map(|(j, t)| (j.as_str(), *t)).collect();
        let got = plan_with(&queue, &cap, &quotas, &ck_refs);

        // Brute force over every subset of the other tenants' running jobs.
        let plan = plan_admissions(&queue, &cap, &[], &quotas);
        if plan.waiting.iter().all(|w| w.job_id != "a") {
            continue;
        }
        let ckmap: HashMap<&str, i64> = ck_refs.iter().copied().collect();
        let lookup = |j: &JobRecord| {
            ckmap.get(j.id.as_str()).map(|t| CheckpointSeen {
                name: String::new(),
                completed_at_ms: *t,
            })
        };
        let nodes = Nodes::new(&cap);
        let job = queue.iter().find(|j| j.id == "a").unwrap();
        let runs: Vec<&JobRecord> = queue
            .iter()
            .filter(|j| j.state == JobState::Running)
            .collect();
        let pool: Vec<Candidate> = runs
            .iter()
            .map(|j| {
                let held = cap
                    .nodes
                    .iter()
                    .enumerate()
                    .flat_map(|(i, n)| {
                        n.holders.iter().filter(|h| h.job_id == j.id).map(move |h| {
                            (
                                i,
                                Room {
                                    gpus: h.gpus,
                                    cpus: h.cpus,
                                    memory_gb: h.memory_gb,
                                },
                            )
                        })
                    })
                    .collect();
                Candidate::new(j, held, lookup(j).as_ref(), NOW)
            })
            .collect();
        let limit_of = |t: &str| {
            quotas
                .iter()
                .find(|q| q.tenant.as_str() == t)
                .unwrap()
                .series["h200"]
                .gpus
        };
        let held_of = |t: &str| -> u32 {
            runs.iter()
                .filter(|j| j.tenant.as_str() == t)
                .map(|j| j.spec.pools[0].nodes * j.spec.pools[0].gpus_per_node)
                .sum()
        };
        let within = held_of("team-a") + machines * want <= 16;
        let mut best: Option<search::Key> = None;
        let mut fit = search::Fit::new(&nodes, job, &pool);
        for mask in 1_u32..(1 << pool.len()) {
            let set: Vec<usize> = (0..pool.len()).filter(|i| mask & (1 << i) != 0).collect();
            let ok = within
                && ["team-b", "team-c"].iter().all(|t| {
                    let taken: u32 = set
                        .iter()
                        .filter(|&&k| pool[k].job.tenant.as_str() == *t)
                        .map(|&k| pool[k].gpus_of("h200"))
                        .sum();
                    taken == 0 || held_of(t) >= limit_of(t) && taken <= held_of(t) - limit_of(t)
                });
            if ok && fit.place(&set, &[]).is_some() {
                let k = search::key(&pool, &set);
                if best.as_ref().is_none_or(|b| k < *b) {
                    best = Some(k);
                }
            }
        }
        match (&got.first(), best) {
            (None, None) => none += 1,
            (Some(p), Some(b)) => {
                found += 1;
                assert_eq!(p.job_id, "a");
                let set: Vec<usize> = p
                    .victims
                    .iter()
                    .map(|v| pool.iter().position(|c| c.job.id == v.job_id).unwrap())
                    .collect();
                assert!(
                    fit.place(&set, &[]).is_some(),
                    "round {round}: the set does not fit"
                );
                assert_eq!(search::key(&pool, &set), b, "round {round}: {p:?}");
                assert_eq!(p.lost_gpu_seconds, b.0, "round {round}");
            }
            (g, b) => panic!("round {round}: planned {g:?}, brute force {b:?}"),
        }
    }
    // The rounds exercised both outcomes.
    assert!(found > 50 && none > 20, "found {found}, none {none}");
}
