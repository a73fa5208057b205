//! The node agent against a real Kubernetes API server: opt-in with `TUNEPLANE_TEST_KUBECONFIG`
//! (an admin kubeconfig, e.g. `scripts/k8s-up.sh --no-fleet`'s); skipped when it is unset.
//!
//! A tiny fleet of uniquely named nodes is registered; pods bound to one of them directly
//! (`spec.nodeName`) must succeed with the agent's logs readable through the API server, fail
//! to pull a listed image (ImagePullBackOff with a Warning `Failed` event), and disappear when
//! deleted. The kubelet endpoint uses `pki/kubelet.crt` and `pki/kubelet.key` beside the
//! kubeconfig (or `TUNEPLANE_TEST_KUBELET_CERT` / `TUNEPLANE_TEST_KUBELET_KEY`); without them
//! the log check is skipped.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{exit_code, phase, waiting_reason};
use futures_util::FutureExt;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use serde_json::json;
use tuneplane_core::fleet::Fleet;
use tuneplane_kubesim::agent::{self, AgentConfig, AgentHandle, TlsFiles};

mod common;

/// Polls `check` every 200 ms (a real API server) until it returns `Some`, failing after `secs`.
async fn wait_for<T, F, Fut>(secs: u64, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    common::poll_every(Duration::from_millis(200), secs, what, check).await
}

fn kubelet_tls(kubeconfig: &Path) -> Option<TlsFiles> {
    let from_env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let pki = kubeconfig.parent().unwrap_or(Path::new(".")).join("pki");
    let cert = from_env("TUNEPLANE_TEST_KUBELET_CERT").unwrap_or_else(|| pki.join("kubelet.crt"));
    let key = from_env("TUNEPLANE_TEST_KUBELET_KEY").unwrap_or_else(|| pki.join("kubelet.key"));
    (cert.is_file() && key.is_file()).then_some(TlsFiles { cert, key })
}

async fn client(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("use the kubeconfig");
    kube::Client::try_from(config).expect("client")
}

fn pod(name: &str, node: &str, image: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": image}],
        },
    }))
    .expect("pod")
}

/// Creates a pod, retrying while the new namespace's default service account does not exist yet.
async fn create_pod(pods: &Api<Pod>, pod: &Pod) -> Pod {
    wait_for(30, "pod creation", || async {
        match pods.create(&PostParams::default(), pod).await {
            Ok(p) => Some(p),
            Err(e) if e.to_string().contains("serviceaccount") => None,
            Err(e) => panic!("creating pod: {e}"),
        }
    })
    .await
}

async fn exercise(
    client: &kube::Client,
    handle: &AgentHandle,
    ns: &str,
    bad_image: &str,
    logs_expected: bool,
) {
    let names = handle.node_names();
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &names {
        wait_for(30, &format!("node {name} Ready"), || async {
            let n = nodes.get(name).await.ok()?;
            let ready = n
                .status?
                .conditions?
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        })
        .await;
    }
    let node0 = &names[0];
    let n = nodes.get(node0).await.expect("node");
    let status = n.status.unwrap_or_default();
    let addresses = status.addresses.unwrap_or_default();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == "127.0.0.1"),
        "{addresses:?}"
    );
    assert_eq!(
        status
            .daemon_endpoints
            .and_then(|d| d.kubelet_endpoint)
            .map(|e| e.port),
        handle.kubelet_addr().map(|a| i32::from(a.port()))
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // 1. A pod that runs a second and succeeds, with its log readable through the API server.
    let annotations = json!({
        "kubesim.tuneplane.io/run-seconds": "1",
        "kubesim.tuneplane.io/log": "hello from the agent test",
    });
    create_pod(&pods, &pod("ok", node0, "busybox:1.36", annotations)).await;
    let done = wait_for(60, "pod ok Succeeded", || async {
        let p = pods.get("ok").await.ok()?;
        matches!(phase(&p), "Succeeded" | "Failed").then_some(p)
    })
    .await;
    assert_eq!(phase(&done), "Succeeded", "{:?}", done.status);
    let st = done.status.clone().unwrap_or_default();
    assert_eq!(st.host_ip.as_deref(), Some("127.0.0.1"));
    // A simulated pod has no IP: nothing may dial an address that belongs to no namespace.
    assert_eq!(st.pod_ip, None, "{st:?}");
    assert_eq!(exit_code(&done), Some(0), "{:?}", done.status);
    if logs_expected {
        let log = pods
            .logs("ok", &LogParams::default())
            .await
            .expect("logs of pod ok");
        assert!(log.contains(&format!("started on {node0}")), "{log}");
        assert!(log.contains("hello from the agent test"), "{log}");
        assert!(log.contains("exited with code 0"), "{log}");
        let tail = pods
            .logs(
                "ok",
                &LogParams {
                    tail_lines: Some(1),
                    ..LogParams::default()
                },
            )
            .await
            .expect("tail of pod ok");
        assert_eq!(
            tail.trim_end(),
            format!("kubesim agent: container main of {ns}/ok exited with code 0")
        );
    }

    // 2. A listed image fails to pull: ImagePullBackOff and a Warning Failed event.
    let bad = create_pod(&pods, &pod("bad", node0, bad_image, json!({}))).await;
    wait_for(60, "pod bad in ImagePullBackOff", || async {
        let p = pods.get("bad").await.ok()?;
        (waiting_reason(&p).as_deref() == Some("ImagePullBackOff")).then_some(())
    })
    .await;
    let uid = bad.metadata.uid.clone().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let warning = wait_for(30, "Failed event of pod bad", || async {
        let list = events
            .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
            .await
            .ok()?;
        list.items.into_iter().find(|e| {
            e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("Failed")
        })
    })
    .await;
    assert_eq!(
        warning.source.and_then(|s| s.host).as_deref(),
        Some(node0.as_str())
    );
    assert_eq!(
        warning.involved_object.field_path.as_deref(),
        Some("spec.containers{main}")
    );

    // 3. A running pod that is deleted disappears (the agent finishes the graceful deletion).
    create_pod(&pods, &pod("long", &names[1], "busybox:1.36", json!({}))).await;
    wait_for(60, "pod long Running", || async {
        let p = pods.get("long").await.ok()?;
        (phase(&p) == "Running").then_some(())
    })
    .await;
    pods.delete("long", &DeleteParams::default())
        .await
        .expect("deleting pod long");
    wait_for(30, "pod long gone", || async {
        pods.get_opt("long")
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await;

    // 4. Readiness and cordons are the agent's to change.
    let node1 = &names[1];
    let ready_of = |n: Node| {
        n.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status)
    };
    handle
        .set_node_ready(node1, false)
        .await
        .expect("set NotReady");
    let n = nodes.get(node1).await.expect("node");
    assert_eq!(ready_of(n).as_deref(), Some("False"));
    handle.set_node_ready(node1, true).await.expect("set Ready");
    handle.cordon(node1, true).await.expect("cordon");
    let n = nodes.get(node1).await.expect("node");
    assert_eq!(n.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
    assert_eq!(ready_of(n).as_deref(), Some("True"));
    assert!(handle.set_node_ready("no-such-node", true).await.is_err());
}

#[tokio::test]
async fn agent_plays_nodes_of_a_real_cluster() {
    let Some(path) = std::env::var_os("TUNEPLANE_TEST_KUBECONFIG").map(PathBuf::from) else {
        println!("skipped: set TUNEPLANE_TEST_KUBECONFIG to an admin kubeconfig of a real cluster");
        return;
    };
    let client = client(&path).await;
    let suffix = tuneplane_kubesim::json::random_suffix(6);
    let fleet = Fleet::from_yaml(&format!(
        "node_groups:\n- {{name: agent-test-{suffix}, series: agent-test-{suffix}, count: 2, gpus: 1, cpus: 4, memory_gb: 8}}\n"
    ))
    .expect("fleet");
    let tls = kubelet_tls(&path);
    if tls.is_none() {
        println!("no kubelet certificate beside the kubeconfig: the log check is skipped");
    }
    let bad_image = format!("registry.invalid/agent-test:{suffix}");
    let mut config = AgentConfig::new(fleet);
    config.tls = tls.clone();
    config.scenario.start_delay = Duration::from_millis(300);
    config.scenario.image_pull_failures = vec![bad_image.clone()];
    let handle = agent::start(client.clone(), config)
        .await
        .expect("agent start");

    let ns = format!("agent-test-{suffix}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create the test namespace");

    let outcome =
        std::panic::AssertUnwindSafe(exercise(&client, &handle, &ns, &bad_image, tls.is_some()))
            .catch_unwind()
            .await;

    // Clean up whatever happened: the namespace's pods go while the agent still finishes their
    // deletion, then the nodes.
    if let Err(e) = namespaces.delete(&ns, &DeleteParams::default()).await {
        eprintln!("deleting namespace {ns}: {e}");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_for(60, &format!("the pods of namespace {ns} gone"), || async {
        pods.list(&ListParams::default())
            .await
            .ok()
            .and_then(|l| l.items.is_empty().then_some(()))
    })
    .await;
    let deleted = handle.delete_nodes().await;
    let nodes: Api<Node> = Api::all(client.clone());
    for name in handle.node_names() {
        wait_for(30, &format!("node {name} deleted"), || async {
            nodes
                .get_opt(&name)
                .await
                .ok()
                .and_then(|n| n.is_none().then_some(()))
        })
        .await;
    }
    handle.shutdown().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    deleted.expect("deleting the nodes");
}
