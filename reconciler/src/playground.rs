//! Playgrounds, the last step of a pass: create each playground's vLLM pod, record what the pod
//! shows (why it is not running, from the same pod reading as job pending reasons:
//! [`status::pending_from_pods`]), and reclaim the pod and the record at the TTL (or after a
//! delete, which moves the TTL to now).
//!
//! The record is written only when something a user sees changes: the pod's name and namespace
//! once, the state or reason when they change, and a message that changes under the same reason
//! at most every [`MESSAGE_REFRESH_MS`]. A pass over playgrounds whose pods are steady writes
//! nothing.
//!
//! The record keeps the pod's IP (where the API's proxy sends prompts with the server's key) only
//! while the pod runs and is not being deleted ([`serving_ip`]): a pod that is gone, ended or
//! terminating leaves no address behind that another pod could be given.
//!
//! Pod names carry the `pg-` prefix once ([`playground_name`]); records of older versions name
//! their `pg-pg-<id>` pod in `pod_name`, which stays authoritative, and a `pg-pg-<id>` pod that an
//! older version created but never recorded is adopted rather than duplicated.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use tuneplane_core::admission::Reservation;
use tuneplane_core::render::playground::{
    REQUEST_CPUS, REQUEST_MEMORY_GB, key_secret_name, legacy_playground_name, playground_name,
    pod_name_of, render_key_secret,
};
use tuneplane_core::render::render_playground;
use tuneplane_core::store::{PlaygroundRecord, PlaygroundState, PlaygroundStatus};

use crate::cluster::{Cluster, pod_info};
use crate::ctx::PassReport;
use crate::decide::MESSAGE_REFRESH_MS;
use crate::error::{Error, Result};
use crate::kube_io::{is_conflict, is_not_found};
use crate::watched_pod::WatchedPod;
use crate::{Ctx, status};

/// What one pod shows: state, reason and message.
pub type Observation = (PlaygroundState, Option<String>, String);

/// Reads a playground's pod: `Running`; `Failed` when it ended (`ServerExited`, or `TtlExpired`
/// when its `activeDeadlineSeconds` fallback fired); otherwise `Pending` with the reason and
/// message a job's pods would give (`InsufficientGpu` from `PodScheduled=False`, `ImagePull`
/// from the container's waiting reason, `Starting`).
pub fn observe(pod: &WatchedPod) -> Observation {
    let name = pod.name_any();
    let status = pod.status.as_ref();
    let exit = || {
        let t = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.first())
            .and_then(|c| c.state.as_ref()?.terminated.as_ref());
        match t {
            Some(t) => match t.reason.as_deref() {
                Some(why) if !why.is_empty() => {
                    format!(
                        "the vLLM container exited with status {} ({why})",
                        t.exit_code
                    )
                }
                _ => format!("the vLLM container exited with status {}", t.exit_code),
            },
            None => "the vLLM container exited".to_owned(),
        }
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return (
            PlaygroundState::Pending,
            Some("PodDeleting".into()),
            format!("pod {name} is being deleted; the reconciler creates it again once it is gone"),
        );
    }
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("?");
            (
                PlaygroundState::Running,
                None,
                format!(
                    "pod {name} runs on node {node}; vLLM answers once it has loaded the model"
                ),
            )
        }
        Some("Failed") if status.and_then(|s| s.reason.as_deref()) == Some("DeadlineExceeded") => (
            PlaygroundState::Failed,
            Some("TtlExpired".into()),
            format!("pod {name} reached its lifetime (activeDeadlineSeconds)"),
        ),
        Some("Failed" | "Succeeded") => (
            PlaygroundState::Failed,
            Some("ServerExited".into()),
            format!(
                "{}; it is not restarted: delete the playground and create another",
                exit()
            ),
        ),
        _ => {
            let (reason, message) = status::pending_from_pods(&[pod]);
            (
                PlaygroundState::Pending,
                Some(format!("{reason:?}")),
                message,
            )
        }
    }
}

/// Where the API's proxy may reach the server of the playground whose pod is `pod`: the pod's IP
/// while it exists, runs and is not being deleted; `None` otherwise (its IP may soon be another
/// pod's).
pub fn serving_ip(pod: Option<&WatchedPod>) -> Option<String> {
    let pod = pod.filter(|p| p.metadata.deletion_timestamp.is_none())?;
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") {
        return None;
    }
    status.pod_ip.clone().filter(|ip| !ip.is_empty())
}

/// The status to store after `observed`, or `None` to leave the record alone: a new state or
/// reason is written at once (from now); a new message under the same reason at most every
/// [`MESSAGE_REFRESH_MS`], keeping when the reason was first seen.
pub fn next_status(
    current: Option<&PlaygroundStatus>,
    observed: &Observation,
    now_ms: i64,
) -> Option<PlaygroundStatus> {
    let (state, reason, message) = observed;
    let fresh = |since_ms| PlaygroundStatus {
        state: *state,
        reason: reason.clone(),
        message: message.clone(),
        since_ms,
        updated_ms: now_ms,
    };
    match current {
        Some(c) if c.state == *state && c.reason == *reason => {
            let stale = now_ms - c.updated_ms >= MESSAGE_REFRESH_MS;
            (c.message != *message && stale).then(|| fresh(c.since_ms))
        }
        _ => Some(fresh(now_ms)),
    }
}

/// Runs the playground step of a pass over `all` (read at the start of the pass, admissions of
/// this pass already applied); `waits` holds, for each playground the plan left queued, the
/// reason and message to show. Each playground's failure is counted in `report` (and the
/// metrics) and retried next pass, without holding up the others.
pub async fn pass(
    ctx: &Ctx,
    cluster: &Cluster,
    all: &[PlaygroundRecord],
    waits: &HashMap<String, (String, String)>,
    now: i64,
    report: &mut PassReport,
) {
    for pg in all {
        if let Err(e) = reconcile(ctx, cluster, pg, waits.get(&pg.id), now).await {
            failed(ctx, report, &pg.id, &e);
        }
    }
}

/// Whether `pg` takes part in admission: alive (before its TTL) and not ended (a `Failed` pod
/// holds nothing; its playground only waits to be deleted).
pub fn holds_or_wants(pg: &PlaygroundRecord, now: i64) -> bool {
    now < pg.expires_at_ms
        && !(pg.pod_name.is_some()
            && pg
                .status
                .as_ref()
                .is_some_and(|s| s.state == PlaygroundState::Failed))
}

/// What admitted playgrounds whose pod is not bound yet keep: their planned node (as a job's
/// unbound machines do). A bound pod's requests are in the capacity snapshot already.
pub fn reservations(
    cluster: &Cluster,
    all: &[PlaygroundRecord],
    default_namespace: &str,
    now: i64,
) -> Vec<Reservation> {
    all.iter()
        .filter(|pg| holds_or_wants(pg, now))
        .filter_map(|pg| {
            let node = pg.node.clone()?;
            // A playground whose id breaks the id rule has no stand-in job, so it was never
            // admitted and holds nothing (`admission_stand_in`).
            let job_id = tuneplane_core::ids::JobId::parse(pg.id.as_str()).ok()?;
            let ns = pg.pod_namespace.as_deref().unwrap_or(default_namespace);
            let bound = cluster
                .pod(ns, &pod_name_of(pg))
                .map(pod_info)
                .is_some_and(|i| !i.terminal && i.node_name.is_some());
            (!bound).then(|| Reservation {
                job_id,
                series: Some(pg.series.clone()),
                gpus: pg.gpus,
                cpus: f64::from(REQUEST_CPUS),
                memory_gb: f64::from(REQUEST_MEMORY_GB),
                machines: 1,
                nodes: vec![node],
            })
        })
        .collect()
}

/// Admits playground `id` of `all` to `node`: the record names the node first (the pod, created
/// in the same pass's playground step or after a crash by a later one, is pinned to it). `all`
/// gets the stored record, so the playground step goes on from it.
pub async fn admit(
    ctx: &Ctx,
    all: &mut [PlaygroundRecord],
    id: &str,
    node: String,
    now: i64,
) -> Result<()> {
    let Some(pg) = all.iter_mut().find(|p| p.id == id) else {
        return Ok(());
    };
    let mut next = pg.clone();
    next.status = Some(PlaygroundStatus {
        state: PlaygroundState::Pending,
        reason: Some("Admitted".into()),
        message: format!("admitted to node {node}; creating the pod"),
        since_ms: now,
        updated_ms: now,
    });
    next.node = Some(node);
    next.admitted_at_ms = Some(now);
    *pg = ctx.jobs.put_playground(&next).await?;
    tracing::info!(playground = %pg.id, node = ?pg.node, "playground admitted");
    Ok(())
}

fn failed(ctx: &Ctx, report: &mut PassReport, playground: &str, e: &Error) {
    report.errors += 1;
    ctx.metrics.inc_step_error(e);
    tracing::warn!(playground, error = %e, "playgrounds failed; retrying next pass");
}

/// Creates the Secret holding `pg`'s server key unless it exists (records of older versions have
/// no key and no Secret).
async fn create_key_secret(ctx: &Ctx, pg: &PlaygroundRecord, ns: &str) -> Result<()> {
    let Some(value) = render_key_secret(pg, ns) else {
        return Ok(());
    };
    let typed: Secret = serde_json::from_value(value).map_err(|source| Error::Convert {
        job_id: pg.id.clone(),
        kind: "Secret",
        source,
    })?;
    let api: Api<Secret> = Api::namespaced(ctx.kube.client.clone(), ns);
    let params = crate::workload::post_params();
    let name = key_secret_name(&pod_name_of(pg));
    crate::workload::created(
        ctx.kube
            .call("create secret", &name, || api.create(&params, &typed))
            .await,
    )
}

/// Pod names that may belong to `pg`, most authoritative first: the recorded one, the current
/// naming, the naming of older versions.
fn candidates(pg: &PlaygroundRecord) -> Vec<String> {
    let mut names: Vec<String> = pg.pod_name.iter().cloned().collect();
    for name in [playground_name(&pg.id), legacy_playground_name(&pg.id)] {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// One playground: reclaim it when expired; while it waits for admission record why (`wait`,
/// from this pass's plan); once admitted create its key Secret and pod, or record what the pod
/// shows.
pub async fn reconcile(
    ctx: &Ctx,
    cluster: &Cluster,
    pg: &PlaygroundRecord,
    wait: Option<&(String, String)>,
    now: i64,
) -> Result<()> {
    let ns = pg
        .pod_namespace
        .clone()
        .unwrap_or_else(|| ctx.config.playground_namespace.clone());
    let api: Api<Pod> = Api::namespaced(ctx.kube.client.clone(), &ns);
    let present: Vec<String> = candidates(pg)
        .into_iter()
        .filter(|n| cluster.pod(&ns, n).is_some())
        .collect();
    if now >= pg.expires_at_ms {
        let mut doomed = present;
        if let Some(recorded) = &pg.pod_name
            && !doomed.contains(recorded)
        {
            doomed.push(recorded.clone());
        }
        if doomed.is_empty() {
            doomed.push(playground_name(&pg.id));
        }
        let secrets: Api<Secret> = Api::namespaced(ctx.kube.client.clone(), &ns);
        for name in &doomed {
            let params = DeleteParams::background();
            match ctx
                .kube
                .call("delete pod", name, || api.delete(name, &params))
                .await
            {
                Ok(_) => {}
                Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
                Err(e) => return Err(e),
            }
            // The key's Secret goes with the pod (also when a crash left one without a pod).
            let secret = key_secret_name(name);
            match ctx
                .kube
                .call("delete secret", &secret, || {
                    secrets.delete(&secret, &params)
                })
                .await
            {
                Ok(_) => {}
                Err(Error::Kube { source, .. }) if is_not_found(&source) => {}
                Err(e) => return Err(e),
            }
        }
        // Kept, retired, for the tenant's usage (admission to now).
        let mut retired = pg.clone();
        retired.ended_at_ms = Some(now);
        retired.pod_ip = None;
        ctx.jobs.retire_playground(&retired).await?;
        tracing::info!(playground = %pg.id, pods = ?doomed, "playground reclaimed");
        return Ok(());
    }
    // Waiting for admission (no pod of an older version to adopt): say why, nothing else.
    if !pg.is_admitted() && present.is_empty() {
        if let Some((reason, message)) = wait {
            let observed = (
                PlaygroundState::Queued,
                Some(reason.clone()),
                message.clone(),
            );
            if let Some(status) = next_status(pg.status.as_ref(), &observed, now) {
                let mut next = pg.clone();
                next.status = Some(status);
                ctx.jobs.put_playground(&next).await?;
            }
        }
        return Ok(());
    }
    // The recorded pod when there is one; else one an earlier pass (or version) created but did
    // not record; else a new one under the current naming.
    let name = match &pg.pod_name {
        Some(recorded) => recorded.clone(),
        None => present
            .first()
            .cloned()
            .unwrap_or_else(|| playground_name(&pg.id)),
    };
    let mut next = pg.clone();
    next.pod_name = Some(name.clone());
    next.pod_namespace = Some(ns.clone());
    match cluster.pod(&ns, &name) {
        Some(pod) => {
            if let Some(status) = next_status(pg.status.as_ref(), &observe(pod), now) {
                next.status = Some(status);
            }
            // Where the API's proxy reaches the server, only while it serves.
            next.pod_ip = serving_ip(Some(pod));
        }
        None => {
            // Gone: its address may be another pod's by now.
            next.pod_ip = None;
            // Not in the reflector: new, or gone (deleted outside TunePlane, its node removed).
            // Creating is idempotent (an existing pod answers 409), so a lagging reflector costs
            // one refused create, and a lost pod comes back.
            // Its policies first (only the API's proxy reaches the server; egress as any pod's),
            // then the key's Secret: the pod's server reads its key from it.
            crate::workload::ensure_playground_policies(ctx, &ns).await?;
            create_key_secret(ctx, &next, &ns).await?;
            let value = render_playground(&next, &ns, &ctx.config.render);
            let pod: Pod = serde_json::from_value(value).map_err(|source| Error::Convert {
                job_id: pg.id.clone(),
                kind: "Pod",
                source,
            })?;
            let params = crate::workload::post_params();
            let created = match ctx
                .kube
                .call("create pod", &name, || api.create(&params, &pod))
                .await
            {
                Ok(_) => true,
                Err(Error::Kube { source, .. }) if is_conflict(&source) => false,
                Err(e) => return Err(e),
            };
            if created || pg.status.is_none() {
                let again = if pg.pod_name.is_some() && created {
                    "recreated (the previous one disappeared)"
                } else {
                    "created"
                };
                next.status = Some(PlaygroundStatus {
                    state: PlaygroundState::Pending,
                    reason: Some("Starting".to_owned()),
                    message: format!("pod {name} {again}; waiting for the scheduler"),
                    since_ms: now,
                    updated_ms: now,
                });
                if created {
                    tracing::info!(playground = %pg.id, pod = %name, "playground pod created");
                }
            }
        }
    }
    if next != *pg {
        ctx.jobs.put_playground(&next).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodSpec, PodStatus,
    };

    use super::*;

    fn pod(status: PodStatus) -> WatchedPod {
        let mut p = Pod::default();
        p.metadata.name = Some("pg-1".into());
        p.spec = Some(PodSpec {
            node_name: Some("l40s-0".into()),
            ..PodSpec::default()
        });
        p.status = Some(status);
        WatchedPod::from(p)
    }

    fn waiting(reason: &str, message: &str) -> PodStatus {
        PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "vllm".into(),
                state: Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        message: Some(message.into()),
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }
    }

    #[test]
    fn an_unschedulable_pod_reads_as_the_schedulers_reason_and_message() {
        let msg = "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector.";
        let p = pod(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                message: Some(msg.into()),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        let (state, reason, message) = observe(&p);
        assert_eq!(state, PlaygroundState::Pending);
        assert_eq!(reason.as_deref(), Some("InsufficientGpu"));
        assert_eq!(message, msg);
    }

    #[test]
    fn image_pulls_running_and_ended_pods_read_as_such() {
        let (state, reason, message) = observe(&pod(waiting("ImagePullBackOff", "Back-off")));
        assert_eq!(
            (state, reason.as_deref()),
            (PlaygroundState::Pending, Some("ImagePull"))
        );
        assert!(message.contains("ImagePullBackOff: Back-off"), "{message}");
        let running = pod(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        });
        let (state, reason, message) = observe(&running);
        assert_eq!((state, reason), (PlaygroundState::Running, None));
        assert!(message.contains("node l40s-0"), "{message}");
        let mut ended = waiting("x", "y");
        ended.phase = Some("Failed".into());
        ended.container_statuses = Some(vec![ContainerStatus {
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("OOMKilled".into()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]);
        let (state, reason, message) = observe(&pod(ended));
        assert_eq!(
            (state, reason.as_deref()),
            (PlaygroundState::Failed, Some("ServerExited"))
        );
        assert!(message.starts_with("the vLLM container exited with status 137 (OOMKilled)"));
        let deadline = pod(PodStatus {
            phase: Some("Failed".into()),
            reason: Some("DeadlineExceeded".into()),
            ..PodStatus::default()
        });
        assert_eq!(observe(&deadline).1.as_deref(), Some("TtlExpired"));
    }

    #[test]
    fn only_a_running_pod_that_is_not_being_deleted_gives_its_address() {
        let running = |ip: Option<&str>| {
            pod(PodStatus {
                phase: Some("Running".into()),
                pod_ip: ip.map(str::to_owned),
                ..PodStatus::default()
            })
        };
        assert_eq!(
            serving_ip(Some(&running(Some("10.244.0.7")))).as_deref(),
            Some("10.244.0.7")
        );
        assert_eq!(serving_ip(None), None, "gone");
        assert_eq!(serving_ip(Some(&running(None))), None);
        assert_eq!(serving_ip(Some(&running(Some("")))), None);
        for phase in ["Pending", "Failed", "Succeeded", "Unknown"] {
            let mut p = running(Some("10.244.0.7"));
            if let Some(s) = p.status.as_mut() {
                s.phase = Some(phase.into());
            }
            assert_eq!(serving_ip(Some(&p)), None, "{phase}");
        }
        let mut deleting = running(Some("10.244.0.7"));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert_eq!(serving_ip(Some(&deleting)), None, "being deleted");
        // And it no longer reads as running, so the proxy refuses it by its state too.
        let (state, reason, _) = observe(&deleting);
        assert_eq!(
            (state, reason.as_deref()),
            (PlaygroundState::Pending, Some("PodDeleting"))
        );
    }

    #[test]
    fn the_status_is_rewritten_only_when_what_users_see_changes() {
        let gpu = |m: &str| {
            (
                PlaygroundState::Pending,
                Some("InsufficientGpu".to_owned()),
                m.to_owned(),
            )
        };
        let first = next_status(None, &gpu("a"), 1_000).expect("first");
        assert_eq!((first.since_ms, first.updated_ms), (1_000, 1_000));
        // The same observation: nothing to write, however often the pass runs.
        assert_eq!(next_status(Some(&first), &gpu("a"), 1_100), None);
        assert_eq!(next_status(Some(&first), &gpu("a"), 999_999), None);
        // A new message under the same reason waits for the refresh interval ...
        assert_eq!(next_status(Some(&first), &gpu("b"), 1_000 + 29_999), None);
        let later =
            next_status(Some(&first), &gpu("b"), 1_000 + MESSAGE_REFRESH_MS).expect("refresh");
        assert_eq!((later.message.as_str(), later.since_ms), ("b", 1_000));
        // ... a new reason or state is written at once, from now.
        let running = (PlaygroundState::Running, None, "runs".to_owned());
        let run = next_status(Some(&first), &running, 1_200).expect("run");
        assert_eq!((run.state, run.since_ms), (PlaygroundState::Running, 1_200));
    }

    #[test]
    fn candidates_put_the_recorded_name_first_and_include_the_old_naming() {
        let mut pg =
            PlaygroundRecord::requested("pg-ab", "t".parse().unwrap(), "m", "l40s", 1, 0, 1);
        assert_eq!(candidates(&pg), ["pg-ab", "pg-pg-ab"]);
        pg.pod_name = Some("pg-pg-ab".into());
        assert_eq!(candidates(&pg), ["pg-pg-ab", "pg-ab"]);
    }
}
