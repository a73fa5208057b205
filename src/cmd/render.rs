//! `tuneplane render --spec SPEC [--fleet FLEET] [--job-id ID] [--capsule-url URL] [--capsule-sha256 HEX]`:
//! prints the YAML of the RayJob or Pod the reconciler would create for a spec — a dry run for users
//! and a check for reviewers. Rendering is core's, the very functions the reconciler calls.
//!
//! Workloads are pinned to the nodes admission plans. With `--fleet` the job is planned on that
//! fleet with nothing running (as admission would on an idle cluster); without it, placeholder
//! node names stand where the planned nodes go.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use tuneplane_core::admission::{PoolPlacement, plan_admissions};
use tuneplane_core::capacity::{CapacitySnapshot, GpuShare};
use tuneplane_core::fleet::Fleet;
use tuneplane_core::ids::TenantId;
use tuneplane_core::job::JobRecord;
use tuneplane_core::render::{
    CapsuleDelivery, CapsuleRef, ENV_CAPSULE_DELIVERY, ENV_GPU_PASSTHROUGH, RenderSettings,
    parse_gpu_passthrough, render_pod, render_rayjob,
};
use tuneplane_core::spec::WorkloadKind;

/// Placeholder capsule hash when none is given (the capsule is not built by this command).
const PLACEHOLDER_SHA: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Arguments of `render`.
#[derive(clap::Args)]
pub struct Args {
    /// JobSpec file (YAML or JSON).
    #[arg(long)]
    pub spec: PathBuf,
    /// Fleet file; with it, jobs that could never fit the fleet are rejected.
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    /// Job id to render for (the workload is named `tp-<id>`).
    #[arg(long, default_value = "job-preview")]
    pub job_id: tuneplane_core::ids::JobId,
    /// Tenant label value.
    #[arg(long, default_value = "preview")]
    pub tenant: TenantId,
    /// Capsule URL (a presigned URL whose path ends in `.zip`); a placeholder by default.
    #[arg(long)]
    pub capsule_url: Option<String>,
    /// Capsule SHA-256 (64 hex digits); a placeholder by default.
    #[arg(long)]
    pub capsule_sha256: Option<String>,
    /// Request `nvidia.com/gpu` in pod limits (1) or not (0, kind/CI).
    #[arg(long, env = ENV_GPU_PASSTHROUGH, default_value = "1")]
    pub gpu_passthrough: String,
    /// Capsule delivery: `presigned` or `init-container`.
    #[arg(long, env = ENV_CAPSULE_DELIVERY, default_value = "presigned")]
    pub capsule_delivery: String,
}

fn settings(args: &Args) -> anyhow::Result<RenderSettings> {
    let gpu_passthrough = parse_gpu_passthrough(&args.gpu_passthrough).with_context(|| {
        format!(
            "--gpu-passthrough ({ENV_GPU_PASSTHROUGH}): {:?}: use 1 or 0",
            args.gpu_passthrough
        )
    })?;
    let delivery = CapsuleDelivery::parse(&args.capsule_delivery).with_context(|| {
        format!(
            "--capsule-delivery ({ENV_CAPSULE_DELIVERY}): {:?}: use presigned or init-container",
            args.capsule_delivery
        )
    })?;
    Ok(RenderSettings {
        gpu_passthrough,
        delivery,
        ..RenderSettings::default()
    })
}

/// The nodes the job would be pinned to: planned on the idle fleet, or placeholders.
fn plan(job: &JobRecord, fleet: Option<&std::path::Path>) -> anyhow::Result<Vec<PoolPlacement>> {
    let Some(path) = fleet else {
        return Ok(job
            .spec
            .pools
            .iter()
            .map(|p| PoolPlacement {
                pool: p.name.clone(),
                nodes: (0..p.nodes)
                    .map(|k| format!("planned-node-{}-{k}", p.name))
                    .collect(),
            })
            .collect());
    };
    let fleet = Fleet::from_yaml(&super::read_text(path)?)?;
    let capacity = CapacitySnapshot::idle(&fleet, GpuShare::default());
    let plan = plan_admissions(std::slice::from_ref(job), &capacity, &[], &[]);
    match (plan.admit.into_iter().next(), plan.waiting.first()) {
        (Some(a), _) => Ok(a.placements),
        (None, Some(w)) => bail!(
            "the job cannot be placed on the fleet in {}: {:?}: {}",
            path.display(),
            w.reason,
            w.message
        ),
        (None, None) => bail!(
            "the job cannot be placed on the fleet in {}",
            path.display()
        ),
    }
}

/// Prints the workload as YAML, or the spec's problems (exit 1).
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let settings = settings(args)?;
    let Some(v) = super::load_spec(&args.spec, args.fleet.as_deref())? else {
        return Ok(ExitCode::FAILURE);
    };
    let sha = args
        .capsule_sha256
        .clone()
        .unwrap_or_else(|| PLACEHOLDER_SHA.to_owned());
    let url = args.capsule_url.clone().unwrap_or_else(|| {
        format!(
            "https://capsules.example.invalid/{}?presigned=placeholder",
            tuneplane_core::capsule::storage_key(&sha)
        )
    });
    let mut job = JobRecord::new_queued(args.job_id.clone(), args.tenant.clone(), v.spec, &sha, 0);
    job.placements = plan(&job, args.fleet.as_deref())?;
    let capsule = CapsuleRef { sha256: sha, url };
    let object = match job.spec.kind() {
        WorkloadKind::RayJob => render_rayjob(&job, &capsule, &settings)?.to_json(),
        WorkloadKind::Pod => render_pod(&job, &capsule, &settings)?,
    };
    print!("{}", yaml_serde::to_string(&object)?);
    Ok(ExitCode::SUCCESS)
}
