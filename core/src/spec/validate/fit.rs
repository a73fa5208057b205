//! Whether the job could ever fit the fleet (its shape as configured), and the note for a
//! CPU-only job that only GPU nodes' spare CPU can host.

use super::*;

/// The note for a CPU-only job that no CPU node can host but a GPU node can: it runs only on the
/// spare CPU of GPU nodes, which GPU jobs have first, so it may wait while GPUs are busy.
pub(super) fn spill_note(spec: &JobSpec, fleet: &FleetShape) -> Option<String> {
    let [pool] = spec.pools.as_slice() else {
        return None;
    };
    if pool.series.is_some()
        || fleet.cpu_job_hosts.is_empty()
        || !fleet.hosts_cpu_job(pool.cpus, pool.memory_gb)
        || fleet.cpu_node_hosts_cpu_job(pool.cpus, pool.memory_gb)
    {
        return None;
    }
    let largest = fleet
        .cpu_job_hosts
        .iter()
        .find(|h| !h.gpu_node)
        .map_or_else(
            || "the fleet has no CPU nodes".to_owned(),
            |h| format!("the largest has {} CPUs and {} GiB", h.cpus, h.memory_gb),
        );
    Some(format!(
        "pools[0]: no CPU node fits {} CPUs and {} GiB ({largest}), so this job runs on spare CPU of GPU nodes, where GPU jobs go first: it starts when a GPU node has that much free beyond what its free GPUs keep, and reserves no GPU node while it waits",
        pool.cpus, pool.memory_gb
    ))
}

impl Checker {
    /// Rejects a CPU-only pool that no idle node could host: CPU nodes whole, GPU nodes only
    /// beyond the share their GPUs keep (see `capacity::GpuShare`). Names the largest that fit.
    pub(super) fn fit_cpu_only(&mut self, p: &str, pool: &Pool, fleet: &FleetShape) {
        if fleet.cpu_job_hosts.is_empty() {
            // A snapshot from before per-GPU shares: only the largest node sizes are known.
            if pool.cpus > f64::from(fleet.max_node_cpus) {
                self.err(
                    format!("{p}.cpus"),
                    format!(
                        "{} CPUs exceed the largest node ({} CPUs)",
                        pool.cpus, fleet.max_node_cpus
                    ),
                );
            }
            if pool.memory_gb > f64::from(fleet.max_node_memory_gb) {
                self.err(
                    format!("{p}.memory_gb"),
                    format!(
                        "{} GiB exceeds the largest node ({} GiB)",
                        pool.memory_gb, fleet.max_node_memory_gb
                    ),
                );
            }
            return;
        }
        if fleet.hosts_cpu_job(pool.cpus, pool.memory_gb) {
            return;
        }
        let largest: Vec<String> = fleet
            .cpu_job_hosts
            .iter()
            .map(|h| {
                let kind = if h.gpu_node {
                    "on a GPU node, after the CPU and memory its GPUs keep"
                } else {
                    "on a CPU node"
                };
                format!("{} CPUs with {} GiB {kind}", h.cpus, h.memory_gb)
            })
            .collect();
        // Name the field that is too big for every host that would fit the other one.
        let cpus_fit = fleet
            .cpu_job_hosts
            .iter()
            .any(|h| h.cpus + 1e-9 >= pool.cpus);
        let field = if cpus_fit { "memory_gb" } else { "cpus" };
        self.err(
            format!("{p}.{field}"),
            format!(
                "a CPU-only machine of {} CPUs and {} GiB fits no node; the largest that fit: {}",
                pool.cpus,
                pool.memory_gb,
                largest.join("; ")
            ),
        );
    }

    /// Rejects jobs that no node of the fleet could ever host.
    pub(super) fn fit(&mut self, spec: &JobSpec, fleet: &FleetShape) {
        let known: Vec<&str> = fleet.series.keys().map(String::as_str).collect();
        let mut per_series: BTreeMap<&str, (u32, Vec<&str>)> = BTreeMap::new();
        for (i, pool) in spec.pools.iter().enumerate() {
            let p = format!("pools[{i}]");
            let Some(series) = pool.series.as_deref() else {
                self.fit_cpu_only(&p, pool, fleet);
                continue;
            };
            let Some(shape) = fleet.series.get(series) else {
                self.err(
                    format!("{p}.series"),
                    format!("unknown series {series:?}; known: {}", known.join(", ")),
                );
                continue;
            };
            if pool.gpus_per_node > shape.max_gpus_per_node {
                self.err(
                    format!("{p}.gpus_per_node"),
                    format!(
                        "{} GPUs per node, but the largest {series} node has {}",
                        pool.gpus_per_node, shape.max_gpus_per_node
                    ),
                );
            }
            if pool.nodes > shape.nodes {
                self.err(
                    format!("{p}.nodes"),
                    format!(
                        "{} nodes, but the fleet has only {} {series} nodes",
                        pool.nodes, shape.nodes
                    ),
                );
            }
            if pool.cpus > f64::from(shape.max_cpus_per_node) {
                self.err(
                    format!("{p}.cpus"),
                    format!(
                        "{} CPUs per node, but the largest {series} node has {}",
                        pool.cpus, shape.max_cpus_per_node
                    ),
                );
            }
            if pool.memory_gb > f64::from(shape.max_memory_gb_per_node) {
                self.err(
                    format!("{p}.memory_gb"),
                    format!(
                        "{} GiB per node, but the largest {series} node has {}",
                        pool.memory_gb, shape.max_memory_gb_per_node
                    ),
                );
            }
            let entry = per_series.entry(series).or_default();
            entry.0 += pool.nodes;
            entry.1.push(&pool.name);
        }
        // Pools of one job never share a node, so pools of one series add up.
        for (series, (nodes, names)) in per_series {
            let have = fleet.series.get(series).map_or(0, |s| s.nodes);
            if names.len() > 1 && nodes > have {
                self.err(
                    "pools",
                    format!(
                        "pools {} together need {nodes} {series} nodes; the fleet has only {have}",
                        names.join(", ")
                    ),
                );
            }
        }
    }
}
