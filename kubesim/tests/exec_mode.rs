//! Execution mode: a CPU pod's command really runs through bash inside a per-pod folder of the data
//! directory, and a RayJob's entrypoint runs in its unpacked `working_dir` (file:// and HTTP).

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::path::Path;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;

fn exec_config(dir: &Path) -> tuneplane_kubesim::SimConfig {
    tuneplane_kubesim::SimConfig {
        exec_dir: Some(dir.to_path_buf()),
        ..fast_config()
    }
}

fn capsule(files: &[(&str, &str)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, body) in files {
        w.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(body.as_bytes()).unwrap();
    }
    w.finish().map(|c| c.into_inner()).unwrap()
}

/// Creates an h200 RayJob `name` running `entrypoint` with `runtime_env` (YAML) and waits until
/// it is Complete or Failed: its deployment status and job status.
async fn run_rayjob(
    client: &kube::Client,
    name: &str,
    entrypoint: &str,
    runtime_env: String,
) -> (String, Option<String>) {
    let rayjobs = rayjobs(client);
    let mut rj = rayjob(name, "h200", 8, 0);
    rj.spec.entrypoint = entrypoint.into();
    rj.spec.runtime_env_yaml = Some(runtime_env);
    rayjobs.create(&PostParams::default(), &rj).await.unwrap();
    let done = wait_for(30, "RayJob to finish", || async {
        let rj = rayjobs.get(name).await.ok()?;
        matches!(deployment(&rj).as_str(), "Complete" | "Failed").then_some(rj)
    })
    .await;
    let status = done.status.unwrap_or_default();
    (
        status.job_deployment_status.unwrap_or_default(),
        status.job_status,
    )
}

async fn wait_phase(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(20, "pod to finish", || async move {
        let p = pods.get(name).await.ok()?;
        matches!(phase(&p), "Succeeded" | "Failed").then_some(p)
    })
    .await
}

#[tokio::test]
async fn cpu_pod_command_runs_in_bash_with_env_workdir_and_mounts_inside_the_data_dir() {
    let data = tempfile::tempdir().unwrap();
    let (_sim, client) = start(exec_config(data.path())).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cpu-job"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "work", "emptyDir": {}}],
            "initContainers": [{
                "name": "fetch", "image": "bash",
                "command": ["bash", "-c", "echo fetched > /work/in.txt && echo init done"],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
            }],
            "containers": [{
                "name": "main", "image": "python:3.12-slim",
                "command": ["bash", "-c"],
                "args": ["echo \"$GREETING from $POD_NAME\" > /work/out.txt && cat /work/out.txt /work/in.txt && pwd && exit 3"],
                "workingDir": "/work",
                "env": [{"name": "GREETING", "value": "hi"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let done = wait_phase(&pods, "cpu-job").await;
    assert_eq!(phase(&done), "Failed");
    assert_eq!(exit_code(&done), Some(3));
    let logs = pods.logs("cpu-job", &LogParams::default()).await.unwrap();
    let mut lines = logs.lines();
    assert_eq!(lines.next(), Some("hi from cpu-job"));
    assert_eq!(
        lines.next(),
        Some("fetched"),
        "the init container ran first, sharing the volume"
    );
    let cwd = lines.next().unwrap_or_default();
    assert!(
        Path::new(cwd).starts_with(data.path()),
        "working directory {cwd} must be inside the data dir"
    );
    assert!(Path::new(cwd).join("out.txt").exists());
    let init_logs = pods
        .logs(
            "cpu-job",
            &LogParams {
                container: Some("fetch".into()),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(init_logs, "init done\n");
}

#[tokio::test]
async fn rayjob_entrypoint_runs_in_its_unpacked_file_working_dir() {
    let data = tempfile::tempdir().unwrap();
    let zip_path = data.path().join("capsule.zip");
    let script =
        "echo \"job $TUNEPLANE_JOB_ID in $(basename $(pwd))\"\ncat .tuneplane/jobspec.json\n";
    std::fs::write(
        &zip_path,
        capsule(&[
            ("run.sh", script),
            (".tuneplane/jobspec.json", "{\"name\":\"demo\"}"),
        ]),
    )
    .unwrap();
    let (_sim, client) = start(exec_config(data.path())).await;
    let runtime_env = format!(
        "working_dir: file://{}\nenv_vars:\n  TUNEPLANE_JOB_ID: j-123\n",
        zip_path.display()
    );
    assert_eq!(
        run_rayjob(&client, "tp-exec", "bash run.sh", runtime_env).await,
        ("Complete".into(), Some("SUCCEEDED".into()))
    );
    let pods: Api<Pod> = Api::namespaced(client, "default");
    assert_eq!(
        submitter_log(&pods, "tp-exec").await,
        "job j-123 in working_dir\n{\"name\":\"demo\"}"
    );
}

#[tokio::test]
async fn rayjob_working_dir_is_downloaded_over_http_and_a_failing_entrypoint_fails_the_job() {
    let data = tempfile::tempdir().unwrap();
    let bytes = capsule(&[(
        "capsule/fail.sh",
        "echo run >> \"$RUNS\"\necho failing >&2\nexit 4\n",
    )]);
    let runs = data.path().join("runs.txt");
    let app = axum::Router::new().route(
        "/caps/capsule.zip",
        axum::routing::get(move || async move { bytes.clone() }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let (_sim, client) = start(exec_config(data.path())).await;
    let runtime_env = format!(
        "working_dir: http://{addr}/caps/capsule.zip?X-Amz-Signature=abc\nenv_vars:\n  RUNS: {}\n",
        runs.display()
    );
    // The archive's single top-level folder is stripped, as Ray does.
    assert_eq!(
        run_rayjob(&client, "tp-http", "bash fail.sh", runtime_env).await,
        ("Failed".into(), Some("FAILED".into()))
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Retried submitter pods may exist too: the first run's pod holds the driver output.
    let mut outputs = Vec::new();
    for p in &submitter_pods(&pods, "tp-http").await {
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Ok(text) = pods.logs(&name, &LogParams::default()).await {
            outputs.push(text);
        }
    }
    assert!(outputs.iter().any(|o| o == "failing\n"), "{outputs:?}");
    // The submitter Job retries (backoffLimit 2), but the entrypoint ran exactly once.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), "default");
    wait_for(30, "submitter Job to fail", || {
        let jobs = jobs.clone();
        async move {
            let conds = jobs.get("tp-http").await.ok()?.status?.conditions?;
            conds
                .iter()
                .any(|c| c.type_ == "Failed" && c.status == "True")
                .then_some(())
        }
    })
    .await;
    assert_eq!(std::fs::read_to_string(&runs).unwrap_or_default(), "run\n");
    server.abort();
}

#[tokio::test]
async fn deleting_an_executed_pod_sends_sigterm_to_its_process() {
    let data = tempfile::tempdir().unwrap();
    let (_sim, client) = start(exec_config(data.path())).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let script = "trap 'echo term > /work/term.txt; exit 0' TERM; echo started; while true; do sleep 0.1; done";
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "forever"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "work", "emptyDir": {}}],
            "containers": [{
                "name": "main", "image": "bash", "command": ["bash", "-c", script],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            }],
        },
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let uid8: String = created
        .metadata
        .uid
        .unwrap_or_default()
        .chars()
        .take(8)
        .collect();
    wait_for(20, "the process to start", || {
        let pods = pods.clone();
        async move {
            let logs = pods.logs("forever", &LogParams::default()).await.ok()?;
            logs.contains("started").then_some(())
        }
    })
    .await;
    pods.delete("forever", &Default::default()).await.unwrap();
    let marker = data
        .path()
        .join(format!("pods/default/forever-{uid8}/volumes/work/term.txt"));
    wait_for(20, "the TERM trap to run", || {
        let marker = marker.clone();
        async move { marker.exists().then_some(()) }
    })
    .await;
}
