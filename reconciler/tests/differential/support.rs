//! What the differential tests share: the cluster each starts (one at a time on the real tier),
//! the normalization of observations ([`Redactor`], [`backend_specific`]), helpers that read
//! pods, events and nodes, and the golden files ([`Golden`]: compare one step's entry, or record
//! it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tuneplane_core::job::JobRecord;
use tuneplane_core::render::{CapsuleRef, RenderSettings, render_pod};
use tuneplane_kubesim::{SimConfig, annotations};
use tuneplane_reconciler::rayjob;
use tuneplane_reconciler::status::Observed;

use crate::common::*;

pub const NS: &str = "tuneplane-jobs";
/// The image whose pull fails on both backends (the Scenario's `image_pull_failures`).
pub const BAD_IMAGE: &str = "registry.invalid/acme/missing:1";
/// Set to `1` on the real tier: the tests that run record their steps instead of comparing.
pub const UPDATE_VAR: &str = "TUNEPLANE_UPDATE_GOLDEN";

// ---------------------------------------------------------------------------------------------
// The cluster of a test.

/// The real tier's one cluster: each test wipes it when it starts (see `common::real`), so the
/// tests of this file take it one at a time, with or without `--test-threads=1`. On kubesim each
/// test has a simulator of its own and they run in parallel.
static REAL_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A test's cluster: the harness, and on the real tier the cluster's lock, held until the
/// harness is dropped (fields drop in order).
pub struct Run {
    h: Harness,
    _serial: Option<tokio::sync::MutexGuard<'static, ()>>,
}

impl std::ops::Deref for Run {
    type Target = Harness;
    fn deref(&self) -> &Harness {
        &self.h
    }
}

/// The cluster's lock on the real tier (none on kubesim).
async fn serial() -> Option<tokio::sync::MutexGuard<'static, ()>> {
    if real::is_real() {
        Some(REAL_CLUSTER.lock().await)
    } else {
        None
    }
}

/// [`start`] with `config`, one test at a time on the real tier.
pub async fn start_run(config: SimConfig) -> Run {
    let serial = serial().await;
    Run {
        h: start(config).await,
        _serial: serial,
    }
}

/// [`start_executing`] with `config` (pods run for real on the real tier), one test at a time.
pub async fn start_executing_run(config: SimConfig) -> Run {
    let serial = serial().await;
    Run {
        h: start_executing(config).await,
        _serial: serial,
    }
}

/// The cluster of the steps of [`TRANSCRIPT`]: [`FLEET`], pods that run until deleted, and
/// [`BAD_IMAGE`] failing to pull.
pub async fn start_transcript() -> Run {
    let mut config = sim_config(FLEET, Duration::from_secs(600), None);
    config.scenario.image_pull_failures = vec![BAD_IMAGE.into()];
    start_run(config).await
}

// ---------------------------------------------------------------------------------------------
// Normalization.

/// Replaces run-specific strings (random names, uids, node names) in an observation by stable
/// placeholders. Longer literals are replaced first.
#[derive(Default)]
pub struct Redactor {
    map: BTreeMap<String, String>,
}

impl Redactor {
    pub fn add(&mut self, literal: &str, placeholder: &str) {
        if !literal.is_empty() && literal != placeholder {
            self.map.insert(literal.to_owned(), placeholder.to_owned());
        }
    }

    /// A name made from `generateName` (or a known prefix) and 5 random characters.
    pub fn generated(&mut self, name: &str, prefix: &str) {
        if let Some(rest) = name.strip_prefix(prefix)
            && rest.len() == 5
            && rest.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            self.add(name, &format!("{prefix}<rand5>"));
        }
    }

    /// A pod's name (when generated) and uid.
    pub fn object(&mut self, meta: &kube::core::ObjectMeta) {
        if let (Some(name), Some(prefix)) = (&meta.name, &meta.generate_name) {
            self.generated(name, prefix);
        }
        if let Some(uid) = &meta.uid {
            self.add(uid, "<uid>");
        }
    }

    pub fn apply(&self, value: &mut Value) {
        let mut order: Vec<(&String, &String)> = self.map.iter().collect();
        order.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(b.0)));
        walk_strings(value, &|s: &mut String| {
            for (from, to) in &order {
                if s.contains(from.as_str()) {
                    *s = s.replace(from.as_str(), to);
                }
            }
            *s = redact_numbers_after(s, "too old resource version: ");
        });
    }
}

/// `too old resource version: 1 (1234)` → `too old resource version: <rv> (<rv>)`.
pub fn redact_numbers_after(s: &str, marker: &str) -> String {
    let Some(at) = s.find(marker) else {
        return s.to_owned();
    };
    let (head, tail) = s.split_at(at + marker.len());
    let mut out = head.to_owned();
    let mut in_number = false;
    for c in tail.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push_str("<rv>");
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

pub fn walk_strings(value: &mut Value, f: &dyn Fn(&mut String)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter_mut().for_each(|v| walk_strings(v, f)),
        Value::Object(m) => {
            let old = std::mem::take(m);
            for (mut k, mut v) in old {
                f(&mut k);
                walk_strings(&mut v, f);
                m.insert(k, v);
            }
        }
        _ => {}
    }
}

/// The one place where observations leave out what kubesim intentionally does not reproduce
/// (applied on both backends, so the golden file lacks it too):
/// - `rayjob`: the RayJob's `jobStatus`. KubeRay copies it from the Ray head's dashboard, which
///   fake nodes do not run, so on the real tier it is never set; kubesim models a live dashboard
///   (`PENDING`, `RUNNING`) so that the kubesim-only tests can run jobs to their end.
pub fn backend_specific(step: &str, obs: &mut Value) {
    if step == "rayjob"
        && let Some(list) = obs["progression"].as_array_mut()
    {
        for entry in list.iter_mut() {
            if let Some(m) = entry.as_object_mut() {
                m.remove("jobStatus");
            }
        }
        list.dedup();
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.

pub fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("to json")
}

/// An API answer: `{"ok": ...}` or the Status of the error (code, reason, message, details).
pub fn outcome<T>(r: Result<T, kube::Error>, ok: impl FnOnce(T) -> Value) -> Value {
    match r {
        Ok(v) => json!({"ok": ok(v)}),
        Err(kube::Error::Api(s)) => {
            let mut v = to_json(&*s);
            if let Some(m) = v.as_object_mut() {
                m.remove("metadata");
            }
            v
        }
        Err(e) => json!({"client_error": e.to_string()}),
    }
}

pub fn observed(o: &Observed) -> Value {
    match o {
        Observed::Missing => json!({"state": "Missing"}),
        Observed::Pending { reason, message } => {
            json!({"state": "Pending", "reason": format!("{reason:?}"), "message": message})
        }
        Observed::Running => json!({"state": "Running"}),
        Observed::Succeeded => json!({"state": "Succeeded"}),
        Observed::Failed { reason, message } => {
            json!({"state": "Failed", "reason": format!("{reason:?}"), "message": message})
        }
        Observed::Invalid { message } => json!({"state": "Invalid", "message": message}),
        Observed::Lost(f) => {
            json!({"state": "Lost", "reason": format!("{:?}", f.reason), "evidence": f.evidence})
        }
    }
}

pub fn dedup(list: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for v in list {
        if out.last() != Some(&v) {
            out.push(v);
        }
    }
    out
}

pub fn capsule() -> CapsuleRef {
    CapsuleRef {
        sha256: SHA.into(),
        url: "http://127.0.0.1:9/blobs/capsules/diff.zip".into(),
    }
}

pub fn rayclusters(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("ray.io", "v1", "RayCluster");
    Api::namespaced_with(client.clone(), NS, &ApiResource::from_gvk(&gvk))
}

pub fn create_params() -> PostParams {
    PostParams {
        field_manager: Some(tuneplane_core::constants::FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// The rendered Pod of a CPU-only job, with kubesim's run annotation.
pub fn cpu_pod(id: &str, image: &str, run_seconds: Option<&str>) -> Pod {
    let mut job: JobRecord = cpu_job(id);
    job.spec.image = image.into();
    let mut value = render_pod(&job, &capsule(), &RenderSettings::default()).expect("render");
    if let Some(secs) = run_seconds {
        value["metadata"]["annotations"][annotations::RUN_SECONDS] = json!(secs);
    }
    serde_json::from_value(value).expect("pod")
}

/// The versions of the object `name` a watcher on `api` sees, from now on.
pub fn record<K: Watched>(
    api: Api<K>,
    name: &str,
) -> (Arc<Mutex<Vec<K>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Vec<K>>> = Arc::default();
    let sink = seen.clone();
    let config = kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = watch_applied(api, config, move |obj| {
        sink.lock().unwrap_or_else(|p| p.into_inner()).push(obj);
    });
    (seen, task)
}

pub fn seen<K: Clone>(list: &Arc<Mutex<Vec<K>>>) -> Vec<K> {
    list.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

pub fn waiting(p: &Pod) -> Option<(String, String)> {
    let w = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?;
    Some((
        w.reason.clone().unwrap_or_default(),
        w.message.clone().unwrap_or_default(),
    ))
}

pub fn conditions(p: &Pod) -> Value {
    let mut list: Vec<Value> = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .iter()
        .map(|c| json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message}))
        .collect();
    list.sort_by_key(|c| c["type"].as_str().unwrap_or_default().to_owned());
    json!(list)
}

/// The pod with its events once the scheduler has refused it: a `FailedScheduling` event and the
/// `PodScheduled` condition both written; `None` before.
pub async fn refused(h: &Harness, name: &str, pod: Pod) -> Option<(Pod, Vec<Event>)> {
    let events = events_of(h, name).await;
    let failed = events
        .iter()
        .any(|e| e.reason.as_deref() == Some("FailedScheduling"));
    let marked = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled"));
    (failed && marked).then_some((pod, events))
}

/// The pod's `PodScheduled` conditions (status, reason, message).
pub fn pod_scheduled(p: &Pod) -> Vec<Value> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .iter()
        .filter(|c| c.type_ == "PodScheduled")
        .map(|c| json!({"status": c.status, "reason": c.reason, "message": c.message}))
        .collect()
}

/// The events about the object `name` (this incarnation of it: events outlive their objects).
pub async fn events_of(h: &Harness, name: &str) -> Vec<Event> {
    let uid = match Api::<DynamicObject>::namespaced_with(h.client.clone(), NS, &event_target(name))
        .get(name)
        .await
    {
        Ok(o) => o.uid().unwrap_or_default(),
        Err(_) => return Vec::new(),
    };
    let api: Api<Event> = Api::namespaced(h.client.clone(), NS);
    api.list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.involved_object.uid.as_deref() == Some(uid.as_str()))
        .collect()
}

/// The events about `name` once they settle: the same for one second (events are written after
/// the status they go with, so a read right after a status change can miss the last ones).
pub async fn settled_events(h: &Harness, name: &str) -> Vec<Event> {
    let key = |list: &[Event]| -> Vec<String> {
        let mut k: Vec<String> = list.iter().map(|e| event_json(e).to_string()).collect();
        k.sort();
        k
    };
    let mut last = events_of(h, name).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = events_of(h, name).await;
        if key(&now) == key(&last) || tokio::time::Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// The kind of object events are read about: RayJobs for `tp-g1`, else Pods.
pub fn event_target(name: &str) -> ApiResource {
    if name == "tp-g1" {
        rayjob::resource()
    } else {
        ApiResource::erase::<Pod>(&())
    }
}

pub fn event_json(e: &Event) -> Value {
    json!({
        "type": e.type_,
        "reason": e.reason,
        "message": e.message,
        "reportingComponent": e.reporting_component,
        "source": e.source.as_ref().and_then(|s| s.component.clone()),
        "involvedObject": {"kind": e.involved_object.kind, "name": e.involved_object.name, "fieldPath": e.involved_object.field_path},
        "action": e.action,
        // Which of the times `sync::copy_warnings` dates a warning by are set.
        "set": {"lastTimestamp": e.last_timestamp.is_some(), "firstTimestamp": e.first_timestamp.is_some(), "eventTime": e.event_time.is_some()},
    })
}

pub fn sorted_events(events: &[Event], keep: impl Fn(&Event) -> bool) -> Value {
    let mut list: Vec<Value> = events.iter().filter(|e| keep(e)).map(event_json).collect();
    list.sort_by_key(Value::to_string);
    list.dedup();
    json!(list)
}

/// The `FailedScheduling` events, sorted.
pub fn failed_scheduling(events: &[Event]) -> Value {
    sorted_events(events, |e| e.reason.as_deref() == Some("FailedScheduling"))
}

pub async fn names(api: &Api<Pod>, lp: &ListParams) -> Value {
    outcome(api.list(lp).await, |l| {
        let mut n: Vec<String> = l.items.iter().map(ResourceExt::name_any).collect();
        n.sort();
        json!(n)
    })
}

/// The node names of the fleet by series (`h200` → [h200-0, h200-1]).
pub async fn node_series(h: &Harness) -> BTreeMap<String, String> {
    let nodes: Api<Node> = Api::all(h.client.clone());
    nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
        .iter()
        .map(|n| {
            let series = n
                .labels()
                .get(tuneplane_core::constants::SERIES_LABEL)
                .cloned()
                .unwrap_or_else(|| "cpu".into());
            (n.name_any(), series)
        })
        .collect()
}

/// Registers every node name as `<series node>` (ties between equal nodes are random).
pub fn redact_nodes(r: &mut Redactor, series: &BTreeMap<String, String>) {
    for (node, s) in series {
        r.add(node, &format!("<{s} node>"));
    }
}

// ---------------------------------------------------------------------------------------------
// Golden files.

/// A golden file: the real cluster's transcript, one entry (`{"step", "observation"}`) a step,
/// in the order of `steps`. Each test compares (or records) the entries of its own steps.
pub struct Golden {
    /// The file, from the crate's folder.
    pub file: &'static str,
    /// Its steps, in the file's order.
    pub steps: &'static [&'static str],
}

/// The steps of the control-plane transcript (the tests of `fleet`, `pods`, `scheduling` and
/// `rayjob`).
pub const TRANSCRIPT: Golden = Golden {
    file: "tests/differential/real.json",
    steps: &[
        "fleet",
        "cpu_pod",
        "api_errors",
        "unschedulable",
        "image_pull",
        "rayjob",
        "watch",
        "pod_affinity",
    ],
};

/// A RayJob run to SUCCEEDED (real Ray on the real tier).
pub const SUCCESS: Golden = Golden {
    file: "tests/differential/real_success.json",
    steps: &["rayjob_success"],
};

/// Lost nodes (`node_loss`).
pub const NODE_LOSS: Golden = Golden {
    file: "tests/differential/real_node_loss.json",
    steps: &["taint_eviction", "pod_gc"],
};

/// One golden file written at a time (a recording test rewrites its own entry in place).
static WRITING: Mutex<()> = Mutex::new(());

/// Whether this run records the golden files instead of comparing (real tier only).
pub fn updating() -> bool {
    real::is_real() && std::env::var(UPDATE_VAR).is_ok_and(|v| v == "1")
}

impl Golden {
    fn path(&self) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(self.file)
    }

    /// Whether the file exists (or is being recorded).
    pub fn recorded(&self) -> bool {
        self.path().exists() || updating()
    }

    /// The file's entries (none when it does not exist).
    pub fn entries(&self) -> Vec<Value> {
        match std::fs::read_to_string(self.path()) {
            Ok(text) => serde_json::from_str(&text).expect("golden file JSON"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("{}: {e}", self.path().display()),
        }
    }

    /// Normalizes `obs` (redaction with `r`, then [`backend_specific`]) and compares it with the
    /// entry of `step`, naming the JSON paths that differ; when recording, writes it as that
    /// entry instead, leaving the other steps' entries as they are.
    pub fn check(&self, step: &str, mut obs: Value, r: &Redactor) {
        assert!(
            self.steps.contains(&step),
            "`{step}` is not a step of {}",
            self.file
        );
        r.apply(&mut obs);
        backend_specific(step, &mut obs);
        if updating() {
            self.record(step, obs);
            return;
        }
        let backend = if real::is_real() {
            "the real cluster"
        } else {
            "kubesim"
        };
        let golden = self.entries();
        let want = golden
            .iter()
            .find(|e| e["step"] == step)
            .unwrap_or_else(|| {
                panic!(
                    "step `{step}` is not in {} (record it on the real backend with {UPDATE_VAR}=1)",
                    self.file
                )
            });
        let mut out = Vec::new();
        diff_paths("", &want["observation"], &obs, &mut out);
        assert!(
            out.is_empty(),
            "step `{step}` differs on {backend} from {}:\n  {}\n\n{backend} observation:\n{}",
            self.file,
            out.join("\n  "),
            serde_json::to_string_pretty(&obs).unwrap_or_default()
        );
    }

    /// Writes `obs` as the entry of `step`, in its place among [`Golden::steps`].
    fn record(&self, step: &str, obs: Value) {
        let _writing = WRITING.lock().unwrap_or_else(|p| p.into_inner());
        let mut entries = self.entries();
        entries.retain(|e| e["step"] != step);
        entries.push(json!({"step": step, "observation": obs}));
        let place = |e: &Value| {
            self.steps
                .iter()
                .position(|s| e["step"] == *s)
                .unwrap_or(usize::MAX)
        };
        entries.sort_by_key(place);
        let path = self.path();
        let text = serde_json::to_string_pretty(&entries).unwrap_or_default() + "\n";
        std::fs::create_dir_all(path.parent().unwrap_or(&path)).unwrap();
        std::fs::write(&path, text).expect("write the golden file");
        eprintln!("recorded step `{step}` in {}", path.display());
    }
}

pub fn diff_paths(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff_paths(&p, x, y, out),
                    (Some(x), None) => out.push(format!("{p}: missing (golden: {x})")),
                    (None, Some(y)) => out.push(format!("{p}: unexpected {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff_paths(&format!("{path}/{i}"), x, y, out);
            }
        }
        _ if want == got => {}
        _ => out.push(format!("{path}: golden {want}, got {got}")),
    }
}
