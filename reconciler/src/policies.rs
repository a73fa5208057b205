//! A Ray cluster keeps its NetworkPolicy until its last pod is gone. Deleting a RayJob deletes
//! its RayCluster at once, but the Ray pods stop within their grace (up to an hour when a job
//! saves a checkpoint on SIGTERM); until then they still listen on Ray's ports, so their policy
//! must stay. [`linger_if_pods_remain`] keeps a deleted workload's policy while the cluster cache
//! shows pods of it, and [`sweep`] (every pass) deletes it once none remains.
//!
//! What lingers is kept in memory, so a restart would forget it: the sweep also lists the
//! platform's NetworkPolicies in each jobs namespace at its first run and every
//! [`LIST_EVERY`], and takes up any whose workload is gone (one request per namespace).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Resource, ResourceExt};
use tuneplane_core::constants::{JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL};
use tuneplane_core::render::attempt_of_workload;
use tuneplane_core::render::network::{EGRESS_POLICY, PLAYGROUND_POLICY, SINGLE_POD_POLICY};

use crate::Ctx;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::kube_io::is_not_found;

/// How often the platform's NetworkPolicies are listed to find ones a restart forgot.
pub const LIST_EVERY: Duration = Duration::from_secs(600);

/// Policies kept after their workload for its pods, and when the last listing ran.
#[derive(Debug, Default)]
pub struct Lingering {
    /// `(namespace, policy name)` → the job-id label value of its pods.
    policies: HashMap<(String, String), String>,
    /// When the policies were last listed.
    listed: Option<Instant>,
}

/// Whether the cluster cache shows pods of workload `name` (labelled with job `label`, named
/// after the workload: KubeRay names its cluster and pods `<workload>-...`).
fn pods_remain(cluster: &Cluster, namespace: &str, label: &str, name: &str) -> bool {
    let prefix = format!("{name}-");
    cluster
        .job_pods(namespace, label)
        .iter()
        .any(|p| p.name_any() == name || p.name_any().starts_with(&prefix))
}

/// When workload `name` of job `job_id` is deleted while pods of it remain, keeps its
/// NetworkPolicy for [`sweep`] to delete once they are gone; `true` when it is kept.
pub fn linger_if_pods_remain(
    ctx: &Ctx,
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    job_id: &str,
) -> bool {
    let label = tuneplane_core::render::label_value(job_id);
    if !pods_remain(cluster, namespace, &label, name) {
        return false;
    }
    let mut lingering = ctx.lingering.lock().unwrap_or_else(|p| p.into_inner());
    lingering
        .policies
        .insert((namespace.to_owned(), name.to_owned()), label);
    true
}

/// Lists the platform's NetworkPolicies of each jobs namespace and takes up those whose
/// workload is gone (not one of `active`'s current attempts, no RayJob or Pod of that name),
/// made longer ago than the cache may lag a create.
async fn take_up_forgotten(
    ctx: &Ctx,
    cluster: &Cluster,
    active: &HashMap<String, u32>,
) -> Result<()> {
    let params = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let now = jiff::Timestamp::now().as_second();
    let trust = i64::try_from(crate::cluster::TRUST_OWN_CREATE.as_secs()).unwrap_or(i64::MAX);
    for namespace in &ctx.config.job_namespaces {
        let api: Api<NetworkPolicy> = Api::namespaced(ctx.kube.client.clone(), namespace);
        let list = ctx
            .kube
            .call("list networkpolicies", namespace, || api.list(&params))
            .await?;
        for policy in list.items {
            let name = policy.name_any();
            if [EGRESS_POLICY, PLAYGROUND_POLICY, SINGLE_POD_POLICY].contains(&name.as_str()) {
                continue;
            }
            let Some(job_id) = policy.labels().get(JOB_ID_LABEL).cloned() else {
                continue;
            };
            let current = attempt_of_workload(&job_id, &name)
                .is_some_and(|a| active.get(&job_id) == Some(&a));
            let young = policy
                .meta()
                .creation_timestamp
                .as_ref()
                .is_none_or(|t| now - t.0.as_second() < trust);
            let workload_there = cluster.rayjob(namespace, &name).is_some()
                || cluster.pod(namespace, &name).is_some();
            if current || young || workload_there {
                continue;
            }
            let label = tuneplane_core::render::label_value(&job_id);
            ctx.lingering
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .policies
                .insert((namespace.clone(), name), label);
        }
    }
    Ok(())
}

/// Deletes each lingering policy whose pods are all gone; lists the platform's policies first
/// when [`LIST_EVERY`] has passed (or never ran in this process).
pub async fn sweep(ctx: &Ctx, cluster: &Cluster, active: &HashMap<String, u32>) -> Result<()> {
    let due = {
        let lingering = ctx.lingering.lock().unwrap_or_else(|p| p.into_inner());
        lingering.listed.is_none_or(|at| at.elapsed() >= LIST_EVERY)
    };
    if due {
        take_up_forgotten(ctx, cluster, active).await?;
        ctx.lingering
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .listed = Some(Instant::now());
    }
    let done: Vec<(String, String)> = {
        let lingering = ctx.lingering.lock().unwrap_or_else(|p| p.into_inner());
        lingering
            .policies
            .iter()
            .filter(|((ns, name), label)| {
                !pods_remain(cluster, ns, label, name) && cluster.rayjob(ns, name).is_none()
            })
            .map(|(key, _)| key.clone())
            .collect()
    };
    let params = DeleteParams::background();
    for (namespace, name) in done {
        let api: Api<NetworkPolicy> = Api::namespaced(ctx.kube.client.clone(), &namespace);
        let object = format!("{namespace}/{name}");
        let gone = ctx
            .kube
            .call("delete networkpolicy", &object, || {
                api.delete(&name, &params)
            })
            .await;
        match gone {
            Ok(_) => {}
            Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
            Err(e) => return Err(e),
        }
        tracing::info!(policy = %object, "network policy deleted after the last pod of its workload");
        ctx.lingering
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .policies
            .remove(&(namespace, name));
    }
    Ok(())
}

/// How many policies linger (for tests and the pass report).
pub fn lingering_count(ctx: &Ctx) -> usize {
    ctx.lingering
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .policies
        .len()
}
