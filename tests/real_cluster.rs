//! `tuneplane dev --kubeconfig` on a real control plane (`TUNEPLANE_TEST_K8S=real`, the admin
//! kubeconfig in `TUNEPLANE_TEST_KUBECONFIG`; `scripts/test.sh` brings the cluster up): the
//! examples' fleet played by the node agent running pods for real (as root: each pod a network
//! namespace with its own IP, its containers processes with the runtime `testenv/images.yaml`
//! gives their image, `TUNEPLANE_RUNTIMES` from `scripts/testenv-runtimes.sh`), the one-machine
//! stack whose reconciler works against the real API server, scheduler and KubeRay operator as its
//! ServiceAccount, and the examples submitted through the HTTP API as a user would:
//! - `hello-cpu` ends SUCCEEDED and its archived log holds what hello.py printed;
//! - `ray-multipool` gets a RayCluster from the real operator whose pods the real scheduler bound
//!   to the nodes admission planned (head and main worker on two distinct h200 nodes, the eval
//!   worker on an l40s node); real Ray runs on the pod IPs, the operator follows the job through
//!   the API server's service proxy to its dashboard, and the job ends SUCCEEDED with each pool's
//!   task run on a pod of that pool;
//! - a sleeping RayJob holds the h200 nodes while `queued-behind` waits with `InsufficientGpu`;
//!   stopped, it ends STOPPED with no process of it left; `queued-behind` then runs to SUCCEEDED;
//! - `bad-image` (an image the map does not know) fails at its 15 s pre-running deadline with the
//!   kubelet's `Failed to pull image` Warning copied from the API server;
//! - `too-big` is refused at submit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api as KubeApi, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;
use stack_support::{
    all_text, api_client, archived_logs, attempt_logs, checkpoint_steps, events, example_fleet,
    examples, post_job, real_execution, real_tier_wanted, resume_spec, resumed_step, stop,
    submit_dir, submit_example, wait_until,
};
use tuneplane::client::Api;
use tuneplane::dev::{Backend, BlobTls, ClusterChoice, Stack, StackOptions, UNPULLABLE_IMAGE};
use tuneplane_core::fleet::Fleet;
use tuneplane_core::job::{FailureReason, JobState, PendingReason};
use tuneplane_core::render::CapsuleDelivery;
use tuneplane_kubesim::Scenario;
use tuneplane_kubesim::testbed::Testbed;

mod stack_support;

/// Submits `examples/<name>`: the answer's status and body, or the client's error as text.
async fn submit(api: &Api, name: &str) -> Result<(u16, Value), String> {
    let dir = examples().join(name);
    let spec = std::fs::read_to_string(dir.join("tuneplane.yaml")).unwrap();
    post_job(api, &dir, &spec).await
}

/// Processes on this machine whose environment names job `id` (`TUNEPLANE_JOB_ID`).
fn processes_of_job(id: &str) -> Vec<String> {
    let needle = format!("TUNEPLANE_JOB_ID={id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter_map(|e| {
            let env = std::fs::read(e.path().join("environ")).ok()?;
            env.split(|b| *b == 0)
                .any(|v| v == needle.as_bytes())
                .then(|| e.file_name().to_string_lossy().to_string())
        })
        .collect()
}

/// The pods of the RayCluster of job `id` once every one has an IP: `(ray.io/group, pod IP, uid)`.
async fn ray_pods_with_ips(
    pods: &KubeApi<Pod>,
    id: &str,
    want: usize,
) -> Vec<(String, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let found: Vec<(String, String, String)> = pods
            .list(
                &ListParams::default()
                    .labels(&format!("ray.io/is-ray-node=yes,tuneplane.io/job-id={id}")),
            )
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| {
                let ip = p.status.as_ref()?.pod_ip.clone()?;
                Some((p.labels().get("ray.io/group")?.clone(), ip, p.uid()?))
            })
            .collect();
        if found.len() == want {
            return found;
        }
        assert!(Instant::now() < deadline, "Ray pods without IPs: {found:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The examples' fleet on the real control plane with the agent running pods for real, and the
/// dev stack whose reconciler works against it (delivering capsules to Ray pods as `delivery`).
struct RealTier {
    bed: Testbed,
    stack: Stack,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// How pods reach the dev blob server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Http,
    /// HTTPS with the certificate `scripts/k8s-up.sh` made (`pki/blob-store.crt` beside the
    /// kubeconfig), whose CA the agent's pods trust.
    Https,
}

impl RealTier {
    async fn start(delivery: CapsuleDelivery, transport: Transport) -> RealTier {
        let kubeconfig = PathBuf::from(std::env::var("TUNEPLANE_TEST_KUBECONFIG").unwrap());
        let dir = tempfile::tempdir().unwrap();
        let agent_dir = tempfile::tempdir().unwrap();
        let mut execution = real_execution(agent_dir.path());
        let mut blob_tls = None;
        if transport == Transport::Https {
            let pki = kubeconfig.parent().unwrap().join("pki");
            let [ca, cert, key] =
                ["ca.crt", "blob-store.crt", "blob-store.key"].map(|f| pki.join(f));
            assert!(
                cert.is_file(),
                "{} is missing: bring the cluster up again with scripts/k8s-up.sh, which makes it",
                cert.display()
            );
            execution.trust_ca = Some(ca);
            blob_tls = Some(BlobTls { cert, key });
        }
        let bed = Testbed::start_with(
            &kubeconfig,
            example_fleet(),
            Scenario::default(),
            Some(execution),
        )
        .await
        .unwrap();
        let stack = Stack::start(StackOptions {
            data_dir: dir.path().to_path_buf(),
            port: 0,
            fleet: Fleet {
                node_groups: Vec::new(),
            },
            execute: false,
            unpullable_images: Vec::new(),
            pass_interval: Duration::from_millis(300),
            backend: Backend::Embedded,
            cluster: ClusterChoice::Real { kubeconfig },
            webhooks: None,
            capsule_delivery: delivery,
            blob_tls,
            // Preemption after 5 s of running: the preemption scenario's jobs run a minute. The
            // other scenarios have no quotas and equal priorities, so nothing preempts there.
            preemption_min_run: Some(Duration::from_secs(5)),
        })
        .await
        .unwrap();
        RealTier {
            bed,
            stack,
            _dirs: (dir, agent_dir),
        }
    }
}

/// The capacity view once the reconciler has read the real nodes' `series` with `gpus` GPUs.
async fn capacity_with(api: &Api, series: &str, gpus: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cap: Value = api.get("/capacity").await.unwrap();
        if cap["snapshot"]["series"][series]["total_gpus"].as_u64() == Some(gpus) {
            return cap;
        }
        assert!(Instant::now() < deadline, "no capacity snapshot: {cap}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Submits `examples/<name>`; the id of the job created.
async fn submitted(api: &Api, name: &str) -> String {
    submit_example(api, name).await.id.into_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dev_stack_on_a_real_control_plane_runs_the_examples() {
    if !real_tier_wanted() {
        return;
    }
    let real = RealTier::start(CapsuleDelivery::Presigned, Transport::Https).await;
    let (bed, stack) = (&real.bed, &real.stack);
    let pod_blobs = stack.pod_blob_url.clone().expect("an HTTPS blob endpoint");
    assert!(pod_blobs.starts_with("https://127.0.0.1:"), "{pod_blobs}");
    assert!(stack.sim.is_none());
    let api = api_client(stack);
    // The capacity view is what the reconciler reads off the real nodes.
    let capacity = capacity_with(&api, "h200", 32).await;
    assert_eq!(
        capacity["snapshot"]["series"]["l40s"]["total_gpus"], 8,
        "{capacity}"
    );

    // too-big: refused at submit from the real nodes' capacity.
    let refusal = submit(&api, "too-big").await.unwrap_err();
    assert!(
        refusal.contains("largest h200 node has 8") && refusal.contains("400"),
        "{refusal}"
    );

    // hello-cpu: the Pod is bound by the real scheduler to a CPU node, runs, and succeeds.
    let hello = submitted(&api, "hello-cpu").await;
    let pods: KubeApi<Pod> = KubeApi::namespaced(bed.admin.clone(), "tuneplane-jobs");
    let pod = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let found = pods
                .list(&ListParams::default().labels(&format!("tuneplane.io/job-id={hello}")))
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some());
            if let Some(p) = found {
                break p;
            }
            assert!(Instant::now() < deadline, "hello-cpu's pod never bound");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    // Where the real scheduler put it: the CPU Pod tolerates the GPU taint and has no node
    // constraint, so it may land on a GPU node (placement that follows admission's plan is the
    // scheduling issue's work, not asserted here).
    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    let nodes: KubeApi<Node> = KubeApi::all(bed.admin.clone());
    eprintln!("hello-cpu's pod was bound to {node}");
    let done = wait_until(&api, &hello, 90, "SUCCEEDED", |j| j.state.is_terminal()).await;
    let hello_capsule = done.capsule_sha256.clone();
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    let logs = archived_logs(&api, &hello).await;
    assert!(
        logs.iter().any(|(p, text)| p.ends_with(".log")
            && text.contains("*** hello from TunePlane ***")
            && text.contains("countdown 1")
            && !text.contains("kubesim agent")),
        "hello-cpu's own output came through the API server from the node: {logs:?}"
    );

    // ray-multipool: the real operator's RayCluster, its pods where admission planned.
    let started = Instant::now();
    let multi_job = submit_example(&api, "ray-multipool").await;
    let (multi, multi_capsule) = (multi_job.id.clone(), multi_job.capsule_sha256.clone());
    let running = wait_until(&api, &multi, 120, "RUNNING", |j| {
        j.state == JobState::Running
    })
    .await;
    assert_eq!(running.state, JobState::Running);
    let gvk = GroupVersionKind::gvk("ray.io", "v1", "RayCluster");
    let clusters: KubeApi<DynamicObject> = KubeApi::namespaced_with(
        bed.admin.clone(),
        "tuneplane-jobs",
        &ApiResource::from_gvk(&gvk),
    );
    // Ray's runtime-env agent downloads the capsule itself, over HTTPS from a CA the pods trust.
    let rayjobs: KubeApi<DynamicObject> = KubeApi::namespaced_with(
        bed.admin.clone(),
        "tuneplane-jobs",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("ray.io", "v1", "RayJob")),
    );
    let rayjob = rayjobs
        .list(&ListParams::default().labels(&format!("tuneplane.io/job-id={multi}")))
        .await
        .unwrap()
        .items
        .pop()
        .expect("the job's RayJob");
    let runtime_env = rayjob.data["spec"]["runtimeEnvYAML"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        runtime_env.contains(&format!("working_dir: {pod_blobs}/capsules/sha256/")),
        "{runtime_env}"
    );
    let rc = clusters
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|c| {
            c.labels().get("tuneplane.io/job-id").map(String::as_str) == Some(multi.as_str())
                || c.owner_references().iter().any(|o| o.kind == "RayJob")
        })
        .expect("no RayCluster from the operator");
    let with_ips = ray_pods_with_ips(&pods, &multi, 3).await;
    let ray_pods = pods
        .list(&ListParams::default().labels(&format!("ray.io/cluster={}", rc.name_any())))
        .await
        .unwrap()
        .items;
    let mut placed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &ray_pods {
        let node = p
            .spec
            .as_ref()
            .unwrap()
            .node_name
            .clone()
            .unwrap_or_default();
        let series = nodes
            .get(&node)
            .await
            .unwrap()
            .labels()
            .get("tuneplane/gpu-series")
            .cloned()
            .unwrap_or_default();
        let group = p.labels().get("ray.io/group").cloned().unwrap_or_default();
        placed
            .entry(format!("{group}@{series}"))
            .or_default()
            .push(node);
    }
    assert_eq!(
        ray_pods.len(),
        3,
        "head + main worker + eval worker: {placed:?}"
    );
    assert_eq!(
        placed.get("headgroup@h200").map(Vec::len),
        Some(1),
        "{placed:?}"
    );
    assert_eq!(placed.get("main@h200").map(Vec::len), Some(1), "{placed:?}");
    assert_eq!(placed.get("eval@l40s").map(Vec::len), Some(1), "{placed:?}");
    assert_ne!(
        placed["headgroup@h200"], placed["main@h200"],
        "the two h200 machines of the pool are distinct nodes"
    );
    // The operator turned rayStartParams into each pod's `ray start`: the pool's custom resource
    // and an explicit GPU count (head = machine zero of the primary pool).
    for p in &ray_pods {
        let group = p.labels().get("ray.io/group").cloned().unwrap_or_default();
        let (pool, gpus) = match group.as_str() {
            "headgroup" | "main" => ("main", 8),
            _ => ("eval", 4),
        };
        let c = &p.spec.as_ref().unwrap().containers[0];
        let line = [
            c.command.clone().unwrap_or_default(),
            c.args.clone().unwrap_or_default(),
        ]
        .concat()
        .join(" ");
        assert!(
            line.contains(&format!("--resources='{{\"tuneplane.pool.{pool}\": 1}}'"))
                && line.contains(&format!("--num-gpus={gpus}")),
            "{group}: {line}"
        );
    }

    // Real Ray ran the driver to its end; each pool's task ran on a pod of that pool.
    let done = wait_until(&api, &multi, 300, "SUCCEEDED", |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    eprintln!(
        "ray-multipool SUCCEEDED {:.0} s after submission",
        started.elapsed().as_secs_f64()
    );
    assert!(started.elapsed() < Duration::from_secs(300));
    let ips = |groups: &[&str]| -> Vec<String> {
        with_ips
            .iter()
            .filter(|(g, _, _)| groups.contains(&g.as_str()))
            .map(|(_, ip, _)| ip.clone())
            .collect()
    };
    let (main_ips, eval_ips) = (ips(&["headgroup", "main"]), ips(&["eval"]));
    assert!(
        with_ips.iter().all(|(_, ip, _)| ip.starts_with("10.244.")),
        "pod IPs are the agent's namespaces': {with_ips:?}"
    );
    let logs = archived_logs(&api, &multi).await;
    let all: String = logs.iter().map(|(_, t)| t.as_str()).collect();
    let ran_on = |prefix: &str| -> Vec<String> {
        all.lines()
            .filter_map(|l| l.split_once(prefix).map(|(_, ip)| ip.trim().to_string()))
            .collect()
    };
    let main_ran = ran_on("pool main ran epoch 0 on node ");
    let eval_ran = ran_on("pool eval ran on node ");
    assert!(
        !main_ran.is_empty() && main_ran.iter().all(|ip| main_ips.contains(ip)),
        "main's task ran on a pod of pool main {main_ips:?}: {main_ran:?}\n{all}"
    );
    assert!(
        !eval_ran.is_empty() && eval_ran.iter().all(|ip| eval_ips.contains(ip)),
        "eval's task ran on a pod of pool eval {eval_ips:?}: {eval_ran:?}"
    );
    assert!(all.contains("eval score 0.750"), "{all}");

    // A sleeping RayJob on two h200 nodes: queued-behind waits for them.
    let sleep_spec = std::fs::read_to_string(examples().join("ray-multipool/tuneplane.yaml"))
        .unwrap()
        .replace("name: ray-multipool", "name: ray-sleep")
        .replace(
            "entrypoint: python3 train.py",
            "entrypoint: python3 -c \"import time; print('sleeping', flush=True); time.sleep(900)\"",
        )
        .replace("  - {name: eval, series: l40s, nodes: 1, gpus_per_node: 4}\n", "");
    let sleeper = submit_dir(&api, &examples().join("ray-multipool"), &sleep_spec)
        .await
        .id;
    wait_until(&api, &sleeper, 180, "RUNNING", |j| {
        j.state == JobState::Running
    })
    .await;
    let sleeper_pods = ray_pods_with_ips(&pods, &sleeper, 2).await;
    // The driver runs: its process carries the job's id.
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes_of_job(&sleeper).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the sleeping driver never started"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // queued-behind waits for the h200 nodes the sleeper holds (3 schedulable, 2 taken).
    let behind = submitted(&api, "queued-behind").await;
    let waiting = wait_until(&api, &behind, 60, "pending InsufficientGpu", |j| {
        j.pending
            .as_ref()
            .is_some_and(|p| p.reason == PendingReason::InsufficientGpu)
    })
    .await;
    assert_eq!(waiting.state, JobState::Queued);

    // bad-image: the kubelet's pull failure, then the pre-running deadline.
    let bad = submitted(&api, "bad-image").await;
    let failed = wait_until(&api, &bad, 90, "FAILED", |j| j.state.is_terminal()).await;
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    assert_eq!(
        failed.failure.as_ref().map(|f| f.reason),
        Some(FailureReason::PreRunningDeadlineExceeded)
    );
    let copied = events(&api, &bad).await;
    assert!(
        copied.iter().any(|e| e
            .message
            .contains(&format!("Failed to pull image \"{UNPULLABLE_IMAGE}\""))),
        "{copied:?}"
    );

    // Stopping the sleeper ends it STOPPED with nothing of it left running; its nodes go to
    // queued-behind, which runs to its end.
    stop(&api, &sleeper).await;
    let stopped = wait_until(&api, &sleeper, 120, "STOPPED", |j| j.state.is_terminal()).await;
    assert_eq!(stopped.state, JobState::Stopped, "{stopped:?}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let left = processes_of_job(&sleeper);
        let namespaces: Vec<String> = sleeper_pods
            .iter()
            .map(|(_, _, uid)| {
                format!(
                    "/var/run/netns/tp-{}",
                    uid.chars()
                        .filter(char::is_ascii_alphanumeric)
                        .take(12)
                        .collect::<String>()
                )
            })
            .filter(|p| std::path::Path::new(p).exists())
            .collect();
        if left.is_empty() && namespaces.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped job left processes {left:?} and namespaces {namespaces:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ran = wait_until(&api, &behind, 300, "SUCCEEDED", |j| j.state.is_terminal()).await;
    assert_eq!(ran.state, JobState::Succeeded, "{ran:?}");

    // The capsule of ray-multipool altered in storage (a file changed, the manifest kept): Ray
    // downloads and unpacks it, the runner refuses it before the driver's code runs.
    real.tamper(&multi_capsule, "train.py");
    tampered_capsule_fails_before_user_code(&api, "ray-multipool", "the runner").await;
    // The same for a CPU job's Pod: its runner refuses (exit 86) and the job is a
    // CapsuleMismatch with the runner's line, not an application failure.
    real.tamper(&hello_capsule, "hello.py");
    tampered_capsule_fails_before_user_code(&api, "hello-cpu", "a CPU pod's runner").await;
    real.stack.shutdown().await;
}

/// Submits ray-multipool again (the same capsule, now altered in storage): the job fails as
/// `CapsuleMismatch` with the checksum message in its events (`refuser` says who refused it),
/// and nothing of the altered code ran.
async fn tampered_capsule_fails_before_user_code(api: &Api, example: &str, refuser: &str) {
    let started = Instant::now();
    let job = submit_example(api, example).await;
    let failed = wait_until(api, &job.id, 240, "FAILED", |j| j.state.is_terminal()).await;
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    let failure = failed.failure.clone().unwrap();
    assert_eq!(
        failure.reason,
        FailureReason::CapsuleMismatch,
        "{failure:?}"
    );
    eprintln!(
        "tampered capsule refused by {refuser} {:.0} s after submission",
        started.elapsed().as_secs_f64()
    );
    let copied = events(api, &job.id).await;
    assert!(
        copied.iter().any(|e| e.kind == "Warning"
            && e.message.contains("CapsuleMismatch")
            && e.message.contains("capsule checksum mismatch")),
        "{copied:?}"
    );
    let logs = archived_logs(api, &job.id).await;
    let all: String = logs.iter().map(|(_, t)| t.as_str()).collect();
    assert!(all.contains("capsule checksum mismatch"), "{all}");
    assert!(
        !all.contains(TAMPERED_OUTPUT) && !all.contains("epoch") && !all.contains("countdown"),
        "user code ran: {all}"
    );
}

/// What the altered capsule's code would print.
const TAMPERED_OUTPUT: &str = "altered code ran";

impl RealTier {
    /// Rewrites the stored capsule `sha` (the dev blob store's file) with `file` changed and
    /// everything else, the manifest included, as it was.
    fn tamper(&self, sha: &str, file: &str) {
        let zip = self
            ._dirs
            .0
            .path()
            .join(format!("blobs/data/capsules/sha256/{sha}/capsule.zip"));
        assert!(zip.is_file(), "{}", zip.display());
        let script = format!(
            "import shutil, sys, zipfile\n\
             src = sys.argv[1]; tmp = src + '.t'\n\
             with zipfile.ZipFile(src) as a, zipfile.ZipFile(tmp, 'w', zipfile.ZIP_DEFLATED) as b:\n\
             \x20   for i in a.infolist():\n\
             \x20       data = a.read(i.filename)\n\
             \x20       if i.filename == '{file}':\n\
             \x20           data = b\"print('{TAMPERED_OUTPUT}')\\n\"\n\
             \x20       b.writestr(i, data)\n\
             shutil.move(tmp, src)\n"
        );
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(&script)
            .arg(&zip)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
}

/// The HTTP-only capsule path on the real tier: every Ray pod's init container downloads the
/// capsule through the pod's relay to the dev blob server, verifies its SHA-256 onto the shared
/// volume, and Ray runs the job from `file:///tuneplane/capsule/<sha>/capsule.zip` to SUCCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn init_container_delivery_runs_a_rayjob_from_the_verified_capsule() {
    if !real_tier_wanted() {
        return;
    }
    let real = RealTier::start(CapsuleDelivery::InitContainer, Transport::Http).await;
    let api = api_client(&real.stack);
    capacity_with(&api, "h200", 32).await;
    let job = submit_example(&api, "ray-multipool").await;
    let done = wait_until(&api, &job.id, 300, "SUCCEEDED", |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    let logs = archived_logs(&api, &job.id).await;
    let verified = logs
        .iter()
        .filter(|(p, t)| {
            p.contains("fetch-capsule")
                && t.contains("tuneplane: capsule ")
                && t.contains(" verified")
        })
        .count();
    assert_eq!(verified, 3, "each Ray pod verified the capsule: {logs:?}");
    let all: String = logs.iter().map(|(_, t)| t.as_str()).collect();
    assert!(all.contains("eval score 0.750"), "{all}");

    // The same capsule altered in storage: every pod's fetch refuses it, and the job fails at
    // once instead of waiting for its pre-running deadline.
    real.tamper(&job.capsule_sha256, "train.py");
    tampered_capsule_fails_before_user_code(&api, "ray-multipool", "fetch-capsule").await;
    real.stack.shutdown().await;
}

/// A playground on the real tier: admitted to a planned node, its pod runs the vLLM image's
/// stand-in (an OpenAI-compatible server on CPU, `testenv/playground/server.py`) with the
/// playground's key from its Secret, becomes Ready when its HTTP readiness probe passes, answers
/// through TunePlane's proxy (`/v1/playgrounds/<id>/proxy/v1/models` and a chat completion, with
/// the tenant's API key only), refuses the same request without the key through the Kubernetes
/// API server's proxy (an operator route that cannot carry the key), and is deleted with its
/// Secret when its TTL expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_playground_answers_through_tuneplanes_proxy_only_with_its_key_and_is_reclaimed() {
    if !real_tier_wanted() {
        return;
    }
    let real = RealTier::start(CapsuleDelivery::Presigned, Transport::Http).await;
    let api = api_client(&real.stack);
    capacity_with(&api, "l40s", 8).await;
    let body = serde_json::json!({"model": "Qwen/Qwen3-0.6B", "series": "l40s", "gpus": 2, "ttl_seconds": 120});
    let (status, made): (_, Value) = api.post("/playgrounds", &body, &[]).await.unwrap();
    assert_eq!(status.as_u16(), 201, "{made}");
    let created = Instant::now();
    let id = made["playground"]["id"]
        .as_str()
        .or_else(|| made["id"].as_str())
        .unwrap_or_else(|| panic!("no id in {made}"))
        .to_string();
    let pods: KubeApi<Pod> = KubeApi::namespaced(real.bed.admin.clone(), "tuneplane-jobs");
    let deadline = Instant::now() + Duration::from_secs(90);
    let pod = loop {
        let ready = pods.get_opt(&id).await.unwrap().filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if let Some(p) = ready {
            break p;
        }
        if Instant::now() >= deadline {
            panic!(
                "playground pod {id} never Ready within 90 s:\n{}",
                playground_diagnosis(&api, &real.bed.admin, &id).await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(ip.starts_with("10.244."), "{ip}");
    // Pinned to the node admission planned.
    let shown: Value = api.get(&format!("/playgrounds/{id}")).await.unwrap();
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    assert_eq!(shown["node"].as_str(), node.as_deref(), "{shown}");
    // Without the key the server refuses, also through the API server's proxy, which drops any
    // Authorization header it authenticated: an operator route (port-forward plus the Secret's
    // key), not a tenant's.
    let request = http::Request::get(format!(
        "/api/v1/namespaces/tuneplane-jobs/pods/{id}:8000/proxy/v1/models"
    ))
    .body(kube::client::Body::empty())
    .unwrap();
    let refused = real.bed.admin.send(request).await.unwrap();
    assert_eq!(
        refused.status().as_u16(),
        401,
        "the server answered without its key"
    );
    // Through TunePlane's proxy with the tenant's own key: once the record shows it Running
    // (with the pod's address).
    let proxy = format!("/playgrounds/{id}/proxy/v1/models");
    let deadline = Instant::now() + Duration::from_secs(30);
    let models: Value = loop {
        match api.get::<Value>(&proxy).await {
            Ok(v) => break v,
            Err(e) => {
                assert!(Instant::now() < deadline, "proxy never answered: {e:#}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert_eq!(models["data"][0]["id"], "Qwen/Qwen3-0.6B", "{models}");
    let chat = serde_json::json!({"messages": [{"role": "user", "content": "hello tuneplane"}]});
    let (status, answer): (_, Value) = api
        .post(
            &format!("/playgrounds/{id}/proxy/v1/chat/completions"),
            &chat,
            &[],
        )
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 200, "{answer}");
    assert!(answer.to_string().contains("hello tuneplane"), "{answer}");
    let secrets: KubeApi<k8s_openapi::api::core::v1::Secret> =
        KubeApi::namespaced(real.bed.admin.clone(), "tuneplane-jobs");
    let secret = format!("{id}-api-key");
    assert!(secrets.get_opt(&secret).await.unwrap().is_some());
    // The TTL: the reconciler deletes the pod (and the agent its namespace) and the Secret.
    let deadline = created + Duration::from_secs(210);
    while pods.get_opt(&id).await.unwrap().is_some()
        || secrets.get_opt(&secret).await.unwrap().is_some()
    {
        assert!(
            Instant::now() < deadline,
            "playground {id} or its key outlived its TTL"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    real.stack.shutdown().await;
}

/// What a playground that never became Ready shows: its record, its pod's status, its readiness
/// probe's request (`GET /health`) sent from this host as the agent sends it, the Kubernetes
/// events about the pod and the server's log.
async fn playground_diagnosis(api: &Api, admin: &kube::Client, id: &str) -> String {
    use k8s_openapi::api::core::v1::Event;
    let record = api
        .get::<Value>(&format!("/playgrounds/{id}"))
        .await
        .map_or_else(|e| format!("{e:#}"), |v| v.to_string());
    let pods: KubeApi<Pod> = KubeApi::namespaced(admin.clone(), "tuneplane-jobs");
    let (status, ip) = match pods.get_opt(id).await {
        Ok(Some(p)) => (
            serde_json::to_string(&p.status).unwrap_or_default(),
            p.status.and_then(|s| s.pod_ip),
        ),
        Ok(None) => ("no pod".to_string(), None),
        Err(e) => (e.to_string(), None),
    };
    // What the agent's readiness probe asks, asked from this host as the agent does.
    let health = match &ip {
        Some(ip) => match reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
            .get(format!("http://{ip}:8000/health"))
            .send()
            .await
        {
            Ok(r) => format!("HTTP {}", r.status()),
            Err(e) => format!("{e:#}"),
        },
        None => "no pod IP".to_string(),
    };
    let log = pods
        .logs(id, &kube::api::LogParams::default())
        .await
        .unwrap_or_else(|e| format!("no log: {e}"));
    let events: KubeApi<Event> = KubeApi::namespaced(admin.clone(), "tuneplane-jobs");
    let lp = ListParams::default().fields(&format!("involvedObject.name={id}"));
    let events = match events.list(&lp).await {
        Ok(list) => list
            .items
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e.type_.as_deref().unwrap_or(""),
                    e.reason.as_deref().unwrap_or(""),
                    e.message.as_deref().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => e.to_string(),
    };
    format!(
        "record: {record}\npod status: {status}\nGET /health from the host: {health}\nevents:\n{events}\nserver log:\n{log}"
    )
}

/// Ray token authentication on the real tier with real Ray and the real KubeRay operator: while
/// a job runs, its Ray dashboard (8265) refuses a request without the job's token (401) and a
/// request with another token (403) — so another tenant's job, which holds only its own token,
/// cannot submit to it — and the head's gate (the head Service's `dashboard` port, 8270) refuses
/// everything without the token but the job's own status, which it answers without the job's
/// entrypoint or runtime environment (what the operator reads to follow the job). The job's
/// token works; nothing the refused requests asked for ran; the token's Secret is deleted with
/// the workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_jobs_ray_cluster_answers_only_its_own_token() {
    use k8s_openapi::api::core::v1::Secret;
    use tuneplane_core::render::rayjob::{AUTH_SECRET_KEY, GATE_PORT, auth_secret_name};
    use tuneplane_core::render::workload_name;
    if !real_tier_wanted() {
        return;
    }
    let real = RealTier::start(CapsuleDelivery::Presigned, Transport::Http).await;
    let api = api_client(&real.stack);
    capacity_with(&api, "h200", 32).await;
    let spec = std::fs::read_to_string(examples().join("ray-multipool/tuneplane.yaml"))
        .unwrap()
        .replace("name: ray-multipool", "name: ray-guarded")
        .replace(
            "entrypoint: python3 train.py",
            "entrypoint: python3 -c \"import time; print('guarded', flush=True); time.sleep(600)\"",
        )
        .replace(
            "  - {name: eval, series: l40s, nodes: 1, gpus_per_node: 4}\n",
            "",
        );
    let id = submit_dir(&api, &examples().join("ray-multipool"), &spec)
        .await
        .id;
    wait_until(&api, &id, 180, "RUNNING", |j| j.state == JobState::Running).await;
    let pods: KubeApi<Pod> = KubeApi::namespaced(real.bed.admin.clone(), "tuneplane-jobs");
    let ray_pods = ray_pods_with_ips(&pods, &id, 2).await;
    let head_ip = ray_pods
        .iter()
        .find(|(group, _, _)| group == "headgroup")
        .map(|(_, ip, _)| ip.clone())
        .unwrap_or_else(|| panic!("no head pod in {ray_pods:?}"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while processes_of_job(&id).is_empty() {
        assert!(Instant::now() < deadline, "the driver never started");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let workload = workload_name(&id);
    let secrets: KubeApi<Secret> = KubeApi::namespaced(real.bed.admin.clone(), "tuneplane-jobs");
    let secret_name = auth_secret_name(&workload);
    let secret = secrets.get(&secret_name).await.unwrap();
    let token = String::from_utf8(secret.data.unwrap()[AUTH_SECRET_KEY].0.clone()).unwrap();
    assert_eq!(token.len(), 64, "a 32-byte token as hex");

    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let dashboard = format!("http://{head_ip}:8265");
    let gate = format!("http://{head_ip}:{GATE_PORT}");
    let evil = serde_json::to_vec(
        &serde_json::json!({"entrypoint": "echo pwned > /tmp/pwned", "submission_id": "evil"}),
    )
    .unwrap();
    let other_tenants_token = "f".repeat(64);
    for base in [&dashboard, &gate] {
        let anonymous = http
            .post(format!("{base}/api/jobs/"))
            .header("content-type", "application/json")
            .body(evil.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(anonymous.status().as_u16(), 401, "{base}: no token");
        let wrong = http
            .post(format!("{base}/api/jobs/"))
            .bearer_auth(&other_tenants_token)
            .header("content-type", "application/json")
            .body(evil.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status().as_u16(), 403, "{base}: another token");
        let listing = http.get(format!("{base}/api/jobs/")).send().await.unwrap();
        assert_eq!(
            listing.status().as_u16(),
            401,
            "{base}: listing without a token"
        );
    }
    // Ray's own status route needs the token; the gate answers the job's status alone.
    let direct = http
        .get(format!("{dashboard}/api/jobs/{workload}"))
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status().as_u16(), 401);
    let answer = http
        .get(format!("{gate}/api/jobs/{workload}"))
        .send()
        .await
        .unwrap();
    let code = answer.status();
    let text = answer.text().await.unwrap();
    let status: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the gate's status answer ({code}) is not JSON: {e}: {text:?}"));
    assert_eq!(status["submission_id"], workload.as_str(), "{status}");
    assert!(
        ["PENDING", "RUNNING"].contains(&status["status"].as_str().unwrap_or_default()),
        "{status}"
    );
    assert!(
        status.get("entrypoint").is_none() && status.get("runtime_env").is_none(),
        "{status}"
    );

    // The job's own token is the key: it lists the jobs, and only the job's own submission ran.
    let jobs: Value = http
        .get(format!("{gate}/api/jobs/"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    let ids: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["submission_id"].as_str())
        .collect();
    assert_eq!(ids, [workload.as_str()], "{jobs}");

    stop(&api, &id).await;
    wait_until(&api, &id, 120, "STOPPED", |j| j.state.is_terminal()).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while secrets.get_opt(&secret_name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the token's Secret outlived the workload"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    real.stack.shutdown().await;
}

/// The job's nodes once it runs and has a complete checkpoint.
async fn running_with_checkpoint(api: &Api, id: &str) -> tuneplane_core::job::JobRecord {
    let job = wait_until(api, id, 240, "running", |j| j.state == JobState::Running).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpoint_steps(api, id).await.is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint of {id} in 120 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    job
}

/// Waits (at most `within_s`) until job `id` is queued again as attempt 2 after attempt 1 ended
/// as `NodeLost` (an infrastructure cause) with evidence starting with `evidence`.
async fn requeued_for_a_lost_node(api: &Api, id: &str, within_s: u64, evidence: &str) {
    let requeued = wait_until(api, id, within_s, "requeued", |j| j.attempt == 2).await;
    let first = &requeued.attempts[0];
    assert_eq!(
        (first.failure.reason, first.failure.cause),
        (
            FailureReason::NodeLost,
            tuneplane_core::job::FailureCause::Infrastructure
        ),
        "{first:?}"
    );
    assert!(
        first
            .failure
            .evidence
            .iter()
            .any(|e| e.starts_with(evidence)),
        "{first:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_that_lose_their_node_resume_from_their_newest_checkpoint_as_attempt_two() {
    if !real_tier_wanted() {
        return;
    }
    let real = RealTier::start(CapsuleDelivery::Presigned, Transport::Https).await;
    let (bed, stack) = (&real.bed, &real.stack);
    let api = api_client(stack);
    capacity_with(&api, "h200", 32).await;
    // Long enough (80 s) to still run when the Ray job has started beside it.
    let env = r#"{STEPS: "160", STEP_SECONDS: "0.5", CHECKPOINT_SECONDS: "5"}"#;
    let cpu_spec = resume_spec(env, "{infrastructure: 2, application: 0}");
    let ray_spec = cpu_spec
        .replace(
            "  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}",
            "  - {name: main, series: h200, nodes: 2, gpus_per_node: 8}",
        )
        .replace("image: python:3.12-slim", "image: rayproject/ray:2.60.0");
    let dir = examples().join("resume");
    let cpu = submit_dir(&api, &dir, &cpu_spec).await;
    let ray = submit_dir(&api, &dir, &ray_spec).await;
    let cpu_running = running_with_checkpoint(&api, &cpu.id).await;
    let ray_running = running_with_checkpoint(&api, &ray.id).await;
    // The CPU job's node and the Ray worker's node die: the machines go (processes killed, no
    // more heartbeats) and their Node objects are deleted.
    let cpu_node = cpu_running.placements[0].nodes[0].clone();
    let ray_node = ray_running.placements[0].nodes[1].clone();
    let before = [
        checkpoint_steps(&api, &cpu.id).await,
        checkpoint_steps(&api, &ray.id).await,
    ];
    // Someone looks at the output (`tuneplane logs`): it is shipped live, which is all that
    // survives of a log whose machine is gone.
    for id in [&cpu.id, &ray.id] {
        let live: Value = api.get(&format!("/jobs/{id}/logs/live")).await.unwrap();
        assert_eq!(live["up_to_date"], true, "{live}");
    }
    bed.delete_node(&cpu_node).await.unwrap();
    bed.delete_node(&ray_node).await.unwrap();
    for (job, node, before) in [(&cpu, &cpu_node, &before[0]), (&ray, &ray_node, &before[1])] {
        // Requeued within 60 s of the loss.
        requeued_for_a_lost_node(&api, &job.id, 60, &format!("node/{node}: deleted")).await;
        let done = wait_until(&api, &job.id, 300, "terminal", |j| j.state.is_terminal()).await;
        assert_eq!(
            (done.state, done.attempt),
            (JobState::Succeeded, 2),
            "{done:?}"
        );
        assert!(!done.placements[0].nodes.contains(node));
        // Attempt 1's archive: its lost machine's logs as shipped live before the loss, with
        // the API server's answer in the index.
        let one = all_text(&attempt_logs(&api, &job.id, 1).await);
        let two = all_text(&attempt_logs(&api, &job.id, 2).await);
        assert!(one.contains("attempt 1 starts from step 0"), "{one}");
        let resumed = resumed_step(&two, 2);
        assert!(
            resumed >= *before.iter().max().unwrap(),
            "{resumed} {before:?}"
        );
        assert!(two.contains("done at step 160"), "{two}");
        let outputs: Value = api.get(&format!("/jobs/{}/outputs", job.id)).await.unwrap();
        assert!(
            outputs["outputs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o["path"] == "model.json"),
            "{outputs}"
        );
    }

    // A node that stops heart-beating (its agent reports NotReady, then goes silent; its pods'
    // processes go on) and stays so past the reconciler's grace (40 s): the real
    // controller-manager marks it, TunePlane ends the attempt as NodeLost, queues the job again,
    // and attempt 2 resumes elsewhere from the newest checkpoint.
    let env = r#"{STEPS: "100", STEP_SECONDS: "0.5", CHECKPOINT_SECONDS: "5"}"#;
    let silent = submit_dir(
        &api,
        &dir,
        &resume_spec(env, "{infrastructure: 2, application: 0}"),
    )
    .await;
    let running = running_with_checkpoint(&api, &silent.id).await;
    let node = running.placements[0].nodes[0].clone();
    let before = checkpoint_steps(&api, &silent.id).await;
    bed.set_node_ready(&node, false).await.unwrap();
    let went = Instant::now();
    requeued_for_a_lost_node(&api, &silent.id, 120, &format!("node/{node}: Ready=")).await;
    let waited = went.elapsed();
    assert!(
        waited >= Duration::from_secs(35),
        "requeued {waited:?} after the node went silent: before the 40 s grace"
    );
    let done = wait_until(&api, &silent.id, 300, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!(
        (done.state, done.attempt),
        (JobState::Succeeded, 2),
        "{done:?}"
    );
    assert!(!done.placements[0].nodes.contains(&node), "{done:?}");
    let two = all_text(&attempt_logs(&api, &silent.id, 2).await);
    assert!(
        resumed_step(&two, 2) >= *before.iter().max().unwrap(),
        "{two}"
    );
    assert!(two.contains("done at step 100"), "{two}");
    // Back: the agent confirms the old pod's deletion and the node takes jobs again.
    bed.set_node_ready(&node, true).await.unwrap();
}

/// Preemption on the real control plane, pods run by the node agent: team-b borrows the h200
/// series with a 2-node Ray job that saves every 5 s and a 1-node one that never saves; team-a,
/// within its quota, submits a 1-node job, and the 2-node Ray job (the one losing the least) is
/// preempted, resumes and succeeds. Within team-c, at its CPU limit, a priority-10 CPU job takes
/// the place of one of its two priority-0 CPU jobs the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preempted_ray_and_cpu_jobs_save_stop_and_resume_on_the_real_tier() {
    use stack_support::preemption::{
        GRACE_SECONDS, assert_preempted_and_resumed, cpu_quota, cpu_training, h200_quota, job,
        ray_training, running_with_checkpoints, submit, tenant_api,
    };
    if !real_tier_wanted() {
        return;
    }
    let real = RealTier::start(CapsuleDelivery::Presigned, Transport::Https).await;
    let stack = &real.stack;
    capacity_with(&api_client(stack), "h200", 32).await;
    h200_quota(stack, "team-b", 8, true).await;
    h200_quota(stack, "team-a", 16, false).await;
    // team-c's two low-priority CPU jobs (24 cores each) use its whole CPU limit.
    cpu_quota(stack, "team-c", 48.0).await;
    let (a, b, c) = (
        tenant_api(stack, "team-a").await,
        tenant_api(stack, "team-b").await,
        tenant_api(stack, "team-c").await,
    );
    // Long enough that the preemption always comes while the victims still run (at 60 steps
    // the gang once finished before team-a submitted on a slow machine).
    const STEPS: u32 = 150;
    let never = submit(&b, &ray_training(1, STEPS, 100_000)).await;
    wait_until(&b, &never.id, 240, "running", |j| {
        j.state == JobState::Running
    })
    .await;
    let gang = submit(&b, &ray_training(2, STEPS, 5)).await;
    running_with_checkpoints(&b, &gang.id, 2, 240).await;
    let lows = [
        submit(&c, &cpu_training(STEPS, 5, 0)).await,
        submit(&c, &cpu_training(STEPS, 5, 0)).await,
    ];
    for low in &lows {
        running_with_checkpoints(&c, &low.id, 1, 120).await;
    }

    let mine = submit(&a, &ray_training(1, 10, 5)).await;
    let urgent = submit(&c, &cpu_training(10, 5, 10)).await;
    // While the victims save and stop, the preempting jobs say so.
    let shown = wait_until(&a, &mine.id, 60, "waiting for the preempted job", |j| {
        j.state == JobState::Running
            || j.pending
                .as_ref()
                .is_some_and(|p| p.reason == PendingReason::Preempting)
    })
    .await;
    if let Some(p) = &shown.pending {
        assert!(
            p.message
                .contains("of a borrowing tenant is saving and stopping"),
            "{p:?}"
        );
        assert!(!p.message.contains(gang.id.as_str()), "{p:?}");
    }
    wait_until(&a, &mine.id, GRACE_SECONDS + 120, "running", |j| {
        j.state == JobState::Running || j.state.is_terminal()
    })
    .await;
    wait_until(&c, &urgent.id, GRACE_SECONDS + 60, "running", |j| {
        j.state == JobState::Running || j.state.is_terminal()
    })
    .await;

    // The gang (16 GPUs, a checkpoint at most ~5 s old) was the cheaper victim than the job that
    // never saved (8 GPUs since it started).
    assert_eq!(job(&b, &never.id).await.attempt, 1);
    assert_preempted_and_resumed(&b, &gang.id, "preempted by quota reclaim", "team-a", STEPS).await;
    let done = wait_until(&b, &never.id, 300, "terminal", |j| j.state.is_terminal()).await;
    assert_eq!((done.state, done.attempt), (JobState::Succeeded, 1));

    // One of team-c's low-priority jobs made room; the other ran on.
    let mut preempted = Vec::new();
    for low in &lows {
        if job(&c, &low.id).await.attempt > 1 {
            preempted.push(low.id.clone());
        }
    }
    assert_eq!(preempted.len(), 1, "{preempted:?}");
    assert_preempted_and_resumed(
        &c,
        &preempted[0],
        "preempted by a higher-priority job of its own tenant",
        &urgent.id,
        STEPS,
    )
    .await;
    for id in [&mine.id, &urgent.id] {
        let api = if *id == mine.id { &a } else { &c };
        let done = wait_until(api, id, 200, "terminal", |j| j.state.is_terminal()).await;
        assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    }
    real.stack.shutdown().await;
}

/// An array and a pipeline on the real tier: `examples/sweep` (6 CPU children, parallelism 2)
/// runs with never more than 2 children admitted or running at once and every child's log
/// holding its own index; `examples/pipeline/pipeline.yaml`'s steps, submitted in one request,
/// run in order and each reads the outputs of the one before through its grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_array_and_a_pipeline_run_on_the_real_tier() {
    if !real_tier_wanted() {
        return;
    }
    let real = RealTier::start(CapsuleDelivery::Presigned, Transport::Https).await;
    let api = api_client(&real.stack);
    let parent = submit_example(&api, "sweep").await;
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut most = 0;
    let done = loop {
        let page: Value = api.get("/jobs?limit=100&children=true").await.unwrap();
        let holding = page["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["array"]["child"]["parent"] == parent.id.as_str())
            .filter(|j| j["state"] == "ADMITTED" || j["state"] == "RUNNING")
            .count();
        most = most.max(holding);
        let now: tuneplane_core::job::JobRecord =
            api.get(&format!("/jobs/{}", parent.id)).await.unwrap();
        if now.is_terminal() {
            break now;
        }
        assert!(Instant::now() < deadline, "the array did not end: {now:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(done.state, JobState::Succeeded, "{done:?}");
    assert!(most <= 2, "{most} children at once");
    for i in 0..6 {
        let id = tuneplane_core::array::child_id(&parent.id, i);
        let logs = all_text(&archived_logs(&api, &id).await);
        assert!(logs.contains(&format!("child {i} of 6")), "{id}: {logs}");
    }

    let dir = examples().join("pipeline");
    let mut steps = Vec::new();
    for (name, after) in [
        ("prepare", vec![]),
        ("train", vec!["prepare"]),
        ("evaluate", vec!["train"]),
    ] {
        let code = tuneplane::client::pack::pack_quiet(&dir.join(name)).unwrap();
        let spec = std::fs::read_to_string(dir.join(name).join("tuneplane.yaml")).unwrap();
        steps.push(serde_json::json!({
            "name": name, "spec": spec, "after": after,
            "code": {"inline": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, code)},
        }));
    }
    let (status, body): (_, Value) = api
        .post(
            "/pipelines",
            &serde_json::json!({"name": "nightly", "steps": steps}),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(status.as_u16(), 201, "{body}");
    let id_of = |step: &str| {
        body["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step"] == step)
            .and_then(|s| s["job"]["id"].as_str())
            .unwrap()
            .to_owned()
    };
    let (p, t, e) = (id_of("prepare"), id_of("train"), id_of("evaluate"));
    let evaluated = wait_until(&api, &e, 300, "ended", |j| j.is_terminal()).await;
    assert_eq!(evaluated.state, JobState::Succeeded, "{evaluated:?}");
    let prepared: tuneplane_core::job::JobRecord = api.get(&format!("/jobs/{p}")).await.unwrap();
    let trained: tuneplane_core::job::JobRecord = api.get(&format!("/jobs/{t}")).await.unwrap();
    assert!(trained.admitted_at_ms.unwrap() >= prepared.finished_at_ms.unwrap());
    assert!(evaluated.admitted_at_ms.unwrap() >= trained.finished_at_ms.unwrap());
    let logs = all_text(&archived_logs(&api, &e).await);
    assert!(
        logs.contains("evaluate: model mean=5.5, score ok"),
        "{logs}"
    );
    real.stack.shutdown().await;
}
