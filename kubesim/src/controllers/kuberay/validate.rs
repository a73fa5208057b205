//! The RayJob checks KubeRay v1.4 applies before acting. A RayJob failing them only gets a Warning
//! Event (`InvalidRayJobMetadata` / `InvalidRayJobSpec`) and keeps an empty status, like the real
//! operator.

use serde_json::Value;

use crate::json::{self, str_at};

/// Longest RayJob name KubeRay accepts.
pub const MAX_RAYJOB_NAME: usize = 47;

/// Checks the RayJob's name.
pub fn metadata(rj: &Value) -> Result<(), String> {
    let name = json::name(rj);
    if name.len() > MAX_RAYJOB_NAME {
        return Err(format!(
            "The RayJob metadata is invalid: RayJob name should be no more than {MAX_RAYJOB_NAME} characters"
        ));
    }
    if !json::is_dns1035_label(name) {
        return Err(format!(
            "The RayJob metadata is invalid: RayJob name should be a valid DNS1035 label: [{name:?} is not a DNS-1035 label]"
        ));
    }
    Ok(())
}

fn group_checks(label: &str, group: &Value) -> Result<(), String> {
    let containers = group
        .pointer("/template/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if containers == 0 {
        return Err(format!("{label} should have at least one container"));
    }
    let params = group.get("rayStartParams").and_then(Value::as_object);
    if params.is_some_and(|p| p.contains_key("labels")) {
        return Err(format!(
            "rayStartParams['labels'] is not supported for {label} group; please use the top-level Labels field instead"
        ));
    }
    let has_param_resources = params.is_some_and(|p| {
        ["num-cpus", "num-gpus", "memory", "resources"]
            .iter()
            .any(|k| {
                p.get(*k)
                    .and_then(Value::as_str)
                    .is_some_and(|v| !v.is_empty())
            })
    });
    let has_resources = group
        .get("resources")
        .and_then(Value::as_object)
        .is_some_and(|r| !r.is_empty());
    if has_param_resources && has_resources {
        return Err(format!(
            "resource fields should not be set in both rayStartParams and Resources for {label} group; please use only one"
        ));
    }
    Ok(())
}

/// Checks the RayJob's spec.
pub fn spec(rj: &Value) -> Result<(), String> {
    let spec = rj.get("spec").cloned().unwrap_or_default();
    let flag = |k: &str| spec.get(k).and_then(Value::as_bool).unwrap_or(false);
    let int = |k: &str| spec.get(k).and_then(Value::as_i64);
    let invalid = |m: &str| Err(format!("The RayJob spec is invalid: {m}"));
    if flag("suspend") && !flag("shutdownAfterJobFinishes") {
        return invalid(
            "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended",
        );
    }
    if int("ttlSecondsAfterFinished").is_some_and(|t| t < 0) {
        return invalid("TTLSecondsAfterFinished must be a non-negative integer");
    }
    let selector_mode = spec
        .get("clusterSelector")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty());
    if flag("suspend") && selector_mode {
        return invalid("the ClusterSelector mode doesn't support the suspend operation");
    }
    let cluster = spec.get("rayClusterSpec").filter(|c| !c.is_null());
    if cluster.is_none() && !selector_mode {
        return invalid("one of RayClusterSpec or ClusterSelector must be set");
    }
    let mode = str_at(&spec, "/submissionMode").unwrap_or("K8sJobMode");
    if !matches!(
        mode,
        "K8sJobMode" | "HTTPMode" | "InteractiveMode" | "SidecarMode"
    ) {
        return invalid(&format!("unknown submissionMode {mode:?}"));
    }
    if mode == "InteractiveMode" && int("backoffLimit").is_some_and(|b| b > 0) {
        return invalid("BackoffLimit is incompatible with InteractiveMode");
    }
    if let Some(cluster) = cluster {
        let head = cluster.get("headGroupSpec").cloned().unwrap_or_default();
        group_checks("headGroupSpec", &head)
            .map_err(|m| format!("The RayJob spec is invalid: {m}"))?;
        let mut names = std::collections::BTreeSet::new();
        for w in cluster
            .get("workerGroupSpecs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            group_checks("workerGroupSpec", w)
                .map_err(|m| format!("The RayJob spec is invalid: {m}"))?;
            let name = str_at(w, "/groupName").unwrap_or_default();
            if !names.insert(name.to_string()) {
                return invalid(&format!(
                    "worker group names must be unique, found duplicate {name:?}"
                ));
            }
        }
    }
    if let Some(env) = str_at(&spec, "/runtimeEnvYAML")
        && yaml_serde::from_str::<Value>(env).is_err()
    {
        return Err(format!("failed to unmarshal RuntimeEnvYAML: {env}"));
    }
    if int("activeDeadlineSeconds").is_some_and(|d| d <= 0) {
        return invalid("activeDeadlineSeconds must be a positive integer");
    }
    if int("backoffLimit").is_some_and(|b| b < 0) {
        return invalid("backoffLimit must be a positive integer");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid() -> Value {
        json!({"metadata": {"name": "tp-abc"}, "spec": {
            "entrypoint": "python x.py", "shutdownAfterJobFinishes": true, "ttlSecondsAfterFinished": 60,
            "runtimeEnvYAML": "working_dir: https://x/y.zip\n",
            "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head", "image": "i"}]}}},
                "workerGroupSpecs": [{"groupName": "main", "replicas": 1, "rayStartParams": {}, "template": {"spec": {"containers": [{"name": "w", "image": "i"}]}}}]}}})
    }

    #[test]
    fn a_rendered_style_rayjob_is_valid() {
        assert_eq!(metadata(&valid()), Ok(()));
        assert_eq!(spec(&valid()), Ok(()));
    }

    #[test]
    fn kuberay_rules_reject_bad_rayjobs() {
        let mut long = valid();
        long["metadata"]["name"] = json!("a".repeat(48));
        assert!(metadata(&long).is_err());
        let mut bad = valid();
        bad["spec"]["activeDeadlineSeconds"] = json!(0);
        assert!(spec(&bad).is_err_and(|m| m.contains("activeDeadlineSeconds")));
        let mut bad = valid();
        bad["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"] =
            json!([]);
        assert!(spec(&bad).is_err_and(|m| m.contains("at least one container")));
        let mut bad = valid();
        bad["spec"]["runtimeEnvYAML"] = json!("a: [unclosed");
        assert!(spec(&bad).is_err());
        let mut bad = valid();
        bad["spec"]
            .as_object_mut()
            .map(|s| s.remove("rayClusterSpec"));
        assert!(spec(&bad).is_err_and(|m| m.contains("RayClusterSpec")));
    }
}
