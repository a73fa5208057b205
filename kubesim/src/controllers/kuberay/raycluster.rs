//! The RayCluster part of the simulated KubeRay operator: a head pod and the worker pods of each
//! group (Ray labels, owner reference, the group's template with its nodeSelector and resources,
//! a `ray start` command line), a head Service, failed pods replaced, and the cluster status with
//! `state: ready` once every pod is Running.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::OPERATOR;
use crate::controllers::events::{NORMAL, Recorder};
use crate::json::{self, str_at};
use crate::resources::{PODS, RAYCLUSTERS, SERVICES};
use crate::store::{DeleteOptions, Store};

/// Label naming a pod's RayCluster.
pub const CLUSTER_LABEL: &str = "ray.io/cluster";
/// Label naming a pod's group.
pub const GROUP_LABEL: &str = "ray.io/group";
/// Label `head` / `worker`.
pub const NODE_TYPE_LABEL: &str = "ray.io/node-type";

/// The head Service's ports as KubeRay v1.4 makes them: the named ports of the head's Ray
/// container (`containers[0]`, an unnamed one as `<n>-port`), or KubeRay's defaults when it names
/// none, and `metrics` always.
pub(super) fn head_ports(cluster_spec: &Value) -> Vec<(String, i64)> {
    let declared = cluster_spec
        .pointer("/headGroupSpec/template/spec/containers/0/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut ports: Vec<(String, i64)> = declared
        .iter()
        .filter_map(|p| {
            let port = p.get("containerPort")?.as_i64()?;
            let name = p
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| format!("{port}-port"), str::to_string);
            Some((name, port))
        })
        .collect();
    if ports.is_empty() {
        ports = [
            ("client", 10001),
            ("gcs-server", 6379),
            ("dashboard", 8265),
            ("serve", 8000),
        ]
        .map(|(n, p)| (n.to_string(), p))
        .to_vec();
    }
    if !ports.iter().any(|(n, _)| n == "metrics") {
        ports.push(("metrics".to_string(), 8080));
    }
    ports
}

/// The head Service's port named `name` (KubeRay's dashboard URL uses `dashboard`'s).
pub(super) fn head_port(cluster_spec: &Value, name: &str) -> i64 {
    head_ports(cluster_spec)
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or(8265, |(_, p)| p)
}

fn owner_ref(cluster: &Value) -> Value {
    json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": json::name(cluster), "uid": json::uid(cluster), "controller": true, "blockOwnerDeletion": true})
}

/// Worker pods a group wants: replicas (defaulting to minReplicas) clamped to [min, max], times hosts.
fn desired_workers(group: &Value) -> usize {
    let get = |k: &str| group.get(k).and_then(Value::as_i64);
    if group.get("suspend").and_then(Value::as_bool) == Some(true) {
        return 0;
    }
    let min = get("minReplicas").unwrap_or(0).max(0);
    let max = get("maxReplicas").unwrap_or(i64::from(i32::MAX)).max(min);
    let replicas = get("replicas").unwrap_or(min).clamp(min, max);
    (replicas * get("numOfHosts").unwrap_or(1).max(1)) as usize
}

fn start_command(
    cluster: &str,
    head: bool,
    params: Option<&Map<String, Value>>,
    container: &Value,
) -> String {
    let mut args: Vec<String> = Vec::new();
    let mut has_gpus = false;
    for (k, v) in params.into_iter().flatten() {
        has_gpus |= k == "num-gpus";
        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        args.push(format!("--{k}={v}"));
    }
    let gpus =
        crate::quantity::from_json(container.pointer("/resources/limits/nvidia.com~1gpu")) / 1000;
    if !has_gpus && gpus > 0 {
        args.push(format!("--num-gpus={gpus}"));
    }
    let role = if head {
        "--head --dashboard-host=0.0.0.0 --block".to_string()
    } else {
        format!("--address={cluster}-head-svc:6379 --block")
    };
    format!("ulimit -n 65536; ray start {role} {}", args.join(" "))
        .trim_end()
        .to_string()
}

fn build_pod(cluster: &Value, group: &Value, group_name: &str, head: bool) -> Value {
    let cname = json::name(cluster);
    let template = group.get("template").cloned().unwrap_or_default();
    let mut pod = json!({"metadata": template.get("metadata").cloned().unwrap_or(json!({})), "spec": template.get("spec").cloned().unwrap_or(json!({}))});
    // KubeRay's names: the head pod is `<cluster>-head` (no suffix), workers are generated from
    // `<cluster>-<group>-worker-`; the prefix is cut at 50 characters.
    let prefix = |p: String| p.chars().take(50).collect::<String>().to_lowercase();
    let meta = json::obj_mut(&mut pod, "metadata");
    if head {
        meta.insert(
            "name".into(),
            json!(format!("{}-head", prefix(cname.to_string()))),
        );
    } else {
        // Workers are generated (`generateName`), as KubeRay's worker template does.
        meta.remove("name");
        meta.insert(
            "generateName".into(),
            json!(format!(
                "{}-worker-",
                prefix(format!("{cname}-{group_name}"))
            )),
        );
    }
    meta.remove("namespace");
    meta.insert("ownerReferences".into(), json!([owner_ref(cluster)]));
    let node_type = if head { "head" } else { "worker" };
    let labels = json::obj_mut(&mut pod["metadata"], "labels");
    for (k, v) in [
        (CLUSTER_LABEL, cname.to_string()),
        (NODE_TYPE_LABEL, node_type.to_string()),
        (GROUP_LABEL, group_name.to_string()),
        ("ray.io/identifier", format!("{cname}-{node_type}")),
        ("ray.io/is-ray-node", "yes".to_string()),
        ("app.kubernetes.io/name", "kuberay".to_string()),
        (
            "app.kubernetes.io/created-by",
            "kuberay-operator".to_string(),
        ),
    ] {
        labels.insert(k.into(), json!(v));
    }
    // Group-level Ray labels (`labels` field) go onto the pod too.
    for (k, v) in group
        .get("labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        labels.insert(k.clone(), v.clone());
    }
    if !head {
        let init = wait_gcs_ready(cname, pod.pointer("/spec/containers/0"));
        let spec = json::obj_mut(&mut pod, "spec");
        let list = spec.entry("initContainers").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            list.push(init);
        }
    }
    if let Some(c) = pod.pointer_mut("/spec/containers/0") {
        add_metrics_port(c);
        let params = group
            .get("rayStartParams")
            .and_then(Value::as_object)
            .cloned();
        let command = start_command(cname, head, params.as_ref(), c);
        c["command"] = json!(["/bin/bash", "-c", "--"]);
        c["args"] = json!([command]);
        super::push_env(
            c,
            [
                json!({"name": "RAY_CLUSTER_NAME", "value": cname}),
                json!({"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
                json!({"name": "RAY_NODE_TYPE_NAME", "value": group_name}),
            ],
        );
    }
    pod
}

/// KubeRay's default metrics port, added to the Ray container unless a port named `metrics` exists.
fn add_metrics_port(container: &mut Value) {
    let Some(c) = container.as_object_mut() else {
        return;
    };
    let ports = c.entry("ports").or_insert_with(|| json!([]));
    if let Some(list) = ports.as_array_mut()
        && !list
            .iter()
            .any(|p| p.get("name") == Some(&json!("metrics")))
    {
        list.push(json!({"name": "metrics", "containerPort": 8080}));
    }
}

/// The init container KubeRay appends to every worker: it waits for the head's GCS, with the Ray
/// container's image, env and mounts and fixed small resources.
fn wait_gcs_ready(cluster: &str, ray: Option<&Value>) -> Value {
    let field = |k: &str| ray.and_then(|c| c.get(k)).cloned();
    let mut c = json!({
        "name": "wait-gcs-ready",
        "image": field("image").unwrap_or(json!("rayproject/ray")),
        "command": ["/bin/bash", "-lc", "--"],
        "args": [format!("until ray health-check --address {cluster}-head-svc:6379 > /dev/null 2>&1; do sleep 5; done; echo \"GCS is ready.\"")],
        "resources": {"limits": {"cpu": "200m", "memory": "256Mi"}, "requests": {"cpu": "200m", "memory": "256Mi"}},
    });
    for k in ["imagePullPolicy", "env", "volumeMounts", "securityContext"] {
        if let Some(v) = field(k) {
            c[k] = v;
        }
    }
    c
}

fn phase(p: &Value) -> &str {
    str_at(p, "/status/phase").unwrap_or_default()
}

fn ready(p: &Value) -> bool {
    phase(p) == "Running"
        && p.pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().all(|c| c.get("ready") == Some(&json!(true))))
}

/// Brings one RayCluster's pods and status in line with its spec.
pub fn reconcile(
    store: &Store,
    rec: &mut Recorder,
    cluster: &Value,
    pods: &[Arc<Value>],
) -> Result<(), crate::StatusError> {
    let (ns, cname) = (json::namespace(cluster), json::name(cluster));
    let mine: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| json::namespace(p) == ns && json::label(p, CLUSTER_LABEL) == Some(cname))
        .collect();
    // Ended pods are replaced, as KubeRay deletes and recreates them.
    for p in mine
        .iter()
        .filter(|p| matches!(phase(p), "Succeeded" | "Failed"))
    {
        let _ = store.delete(&PODS, ns, json::name(p), &DeleteOptions::default());
    }
    let live: Vec<&&Arc<Value>> = mine
        .iter()
        .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
        .collect();
    let spec = cluster.get("spec").cloned().unwrap_or_default();
    let head = spec.get("headGroupSpec").cloned().unwrap_or_default();
    let count = |g: &str| {
        live.iter()
            .filter(|p| json::label(p, GROUP_LABEL) == Some(g))
            .count()
    };
    if count("headgroup") == 0 {
        let pod = store.create(&PODS, ns, build_pod(cluster, &head, "headgroup", true))?;
        let message = format!("Created head Pod {ns}/{}", json::name(&pod));
        rec.record(cluster, NORMAL, "CreatedHeadPod", &message, OPERATOR);
    }
    let groups: Vec<Value> = spec
        .get("workerGroupSpecs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut desired_total = 0;
    for g in &groups {
        let gname = str_at(g, "/groupName").unwrap_or("workers");
        let want = desired_workers(g);
        desired_total += want;
        for _ in count(gname)..want {
            let pod = store.create(&PODS, ns, build_pod(cluster, g, gname, false))?;
            let message = format!("Created worker Pod {ns}/{}", json::name(&pod));
            rec.record(cluster, NORMAL, "CreatedWorkerPod", &message, OPERATOR);
        }
    }
    let svc_name = format!("{cname}-head-svc");
    let spec = cluster.get("spec").cloned().unwrap_or_default();
    let ports = head_ports(&spec);
    if store.try_get(&SERVICES, ns, &svc_name).is_none() {
        let service_ports: Vec<Value> = ports
            .iter()
            .map(|(name, port)| json!({"name": name, "port": port}))
            .collect();
        let svc = json!({"metadata": {"name": svc_name, "ownerReferences": [owner_ref(cluster)], "labels": {CLUSTER_LABEL: cname}},
            "spec": {"selector": {CLUSTER_LABEL: cname, NODE_TYPE_LABEL: "head"}, "ports": service_ports}});
        store.create(&SERVICES, ns, svc)?;
        let message = format!("Created service {ns}/{svc_name}");
        rec.record(cluster, NORMAL, "CreatedService", &message, OPERATOR);
    }
    let head_pod = live
        .iter()
        .find(|p| json::label(p, NODE_TYPE_LABEL) == Some("head"));
    let ready_workers = live
        .iter()
        .filter(|p| json::label(p, NODE_TYPE_LABEL) == Some("worker") && ready(p))
        .count();
    let head_ready = head_pod.is_some_and(|p| ready(p));
    let all_ready = head_ready && ready_workers >= desired_total;
    let now = json::now_rfc3339();
    store.update_all(&RAYCLUSTERS, ns, cname, |cur| {
        let mut c = cur.clone();
        let old = c.get("status").cloned().unwrap_or_default();
        let provisioned = all_ready || old.pointer("/conditions/1/status") == Some(&json!("True"));
        let mut status = json!({
            "desiredWorkerReplicas": desired_total,
            "availableWorkerReplicas": ready_workers,
            "readyWorkerReplicas": ready_workers,
            "minWorkerReplicas": groups.iter().map(|g| g.get("minReplicas").and_then(Value::as_i64).unwrap_or(0)).sum::<i64>(),
            "maxWorkerReplicas": groups.iter().map(|g| g.get("maxReplicas").and_then(Value::as_i64).unwrap_or(0)).sum::<i64>(),
            "endpoints": ports.iter().map(|(n, p)| (n.clone(), json!(p.to_string()))).collect::<Map<String, Value>>(),
            "head": {
                "podName": head_pod.map(|p| json::name(p)).unwrap_or_default(),
                "podIP": head_pod.and_then(|p| str_at(p, "/status/podIP")).unwrap_or_default(),
                "serviceName": svc_name,
            },
            "observedGeneration": cur.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "conditions": [
                {"type": "HeadPodReady", "status": if head_ready { "True" } else { "False" }, "reason": if head_ready { "HeadPodRunningAndReady" } else { "HeadPodNotFound" }, "lastTransitionTime": now},
                {"type": "RayClusterProvisioned", "status": if provisioned { "True" } else { "False" }, "reason": if provisioned { "AllPodRunningAndReadyFirstTime" } else { "RayClusterPodsProvisioning" }, "lastTransitionTime": now},
                {"type": "RayClusterSuspended", "status": "False", "reason": "RayClusterSuspended", "lastTransitionTime": now},
                {"type": "RayClusterSuspending", "status": "False", "reason": "RayClusterSuspending", "lastTransitionTime": now},
            ],
        });
        if all_ready {
            status["state"] = json!("ready");
            status["readyTimestamp"] = old.get("readyTimestamp").cloned().unwrap_or(json!(now));
        }
        // Keep transition times stable when nothing else changed, so no-op passes write nothing.
        for i in 0..4 {
            if old.pointer(&format!("/conditions/{i}/status")) == status.pointer(&format!("/conditions/{i}/status"))
                && let Some(t) = old.pointer(&format!("/conditions/{i}/lastTransitionTime"))
            {
                status["conditions"][i]["lastTransitionTime"] = t.clone();
            }
        }
        c["status"] = status;
        Ok(c)
    })?;
    Ok(())
}
