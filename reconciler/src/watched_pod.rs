//! The Pod the reconciler's reflector keeps: its own type holding only the fields a pass reads,
//! deserialized straight from the watch (every other field of the API's answer is skipped).
//!
//! `k8s_openapi`'s `Pod` lays out every field of the API inline: 2.4 KiB a pod before any
//! value, and 2.3 KiB more per container even when only its name and requests are kept. At
//! 10,000 pods the stripped `Pod`s held ~72 MiB of the reconciler's ~115 MiB heap (heaptrack);
//! this type holds what a pass reads in a fraction of that. A detector that needs a field this
//! type lacks does not compile, rather than reading a field the strip silently dropped.
//!
//! Field names and JSON names are the API's, so code reads `pod.spec`, `pod.status` and
//! `pod.metadata` as on a `Pod`, and a `Pod` read from the API converts with `From`.

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus, ResourceRequirements,
};
use kube::core::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A Pod reduced to what a pass reads (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct WatchedPod {
    /// The pod's metadata (the strip keeps name, namespace, uid, timestamps, the controller
    /// and the labels and annotations a pass reads).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Where it runs and what its containers request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<WatchedPodSpec>,
    /// Phase, reasons, conditions and container statuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WatchedPodStatus>,
}

/// The spec fields a pass reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedPodSpec {
    /// The node it is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Its containers (name and resources).
    #[serde(default)]
    pub containers: Vec<WatchedContainer>,
    /// Its init containers (name and resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<WatchedContainer>>,
}

/// A container's name and resources.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct WatchedContainer {
    /// The container's name (live logs read containers by name).
    #[serde(default)]
    pub name: String,
    /// Its requests and limits (capacity reads cpu, memory and GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// The status fields a pass reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the pod is in this phase (`Evicted`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The kubelet's words about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Its IP (a playground's server is reached there).
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// Its conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    /// Its containers' statuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    /// Its init containers' statuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
}

impl k8s_openapi::Resource for WatchedPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for WatchedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<Container> for WatchedContainer {
    fn from(c: Container) -> WatchedContainer {
        WatchedContainer {
            name: c.name,
            resources: c.resources,
        }
    }
}

impl From<PodSpec> for WatchedPodSpec {
    fn from(s: PodSpec) -> WatchedPodSpec {
        WatchedPodSpec {
            node_name: s.node_name,
            containers: s.containers.into_iter().map(Into::into).collect(),
            init_containers: s
                .init_containers
                .map(|v| v.into_iter().map(Into::into).collect()),
        }
    }
}

impl From<PodStatus> for WatchedPodStatus {
    fn from(s: PodStatus) -> WatchedPodStatus {
        WatchedPodStatus {
            phase: s.phase,
            reason: s.reason,
            message: s.message,
            pod_ip: s.pod_ip,
            conditions: s.conditions,
            container_statuses: s.container_statuses,
            init_container_statuses: s.init_container_statuses,
        }
    }
}

/// A whole Pod (as `Api<Pod>` reads it) reduced to the fields this type has (not stripped).
impl From<Pod> for WatchedPod {
    fn from(p: Pod) -> WatchedPod {
        WatchedPod {
            metadata: p.metadata,
            spec: p.spec.map(Into::into),
            status: p.status.map(Into::into),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch's JSON and a typed `Pod` converted give the same value, and an unknown or
    /// unread field of the API's answer is skipped, not refused.
    #[test]
    fn reads_the_apis_pod_json_as_a_typed_pod_converts() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"nodeName": "n1", "restartPolicy": "Never", "someFutureField": {"x": 1},
                     "initContainers": [{"name": "fetch", "image": "i",
                         "resources": {"requests": {"cpu": "1"}}}],
                     "containers": [{"name": "main", "image": "i", "env": [{"name": "E", "value": "1"}],
                         "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            "status": {"phase": "Running", "podIP": "10.1.0.7", "hostIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "main", "image": "i", "imageID": "x",
                           "ready": true, "restartCount": 1, "state": {"running": {}}}]}
        });
        let watched: WatchedPod = serde_json::from_value(json.clone()).unwrap();
        let typed: Pod = serde_json::from_value(json).unwrap();
        assert_eq!(watched, WatchedPod::from(typed));
        let spec = watched.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers[0].name, "main");
        assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, "fetch");
        let status = watched.status.as_ref().unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("10.1.0.7"));
        assert_eq!(
            status.container_statuses.as_ref().unwrap()[0].restart_count,
            1
        );
        use kube::Resource;
        assert_eq!(WatchedPod::kind(&()), "Pod");
        assert_eq!(WatchedPod::plural(&()), "pods");
    }

    /// Far smaller than the API's `Pod`, the point of the type.
    #[test]
    fn is_a_fraction_of_the_apis_pod() {
        assert!(size_of::<WatchedPod>() * 2 < size_of::<Pod>());
        assert!(size_of::<WatchedContainer>() * 10 < size_of::<Container>());
    }
}
