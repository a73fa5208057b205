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
    let qos = qos_class(pod);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
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
            let res = c.entry("resources").or_insert(json!({}));
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
