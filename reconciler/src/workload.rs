//! Creating and deleting workloads: render with core (a RayJob is typed already and its spec is
//! sent as rendered; Pods, Secrets and NetworkPolicies are read into k8s-openapi's types here), create
//! idempotently (deterministic names; 409 AlreadyExists is success), delete with background
//! propagation (404 is success).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, PostParams};
use tuneplane_core::capsule::storage_key;
use tuneplane_core::constants::FIELD_MANAGER;
use tuneplane_core::constants::WORKLOAD_LABEL;
use tuneplane_core::ids::JobId;
use tuneplane_core::job::JobRecord;
use tuneplane_core::render::kuberay::RayJob as RenderedRayJob;
use tuneplane_core::render::network::{
    EGRESS_POLICY, PLAYGROUND_POLICY, SINGLE_POD_POLICY, network_policy_name, render_egress_policy,
    render_network_policy, render_playground_policy, render_single_pod_policy,
};
use tuneplane_core::render::rayjob::{auth_secret_name, render_auth_secret};
use tuneplane_core::render::{
    CapsuleRef, GRANT_LABEL, grant_secret_name, job_workload_name, render_grant_secret, render_pod,
    render_rayjob, render_seal_secret,
};
use tuneplane_core::spec::WorkloadKind;
use tuneplane_core::store::PresignMethod;

use crate::Ctx;
use crate::cluster::Cluster;
use crate::cluster::TRUST_OWN_CREATE;
use crate::error::{Error, Result};
use crate::kube_io::{is_conflict, is_not_found};
use crate::rayjob::{self, RayJob};

/// Slack on the capsule URL beyond the job's deadlines (clock skew, the pass that notices the end).
pub const URL_SLACK_SECONDS: u64 = 600;

/// Validity of the capsule URL, from the workload's creation: no longer than the job may still
/// start a pod — its pre-running deadline plus its run deadline (a Ray worker replaced while the
/// job runs downloads again) plus [`URL_SLACK_SECONDS`] — and capped by what the credentials
/// allow (`TUNEPLANE_MAX_PRESIGN_SECONDS`). Past it the job has ended by its own deadlines.
pub fn url_validity(job: &JobRecord, max: Duration) -> Duration {
    let d = &job.spec.deadlines;
    let secs = d
        .pre_running_seconds
        .saturating_add(d.run_seconds)
        .saturating_add(URL_SLACK_SECONDS);
    Duration::from_secs(secs).min(max)
}

/// Create parameters of every object TunePlane makes (its field manager).
pub(crate) fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// A create's outcome, an object that already exists (409) counting as created.
pub(crate) fn created<T>(outcome: Result<T>) -> Result<()> {
    match outcome {
        Ok(_) => Ok(()),
        Err(Error::Kube { source, .. }) if is_conflict(&source) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A job's rendered workload (what `tuneplane render` prints).
#[derive(Debug, Clone, PartialEq)]
pub enum Rendered {
    /// A GPU job's RayJob, typed: its spec is sent as it is.
    RayJob(Box<RenderedRayJob>),
    /// A CPU-only job's Pod, in the exact Kubernetes shape.
    Pod(serde_json::Value),
}

/// Renders the job's workload, signing the capsule URL.
pub async fn render(ctx: &Ctx, job: &JobRecord) -> Result<Rendered> {
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
        WorkloadKind::RayJob => {
            Rendered::RayJob(Box::new(render_rayjob(job, &capsule, &ctx.config.render)?))
        }
        WorkloadKind::Pod => Rendered::Pod(render_pod(job, &capsule, &ctx.config.render)?),
    })
}

/// A new Ray token: 32 bytes from the operating system, as hex. No fallback: without the OS's
/// randomness the workload is not created (the pass fails and is retried).
fn new_token(job_id: &JobId) -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::Randomness {
        job_id: job_id.clone(),
        message: e.to_string(),
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates the Secret holding the job's Ray token unless it exists (then its token stands: the
/// RayJob's pods read whichever token the Secret holds).
async fn create_auth_secret(ctx: &Ctx, job: &JobRecord) -> Result<()> {
    let value = render_auth_secret(job, &new_token(&job.id)?);
    let name = auth_secret_name(&job_workload_name(job));
    create_unless_exists::<Secret>(
        ctx,
        "create secret",
        &job.spec.namespace,
        &name,
        String::from(&job.id),
        value,
    )
    .await
}

/// Creates the namespaced object `value` of kind `K` (named `name` in `namespace`, rendered for
/// `whose`) unless it exists; `op` names the call in logs and metrics.
async fn create_unless_exists<K>(
    ctx: &Ctx,
    op: &'static str,
    namespace: &str,
    name: &str,
    whose: String,
    value: serde_json::Value,
) -> Result<()>
where
    K: k8s_openapi::Resource
        + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(value).map_err(|source| Error::Convert {
        job_id: whose,
        kind: <K as k8s_openapi::Resource>::KIND,
        source,
    })?;
    let object = format!("{namespace}/{name}");
    let api: Api<K> = Api::namespaced(ctx.kube.client.clone(), namespace);
    let params = post_params();
    created(
        ctx.kube
            .call(op, &object, || api.create(&params, &typed))
            .await,
    )
}

/// Creates the Secret holding the grant of a RayJob's current attempt unless it exists (the token
/// is deterministic, so an existing Secret holds the same one). Nothing without a grant key.
async fn create_grant_secret(ctx: &Ctx, job: &JobRecord) -> Result<()> {
    let Some(key) = &ctx.config.render.grant_key else {
        return Ok(());
    };
    let value = render_grant_secret(job, &key.token(&job.id, job.attempt));
    let name = grant_secret_name(&job_workload_name(job));
    create_unless_exists::<Secret>(
        ctx,
        "create secret",
        &job.spec.namespace,
        &name,
        String::from(&job.id),
        value,
    )
    .await
}

/// Creates the job's NetworkPolicy unless it exists.
async fn create_network_policy(ctx: &Ctx, job: &JobRecord) -> Result<()> {
    let value = render_network_policy(job, &ctx.config.render.network);
    let name = network_policy_name(job);
    create_unless_exists::<NetworkPolicy>(
        ctx,
        "create networkpolicy",
        &job.spec.namespace,
        &name,
        String::from(&job.id),
        value,
    )
    .await
}

/// The create requests admitting a job of `kind` costs: its workload and what is created with it
/// (a RayJob's NetworkPolicy and Ray token Secret; its grant Secret when grants are on). A CPU
/// job's Pod is all: its namespace's NetworkPolicy and its tenant's grant seal Secret are shared,
/// made once and not counted.
pub fn creates_per_admission(ctx: &Ctx, kind: WorkloadKind) -> usize {
    match kind {
        WorkloadKind::RayJob => 3 + usize::from(ctx.config.render.grant_key.is_some()),
        WorkloadKind::Pod => 1,
    }
}

/// Whether this process created workload `name` less than [`TRUST_OWN_CREATE`] ago.
pub fn recently_created(ctx: &Ctx, name: &str) -> bool {
    let created = ctx
        .created_workloads
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    trusted(&created, name, std::time::Instant::now())
}

/// Whether `created` has `name` from less than [`TRUST_OWN_CREATE`] before `now`.
fn trusted(
    created: &std::collections::HashMap<String, std::time::Instant>,
    name: &str,
    now: std::time::Instant,
) -> bool {
    created
        .get(name)
        .is_some_and(|at| now.saturating_duration_since(*at) < TRUST_OWN_CREATE)
}

/// Records that this process created workload `name` (and forgets the ones past trusting).
fn remember_created(ctx: &Ctx, name: &str) {
    let mut created = ctx
        .created_workloads
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    created.retain(|_, at| at.elapsed() < TRUST_OWN_CREATE);
    created.insert(name.to_owned(), std::time::Instant::now());
}

/// How often a shared object of CPU-only job Pods is made sure of again (one create, answered
/// "already exists" when nobody removed it).
const SHARED_RECHECK: Duration = Duration::from_secs(600);

/// Makes sure a shared object CPU-only job Pods need exists before such a Pod is created: `create`
/// runs once per `key`, then again at most every [`SHARED_RECHECK`] in case someone removed the
/// object. A failed create leaves it unchecked, so the Pod is not created and the next pass tries
/// again.
async fn ensure_shared<F>(ctx: &Ctx, key: String, create: F) -> Result<()>
where
    F: std::future::Future<Output = Result<()>>,
{
    let fresh = || {
        ctx.shared_objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .is_some_and(|at| at.elapsed() < SHARED_RECHECK)
    };
    if fresh() {
        return Ok(());
    }
    // Admissions run side by side: the first makes the object, the others wait and see it made.
    let _one_at_a_time = ctx.shared_create.lock().await;
    if fresh() {
        return Ok(());
    }
    create.await?;
    ctx.shared_objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, std::time::Instant::now());
    Ok(())
}

/// Makes sure `namespace` has its shared NetworkPolicy `name` (rendered by `value`) before a pod
/// that needs it is created there ([`ensure_shared`]).
async fn ensure_shared_policy(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    value: serde_json::Value,
) -> Result<()> {
    let key = format!("networkpolicy {namespace}/{name}");
    ensure_shared(ctx, key, async {
        let whose = format!("(namespace {namespace})");
        create_unless_exists::<NetworkPolicy>(
            ctx,
            "create networkpolicy",
            namespace,
            name,
            whose,
            value,
        )
        .await
    })
    .await
}

/// Makes sure `namespace` has the NetworkPolicy all CPU-only job Pods share (refusing them every
/// ingress) before such a Pod is created there.
async fn ensure_single_pod_policy(ctx: &Ctx, namespace: &str) -> Result<()> {
    let value = render_single_pod_policy(namespace);
    ensure_shared_policy(ctx, namespace, SINGLE_POD_POLICY, value).await
}

/// Makes sure `namespace` has the egress policy every pod there shares (DNS, the platform, the
/// operator's additions; nothing else) before any pod of TunePlane's is created there.
pub async fn ensure_egress_policy(ctx: &Ctx, namespace: &str) -> Result<()> {
    let value = render_egress_policy(namespace, &ctx.config.render.network);
    ensure_shared_policy(ctx, namespace, EGRESS_POLICY, value).await
}

/// Makes sure `namespace` has the policies a playground's pod needs before it is created: the
/// shared egress policy and the playgrounds' own (only the API's proxy reaches the server).
pub async fn ensure_playground_policies(ctx: &Ctx, namespace: &str) -> Result<()> {
    ensure_egress_policy(ctx, namespace).await?;
    let value = render_playground_policy(namespace, &ctx.config.render.network);
    ensure_shared_policy(ctx, namespace, PLAYGROUND_POLICY, value).await
}

/// With grants on, makes sure `job`'s tenant has its grant seal Secret in the job's namespace
/// before the job's Pod (whose grant is sealed under it) is created ([`ensure_shared`]). The
/// Secret's name changes with the grant key, so a new key never meets the old Secret.
async fn ensure_grant_seal(ctx: &Ctx, job: &JobRecord) -> Result<()> {
    let Some(key) = &ctx.config.render.grant_key else {
        return Ok(());
    };
    let (ns, tenant) = (job.spec.namespace.as_str(), job.tenant.as_str());
    let seal = key.seal_key(ns, tenant);
    let name = seal.secret_name(tenant);
    ensure_shared(ctx, format!("secret {ns}/{name}"), async {
        let value = render_seal_secret(ns, tenant, &seal);
        create_unless_exists::<Secret>(
            ctx,
            "create secret",
            ns,
            &name,
            format!("(tenant {tenant})"),
            value,
        )
        .await
    })
    .await
}

/// Creates the job's RayJob or Pod unless it exists; returns its name. The job's NetworkPolicy
/// (a CPU-only job: its namespace's shared one), its grant Secret (a CPU-only job: its tenant's
/// shared seal Secret) and (for a RayJob) its token Secret are created first, so no pod of it
/// ever starts unguarded or without its token.
pub async fn create(ctx: &Ctx, job: &JobRecord) -> Result<String> {
    let rendered = render(ctx, job).await?;
    create_rendered(ctx, job, rendered).await
}

/// [`create`] with the workload already rendered ([`render`] of `job`).
pub async fn create_rendered(ctx: &Ctx, job: &JobRecord, rendered: Rendered) -> Result<String> {
    let name = job_workload_name(job);
    let ns = job.spec.namespace.as_str();
    let object = format!("{ns}/{name}");
    let params = post_params();
    ensure_egress_policy(ctx, ns).await?;
    match &rendered {
        Rendered::RayJob(_) => {
            create_network_policy(ctx, job).await?;
            create_grant_secret(ctx, job).await?;
        }
        Rendered::Pod(_) => {
            ensure_single_pod_policy(ctx, ns).await?;
            ensure_grant_seal(ctx, job).await?;
        }
    }
    match rendered {
        Rendered::RayJob(rendered) => {
            create_auth_secret(ctx, job).await?;
            // Core's spec, moved over whole: nothing rendered is dropped on the way.
            let typed = rayjob::from_rendered(*rendered);
            let api: Api<RayJob> =
                Api::namespaced_with(ctx.kube.client.clone(), ns, &rayjob::resource());
            created(
                ctx.kube
                    .call("create rayjob", &object, || api.create(&params, &typed))
                    .await,
            )?;
        }
        Rendered::Pod(value) => {
            let typed: Pod = serde_json::from_value(value).map_err(|source| Error::Convert {
                job_id: String::from(&job.id),
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
    remember_created(ctx, &name);
    tracing::info!(job_id = %job.id, workload = %name, capsule = %job.capsule_sha256, "workload created");
    Ok(name)
}

/// What deleting a workload must delete besides it: objects named after it that nothing else
/// removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leftovers {
    /// The attempt's grant Secret (`<workload>-grant`).
    pub grant_secret: bool,
    /// The workload's own NetworkPolicy (named like it).
    pub network_policy: bool,
}

impl Leftovers {
    /// Every object a workload may have left, whatever made it: its grant Secret (grants on) and
    /// its own NetworkPolicy. A RayJob has both; a CPU job's Pod only when it was made before its
    /// grant was sealed and its policy shared.
    pub fn all(ctx: &Ctx) -> Leftovers {
        Leftovers {
            grant_secret: ctx.config.render.grant_key.is_some(),
            network_policy: true,
        }
    }

    /// What workload `name` of `kind` left, from its object in the cluster cache: a CPU job's Pod
    /// labelled `tuneplane.io/workload: pod` uses its namespace's shared NetworkPolicy and one
    /// labelled `tuneplane.io/grant: sealed` has no grant Secret, so deleting it is one request
    /// (not three, two of them answered 404). A workload the cache does not show: [`Leftovers::all`].
    ///
    /// A RayJob whose pods the cache still shows keeps its NetworkPolicy until they are gone
    /// ([`crate::policies`]).
    pub fn of(
        ctx: &Ctx,
        cluster: &Cluster,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
        job_id: &str,
    ) -> Leftovers {
        let all = Leftovers::all(ctx);
        if kind != WorkloadKind::Pod {
            return Leftovers {
                network_policy: !crate::policies::linger_if_pods_remain(
                    ctx, cluster, namespace, name, job_id,
                ),
                ..all
            };
        }
        let Some(pod) = cluster.pod(namespace, name) else {
            return all;
        };
        let label = |key: &str| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str)
        };
        Leftovers {
            grant_secret: all.grant_secret && label(GRANT_LABEL) != Some("sealed"),
            network_policy: label(WORKLOAD_LABEL) != Some("pod"),
        }
    }
}

/// Deletes the workload object of `kind` alone (no error if it is gone); a RayJob's token Secret
/// goes with it. Its pods get their grace (their termination is the cluster's garbage
/// collection's); see [`delete`] for everything else an attempt leaves.
pub async fn delete_object(
    kube: &crate::kube_io::Kube,
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
) -> Result<()> {
    let params = DeleteParams::background();
    let object = format!("{namespace}/{name}");
    let outcome = match kind {
        WorkloadKind::RayJob => {
            let api: Api<RayJob> =
                Api::namespaced_with(kube.client.clone(), namespace, &rayjob::resource());
            let deleted = kube
                .call("delete rayjob", &object, || api.delete(name, &params))
                .await
                .map(|_| ());
            match deleted {
                Err(Error::Kube { source, .. }) if is_not_found(&source) => Ok(()),
                other => other,
            }?;
            let secret = auth_secret_name(name);
            let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), namespace);
            kube.call("delete secret", &format!("{namespace}/{secret}"), || {
                secrets.delete(&secret, &params)
            })
            .await
            .map(|_| ())
        }
        WorkloadKind::Pod => {
            let api: Api<Pod> = Api::namespaced(kube.client.clone(), namespace);
            kube.call("delete pod", &object, || api.delete(name, &params))
                .await
                .map(|_| ())
        }
    };
    match outcome {
        Err(Error::Kube { source, .. }) if is_not_found(&source) => Ok(()),
        other => other,
    }
}

/// Deletes a workload of `kind` (no error if it is gone); a RayJob's token Secret goes with it,
/// and so do its `leftovers`.
pub async fn delete(
    ctx: &Ctx,
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    leftovers: Leftovers,
) -> Result<()> {
    let params = DeleteParams::background();
    let object = format!("{namespace}/{name}");
    delete_object(&ctx.kube, kind, namespace, name).await?;
    if leftovers.grant_secret {
        // The grant's Secret goes with the workload (the grant itself dies with the attempt's
        // record: the API checks the record, not the Secret).
        let secret = grant_secret_name(name);
        let secrets: Api<Secret> = Api::namespaced(ctx.kube.client.clone(), namespace);
        let gone = ctx
            .kube
            .call("delete secret", &format!("{namespace}/{secret}"), || {
                secrets.delete(&secret, &params)
            })
            .await;
        match gone {
            Err(Error::Kube { source, .. }) if is_not_found(&source) => Ok(()),
            other => other.map(|_| ()),
        }?;
    }
    if !leftovers.network_policy {
        return Ok(());
    }
    // The NetworkPolicy is named like the workload; it goes last, once no pod needs it.
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.kube.client.clone(), namespace);
    let gone = ctx
        .kube
        .call("delete networkpolicy", &object, || {
            policies.delete(name, &params)
        })
        .await;
    match gone {
        Err(Error::Kube { source, .. }) if is_not_found(&source) => Ok(()),
        other => other.map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_this_process_just_created_is_trusted_for_a_while_and_no_other() {
        let now = std::time::Instant::now();
        let mut created = std::collections::HashMap::new();
        created.insert("tp-a".to_owned(), now);
        let long_ago = now.checked_sub(TRUST_OWN_CREATE + Duration::from_secs(1));
        if let Some(at) = long_ago {
            created.insert("tp-old".to_owned(), at);
        }
        assert!(trusted(&created, "tp-a", now));
        assert!(trusted(
            &created,
            "tp-a",
            now + TRUST_OWN_CREATE - Duration::from_secs(1)
        ));
        assert!(!trusted(&created, "tp-a", now + TRUST_OWN_CREATE));
        assert!(!trusted(&created, "tp-b", now), "another job's workload");
        assert!(long_ago.is_none() || !trusted(&created, "tp-old", now));
    }

    #[test]
    fn the_capsule_url_lives_only_as_long_as_the_job_may_start_a_pod() {
        let spec: tuneplane_core::spec::JobSpec = serde_json::from_value(serde_json::json!({
            "name": "j", "plugin": "custom/custom", "image": "python:3.11", "entrypoint": "true",
            "env": {}, "pools": [{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0,
            "cpus": 1.0, "memory_gb": 1.0}],
            "deadlines": {"pre_running_seconds": 900, "run_seconds": 3600},
            "priority": 0, "labels": {}, "namespace": "ns", "platform_version": "0"
        }))
        .expect("spec");
        let job =
            JobRecord::new_queued("j-1".parse().unwrap(), "t".parse().unwrap(), spec, "00", 0);
        let week = Duration::from_secs(604_800);
        assert_eq!(
            url_validity(&job, week),
            Duration::from_secs(900 + 3600 + 600)
        );
        // Capped by what the credentials allow.
        assert_eq!(
            url_validity(&job, Duration::from_secs(3600)),
            Duration::from_secs(3600)
        );
    }
}
