//! TunePlane's side: the one-machine stack (API with embedded stores + reconciler, as
//! `tuneplane dev --kubeconfig` runs it) in a child process of its own, so its CPU and memory are
//! measured apart from the harness; jobs are submitted through its HTTP API.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::{Value, json};

use crate::workload::Job;
use crate::{Controller, KEY_LABEL, NODE_GPUS, NODES_PER_SERIES, Options, Setup};

/// First argument of the child process.
pub const SERVE: &str = "serve-tuneplane";
/// The child's environment for the reclaim workload: the tenants' h200 GPU limits
/// (`team-a:1328,team-b:672`, borrowing allowed for both), set as quota records before the API
/// answers; without it no quota is set.
const ENV_QUOTAS: &str = "KUEUE_COMPARE_H200_QUOTAS";
/// The child's environment: the preemption minimum run time, seconds (the dev stack's
/// `StackOptions::preemption_min_run`, i.e. `TUNEPLANE_PREEMPTION_MIN_RUN_SECONDS`).
const ENV_MIN_RUN: &str = "KUEUE_COMPARE_MIN_RUN_SECONDS";

#[derive(Debug, Clone, serde::Deserialize)]
pub struct ApiAccess {
    pub api: String,
    pub team_a_key: String,
    pub team_b_key: String,
}

/// Child process: starts the stack against `--kubeconfig`, prints its [`ApiAccess`] as one JSON
/// line, and runs until its stdin closes.
pub fn serve(args: &[String]) -> anyhow::Result<()> {
    let (kubeconfig, dir) = match args {
        [k, d] => (k.clone(), d.clone()),
        _ => bail!("usage: {SERVE} KUBECONFIG DIR"),
    };
    // The stack's log lines (RUST_LOG, `warn` unless the harness was given one) go to stderr,
    // which the harness keeps as the run's `tuneplane.log`: a slow pass names its phases there.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let opts = tuneplane::dev::StackOptions {
            data_dir: dir.into(),
            port: 0,
            fleet: tuneplane_core::fleet::Fleet {
                node_groups: vec![],
            }, // a real cluster's nodes are the fleet
            execute: false,
            unpullable_images: vec![],
            // The reconciler's production default (passes also follow watch events).
            pass_interval: tuneplane_reconciler::Config::default().pass_interval,
            backend: tuneplane::dev::Backend::Embedded,
            cluster: tuneplane::dev::ClusterChoice::Real {
                kubeconfig: kubeconfig.into(),
            },
            webhooks: None,
            capsule_delivery: tuneplane_core::render::CapsuleDelivery::Presigned,
            blob_tls: None,
            preemption_min_run: std::env::var(ENV_MIN_RUN)
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs),
        };
        let stack = tuneplane::dev::Stack::start(opts).await?;
        let mut random = [0u8; 20];
        getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let scopes = vec![
            tuneplane_core::submit::SCOPE_JOBS_READ.to_string(),
            tuneplane_core::submit::SCOPE_JOBS_WRITE.to_string(),
        ];
        let (team_b_key, record) = tuneplane_core::submit::new_api_key(
            random,
            &"team-b".parse().unwrap(),
            scopes.clone(),
            "bench",
            tuneplane_core::clock::now_ms(),
        );
        stack.jobs.put_api_key(&record).await?;
        let mut team_a_key = stack.api_key.clone();
        if let Ok(quotas) = std::env::var(ENV_QUOTAS) {
            // The reclaim workload: team-a is a tenant of its own, with a quota as team-b's.
            getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            let (key, record) = tuneplane_core::submit::new_api_key(
                random,
                &"team-a".parse().unwrap(),
                scopes.clone(),
                "bench",
                tuneplane_core::clock::now_ms(),
            );
            stack.jobs.put_api_key(&record).await?;
            team_a_key = key;
            for q in quotas.split(',') {
                let (tenant, gpus) = q.split_once(':').context("quota tenant:gpus")?;
                let mut quota =
                    tuneplane_core::quota::TenantQuota::unlimited(&tenant.parse().unwrap());
                quota.set_gpu_limit(crate::workload::RECLAIM_SERIES, gpus.parse()?, true);
                quota.updated_at_ms = tuneplane_core::clock::now_ms();
                stack.jobs.put_quota(&quota).await?;
            }
        }
        let access =
            json!({"api": stack.api_url, "team_a_key": team_a_key, "team_b_key": team_b_key});
        println!("{access}");
        std::io::stdout().flush()?;
        // Until the parent closes stdin (or is gone).
        tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin()
                .read_line(&mut sink)
                .map(|n| n > 0)
                .unwrap_or(false)
            {}
        })
        .await?;
        stack.shutdown().await;
        Ok(())
    })
}

/// Starts the child and waits until the reconciler has published the whole fleet's capacity.
pub async fn start(
    kubeconfig: &Path,
    work: &Path,
    fleet_nodes: usize,
    setup: Setup,
    reclaim: Option<&Options>,
) -> anyhow::Result<Controller> {
    let log = std::fs::File::create(work.join("tuneplane.log"))?;
    let mut command = Command::new(std::env::current_exe()?);
    if let Some(o) = reclaim {
        command
            .env(
                ENV_QUOTAS,
                format!(
                    "team-a:{},team-b:{}",
                    o.reclaim_a_gpus,
                    NODES_PER_SERIES * NODE_GPUS - o.reclaim_a_gpus
                ),
            )
            .env(ENV_MIN_RUN, o.min_run.as_secs().to_string());
    }
    let mut child = command
        .arg(SERVE)
        .arg(kubeconfig)
        .arg(work.join("stack"))
        // Preemption on, as its default is; said here so that the run does not depend on it.
        .env("TUNEPLANE_PREEMPTION", "on")
        .env("TUNEPLANE_KUBE_QPS", setup.qps.to_string())
        .env("TUNEPLANE_KUBE_BURST", setup.burst().to_string())
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("starting the TunePlane stack")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await??;
    let api: ApiAccess = serde_json::from_str(line.trim()).with_context(|| {
        format!(
            "the TunePlane stack did not start (see {}): {line:?}",
            work.join("tuneplane.log").display()
        )
    })?;
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let body = http
            .get(format!("{}/v1/capacity", api.api))
            .bearer_auth(&api.team_a_key)
            .send()
            .await?
            .bytes()
            .await?;
        let v: Value = serde_json::from_slice(&body)?;
        let nodes = v["snapshot"]["nodes"].as_array().map_or(0, Vec::len);
        if nodes >= fleet_nodes {
            break;
        }
        if Instant::now() > deadline {
            bail!("TunePlane's capacity snapshot shows {nodes} of {fleet_nodes} nodes after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(Controller {
        pid: child.id(),
        child,
        api: Some(api),
        kueue_pods: false,
    })
}

/// The code every job ships: one small script, packed as the CLI packs a folder.
pub fn code_b64() -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("train.py"), "print('benchmark job')\n")?;
    let zip = tuneplane::client::pack::pack_quiet(dir.path())?;
    Ok(base64::engine::general_purpose::STANDARD.encode(zip))
}

/// The JobSpec of `job`: the same shape Kueue gets (see `kueue::submit`).
pub fn spec(job: &Job) -> String {
    let pool = match job.series {
        None => "{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}".to_string(),
        Some(series) => format!(
            "{{name: main, series: {series}, nodes: {}, gpus_per_node: 8}}",
            job.nodes
        ),
    };
    let image = if job.series.is_some() {
        "rayproject/ray:2.60.0-gpu"
    } else {
        "python:3.12-slim"
    };
    let grace = job
        .grace_seconds
        .map_or(String::new(), |g| format!(", grace_seconds: {g}"));
    format!(
        "name: {key}\nplugin: custom/custom\nimage: {image}\nentrypoint: python3 train.py\n\
         pools:\n  - {pool}\n\
         deadlines: {{pre_running_seconds: 3600, run_seconds: 7200{grace}}}\n\
         labels: {{{KEY_LABEL}: {key}}}\n",
        key = job.key
    )
}

pub async fn submit(
    http: &reqwest::Client,
    api: &ApiAccess,
    code: &str,
    job: &Job,
) -> anyhow::Result<()> {
    let key = if job.tenant == "team-b" {
        &api.team_b_key
    } else {
        &api.team_a_key
    };
    let body = json!({"spec": spec(job), "code": {"inline": code}});
    let r = http
        .post(format!("{}/v1/jobs", api.api))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body)?)
        .send()
        .await?;
    let status = r.status();
    if !status.is_success() {
        let text = r.text().await.unwrap_or_default();
        bail!("HTTP {status}: {text}");
    }
    Ok(())
}

/// TunePlane's decisions: when the reconciler admitted each job (the record's `admitted_at_ms`),
/// by the job's key, read from the stack's job store once its process has ended. Wall-clock
/// milliseconds become instants of this process through the run's start (`started` at
/// `started_wall`): both processes read the same clock.
pub async fn decisions(
    work: &Path,
    started: Instant,
    started_wall: std::time::SystemTime,
) -> anyhow::Result<std::collections::HashMap<String, Instant>> {
    use tuneplane_core::store::prelude::*;
    let store = tuneplane_stores::embedded::EmbeddedJobStore::open(work.join("stack/jobs"))
        .with_context(|| format!("opening the job store in {}", work.join("stack").display()))?;
    let base_ms = started_wall
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let mut out = std::collections::HashMap::new();
    for job in store.list_active().await? {
        let (Some(key), Some(at)) = (job.spec.labels.get(KEY_LABEL), job.admitted_at_ms) else {
            continue;
        };
        let offset = at - base_ms;
        let when = if offset >= 0 {
            started + Duration::from_millis(offset as u64)
        } else {
            started
                .checked_sub(Duration::from_millis(offset.unsigned_abs()))
                .unwrap_or(started)
        };
        out.insert(key.clone(), when);
    }
    Ok(out)
}

/// The workload name of the job with harness key `key` (its Pod, for a CPU job), from the stack's
/// job store once its process has ended.
pub async fn workload_of(work: &Path, key: &str) -> anyhow::Result<Option<String>> {
    use tuneplane_core::store::prelude::*;
    let store = tuneplane_stores::embedded::EmbeddedJobStore::open(work.join("stack/jobs"))
        .with_context(|| format!("opening the job store in {}", work.join("stack").display()))?;
    Ok(store
        .list_active()
        .await?
        .iter()
        .find(|j| j.spec.labels.get(KEY_LABEL).is_some_and(|k| k == key))
        .map(tuneplane_core::render::job_workload_name))
}

/// How many of team-b's jobs TunePlane's records show RUNNING (its API, as team-b).
pub async fn running(api: &ApiAccess) -> anyhow::Result<usize> {
    let http = reqwest::Client::new();
    let mut count = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/v1/jobs?status=RUNNING&limit=1000", api.api);
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let body = http
            .get(url)
            .bearer_auth(&api.team_b_key)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        let v: Value = serde_json::from_slice(&body)?;
        count += v["jobs"].as_array().map_or(0, Vec::len);
        match v["next_cursor"].as_str() {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(count),
        }
    }
}

/// A job TunePlane preempted, from its record: its key, the GPUs of the attempt, the attempt's
/// run time when it was told to stop (from `running_at_ms` to the attempt's end), and what
/// TunePlane recorded it lost (seconds since its newest complete checkpoint, or since it began).
#[derive(Debug, Clone)]
pub struct Victim {
    pub key: String,
    pub gpus: u64,
    pub ran_seconds: Option<f64>,
    pub lost_seconds: Option<u64>,
}

/// Every preempted attempt in the stack's job store (read once its process has ended).
pub async fn victims(work: &Path) -> anyhow::Result<Vec<Victim>> {
    use tuneplane_core::store::prelude::*;
    let store = tuneplane_stores::embedded::EmbeddedJobStore::open(work.join("stack/jobs"))
        .with_context(|| format!("opening the job store in {}", work.join("stack").display()))?;
    let mut out = Vec::new();
    for job in store.list_active().await? {
        let key = job.spec.labels.get(KEY_LABEL).cloned().unwrap_or_default();
        for a in &job.attempts {
            if a.failure.reason != tuneplane_core::job::FailureReason::Preempted {
                continue;
            }
            out.push(Victim {
                key: key.clone(),
                gpus: job.spec.total_gpus(),
                ran_seconds: a
                    .running_at_ms
                    .map(|r| (a.finished_at_ms - r).max(0) as f64 / 1000.0),
                lost_seconds: a.failure.lost_seconds,
            });
        }
    }
    Ok(out)
}
