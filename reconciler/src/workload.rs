//! Creating and deleting workloads: render with core, convert to typed objects at the edge, create
//! idempotently (deterministic names; 409 AlreadyExists is success), delete with background
//! propagation (404 is success).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use tuneplane_core::capsule::storage_key;
use tuneplane_core::constants::FIELD_MANAGER;
use tuneplane_core::job::JobRecord;
use tuneplane_core::render::{CapsuleRef, render_pod, render_rayjob, workload_name};
use tuneplane_core::spec::WorkloadKind;
use tuneplane_core::store::PresignMethod;

use crate::Ctx;
use crate::error::{Error, Result};
use crate::kube_io::{is_conflict, is_not_found};
use crate::rayjob::{self, RayJob};

/// Validity of the capsule URL: the pre-running plus the run deadline plus an hour, capped by
/// what the credentials allow (`TUNEPLANE_MAX_PRESIGN_SECONDS`). Each Ray node downloads for
/// itself, so the URL must outlive the latest node to join.
pub fn url_validity(job: &JobRecord, max: Duration) -> Duration {
    let d = &job.spec.deadlines;
    let secs = d
        .pre_running_seconds
        .saturating_add(d.run_seconds)
        .saturating_add(3600);
    Duration::from_secs(secs).min(max)
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

fn created<T>(outcome: Result<T>) -> Result<()> {
    match outcome {
        Ok(_) => Ok(()),
        Err(Error::Kube { source, .. }) if is_conflict(&source) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Renders the job's workload as JSON (what `tuneplane render` prints), signing the capsule URL.
pub async fn render(ctx: &Ctx, job: &JobRecord) -> Result<serde_json::Value> {
    let validity = url_validity(job, ctx.config.max_presign);
    let url = ctx
        .blobs
        .presign(
            PresignMethod::Get,
            &storage_key(&job.capsule_sha256),
            validity,
        )
        .await?
        .url;
    let capsule = CapsuleRef {
        sha256: job.capsule_sha256.clone(),
        url,
    };
    Ok(match job.spec.kind() {
        WorkloadKind::RayJob => render_rayjob(job, &capsule, &ctx.config.render)?,
        WorkloadKind::Pod => render_pod(job, &capsule, &ctx.config.render)?,
    })
}

/// Creates the job's RayJob or Pod unless it exists; returns its name.
pub async fn create(ctx: &Ctx, job: &JobRecord) -> Result<String> {
    let name = workload_name(&job.id);
    let ns = job.spec.namespace.as_str();
    let value = render(ctx, job).await?;
    let object = format!("{ns}/{name}");
    let params = post_params();
    match job.spec.kind() {
        WorkloadKind::RayJob => {
            let typed: RayJob = serde_json::from_value(value).map_err(|source| Error::Convert {
                job_id: job.id.clone(),
                kind: "RayJob",
                source,
            })?;
            let api: Api<RayJob> =
                Api::namespaced_with(ctx.kube.client.clone(), ns, &rayjob::resource());
            created(
                ctx.kube
                    .call("create rayjob", &object, || api.create(&params, &typed))
                    .await,
            )?;
        }
        WorkloadKind::Pod => {
            let typed: Pod = serde_json::from_value(value).map_err(|source| Error::Convert {
                job_id: job.id.clone(),
                kind: "Pod",
                source,
            })?;
            let api: Api<Pod> = Api::namespaced(ctx.kube.client.clone(), ns);
            created(
                ctx.kube
                    .call("create pod", &object, || api.create(&params, &typed))
                    .await,
            )?;
        }
    }
    tracing::info!(job_id = %job.id, workload = %name, capsule = %job.capsule_sha256, "workload created");
    Ok(name)
}

/// Deletes a workload of `kind` (no error if it is gone).
pub async fn delete(ctx: &Ctx, kind: WorkloadKind, namespace: &str, name: &str) -> Result<()> {
    let params = DeleteParams::background();
    let object = format!("{namespace}/{name}");
    let outcome = match kind {
        WorkloadKind::RayJob => {
            let api: Api<RayJob> =
                Api::namespaced_with(ctx.kube.client.clone(), namespace, &rayjob::resource());
            ctx.kube
                .call("delete rayjob", &object, || api.delete(name, &params))
                .await
                .map(|_| ())
        }
        WorkloadKind::Pod => {
            let api: Api<Pod> = Api::namespaced(ctx.kube.client.clone(), namespace);
            ctx.kube
                .call("delete pod", &object, || api.delete(name, &params))
                .await
                .map(|_| ())
        }
    };
    match outcome {
        Err(Error::Kube { source, .. }) if is_not_found(&source) => Ok(()),
        other => other,
    }
}
