//! Figures of a run, the API server's request counters, `/proc` readings, and the Markdown table.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Seek};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::observe::Snapshot;
use crate::workload::{Outcome, ReclaimPhase, Shape, Workload};
use crate::{
    KCM_ARGS, KUEUE_USER, NODE_CPUS, NODE_GPUS, NODE_MEMORY_GB, NODES_PER_SERIES, Options,
    SCHEDULER_ARGS, SERIES, SHIPPED_QPS, SUBMITTERS, System, TUNEPLANE_USER,
};

/// `apiserver_request_total` summed by (verb, resource).
pub type Requests = BTreeMap<(String, String), f64>;

/// Resources left out of the per-job count: the fake kubelets' node heartbeats and Leases, which
/// tick at the same rate whatever runs.
const HEARTBEATS: [&str; 2] = ["nodes", "leases"];

pub async fn apiserver_requests(client: &kube::Client) -> anyhow::Result<Requests> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut out = Requests::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let get = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry((get("verb"), get("resource"))).or_default() += value;
    }
    Ok(out)
}

/// Requests made during a run, by kind.
pub struct RequestDelta {
    pub total: f64,
    pub writes: f64,
    pub heartbeats: f64,
    /// The largest (verb resource) entries, for the record.
    pub top: Vec<(String, f64)>,
}

impl RequestDelta {
    pub fn between(before: &Requests, after: &Requests) -> RequestDelta {
        let mut d = RequestDelta {
            total: 0.0,
            writes: 0.0,
            heartbeats: 0.0,
            top: Vec::new(),
        };
        for ((verb, resource), v) in after {
            let n = v - before
                .get(&(verb.clone(), resource.clone()))
                .unwrap_or(&0.0);
            if n <= 0.0 {
                continue;
            }
            if HEARTBEATS.contains(&resource.as_str()) {
                d.heartbeats += n;
                continue;
            }
            d.total += n;
            if matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "DELETE" | "APPLY") {
                d.writes += n;
            }
            d.top.push((format!("{verb} {resource}"), n));
        }
        d.top.sort_by(|a, b| b.1.total_cmp(&a.1));
        d.top.truncate(8);
        d
    }
}

/// The controller's own requests during the run: the audit log's events of its user from byte
/// `from` on (the same Metadata-level policy records both controllers' ServiceAccounts).
pub struct OwnRequests {
    pub total: f64,
    pub writes: f64,
    pub top: Vec<(String, f64)>,
}

pub fn audit_requests(path: &Path, from: u64, user: &str) -> anyhow::Result<OwnRequests> {
    let mut file = std::fs::File::open(path)?;
    file.seek(std::io::SeekFrom::Start(from))?;
    let mut by_kind: BTreeMap<String, f64> = BTreeMap::new();
    let (mut total, mut writes) = (0.0, 0.0);
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let Ok(ev) = serde_json::from_str::<Value>(&line) else {
            continue; // a line cut by the copy: not a whole event
        };
        if ev["user"]["username"] != user || ev["stage"] != "ResponseComplete" {
            continue;
        }
        let verb = ev["verb"].as_str().unwrap_or_default();
        let resource = ev["objectRef"]["resource"].as_str().unwrap_or("-");
        total += 1.0;
        if matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) {
            writes += 1.0;
        }
        *by_kind.entry(format!("{verb} {resource}")).or_default() += 1.0;
    }
    let mut top: Vec<(String, f64)> = by_kind.into_iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    top.truncate(8);
    Ok(OwnRequests { total, writes, top })
}

/// When the API server completed the first successful write by `user` of the `resource` named
/// `name` (no subresource) in the audit log from byte `from` on: the server's own clock, not the
/// harness's watch, which lags it under load (a pod seen 1-2.4 s after its create).
pub fn audit_first_write(
    path: &Path,
    from: u64,
    user: &str,
    resource: &str,
    name: &str,
) -> anyhow::Result<Option<std::time::SystemTime>> {
    let mut file = std::fs::File::open(path)?;
    file.seek(std::io::SeekFrom::Start(from))?;
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let Ok(ev) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let r = &ev["objectRef"];
        let ok = ev["user"]["username"] == user
            && ev["stage"] == "ResponseComplete"
            && matches!(ev["verb"].as_str(), Some("create" | "update" | "patch"))
            && r["resource"] == resource
            && r["name"] == name
            && r.get("subresource").is_none()
            && ev["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300);
        if !ok {
            continue;
        }
        let Some(at) = ev["stageTimestamp"].as_str() else {
            continue;
        };
        let at: k8s_openapi::jiff::Timestamp = at.parse()?;
        return Ok(Some(std::time::SystemTime::from(at)));
    }
    Ok(None)
}

/// The one-minute load average, for the record of each run.
pub fn load_average() -> Value {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(Value::Null, |v| json!(v))
}

/// Why a run did not complete: the state of what the systems and KubeRay were working on, from
/// the API server at the end (RayJobs by deployment status, admitted RayJobs without a bound
/// submitter, pods by phase and unbound ones, Kueue's Workloads by condition with the commonest
/// reasons).
pub async fn diagnose(
    client: &kube::Client,
    system: System,
    snap: &Snapshot,
    w: &Workload,
) -> Value {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DynamicObject, ListParams};
    let mut out = json!({});
    let rayjobs: Api<DynamicObject> =
        Api::all_with(client.clone(), &crate::kueue::rayjob_resource());
    if let Ok(list) = rayjobs
        .list(&ListParams::default().labels(crate::KEY_LABEL))
        .await
    {
        let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
        for rj in &list.items {
            let status = rj.data["status"]["jobDeploymentStatus"]
                .as_str()
                .unwrap_or("(none yet)");
            let suspended = rj.data["spec"]["suspend"] == Value::Bool(true);
            let key = if suspended {
                format!("{status}, suspended")
            } else {
                status.to_owned()
            };
            *by_status.entry(key).or_default() += 1;
        }
        out["rayjobs_by_deployment_status"] = json!(by_status);
    }
    let bound = snap.bound_by_job();
    let gang_keys: Vec<&crate::workload::Job> = w
        .jobs
        .iter()
        .filter(|j| j.series.is_some() && snap.admitted_at(&j.key).is_some())
        .collect();
    // A gang whose machines are bound but whose submitter is not (or does not exist): KubeRay
    // creates the submitter only once the Ray cluster is ready.
    let without_submitter = gang_keys
        .iter()
        .filter(|j| {
            bound.get(&j.key).is_some_and(|(times, machines)| {
                *machines >= j.nodes as usize && times.len() <= *machines
            })
        })
        .count();
    out["admitted_gangs"] = json!(gang_keys.len());
    out["admitted_gangs_with_machines_bound_but_no_bound_submitter"] = json!(without_submitter);
    let pods: Api<Pod> = Api::all(client.clone());
    if let Ok(list) = pods.list(&ListParams::default()).await {
        let mut by_phase: BTreeMap<String, u64> = BTreeMap::new();
        let mut unbound = 0u64;
        for p in &list.items {
            let phase = p
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            *by_phase.entry(phase).or_default() += 1;
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
                unbound += 1;
            }
        }
        out["pods_by_phase"] = json!(by_phase);
        out["pods_unbound"] = json!(unbound);
    }
    if system == System::Kueue {
        let workloads: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", "Workload"),
                "workloads",
            ),
        );
        if let Ok(list) = workloads.list(&ListParams::default()).await {
            let mut states: BTreeMap<String, u64> = BTreeMap::new();
            let mut reasons: HashMap<String, u64> = HashMap::new();
            for wl in &list.items {
                let conds = wl.data["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let is = |t: &str| {
                    conds
                        .iter()
                        .any(|c| c["type"] == t && c["status"] == "True")
                };
                let state = if is("Admitted") {
                    "Admitted"
                } else if is("QuotaReserved") {
                    "QuotaReserved, not Admitted"
                } else {
                    "pending"
                };
                *states.entry(state.to_owned()).or_default() += 1;
                if state == "pending"
                    && let Some(c) = conds.iter().find(|c| c["type"] == "QuotaReserved")
                {
                    let m = c["message"].as_str().unwrap_or_default();
                    // The message names counts that differ per workload: keep its first clause.
                    let m = m.split(',').next().unwrap_or(m);
                    *reasons.entry(m.to_owned()).or_default() += 1;
                }
            }
            let mut reasons: Vec<(String, u64)> = reasons.into_iter().collect();
            reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
            reasons.truncate(3);
            out["workloads"] = json!(states);
            out["pending_workload_reasons"] = json!(reasons);
        }
    }
    out
}

/// User + system CPU seconds of a process so far.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command name.
    Ok((ticks(11) + ticks(12)) / 100.0)
}

/// Peak resident memory of a process (VmHWM), MiB.
pub fn peak_rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    Ok(kb / 1024.0)
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 100.0).round() / 100.0
}

/// The `p` percentile of the submitted jobs' waits, where `sorted` holds the admitted ones and
/// `pending` jobs were not admitted by the end: a percentile that falls among those is only known
/// to exceed `floor` (the shortest time any of them waited), and says so.
fn percentile(sorted: &[f64], pending: usize, floor: f64, p: f64) -> Value {
    let n = sorted.len() + pending;
    if n == 0 {
        return Value::Null;
    }
    let i = ((n as f64 - 1.0) * p).round() as usize;
    match sorted.get(i) {
        Some(v) => json!((v * 100.0).round() / 100.0),
        None => json!(format!("> {floor:.0}")),
    }
}

/// Median, p95 and p99 of `values` (seconds, rounded), or nulls when there are none.
fn spread(mut values: Vec<f64>) -> Value {
    if values.is_empty() {
        return json!({"p50": null, "p95": null, "p99": null, "n": 0});
    }
    values.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let i = ((values.len() as f64 - 1.0) * p).round() as usize;
        (values[i] * 100.0).round() / 100.0
    };
    json!({"p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "n": values.len()})
}

#[allow(clippy::too_many_arguments)] // one run's readings, each from its own source
pub fn figures(
    w: &Workload,
    out: &Outcome,
    snap: &Snapshot,
    decisions: &HashMap<String, Instant>,
    started: Instant,
    requests: &RequestDelta,
    own: &OwnRequests,
    cpu: f64,
    peak_mib: f64,
) -> Value {
    let rel = |t: Instant| t.saturating_duration_since(started);
    let first_submit = out
        .submitted
        .iter()
        .flatten()
        .min()
        .copied()
        .unwrap_or_default();
    let mut latencies = Vec::new();
    let mut last_admission = Duration::ZERO;
    let mut admitted = 0usize;
    let mut fully_bound = 0usize;
    let mut last_bound = Duration::ZERO;
    let mut partial = 0usize;
    let bound = snap.bound_by_job();
    for (job, sub) in w.jobs.iter().zip(&out.submitted) {
        let (Some(at), Some(sub)) = (snap.admitted_at(&job.key), sub) else {
            continue;
        };
        admitted += 1;
        latencies.push(rel(at).saturating_sub(*sub).as_secs_f64());
        last_admission = last_admission.max(rel(at));
        if let Some(t) = snap.all_bound_at(&bound, job) {
            fully_bound += 1;
            last_bound = last_bound.max(rel(t));
        }
        let machines = bound.get(&job.key).map_or(0, |b| b.1);
        if job.nodes > 1 && machines < job.nodes as usize {
            partial += 1;
        }
    }
    latencies.sort_by(f64::total_cmp);
    let last_submit = out
        .submitted
        .iter()
        .flatten()
        .max()
        .copied()
        .unwrap_or_default();
    // Small jobs all fit the fleet, so one not admitted by the end is still waiting for the
    // system; gang jobs beyond the fleet wait for capacity by design and are left out.
    let pending = if w.shape == Shape::Small {
        w.jobs.len() - admitted
    } else {
        0
    };
    let floor = out.ended.saturating_sub(last_submit).as_secs_f64();
    let window = last_admission.saturating_sub(first_submit).as_secs_f64();
    // Per job, from the start of its submission: the system's decision, Kueue's Admitted, the
    // workload able to run, its first pod bound, all its pods bound.
    let mut phases: [Vec<f64>; 5] = Default::default();
    for (job, sub) in w.jobs.iter().zip(&out.submitted) {
        let Some(sub) = sub else { continue };
        let since = |t: Instant| rel(t).saturating_sub(*sub).as_secs_f64();
        if let Some(t) = decisions.get(&job.key) {
            phases[0].push(since(*t));
        }
        if let Some(t) = snap.kueue_admitted.get(&job.key) {
            phases[1].push(since(*t));
        }
        if let Some(t) = snap.admitted_at(&job.key) {
            phases[2].push(since(t));
        }
        if let Some((times, _)) = bound.get(&job.key)
            && let Some(first) = times.iter().min()
        {
            phases[3].push(since(*first));
        }
        if let Some(t) = snap.all_bound_at(&bound, job) {
            phases[4].push(since(t));
        }
    }
    let [decided, kueue_admitted, workload, first_bound, all_bound] = phases;
    let per_job = |v: f64| {
        if admitted > 0 {
            ((v / admitted as f64) * 100.0).round() / 100.0
        } else {
            0.0
        }
    };
    let mut f = json!({
        "jobs": w.jobs.len(),
        "refused": out.refused,
        "first_refusal": out.first_error,
        "submit_seconds": secs(out.submit_done.saturating_sub(first_submit)),
        "admitted": admitted,
        "admitted_per_second": if window > 0.0 { ((admitted as f64 / window) * 10.0).round() / 10.0 } else { 0.0 },
        "admission_p50_seconds": percentile(&latencies, pending, floor, 0.5),
        "admission_p99_seconds": percentile(&latencies, pending, floor, 0.99),
        "admitted_jobs_fully_bound": fully_bound,
        "all_bound_seconds": (fully_bound == admitted && admitted > 0).then(|| secs(last_bound.saturating_sub(first_submit))),
        "timeline_seconds": {
            "decision": spread(decided),
            "kueue_admitted": spread(kueue_admitted),
            "workload": spread(workload),
            "first_pod_bound": spread(first_bound),
            "all_pods_bound": spread(all_bound),
        },
        "controller_requests": own.total,
        "controller_requests_per_job": per_job(own.total),
        "controller_writes_per_job": per_job(own.writes),
        "controller_top_requests": own.top.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "api_requests": requests.total,
        "api_requests_per_job": per_job(requests.total),
        "api_writes_per_job": per_job(requests.writes),
        "node_heartbeat_requests": requests.heartbeats,
        "top_requests": requests.top.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "controller_cpu_seconds": (cpu * 10.0).round() / 10.0,
        "controller_cpu_ms_per_job": per_job(cpu * 1000.0),
        "controller_peak_rss_mib": peak_mib.round(),
        "partially_placed_gangs": partial,
        "run_seconds": secs(out.ended),
        "end": out.end_reason,
    });
    if w.shape == Shape::Fair {
        let b = w
            .jobs
            .last()
            .expect("the fair workload ends with team-b's job");
        let b_sub = out.submitted.last().copied().flatten().unwrap_or_default();
        let b_at = snap.admitted_at(&b.key).map(rel);
        let a_before = w.jobs[..w.jobs.len() - 1]
            .iter()
            .filter(|j| {
                matches!((snap.admitted_at(&j.key).map(rel), b_at), (Some(a), Some(b)) if a <= b)
            })
            .count();
        f["team_b_wait_seconds"] = json!(b_at.map(|t| secs(t.saturating_sub(b_sub))));
        // Kueue: how long team-b's job took to reach Kueue's queues (its Workload's creation).
        f["team_b_queued_after_seconds"] = json!(
            snap.queued
                .get(&b.key)
                .map(|t| secs(rel(*t).saturating_sub(b_sub)))
        );
        f["team_a_admitted_before_b"] = json!(a_before);
        f["team_a_jobs"] = json!(w.jobs.len() - 1);
    }
    f
}

/// p50 and p99 of the waits of `values` (seconds) where `pending` more jobs waited past `floor`
/// without reaching that point.
fn p50_p99(mut values: Vec<f64>, pending: usize, floor: f64) -> Value {
    values.sort_by(f64::total_cmp);
    json!({
        "p50": percentile(&values, pending, floor, 0.5),
        "p99": percentile(&values, pending, floor, 0.99),
        "n": values.len(),
    })
}

/// The reclaim workload's figures: team-a's waits from each of its submissions, the victims
/// (jobs of team-b stopped once running: by the harness's watch, and by the system's own
/// account: TunePlane's attempts ended `Preempted`, Kueue's Workloads `Evicted`), the
/// controller's requests per victim from team-a's first submission on, and the victims' lost
/// work under one model for both: every job saves a checkpoint every `--checkpoint-every`
/// seconds from its start, and a victim stopped after running `t` seconds loses its GPUs ×
/// (`t` mod that interval) unless it saves once more within its grace (which TunePlane's runner
/// does on SIGTERM, and nothing in Kueue's setup does; fake pods save nothing either way).
#[allow(clippy::too_many_arguments)] // one run's readings, each from its own source
pub fn reclaim_figures(
    w: &Workload,
    out: &Outcome,
    phase: &ReclaimPhase,
    snap: &Snapshot,
    decisions: &HashMap<String, Instant>,
    started: Instant,
    own: &OwnRequests,
    all: &RequestDelta,
    tuneplane_victims: Option<&[crate::tuneplane_side::Victim]>,
    o: &Options,
) -> Value {
    let rel = |t: Instant| t.saturating_duration_since(started);
    let bound = snap.bound_by_job();
    let floor = out.ended.saturating_sub(phase.at).as_secs_f64();
    let (mut decided, mut runnable, mut all_bound) = (Vec::new(), Vec::new(), Vec::new());
    let mut team_a = 0;
    let mut last_bound = Duration::ZERO;
    for (job, sub) in w.jobs.iter().zip(&out.submitted) {
        let (true, Some(sub)) = (job.tenant == "team-a", sub) else {
            continue;
        };
        team_a += 1;
        let since = |t: Instant| rel(t).saturating_sub(*sub).as_secs_f64();
        if let Some(t) = decisions.get(&job.key) {
            decided.push(since(*t));
        }
        if let Some(t) = snap.admitted_at(&job.key) {
            runnable.push(since(t));
        }
        if let Some(t) = snap.all_bound_at(&bound, job) {
            all_bound.push(since(t));
            last_bound = last_bound.max(rel(t));
        }
    }
    let pending = |v: &Vec<f64>| team_a - v.len();
    let (pd, pr, pb) = (pending(&decided), pending(&runnable), pending(&all_bound));
    // Victims as the watch saw them: team-b's running RayJobs stopped after team-a began.
    let every = o.checkpoint_every.as_secs_f64();
    let mut ran = Vec::new();
    let (mut lost_gpu_s, mut stopped) = (0.0, 0usize);
    for job in w.jobs.iter().filter(|j| j.tenant == "team-b") {
        let (Some(run), Some(stop)) = (snap.ray_running.get(&job.key), snap.stopped.get(&job.key))
        else {
            continue;
        };
        if rel(*stop) < phase.at {
            continue;
        }
        stopped += 1;
        let t = stop.saturating_duration_since(*run).as_secs_f64();
        ran.push(t);
        lost_gpu_s += f64::from(job.nodes * crate::NODE_GPUS) * (t % every);
    }
    let gpu_hours = |s: f64| (s / 3600.0 * 100.0).round() / 100.0;
    // The system's own account of its victims.
    let (own_count, own_detail) = match tuneplane_victims {
        Some(v) => {
            let lost: f64 = v
                .iter()
                .map(|v| v.gpus as f64 * v.lost_seconds.unwrap_or(0) as f64)
                .sum();
            (
                v.len(),
                json!({
                    "source": "job records: attempts ended Preempted",
                    "of_team_a": v.iter().filter(|v| v.key.starts_with("ra-")).count(),
                    "recorded_lost_gpu_hours": gpu_hours(lost),
                    "recorded_run_seconds": spread(v.iter().filter_map(|v| v.ran_seconds).collect()),
                }),
            )
        }
        None => {
            let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
            for (_, reason, preempted) in snap.evicted.values() {
                let r = match preempted {
                    Some(p) => format!("{reason} ({p})"),
                    None => reason.clone(),
                };
                *reasons.entry(r).or_default() += 1;
            }
            (
                snap.evicted.len(),
                json!({
                    "source": "Workloads seen Evicted, by reason (Preempted condition's reason)",
                    "reasons": reasons,
                    "of_team_a": snap.evicted.keys().filter(|k| k.starts_with("ra-")).count(),
                }),
            )
        }
    };
    let victims = stopped.max(own_count);
    let per_victim = |v: f64| {
        if victims > 0 {
            ((v / victims as f64) * 100.0).round() / 100.0
        } else {
            0.0
        }
    };
    let tuneplane = tuneplane_victims.is_some();
    json!({
        "team_b_jobs": w.jobs.len() - team_a,
        "team_b_all_running_seconds": secs(phase.filled),
        "team_a_first_submission_seconds": secs(phase.at),
        "team_a_jobs": team_a,
        "team_a_decided": decided.len(),
        "team_a_decision": p50_p99(decided, pd, floor),
        "team_a_workload": p50_p99(runnable, pr, floor),
        "team_a_all_pods_bound": p50_p99(all_bound, pb, floor),
        "team_a_last_bound_seconds": (pb == 0 && team_a > 0).then(|| secs(last_bound.saturating_sub(phase.at))),
        "victims_stopped": stopped,
        "victims_by_system": own_count,
        "victims_detail": own_detail,
        "victim_run_seconds": spread(ran),
        "controller_requests": own.total,
        "controller_writes": own.writes,
        "controller_requests_per_preemption": per_victim(own.total),
        "controller_top_requests": own.top.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "api_requests_per_preemption": per_victim(all.total),
        "api_top_requests": all.top.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "checkpoint_every_seconds": o.checkpoint_every.as_secs(),
        "lost_gpu_hours_no_final_save": gpu_hours(lost_gpu_s),
        // TunePlane's runner saves on SIGTERM within the grace: nothing lost under the model;
        // Kueue's eviction has no save step.
        "lost_gpu_hours_final_save": if tuneplane { json!(0.0) } else { Value::Null },
    })
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| (kb / 1024.0 / 1024.0).round());
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": cpu,
        "memory_gib": mem_gib,
        "kernel": command_line("uname", &["-r"]),
    })
}

pub fn versions(o: &Options) -> Value {
    let module = |dir: &str, path: &str| {
        std::process::Command::new("go")
            .args(["list", "-m", "-f", "{{.Version}}", path])
            .current_dir(o.root.join("testenv").join(dir))
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    json!({
        "tuneplane": env!("CARGO_PKG_VERSION"),
        "tuneplane_commit": command_line("git", &["-C", &o.root.display().to_string(), "rev-parse", "--short", "HEAD"]),
        "kueue": module("kueue", "sigs.k8s.io/kueue"),
        "kubernetes": module("kube", "k8s.io/kubernetes"),
        "kuberay_compare_module": module("kuberay-compare", "github.com/ray-project/kuberay/ray-operator"),
        "etcd": module("etcd", "go.etcd.io/etcd/server/v3"),
        "go": command_line("go", &["env", "GOVERSION"]),
        "rustc": command_line("rustc", &["--version"]),
    })
}

pub fn settings(o: &Options) -> Value {
    json!({
        "fleet": format!("{} series ({}) x {NODES_PER_SERIES} nodes, {NODE_GPUS} GPUs, {NODE_CPUS} CPUs, {NODE_MEMORY_GB} GiB each, no taints", SERIES.len(), SERIES.join(", ")),
        "node_agent": "kubesim agent, release build, --start-seconds 0.2, pods run until deleted, Leases every 10 s, heartbeats every 30 s",
        "kube_controller_manager": KCM_ARGS,
        "kube_scheduler": SCHEDULER_ARGS,
        "kuberay_operator": format!("{}, --use-kubernetes-proxy {}", o.kuberay.display(), o.kuberay_args),
        "identity": format!("each controller as its own ServiceAccount ({TUNEPLANE_USER}: infra/kustomize's RBAC; {KUEUE_USER}: the release's config/components/rbac), neither exempt from API Priority and Fairness; the harness submits as admin and its requests count for neither"),
        "audit_policy": "Metadata level for both controllers' ServiceAccounts, nothing else",
        "setups": o.setups.iter().map(|s| s.name()).collect::<Vec<_>>(),
        "controller_client_limits": format!("qps Q, burst 2Q for the setup's Q; Kueue as shipped: qps {SHIPPED_QPS}, burst {}", SHIPPED_QPS * 2),
        "tuneplane": "one-machine stack (API + embedded stores + reconciler) as `tuneplane dev --kubeconfig` runs it, reconciler as its ServiceAccount, pass interval 3 s plus watch events, TUNEPLANE_KUBE_QPS/BURST",
        "kueue_shipped": "the release's controller_manager_config.yaml: groupKindConcurrency Job.batch 5, Pod 5, Workload 5 (RayJob.ray.io not named: 1 worker), clientConnection 50/100",
        "kueue_tuned": "groupKindConcurrency Job.batch 50, RayJob.ray.io 50, Pod 50, Workload 50; clientConnection Q/2Q",
        "kueue_common": "integrations batch/job and ray.io/rayjob, internal cert management, leader election, VisibilityOnDemand off (needs in-cluster credentials), webhooks not registered (jobs created suspended), one ClusterQueue (BestEffortFIFO) with a ResourceFlavor per series and quotas equal to the fleet, LocalQueues team-a and team-b; Admission Fair Sharing (usageHalfLifeTime 168h, usageSamplingInterval 5m) in the fair workload only",
        "submitters": SUBMITTERS,
        "workloads": {
            "small": format!("{} single-pod CPU jobs (1 CPU, 1 GiB): TunePlane Pod, Kueue batch/v1 Job", o.small),
            "gang": format!("{} RayJobs of 2-8 machines x 8 GPUs (32 CPUs, 256 GiB) on one series each", o.gang),
            "fair": format!("team-a submits {} small jobs; team-b one, {} s after team-a's first", o.flood, o.team_b_after.as_secs()),
            "reclaim": format!(
                "h200 GPU limits team-a {a}, team-b {b}, borrowing allowed (TunePlane: tenant quotas with borrow; Kueue: ClusterQueues team-a and team-b in cohort {cohort}, nominal quotas as the limits, preemption {pre}); team-b fills the series with {n} RayJobs of 1 machine x 8 GPUs (grace {g} s: TunePlane's deadlines.grace_seconds, Kueue's pods' terminationGracePeriodSeconds); once all run and {m} s (+2 s) later, team-a submits {na}; TunePlane preemption on, minimum run {m} s; lost-work model: a checkpoint every {c} s from each job's start",
                a = o.reclaim_a_gpus,
                b = NODES_PER_SERIES * NODE_GPUS - o.reclaim_a_gpus,
                cohort = crate::kueue::RECLAIM_COHORT,
                pre = crate::kueue::reclaim_preemption(),
                n = NODES_PER_SERIES,
                g = crate::workload::RECLAIM_GRACE_SECONDS,
                m = o.min_run.as_secs(),
                na = o.reclaim_a_gpus / NODE_GPUS,
                c = o.checkpoint_every.as_secs(),
            ),
        },
        "run_end": format!("complete: every job admitted with all pods bound, or (fleet full) every admitted job bound and no admission for {q} s; stalled: nothing admitted, created or bound for {q} s; timeout: {} s", o.timeout.as_secs(), q = o.quiet.as_secs()),
    })
}

/// The reclaim workload's table: a column per setup.
fn reclaim_markdown(runs: &[&Value]) -> String {
    let rows: [(&str, &str); 16] = [
        (
            "team-b's jobs all running after (s)",
            "team_b_all_running_seconds",
        ),
        (
            "team-a's first submission at (s)",
            "team_a_first_submission_seconds",
        ),
        ("team-a jobs decided / submitted", "team_a_decided"),
        ("team-a → decision p50 / p99 (s)", "team_a_decision"),
        (
            "team-a → workload runnable p50 / p99 (s)",
            "team_a_workload",
        ),
        (
            "team-a → all pods bound p50 / p99 (s)",
            "team_a_all_pods_bound",
        ),
        (
            "team-a's first submission → its last job bound (s)",
            "team_a_last_bound_seconds",
        ),
        ("victims: stopped running jobs seen", "victims_stopped"),
        ("victims: the system's own count", "victims_by_system"),
        (
            "victims' run time when stopped p50 / p95 (s)",
            "victim_run_seconds",
        ),
        (
            "controller's API requests from team-a's submission",
            "controller_requests",
        ),
        (
            "controller's API requests per preemption",
            "controller_requests_per_preemption",
        ),
        (
            "all API requests per preemption",
            "api_requests_per_preemption",
        ),
        (
            "lost GPU-hours, model, no final save",
            "lost_gpu_hours_no_final_save",
        ),
        (
            "lost GPU-hours, model, final save in the grace",
            "lost_gpu_hours_final_save",
        ),
        (
            "checkpoint interval of the model (s)",
            "checkpoint_every_seconds",
        ),
    ];
    let mut md = String::from("\n#### Workload `reclaim`\n\n|");
    for r in runs {
        md.push_str(&format!(" | {}", cell(&r["setup"])));
    }
    md.push_str(" |\n|---|");
    md.push_str(&"---:|".repeat(runs.len()));
    md.push('\n');
    for (label, key) in rows {
        md.push_str(&format!("| {label} |"));
        for r in runs {
            let f = &r["figures"]["reclaim"];
            let v = &f[key];
            let text = if key == "team_a_decided" {
                format!("{} / {}", cell(v), cell(&f["team_a_jobs"]))
            } else if v.get("p99").is_some() {
                format!("{} / {}", cell(&v["p50"]), cell(&v["p99"]))
            } else if v.get("p95").is_some() {
                format!("{} / {}", cell(&v["p50"]), cell(&v["p95"]))
            } else {
                cell(v)
            };
            md.push_str(&format!(" {text} |"));
        }
        md.push('\n');
    }
    for (label, key) in [
        ("run ended by", "end"),
        ("controller peak memory (MiB)", "controller_peak_rss_mib"),
    ] {
        md.push_str(&format!("| {label} |"));
        for r in runs {
            md.push_str(&format!(" {} |", cell(&r["figures"][key])));
        }
        md.push('\n');
    }
    md.push_str("| load average before / after |");
    for r in runs {
        md.push_str(&format!(
            " {} / {} |",
            cell(&r["load_average"]["before"]),
            cell(&r["load_average"]["after"])
        ));
    }
    md.push('\n');
    md
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn ratio(a: &Value, b: &Value) -> String {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

/// A figure of a run by its path (`timeline_seconds.decision.p50`).
fn at<'v>(figures: &'v Value, path: &str) -> &'v Value {
    path.split('.').fold(figures, |v, k| &v[k])
}

/// One table per workload, a column per setup, then TunePlane's ratios to Kueue at each QPS.
pub fn markdown(doc: &Value) -> String {
    let results = doc["results"].as_array().cloned().unwrap_or_default();
    let rows: Vec<(&str, &str)> = vec![
        ("jobs admitted", "admitted"),
        ("admitted per second", "admitted_per_second"),
        (
            "→ decision p50 / p95 / p99 (s)",
            "timeline_seconds.decision",
        ),
        (
            "→ Kueue Admitted p50 / p95 (s)",
            "timeline_seconds.kueue_admitted",
        ),
        (
            "→ workload runnable p50 / p95 (s)",
            "timeline_seconds.workload",
        ),
        (
            "→ first pod bound p50 / p95 (s)",
            "timeline_seconds.first_pod_bound",
        ),
        (
            "→ all pods bound p50 / p95 (s)",
            "timeline_seconds.all_pods_bound",
        ),
        (
            "first submission → every admitted pod bound (s)",
            "all_bound_seconds",
        ),
        (
            "controller's API requests per admitted job",
            "controller_requests_per_job",
        ),
        ("all API requests per admitted job", "api_requests_per_job"),
        (
            "controller CPU ms per admitted job",
            "controller_cpu_ms_per_job",
        ),
        ("controller peak memory (MiB)", "controller_peak_rss_mib"),
        (
            "gangs partially placed at the end",
            "partially_placed_gangs",
        ),
    ];
    let fair_rows = [
        ("team-b's wait for admission (s)", "team_b_wait_seconds"),
        (
            "→ its workload written, API server's clock (s)",
            "team_b_server_seconds",
        ),
        ("team-a jobs admitted before it", "team_a_admitted_before_b"),
        (
            "team-b's job in Kueue's queue after (s)",
            "team_b_queued_after_seconds",
        ),
    ];
    let two = |key: &str, v: &Value| {
        if key == "timeline_seconds.decision" && v.get("p99").is_some() {
            let [p50, p95, p99] = [&v["p50"], &v["p95"], &v["p99"]].map(cell);
            format!("{p50} / {p95} / {p99}")
        } else if v.get("p50").is_some() {
            format!("{} / {}", cell(&v["p50"]), cell(&v["p95"]))
        } else {
            cell(v)
        }
    };
    let mut md = String::new();
    for workload in ["small", "gang", "fair", "reclaim"] {
        let runs: Vec<&Value> = results
            .iter()
            .filter(|r| r["workload"] == workload)
            .collect();
        if runs.is_empty() {
            continue;
        }
        if workload == "reclaim" {
            md.push_str(&reclaim_markdown(&runs));
            continue;
        }
        md.push_str(&format!("\n#### Workload `{workload}`\n\n|"));
        for r in &runs {
            md.push_str(&format!(" | {}", cell(&r["setup"])));
        }
        md.push_str(" |\n|---|");
        md.push_str(&"---:|".repeat(runs.len()));
        md.push('\n');
        let mut these = rows.clone();
        if workload == "fair" {
            these.extend(fair_rows);
        }
        these.push(("run ended by", "end"));
        for (label, key) in &these {
            md.push_str(&format!("| {label} |"));
            for r in &runs {
                md.push_str(&format!(" {} |", two(key, at(&r["figures"], key))));
            }
            md.push('\n');
        }
        md.push_str("| load average before / after |");
        for r in &runs {
            md.push_str(&format!(
                " {} / {} |",
                cell(&r["load_average"]["before"]),
                cell(&r["load_average"]["after"])
            ));
        }
        md.push('\n');
        // TunePlane against Kueue at the same client limit (shipped Kueue at its own).
        let pairs: Vec<(&Value, &Value)> = runs
            .iter()
            .filter(|r| r["system"] == "tuneplane")
            .flat_map(|t| {
                runs.iter()
                    .filter(move |k| k["system"] == "kueue" && k["qps"] == t["qps"])
                    .map(move |k| (*t, *k))
            })
            .collect();
        if pairs.is_empty() {
            continue;
        }
        md.push_str("\n| TunePlane ÷ Kueue |");
        for (t, k) in &pairs {
            md.push_str(&format!(" {} ÷ {} |", cell(&t["setup"]), cell(&k["setup"])));
        }
        md.push_str("\n|---|");
        md.push_str(&"---:|".repeat(pairs.len()));
        md.push('\n');
        let mut ratios: Vec<(&str, &str)> = vec![
            ("admitted per second", "admitted_per_second"),
            ("→ decision p50", "timeline_seconds.decision.p50"),
            (
                "→ all pods bound p50",
                "timeline_seconds.all_pods_bound.p50",
            ),
            (
                "controller's API requests per admitted job",
                "controller_requests_per_job",
            ),
            ("all API requests per admitted job", "api_requests_per_job"),
            (
                "controller CPU ms per admitted job",
                "controller_cpu_ms_per_job",
            ),
        ];
        if workload == "fair" {
            ratios.push(("team-b's wait", "team_b_wait_seconds"));
            ratios.push(("team-b's wait, server's clock", "team_b_server_seconds"));
        }
        for (label, key) in ratios {
            md.push_str(&format!("| {label} |"));
            for (t, k) in &pairs {
                md.push_str(&format!(
                    " {} |",
                    ratio(at(&t["figures"], key), at(&k["figures"], key))
                ));
            }
            md.push('\n');
        }
    }
    md.push_str(&format!(
        "\nMachine: {}. Versions: {}. Whole comparison: {} s.\n",
        doc["machine"], doc["versions"], doc["elapsed_seconds"]
    ));
    md
}
