//! Defaulting on create, as the real API server's strategies do it: a new Pod is `Pending` with
//! defaulted spec fields, custom resources with a status subresource start without status.

use serde_json::{Value, json};

use crate::resources::{self, ResourceType};

/// Fills defaults and resets status of a new object.
pub(super) fn prepare_create(rt: &'static ResourceType, obj: &mut Value) {
    obj["kind"] = Value::String(rt.kind.to_string());
    obj["apiVersion"] = Value::String(rt.api_version());
    if std::ptr::eq(rt, &resources::PODS) {
        default_pod(obj);
    } else if std::ptr::eq(rt, &resources::NAMESPACES) {
        obj["status"] = json!({"phase": "Active"});
        if obj.pointer("/spec/finalizers").is_none() {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
    } else if std::ptr::eq(rt, &resources::JOBS) {
        if let Some(template) = obj.pointer_mut("/spec/template") {
            default_pod_spec(template);
        }
        obj["status"] = json!({});
    } else if rt.status
        && !std::ptr::eq(rt, &resources::NODES)
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
}

fn default_pod(pod: &mut Value) {
    default_pod_spec(pod);
    admit_pod(pod);
    let qos = qos_class(pod);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
}

/// Where the ServiceAccount admission plugin mounts the token volume.
pub const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the API server's default admission plugins add to a new Pod (not to pod templates):
/// `Priority` (priority 0, `PreemptLowerPriority`), `ServiceAccount` (the namespace's `default`
/// account and its projected token volume `kube-api-access-<rand5>`, mounted read-only in every
/// container) and `DefaultTolerationSeconds` (300 s for `not-ready` and `unreachable`).
fn admit_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("priority").or_insert(json!(0));
    spec.entry("preemptionPolicy")
        .or_insert(json!("PreemptLowerPriority"));
    let account = spec
        .get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(account));
    spec.insert("serviceAccount".into(), json!(account));
    let automount = spec.get("automountServiceAccountToken") != Some(&json!(false));
    let mounted = ["initContainers", "containers"].iter().any(|list| {
        spec.get(*list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("volumeMounts")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|m| m.get("mountPath") == Some(&json!(SERVICE_ACCOUNT_MOUNT)))
            })
    });
    if automount && !mounted {
        let volume = format!("kube-api-access-{}", crate::json::random_suffix(5));
        let projected = json!({"name": volume, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}},
        ]}});
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(projected);
        }
        for list in ["initContainers", "containers"] {
            for c in spec
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let Some(c) = c.as_object_mut() else { continue };
                let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
                if let Some(m) = mounts.as_array_mut() {
                    m.push(json!({"name": volume, "readOnly": true, "mountPath": SERVICE_ACCOUNT_MOUNT}));
                }
            }
        }
    }
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let tolerated = list.iter().any(|t| {
                let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
                let op = t
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let k = t.get("key").and_then(Value::as_str).unwrap_or_default();
                (effect.is_empty() || effect == "NoExecute")
                    && (k == key || (k.is_empty() && op == "Exists"))
            });
            if !tolerated {
                list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// Defaults of a pod (or pod template) `spec`.
fn default_pod_spec(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in [
        ("restartPolicy", json!("Always")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
    ] {
        spec.entry(k).or_insert(v);
    }
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers {
            let Some(c) = c.as_object_mut() else { continue };
            c.entry("terminationMessagePath")
                .or_insert(json!("/dev/termination-log"));
            c.entry("terminationMessagePolicy").or_insert(json!("File"));
            c.entry("imagePullPolicy").or_insert(json!("IfNotPresent"));
            for port in c
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(p) = port.as_object_mut() {
                    p.entry("protocol").or_insert(json!("TCP"));
                }
            }
            let res = c.entry("resources").or_insert(json!({}));
            // Quantities are stored in their canonical form (`65536Mi` is `64Gi`).
            crate::quantity::canonicalize_map(res.get_mut("limits"));
            crate::quantity::canonicalize_map(res.get_mut("requests"));
            // Requests default to limits for every resource that has a limit but no request.
            if let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() {
                let requests = crate::json::obj_mut(res, "requests");
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
        }
    }
}

fn qos_class(pod: &Value) -> &'static str {
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        any |= req.is_some_and(|r| !r.is_empty()) || lim.is_some_and(|l| !l.is_empty());
        let full = |m: Option<&serde_json::Map<String, Value>>| {
            m.is_some_and(|m| m.contains_key("cpu") && m.contains_key("memory"))
        };
        guaranteed &= full(lim)
            && req.is_none_or(|r| lim.is_some_and(|l| r.iter().all(|(k, v)| l.get(k) == Some(v))));
    }
    if guaranteed {
        "Guaranteed"
    } else if any {
        "Burstable"
    } else {
        "BestEffort"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_pod_is_pending_with_requests_defaulted_from_limits() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}}}]}});
        prepare_create(&resources::PODS, &mut pod);
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["qosClass"], "Guaranteed");
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"],
            "2"
        );
    }

    #[test]
    fn custom_resource_status_is_dropped_on_create() {
        let mut rj = json!({"spec": {}, "status": {"jobStatus": "SUCCEEDED"}});
        prepare_create(&resources::RAYJOBS, &mut rj);
        assert!(rj.get("status").is_none());
        assert_eq!(rj["apiVersion"], "ray.io/v1");
    }
}
