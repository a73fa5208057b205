//! The submitter Job KubeRay creates in K8sJobMode: named like the RayJob, owned by it, running
//! `ray job submit ... -- <entrypoint>` (from `submitterPodTemplate` when given). In the simulation its
//! pod carries how long the driver runs and how it ends; in execution mode it carries the entrypoint.

use serde_json::{Value, json};

use crate::config::{Scenario, annotations};
use crate::exec::{RAYJOB_ENTRYPOINT, RAYJOB_RUNTIME_ENV, RAYJOB_UID};
use crate::json::{self, str_at};

/// The submitter Job of a RayJob whose cluster is `cluster`.
pub(super) fn job(rj: &Value, cluster: &Value, scenario: &Scenario, exec: bool) -> Value {
    let (name, uid) = (json::name(rj), json::uid(rj));
    let ns = json::namespace(rj);
    let job_id = str_at(rj, "/status/jobId").unwrap_or(name);
    let entrypoint = str_at(rj, "/spec/entrypoint").unwrap_or_default();
    let port =
        super::raycluster::head_port(cluster.get("spec").unwrap_or(&Value::Null), "dashboard");
    let address = format!(
        "http://{}-head-svc.{ns}.svc.cluster.local:{port}",
        json::name(cluster)
    );
    let image = cluster
        .pointer("/spec/headGroupSpec/template/spec/containers/0/image")
        .and_then(Value::as_str)
        .unwrap_or("rayproject/ray");
    let submit = format!(
        "if ! ray job status --address {address} {job_id} >/dev/null 2>&1 ; then ray job submit --address {address} --no-wait --submission-id {job_id} -- {entrypoint} ; fi ; ray job logs --address {address} --follow {job_id}"
    );
    let mut template = rj.pointer("/spec/submitterPodTemplate").cloned().unwrap_or_else(|| {
        json!({"spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "ray-job-submitter",
                "image": image,
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}},
            }],
        }})
    });
    if let Some(c) = template.pointer_mut("/spec/containers/0") {
        if c.get("command").is_none() {
            c["command"] = json!(["/bin/bash", "-ce", "--"]);
            c["args"] = json!([submit]);
        }
        super::push_env(
            c,
            [
                json!({"name": "RAY_DASHBOARD_ADDRESS", "value": address}),
                json!({"name": "RAY_JOB_SUBMISSION_ID", "value": job_id}),
            ],
        );
    }
    let mut a = serde_json::Map::new();
    if exec {
        a.insert(RAYJOB_ENTRYPOINT.into(), json!(entrypoint));
        a.insert(RAYJOB_UID.into(), json!(uid));
        a.insert(
            RAYJOB_RUNTIME_ENV.into(),
            json!(str_at(rj, "/spec/runtimeEnvYAML").unwrap_or_default()),
        );
    } else {
        let run = json::annotation(rj, annotations::RUN_SECONDS).map_or_else(
            || scenario.rayjob_run.as_secs_f64().to_string(),
            str::to_string,
        );
        let code = json::annotation(rj, annotations::EXIT_CODE).map_or_else(
            || {
                if scenario.rayjob_fails {
                    "1".into()
                } else {
                    "0".into()
                }
            },
            str::to_string,
        );
        let log = json::annotation(rj, annotations::LOG).map_or_else(
            || format!("kubesim: simulated Ray job {job_id} running: {entrypoint}"),
            str::to_string,
        );
        a.insert(annotations::RUN_SECONDS.into(), json!(run));
        a.insert(annotations::EXIT_CODE.into(), json!(code));
        a.insert(annotations::LOG.into(), json!(log));
    }
    let meta = json::obj_mut(&mut template, "metadata");
    let notes = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(existing) = notes.as_object_mut() {
        existing.extend(a);
    }
    let backoff = rj
        .pointer("/spec/submitterConfig/backoffLimit")
        .cloned()
        .unwrap_or(json!(2));
    json!({
        "metadata": {
            "name": name,
            "labels": {
                "ray.io/originated-from-crd": "RayJob",
                "ray.io/originated-from-cr-name": name,
                "app.kubernetes.io/created-by": "kuberay-operator",
            },
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"backoffLimit": backoff, "template": template},
    })
}
