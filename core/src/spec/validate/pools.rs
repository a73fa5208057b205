//! The job's pools: shape, series, and the rules for CPU-only pools.

use super::*;

impl Checker {
    pub(super) fn pools(&mut self, map: &Map<String, Value>, plugin: &str) -> Option<Vec<Pool>> {
        let list = match map.get("pools") {
            None | Some(Value::Null) => {
                self.err("pools", "is required: list at least one pool, e.g. [{name: main, series: h200, nodes: 1, gpus_per_node: 8}]");
                return None;
            }
            Some(Value::Array(list)) => list,
            Some(other) => {
                self.err(
                    "pools",
                    format!("must be a list of pools, not {}", type_name(other)),
                );
                return None;
            }
        };
        if list.is_empty() {
            self.err("pools", "must list at least one pool");
            return None;
        }
        if list.len() > MAX_POOLS {
            self.err(
                "pools",
                format!("has {} pools; at most {MAX_POOLS} are allowed", list.len()),
            );
        }
        let cpu_job =
            list.len() == 1 && list[0].get("gpus_per_node").and_then(Value::as_u64) == Some(0);
        let mut names = BTreeSet::new();
        let mut pools = Vec::new();
        let mut complete = true;
        for (i, item) in list.iter().enumerate() {
            match self.pool(item, i, cpu_job, list.len(), plugin) {
                Some(p) => {
                    if !names.insert(p.name.clone()) {
                        self.err(
                            format!("pools[{i}].name"),
                            format!(
                                "duplicate pool name {:?}; pool names must be unique",
                                p.name
                            ),
                        );
                    }
                    pools.push(p);
                }
                None => complete = false,
            }
        }
        complete.then_some(pools)
    }

    pub(super) fn pool(
        &mut self,
        item: &Value,
        i: usize,
        cpu_job: bool,
        pool_count: usize,
        plugin: &str,
    ) -> Option<Pool> {
        let p = format!("pools[{i}]");
        let Some(m) = item.as_object() else {
            self.err(
                &p,
                format!(
                    "must be a mapping with name, series, nodes and gpus_per_node, not {}",
                    type_name(item)
                ),
            );
            return None;
        };
        self.unknown_fields(m, POOL_FIELDS, &format!("{p}."));
        let name = self.dns_label(
            m,
            ("name", &format!("{p}.name"), true),
            15,
            "must be a DNS label of at most 15 characters",
        );
        let series = self.dns_label(
            m,
            ("series", &format!("{p}.series"), false),
            63,
            "is not a valid series name",
        );
        let nodes = self.required_integer(
            m,
            (&p, "nodes"),
            (1, MAX_NODES_PER_POOL as i64),
            "number of machines in the pool",
        );
        let gpus = self.required_integer(
            m,
            (&p, "gpus_per_node"),
            (0, MAX_GPUS_PER_NODE as i64),
            "GPUs per machine; 0 for a CPU-only job",
        );
        let cpus = self.number(m, "cpus", &format!("{p}.cpus"), 1024.0);
        let memory_gb = self.number(m, "memory_gb", &format!("{p}.memory_gb"), 16_384.0);

        let (nodes, gpus) = (nodes? as u32, gpus? as u32);
        let (cpus, memory_gb) = if gpus == 0 {
            self.cpu_pool_rules(&p, cpu_job, pool_count, plugin, nodes, series.is_some(), m);
            (cpus?, memory_gb?)
        } else {
            if series.is_none() {
                self.err(
                    format!("{p}.series"),
                    "is required for a pool with GPUs (e.g. h200)",
                );
            }
            (
                cpus.unwrap_or(DEFAULT_CPUS_PER_GPU * f64::from(gpus)),
                memory_gb.unwrap_or(DEFAULT_MEMORY_GB_PER_GPU * f64::from(gpus)),
            )
        };
        // Kubernetes quantities are rendered in millicores and MiB; refuse finer values than that.
        let cpus = (cpus * 1000.0).round() / 1000.0;
        let memory_gb = (memory_gb * 1024.0).round() / 1024.0;
        Some(Pool {
            name: name?,
            series,
            nodes,
            gpus_per_node: gpus,
            cpus,
            memory_gb,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn cpu_pool_rules(
        &mut self,
        p: &str,
        cpu_job: bool,
        pool_count: usize,
        plugin: &str,
        nodes: u32,
        has_series: bool,
        m: &Map<String, Value>,
    ) {
        if !cpu_job || pool_count != 1 {
            self.err(format!("{p}.gpus_per_node"), "0 is only allowed for a CPU-only job, which has exactly one pool; give every pool of a multi-pool job at least one GPU");
            return;
        }
        if plugin != PLUGIN_CUSTOM {
            self.err(
                "plugin",
                format!("CPU-only jobs must use plugin {PLUGIN_CUSTOM}"),
            );
        }
        if nodes != 1 {
            self.err(
                format!("{p}.nodes"),
                "multi-machine CPU jobs are not supported; a CPU-only job runs on nodes: 1",
            );
        }
        if has_series {
            self.err(
                format!("{p}.series"),
                "a CPU-only job has no GPU series; remove series (it may run on any node)",
            );
        }
        for (key, what) in [("cpus", "CPU cores"), ("memory_gb", "memory in GiB")] {
            if !m.contains_key(key) {
                self.err(
                    format!("{p}.{key}"),
                    format!("is required for a CPU-only job ({what}, greater than 0)"),
                );
            }
        }
    }
}
