//! The executing dev stack the end-to-end tests share: API, stores, kubesim running pods on this
//! machine with `examples/fleet.yaml`, and the reconciler, started in a test's own folder; and
//! the API calls those tests make about a job (submit, wait, events, archived logs, stop).

// Each test binary uses a part of this module.
#![allow(dead_code)]

pub mod preemption;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuneplane::client::{Api, ClientArgs, Output, pack};
use tuneplane::cmd::logs::read_logs_archive;
use tuneplane::dev::{Backend, Stack, StackOptions, UNPULLABLE_IMAGE};
use tuneplane_core::fleet::Fleet;
use tuneplane_core::job::{JobEvent, JobRecord};

/// The repository's `examples/` folder.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// The fleet of `examples/fleet.yaml`.
pub fn example_fleet() -> Fleet {
    Fleet::from_yaml(&std::fs::read_to_string(examples().join("fleet.yaml")).unwrap()).unwrap()
}

/// A JSON client of `stack`'s API with the stack's key.
pub fn api_client(stack: &Stack) -> Api {
    Api::new(&ClientArgs {
        api: stack.api_url.clone(),
        key: Some(stack.api_key.clone()),
        output: Output::Json,
    })
    .unwrap()
}

/// Starts the stack with its data under `data_dir` on `backend` and returns it with an API
/// client, once the reconciler has published its first capacity snapshot (within 10 s).
pub async fn start(backend: Backend, data_dir: &Path) -> (Stack, Api) {
    start_with(options(backend, data_dir)).await
}

/// The options [`start`] uses: the example fleet in execution mode, passes every 200 ms.
pub fn options(backend: Backend, data_dir: &Path) -> StackOptions {
    StackOptions {
        data_dir: data_dir.to_path_buf(),
        port: 0,
        fleet: example_fleet(),
        execute: true,
        unpullable_images: vec![UNPULLABLE_IMAGE.into()],
        pass_interval: Duration::from_millis(200),
        backend,
        cluster: tuneplane::dev::ClusterChoice::Simulated,
        webhooks: None,
        capsule_delivery: tuneplane_core::render::CapsuleDelivery::Presigned,
        blob_tls: None,
        preemption_min_run: None,
    }
}

/// Starts the stack with `options` and returns it with an API client, once the reconciler has
/// published its first capacity snapshot (within 10 s).
pub async fn start_with(options: StackOptions) -> (Stack, Api) {
    let stack = Stack::start(options).await.unwrap();
    let api = api_client(&stack);
    for _ in 0..100 {
        let cap: Value = api.get("/capacity").await.unwrap();
        if !cap["snapshot"].is_null() {
            return (stack, api);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no capacity snapshot");
}

/// `POST /jobs` with `spec` and the packed files of `dir`: the answer's status and body, or the
/// client's error as text.
pub async fn post_job(api: &Api, dir: &Path, spec: &str) -> Result<(u16, Value), String> {
    let code = pack::pack_quiet(dir).unwrap();
    let body = json!({"spec": spec, "code": {"inline": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, code)}});
    let (status, v): (_, Value) = api
        .post("/jobs", &body, &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok((status.as_u16(), v))
}

/// Submits `spec` with the files of `dir`; the job created (201).
pub async fn submit_dir(api: &Api, dir: &Path, spec: &str) -> JobRecord {
    let (status, v) = post_job(api, dir, spec).await.unwrap();
    assert_eq!(status, 201, "{}: {v}", dir.display());
    serde_json::from_value(v["job"].clone()).unwrap()
}

/// Submits the job folder `dir` with its own `tuneplane.yaml`; the job created (201).
pub async fn submit_folder(api: &Api, dir: &Path) -> JobRecord {
    let spec = std::fs::read_to_string(dir.join("tuneplane.yaml")).unwrap();
    submit_dir(api, dir, &spec).await
}

/// Submits `examples/<name>`; the job created (201).
pub async fn submit_example(api: &Api, name: &str) -> JobRecord {
    submit_folder(api, &examples().join(name)).await
}

/// Polls job `id` until `done` holds (within `secs` seconds); the job then.
pub async fn wait_until(
    api: &Api,
    id: &str,
    secs: u64,
    what: &str,
    done: impl Fn(&JobRecord) -> bool,
) -> JobRecord {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let job: JobRecord = api.get(&format!("/jobs/{id}")).await.unwrap();
        if done(&job) {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never became {what} in {secs}s: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every event of job `id`, oldest first.
pub async fn events(api: &Api, id: &str) -> Vec<JobEvent> {
    let page: Value = api
        .get(&format!("/jobs/{id}/events?limit=1000"))
        .await
        .unwrap();
    serde_json::from_value(page["events"].clone()).unwrap()
}

/// The files of job `id`'s archived logs (name, text), fetched through the link the API gives.
pub async fn archived_logs(api: &Api, id: &str) -> Vec<(String, String)> {
    let link: Value = api.get(&format!("/jobs/{id}/logs")).await.unwrap();
    let bytes = reqwest::get(link["url"].as_str().unwrap())
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .bytes()
        .await
        .unwrap();
    read_logs_archive(&bytes).unwrap()
}

/// Asks to stop job `id`; the API accepts (202).
pub async fn stop(api: &Api, id: &str) {
    let (status, v): (_, Value) = api
        .post(&format!("/jobs/{id}/stop"), &json!({}), &[])
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 202, "{v}");
}

/// Whether this run is on the real tier (`TUNEPLANE_TEST_K8S=real`); says so when it skips.
pub fn real_tier_wanted() -> bool {
    let wanted = std::env::var("TUNEPLANE_TEST_K8S").as_deref() == Ok("real");
    if !wanted {
        eprintln!("skipped: needs TUNEPLANE_TEST_K8S=real and TUNEPLANE_TEST_KUBECONFIG");
    }
    wanted
}

/// The node agent's real execution: the repository's image map with the runtimes
/// `scripts/test.sh` built (`TUNEPLANE_RUNTIMES`), pod folders under `data`.
pub fn real_execution(data: &Path) -> tuneplane_kubesim::agent::RealConfig {
    assert!(
        std::env::var_os("TUNEPLANE_RUNTIMES").is_some(),
        "TUNEPLANE_RUNTIMES is not set: scripts/testenv-runtimes.sh prints the runtimes folder (scripts/test.sh sets it)"
    );
    let map = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testenv/images.yaml");
    tuneplane_kubesim::agent::RealConfig {
        data_dir: data.to_path_buf(),
        images: tuneplane_kubesim::agent::real::ImageMap::load(&map).unwrap(),
        trust_ca: None,
    }
}

/// The archived log files of attempt `attempt` of job `id` (name, text).
pub async fn attempt_logs(api: &Api, id: &str, attempt: u32) -> Vec<(String, String)> {
    let link: Value = api
        .get(&format!("/jobs/{id}/logs?attempt={attempt}"))
        .await
        .unwrap();
    let bytes = reqwest::get(link["url"].as_str().unwrap())
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .bytes()
        .await
        .unwrap();
    read_logs_archive(&bytes).unwrap()
}

pub fn all_text(files: &[(String, String)]) -> String {
    files
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The steps of the complete checkpoints the API lists for job `id`.
pub async fn checkpoint_steps(api: &Api, id: &str) -> Vec<u64> {
    let v: Value = api.get(&format!("/jobs/{id}/outputs")).await.unwrap();
    v["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str()?.strip_prefix("step-")?.parse().ok())
        .collect()
}

/// The resume example with `env` overriding its settings.
pub fn resume_spec(env: &str, retries: &str) -> String {
    let spec = std::fs::read_to_string(examples().join("resume/tuneplane.yaml")).unwrap();
    spec.lines()
        .map(|l| {
            if l.starts_with("env:") {
                format!("env: {env}")
            } else if l.starts_with("retries:") {
                format!("retries: {retries}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The step attempt `attempt` of `examples/resume` says it resumed from, in its log `text`.
pub fn resumed_step(text: &str, attempt: u32) -> u64 {
    let prefix = format!("attempt {attempt} resumed from step ");
    text.lines()
        .find_map(|l| {
            l.strip_prefix(&prefix)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("attempt {attempt} did not resume: {text}"))
}

/// The last step `examples/resume` printed in its log `text`.
pub fn last_step(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            l.strip_prefix("step ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or_else(|| panic!("no step printed: {text}"))
}
