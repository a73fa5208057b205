//! The capacity snapshot: per GPU series and per node, what exists, what is used and what is free.
//!
//! The reconciler computes it from live Nodes and Pods and publishes it to the job store; admission
//! plans against the very same value, `GET /v1/capacity` and the console show it, and submission
//! derives from it the [`FleetShape`] that rejects jobs that could never fit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fleet::{CpuJobHost, Fleet, FleetShape, SeriesShape};

/// Capacity of the fleet at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacitySnapshot {
    /// When it was taken, milliseconds since the Unix epoch.
    pub taken_at_ms: u64,
    /// Per GPU series (the `tuneplane/gpu-series` node label).
    pub series: BTreeMap<String, SeriesCapacity>,
    /// Every node, sorted by name.
    pub nodes: Vec<NodeCapacity>,
    /// CPU and memory CPU-only jobs may use, over every schedulable node (see [`GpuShare`]).
    #[serde(default)]
    pub cpu: CpuCapacity,
    /// What each free GPU keeps of its node's CPU and memory for GPU jobs.
    #[serde(default)]
    pub gpu_share: GpuShare,
    /// Per tenant, what its active jobs hold and wait for (the reconciler fills it in). Never
    /// served whole: the API shows a caller only its own tenant's entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tenants: BTreeMap<String, crate::quota::TenantUsage>,
}

pub use crate::fleet::GpuShare;

/// CPU and memory totals over schedulable nodes. The free figures are what CPU-only jobs may
/// use: on GPU nodes, what is left after each free GPU's [`GpuShare`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCapacity {
    /// Schedulable nodes.
    pub nodes: u32,
    /// CPU cores of schedulable nodes.
    pub total_cpus: f64,
    /// Free CPU cores a CPU-only job may use.
    pub free_cpus: f64,
    /// Memory of schedulable nodes, GiB.
    pub total_memory_gb: f64,
    /// Free memory a CPU-only job may use, GiB.
    pub free_memory_gb: f64,
    /// Most free CPU cores a CPU-only job may use on one node.
    pub largest_free_cpus: f64,
    /// Most free memory a CPU-only job may use on one node, GiB.
    pub largest_free_memory_gb: f64,
}

/// Totals of one GPU series.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesCapacity {
    /// Nodes of the series (all states).
    pub nodes: u32,
    /// GPU capacity of all nodes.
    pub total_gpus: u32,
    /// GPUs allocatable to pods on all nodes (capacity minus what the node reserves).
    #[serde(default)]
    pub allocatable_gpus: u32,
    /// GPUs on cordoned or NotReady nodes.
    pub blocked_gpus: u32,
    /// GPUs in use on schedulable nodes (requests of non-terminal pods, or TunePlane's admissions).
    pub used_gpus: u32,
    /// Free GPUs on schedulable nodes.
    pub free_gpus: u32,
    /// Most free GPUs on any one schedulable node.
    pub largest_free_block: u32,
}

/// One node: what it offers, what is in use, and whether new pods may land on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeCapacity {
    /// The Kubernetes node name (what pods are bound to).
    pub name: String,
    /// GPU series, if the node has one.
    pub series: Option<String>,
    /// GPUs pods may use (`nvidia.com/gpu` allocatable).
    pub gpus: u32,
    /// GPU capacity (`nvidia.com/gpu` capacity; 0 when unknown, then `gpus` counts).
    #[serde(default)]
    pub gpus_capacity: u32,
    /// GPUs held by the pods bound to the node that have not finished.
    pub gpus_used: u32,
    /// Allocatable CPU cores.
    pub cpus: f64,
    /// CPU cores in use.
    pub cpus_used: f64,
    /// Memory, GiB.
    pub memory_gb: f64,
    /// Memory in use, GiB.
    pub memory_gb_used: f64,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// Ready condition is True.
    pub ready: bool,
    /// Jobs whose live pods use the node, with what they hold (for pending messages; not
    /// published, so the stored snapshot stays small).
    #[serde(skip)]
    pub holders: Vec<Holder>,
}

/// What one job's pods hold on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// Job id (the pods' job-id label).
    pub job_id: crate::ids::JobId,
    /// GPUs held.
    pub gpus: u32,
    /// CPU cores held.
    pub cpus: f64,
    /// Memory held, GiB.
    pub memory_gb: f64,
}

impl NodeCapacity {
    /// A Ready, uncordoned node `name` with `gpus` GPUs of `series` (`None`: a CPU-only node),
    /// `cpus` cores and `memory_gb` GiB, nothing in use: the one builder of test fixtures and
    /// examples (then [`NodeCapacity::with_gpus_used`], or struct update syntax for the rest).
    pub fn ready(
        name: &str,
        series: Option<&str>,
        gpus: u32,
        cpus: f64,
        memory_gb: f64,
    ) -> NodeCapacity {
        NodeCapacity {
            name: name.to_owned(),
            series: series.map(str::to_owned),
            gpus,
            cpus,
            memory_gb,
            ready: true,
            ..NodeCapacity::default()
        }
    }

    /// This node with `used` of its GPUs held.
    pub fn with_gpus_used(mut self, used: u32) -> NodeCapacity {
        self.gpus_used = used;
        self
    }

    /// Schedulable: Ready and not cordoned.
    pub fn schedulable(&self) -> bool {
        self.ready && !self.cordoned
    }

    /// Free GPUs (0 when not schedulable).
    pub fn free_gpus(&self) -> u32 {
        if self.schedulable() {
            self.gpus.saturating_sub(self.gpus_used)
        } else {
            0
        }
    }
}

impl CapacitySnapshot {
    /// The capacity of `fleet` with nothing running: node `<group>-<i>`, the last `cordoned`
    /// nodes of a group cordoned and the `not_ready` ones before them NotReady (as the simulated
    /// cluster and the node agent create them). For dry runs such as `tuneplane render`.
    pub fn idle(fleet: &Fleet, share: GpuShare) -> Self {
        let mut nodes = Vec::new();
        for g in &fleet.node_groups {
            for i in 0..g.count {
                let cordoned = i >= g.count - g.cordoned;
                let not_ready = !cordoned && i >= g.count - g.cordoned - g.not_ready;
                nodes.push(NodeCapacity {
                    name: format!("{}-{i}", g.name),
                    series: g.series.clone(),
                    gpus: g.gpus,
                    gpus_capacity: g.gpus,
                    cpus: f64::from(g.cpus),
                    memory_gb: f64::from(g.memory_gb),
                    cordoned,
                    ready: !not_ready,
                    ..Default::default()
                });
            }
        }
        Self::from_nodes_with_share(0, nodes, share)
    }

    /// Builds a snapshot from per-node figures, computing the series totals, with the default
    /// [`GpuShare`].
    pub fn from_nodes(taken_at_ms: u64, nodes: Vec<NodeCapacity>) -> Self {
        Self::from_nodes_with_share(taken_at_ms, nodes, GpuShare::default())
    }

    /// [`CapacitySnapshot::from_nodes`] with the installation's [`GpuShare`].
    pub fn from_nodes_with_share(
        taken_at_ms: u64,
        mut nodes: Vec<NodeCapacity>,
        gpu_share: GpuShare,
    ) -> Self {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut series: BTreeMap<String, SeriesCapacity> = BTreeMap::new();
        for n in &nodes {
            let Some(s) = &n.series else { continue };
            let e = series.entry(s.clone()).or_default();
            e.nodes += 1;
            e.total_gpus += n.gpus_capacity.max(n.gpus);
            e.allocatable_gpus += n.gpus;
            if n.schedulable() {
                e.used_gpus += n.gpus_used.min(n.gpus);
                e.free_gpus += n.free_gpus();
                e.largest_free_block = e.largest_free_block.max(n.free_gpus());
            } else {
                e.blocked_gpus += n.gpus;
            }
        }
        let mut cpu = CpuCapacity::default();
        for n in nodes.iter().filter(|n| n.schedulable()) {
            let (free_cpus, free_mem) = gpu_share.cpu_job_room(
                n.free_gpus(),
                n.cpus - n.cpus_used,
                n.memory_gb - n.memory_gb_used,
            );
            cpu.nodes += 1;
            cpu.total_cpus += n.cpus;
            cpu.free_cpus += free_cpus;
            cpu.total_memory_gb += n.memory_gb;
            cpu.free_memory_gb += free_mem;
            cpu.largest_free_cpus = cpu.largest_free_cpus.max(free_cpus);
            cpu.largest_free_memory_gb = cpu.largest_free_memory_gb.max(free_mem);
        }
        Self {
            taken_at_ms,
            series,
            nodes,
            cpu,
            gpu_share,
            tenants: BTreeMap::new(),
        }
    }

    /// The fleet shape for submit-time fit checks. Cordoned and NotReady nodes count: they may
    /// come back, so a job that fits them is not impossible, only waiting.
    pub fn shape(&self) -> FleetShape {
        let mut shape = FleetShape::default();
        for n in &self.nodes {
            let (cpu_cpus, cpu_mem) = self.gpu_share.cpu_job_room(n.gpus, n.cpus, n.memory_gb);
            shape.add_cpu_job_host(CpuJobHost {
                cpus: cpu_cpus,
                memory_gb: cpu_mem,
                gpu_node: n.gpus > 0,
            });
            // Quantities are whole cores/GiB in the shape; round down to stay conservative.
            let (cpus, mem) = (n.cpus.max(0.0) as u32, n.memory_gb.max(0.0) as u32);
            shape.max_node_cpus = shape.max_node_cpus.max(cpus);
            shape.max_node_memory_gb = shape.max_node_memory_gb.max(mem);
            if let Some(s) = &n.series {
                let e: &mut SeriesShape = shape.series.entry(s.clone()).or_default();
                e.nodes += 1;
                e.max_gpus_per_node = e.max_gpus_per_node.max(n.gpus);
                e.max_cpus_per_node = e.max_cpus_per_node.max(cpus);
                e.max_memory_gb_per_node = e.max_memory_gb_per_node.max(mem);
            }
        }
        shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, series: &str, gpus: u32, used: u32) -> NodeCapacity {
        NodeCapacity::ready(name, Some(series), gpus, 64.0, 512.0).with_gpus_used(used)
    }

    #[test]
    fn series_totals_count_blocked_nodes_apart_and_track_the_largest_free_block() {
        let mut cordoned = node("h-2", "h200", 8, 0);
        cordoned.cordoned = true;
        let snap = CapacitySnapshot::from_nodes(
            1,
            vec![
                node("h-1", "h200", 8, 6),
                node("h-0", "h200", 8, 3),
                cordoned,
            ],
        );
        let s = &snap.series["h200"];
        assert_eq!(
            (
                s.nodes,
                s.total_gpus,
                s.blocked_gpus,
                s.used_gpus,
                s.free_gpus,
                s.largest_free_block
            ),
            (3, 24, 8, 9, 7, 5)
        );
        assert_eq!(snap.nodes[0].name, "h-0", "nodes are sorted");
    }

    #[test]
    fn shape_counts_every_node_of_a_series() {
        let mut down = node("l-1", "l40s", 4, 0);
        down.ready = false;
        let shape = CapacitySnapshot::from_nodes(1, vec![node("l-0", "l40s", 4, 4), down]).shape();
        assert_eq!(
            shape.series["l40s"],
            SeriesShape {
                nodes: 2,
                max_gpus_per_node: 4,
                max_cpus_per_node: 64,
                max_memory_gb_per_node: 512
            }
        );
    }
}
