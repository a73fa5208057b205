//! Playgrounds as users see them: the rules a new playground must meet — checked against the same
//! fleet shape job submission uses (the reconciler's capacity snapshot) — and the state a listing
//! shows, derived from the record alone.
//!
//! The Pod itself is rendered by [`crate::render::playground`]; the reconciler records what the
//! pod shows in [`PlaygroundRecord::status`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::fleet::FleetShape;
use crate::job::{JobRecord, JobState};
use crate::render::playground::{REQUEST_CPUS, REQUEST_MEMORY_GB};
use crate::spec::{Deadlines, FieldError, JobSpec, Pool, is_dns_label};
use crate::store::{PlaygroundRecord, PlaygroundState};

/// Lifetime of a playground when the request names none, seconds.
pub const DEFAULT_TTL_SECONDS: u64 = 3600;
/// Shortest lifetime, seconds.
pub const MIN_TTL_SECONDS: u64 = 60;
/// Longest lifetime, seconds.
pub const MAX_TTL_SECONDS: u64 = 24 * 3600;
/// Most GPUs of one playground whatever the fleet (tensor parallelism within one node).
pub const MAX_GPUS: u32 = 16;
/// Longest model name.
pub const MAX_MODEL_LEN: usize = 200;

/// Note returned when no capacity snapshot exists yet (as job submission notes it).
pub const NOTE_NO_SNAPSHOT: &str = "fleet fit not checked: no capacity snapshot yet; the playground may stay Pending if no node of the series can host it";

/// What a user asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaygroundRequest<'a> {
    /// Model to serve.
    pub model: &'a str,
    /// GPU series.
    pub series: &'a str,
    /// GPUs of the pod.
    pub gpus: u32,
    /// Lifetime, seconds.
    pub ttl_seconds: u64,
}

/// Checks `req` against every rule at once; with `fleet` (the latest capacity snapshot's shape)
/// also against the series that exist and the size of their largest node. Returns the notes to
/// pass on (fleet fit not checked) or every problem, each naming its field and what to do.
pub fn validate(
    req: &PlaygroundRequest<'_>,
    fleet: Option<&FleetShape>,
) -> Result<Vec<String>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut err = |path: &str, message: String| {
        errors.push(FieldError {
            path: path.to_owned(),
            message,
        });
    };
    let model = req.model;
    if model.trim().is_empty() || model.len() > MAX_MODEL_LEN {
        err(
            "model",
            format!(
                "give a model name of 1 to {MAX_MODEL_LEN} characters, e.g. Qwen/Qwen2.5-0.5B-Instruct"
            ),
        );
    } else if model.chars().any(|c| c.is_whitespace() || c.is_control()) || model.starts_with('-') {
        err(
            "model",
            format!(
                "{model:?} is not a model name: a Hugging Face id (org/name) or a path the image knows, without spaces, not starting with '-'"
            ),
        );
    }
    let series_ok = is_dns_label(req.series, 63);
    if !series_ok {
        err(
            "series",
            format!(
                "{:?} is not a series name: give a GPU series such as h200 (lowercase letters, digits, '-'; `tuneplane capacity` lists them)",
                req.series
            ),
        );
    }
    if req.gpus == 0 {
        err(
            "gpus",
            "a playground needs at least 1 GPU (vLLM serves on GPUs)".into(),
        );
    } else if req.gpus > MAX_GPUS {
        err(
            "gpus",
            format!(
                "{} GPUs: at most {MAX_GPUS} (a playground runs on one node)",
                req.gpus
            ),
        );
    }
    if !(MIN_TTL_SECONDS..=MAX_TTL_SECONDS).contains(&req.ttl_seconds) {
        err(
            "ttl_seconds",
            format!(
                "{} seconds: give a lifetime between {MIN_TTL_SECONDS} and {MAX_TTL_SECONDS} seconds (1 minute to 24 hours)",
                req.ttl_seconds
            ),
        );
    }
    let mut notes = Vec::new();
    match fleet {
        None => notes.push(NOTE_NO_SNAPSHOT.to_owned()),
        Some(_) if !series_ok => {}
        Some(fleet) => match fleet.series.get(req.series) {
            None => {
                let known: Vec<&str> = fleet.series.keys().map(String::as_str).collect();
                let known = if known.is_empty() {
                    "none: the fleet has no GPU nodes".to_owned()
                } else {
                    known.join(", ")
                };
                err(
                    "series",
                    format!("unknown series {:?}; known: {known}", req.series),
                );
            }
            Some(shape) => {
                let s = req.series;
                if req.gpus > shape.max_gpus_per_node && req.gpus <= MAX_GPUS {
                    err(
                        "gpus",
                        format!(
                            "{} GPUs, but the largest {s} node has {}; ask for at most {}",
                            req.gpus, shape.max_gpus_per_node, shape.max_gpus_per_node
                        ),
                    );
                }
                if shape.max_cpus_per_node < REQUEST_CPUS
                    || shape.max_memory_gb_per_node < REQUEST_MEMORY_GB
                {
                    err(
                        "series",
                        format!(
                            "the largest {s} node has {} CPUs and {} GiB; a playground pod needs {REQUEST_CPUS} CPUs and {REQUEST_MEMORY_GB} GiB",
                            shape.max_cpus_per_node, shape.max_memory_gb_per_node
                        ),
                    );
                }
            }
        },
    }
    if errors.is_empty() {
        Ok(notes)
    } else {
        Err(errors)
    }
}

/// The state a listing shows: the reconciler's observation, or what the record alone says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ShownState {
    /// Accepted and waiting for admission: its tenant's quota or the fleet is full (the reason
    /// says which). No pod exists and it holds nothing.
    Queued,
    /// Admitted to a node; the reconciler has not created the pod yet.
    Creating,
    /// The pod exists but does not run (see the reason).
    Pending,
    /// The pod runs.
    Running,
    /// The pod ended or disappeared (see the reason); it is not restarted.
    Failed,
    /// Deleted or past its TTL; the reconciler is removing the pod. Listings leave these out.
    Deleting,
}

impl ShownState {
    /// Its name in the API (`Queued`, `Creating`, `Pending`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ShownState::Queued => "Queued",
            ShownState::Creating => "Creating",
            ShownState::Pending => "Pending",
            ShownState::Running => "Running",
            ShownState::Failed => "Failed",
            ShownState::Deleting => "Deleting",
        }
    }
}

/// The path of TunePlane's proxy to playground `id`'s server, under the API's base URL: the API
/// checks the caller's key, adds the server's own key and forwards to the pod.
pub fn api_proxy_path(id: &str) -> String {
    format!("/v1/playgrounds/{id}/proxy/")
}

/// A playground as the API and the console show it: the record (without its server key) plus its
/// state, reason, message and proxy path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlaygroundView {
    /// The stored record, `server_key` removed.
    #[serde(flatten)]
    pub record: PlaygroundRecord,
    /// Shown state.
    pub state: ShownState,
    /// Machine-readable reason (`QuotaExceeded`, `InsufficientGpu`, `ImagePull`, ...), none
    /// while running.
    pub reason: Option<String>,
    /// What a person should know, verbatim from Kubernetes where it came from there.
    pub message: Option<String>,
    /// TunePlane's proxy path to the server ([`api_proxy_path`]) once the pod exists.
    pub proxy_path: Option<String>,
}

impl PlaygroundView {
    /// The view of `record` at `now_ms`.
    pub fn of(mut record: PlaygroundRecord, now_ms: i64) -> PlaygroundView {
        record.server_key = None;
        let proxy = record.pod_name.as_ref().map(|_| api_proxy_path(&record.id));
        let from_status = |s: &crate::store::PlaygroundStatus| {
            (
                match s.state {
                    PlaygroundState::Queued => ShownState::Queued,
                    PlaygroundState::Pending => ShownState::Pending,
                    PlaygroundState::Running => ShownState::Running,
                    PlaygroundState::Failed => ShownState::Failed,
                },
                s.reason.clone(),
                (!s.message.is_empty()).then(|| s.message.clone()),
            )
        };
        let (state, reason, message) = if record.expires_at_ms <= now_ms {
            (
                ShownState::Deleting,
                None,
                Some("deleted or past its TTL; the pod is being removed".to_owned()),
            )
        } else if !record.is_admitted() {
            match &record.status {
                Some(s) => from_status(s),
                None => (
                    ShownState::Queued,
                    None,
                    Some("waiting for the reconciler to admit it".to_owned()),
                ),
            }
        } else if record.pod_name.is_none() {
            (
                ShownState::Creating,
                None,
                Some(format!(
                    "admitted to node {}; waiting for the reconciler to create the pod",
                    record.node.as_deref().unwrap_or("?")
                )),
            )
        } else {
            match &record.status {
                // A Queued status left from before admission: the pod exists now.
                Some(s) if s.state != PlaygroundState::Queued => from_status(s),
                _ => (
                    ShownState::Pending,
                    None,
                    Some("pod created; waiting for the reconciler to see it".to_owned()),
                ),
            }
        };
        PlaygroundView {
            record,
            state,
            reason,
            message,
            proxy_path: proxy,
        }
    }

    /// True once deleted or past its TTL (listings leave it out).
    pub fn is_deleting(&self) -> bool {
        self.state == ShownState::Deleting
    }
}

/// Name of the single pool of a playground's [`admission_stand_in`].
pub const STAND_IN_POOL: &str = "server";

/// The job admission plans in a playground's place: one machine of `gpus` GPUs of its series
/// with the pod's CPU and memory, queued since its creation, at default priority; admitted (with
/// its node as the pool's placement) once [`PlaygroundRecord::is_admitted`]. With it a
/// playground counts against its tenant's quota and fair share, waits with a reason, and never
/// lands on nodes planned for jobs: the same planner decides both. Not preemptible: it never
/// borrows and is never preempted. Fails for a playground whose id breaks the id rule.
pub fn admission_stand_in(
    pg: &PlaygroundRecord,
    namespace: &str,
) -> Result<JobRecord, crate::ids::IdError> {
    let spec = JobSpec {
        name: "playground".into(),
        plugin: crate::claimant::PLAYGROUND_PLUGIN.into(),
        image: String::new(),
        entrypoint: String::new(),
        env: BTreeMap::new(),
        pools: vec![Pool {
            name: STAND_IN_POOL.into(),
            series: Some(pg.series.clone()),
            nodes: 1,
            gpus_per_node: pg.gpus,
            cpus: f64::from(REQUEST_CPUS),
            memory_gb: f64::from(REQUEST_MEMORY_GB),
        }],
        deadlines: Deadlines {
            pre_running_seconds: 0,
            run_seconds: 0,
            grace_seconds: 0,
        },
        retries: crate::spec::Retries {
            infrastructure: 0,
            application: 0,
        },
        checkpoints: Default::default(),
        priority: 0,
        // Interactive: a playground is never stopped for another job, and so never borrows
        // above its tenant's quota (docs/design.md §8, "Preemption").
        preemptible: false,
        array: None,
        depends_on: Vec::new(),
        labels: BTreeMap::new(),
        namespace: namespace.into(),
        platform_version: crate::constants::PLATFORM_VERSION.into(),
        notify: Vec::new(),
    };
    let id = crate::ids::JobId::parse(pg.id.as_str())?;
    let mut job = JobRecord::new_queued(id, pg.tenant.clone(), spec, "", pg.created_at_ms);
    if pg.is_admitted() {
        job.state = JobState::Admitted;
        job.admitted_at_ms = Some(pg.created_at_ms);
        job.placements = pg
            .node
            .iter()
            .map(|n| crate::admission::PoolPlacement {
                pool: STAND_IN_POOL.into(),
                nodes: vec![n.clone()],
            })
            .collect();
    }
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::SeriesShape;
    use crate::store::PlaygroundStatus;

    fn fleet() -> FleetShape {
        let mut f = FleetShape::default();
        for (name, gpus) in [("h200", 8), ("l40s", 4)] {
            f.series.insert(
                name.into(),
                SeriesShape {
                    nodes: 2,
                    max_gpus_per_node: gpus,
                    max_cpus_per_node: 96,
                    max_memory_gb_per_node: 1024,
                },
            );
        }
        f
    }

    fn req(series: &str, gpus: u32) -> PlaygroundRequest<'_> {
        PlaygroundRequest {
            model: "Qwen/Qwen2.5-0.5B-Instruct",
            series,
            gpus,
            ttl_seconds: 600,
        }
    }

    fn fields(e: &[FieldError]) -> Vec<String> {
        e.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn unknown_series_is_named_with_the_known_ones() {
        let e = validate(&req("h100", 1), Some(&fleet()))
            .err()
            .unwrap_or_default();
        assert_eq!(
            fields(&e),
            ["series: unknown series \"h100\"; known: h200, l40s"]
        );
        let empty = FleetShape::default();
        let e = validate(&req("h100", 1), Some(&empty))
            .err()
            .unwrap_or_default();
        assert!(
            fields(&e)[0].contains("the fleet has no GPU nodes"),
            "{e:?}"
        );
    }

    #[test]
    fn more_gpus_than_the_largest_node_names_the_largest() {
        let e = validate(&req("h200", 9), Some(&fleet()))
            .err()
            .unwrap_or_default();
        assert_eq!(
            fields(&e),
            ["gpus: 9 GPUs, but the largest h200 node has 8; ask for at most 8"]
        );
        assert!(validate(&req("h200", 8), Some(&fleet())).is_ok());
        assert!(validate(&req("l40s", 5), Some(&fleet())).is_err());
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let bad = PlaygroundRequest {
            model: "",
            series: "H200",
            gpus: 0,
            ttl_seconds: 30,
        };
        let e = validate(&bad, Some(&fleet())).err().unwrap_or_default();
        let paths: Vec<&str> = e.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["model", "series", "gpus", "ttl_seconds"]);
        assert!(e[2].message.contains("at least 1 GPU"), "{e:?}");
        assert!(e[3].message.contains("between 60 and 86400"), "{e:?}");
        for model in ["--trust-remote-code", "two words", &"m".repeat(201)] {
            let r = PlaygroundRequest {
                model,
                ..req("h200", 1)
            };
            let e = validate(&r, None).err().unwrap_or_default();
            assert_eq!(e.len(), 1, "{model}: {e:?}");
            assert_eq!(e[0].path, "model");
        }
        let r = PlaygroundRequest {
            ttl_seconds: MAX_TTL_SECONDS + 1,
            ..req("h200", 17)
        };
        let e = validate(&r, Some(&fleet())).err().unwrap_or_default();
        // 17 GPUs is over the absolute limit; the per-node message is not repeated.
        assert_eq!(
            fields(&e),
            [
                "gpus: 17 GPUs: at most 16 (a playground runs on one node)",
                "ttl_seconds: 86401 seconds: give a lifetime between 60 and 86400 seconds (1 minute to 24 hours)"
            ]
        );
    }

    #[test]
    fn without_a_snapshot_the_fleet_is_not_checked_and_a_note_says_so() {
        let notes = validate(&req("h100", 9), None).unwrap_or_default();
        assert_eq!(notes, [NOTE_NO_SNAPSHOT]);
        assert_eq!(validate(&req("h200", 1), Some(&fleet())), Ok(vec![]));
    }

    #[test]
    fn a_series_whose_nodes_are_too_small_for_the_pod_is_refused() {
        let mut f = fleet();
        if let Some(s) = f.series.get_mut("l40s") {
            s.max_memory_gb_per_node = 16;
        }
        let e = validate(&req("l40s", 1), Some(&f))
            .err()
            .unwrap_or_default();
        assert!(fields(&e)[0].starts_with("series: the largest l40s node has 96 CPUs and 16 GiB"));
    }

    fn record() -> PlaygroundRecord {
        let mut r =
            PlaygroundRecord::requested("pg-1", "acme".parse().unwrap(), "m", "l40s", 1, 0, 1_000);
        r.version = 1;
        r.server_key = Some("secret-key".into());
        r
    }

    fn status(state: PlaygroundState, reason: &str, message: &str) -> Option<PlaygroundStatus> {
        Some(PlaygroundStatus {
            state,
            reason: Some(reason.into()),
            message: message.into(),
            since_ms: 5,
            updated_ms: 5,
        })
    }

    #[test]
    fn the_shown_state_follows_the_record() {
        // Not admitted: queued, with the planner's reason once the reconciler wrote it.
        let v = PlaygroundView::of(record(), 10);
        assert_eq!((v.state, v.proxy_path.clone()), (ShownState::Queued, None));
        let mut r = record();
        r.status = status(
            PlaygroundState::Queued,
            "QuotaExceeded",
            "tenant acme's quota is 8 l40s GPUs",
        );
        let v = PlaygroundView::of(r.clone(), 10);
        assert_eq!(
            (v.state, v.reason.as_deref()),
            (ShownState::Queued, Some("QuotaExceeded"))
        );
        // Admitted to a node, no pod yet.
        r.node = Some("l40s-0".into());
        let v = PlaygroundView::of(r.clone(), 10);
        assert_eq!(v.state, ShownState::Creating);
        assert!(v.message.unwrap_or_default().contains("node l40s-0"));
        // The pod exists: the queued status left over reads as pending.
        r.pod_name = Some("pg-1".into());
        let v = PlaygroundView::of(r.clone(), 10);
        assert_eq!(v.state, ShownState::Pending);
        assert_eq!(v.proxy_path.as_deref(), Some("/v1/playgrounds/pg-1/proxy/"));
        r.status = status(
            PlaygroundState::Pending,
            "InsufficientGpu",
            "0/3 nodes are available",
        );
        let v = PlaygroundView::of(r.clone(), 10);
        assert_eq!(v.state, ShownState::Pending);
        assert_eq!(v.reason.as_deref(), Some("InsufficientGpu"));
        assert_eq!(v.message.as_deref(), Some("0/3 nodes are available"));
        let json = serde_json::to_value(PlaygroundView::of(r.clone(), 10)).unwrap_or_default();
        assert_eq!(json["id"], "pg-1");
        assert_eq!(json["state"], "Pending");
        assert_eq!(json["status"]["reason"], "InsufficientGpu");
        // The server's key never leaves in a view.
        assert!(json.get("server_key").is_none(), "{json}");
        assert!(!json.to_string().contains("secret-key"));
        let v = PlaygroundView::of(r, 1_000);
        assert!(v.is_deleting());
    }

    #[test]
    fn a_playground_stands_in_for_a_one_machine_job_queued_until_admitted() {
        let mut r = record();
        r.gpus = 4;
        let job = admission_stand_in(&r, "ns").unwrap();
        assert_eq!((job.id.as_str(), job.tenant.as_str()), ("pg-1", "acme"));
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.submitted_at_ms, 0);
        let pool = &job.spec.pools[0];
        assert_eq!(
            (pool.series.as_deref(), pool.nodes, pool.gpus_per_node),
            (Some("l40s"), 1, 4)
        );
        assert_eq!(
            (pool.cpus, pool.memory_gb),
            (f64::from(REQUEST_CPUS), f64::from(REQUEST_MEMORY_GB))
        );
        r.node = Some("l40s-1".into());
        let job = admission_stand_in(&r, "ns").unwrap();
        assert_eq!(job.state, JobState::Admitted);
        assert_eq!(job.placements[0].nodes, ["l40s-1"]);
        // An older version's playground with a pod but no plan is admitted, unplanned.
        r.node = None;
        r.pod_name = Some("pg-pg-1".into());
        let job = admission_stand_in(&r, "ns").unwrap();
        assert_eq!(job.state, JobState::Admitted);
        assert!(job.placements.is_empty());
    }
}
