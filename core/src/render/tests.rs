//! Unit tests of every renderer, and validation of rendered RayJobs against the KubeRay v1.4 CRD
//! schema (folder from `TUNEPLANE_KUBERAY_SCHEMAS`, which the test command sets).

use serde_json::{Value, json};

use super::*;
use crate::capacity_compute::ADMITTED_GPUS_ANNOTATION;
use crate::spec::JobSpec;
use crate::store::PlaygroundRecord;

const SHA: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

fn job(pools: Value) -> JobRecord {
    let spec: JobSpec = serde_json::from_value(json!({
        "name": "llama-sft", "plugin": "custom/custom", "image": "ghcr.io/acme/train:1.2",
        "entrypoint": "python train.py", "env": {"WANDB_MODE": "offline"}, "pools": pools,
        "deadlines": {"pre_running_seconds": 1800, "run_seconds": 86400}, "priority": 0,
        "labels": {"team": "nlp"}, "namespace": "tuneplane-jobs", "platform_version": "0.1.0"
    }))
    .expect("spec");
    JobRecord::new_queued("j-01abc", "acme", spec, SHA, 1)
}

fn gpu_job() -> JobRecord {
    job(json!([
        {"name": "main", "series": "h200", "nodes": 2, "gpus_per_node": 8, "cpus": 96.0, "memory_gb": 1024.0},
        {"name": "eval", "series": "l40s", "nodes": 1, "gpus_per_node": 4, "cpus": 16.5, "memory_gb": 64.0}
    ]))
}

fn cpu_job() -> JobRecord {
    job(
        json!([{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0, "cpus": 2.0, "memory_gb": 4.0}]),
    )
}

fn capsule() -> CapsuleRef {
    CapsuleRef {
        sha256: SHA.into(),
        url: format!(
            "https://bucket.s3.amazonaws.com/capsules/sha256/{SHA}/capsule.zip?X-Amz-Signature=abc"
        ),
    }
}

fn at<'a>(v: &'a Value, ptr: &str) -> &'a Value {
    v.pointer(ptr).unwrap_or(&Value::Null)
}

#[test]
fn rayjob_head_is_machine_zero_of_the_primary_pool_with_a_worker_group_per_pool() {
    let rj = render_rayjob(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
    assert_eq!(at(&rj, "/metadata/name"), "tp-j-01abc");
    assert_eq!(at(&rj, "/metadata/labels/tuneplane.io~1job-id"), "j-01abc");
    assert_eq!(
        at(&rj, "/metadata/labels/app.kubernetes.io~1managed-by"),
        "tuneplane"
    );
    assert_eq!(at(&rj, "/metadata/labels/team"), "nlp");
    let spec = at(&rj, "/spec");
    assert_eq!(spec["entrypoint"], "python .tuneplane/runner.pex");
    assert_eq!(
        (
            spec["shutdownAfterJobFinishes"].clone(),
            spec["backoffLimit"].clone()
        ),
        (json!(true), json!(0))
    );
    assert_eq!(spec["activeDeadlineSeconds"], 86400);
    assert_eq!(spec["submissionMode"], "K8sJobMode");
    assert_eq!(spec["submitterConfig"]["backoffLimit"], 0);
    assert!(spec["ttlSecondsAfterFinished"].as_u64().unwrap_or(0) > 0);

    let head = at(spec, "/rayClusterSpec/headGroupSpec");
    assert_eq!(
        at(head, "/template/spec/nodeSelector/tuneplane~1gpu-series"),
        "h200"
    );
    assert_eq!(
        at(
            head,
            "/template/spec/containers/0/resources/limits/nvidia.com~1gpu"
        ),
        "8"
    );
    assert_eq!(at(head, "/rayStartParams/num-gpus"), "8");
    assert_eq!(
        at(head, "/rayStartParams/resources"),
        "'{\"tuneplane.pool.main\": 1}'"
    );
    let ports = at(head, "/template/spec/containers/0/ports").to_string();
    assert!(ports.contains("\"dashboard\"") && ports.contains("8265"));

    let workers = at(spec, "/rayClusterSpec/workerGroupSpecs")
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(workers.len(), 2);
    assert_eq!(
        (
            workers[0]["groupName"].clone(),
            workers[0]["replicas"].clone()
        ),
        (json!("main"), json!(1))
    );
    assert_eq!(
        (
            workers[1]["groupName"].clone(),
            workers[1]["replicas"].clone()
        ),
        (json!("eval"), json!(1))
    );
    assert_eq!(
        at(
            &workers[1],
            "/template/spec/nodeSelector/tuneplane~1gpu-series"
        ),
        "l40s"
    );
    assert_eq!(
        at(
            &workers[1],
            "/template/spec/containers/0/resources/requests/cpu"
        ),
        "16500m"
    );
    assert_eq!(
        at(&workers[1], "/rayStartParams/resources"),
        "'{\"tuneplane.pool.eval\": 1}'"
    );
    assert_eq!(
        at(&workers[1], "/template/metadata/annotations").get(ADMITTED_GPUS_ANNOTATION),
        Some(&json!("4"))
    );

    let env: Value = yaml_serde::from_str(spec["runtimeEnvYAML"].as_str().unwrap_or_default())
        .unwrap_or_default();
    assert_eq!(env["working_dir"], json!(capsule().url));
    assert_eq!(env["env_vars"]["WANDB_MODE"], "offline");
    assert_eq!(env["env_vars"]["TUNEPLANE_JOB_ID"], "j-01abc");
}

#[test]
fn without_gpu_passthrough_pods_request_no_gpus_but_ray_keeps_num_gpus() {
    let settings = RenderSettings {
        gpu_passthrough: false,
        ..RenderSettings::default()
    };
    let rj = render_rayjob(&gpu_job(), &capsule(), &settings).unwrap();
    assert!(
        !rj.to_string().contains("nvidia.com/gpu\":\""),
        "no GPU quantity anywhere"
    );
    assert_eq!(
        at(
            &rj,
            "/spec/rayClusterSpec/headGroupSpec/rayStartParams/num-gpus"
        ),
        "8"
    );
    let head = at(&rj, "/spec/rayClusterSpec/headGroupSpec/template");
    assert_eq!(
        at(head, "/metadata/annotations").get(ADMITTED_GPUS_ANNOTATION),
        Some(&json!("8"))
    );
}

#[test]
fn init_container_delivery_fetches_into_a_shared_volume_and_uses_a_three_slash_file_url() {
    let settings = RenderSettings {
        delivery: CapsuleDelivery::InitContainer,
        ..RenderSettings::default()
    };
    let rj = render_rayjob(&gpu_job(), &capsule(), &settings).unwrap();
    let env: Value =
        yaml_serde::from_str(at(&rj, "/spec/runtimeEnvYAML").as_str().unwrap_or_default())
            .unwrap_or_default();
    assert_eq!(
        env["working_dir"],
        json!(format!("file:///tuneplane/capsule/{SHA}/capsule.zip"))
    );
    for group in [
        "/spec/rayClusterSpec/headGroupSpec",
        "/spec/rayClusterSpec/workerGroupSpecs/1",
    ] {
        let t = at(&rj, group);
        assert_eq!(
            at(t, "/template/spec/initContainers/0/name"),
            "fetch-capsule",
            "{group}"
        );
        assert_eq!(at(t, "/template/spec/volumes/0/emptyDir"), &json!({}));
        assert_eq!(
            at(t, "/template/spec/containers/0/volumeMounts/0/mountPath"),
            "/tuneplane/capsule"
        );
    }
}

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
    assert!(render_rayjob(&cpu_job(), &capsule(), &RenderSettings::default()).is_err());
    assert!(render_pod(&gpu_job(), &capsule(), &RenderSettings::default()).is_err());
}

#[test]
fn capsule_url_must_end_in_zip_and_names_are_dns_1035() {
    let bad = CapsuleRef {
        url: "https://x/capsule.tar?sig=.zip".into(),
        ..capsule()
    };
    assert!(matches!(
        render_rayjob(&gpu_job(), &bad, &RenderSettings::default()),
        Err(RenderError::Capsule { .. })
    ));
    let long = workload_name(&"A_very_Long_ID".repeat(5));
    assert!(long.len() <= MAX_WORKLOAD_NAME && long.starts_with("tp-"));
    assert_eq!(
        long,
        workload_name(&"A_very_Long_ID".repeat(5)),
        "deterministic"
    );
    assert_eq!(cpu_quantity(0.25), "250m");
    assert_eq!(memory_quantity(1.5), "1536Mi");
}

/// A one-GPU l40s playground of an hour, created at 0.
fn playground() -> PlaygroundRecord {
    PlaygroundRecord {
        id: "PG_1".into(),
        tenant: "acme".into(),
        model: "Qwen/Qwen3-0.6B".into(),
        series: "l40s".into(),
        gpus: 1,
        pod_name: None,
        created_at_ms: 0,
        expires_at_ms: 3_600_000,
        version: 0,
        pod_namespace: None,
        status: None,
    }
}

#[test]
fn playground_is_a_vllm_pod_on_its_series_reached_through_the_api_proxy() {
    let pg = playground();
    let pod = render_playground(&pg, "tuneplane-jobs", &RenderSettings::default());
    assert_eq!(at(&pod, "/metadata/name"), "pg-1");
    assert_eq!(at(&pod, "/spec/nodeSelector/tuneplane~1gpu-series"), "l40s");
    assert_eq!(
        at(&pod, "/spec/containers/0/resources/limits/nvidia.com~1gpu"),
        "1"
    );
    assert_eq!(at(&pod, "/spec/containers/0/resources/requests/cpu"), "4");
    assert_eq!(
        at(&pod, "/spec/containers/0/resources/requests/memory"),
        "32Gi"
    );
    assert_eq!(at(&pod, "/spec/containers/0/ports/0/name"), "http");
    assert_eq!(at(&pod, "/spec/activeDeadlineSeconds"), 3600);
    assert_eq!(
        playground::proxy_path("ns", "pg-1"),
        "/api/v1/namespaces/ns/pods/pg-1:8000/proxy/"
    );
    // A record of an older version keeps the pod name it recorded.
    let old = PlaygroundRecord {
        pod_name: Some("pg-pg-1".into()),
        ..pg
    };
    let pod = render_playground(&old, "tuneplane-jobs", &RenderSettings::default());
    assert_eq!(at(&pod, "/metadata/name"), "pg-pg-1");
}

#[test]
fn playground_pod_names_carry_the_prefix_once() {
    use playground::{legacy_playground_name, playground_name};
    // Ids as the API makes them (`pg-` + 20 hex): the pod is named like the id.
    assert_eq!(
        playground_name("pg-0123456789abcdef0123"),
        "pg-0123456789abcdef0123"
    );
    assert_eq!(
        legacy_playground_name("pg-0123456789abcdef0123"),
        "pg-pg-0123456789abcdef0123"
    );
    // Ids without the prefix get it; odd characters become dashes; no trailing dash.
    assert_eq!(playground_name("pg1"), "pg-pg1");
    assert_eq!(playground_name("My_Playground--"), "pg-my-playground");
    assert_eq!(playground_name("pg-"), "pg-pg");
    let long = playground_name(&format!("pg-{}", "a".repeat(100)));
    assert!(long.len() <= 63 && long.starts_with("pg-a"), "{long}");
    assert!(!long.starts_with("pg-pg-"));
}

fn rayjob_schema() -> Value {
    let dir = std::env::var("TUNEPLANE_KUBERAY_SCHEMAS").unwrap_or_else(|_| {
        panic!("TUNEPLANE_KUBERAY_SCHEMAS is not set: point it at the KubeRay v1.4 CRD folder (scripts/test.sh does)")
    });
    let path = std::path::Path::new(&dir).join("ray.io_rayjobs.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let crd: Value = yaml_serde::from_str(&text).expect("CRD");
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let v1 = versions
        .into_iter()
        .find(|v| v["name"] == "v1")
        .unwrap_or_else(|| panic!("no v1 in CRD"));
    v1.pointer("/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| panic!("no schema"))
}

/// The render settings that change what is rendered: the defaults, no GPU passthrough, and the
/// capsule delivered by an init container.
fn settings_variants() -> [RenderSettings; 3] {
    [
        RenderSettings::default(),
        RenderSettings {
            gpu_passthrough: false,
            ..RenderSettings::default()
        },
        RenderSettings {
            delivery: CapsuleDelivery::InitContainer,
            ..RenderSettings::default()
        },
    ]
}

#[test]
fn every_rendered_rayjob_validates_against_the_kuberay_crd_schema() {
    let validator = jsonschema::validator_for(&rayjob_schema()).expect("schema");
    let variants = settings_variants();
    let single = job(
        json!([{"name": "main", "series": "h200", "nodes": 1, "gpus_per_node": 8, "cpus": 8.0, "memory_gb": 64.0}]),
    );
    for settings in &variants {
        for j in [gpu_job(), single.clone(), placed(gpu_job())] {
            let rj = render_rayjob(&j, &capsule(), settings).unwrap();
            let errors: Vec<String> = validator
                .iter_errors(&rj)
                .map(|e| format!("{} at {}", e, e.instance_path))
                .collect();
            assert!(errors.is_empty(), "{settings:?}: {errors:#?}");
        }
    }
    // The validator is not vacuous: a wrong type is refused.
    let mut broken = render_rayjob(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
    broken["spec"]["backoffLimit"] = json!("zero");
    assert!(!validator.is_valid(&broken));
}

/// `job` as admission leaves it: every pool with its planned nodes.
fn placed(mut job: JobRecord) -> JobRecord {
    job.placements = job
        .spec
        .pools
        .iter()
        .map(|p| crate::admission::PoolPlacement {
            pool: p.name.clone(),
            nodes: (0..p.nodes).map(|k| format!("{}-{k}", p.name)).collect(),
        })
        .collect();
    job
}

#[test]
fn every_group_is_pinned_to_its_planned_nodes_one_pod_per_node() {
    let rj = render_rayjob(&placed(gpu_job()), &capsule(), &RenderSettings::default()).unwrap();
    let terms = "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0";
    let head = at(&rj, "/spec/rayClusterSpec/headGroupSpec/template/spec");
    let main = at(&rj, "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec");
    let eval = at(&rj, "/spec/rayClusterSpec/workerGroupSpecs/1/template/spec");
    for spec in [head, main] {
        assert_eq!(at(spec, &format!("{terms}/key")), HOSTNAME_LABEL);
        assert_eq!(at(spec, &format!("{terms}/operator")), "In");
        assert_eq!(
            at(spec, &format!("{terms}/values")),
            &json!(["main-0", "main-1"])
        );
        // The head and the main workers share the pool's nodes, one pod on each.
        let anti = at(
            spec,
            "/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/0",
        );
        assert_eq!(at(anti, "/topologyKey"), HOSTNAME_LABEL);
        assert_eq!(
            at(anti, "/labelSelector/matchLabels"),
            &json!({"tuneplane.io/job-id": "j-01abc", "tuneplane.io/pool": "main"})
        );
    }
    assert_eq!(at(eval, &format!("{terms}/values")), &json!(["eval-0"]));
    assert!(
        at(eval, "/affinity/podAntiAffinity").is_null(),
        "a one-machine pool needs no anti-affinity"
    );
    // Without a plan (rendered before admission) nothing is pinned.
    let unplanned = render_rayjob(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
    assert!(
        at(
            &unplanned,
            "/spec/rayClusterSpec/headGroupSpec/template/spec/affinity"
        )
        .is_null()
    );

    let pod = render_pod(&placed(cpu_job()), &capsule(), &RenderSettings::default()).unwrap();
    assert_eq!(
        at(&pod, &format!("/spec{terms}/values")),
        &json!(["main-0"])
    );
}

/// `value` read into the typed Kubernetes object `T` and written back to JSON is `value` again:
/// a misspelt or misplaced key inside `json!` (which the typed object drops) fails here.
fn assert_round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(
    what: &str,
    value: &Value,
) {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{what} does not read as its Kubernetes type: {e}"));
    let back = serde_json::to_value(&typed).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        &back, value,
        "{what} lost or changed fields in a round trip"
    );
}

#[test]
fn every_rendered_pod_round_trips_through_the_kubernetes_types() {
    use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
    let variants = settings_variants();
    let pg = playground();
    let mut checked = 0;
    for settings in &variants {
        for j in [cpu_job(), placed(cpu_job())] {
            let pod = render_pod(&j, &capsule(), settings).unwrap();
            assert_round_trips::<Pod>("a job pod", &pod);
            checked += 1;
        }
        let pod = render_playground(&pg, "tuneplane-jobs", settings);
        assert_round_trips::<Pod>("a playground pod", &pod);
        checked += 1;
        // The pods of a RayJob: its head and worker group templates.
        for j in [gpu_job(), placed(gpu_job())] {
            let rj = render_rayjob(&j, &capsule(), settings).unwrap();
            let cluster = &rj["spec"]["rayClusterSpec"];
            let mut templates = vec![&cluster["headGroupSpec"]["template"]];
            let workers = cluster["workerGroupSpecs"].as_array().map(Vec::as_slice);
            templates.extend(workers.unwrap_or_default().iter().map(|w| &w["template"]));
            for template in templates {
                assert!(template.is_object(), "{rj}");
                assert_round_trips::<PodTemplateSpec>("a RayJob pod template", template);
                checked += 1;
            }
        }
    }
    assert!(checked >= 15, "{checked} pods checked");
    // The check is not vacuous: a misspelt key is caught.
    let mut misspelt = render_pod(&cpu_job(), &capsule(), &RenderSettings::default()).unwrap();
    misspelt["spec"]["restartPolicyy"] = json!("Never");
    let typed: Pod = serde_json::from_value(misspelt.clone()).unwrap();
    assert_ne!(serde_json::to_value(&typed).ok(), Some(misspelt));
}
