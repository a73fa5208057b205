//! Figures of a run, the API server's request counters, `/proc` readings, and the Markdown table.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::observe::Snapshot;
use crate::workload::{Outcome, Shape, Workload};
use crate::{
    CONTROLLER_BURST, CONTROLLER_QPS, KCM_ARGS, NODE_CPUS, NODE_GPUS, NODE_MEMORY_GB,
    NODES_PER_SERIES, Options, SERIES, SUBMITTERS,
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

pub fn figures(
    w: &Workload,
    out: &Outcome,
    snap: &Snapshot,
    started: Instant,
    requests: &RequestDelta,
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
        "api_requests": requests.total,
        "api_requests_per_job": if admitted > 0 { ((requests.total / admitted as f64) * 10.0).round() / 10.0 } else { 0.0 },
        "api_writes_per_job": if admitted > 0 { ((requests.writes / admitted as f64) * 10.0).round() / 10.0 } else { 0.0 },
        "node_heartbeat_requests": requests.heartbeats,
        "top_requests": requests.top.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "controller_cpu_seconds": (cpu * 10.0).round() / 10.0,
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
        "kuberay": module("kuberay", "github.com/ray-project/kuberay/ray-operator"),
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
        "kube_scheduler": "defaults (client QPS 50, burst 100)",
        "kuberay_operator": "defaults, --use-kubernetes-proxy",
        "controller_client_limits": format!("qps {CONTROLLER_QPS}, burst {CONTROLLER_BURST} (Kueue's shipped configuration; TUNEPLANE_KUBE_QPS/BURST for TunePlane)"),
        "tuneplane": "one-machine stack (API + embedded stores + reconciler) as `tuneplane dev --kubeconfig` runs it, reconciler as its ServiceAccount, pass interval 3 s plus watch events",
        "kueue": "shipped controller_manager_config.yaml (leader election, groupKindConcurrency, internal cert management), integrations batch/job and ray.io/rayjob, VisibilityOnDemand off (needs in-cluster credentials), admin credentials, webhooks not registered (jobs created suspended), one ClusterQueue (BestEffortFIFO) with a ResourceFlavor per series and quotas equal to the fleet, Admission Fair Sharing (usageHalfLifeTime 168h, usageSamplingInterval 5m), LocalQueues team-a and team-b",
        "submitters": SUBMITTERS,
        "workloads": {
            "small": format!("{} single-pod CPU jobs (1 CPU, 1 GiB): TunePlane Pod, Kueue batch/v1 Job", o.small),
            "gang": format!("{} RayJobs of 2-8 machines x 8 GPUs (32 CPUs, 256 GiB) on one series each", o.gang),
            "fair": format!("team-a submits {} small jobs, then team-b one", o.flood),
        },
        "run_end": format!("complete: every job admitted with all pods bound, or (fleet full) every admitted job bound and no admission for {q} s; stalled: nothing admitted, created or bound for {q} s; timeout: {} s", o.timeout.as_secs(), q = o.quiet.as_secs()),
    })
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

pub fn markdown(doc: &Value) -> String {
    let results = doc["results"].as_array().cloned().unwrap_or_default();
    let find = |system: &str, workload: &str| {
        results
            .iter()
            .find(|r| r["system"] == system && r["workload"] == workload)
            .map(|r| r["figures"].clone())
            .unwrap_or(Value::Null)
    };
    let rows: [(&str, &str); 10] = [
        ("jobs admitted", "admitted"),
        ("admitted per second", "admitted_per_second"),
        ("submission → admission p50 (s)", "admission_p50_seconds"),
        ("submission → admission p99 (s)", "admission_p99_seconds"),
        (
            "first submission → every admitted pod bound (s)",
            "all_bound_seconds",
        ),
        ("API requests per admitted job", "api_requests_per_job"),
        ("API writes per admitted job", "api_writes_per_job"),
        ("controller CPU seconds", "controller_cpu_seconds"),
        ("controller peak memory (MiB)", "controller_peak_rss_mib"),
        (
            "gangs partially placed at the end",
            "partially_placed_gangs",
        ),
    ];
    let mut md = String::new();
    for workload in ["small", "gang", "fair"] {
        let (t, k) = (find("tuneplane", workload), find("kueue", workload));
        if t.is_null() && k.is_null() {
            continue;
        }
        md.push_str(&format!("\n#### Workload `{workload}`\n\n| | TunePlane | Kueue | TunePlane / Kueue |\n|---|---:|---:|---:|\n"));
        let mut rows: Vec<(&str, &str)> = rows.to_vec();
        if workload == "fair" {
            rows.push((
                "team-b's wait for its first admission (s)",
                "team_b_wait_seconds",
            ));
            rows.push(("team-a jobs admitted before it", "team_a_admitted_before_b"));
            rows.push((
                "team-b's job in Kueue's queue after (s)",
                "team_b_queued_after_seconds",
            ));
        }
        rows.push(("run ended by", "end"));
        for (label, key) in rows {
            md.push_str(&format!(
                "| {label} | {} | {} | {} |\n",
                cell(&t[key]),
                cell(&k[key]),
                if key == "end" {
                    String::new()
                } else {
                    ratio(&t[key], &k[key])
                }
            ));
        }
    }
    md.push_str(&format!(
        "\nMachine: {}. Versions: {}. Whole comparison: {} s.\n",
        doc["machine"], doc["versions"], doc["elapsed_seconds"]
    ));
    md
}
