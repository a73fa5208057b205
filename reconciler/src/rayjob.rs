//! The KubeRay `RayJob` (`ray.io/v1`) as the reconciler creates and watches it: core's typed
//! [`RayJobSpec`] (the very spec `render_rayjob` returns and `tuneplane render` prints, with
//! flattened catch-alls) and the status fields the reconciler reads.

use kube::core::{ApiResource, GroupVersionKind, Object, ObjectMeta};
use serde::{Deserialize, Serialize};
pub use tuneplane_core::render::kuberay::RayJobSpec;
use tuneplane_core::render::kuberay::{self, RenderedMeta};

/// The RayJob status fields the reconciler reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJobStatus {
    /// Ray's job status (`PENDING`, `RUNNING`, `SUCCEEDED`, `FAILED`, `STOPPED`).
    #[serde(default)]
    pub job_status: Option<String>,
    /// KubeRay's view (`Initializing`, `Running`, `Complete`, `Failed`, ...).
    #[serde(default)]
    pub job_deployment_status: Option<String>,
    /// Name of the RayCluster.
    #[serde(default)]
    pub ray_cluster_name: Option<String>,
    /// Failure reason (`DeadlineExceeded`, `AppFailed`, ...).
    #[serde(default)]
    pub reason: Option<String>,
    /// KubeRay's message with the reason.
    #[serde(default)]
    pub message: Option<String>,
}

/// The RayJob: core's spec, the status the reconciler reads.
pub type RayJob = Object<RayJobSpec, RayJobStatus>;

/// The `ray.io/v1` `RayJob` API resource.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", kuberay::KIND),
        "rayjobs",
    )
}

/// The object to create for core's rendered RayJob: its spec moved over whole, its metadata field
/// by field (the destructuring is exhaustive, so a field added to core's metadata does not
/// compile until it is carried here).
pub fn from_rendered(rendered: kuberay::RayJob) -> RayJob {
    let kuberay::RayJob {
        api_version: _,
        kind: _,
        metadata,
        spec,
    } = rendered;
    let RenderedMeta {
        name,
        namespace,
        labels,
        annotations,
    } = metadata;
    let mut object = RayJob::new(&name, &resource(), spec);
    object.metadata = ObjectMeta {
        name: Some(name),
        namespace: Some(namespace),
        labels: Some(labels),
        annotations: Some(annotations),
        ..ObjectMeta::default()
    };
    object
}

#[cfg(test)]
mod round_trip {
    use super::*;
    use tuneplane_core::render::{CapsuleRef, RenderSettings, render_rayjob};

    /// What core renders reaches the API server whole: the object the reconciler sends is the
    /// rendered one, field for field, including a field the renderer sets that no type names.
    #[test]
    fn every_rendered_field_reaches_the_object_the_reconciler_sends() {
        let text = "name: t\nimage: rayproject/ray:2.60.0\nentrypoint: python train.py\npools: [{name: main, series: h200, nodes: 2, gpus_per_node: 8}]\n";
        let spec = tuneplane_core::spec::validate(text, None, &Default::default())
            .expect("spec")
            .spec;
        let sha = "ab".repeat(32);
        let job = tuneplane_core::job::JobRecord::new_queued(
            "j-1".parse().unwrap(),
            "acme".parse().unwrap(),
            spec,
            &sha,
            1,
        );
        let capsule = CapsuleRef {
            sha256: sha.clone(),
            url: "http://127.0.0.1:9/c.zip".into(),
        };
        let mut rendered =
            render_rayjob(&job, &capsule, &RenderSettings::default()).expect("render");
        // A field core might render before it is typed anywhere, at two levels.
        let future = serde_json::json!({"on": true});
        rendered
            .spec
            .extra
            .insert("someFutureField".into(), future.clone());
        if let Some(cluster) = rendered.spec.ray_cluster_spec.as_mut() {
            cluster
                .extra
                .insert("enableInTreeAutoscaling".into(), false.into());
        }
        let printed = rendered.to_json();
        let sent = serde_json::to_value(from_rendered(rendered)).expect("json");
        assert_eq!(sent, printed, "what render prints is what create sends");
        assert_eq!(sent["spec"]["someFutureField"], future);
        assert_eq!(
            sent["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"],
            serde_json::json!(false)
        );
        assert_eq!(sent["apiVersion"], "ray.io/v1");
        assert_eq!(sent["metadata"]["labels"]["tuneplane.io/job-id"], "j-1");
        // Read back (as the reflector reads a stored RayJob), nothing is dropped either.
        let read: RayJob = serde_json::from_value(sent.clone()).expect("typed");
        assert_eq!(serde_json::to_value(&read).expect("json"), sent);
    }
}
