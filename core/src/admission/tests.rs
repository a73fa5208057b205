//! Unit tests of admission planning: gang fit per node, fragmentation, reservations, ordering and
//! series independence.

use super::*;
use crate::capacity::NodeCapacity;
use crate::ids::JobId;
use crate::job::JobState;
use crate::quota;
use crate::spec::JobSpec;

fn node(name: &str, series: Option<&str>, gpus: u32, used: u32) -> NodeCapacity {
    NodeCapacity::ready(name, series, gpus, 96.0, 1024.0).with_gpus_used(used)
}

fn snapshot(nodes: Vec<NodeCapacity>) -> CapacitySnapshot {
    CapacitySnapshot::from_nodes(0, nodes)
}

fn pool(name: &str, series: Option<&str>, nodes: u32, gpus: u32) -> serde_json::Value {
    serde_json::json!({"name": name, "series": series, "nodes": nodes, "gpus_per_node": gpus,
        "cpus": 8.0, "memory_gb": 64.0})
}

/// A queued job of tenant `acme` with `pools` (also the order tests' fixture).
pub(super) fn job(
    id: &str,
    priority: i32,
    submitted: i64,
    pools: Vec<serde_json::Value>,
) -> JobRecord {
    let spec: JobSpec = serde_json::from_value(serde_json::json!({
        "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true", "env": {},
        "pools": pools, "deadlines": {"pre_running_seconds": 60, "run_seconds": 600},
        "priority": priority, "labels": {}, "namespace": "ns", "platform_version": "0"
    }))
    .expect("spec");
    JobRecord::new_queued(
        id.parse().unwrap(),
        "acme".parse().unwrap(),
        spec,
        "ab",
        submitted,
    )
}

/// One unbound 8-GPU h200 machine of an admitted job "earlier", waiting for `nodes`.
fn earlier_h200_machine(nodes: Vec<String>) -> Reservation {
    Reservation {
        job_id: JobId::parse("earlier").unwrap(),
        series: Some("h200".into()),
        gpus: 8,
        cpus: 8.0,
        memory_gb: 64.0,
        machines: 1,
        nodes,
    }
}

fn admitted<'p>(plan: &'p AdmissionPlan) -> Vec<&'p str> {
    plan.admit.iter().map(|a| a.job_id.as_str()).collect()
}

fn nodes_of<'p>(plan: &'p AdmissionPlan, id: &str) -> Vec<&'p str> {
    plan.admit
        .iter()
        .filter(|a| a.job_id == id)
        .flat_map(|a| a.placements.iter().flat_map(|p| p.nodes.iter()))
        .map(String::as_str)
        .collect()
}

fn message<'p>(plan: &'p AdmissionPlan, id: &str) -> &'p str {
    plan.waiting
        .iter()
        .find(|w| w.job_id == id)
        .map_or("", |w| &*w.message)
}

fn reason(plan: &AdmissionPlan, id: &str) -> Option<PendingReason> {
    plan.waiting
        .iter()
        .find(|w| w.job_id == id)
        .map(|w| w.reason)
}

#[test]
fn sixteen_free_gpus_spread_four_per_node_cannot_host_one_machine_of_eight() {
    let cap = snapshot(
        (0..4)
            .map(|i| node(&format!("h-{i}"), Some("h200"), 8, 4))
            .collect(),
    );
    assert_eq!(cap.series["h200"].free_gpus, 16);
    let queue = [job("big", 0, 1, vec![pool("main", Some("h200"), 1, 8)])];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert!(plan.admit.is_empty());
    let w = &plan.waiting[0];
    assert_eq!(w.reason, PendingReason::InsufficientGpu);
    assert!(
        w.message
            .contains("needs 1 node(s) with 8 free h200 GPUs, 0 available"),
        "{}",
        w.message
    );
}

#[test]
fn multi_pool_job_is_admitted_only_when_every_pool_fits_on_distinct_nodes() {
    let pools = vec![
        pool("main", Some("h200"), 2, 8),
        pool("eval", Some("l40s"), 1, 4),
    ];
    let short = snapshot(vec![
        node("h-0", Some("h200"), 8, 0),
        node("h-1", Some("h200"), 8, 2),
        node("l-0", Some("l40s"), 4, 0),
    ]);
    let queue = [job("j", 0, 1, pools.clone())];
    let plan = plan_admissions(&queue, &short, &[], &[]);
    assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientGpu));

    let enough = snapshot(vec![
        node("h-0", Some("h200"), 8, 0),
        node("h-1", Some("h200"), 8, 0),
        node("l-0", Some("l40s"), 4, 0),
    ]);
    let queue = [job("j", 0, 1, pools)];
    let plan = plan_admissions(&queue, &enough, &[], &[]);
    assert_eq!(admitted(&plan), ["j"]);
    let p = &plan.admit[0].placements;
    assert_eq!((p[0].pool.as_str(), p[0].nodes.len()), ("main", 2));
    assert_eq!(p[1].nodes, ["l-0"]);
}

#[test]
fn two_pools_of_one_series_never_share_a_node() {
    // One node with 16 free GPUs could hold both machines by count, but each machine needs its own node.
    let cap = snapshot(vec![node("h-0", Some("h200"), 16, 0)]);
    let pools = vec![pool("a", Some("h200"), 1, 8), pool("b", Some("h200"), 1, 8)];
    let queue = [job("j", 0, 1, pools)];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert!(plan.admit.is_empty());
}

#[test]
fn reservations_of_admitted_jobs_keep_their_gpus() {
    let cap = snapshot(vec![
        node("h-0", Some("h200"), 8, 0),
        node("h-1", Some("h200"), 8, 0),
    ]);
    let held = earlier_h200_machine(Vec::new());
    let queue = [
        job("a", 0, 1, vec![pool("m", Some("h200"), 1, 8)]),
        job("b", 0, 2, vec![pool("m", Some("h200"), 1, 8)]),
    ];
    let plan = plan_admissions(&queue, &cap, &[held], &[]);
    assert_eq!(admitted(&plan), ["a"]);
    assert_eq!(reason(&plan, "b"), Some(PendingReason::InsufficientGpu));
    // Jobs admitted in this pass and admitted jobs not bound yet have no pods to show yet, but
    // they hold the GPUs all the same.
    let m = message(&plan, "b");
    assert!(
        m.ends_with("h200 GPUs held by a (8 GPUs), earlier (8 GPUs)"),
        "{m}"
    );
}

#[test]
fn priority_then_submission_order_and_a_blocked_series_blocks_only_itself() {
    let cap = snapshot(vec![
        node("h-0", Some("h200"), 8, 0),
        node("l-0", Some("l40s"), 4, 0),
    ]);
    let queue = [
        job("small-late", 0, 5, vec![pool("m", Some("h200"), 1, 8)]),
        job(
            "big-h200",
            0,
            1,
            vec![pool("m", Some("h200"), 1, 8), pool("x", Some("h200"), 1, 8)],
        ),
        job("urgent", 9, 9, vec![pool("m", Some("h200"), 1, 4)]),
        job("l40s", 0, 3, vec![pool("m", Some("l40s"), 1, 4)]),
    ];
    // big-h200 needs two h200 nodes; the fleet has one: it never fits and blocks nobody.
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["urgent", "l40s"]);
    assert_eq!(
        reason(&plan, "big-h200"),
        Some(PendingReason::NoMatchingNode)
    );
    assert_eq!(
        reason(&plan, "small-late"),
        Some(PendingReason::InsufficientGpu)
    );

    // A job that does not fit right now reserves the node it waits for; later jobs backfill the
    // nodes it does not need, but not that one.
    let cap = snapshot(vec![
        node("h-0", Some("h200"), 8, 4),
        node("h-1", Some("h200"), 8, 4),
        node("l-0", Some("l40s"), 4, 0),
    ]);
    let queue = [
        job("big", 0, 1, vec![pool("m", Some("h200"), 1, 8)]),
        job("small", 0, 2, vec![pool("m", Some("h200"), 1, 2)]),
        job("small2", 0, 3, vec![pool("m", Some("h200"), 1, 2)]),
        job("small3", 0, 4, vec![pool("m", Some("h200"), 1, 2)]),
        job("other", 0, 5, vec![pool("m", Some("l40s"), 1, 4)]),
    ];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["small", "small2", "other"]);
    assert_eq!(nodes_of(&plan, "small"), ["h-1"]);
    assert_eq!(reason(&plan, "big"), Some(PendingReason::InsufficientGpu));
    assert_eq!(
        reason(&plan, "small3"),
        Some(PendingReason::QueuedBehindOthers)
    );
    assert!(message(&plan, "small3").contains("waiting behind job big"));
}

#[test]
fn cordoned_series_gives_no_matching_node_and_cpu_jobs_use_any_node() {
    let mut cordoned = node("h-0", Some("h200"), 8, 0);
    cordoned.cordoned = true;
    let cap = snapshot(vec![cordoned, node("c-0", None, 0, 0)]);
    let mut cpu = pool("main", None, 1, 0);
    cpu["cpus"] = serde_json::json!(2.0);
    let queue = [
        job("gpu", 0, 1, vec![pool("m", Some("h200"), 1, 8)]),
        job("cpu", 0, 2, vec![cpu]),
    ];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["cpu"]);
    assert_eq!(reason(&plan, "gpu"), Some(PendingReason::NoMatchingNode));
}

#[test]
fn cpu_job_larger_than_free_cpu_waits_with_insufficient_cpu() {
    let mut busy = node("c-0", None, 0, 0);
    busy.cpus_used = 95.0;
    let cap = snapshot(vec![busy]);
    let queue = [job("cpu", 0, 1, vec![pool("main", None, 1, 0)])];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(reason(&plan, "cpu"), Some(PendingReason::InsufficientCpu));
}

#[test]
fn jobs_already_stopping_or_admitted_are_not_planned() {
    let cap = snapshot(vec![node("h-0", Some("h200"), 8, 0)]);
    let mut stopping = job("s", 0, 1, vec![pool("m", Some("h200"), 1, 8)]);
    stopping.stop_requested = true;
    let mut running = job("r", 0, 1, vec![pool("m", Some("h200"), 1, 8)]);
    running.state = JobState::Admitted;
    let queue = [stopping, running];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert!(plan.admit.is_empty() && plan.waiting.is_empty());
}

#[test]
fn job_that_fits_idle_fleet_only_by_mixing_node_sizes_is_not_reported_as_never_fitting() {
    // One 8-GPU and one 2-GPU node: only one node fits the largest machine of the series, so the
    // quick idle-fleet test cannot vouch for the job and the full placement must decide.
    let cap = snapshot(vec![
        node("h-big", Some("h200"), 8, 0),
        node("h-small", Some("h200"), 2, 0),
    ]);
    let mixed = job(
        "mixed",
        0,
        1,
        vec![
            pool("main", Some("h200"), 1, 8),
            pool("aux", Some("h200"), 1, 2),
        ],
    );
    let too_big = job("too-big", 0, 2, vec![pool("main", Some("h200"), 2, 8)]);
    let queue = [mixed, too_big];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["mixed"]);
    assert_eq!(
        reason(&plan, "too-big"),
        Some(PendingReason::NoMatchingNode)
    );
}

fn sized(name: &str, series: Option<&str>, gpus: u32, cpus: f64, memory_gb: f64) -> NodeCapacity {
    NodeCapacity::ready(name, series, gpus, cpus, memory_gb)
}

fn cpu_pool(cpus: f64, memory_gb: f64) -> serde_json::Value {
    serde_json::json!({"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
        "cpus": cpus, "memory_gb": memory_gb})
}

fn gpu_pool(series: &str, nodes: u32, gpus: u32) -> serde_json::Value {
    // The JobSpec defaults: 4 CPUs and 32 GiB per GPU.
    serde_json::json!({"name": "main", "series": series, "nodes": nodes, "gpus_per_node": gpus,
        "cpus": 4.0 * f64::from(gpus), "memory_gb": 32.0 * f64::from(gpus)})
}

/// The sample fleet (`examples/fleet.yaml`): h200 × 4 (one cordoned), l40s × 2, cpu × 2.
fn sample_fleet() -> Vec<NodeCapacity> {
    let mut nodes: Vec<NodeCapacity> = (0..4)
        .map(|i| sized(&format!("h200-{i}"), Some("h200"), 8, 192.0, 2048.0))
        .collect();
    nodes[3].cordoned = true;
    nodes.extend((0..2).map(|i| sized(&format!("l40s-{i}"), Some("l40s"), 4, 64.0, 512.0)));
    nodes.extend((0..2).map(|i| sized(&format!("cpu-{i}"), None, 0, 32.0, 128.0)));
    nodes
}

/// Takes the admitted jobs' machines from `cap` on their planned nodes, as the next pass sees it.
fn apply(cap: &mut CapacitySnapshot, queue: &[JobRecord], plan: &AdmissionPlan) {
    for a in &plan.admit {
        let Some(job) = queue.iter().find(|j| j.id == a.job_id) else {
            continue;
        };
        for placement in &a.placements {
            let Some(pool) = job.spec.pools.iter().find(|p| p.name == placement.pool) else {
                continue;
            };
            for name in &placement.nodes {
                let Some(n) = cap.nodes.iter_mut().find(|n| &n.name == name) else {
                    continue;
                };
                n.gpus_used += pool.gpus_per_node;
                n.cpus_used += pool.cpus;
                n.memory_gb_used += pool.memory_gb;
                n.holders.push(crate::capacity::Holder {
                    job_id: job.id.clone(),
                    gpus: pool.gpus_per_node,
                    cpus: pool.cpus,
                    memory_gb: pool.memory_gb,
                });
            }
        }
    }
    *cap = CapacitySnapshot::from_nodes(cap.taken_at_ms, std::mem::take(&mut cap.nodes));
}

#[test]
fn the_new_user_scenario_uses_cpu_nodes_first_and_keeps_the_h200_gpus_usable() {
    // 30 small CPU jobs and 8 jobs of 30 CPUs, then an h200 × 3 × 8 job.
    let mut queue: Vec<JobRecord> = (0..30)
        .map(|i| job(&format!("small-{i:02}"), 0, i, vec![cpu_pool(1.0, 2.0)]))
        .collect();
    queue.extend((0..8).map(|i| job(&format!("wide-{i}"), 0, 100 + i, vec![cpu_pool(30.0, 8.0)])));
    let mut cap = snapshot(sample_fleet());
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(plan.admit.len(), 38, "{:?}", plan.waiting);
    for i in 0..30 {
        let on = nodes_of(&plan, &format!("small-{i:02}"));
        assert!(
            on[0].starts_with("cpu-"),
            "small-{i:02} on {on:?}: CPU nodes come first"
        );
    }
    apply(&mut cap, &queue, &plan);
    // Every h200 node keeps 4 CPUs and 32 GiB for each of its 8 free GPUs.
    for n in cap
        .nodes
        .iter()
        .filter(|n| n.series.as_deref() == Some("h200") && !n.cordoned)
    {
        assert!(
            n.cpus - n.cpus_used >= 32.0,
            "{}: {} CPUs used",
            n.name,
            n.cpus_used
        );
    }
    let gpu = job("h200-3x8", 0, 1_000, vec![gpu_pool("h200", 3, 8)]);
    let plan = plan_admissions(std::slice::from_ref(&gpu), &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["h200-3x8"], "{:?}", plan.waiting);
    let mut planned = nodes_of(&plan, "h200-3x8");
    planned.sort_unstable();
    assert_eq!(planned, ["h200-0", "h200-1", "h200-2"]);
}

#[test]
fn cpu_jobs_spilled_onto_gpu_nodes_never_take_what_free_gpus_keep() {
    // CPU nodes full; CPU jobs spill onto one 8-GPU node of 96 CPUs: they may use 96 - 8 × 4 = 64.
    let mut full = sized("cpu-0", None, 0, 32.0, 128.0);
    full.cpus_used = 32.0;
    let cap = snapshot(vec![full, sized("h-0", Some("h200"), 8, 96.0, 1024.0)]);
    let queue: Vec<JobRecord> = (0..3)
        .map(|i| job(&format!("spill-{i}"), 0, i, vec![cpu_pool(30.0, 8.0)]))
        .chain([job("gpu", 0, 10, vec![gpu_pool("h200", 1, 8)])])
        .collect();
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["spill-0", "spill-1", "gpu"]);
    assert_eq!(
        reason(&plan, "spill-2"),
        Some(PendingReason::InsufficientCpu)
    );
    assert!(
        message(&plan, "spill-2").contains("GPU nodes keep 4 CPUs and 32 GiB per free GPU"),
        "{}",
        message(&plan, "spill-2")
    );
}

#[test]
fn cpu_jobs_larger_than_every_cpu_node_never_hold_gpu_nodes_from_a_gpu_job() {
    // Issue 29's scenario on the sample fleet: two 32-CPU jobs fill the CPU nodes, six
    // 90-CPU jobs spill onto the three h200 nodes (three run, three wait), then a job for
    // 3 × 8 h200 GPUs comes.
    let mut queue: Vec<JobRecord> = (0..2)
        .map(|i| job(&format!("cpu32-{i}"), 0, i, vec![cpu_pool(32.0, 8.0)]))
        .collect();
    queue.extend((0..6).map(|i| job(&format!("cpu90-{i}"), 0, 10 + i, vec![cpu_pool(90.0, 8.0)])));
    let mut cap = snapshot(sample_fleet());
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(
        admitted(&plan),
        ["cpu32-0", "cpu32-1", "cpu90-0", "cpu90-1", "cpu90-2"]
    );
    apply(&mut cap, &queue, &plan);
    let left: Vec<JobRecord> = queue
        .iter()
        .filter(|j| !plan.admit.iter().any(|a| a.job_id == j.id))
        .cloned()
        .chain([job("h200-3x8", 0, 100, vec![gpu_pool("h200", 3, 8)])])
        .collect();
    let plan = plan_admissions(&left, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["h200-3x8"], "{:?}", plan.waiting);
    for id in ["cpu90-3", "cpu90-4", "cpu90-5"] {
        assert_eq!(reason(&plan, id), Some(PendingReason::InsufficientCpu));
        let m = message(&plan, id);
        assert!(
            m.contains("no CPU node is that large, so it waits for spare CPU on GPU nodes, where GPU jobs go first"),
            "{m}"
        );
        // True of the snapshot the plan saw: no h200 node has 90 CPUs beyond its GPUs' share.
        assert!(m.contains("0 GPU node(s) have it free now"), "{m}");
    }
    // And once the GPU job holds the nodes, the CPU jobs still wait for the same reason.
    apply(&mut cap, &left, &plan);
    let rest: Vec<JobRecord> = left.into_iter().filter(|j| j.id != "h200-3x8").collect();
    let plan = plan_admissions(&rest, &cap, &[], &[]);
    assert!(plan.admit.is_empty());
    assert_eq!(
        reason(&plan, "cpu90-3"),
        Some(PendingReason::InsufficientCpu)
    );
}

#[test]
fn a_cpu_job_that_fits_only_gpu_nodes_waits_for_their_reservation_without_making_one() {
    // One h200 node reserved by a waiting GPU job: the big CPU job would fit it without the
    // reservation, so it says whose the node is, and it reserves nothing itself.
    let mut h = sized("h-0", Some("h200"), 8, 192.0, 2048.0);
    h.gpus_used = 4;
    let cap = snapshot(vec![h, sized("cpu-0", None, 0, 32.0, 128.0)]);
    let queue = [
        job("gpu8", 5, 1, vec![gpu_pool("h200", 1, 8)]),
        job("cpu90", 0, 2, vec![cpu_pool(90.0, 8.0)]),
        job("cpu30", 0, 3, vec![cpu_pool(30.0, 8.0)]),
    ];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["cpu30"], "{:?}", plan.waiting);
    assert_eq!(nodes_of(&plan, "cpu30"), ["cpu-0"]);
    assert_eq!(
        reason(&plan, "cpu90"),
        Some(PendingReason::QueuedBehindOthers)
    );
    let m = message(&plan, "cpu90");
    assert!(
        m.contains("spare CPU on GPU nodes, where GPU jobs go first"),
        "{m}"
    );
    assert!(m.contains("held for job gpu8"), "{m}");
}

#[test]
fn a_gpu_job_short_of_cpu_says_cpu_and_names_the_holders() {
    let mut a = sized("h-0", Some("h200"), 8, 64.0, 1024.0);
    a.cpus_used = 60.0;
    a.holders = vec![crate::capacity::Holder {
        job_id: JobId::parse("hog").unwrap(),
        gpus: 0,
        cpus: 60.0,
        memory_gb: 8.0,
    }];
    let cap = snapshot(vec![a]);
    let queue = [job("j", 0, 1, vec![gpu_pool("h200", 1, 8)])];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientCpu));
    let m = message(&plan, "j");
    assert!(m.contains("1 have the GPUs, 0 also the CPUs"), "{m}");
    assert!(
        m.contains("CPUs on h200 nodes held by hog (60 CPUs)"),
        "{m}"
    );

    let mut b = sized("h-0", Some("h200"), 8, 64.0, 300.0);
    b.memory_gb_used = 200.0;
    let queue = [job("j", 0, 1, vec![gpu_pool("h200", 1, 8)])];
    let plan = plan_admissions(&queue, &snapshot(vec![b]), &[], &[]);
    assert_eq!(reason(&plan, "j"), Some(PendingReason::InsufficientMemory));
}

#[test]
fn a_small_cpu_job_behind_a_waiting_gpu_job_is_admitted_in_the_same_pass() {
    let mut busy = sized("h-0", Some("h200"), 8, 96.0, 1024.0);
    busy.gpus_used = 4;
    let cap = snapshot(vec![busy, sized("cpu-0", None, 0, 32.0, 128.0)]);
    let queue = [
        job("head", 5, 1, vec![gpu_pool("h200", 1, 8)]),
        job("tiny", 0, 2, vec![cpu_pool(1.0, 1.0)]),
    ];
    let plan = plan_admissions(&queue, &cap, &[], &[]);
    assert_eq!(admitted(&plan), ["tiny"]);
    assert_eq!(nodes_of(&plan, "tiny"), ["cpu-0"]);
    assert_eq!(reason(&plan, "head"), Some(PendingReason::InsufficientGpu));
}

#[test]
fn a_big_job_is_not_starved_by_a_stream_of_small_ones() {
    // Twelve 8-GPU nodes, each busy with a 4-GPU job. A 10-node job waits; every pass, four new
    // 4-GPU jobs arrive and running ones end two passes after admission. Without reservations the
    // small jobs would refill each node as it drains and the big job would never start.
    let names: Vec<String> = (0..12).map(|i| format!("n-{i:02}")).collect();
    let mut running: Vec<(String, String, u32, usize)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("old-{i}"), n.clone(), 4, i % 3))
        .collect();
    let mut queue = vec![job("big", 0, 0, vec![gpu_pool("h200", 10, 8)])];
    let mut big_admitted_at = None;
    for pass in 0..20_usize {
        running.retain(|r| r.3 > pass);
        queue.extend((0..4).map(|k| {
            let id = format!("small-{pass}-{k}");
            job(
                &id,
                0,
                1 + (pass * 4 + k) as i64,
                vec![gpu_pool("h200", 1, 4)],
            )
        }));
        let nodes = names
            .iter()
            .map(|n| {
                let used: u32 = running.iter().filter(|r| &r.1 == n).map(|r| r.2).sum();
                let mut c = sized(n, Some("h200"), 8, 96.0, 1024.0);
                c.gpus_used = used;
                c.cpus_used = f64::from(used) * 4.0;
                c.memory_gb_used = f64::from(used) * 32.0;
                c
            })
            .collect();
        let plan = plan_admissions(&queue, &snapshot(nodes), &[], &[]);
        for a in &plan.admit {
            let Some(job) = queue.iter().find(|j| j.id == a.job_id) else {
                continue;
            };
            let gpus = job.spec.pools[0].gpus_per_node;
            for n in &a.placements[0].nodes {
                running.push((a.job_id.to_string(), n.clone(), gpus, pass + 2));
            }
        }
        if plan.admit.iter().any(|a| a.job_id == "big") {
            big_admitted_at = Some(pass);
            break;
        }
        let admitted_ids: Vec<String> = admitted(&plan).into_iter().map(String::from).collect();
        drop(plan);
        queue.retain(|j| !admitted_ids.iter().any(|a| *a == j.id));
    }
    let pass = big_admitted_at.expect("the big job starved for 20 passes");
    // The old jobs end by pass 3 and nothing new lands on the ten reserved nodes.
    assert!(pass <= 3, "admitted at pass {pass}");
}

#[test]
fn admitted_but_unbound_machines_keep_their_planned_nodes() {
    let cap = snapshot(vec![
        node("h-0", Some("h200"), 8, 0),
        node("h-1", Some("h200"), 8, 0),
    ]);
    let held = earlier_h200_machine(vec!["h-0".into()]);
    let queue = [job("next", 0, 1, vec![pool("m", Some("h200"), 1, 8)])];
    let plan = plan_admissions(&queue, &cap, &[held], &[]);
    assert_eq!(
        nodes_of(&plan, "next"),
        ["h-1"],
        "h-0 is planned for the earlier job"
    );
}

/// Deterministic xorshift for the property tests.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn insufficient_gpu_is_only_said_when_too_few_nodes_have_the_free_gpus() {
    // Random partly-busy fleets and queues; at most one pool per series per job, so "too few
    // nodes" is a plain count. After applying the plan's admissions (what the next snapshot
    // shows), every job waiting with InsufficientGpu must see fewer nodes of its series with
    // the free GPUs than it needs, and every GPU job waiting with InsufficientCpu/Memory must see
    // enough of them (GPUs were not what it lacked).
    let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
    let series = ["h200", "l40s", "a10g"];
    let mut checked = 0;
    for round in 0..200 {
        let (gpu_nodes, cpu_nodes) = (4 + rng.below(12), rng.below(3));
        let mut nodes: Vec<NodeCapacity> = (0..gpu_nodes)
            .map(|i| {
                let s = series[rng.below(3) as usize];
                let mut n = sized(&format!("n-{i}"), Some(s), 8, 64.0, 512.0);
                n.gpus_used = rng.below(9) as u32;
                n.cpus_used = rng.below(65) as f64;
                n.memory_gb_used = rng.below(513) as f64;
                n.cordoned = rng.below(10) == 0;
                n
            })
            .collect();
        nodes.extend((0..cpu_nodes).map(|i| sized(&format!("c-{i}"), None, 0, 32.0, 128.0)));
        let queue: Vec<JobRecord> = (0..(1 + rng.below(12)))
            .map(|i| {
                let s = series[rng.below(3) as usize];
                let g = [1, 2, 4, 8][rng.below(4) as usize];
                let pools = if rng.below(6) == 0 {
                    vec![cpu_pool(
                        1.0 + rng.below(40) as f64,
                        1.0 + rng.below(100) as f64,
                    )]
                } else {
                    vec![gpu_pool(s, 1 + rng.below(3) as u32, g)]
                };
                job(
                    &format!("r{round}-{i}"),
                    rng.below(3) as i32,
                    i as i64,
                    pools,
                )
            })
            .collect();
        let mut cap = snapshot(nodes);
        let plan = plan_admissions(&queue, &cap, &[], &[]);
        apply(&mut cap, &queue, &plan);
        for w in &plan.waiting {
            let Some(job) = queue.iter().find(|j| j.id == w.job_id) else {
                continue;
            };
            let p = &job.spec.pools[0];
            let Some(s) = p.series.as_deref() else {
                continue;
            };
            let with_gpus = cap
                .nodes
                .iter()
                .filter(|n| n.series.as_deref() == Some(s) && n.free_gpus() >= p.gpus_per_node)
                .count() as u32;
            match w.reason {
                PendingReason::InsufficientGpu => {
                    checked += 1;
                    assert!(
                        with_gpus < p.nodes,
                        "{}: {} ({with_gpus} nodes have the GPUs)",
                        w.job_id,
                        w.message
                    );
                }
                PendingReason::InsufficientCpu | PendingReason::InsufficientMemory => {
                    assert!(with_gpus >= p.nodes, "{}: {}", w.job_id, w.message);
                }
                _ => {}
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} InsufficientGpu cases were generated"
    );
}

// ---------------------------------------------------------------------------------------------
// Tenants: fair share, quotas, borrowing.

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
