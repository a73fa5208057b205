//! Sharing the fleet between tenants: quotas, weights, what each tenant holds, and the checks
//! admission and submission make against them.
//!
//! - A [`TenantQuota`] caps what one tenant may have admitted at once: GPUs per series, and
//!   optionally CPUs and memory of CPU-only jobs. No quota (or no limit for a series) means
//!   unlimited, so a single-tenant install behaves as if quotas did not exist.
//! - A limit with `borrow: true` lets the tenant go above it on capacity nobody else's queued jobs
//!   can use; such jobs are admitted after every job within its quota (see the admission module).
//! - `weight` (default 1) scales the tenant's fair share: admission serves the tenant with the
//!   lowest dominant share of the fleet divided by its weight first.
//!
//! Nothing here does I/O: the stores persist [`TenantQuota`] records, the reconciler and the API
//! compute [`TenantUsage`] from active job records.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::claimant::Claimant;
use crate::job::{JobRecord, JobState};
use crate::quantity::{plain, write_plain};
use crate::spec::{JobSpec, is_dns_label};

/// Largest GPU limit accepted (a sanity bound, far above any fleet).
pub const MAX_GPUS: u32 = 1_000_000;
/// Largest CPU limit accepted, cores.
pub const MAX_CPUS: f64 = 10_000_000.0;
/// Largest memory limit accepted, GiB.
pub const MAX_MEMORY_GB: f64 = 100_000_000.0;
/// Weights are between these bounds.
pub const MIN_WEIGHT: f64 = 0.01;
/// Weights are between these bounds.
pub const MAX_WEIGHT: f64 = 1000.0;

/// The GPU limit of one series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SeriesLimit {
    /// Most GPUs of the series the tenant may have admitted at once.
    pub gpus: u32,
    /// Whether the tenant may go above `gpus` on capacity no other tenant's queued jobs can use.
    #[serde(default)]
    pub borrow: bool,
}

/// The limit on CPU-only jobs (GPU jobs' CPUs and memory are covered by their GPU limit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuLimit {
    /// Most CPU cores of CPU-only jobs admitted at once; `None` = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Most memory (GiB) of CPU-only jobs admitted at once; `None` = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gb: Option<f64>,
    /// Whether the tenant may go above these limits on capacity nobody else can use.
    #[serde(default)]
    pub borrow: bool,
}

fn one() -> f64 {
    1.0
}

fn is_one(w: &f64) -> bool {
    (*w - 1.0).abs() < f64::EPSILON
}

/// One tenant's quota and fair-share weight, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantQuota {
    /// The tenant (as on its API keys).
    pub tenant: crate::ids::TenantId,
    /// Fair-share weight: a tenant of weight 2 is served as if it held half of what it holds.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: f64,
    /// GPU limits by series; a series not listed is unlimited.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub series: BTreeMap<String, SeriesLimit>,
    /// Limits on CPU-only jobs; `None` = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuLimit>,
    /// When the record was last written, Unix milliseconds.
    #[serde(default)]
    pub updated_at_ms: i64,
}

impl TenantQuota {
    /// A quota with no limits and weight 1 (what a tenant without a record has).
    pub fn unlimited(tenant: &crate::ids::TenantId) -> TenantQuota {
        TenantQuota {
            tenant: tenant.to_owned(),
            weight: 1.0,
            series: BTreeMap::new(),
            cpu: None,
            updated_at_ms: 0,
        }
    }

    /// True when nothing is limited and the weight is the default (the record may be deleted).
    pub fn is_default(&self) -> bool {
        self.series.is_empty() && self.cpu.is_none() && is_one(&self.weight)
    }

    /// Checks every field; the error lists each problem with its field and what to do.
    pub fn validate(&self) -> Result<(), QuotaError> {
        // The tenant is a checked TenantId: made only by parsing, so it needs no check here.
        let mut problems = Vec::new();
        if !self.weight.is_finite() || !(MIN_WEIGHT..=MAX_WEIGHT).contains(&self.weight) {
            problems.push(format!(
                "weight: {} is out of range; use a number from {MIN_WEIGHT} to {MAX_WEIGHT} (default 1)",
                self.weight
            ));
        }
        for (series, limit) in &self.series {
            if !is_dns_label(series, 63) {
                problems.push(format!(
                    "series: {series:?} is not a series name (a DNS label such as h200)"
                ));
            }
            if limit.gpus > MAX_GPUS {
                problems.push(format!(
                    "series {series}: gpus {} is above the largest accepted ({MAX_GPUS})",
                    limit.gpus
                ));
            }
        }
        if let Some(cpu) = &self.cpu {
            if cpu.cpus.is_none() && cpu.memory_gb.is_none() {
                problems.push("cpu: set cpus and/or memory_gb, or remove the CPU limit".to_owned());
            }
            if let Some(c) = cpu.cpus
                && (!c.is_finite() || !(0.0..=MAX_CPUS).contains(&c))
            {
                problems.push(format!(
                    "cpus: {c} is out of range; use 0 to {MAX_CPUS} cores"
                ));
            }
            if let Some(m) = cpu.memory_gb
                && (!m.is_finite() || !(0.0..=MAX_MEMORY_GB).contains(&m))
            {
                problems.push(format!(
                    "memory_gb: {m} is out of range; use 0 to {MAX_MEMORY_GB} GiB"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(QuotaError { problems })
        }
    }

    /// Sets (or replaces) the GPU limit of `series`.
    pub fn set_gpu_limit(&mut self, series: &str, gpus: u32, borrow: bool) {
        self.series
            .insert(series.to_owned(), SeriesLimit { gpus, borrow });
    }

    /// The GPU limit of `series`, if any.
    pub fn gpu_limit(&self, series: &str) -> Option<&SeriesLimit> {
        self.series.get(series)
    }
}

/// The quota of tenants without a record of their own (`TUNEPLANE_DEFAULT_QUOTA`, the same
/// JSON as a quota without `tenant`); without one such tenants are unlimited.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DefaultQuota(pub Option<TenantQuota>);

impl DefaultQuota {
    /// Parses the configuration value: a quota's JSON without `tenant`, validated.
    pub fn parse(json: &str) -> Result<DefaultQuota, String> {
        let mut value: serde_json::Value = serde_json::from_str(json).map_err(|e| {
            format!(
                "expected a quota as JSON, e.g. {{\"series\": {{\"h200\": {{\"gpus\": 8, \"borrow\": true}}}}}}: {e}"
            )
        })?;
        let Some(map) = value.as_object_mut() else {
            return Err("expected a JSON object (a quota without \"tenant\")".into());
        };
        if map.contains_key("tenant") {
            return Err(
                "leave out \"tenant\": the default applies to every tenant without a quota".into(),
            );
        }
        map.insert("tenant".into(), "default".into());
        let quota: TenantQuota = serde_json::from_value(value).map_err(|e| e.to_string())?;
        quota.validate().map_err(|e| e.to_string())?;
        Ok(DefaultQuota(Some(quota)))
    }

    /// The quota that applies to `tenant`, whose own record is `stored`.
    pub fn effective(
        &self,
        tenant: &crate::ids::TenantId,
        stored: Option<TenantQuota>,
    ) -> Option<TenantQuota> {
        stored.or_else(|| {
            self.0.as_ref().map(|d| TenantQuota {
                tenant: tenant.to_owned(),
                ..d.clone()
            })
        })
    }

    /// `stored` plus the default's copy for each of `tenants` without a record.
    pub fn complete<'a>(
        &self,
        mut stored: Vec<TenantQuota>,
        tenants: impl IntoIterator<Item = &'a crate::ids::TenantId>,
    ) -> Vec<TenantQuota> {
        if self.0.is_some() {
            let mut missing: Vec<&crate::ids::TenantId> = tenants
                .into_iter()
                .filter(|t| !stored.iter().any(|q| q.tenant == **t))
                .collect();
            missing.sort_unstable();
            missing.dedup();
            for t in missing {
                stored.extend(self.effective(t, None));
            }
        }
        stored
    }
}

pub use crate::ids::valid_tenant;

/// A quota that breaks the rules; every problem is listed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid quota: {}", problems.join("; "))]
pub struct QuotaError {
    /// One line per problem, each naming its field.
    pub problems: Vec<String>,
}

/// What a job holds while admitted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Demand {
    /// GPUs per series (every machine of every pool).
    pub gpus: BTreeMap<String, u32>,
    /// CPU cores of CPU-only pools.
    pub cpus: f64,
    /// Memory (GiB) of CPU-only pools.
    pub memory_gb: f64,
}

impl Demand {
    /// What `spec` holds once admitted.
    pub fn of(spec: &JobSpec) -> Demand {
        let mut d = Demand::default();
        for pool in &spec.pools {
            match &pool.series {
                Some(s) => {
                    let g = d.gpus.entry(s.clone()).or_default();
                    *g = g.saturating_add(pool.nodes.saturating_mul(pool.gpus_per_node));
                }
                None => {
                    d.cpus += pool.cpus * f64::from(pool.nodes);
                    d.memory_gb += pool.memory_gb * f64::from(pool.nodes);
                }
            }
        }
        d
    }

    /// Adds what `spec` holds once admitted: `add(&Demand::of(spec))` (the same sums, in the
    /// same order) without building a demand and cloning its series names, which admission did
    /// for every running job and every admission of a pass.
    pub fn add_spec(&mut self, spec: &JobSpec) {
        let (mut cpus, mut memory_gb) = (0.0, 0.0);
        for pool in &spec.pools {
            match &pool.series {
                Some(s) => {
                    // Saturating sums of counts do not depend on their grouping.
                    let need = pool.nodes.saturating_mul(pool.gpus_per_node);
                    match self.gpus.get_mut(s.as_str()) {
                        Some(g) => *g = g.saturating_add(need),
                        None => {
                            self.gpus.insert(s.clone(), need);
                        }
                    }
                }
                None => {
                    cpus += pool.cpus * f64::from(pool.nodes);
                    memory_gb += pool.memory_gb * f64::from(pool.nodes);
                }
            }
        }
        self.cpus += cpus;
        self.memory_gb += memory_gb;
    }

    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Demand) {
        for (s, g) in &other.gpus {
            let e = self.gpus.entry(s.clone()).or_default();
            *e = e.saturating_add(*g);
        }
        self.cpus += other.cpus;
        self.memory_gb += other.memory_gb;
    }
}

/// What one tenant holds and waits for, from its active job records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantUsage {
    /// What admitted (not yet finished) jobs hold.
    pub admitted: Demand,
    /// Admitted jobs that have not finished.
    pub admitted_jobs: u32,
    /// What queued jobs ask for, summed.
    pub queued: Demand,
    /// Jobs waiting to be admitted.
    pub queued_jobs: u32,
}

/// Per tenant, what its active jobs hold and wait for (jobs stopping still hold what they have).
pub fn tenant_usage(jobs: &[JobRecord]) -> BTreeMap<String, TenantUsage> {
    let mut out: BTreeMap<String, TenantUsage> = BTreeMap::new();
    for job in jobs.iter().filter(|j| !j.state.is_terminal()) {
        let u = out.entry(job.tenant.to_string()).or_default();
        let d = Demand::of(&job.spec);
        if job.state == JobState::Queued {
            if job.stop_requested {
                continue;
            }
            u.queued.add(&d);
            u.queued_jobs += 1;
        } else {
            u.admitted.add(&d);
            u.admitted_jobs += 1;
        }
    }
    out.retain(|_, u| u.admitted_jobs > 0 || u.queued_jobs > 0);
    out
}

/// Where a job stands against its tenant's quota, given what the tenant holds now.
#[derive(Debug, Clone, PartialEq)]
pub enum QuotaCheck {
    /// Within every limit.
    Within,
    /// Above a limit that allows borrowing (and no limit that does not): the job may run on
    /// capacity nobody else's queued jobs can use. The message says which limit.
    Borrow(String),
    /// Above a limit without borrowing: the job waits (`QuotaExceeded`) with this message.
    Exceeded(String),
}

/// A limit a job would go over, with what the tenant uses, the limit and what the job needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Over<'a> {
    /// GPUs of a series.
    Gpus {
        /// Series whose GPU limit the job would pass.
        series: &'a str,
        /// GPUs of the series the tenant has admitted.
        used: u32,
        /// The tenant's GPU limit for the series.
        limit: u32,
        /// What the job needs.
        need: u32,
    },
    /// CPU cores of CPU-only jobs.
    Cpus {
        /// Cores of the tenant's admitted CPU-only jobs.
        used: f64,
        /// The tenant's CPU limit, cores.
        limit: f64,
        /// Cores the job asks for.
        need: f64,
    },
    /// Memory (GiB) of CPU-only jobs.
    Memory {
        /// GiB of the tenant's admitted CPU-only jobs.
        used: f64,
        /// The tenant's memory limit, GiB.
        limit: f64,
        /// GiB the job asks for.
        need: f64,
    },
}

/// An [`Over`] as a hashable value: which limit (0 GPUs, 1 CPUs, 2 memory), the series, and the
/// bits of what is used, the limit and the need. Equal keys give equal messages.
pub type OverKey<'a> = (u8, &'a str, u64, u64, u64);

impl<'a> Over<'a> {
    /// Which limit (0 GPUs, 1 CPUs, 2 memory), the series (empty for CPUs and memory) and what
    /// is used, the limit and the need, as `f64` (GPU counts convert exactly).
    fn parts(&self) -> (u8, &'a str, [f64; 3]) {
        match *self {
            Over::Gpus {
                series,
                used,
                limit,
                need,
            } => (0, series, [used.into(), limit.into(), need.into()]),
            Over::Cpus { used, limit, need } => (1, "", [used, limit, need]),
            Over::Memory { used, limit, need } => (2, "", [used, limit, need]),
        }
    }

    /// This limit state as a hashable [`OverKey`].
    pub fn key(&self) -> OverKey<'a> {
        let (kind, series, [used, limit, need]) = self.parts();
        (
            kind,
            series,
            used.to_bits(),
            limit.to_bits(),
            need.to_bits(),
        )
    }

    /// What a person reads: `tenant team-a uses 12 of 16 h200 GPUs; this job needs 8` (or
    /// `this playground needs 8`, as `claimant` says).
    pub fn message(&self, tenant: &str, claimant: Claimant) -> String {
        // Written piece by piece into one string: admission writes one for most jobs a quota
        // holds (tens of thousands in a long queue), and the pieces' own strings were most of it.
        let (_, series, [used, limit, need]) = self.parts();
        let mut text = String::with_capacity(64 + tenant.len() + series.len());
        text.push_str("tenant ");
        text.push_str(tenant);
        text.push_str(" uses ");
        write_plain(&mut text, used);
        text.push_str(" of ");
        write_plain(&mut text, limit);
        text.push(' ');
        match self {
            Over::Gpus { .. } => {
                text.push_str(series);
                text.push_str(" GPUs");
            }
            Over::Cpus { .. } => text.push_str("CPUs for CPU-only jobs"),
            Over::Memory { .. } => text.push_str("GiB of memory for CPU-only jobs"),
        }
        text.push_str("; this ");
        text.push_str(claimant.noun());
        text.push_str(" needs ");
        write_plain(&mut text, need);
        text
    }
}

/// Where a job stands against its tenant's quota, without formatting anything (admission asks
/// this of every queued job of a tenant with a quota).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict<'a> {
    /// Within every limit.
    Within,
    /// Above a limit that allows borrowing, and no limit that does not.
    Borrow(Over<'a>),
    /// Above a limit without borrowing (the first such limit).
    Exceeded(Over<'a>),
}

/// One series a job needs GPUs of, with what the tenant already uses there and its limit (callers
/// resolve these their own way: by name here, by index in admission).
#[derive(Debug, Clone, Copy)]
pub struct GpuUse<'a> {
    /// GPU series (a node label value such as `h200`).
    pub series: &'a str,
    /// GPUs of it the job needs (each series once per job).
    pub need: u32,
    /// GPUs of it the tenant has admitted.
    pub used: u32,
    /// The tenant's limit for it, if any.
    pub limit: Option<SeriesLimit>,
}

/// The rule, once: which limit, if any, the job goes over. `held` gives the CPU-only usage.
pub fn judge<'a>(
    quota: &TenantQuota,
    held: &Demand,
    gpus: impl Iterator<Item = GpuUse<'a>>,
    cpus: f64,
    memory_gb: f64,
) -> Verdict<'a> {
    let mut exceeded: Option<Over> = None;
    let mut borrow: Option<Over> = None;
    let mut note = |borrowable: bool, over: Over<'a>| {
        let slot = if borrowable {
            &mut borrow
        } else {
            &mut exceeded
        };
        if slot.is_none() {
            *slot = Some(over);
        }
    };
    for GpuUse {
        series,
        need,
        used,
        limit,
    } in gpus
    {
        let Some(limit) = limit else {
            continue;
        };
        if u64::from(used) + u64::from(need) > u64::from(limit.gpus) {
            note(
                limit.borrow,
                Over::Gpus {
                    series,
                    used,
                    limit: limit.gpus,
                    need,
                },
            );
        }
    }
    if let Some(cpu) = &quota.cpu {
        // (limit, used, need, the Over it makes) of CPU cores and of memory.
        type CpuLimit<'o> = (Option<f64>, f64, f64, fn(f64, f64, f64) -> Over<'o>);
        let limits: [CpuLimit<'a>; 2] = [
            (cpu.cpus, held.cpus, cpus, |used, limit, need| Over::Cpus {
                used,
                limit,
                need,
            }),
            (
                cpu.memory_gb,
                held.memory_gb,
                memory_gb,
                |used, limit, need| Over::Memory { used, limit, need },
            ),
        ];
        for (limit, used, need, over) in limits {
            if let Some(max) = limit
                && need > 0.0
                && used + need > max + 1e-9
            {
                note(cpu.borrow, over(used, max, need));
            }
        }
    }
    match (exceeded, borrow) {
        (Some(e), _) => Verdict::Exceeded(e),
        (None, Some(b)) => Verdict::Borrow(b),
        (None, None) => Verdict::Within,
    }
}

/// CPU cores and memory of a spec's CPU-only pools.
pub fn cpu_only_need(spec: &JobSpec) -> (f64, f64) {
    let (mut cpus, mut memory_gb) = (0.0, 0.0);
    for p in spec.pools.iter().filter(|p| p.series.is_none()) {
        cpus += p.cpus * f64::from(p.nodes);
        memory_gb += p.memory_gb * f64::from(p.nodes);
    }
    (cpus, memory_gb)
}

/// Checks the job of `spec` against `quota` when `held` is already admitted (no allocation).
pub fn check_spec<'a>(quota: &TenantQuota, held: &Demand, spec: &'a JobSpec) -> Verdict<'a> {
    let pools = &spec.pools;
    // Per series once: the first pool of a series sums every pool of it (jobs have a few pools).
    let gpus = pools.iter().enumerate().filter_map(|(i, p)| {
        let s = p.series.as_deref()?;
        if pools[..i].iter().any(|q| q.series.as_deref() == Some(s)) {
            return None;
        }
        let need = pools[i..]
            .iter()
            .filter(|q| q.series.as_deref() == Some(s))
            .map(|q| q.nodes.saturating_mul(q.gpus_per_node))
            .fold(0u32, u32::saturating_add);
        Some(GpuUse {
            series: s,
            need,
            used: held.gpus.get(s).copied().unwrap_or(0),
            limit: quota.gpu_limit(s).copied(),
        })
    });
    let (cpus, memory_gb) = cpu_only_need(spec);
    judge(quota, held, gpus, cpus, memory_gb)
}

/// Checks `demand` against `quota` when `held` is already admitted, with the message.
pub fn check(quota: &TenantQuota, held: &Demand, demand: &Demand) -> QuotaCheck {
    let gpus = demand.gpus.iter().map(|(s, g)| GpuUse {
        series: s,
        need: *g,
        used: held.gpus.get(s).copied().unwrap_or(0),
        limit: quota.gpu_limit(s).copied(),
    });
    match judge(quota, held, gpus, demand.cpus, demand.memory_gb) {
        Verdict::Within => QuotaCheck::Within,
        Verdict::Borrow(o) => QuotaCheck::Borrow(o.message(&quota.tenant, Claimant::Job)),
        Verdict::Exceeded(o) => QuotaCheck::Exceeded(o.message(&quota.tenant, Claimant::Job)),
    }
}

/// Why a job (or playground, as `claimant` says) can never be admitted under `quota` (it alone is
/// above a limit that does not borrow), for refusing it at submission; `None` when it can.
pub fn never_within(quota: &TenantQuota, demand: &Demand, claimant: Claimant) -> Option<String> {
    let tenant = &quota.tenant;
    let noun = claimant.noun();
    let mut reasons = Vec::new();
    for (series, need) in &demand.gpus {
        if let Some(limit) = quota.gpu_limit(series)
            && !limit.borrow
            && *need > limit.gpus
        {
            reasons.push(format!(
                "tenant {tenant}'s quota is {} {series} GPUs; this {noun} needs {need}",
                limit.gpus
            ));
        }
    }
    if let Some(cpu) = &quota.cpu
        && !cpu.borrow
    {
        let limits = [
            (cpu.cpus, demand.cpus, "CPUs"),
            (cpu.memory_gb, demand.memory_gb, "GiB of memory"),
        ];
        for (limit, need, what) in limits {
            if let Some(max) = limit
                && need > max + 1e-9
            {
                reasons.push(format!(
                    "tenant {tenant}'s quota is {} {what} for CPU-only jobs; this {noun} needs {}",
                    plain(max),
                    plain(need)
                ));
            }
        }
    }
    if reasons.is_empty() {
        return None;
    }
    Some(format!(
        "{}: ask an operator to raise the quota (tuneplane admin quota set) or make the {noun} smaller",
        reasons.join("; ")
    ))
}

#[cfg(test)]
mod tests;
