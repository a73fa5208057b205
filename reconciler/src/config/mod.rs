//! Typed configuration, parsed once at startup from `TUNEPLANE_*` variables (docs/design.md §9).
//!
//! A bad value fails startup with the variable's name. Nothing reads the environment later.

use std::net::SocketAddr;
use std::time::Duration;

use tuneplane_core::capacity::GpuShare;
use tuneplane_core::render::{CapsuleDelivery, RenderSettings, Toleration};

use crate::error::{Error, Result};

pub mod process;

pub use process::StoreSettings;

/// Jobs synced or admitted at the same time within a pass.
pub const PASS_CONCURRENCY: usize = 16;

/// Namespace of the reconciler itself (its Lease lives there).
pub const ENV_NAMESPACE: &str = "TUNEPLANE_NAMESPACE";
/// `1` (default): pods request `nvidia.com/gpu`; `0`: they do not (kind/CI), Ray keeps `num-gpus`;
/// `presigned` (default) or `init-container` (named in core: `tuneplane render` reads them too).
pub use tuneplane_core::render::{ENV_CAPSULE_DELIVERY, ENV_GPU_PASSTHROUGH};
/// JSON list of tolerations added to every workload (default: tolerate the `nvidia.com/gpu` taint).
pub const ENV_TOLERATIONS: &str = "TUNEPLANE_TOLERATIONS";
/// Upper bound on any job's pre-running deadline, seconds (optional).
pub const ENV_PRE_RUNNING_DEADLINE: &str = "TUNEPLANE_PRE_RUNNING_DEADLINE_SECONDS";
/// Milliseconds between passes when no watch event arrives (default 3000).
pub const ENV_PASS_INTERVAL_MS: &str = "TUNEPLANE_PASS_INTERVAL_MS";
/// Lease name (default `tuneplane-reconciler`).
pub const ENV_LEASE_NAME: &str = "TUNEPLANE_LEASE_NAME";
/// Lease duration in seconds (default 15).
pub const ENV_LEASE_SECONDS: &str = "TUNEPLANE_LEASE_SECONDS";
/// This replica's identity in the Lease (default `$POD_NAME`, then `$HOSTNAME`).
pub const ENV_IDENTITY: &str = "TUNEPLANE_IDENTITY";
/// Address of `/metrics` and `/healthz` (default `0.0.0.0:9090`).
pub const ENV_METRICS_ADDR: &str = "TUNEPLANE_METRICS_ADDR";
/// Client-side rate limit toward the API server, requests per second (default 20).
pub const ENV_KUBE_QPS: &str = "TUNEPLANE_KUBE_QPS";
/// Burst of the client-side rate limit (default 40).
pub const ENV_KUBE_BURST: &str = "TUNEPLANE_KUBE_BURST";
/// RayJob `ttlSecondsAfterFinished` fallback (default 3600).
pub const ENV_TTL_AFTER_FINISHED: &str = "TUNEPLANE_TTL_AFTER_FINISHED_SECONDS";
/// Namespace of playground pods (default `tuneplane-jobs`).
pub const ENV_PLAYGROUND_NAMESPACE: &str = "TUNEPLANE_PLAYGROUND_NAMESPACE";
/// Comma-separated namespaces jobs run in (every tenant namespace of the functions'
/// `TUNEPLANE_TENANT_NAMESPACES` and their default namespace; default `tuneplane-jobs`): the
/// reconciler watches Events and RayJobs and reads logs there only, as its RBAC allows.
pub const ENV_JOB_NAMESPACES: &str = "TUNEPLANE_JOB_NAMESPACES";
/// Image of playground pods (default: core's `RenderSettings`, a vLLM OpenAI server).
pub const ENV_PLAYGROUND_IMAGE: &str = "TUNEPLANE_PLAYGROUND_IMAGE";
/// Namespace of the KubeRay operator, whose pods may reach jobs' dashboard gates (default
/// `kuberay-system`).
pub const ENV_OPERATOR_NAMESPACE: &str = "TUNEPLANE_OPERATOR_NAMESPACE";
/// Comma-separated IPv4 CIDRs the API server's proxy traffic comes from, allowed to jobs'
/// dashboard gates (default none).
pub const ENV_API_SERVER_CIDRS: &str = "TUNEPLANE_API_SERVER_CIDRS";
/// Comma-separated IPv4 CIDRs the API's playground proxy connects from (the counterpart of the
/// functions' `TUNEPLANE_PLAYGROUND_POD_CIDRS`): the only sources a playground's server port
/// accepts (default none: no pod reaches a playground).
pub const ENV_PLAYGROUND_PROXY_CIDRS: &str = "TUNEPLANE_PLAYGROUND_PROXY_CIDRS";
/// The cluster's DNS pods, `namespace/label=value` (default `kube-system/k8s-app=kube-dns`), or
/// `off`: every pod may reach them on port 53.
pub const ENV_EGRESS_DNS: &str = "TUNEPLANE_EGRESS_DNS";
/// Where pods reach the TunePlane API and the object store, `CIDR[:PORT]`, comma-separated
/// (default `0.0.0.0/0:443`: public HTTPS), with `TUNEPLANE_EGRESS_DENY_CIDRS` carved out.
pub const ENV_EGRESS_PLATFORM: &str = "TUNEPLANE_EGRESS_PLATFORM";
/// Ranges no pod reaches through the platform destinations (default: the private ranges, CGNAT,
/// link-local with the metadata address, `0.0.0.0/8`).
pub const ENV_EGRESS_DENY_CIDRS: &str = "TUNEPLANE_EGRESS_DENY_CIDRS";
/// Further destinations every pod may reach, `CIDR[:PORT]`, comma-separated, allowed as written
/// (a package mirror, an internal registry; default none).
pub const ENV_EGRESS_ALLOW: &str = "TUNEPLANE_EGRESS_ALLOW";
/// The quota of tenants without their own (a quota's JSON without `tenant`; the functions read
/// the same variable); unset: such tenants are unlimited.
pub const ENV_DEFAULT_QUOTA: &str = "TUNEPLANE_DEFAULT_QUOTA";
/// Bearer token a scrape sends to see the per-tenant metrics (`tuneplane_tenant_*`); without it
/// (or when unset) `/metrics` leaves them out.
pub const ENV_METRICS_TOKEN: &str = "TUNEPLANE_METRICS_TOKEN";
/// Longest validity of a presigned capsule URL, seconds (default 604800, S3's limit).
pub const ENV_MAX_URL_SECONDS: &str = "TUNEPLANE_MAX_PRESIGN_SECONDS";
/// CPU cores each free GPU keeps for GPU jobs: CPU-only jobs may not use them (default 4).
pub const ENV_GPU_SHARE_CPUS: &str = "TUNEPLANE_GPU_SHARE_CPUS";
/// Memory each free GPU keeps for GPU jobs, GiB (default 32).
pub const ENV_GPU_SHARE_MEMORY_GB: &str = "TUNEPLANE_GPU_SHARE_MEMORY_GB";
/// Most bytes of a job's logs its archive keeps, shared by its containers; a longer log keeps its
/// end (default 256 MiB; bytes, or with a `Ki`, `Mi` or `Gi` suffix).
pub const ENV_LOG_ARCHIVE_MAX_BYTES: &str = "TUNEPLANE_LOG_ARCHIVE_MAX_BYTES";

/// Seconds a node a job runs on may stay NotReady before the job's attempt is counted lost to
/// the infrastructure and requeued (default 40).
pub const ENV_NODE_LOST_GRACE: &str = "TUNEPLANE_NODE_LOST_GRACE_SECONDS";
/// Whether running jobs are preempted for quota reclaim and priority (`on` / `off`).
pub const ENV_PREEMPTION: &str = "TUNEPLANE_PREEMPTION";
/// How long a job's attempt runs before it may be preempted.
pub const ENV_PREEMPTION_MIN_RUN: &str = "TUNEPLANE_PREEMPTION_MIN_RUN_SECONDS";
/// Comma-separated taint keys that announce a node's interruption (a spot reclaim, a scale-down):
/// a running job on such a node is stopped with its grace and requeued (default
/// [`DEFAULT_INTERRUPTION_TAINTS`]).
pub const ENV_INTERRUPTION_TAINTS: &str = "TUNEPLANE_INTERRUPTION_TAINTS";

/// Taint keys that announce a node is about to go, as the common tools put them:
/// AWS Node Termination Handler (spot interruption, rebalance and scheduled-event notices),
/// Karpenter's disruption taint, the cluster autoscaler's scale-down taint, GKE's
/// impending-termination taint for spot VMs, and Kubernetes' own out-of-service taint.
pub const DEFAULT_INTERRUPTION_TAINTS: &[&str] = &[
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/scheduled-maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination",
    "karpenter.sh/disrupted",
    "ToBeDeletedByClusterAutoscaler",
    "cloud.google.com/impending-node-termination",
    "node.kubernetes.io/out-of-service",
];

/// The API's base URL as jobs' pods reach it (e.g. `https://api.tuneplane.example`): with
/// [`ENV_GRANT_KEY`], each attempt gets a grant to write its outputs and checkpoints there.
pub const ENV_API_URL: &str = "TUNEPLANE_API_URL";
/// Hex key (at least 32 bytes) attempts' grants are signed with; the API's must be the same.
pub const ENV_GRANT_KEY: &str = "TUNEPLANE_GRANT_KEY";

/// `1`: job-event callbacks may go to loopback receivers, over http too (`tuneplane dev` sets
/// it; default 0). The functions read the same variable for the check at submit.
pub const ENV_CALLBACKS_ALLOW_LOOPBACK: &str = "TUNEPLANE_CALLBACKS_ALLOW_LOOPBACK";
/// The API's public base URL, for the links callbacks carry (default: none, no links).
pub const ENV_PUBLIC_URL: &str = "TUNEPLANE_PUBLIC_URL";
/// Most undelivered callback deliveries per tenant before new ones are given up (default 1000).
pub const ENV_CALLBACK_MAX_OUTSTANDING: &str = "TUNEPLANE_CALLBACK_MAX_OUTSTANDING";

/// Smallest accepted [`ENV_LOG_ARCHIVE_MAX_BYTES`]: 1 MiB.
pub const MIN_LOG_ARCHIVE_BYTES: u64 = 1 << 20;
/// Largest accepted [`ENV_LOG_ARCHIVE_MAX_BYTES`]: 64 GiB.
pub const MAX_LOG_ARCHIVE_BYTES: u64 = 64 << 30;

/// A size in bytes: a whole number, optionally with a binary suffix (`Ki`, `Mi`, `Gi`).
fn parse_bytes(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    let (digits, unit) = match raw
        .len()
        .checked_sub(2)
        .and_then(|i| raw.get(i..).map(|u| (i, u)))
    {
        Some((i, "Ki")) => (&raw[..i], 1u64 << 10),
        Some((i, "Mi")) => (&raw[..i], 1 << 20),
        Some((i, "Gi")) => (&raw[..i], 1 << 30),
        _ => (raw, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(unit)
}

impl Config {
    /// The namespaces the reconciler reads Events, RayJobs and logs in: the job namespaces and
    /// the playground namespace, each once, sorted.
    pub fn watched_namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self.job_namespaces.clone();
        all.push(self.playground_namespace.clone());
        all.sort();
        all.dedup();
        all
    }
}

/// The comma-separated IPv4 CIDRs of `var` (empty entries skipped); a bad one is named with
/// `example` of a good one.
fn cidr_list(var: &'static str, value: &str, example: &str) -> Result<Vec<String>> {
    value
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|cidr| {
            valid_cidr(cidr)
                .then(|| cidr.to_owned())
                .ok_or_else(|| Error::Config {
                    var,
                    message: format!("{cidr:?} is not an IPv4 CIDR such as {example}"),
                })
        })
        .collect()
}

/// Whether `cidr` is `a.b.c.d/n` with `n` at most 32.
fn valid_cidr(cidr: &str) -> bool {
    cidr.split_once('/').is_some_and(|(ip, bits)| {
        ip.parse::<std::net::Ipv4Addr>().is_ok() && bits.parse::<u8>().is_ok_and(|b| b <= 32)
    })
}

/// The reconciler's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The reconciler's own namespace, where its Lease lives (default `tuneplane-system`).
    pub namespace: String,
    /// Rendering settings (GPU passthrough, delivery, tolerations, TTL).
    pub render: RenderSettings,
    /// Cap on pre-running deadlines.
    pub pre_running_cap: Option<Duration>,
    /// Time between passes without watch events.
    pub pass_interval: Duration,
    /// Name of the Lease replicas contend for (in `namespace`).
    pub lease_name: String,
    /// How long a Lease holder may go without renewing before another replica may take over.
    pub lease_duration: Duration,
    /// This replica's name as the Lease's holder: `TUNEPLANE_IDENTITY`, else `$POD_NAME`, else
    /// `$HOSTNAME`; unique per replica, or two replicas would both believe they lead.
    pub identity: String,
    /// Metrics/health address.
    pub metrics_addr: SocketAddr,
    /// API requests per second.
    pub kube_qps: u32,
    /// API request burst.
    pub kube_burst: u32,
    /// Namespace of playground pods (default `tuneplane-jobs`, where jobs run).
    pub playground_namespace: String,
    /// Namespaces jobs run in ([`ENV_JOB_NAMESPACES`]).
    pub job_namespaces: Vec<String>,
    /// The quota of tenants without their own.
    pub default_quota: tuneplane_core::quota::DefaultQuota,
    /// Token that unlocks the per-tenant metrics on `/metrics`.
    pub metrics_token: Option<String>,
    /// Longest presigned URL validity.
    pub max_presign: Duration,
    /// What each free GPU keeps of its node for GPU jobs.
    pub gpu_share: GpuShare,
    /// Most bytes of a job's logs its archive keeps (`logs::Budget` shares them).
    pub log_archive_max_bytes: u64,
    /// How long a node of a running job may be NotReady before the attempt is lost.
    pub node_lost_grace: Duration,
    /// Taint keys that announce a node's interruption.
    pub interruption_taints: Vec<String>,
    /// Whether running jobs are preempted (quota reclaim, priority within a tenant).
    pub preemption: bool,
    /// How long an attempt runs before it may be preempted.
    pub preemption_min_run: Duration,
    /// Where jobs and blobs live; `None` when unset (the binary refuses to start; tests build
    /// their own stores).
    pub stores: Option<StoreSettings>,
    /// JSON log lines ([`process::ENV_LOG_FORMAT`]).
    pub json_logs: bool,
    /// The callback sender's settings.
    pub callbacks: crate::callback::CallbackSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            namespace: "tuneplane-system".into(),
            render: RenderSettings::default(),
            pre_running_cap: None,
            pass_interval: Duration::from_secs(3),
            lease_name: "tuneplane-reconciler".into(),
            lease_duration: Duration::from_secs(15),
            identity: "tuneplane-reconciler".into(),
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 9090)),
            kube_qps: 20,
            kube_burst: 40,
            playground_namespace: tuneplane_core::constants::DEFAULT_NAMESPACE.into(),
            job_namespaces: vec![tuneplane_core::constants::DEFAULT_NAMESPACE.into()],
            default_quota: Default::default(),
            metrics_token: None,
            max_presign: Duration::from_secs(604_800),
            gpu_share: GpuShare::default(),
            log_archive_max_bytes: crate::logs::DEFAULT_MAX_BYTES,
            node_lost_grace: Duration::from_secs(40),
            interruption_taints: DEFAULT_INTERRUPTION_TAINTS
                .iter()
                .map(|t| (*t).to_owned())
                .collect(),
            preemption: true,
            preemption_min_run: Duration::from_secs(
                tuneplane_core::admission::PreemptionRules::DEFAULT_MIN_RUN_SECONDS,
            ),
            stores: None,
            json_logs: true,
            callbacks: Default::default(),
        }
    }
}

/// The callback sender's settings from [`ENV_CALLBACKS_ALLOW_LOOPBACK`], [`ENV_PUBLIC_URL`] and
/// [`ENV_CALLBACK_MAX_OUTSTANDING`].
fn callback_settings(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<crate::callback::CallbackSettings> {
    let mut c = crate::callback::CallbackSettings::default();
    if let Some(v) = get(ENV_CALLBACKS_ALLOW_LOOPBACK) {
        c.allow_loopback = match v.trim() {
            "1" | "true" => true,
            "0" | "false" | "" => false,
            other => {
                return Err(bad(
                    ENV_CALLBACKS_ALLOW_LOOPBACK,
                    format!("{other:?}: use 1 or 0"),
                ));
            }
        };
    }
    if let Some(v) = get(ENV_PUBLIC_URL).filter(|v| !v.trim().is_empty()) {
        let v = v.trim().trim_end_matches('/').to_owned();
        if !(v.starts_with("https://") || v.starts_with("http://")) {
            return Err(bad(
                ENV_PUBLIC_URL,
                format!("{v:?} is not an http(s) URL (e.g. https://api.tuneplane.example)"),
            ));
        }
        c.public_url = Some(v);
    }
    if let Some(v) = get(ENV_CALLBACK_MAX_OUTSTANDING) {
        let n: usize = number(ENV_CALLBACK_MAX_OUTSTANDING, &v, "a whole number")?;
        if !(1..=1_000_000).contains(&n) {
            return Err(bad(
                ENV_CALLBACK_MAX_OUTSTANDING,
                format!("{n} is outside 1..=1000000"),
            ));
        }
        c.max_outstanding = n;
    }
    Ok(c)
}

fn bad(var: &'static str, message: impl Into<String>) -> Error {
    Error::Config {
        var,
        message: message.into(),
    }
}

fn number<T: std::str::FromStr>(var: &'static str, raw: &str, what: &str) -> Result<T> {
    raw.trim()
        .parse::<T>()
        .map_err(|_| bad(var, format!("{raw:?} is not {what}")))
}

impl Config {
    /// The create requests one pass's admissions may spend: what the client's rate limit sends in
    /// one pass interval, but at most one second's worth (at least 10), so a pass never plans
    /// further ahead than it can act soon: a job that arrives meanwhile, another tenant's first
    /// among them, waits at most about a second of creates before the pass that plans it.
    pub fn requests_per_pass(&self) -> usize {
        let secs = self.pass_interval.as_secs_f64().min(1.0);
        ((f64::from(self.kube_qps) * secs) as usize).max(10)
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads settings through `get` (the environment in production, a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut c = Config::default();
        if let Some(v) = get(ENV_NAMESPACE) {
            c.namespace = v;
        }
        if let Some(v) = get(ENV_GPU_PASSTHROUGH) {
            c.render.gpu_passthrough = tuneplane_core::render::parse_gpu_passthrough(&v)
                .ok_or_else(|| bad(ENV_GPU_PASSTHROUGH, format!("{:?}: use 1 or 0", v.trim())))?;
        }
        if let Some(v) = get(ENV_CAPSULE_DELIVERY) {
            c.render.delivery = CapsuleDelivery::parse(v.trim()).ok_or_else(|| {
                bad(
                    ENV_CAPSULE_DELIVERY,
                    format!("{v:?}: use presigned or init-container"),
                )
            })?;
        }
        if let Some(v) = get(ENV_TOLERATIONS) {
            c.render.tolerations = serde_json::from_str::<Vec<Toleration>>(&v).map_err(|e| {
                bad(
                    ENV_TOLERATIONS,
                    format!("not a JSON list of tolerations: {e}"),
                )
            })?;
        }
        if let Some(v) = get(ENV_PRE_RUNNING_DEADLINE) {
            let secs: u64 = number(ENV_PRE_RUNNING_DEADLINE, &v, "a number of seconds")?;
            c.pre_running_cap = Some(Duration::from_secs(secs));
        }
        if let Some(v) = get(ENV_PASS_INTERVAL_MS) {
            let ms: u64 = number(ENV_PASS_INTERVAL_MS, &v, "a number of milliseconds")?;
            c.pass_interval = Duration::from_millis(ms.max(10));
        }
        if let Some(v) = get(ENV_LEASE_NAME) {
            c.lease_name = v;
        }
        if let Some(v) = get(ENV_LEASE_SECONDS) {
            let secs: f64 = number(ENV_LEASE_SECONDS, &v, "a number of seconds")?;
            if !(0.1..=3600.0).contains(&secs) {
                return Err(bad(ENV_LEASE_SECONDS, "must be between 0.1 and 3600"));
            }
            c.lease_duration = Duration::from_secs_f64(secs);
        }
        c.identity = get(ENV_IDENTITY)
            .or_else(|| get("POD_NAME"))
            .or_else(|| get("HOSTNAME"))
            .unwrap_or(c.identity);
        if let Some(v) = get(ENV_METRICS_ADDR) {
            c.metrics_addr = number(ENV_METRICS_ADDR, &v, "a socket address like 0.0.0.0:9090")?;
        }
        if let Some(v) = get(ENV_KUBE_QPS) {
            c.kube_qps = number::<u32>(ENV_KUBE_QPS, &v, "a whole number")?.max(1);
        }
        if let Some(v) = get(ENV_KUBE_BURST) {
            c.kube_burst = number::<u32>(ENV_KUBE_BURST, &v, "a whole number")?.max(1);
        }
        if let Some(v) = get(ENV_TTL_AFTER_FINISHED) {
            c.render.ttl_after_finished_seconds =
                number::<u32>(ENV_TTL_AFTER_FINISHED, &v, "a whole number")?.max(1);
        }
        if let Some(v) = get(ENV_PLAYGROUND_NAMESPACE) {
            c.playground_namespace = v;
        }
        if let Some(v) = get(ENV_JOB_NAMESPACES) {
            let names: Vec<String> = v
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            if let Some(bad) = names
                .iter()
                .find(|n| !tuneplane_core::spec::is_dns_label(n, 63))
            {
                return Err(Error::Config {
                    var: ENV_JOB_NAMESPACES,
                    message: format!("{bad:?} is not a namespace name (a DNS label)"),
                });
            }
            if names.is_empty() {
                return Err(Error::Config {
                    var: ENV_JOB_NAMESPACES,
                    message: "name at least one namespace, e.g. tuneplane-jobs".into(),
                });
            }
            c.job_namespaces = names;
        }
        if let Some(v) = get(ENV_NODE_LOST_GRACE) {
            let secs: u64 = number(ENV_NODE_LOST_GRACE, &v, "a number of seconds")?;
            if secs > 3600 {
                return Err(bad(
                    ENV_NODE_LOST_GRACE,
                    "must be at most 3600 seconds (the taint manager evicts after 300 by default)",
                ));
            }
            c.node_lost_grace = Duration::from_secs(secs);
        }
        if let Some(v) = get(ENV_PREEMPTION) {
            c.preemption = match v.trim() {
                "on" | "true" | "1" => true,
                "off" | "false" | "0" => false,
                other => {
                    return Err(bad(
                        ENV_PREEMPTION,
                        format!(
                            "{other:?} is neither on nor off (off: running jobs are never preempted, quotas are caps only)"
                        ),
                    ));
                }
            };
        }
        if let Some(v) = get(ENV_PREEMPTION_MIN_RUN) {
            let secs: u64 = number(ENV_PREEMPTION_MIN_RUN, &v, "a number of seconds")?;
            if secs > 7 * 86_400 {
                return Err(bad(
                    ENV_PREEMPTION_MIN_RUN,
                    "must be at most 604800 seconds (a week); set TUNEPLANE_PREEMPTION=off to never preempt",
                ));
            }
            c.preemption_min_run = Duration::from_secs(secs);
        }
        if let Some(v) = get(ENV_INTERRUPTION_TAINTS) {
            let keys: Vec<String> = v
                .split(',')
                .map(|k| k.trim().to_owned())
                .filter(|k| !k.is_empty())
                .collect();
            if let Some(k) = keys
                .iter()
                .find(|k| k.len() > 316 || k.chars().any(|c| c.is_whitespace() || c == '='))
            {
                return Err(bad(
                    ENV_INTERRUPTION_TAINTS,
                    format!("{k:?} is not a taint key (e.g. karpenter.sh/disrupted)"),
                ));
            }
            c.interruption_taints = keys;
        }
        // Empty counts as unset: the Deployment reads both from an optional Secret.
        let set = |var| get(var).filter(|v| !v.trim().is_empty());
        match (set(ENV_API_URL), set(ENV_GRANT_KEY)) {
            (None, None) => {}
            (Some(url), Some(key)) => {
                let url = url.trim().trim_end_matches('/').to_owned();
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(bad(
                        ENV_API_URL,
                        format!(
                            "{url:?} is not an http(s) URL (e.g. https://api.tuneplane.example)"
                        ),
                    ));
                }
                c.render.grant_key = Some(
                    tuneplane_core::grant::GrantKey::parse(&key)
                        .map_err(|e| bad(ENV_GRANT_KEY, e))?,
                );
                c.render.api_url = Some(url);
            }
            (Some(_), None) => {
                return Err(bad(
                    ENV_GRANT_KEY,
                    format!(
                        "is unset while {ENV_API_URL} is set: set both (the API's key too) or neither"
                    ),
                ));
            }
            (None, Some(_)) => {
                return Err(bad(
                    ENV_API_URL,
                    format!("is unset while {ENV_GRANT_KEY} is set: set both or neither"),
                ));
            }
        }
        if let Some(v) = get(ENV_PLAYGROUND_IMAGE) {
            c.render.playground_image = v;
        }
        c.callbacks = callback_settings(&get)?;
        if let Some(v) = get(ENV_METRICS_TOKEN) {
            if v.trim().len() < 16 {
                return Err(Error::Config {
                    var: ENV_METRICS_TOKEN,
                    message: "use at least 16 characters (e.g. openssl rand -hex 16)".into(),
                });
            }
            c.metrics_token = Some(v.trim().to_owned());
        }
        if let Some(v) = get(ENV_DEFAULT_QUOTA) {
            c.default_quota =
                tuneplane_core::quota::DefaultQuota::parse(&v).map_err(|message| {
                    Error::Config {
                        var: ENV_DEFAULT_QUOTA,
                        message,
                    }
                })?;
        }
        if let Some(v) = get(ENV_OPERATOR_NAMESPACE) {
            if !tuneplane_core::spec::is_dns_label(v.trim(), 63) {
                return Err(Error::Config {
                    var: ENV_OPERATOR_NAMESPACE,
                    message: format!("{v:?} is not a namespace name (a DNS label)"),
                });
            }
            c.render.network.operator_namespace = v.trim().to_owned();
        }
        if let Some(v) = get(ENV_API_SERVER_CIDRS) {
            c.render.network.api_server_cidrs =
                cidr_list(ENV_API_SERVER_CIDRS, &v, "192.0.2.10/32")?;
        }
        if let Some(v) = get(ENV_PLAYGROUND_PROXY_CIDRS) {
            c.render.network.playground_proxy_cidrs = cidr_list(
                ENV_PLAYGROUND_PROXY_CIDRS,
                &v,
                "10.0.0.0/16 (where the API's proxy connects from)",
            )?;
        }
        let egress = &mut c.render.network.egress;
        if let Some(v) = get(ENV_EGRESS_DNS) {
            egress.dns = if v.trim().eq_ignore_ascii_case("off") {
                None
            } else {
                Some(
                    tuneplane_core::render::egress::DnsPeer::parse(&v).map_err(|message| {
                        Error::Config {
                            var: ENV_EGRESS_DNS,
                            message,
                        }
                    })?,
                )
            };
        }
        for (var, list) in [
            (ENV_EGRESS_PLATFORM, &mut egress.platform),
            (ENV_EGRESS_DENY_CIDRS, &mut egress.deny),
            (ENV_EGRESS_ALLOW, &mut egress.allow),
        ] {
            if let Some(v) = get(var) {
                *list = tuneplane_core::render::egress::Destination::parse_list(&v)
                    .map_err(|message| Error::Config { var, message })?;
            }
        }
        if egress.deny.iter().any(|d| d.port.is_some()) {
            return Err(Error::Config {
                var: ENV_EGRESS_DENY_CIDRS,
                message: "denied ranges are whole networks: write them without a port".into(),
            });
        }
        if let Some(v) = get(ENV_MAX_URL_SECONDS) {
            let secs: u64 = number(ENV_MAX_URL_SECONDS, &v, "a number of seconds")?;
            c.max_presign = Duration::from_secs(secs.max(60));
        }
        for (var, field) in [
            (ENV_GPU_SHARE_CPUS, &mut c.gpu_share.cpus),
            (ENV_GPU_SHARE_MEMORY_GB, &mut c.gpu_share.memory_gb),
        ] {
            if let Some(v) = get(var) {
                let n: f64 = number(var, &v, "a number (per GPU)")?;
                if !n.is_finite() || !(0.0..=1024.0).contains(&n) {
                    return Err(bad(
                        var,
                        format!("{v:?} must be between 0 and 1024 (per GPU)"),
                    ));
                }
                *field = n;
            }
        }
        if let Some(v) = get(ENV_LOG_ARCHIVE_MAX_BYTES) {
            let range = MIN_LOG_ARCHIVE_BYTES..=MAX_LOG_ARCHIVE_BYTES;
            c.log_archive_max_bytes = parse_bytes(&v).filter(|n| range.contains(n)).ok_or_else(|| {
                bad(
                    ENV_LOG_ARCHIVE_MAX_BYTES,
                    format!(
                        "{v:?} is not a size between 1Mi and 64Gi (bytes, or a number with Ki, Mi or Gi, e.g. 256Mi)"
                    ),
                )
            })?;
        }
        c.stores = process::stores(&get)?;
        c.json_logs = process::json_logs(&get)?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn grants_need_the_api_url_and_the_key_together() {
        let with = |pairs: &[(&str, &str)]| {
            let map: std::collections::HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            Config::from_lookup(|k| map.get(k).cloned())
        };
        let key = "ab".repeat(32);
        let c = with(&[(ENV_API_URL, "https://api.example/"), (ENV_GRANT_KEY, &key)]).unwrap();
        assert_eq!(c.render.api_url.as_deref(), Some("https://api.example"));
        assert!(c.render.grant_key.is_some());
        // Both empty (the Deployment's optional Secret is absent): off.
        let off = with(&[(ENV_API_URL, ""), (ENV_GRANT_KEY, "")]).unwrap();
        assert!(off.render.grant_key.is_none() && off.render.api_url.is_none());
        for (pairs, var) in [
            (vec![(ENV_API_URL, "https://api.example")], ENV_GRANT_KEY),
            (vec![(ENV_GRANT_KEY, key.as_str())], ENV_API_URL),
            (
                vec![(ENV_API_URL, "ftp://x"), (ENV_GRANT_KEY, key.as_str())],
                ENV_API_URL,
            ),
            (
                vec![(ENV_API_URL, "https://a"), (ENV_GRANT_KEY, "abcd")],
                ENV_GRANT_KEY,
            ),
        ] {
            let err = with(&pairs).unwrap_err().to_string();
            assert!(err.contains(var), "{err}");
        }
        let bad = with(&[(ENV_NODE_LOST_GRACE, "soon")])
            .unwrap_err()
            .to_string();
        assert!(bad.contains(ENV_NODE_LOST_GRACE), "{bad}");
        for (var, value) in [
            (ENV_PREEMPTION, "sometimes"),
            (ENV_PREEMPTION_MIN_RUN, "-1"),
            (ENV_PREEMPTION_MIN_RUN, "9999999"),
        ] {
            let err = with(&[(var, value)]).unwrap_err().to_string();
            assert!(err.contains(var), "{err}");
        }
        let p = with(&[(ENV_PREEMPTION, "off"), (ENV_PREEMPTION_MIN_RUN, "30")]).unwrap();
        assert!(!p.preemption);
        assert_eq!(p.preemption_min_run, Duration::from_secs(30));
        let d = with(&[]).unwrap();
        assert!(d.preemption);
        assert_eq!(d.preemption_min_run, Duration::from_secs(600));
        let taints = with(&[(ENV_INTERRUPTION_TAINTS, "a/b, c")]).unwrap();
        assert_eq!(
            taints.interruption_taints,
            vec!["a/b".to_owned(), "c".to_owned()]
        );
    }

    #[test]
    fn a_pass_spends_what_its_rate_limit_sends_in_one_interval_at_most_a_second() {
        let c = |qps, ms| Config {
            kube_qps: qps,
            pass_interval: Duration::from_millis(ms),
            ..Config::default()
        };
        assert_eq!(c(20, 3000).requests_per_pass(), 20);
        assert_eq!(c(50, 3000).requests_per_pass(), 50);
        assert_eq!(c(500, 3000).requests_per_pass(), 500);
        assert_eq!(c(500, 100).requests_per_pass(), 50);
        assert_eq!(c(1, 100).requests_per_pass(), 10, "never fewer than 10");
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<Config> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_pass_gpus_through_and_presign() {
        let c = parse(&[]).unwrap();
        assert!(c.render.gpu_passthrough);
        assert_eq!(c.render.delivery, CapsuleDelivery::Presigned);
    }

    #[test]
    fn values_are_parsed_and_bad_ones_name_their_variable() {
        let c = parse(&[
            (ENV_GPU_PASSTHROUGH, "0"),
            (ENV_CAPSULE_DELIVERY, "init-container"),
            (ENV_LEASE_SECONDS, "0.5"),
            (ENV_TOLERATIONS, r#"[{"operator": "Exists"}]"#),
        ])
        .unwrap();
        assert!(!c.render.gpu_passthrough);
        assert_eq!(c.lease_duration, Duration::from_millis(500));
        assert_eq!(c.render.tolerations[0].operator, "Exists");
        let err = parse(&[(ENV_CAPSULE_DELIVERY, "ftp")])
            .err()
            .map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains(ENV_CAPSULE_DELIVERY));
        let err = parse(&[(ENV_KUBE_QPS, "fast")])
            .err()
            .map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains(ENV_KUBE_QPS));
    }

    #[test]
    fn network_policy_peers_are_parsed_and_bad_ones_name_their_variable() {
        let c = parse(&[
            (ENV_OPERATOR_NAMESPACE, "ray-system"),
            (ENV_API_SERVER_CIDRS, "192.0.2.10/32, 198.51.100.0/24"),
        ])
        .unwrap();
        assert_eq!(c.render.network.operator_namespace, "ray-system");
        assert_eq!(
            c.render.network.api_server_cidrs,
            ["192.0.2.10/32", "198.51.100.0/24"]
        );
        for (var, bad) in [
            (ENV_API_SERVER_CIDRS, "192.0.2.10"),
            (ENV_API_SERVER_CIDRS, "192.0.2.10/33"),
            (ENV_OPERATOR_NAMESPACE, "Ray_System"),
        ] {
            let err = parse(&[(var, bad)]).err().map(|e| e.to_string());
            assert!(err.unwrap_or_default().contains(var), "{var}={bad}");
        }
    }

    #[test]
    fn egress_destinations_and_the_playground_proxy_are_parsed_and_bad_ones_name_their_variable() {
        let c = parse(&[
            (ENV_PLAYGROUND_PROXY_CIDRS, "10.0.0.0/16"),
            (ENV_EGRESS_DNS, "dns/app=coredns"),
            (ENV_EGRESS_PLATFORM, "52.216.0.0/15:443"),
            (ENV_EGRESS_ALLOW, "10.20.30.40/32:3128, 198.51.100.0/24"),
        ])
        .unwrap();
        let net = &c.render.network;
        assert_eq!(net.playground_proxy_cidrs, ["10.0.0.0/16"]);
        assert_eq!(
            net.egress.dns.as_ref().map(|d| d.value.as_str()),
            Some("coredns")
        );
        assert_eq!(net.egress.platform.len(), 1);
        assert_eq!(net.egress.allow.len(), 2);
        let off = parse(&[(ENV_EGRESS_DNS, "off")]).unwrap();
        assert!(off.render.network.egress.dns.is_none());
        assert!(!parse(&[]).unwrap().render.network.egress.deny.is_empty());
        for (var, bad) in [
            (ENV_PLAYGROUND_PROXY_CIDRS, "10.0.0.1"),
            (ENV_EGRESS_DNS, "kube-dns"),
            (ENV_EGRESS_PLATFORM, "s3.amazonaws.com:443"),
            (ENV_EGRESS_ALLOW, "10.20.30.40/32:99999"),
            (ENV_EGRESS_DENY_CIDRS, "10.0.0.0/8:443"),
        ] {
            let err = parse(&[(var, bad)]).err().map(|e| e.to_string());
            assert!(err.unwrap_or_default().contains(var), "{var}={bad}");
        }
    }

    #[test]
    fn the_log_archive_cap_takes_sizes_and_names_its_variable_when_wrong() {
        assert_eq!(parse(&[]).unwrap().log_archive_max_bytes, 256 << 20);
        for (raw, bytes) in [
            ("1048576", 1u64 << 20),
            ("512Mi", 512 << 20),
            (" 2Gi ", 2 << 30),
            ("4096Ki", 4 << 20),
            ("64Gi", 64 << 30),
        ] {
            let c = parse(&[(ENV_LOG_ARCHIVE_MAX_BYTES, raw)]).unwrap();
            assert_eq!(c.log_archive_max_bytes, bytes, "{raw}");
        }
        for raw in [
            "",
            "lots",
            "-1",
            "1000",
            "1Ti",
            "65Gi",
            "256MB",
            "99999999999999999999Gi",
        ] {
            let err = parse(&[(ENV_LOG_ARCHIVE_MAX_BYTES, raw)])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(ENV_LOG_ARCHIVE_MAX_BYTES), "{raw:?}: {err}");
            assert!(err.contains("between 1Mi and 64Gi"), "{raw:?}: {err}");
        }
    }

    #[test]
    fn gpu_share_defaults_to_the_spec_defaults_and_rejects_negative_values() {
        let c = parse(&[]).unwrap();
        assert_eq!((c.gpu_share.cpus, c.gpu_share.memory_gb), (4.0, 32.0));
        let c = parse(&[(ENV_GPU_SHARE_CPUS, "8"), (ENV_GPU_SHARE_MEMORY_GB, "0")]).unwrap();
        assert_eq!((c.gpu_share.cpus, c.gpu_share.memory_gb), (8.0, 0.0));
        let err = parse(&[(ENV_GPU_SHARE_CPUS, "-1")])
            .err()
            .map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains(ENV_GPU_SHARE_CPUS));
    }
}
