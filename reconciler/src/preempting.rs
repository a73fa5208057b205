//! The wait of a job admitted onto the nodes of preempted jobs (docs/design.md §8, step 3b):
//! while a victim's pods still stop, its pending reason is `Preempting` with the count and the
//! time left; a victim that completed a checkpoint since the notice has its remaining pods deleted
//! at once rather than at the end of their grace. Called by [`crate::sync`].

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;
use tuneplane_core::job::{JobRecord, JobState, PendingReason};
use tuneplane_core::outputs::latest_checkpoint;
use tuneplane_core::preemption::VictimRef;
use tuneplane_core::render::{attempt_workload_name, label_value};

use crate::Ctx;
use crate::cluster::{Cluster, belongs_to, pod_info};
use crate::error::{Error, Result};
use crate::watched_pod::WatchedPod;

/// The pods of `victim`'s stopped attempt that have not ended.
fn victim_pods<'c>(cluster: &'c Cluster, victim: &VictimRef) -> Vec<&'c WatchedPod> {
    let workload = attempt_workload_name(&victim.job_id, victim.attempt);
    cluster
        .job_pods(&victim.namespace, &label_value(&victim.job_id))
        .into_iter()
        .filter(|p| belongs_to(&p.metadata, &victim.job_id, &workload))
        .filter(|p| !pod_info(p).terminal)
        .collect()
}

/// For an admitted `job` that preempted: how many of its victims' pods still stop, and the
/// pending reason to show while they do (`None` once they are all gone). Victims that completed
/// a checkpoint since the notice have their remaining pods deleted at once.
pub async fn follow(
    ctx: &Ctx,
    cluster: &Cluster,
    job: &JobRecord,
    now: i64,
) -> Result<Option<(PendingReason, String)>> {
    let Some(preempting) = job.preempting.as_ref() else {
        return Ok(None);
    };
    if job.state != JobState::Admitted {
        return Ok(None);
    }
    let mut stopping = 0;
    for victim in &preempting.victims {
        let pods = victim_pods(cluster, victim);
        if pods.is_empty() {
            continue;
        }
        stopping += 1;
        let saved = victim_saved_since(ctx, victim, preempting.at_ms, now).await?;
        if saved {
            force_delete(ctx, &pods).await?;
        }
    }
    Ok((stopping > 0).then(|| (PendingReason::Preempting, preempting.message(stopping, now))))
}

/// How long a victim's checkpoint lookup answers for while it stops: its pods go at most this
/// much later than its save, and a pass does not list a victim's checkpoints every time.
const SAVED_LOOKUP_TTL_MS: i64 = 2_000;

/// Whether `victim` completed a checkpoint at or after `since_ms` (looked up again every
/// [`SAVED_LOOKUP_TTL_MS`]: this is what lets its pods go before their grace ends).
async fn victim_saved_since(
    ctx: &Ctx,
    victim: &VictimRef,
    since_ms: i64,
    now: i64,
) -> Result<bool> {
    let found = match ctx
        .checkpoints
        .fresh_within(&victim.job_id, now, SAVED_LOOKUP_TTL_MS)
    {
        Some(found) => found,
        None => {
            let found = latest_checkpoint(ctx.blobs.as_ref(), &victim.tenant, &victim.job_id)
                .await
                .map_err(Error::from)?
                .map(|c| tuneplane_core::admission::CheckpointSeen {
                    name: c.name,
                    completed_at_ms: c.completed_at_ms,
                });
            ctx.checkpoints.put(&victim.job_id, now, found.clone());
            found
        }
    };
    Ok(found.is_some_and(|c| c.completed_at_ms >= since_ms))
}

/// Deletes `pods` without their grace (their attempt's checkpoint is saved): those already
/// being deleted, whose grace this shortens. A pod whose workload is not deleted yet is left
/// alone: a Ray attempt's job is being stopped through its head, which must live until Ray ends
/// the driver (`crate::ray_stop`), and a pod deleted under a live RayJob is made again.
async fn force_delete(ctx: &Ctx, pods: &[&WatchedPod]) -> Result<()> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    for pod in pods {
        let (Some(ns), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            continue;
        };
        // Not going yet, or already going without grace.
        if pod.metadata.deletion_timestamp.is_none()
            || pod.metadata.deletion_grace_period_seconds == Some(0)
        {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(ctx.kube.client.clone(), ns);
        let outcome = ctx
            .kube
            .call("delete pod", &format!("{ns}/{name}"), || {
                api.delete(name, &params)
            })
            .await;
        match outcome {
            Err(Error::Kube { source, .. }) if crate::kube_io::is_not_found(&source) => {}
            other => {
                other?;
            }
        }
        tracing::info!(pod = %name, "preempted pod deleted without its grace: its checkpoint is saved");
    }
    Ok(())
}
