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
