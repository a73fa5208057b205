//! Computing the [`CapacitySnapshot`] from what the cluster shows: Nodes and Pods, reduced to the
//! few fields capacity needs ([`NodeInfo`], [`PodInfo`]).
//!
//! The reconciler converts its reflector stores into these plain structs at the edge and calls
//! [`compute_capacity`]; the result is both what it publishes for `GET /v1/capacity` and what
//! admission plans against, so the two can never disagree.
//!
//! GPUs in use on a node are the sum over its non-terminal pods of the larger of the pod's
//! `nvidia.com/gpu` requests and the GPUs TunePlane admitted it for (the
//! [`ADMITTED_GPUS_ANNOTATION`]). With `TUNEPLANE_K8S_GPU_PASSTHROUGH=0` TunePlane's pods request no
//! GPUs, so counting only requests would double-book; the annotation keeps them counted.

use crate::capacity::{CapacitySnapshot, GpuShare, Holder, NodeCapacity};
use crate::ids::JobId;

/// Pod annotation carrying the GPUs TunePlane admitted the pod for (whatever it requests).
pub const ADMITTED_GPUS_ANNOTATION: &str = "tuneplane.io/admitted-gpus";

/// What capacity needs to know about one Node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Value of the `tuneplane/gpu-series` label.
    pub series: Option<String>,
    /// `status.capacity["nvidia.com/gpu"]`.
    pub gpus_capacity: u32,
    /// `status.allocatable["nvidia.com/gpu"]` (falls back to capacity when absent).
    pub gpus_allocatable: Option<u32>,
    /// Allocatable CPU cores.
    pub cpus: f64,
    /// Allocatable memory, GiB.
    pub memory_gb: f64,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// Ready condition is True.
    pub ready: bool,
}

/// What capacity needs to know about one Pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodInfo {
    /// `spec.nodeName`; unbound pods use nothing yet.
    pub node_name: Option<String>,
    /// Phase is `Succeeded` or `Failed` (or the pod is being deleted and has stopped).
    pub terminal: bool,
    /// Sum of the containers' `nvidia.com/gpu` requests (limits when no request), max with init containers.
    pub gpus_requested: u32,
    /// GPUs TunePlane admitted the pod for ([`ADMITTED_GPUS_ANNOTATION`]).
    pub gpus_admitted: Option<u32>,
    /// CPU cores requested.
    pub cpus: f64,
    /// Memory requested, GiB.
    pub memory_gb: f64,
    /// The TunePlane job the pod belongs to (its job-id label), if any.
    pub job_id: Option<String>,
}

impl PodInfo {
    /// GPUs this pod holds on its node.
    pub fn gpus_held(&self) -> u32 {
        self.gpus_requested.max(self.gpus_admitted.unwrap_or(0))
    }
}

/// The snapshot of `nodes` with the usage of `pods`, taken at `taken_at_ms`, with the default
/// [`GpuShare`].
pub fn compute_capacity(
    taken_at_ms: u64,
    nodes: &[NodeInfo],
    pods: &[PodInfo],
) -> CapacitySnapshot {
    compute_capacity_with_share(taken_at_ms, nodes, pods, GpuShare::default())
}

/// [`compute_capacity`] with the installation's [`GpuShare`]. Each node also lists the jobs
/// holding it ([`crate::capacity::Holder`]), for pending messages.
pub fn compute_capacity_with_share(
    taken_at_ms: u64,
    nodes: &[NodeInfo],
    pods: &[PodInfo],
    gpu_share: GpuShare,
) -> CapacitySnapshot {
    let mut per_node: Vec<NodeCapacity> = nodes
        .iter()
        .map(|n| NodeCapacity {
            name: n.name.clone(),
            series: n.series.clone(),
            gpus: n.gpus_allocatable.unwrap_or(n.gpus_capacity),
            gpus_capacity: n.gpus_capacity,
            cpus: n.cpus,
            memory_gb: n.memory_gb,
            cordoned: n.cordoned,
            ready: n.ready,
            ..NodeCapacity::default()
        })
        .collect();
    per_node.sort_by(|a, b| a.name.cmp(&b.name));
    for pod in pods.iter().filter(|p| !p.terminal) {
        let Some(node) = pod.node_name.as_deref() else {
            continue;
        };
        let Ok(i) = per_node.binary_search_by(|n| n.name.as_str().cmp(node)) else {
            continue;
        };
        let n = &mut per_node[i];
        let (gpus, cpus, memory_gb) = (pod.gpus_held(), pod.cpus.max(0.0), pod.memory_gb.max(0.0));
        n.gpus_used = n.gpus_used.saturating_add(gpus);
        n.cpus_used += cpus;
        n.memory_gb_used += memory_gb;
        // A job-id label that breaks the id rule names no job or playground of ours: its pod's
        // resources count as used above, but it is no holder a message or a preemption can name.
        if let Some(job) = pod.job_id.as_deref().and_then(|j| JobId::parse(j).ok()) {
            match n.holders.iter_mut().find(|h| h.job_id == job) {
                Some(h) => {
                    h.gpus = h.gpus.saturating_add(gpus);
                    h.cpus += cpus;
                    h.memory_gb += memory_gb;
                }
                None => n.holders.push(Holder {
                    job_id: job,
                    gpus,
                    cpus,
                    memory_gb,
                }),
            }
        }
    }
    CapacitySnapshot::from_nodes_with_share(taken_at_ms, per_node, gpu_share)
}

/// Parses a Kubernetes quantity of CPU (`"500m"`, `"2"`, `"1.5"`, `"1e3"`) into cores; `None` if
/// malformed.
pub fn parse_cpu(q: &str) -> Option<f64> {
    crate::quantity::parse(q).map(|milli| milli as f64 / 1000.0)
}

/// Parses a Kubernetes memory quantity (`"64Gi"`, `"512Mi"`, `"1G"`, `"1024"`, `"1e9"`) into GiB;
/// `None` if malformed.
pub fn parse_memory_gb(q: &str) -> Option<f64> {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    crate::quantity::parse(q).map(|milli| milli as f64 / 1000.0 / GIB)
}

/// Parses a whole-number quantity such as a GPU count (`"8"`); `None` if not a non-negative integer.
pub fn parse_count(q: &str) -> Option<u32> {
    q.trim().parse::<u32>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, series: Option<&str>, gpus: u32) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            series: series.map(String::from),
            gpus_capacity: gpus,
            gpus_allocatable: Some(gpus),
            cpus: 64.0,
            memory_gb: 256.0,
            cordoned: false,
            ready: true,
        }
    }

    fn pod(node: &str, gpus: u32, admitted: Option<u32>) -> PodInfo {
        PodInfo {
            node_name: Some(node.into()),
            gpus_requested: gpus,
            gpus_admitted: admitted,
            cpus: 4.0,
            memory_gb: 16.0,
            ..PodInfo::default()
        }
    }

    #[test]
    fn used_gpus_come_from_requests_of_live_bound_pods() {
        let mut done = pod("h-0", 8, None);
        done.terminal = true;
        let unbound = PodInfo {
            gpus_requested: 8,
            ..PodInfo::default()
        };
        let snap = compute_capacity(
            7,
            &[node("h-0", Some("h200"), 8), node("h-1", Some("h200"), 8)],
            &[pod("h-0", 2, None), pod("h-1", 8, None), done, unbound],
        );
        let s = &snap.series["h200"];
        assert_eq!((s.used_gpus, s.free_gpus, s.largest_free_block), (10, 6, 6));
        assert_eq!(snap.taken_at_ms, 7);
    }

    #[test]
    fn admitted_annotation_counts_pods_that_request_no_gpus() {
        let snap = compute_capacity(
            0,
            &[node("h-0", Some("h200"), 8)],
            &[pod("h-0", 0, Some(4))],
        );
        assert_eq!(snap.series["h200"].free_gpus, 4);
    }

    #[test]
    fn cordoned_and_not_ready_nodes_are_blocked_and_allocatable_bounds_the_free_gpus() {
        let mut cordoned = node("h-1", Some("h200"), 8);
        cordoned.cordoned = true;
        let mut down = node("h-2", Some("h200"), 8);
        down.ready = false;
        let mut reserved = node("h-0", Some("h200"), 8);
        reserved.gpus_allocatable = Some(6);
        let snap = compute_capacity(0, &[reserved, cordoned, down], &[]);
        let s = &snap.series["h200"];
        assert_eq!(
            (
                s.total_gpus,
                s.allocatable_gpus,
                s.blocked_gpus,
                s.free_gpus
            ),
            (24, 22, 16, 6)
        );
    }

    #[test]
    fn cpu_capacity_counts_what_cpu_jobs_may_use_beside_free_gpus() {
        let snap = compute_capacity(
            0,
            &[node("c-0", None, 0), node("h-0", Some("h200"), 8)],
            &[pod("c-0", 0, None)],
        );
        assert_eq!(snap.cpu.nodes, 2);
        // c-0: 64 - 4; h-0: 64 - 8 free GPUs × 4 CPUs kept for GPU jobs.
        assert_eq!(snap.cpu.free_cpus, 92.0);
        assert_eq!(snap.cpu.largest_free_cpus, 60.0);
        // h-0's 256 GiB are all kept for its 8 free GPUs (32 GiB each).
        assert_eq!(snap.cpu.largest_free_memory_gb, 240.0);
        assert_eq!(snap.cpu.total_cpus, 128.0);
    }

    #[test]
    fn quantities_parse_like_kubernetes() {
        assert_eq!(parse_cpu("500m"), Some(0.5));
        assert_eq!(parse_cpu("2"), Some(2.0));
        assert_eq!(parse_memory_gb("64Gi"), Some(64.0));
        assert_eq!(parse_memory_gb("512Mi"), Some(0.5));
        assert_eq!(parse_count("8"), Some(8));
        assert_eq!(parse_count("x"), None);
        assert_eq!(parse_cpu("abc"), None);
    }
}
