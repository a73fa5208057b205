//! The plain Pod of a CPU-only custom job (docs/design.md §5): requests equal limits, `restartPolicy:
//! Never`, the fleet's tolerations (it may use free CPU on GPU nodes, within the share the free
//! GPUs keep), pinned to the node admission planned, no accelerator, the run deadline as
//! `activeDeadlineSeconds`, and a bootstrap that verifies the capsule before running it.

use serde_json::{Value, json};

use super::bootstrap::{POD_WORK_DIR, SHA_ENV, URL_ENV, pod_bootstrap_script};
use super::{
    CapsuleRef, GRANT_LABEL, RenderError, RenderSettings, check_capsule, cpu_quantity, harden,
    job_annotations, job_env, job_labels, job_workload_name, memory_quantity, placement_affinity,
    sealed_grant_env, termination_grace_seconds, tolerations,
};
use crate::capacity_compute::ADMITTED_GPUS_ANNOTATION;
use crate::constants::{POOL_LABEL, WORKLOAD_LABEL};
use crate::job::JobRecord;
use crate::spec::WorkloadKind;

/// Name of the Pod's only container.
pub const CONTAINER: &str = "job";

/// Renders the Pod of `job` (a CPU-only job) that downloads `capsule`.
pub fn render_pod(
    job: &JobRecord,
    capsule: &CapsuleRef,
    settings: &RenderSettings,
) -> Result<Value, RenderError> {
    if job.spec.kind() != WorkloadKind::Pod {
        return Err(RenderError::Shape {
            job_id: job.id.clone(),
            message: "a job with GPUs becomes a RayJob, not a Pod".to_owned(),
        });
    }
    check_capsule(job, capsule)?;
    let pool = &job.spec.pools[0];
    let (cpu, mem) = (cpu_quantity(pool.cpus), memory_quantity(pool.memory_gb));
    let mut env = vec![
        json!({"name": URL_ENV, "value": capsule.url}),
        json!({"name": SHA_ENV, "value": capsule.sha256}),
    ];
    env.extend(
        job_env(job)
            .into_iter()
            .map(|(name, value)| json!({"name": name, "value": value})),
    );
    let grant = sealed_grant_env(job, settings);
    let sealed = !grant.is_empty();
    env.extend(grant);
    let mut labels = job_labels(job);
    labels.insert(POOL_LABEL.into(), json!(pool.name));
    labels.insert(WORKLOAD_LABEL.into(), json!("pod"));
    if sealed {
        labels.insert(GRANT_LABEL.into(), json!("sealed"));
    }
    let mut annotations = job_annotations(job);
    annotations[ADMITTED_GPUS_ANNOTATION] = json!("0");
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": job_workload_name(job),
            "namespace": job.spec.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": job.spec.deadlines.run_seconds.max(1),
            "tolerations": tolerations(settings),
            "enableServiceLinks": false,
            "containers": [{
                "name": CONTAINER,
                "image": job.spec.image,
                "command": ["bash", "-c", pod_bootstrap_script(sealed)],
                "env": env,
                "resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}},
                "volumeMounts": [{"name": "work", "mountPath": POD_WORK_DIR}],
            }],
            "volumes": [{"name": "work", "emptyDir": {}}],
        },
    });
    if let Some(affinity) = placement_affinity(job, pool) {
        pod["spec"]["affinity"] = affinity;
    }
    pod["spec"]["terminationGracePeriodSeconds"] = json!(termination_grace_seconds(job));
    harden(&mut pod["spec"]);
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::render::fixtures::*;
    use crate::render::*;

    #[test]
    fn cpu_job_becomes_a_pod_with_requests_equal_to_limits_and_no_accelerator() {
        let pod = render_pod(&cpu_job(), &capsule(), &RenderSettings::default()).unwrap();
        assert_eq!(at(&pod, "/kind"), "Pod");
        assert_eq!(at(&pod, "/spec/restartPolicy"), "Never");
        assert_eq!(at(&pod, "/spec/activeDeadlineSeconds"), 86400);
        let c = at(&pod, "/spec/containers/0");
        assert_eq!(c["resources"]["requests"], c["resources"]["limits"]);
        assert_eq!(
            c["resources"]["limits"],
            json!({"cpu": "2", "memory": "4Gi"})
        );
        assert!(!pod.to_string().contains("nvidia.com/gpu\":\""));
        assert_eq!(at(&pod, "/spec/tolerations/0/key"), "nvidia.com/gpu");
        assert!(
            at(c, "/command/2")
                .as_str()
                .unwrap_or_default()
                .contains("runner.pex")
        );
        assert!(c["env"].to_string().contains("TUNEPLANE_CAPSULE_SHA256"));
        assert!(render_rayjob_json(&cpu_job(), &capsule(), &RenderSettings::default()).is_err());
        assert!(render_pod(&gpu_job(), &capsule(), &RenderSettings::default()).is_err());
    }

    #[test]
    fn a_cpu_pods_grant_is_sealed_in_its_spec_and_never_there_in_plain() {
        let key = crate::grant::GrantKey::parse(&"ab".repeat(32)).unwrap();
        let settings = RenderSettings {
            api_url: Some("https://api.example".into()),
            grant_key: Some(key.clone()),
            ..RenderSettings::default()
        };
        let job = cpu_job();
        let pod = render_pod(&job, &capsule(), &settings).unwrap();
        let token = key.token(&job.id, job.attempt);
        assert!(
            !pod.to_string().contains(&token),
            "the plain grant is in the Pod"
        );
        let env = at(&pod, "/spec/containers/0/env")
            .as_array()
            .unwrap()
            .clone();
        let var = |name: &str| {
            env.iter()
                .find(|e| e["name"] == name)
                .cloned()
                .unwrap_or_default()
        };
        let seal = key.seal_key(&job.spec.namespace, &job.tenant);
        let sealed = var(GRANT_SEALED_ENV)["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(seal.unseal(&job.id, job.attempt, &sealed), Some(token));
        assert_eq!(
            var(GRANT_SEAL_KEY_ENV)["valueFrom"]["secretKeyRef"],
            json!({"name": seal.secret_name(&job.tenant), "key": SEAL_SECRET_KEY})
        );
        assert_eq!(
            var("TUNEPLANE_GRANT"),
            Value::Null,
            "no grant Secret of its own"
        );
        assert_eq!(
            at(
                &pod,
                &format!("/metadata/labels/{}", GRANT_LABEL.replace('/', "~1"))
            ),
            "sealed"
        );
        assert!(
            at(&pod, "/spec/containers/0/command/2")
                .as_str()
                .unwrap_or_default()
                .contains("TUNEPLANE_GRANT=$(")
        );
        let secret = render_seal_secret(&job.spec.namespace, &job.tenant, &seal);
        assert_eq!(secret["metadata"]["name"], seal.secret_name(&job.tenant));
        // Grants off: nothing of it.
        let off = render_pod(&job, &capsule(), &RenderSettings::default()).unwrap();
        assert!(!off.to_string().contains("TUNEPLANE_GRANT"));
        assert!(!off.to_string().contains(GRANT_LABEL));
        // A RayJob keeps its grant Secret (created with its Ray token Secret).
        let rj = render_rayjob_json(&gpu_job(), &capsule(), &settings).unwrap();
        assert!(
            rj.to_string()
                .contains(&grant_secret_name(&job_workload_name(&gpu_job())))
        );
    }
}
