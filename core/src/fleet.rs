//! The fleet description: node groups with their GPU series, sizes and states.
//!
//! A fleet file (`examples/fleet.yaml`) describes a fleet for validation in `dev`, for the simulated
//! cluster and for tests. [`FleetShape`] is the part validation needs: per series, how many nodes
//! exist and how big the largest one is. Production derives the same shape from the capacity snapshot.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A fleet file: groups of identical nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fleet {
    /// The node groups; node names are `<group>-<index>`.
    pub node_groups: Vec<NodeGroup>,
}

/// A group of identical nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    /// Group name, a DNS label; nodes are named `<name>-0`, `<name>-1`, ...
    pub name: String,
    /// GPU series label value; absent for CPU-only nodes.
    #[serde(default)]
    pub series: Option<String>,
    /// Number of nodes in the group.
    pub count: u32,
    /// GPUs per node (`nvidia.com/gpu` capacity); 0 for CPU-only nodes.
    #[serde(default)]
    pub gpus: u32,
    /// CPU cores per node.
    pub cpus: u32,
    /// Memory per node in GiB.
    pub memory_gb: u32,
    /// Taints on every node of the group.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// How many nodes of the group (the last ones) are cordoned.
    #[serde(default)]
    pub cordoned: u32,
    /// How many nodes of the group (the last ones not cordoned) are NotReady.
    #[serde(default)]
    pub not_ready: u32,
}

/// A Kubernetes node taint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    #[serde(default)]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Errors reading a fleet file.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The file is not valid YAML of the fleet shape.
    #[error("fleet file is not valid: {0}")]
    Parse(String),
    /// The file parsed but a value is wrong.
    #[error("fleet file is not valid: {path}: {message}")]
    Invalid {
        /// Field path of the offending value.
        path: String,
        /// What is wrong and what to do.
        message: String,
    },
}

impl Fleet {
    /// Parses and checks a fleet file (YAML or JSON).
    pub fn from_yaml(text: &str) -> Result<Self, FleetError> {
        let fleet: Fleet =
            yaml_serde::from_str(text).map_err(|e| FleetError::Parse(e.to_string()))?;
        fleet.check()?;
        Ok(fleet)
    }

    fn check(&self) -> Result<(), FleetError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, g) in self.node_groups.iter().enumerate() {
            let bad = |field: &str, message: String| FleetError::Invalid {
                path: format!("node_groups[{i}].{field}"),
                message,
            };
            if !crate::ids::is_dns_label(&g.name, 40) {
                return Err(bad("name", format!("{:?} is not a DNS label", g.name)));
            }
            if !names.insert(g.name.as_str()) {
                return Err(bad("name", format!("duplicate group name {:?}", g.name)));
            }
            match (&g.series, g.gpus) {
                (Some(_), 0) => return Err(bad("gpus", "a GPU series needs gpus >= 1".into())),
                (None, n) if n > 0 => {
                    return Err(bad("series", "nodes with GPUs need a series".into()));
                }
                _ => {}
            }
            if let Some(s) = &g.series
                && !crate::ids::is_dns_label(s, 63)
            {
                return Err(bad("series", format!("{s:?} is not a valid label value")));
            }
            if g.cordoned + g.not_ready > g.count {
                return Err(bad("cordoned", "cordoned + not_ready exceeds count".into()));
            }
            if g.cpus == 0 || g.memory_gb == 0 {
                return Err(bad("cpus", "cpus and memory_gb must be positive".into()));
            }
        }
        Ok(())
    }

    /// The shape validation needs: nodes per series and the largest node sizes, with the default
    /// [`GpuShare`].
    pub fn shape(&self) -> FleetShape {
        self.shape_with(GpuShare::default())
    }

    /// [`Fleet::shape`] with the installation's [`GpuShare`].
    pub fn shape_with(&self, share: GpuShare) -> FleetShape {
        let mut shape = FleetShape::default();
        for g in self.node_groups.iter().filter(|g| g.count > 0) {
            let (cpus, memory_gb) =
                share.cpu_job_room(g.gpus, f64::from(g.cpus), f64::from(g.memory_gb));
            shape.add_cpu_job_host(CpuJobHost {
                cpus,
                memory_gb,
                gpu_node: g.gpus > 0,
            });
            shape.max_node_cpus = shape.max_node_cpus.max(g.cpus);
            shape.max_node_memory_gb = shape.max_node_memory_gb.max(g.memory_gb);
            if let Some(series) = &g.series {
                let s = shape.series.entry(series.clone()).or_default();
                s.nodes += g.count;
                s.max_gpus_per_node = s.max_gpus_per_node.max(g.gpus);
                s.max_cpus_per_node = s.max_cpus_per_node.max(g.cpus);
                s.max_memory_gb_per_node = s.max_memory_gb_per_node.max(g.memory_gb);
            }
        }
        shape
    }
}

/// The CPU and memory each free GPU of a node keeps for GPU jobs: a CPU-only job placed on a GPU
/// node may use only what is left after `free GPUs × share`, so CPU work never turns free GPUs
/// into GPUs no job can use. Defaults to the JobSpec's per-GPU defaults (4 CPUs, 32 GiB).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuShare {
    /// CPU cores kept per free GPU.
    pub cpus: f64,
    /// Memory kept per free GPU, GiB.
    pub memory_gb: f64,
}

impl Default for GpuShare {
    fn default() -> Self {
        GpuShare {
            cpus: crate::constants::DEFAULT_CPUS_PER_GPU,
            memory_gb: crate::constants::DEFAULT_MEMORY_GB_PER_GPU,
        }
    }
}

impl GpuShare {
    /// What a CPU-only job may use of `free_cpus` and `free_memory_gb` on a node with
    /// `free_gpus` free GPUs.
    pub fn cpu_job_room(&self, free_gpus: u32, free_cpus: f64, free_memory_gb: f64) -> (f64, f64) {
        let g = f64::from(free_gpus);
        (
            (free_cpus - g * self.cpus).max(0.0),
            (free_memory_gb - g * self.memory_gb).max(0.0),
        )
    }
}

/// What validation needs to know about a fleet to reject jobs that can never fit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetShape {
    /// Per GPU series.
    pub series: BTreeMap<String, SeriesShape>,
    /// Most CPUs on any node.
    pub max_node_cpus: u32,
    /// Most memory on any node, GiB.
    pub max_node_memory_gb: u32,
    /// The largest CPU-only machines idle nodes can host (none larger in both CPU and memory),
    /// after each GPU's [`GpuShare`] on GPU nodes.
    #[serde(default)]
    pub cpu_job_hosts: Vec<CpuJobHost>,
}

/// The largest CPU-only machine one kind of idle node can host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuJobHost {
    /// CPU cores.
    pub cpus: f64,
    /// Memory, GiB.
    pub memory_gb: f64,
    /// The node has GPUs (their share is already taken off).
    pub gpu_node: bool,
}

impl FleetShape {
    /// Adds a node kind to [`FleetShape::cpu_job_hosts`], keeping only hosts no other one of the
    /// same kind (CPU node or GPU node) beats in both CPU and memory: whether a CPU-only job fits
    /// a CPU node at all decides how it waits (see `admission`), so a GPU node never hides one.
    pub fn add_cpu_job_host(&mut self, host: CpuJobHost) {
        let beats = |a: &CpuJobHost, b: &CpuJobHost| {
            a.gpu_node == b.gpu_node && a.cpus >= b.cpus && a.memory_gb >= b.memory_gb
        };
        if host.cpus <= 0.0 || self.cpu_job_hosts.iter().any(|h| beats(h, &host)) {
            return;
        }
        self.cpu_job_hosts.retain(|h| !beats(&host, h));
        self.cpu_job_hosts.push(host);
        self.cpu_job_hosts.sort_by(|a, b| {
            b.cpus
                .total_cmp(&a.cpus)
                .then(a.memory_gb.total_cmp(&b.memory_gb))
                .then(a.gpu_node.cmp(&b.gpu_node))
        });
    }

    /// True if some idle node can host a CPU-only machine of this size.
    pub fn hosts_cpu_job(&self, cpus: f64, memory_gb: f64) -> bool {
        self.cpu_job_hosts.iter().any(|h| h.hosts(cpus, memory_gb))
    }

    /// True if some idle CPU node (one without GPUs) can host a CPU-only machine of this size.
    /// A machine that fits only GPU nodes runs on their spare CPU, after GPU jobs.
    pub fn cpu_node_hosts_cpu_job(&self, cpus: f64, memory_gb: f64) -> bool {
        self.cpu_job_hosts
            .iter()
            .any(|h| !h.gpu_node && h.hosts(cpus, memory_gb))
    }
}

impl CpuJobHost {
    /// Whether this host fits a CPU-only machine of `cpus` and `memory_gb`.
    pub fn hosts(&self, cpus: f64, memory_gb: f64) -> bool {
        const EPS: f64 = 1e-9;
        self.cpus + EPS >= cpus && self.memory_gb + EPS >= memory_gb
    }
}

/// Size of one GPU series.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesShape {
    /// Nodes of the series, cordoned and NotReady included (they may come back).
    pub nodes: u32,
    /// GPUs of the largest node.
    pub max_gpus_per_node: u32,
    /// CPUs of the largest node.
    pub max_cpus_per_node: u32,
    /// Memory of the largest node, GiB.
    pub max_memory_gb_per_node: u32,
}
