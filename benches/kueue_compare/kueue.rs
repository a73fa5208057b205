//! Kueue's side: its CRDs, its RBAC and its controller manager as its default install sets them up
//! (internal certificate management, leader election, its own ServiceAccount `kueue-system/
//! kueue-controller-manager` with the release's roles), limited to the `batch/job` and
//! `ray.io/rayjob` integrations; one ClusterQueue over the whole fleet with a ResourceFlavor per GPU
//! series and quotas equal to the fleet; a LocalQueue per tenant namespace; Admission Fair Sharing
//! between them in the fairness run only. The reclaim run has a ClusterQueue per tenant instead,
//! both in one cohort, with the tenants' h200 GPU limits as nominal quotas and preemption to
//! reclaim them (see [`reclaim_queues`]).
//!
//! Two configurations ([`Variant`]): as shipped (`controller_manager_config.yaml` of the release:
//! client QPS 50, burst 100, five workers for Jobs and Workloads, none named for RayJobs), and
//! tuned as Kueue's documentation allows (see [`config`]).
//!
//! Kueue's job webhooks are not registered with the API server (the harness creates jobs already
//! suspended and labelled, which is what the mutating webhook would do), so the webhook
//! configurations the certificate rotator updates exist without webhooks in them. Tuned Kueue
//! runs the bare-pod workloads (small, fair) through its `pod` integration instead, as TunePlane
//! runs them as bare Pods: then its pod webhooks are registered with the API server (at
//! 127.0.0.1, with a certificate the harness makes for that address, since the rotator's names a
//! Service no resolver here reaches), and the harness creates plain Pods with the queue label,
//! which Kueue gates until it admits them.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::batch::v1::Job as BatchJob;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use crate::workload::{Job, RECLAIM_SERIES, Shape};
use crate::{
    Controller, KEY_LABEL, NODE_CPUS, NODE_GPUS, NODE_MEMORY_GB, NODES_PER_SERIES, Options, SERIES,
    Setup, Variant,
};

const NAMESPACE: &str = "kueue-system";
const SECRET: &str = "kueue-webhook-server-cert";
const SERVICE: &str = "kueue-webhook-service";
const CLUSTER_QUEUE: &str = "fleet";
/// The controller manager's ServiceAccount (the release's kustomize prefixes `controller-manager`).
const SERVICE_ACCOUNT: &str = "kueue-controller-manager";
/// Tenant namespaces, each with a LocalQueue of the same name.
pub const TENANTS: [&str; 2] = ["team-a", "team-b"];
/// The CRDs whose conversion webhook the rotator injects its CA into (as Kueue's kustomize does).
const CONVERTED: [&str; 5] = [
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
];

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub fn rayjob_resource() -> ApiResource {
    resource("ray.io", "v1", "RayJob", "rayjobs")
}

async fn create(
    client: &kube::Client,
    ar: &ApiResource,
    ns: Option<&str>,
    v: Value,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let obj: DynamicObject = serde_json::from_value(v)?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Installs Kueue's CRDs and waits until they are established. With `webhook` (own-certificate
/// mode: port and CA), conversion webhooks point at the manager's loopback address.
async fn install_crds(
    client: &kube::Client,
    dir: &Path,
    webhook: Option<(u16, &str)>,
) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    files.sort_by_key(|e| e.path());
    for entry in files {
        let text = std::fs::read_to_string(entry.path())?;
        let mut v: Value = yaml_serde::from_str(&text)
            .with_context(|| format!("parsing {}", entry.path().display()))?;
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if CONVERTED.contains(&name.as_str()) {
            let client_config = match webhook {
                None => {
                    json!({"service": {"name": SERVICE, "namespace": NAMESPACE, "path": "/convert"}})
                }
                Some((port, ca)) => {
                    json!({"url": format!("https://127.0.0.1:{port}/convert"), "caBundle": ca})
                }
            };
            v["spec"]["conversion"] = json!({
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": client_config,
                    "conversionReviewVersions": ["v1"],
                },
            });
        }
        let crd: CustomResourceDefinition = serde_json::from_value(v)?;
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("creating CRD {name}"))),
        }
        names.push(name);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in names {
        loop {
            let crd = crds.get(&name).await?;
            let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established {
                break;
            }
            if Instant::now() > deadline {
                bail!("CRD {name} not established after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

/// Worker counts per kind, as `groupKindConcurrency` (controller-runtime's per-controller
/// `MaxConcurrentReconciles`, keyed by `Kind.group`).
fn concurrency(variant: Variant) -> &'static str {
    match variant {
        // The release's controller_manager_config.yaml: RayJob.ray.io is not named, so the RayJob
        // reconciler runs one worker for every gang's create and unsuspend.
        Variant::Shipped => {
            "    Job.batch: 5
    Pod: 5
    Workload.kueue.x-k8s.io: 5
    LocalQueue.kueue.x-k8s.io: 1
    Cohort.kueue.x-k8s.io: 1
    ClusterQueue.kueue.x-k8s.io: 1
    ResourceFlavor.kueue.x-k8s.io: 1"
        }
        // Tuned: the job reconcilers this comparison uses (Job.batch, RayJob.ray.io) and the
        // Workload reconciler get 50 workers each (controller.groupKindConcurrency in the
        // Configuration API, https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/;
        // controller-runtime's config.Controller.GroupKindConcurrency); the queue objects keep one.
        Variant::Tuned => {
            "    Job.batch: 50
    RayJob.ray.io: 50
    Pod: 50
    Workload.kueue.x-k8s.io: 50
    LocalQueue.kueue.x-k8s.io: 1
    Cohort.kueue.x-k8s.io: 1
    ClusterQueue.kueue.x-k8s.io: 1
    ResourceFlavor.kueue.x-k8s.io: 1"
        }
    }
}

/// The controller configuration: Kueue's shipped `controller_manager_config.yaml` (or its tuned
/// form), with loopback addresses, only the two integrations used here, the setup's client limit
/// (`clientConnection.qps/burst` in the Configuration API; shipped 50/100, tuned the sweep's QPS
/// with twice that burst, as Kueue's own scalability runner raises them: `--qps=1000 --burst=2000`
/// in the release's Makefile-test.mk), and Admission Fair Sharing only in the fairness run
/// (`admissionFairSharing`, https://kueue.sigs.k8s.io/docs/concepts/admission_fair_sharing/): it
/// orders workloads by usage, which the throughput runs do not need. The on-demand visibility API
/// is off: it is an aggregated API server that needs in-cluster credentials for delegated
/// authentication, and admission does not use it.
fn config(work: &Path, ports: (u16, u16, u16), setup: Setup, fair: bool, pods: bool) -> String {
    let (health, metrics, webhook) = ports;
    let fair_sharing = if fair {
        "admissionFairSharing:\n  usageHalfLifeTime: \"168h\"\n  usageSamplingInterval: \"5m\"\n"
    } else {
        ""
    };
    format!(
        r#"apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: {NAMESPACE}
health:
  healthProbeBindAddress: 127.0.0.1:{health}
metrics:
  bindAddress: 127.0.0.1:{metrics}
webhook:
  host: 127.0.0.1
  port: {webhook}
  certDir: {certs}
leaderElection:
  leaderElect: true
  resourceName: c1f6bfd2.kueue.x-k8s.io
  resourceNamespace: {NAMESPACE}
controller:
  groupKindConcurrency:
{workers}
clientConnection:
  qps: {qps}
  burst: {burst}
internalCertManagement:
  enable: {rotate}
  webhookServiceName: {SERVICE}
  webhookSecretName: {SECRET}
integrations:
  frameworks:
  - "batch/job"
  - "ray.io/rayjob"
{pod}{fair_sharing}featureGates:
  VisibilityOnDemand: false
"#,
        certs = work.join("certs").display(),
        workers = concurrency(setup.variant),
        rotate = !pods,
        pod = if pods { "  - \"pod\"\n" } else { "" },
        qps = setup.qps,
        burst = setup.burst(),
    )
}

/// A self-signed certificate for the webhook server at 127.0.0.1 (and the Service name the
/// rotator would use), written as `tls.crt`/`tls.key` into `certs`; returns the CA bundle (the
/// certificate itself), base64.
fn own_certificate(certs: &Path) -> anyhow::Result<String> {
    std::fs::create_dir_all(certs)?;
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .arg("-keyout")
        .arg(certs.join("tls.key"))
        .arg("-out")
        .arg(certs.join("tls.crt"))
        .args(["-subj", "/CN=kueue-webhook"])
        .args([
            "-addext",
            &format!("subjectAltName=IP:127.0.0.1,DNS:{SERVICE}.{NAMESPACE}.svc"),
        ])
        .output()
        .context("running openssl for the webhook certificate")?;
    if !out.status.success() {
        bail!(
            "openssl could not make the webhook certificate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    use base64::Engine;
    Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(certs.join("tls.crt"))?))
}

/// Registers Kueue's pod webhooks (the release's `mpod.kb.io` and `vpod.kb.io`) for the tenant
/// namespaces, at the manager's loopback address.
async fn register_pod_webhooks(client: &kube::Client, port: u16, ca: &str) -> anyhow::Result<()> {
    let adm =
        |kind: &str, plural: &str| resource("admissionregistration.k8s.io", "v1", kind, plural);
    let hook = |name: &str, path: &str, ops: &[&str]| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": TENANTS},
            ]},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ops, "resources": ["pods"]}],
        })
    };
    create(client, &adm("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"), None,
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "kueue-pod-mutating"},
               "webhooks": [hook("mpod.kb.io", "/mutate--v1-pod", &["CREATE"])]})).await?;
    create(client, &adm("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"), None,
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": "kueue-pod-validating"},
               "webhooks": [hook("vpod.kb.io", "/validate--v1-pod", &["CREATE", "UPDATE"])]})).await?;
    Ok(())
}

/// Installs the release's RBAC for the controller manager (`rbac/` beside the build: the manager's
/// ClusterRole and binding, its leader-election and Secret roles), with the names and namespace
/// Kueue's kustomize gives them, and returns a kubeconfig that authenticates as its ServiceAccount
/// (a TokenRequest token), as the manager's pod would.
async fn service_account_kubeconfig(
    client: &kube::Client,
    o: &Options,
    admin_kubeconfig: &Path,
    work: &Path,
) -> anyhow::Result<std::path::PathBuf> {
    let rbac = o.kueue.join("rbac");
    let mut files: Vec<_> = std::fs::read_dir(&rbac)
        .with_context(|| {
            format!(
                "{}: no rbac folder (run scripts/kueue-build.sh)",
                rbac.display()
            )
        })?
        .collect::<Result<_, _>>()?;
    files.sort_by_key(|e| e.path());
    create(
        client,
        &resource("", "v1", "ServiceAccount", "serviceaccounts"),
        Some(NAMESPACE),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}}),
    )
    .await?;
    for entry in files {
        let text = std::fs::read_to_string(entry.path())?;
        for doc in text.split("\n---") {
            let mut v: Value = match yaml_serde::from_str(doc) {
                Ok(Value::Null) | Err(_) => continue,
                Ok(v) => v,
            };
            let kind = v["kind"].as_str().unwrap_or_default().to_owned();
            let (plural, namespaced) = match kind.as_str() {
                "ClusterRole" => ("clusterroles", false),
                "ClusterRoleBinding" => ("clusterrolebindings", false),
                "Role" => ("roles", true),
                "RoleBinding" => ("rolebindings", true),
                _ => continue,
            };
            // kustomize: namePrefix kueue-, namespace kueue-system.
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            v["metadata"]["name"] = json!(format!("kueue-{name}"));
            if namespaced {
                v["metadata"]["namespace"] = json!(NAMESPACE);
            }
            if let Some(r) = v["roleRef"]["name"].as_str().map(str::to_owned) {
                v["roleRef"]["name"] = json!(format!("kueue-{r}"));
            }
            if let Some(subjects) = v["subjects"].as_array_mut() {
                for s in subjects {
                    s["name"] = json!(SERVICE_ACCOUNT);
                    s["namespace"] = json!(NAMESPACE);
                }
            }
            let ar = resource("rbac.authorization.k8s.io", "v1", &kind, plural);
            create(client, &ar, namespaced.then_some(NAMESPACE), v)
                .await
                .with_context(|| format!("creating {kind} kueue-{name}"))?;
        }
    }
    // A token for the ServiceAccount, valid for the run.
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), NAMESPACE);
    let request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86400},
        }))?;
    let answer = sa
        .create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request)
        .await
        .context("requesting a token for Kueue's ServiceAccount")?;
    let token = answer
        .status
        .context("TokenRequest without a status")?
        .token;
    // The admin kubeconfig's cluster (server and CA), with the token as the user.
    let mut kc: Value = yaml_serde::from_str(&std::fs::read_to_string(admin_kubeconfig)?)?;
    kc["users"] = json!([{"name": SERVICE_ACCOUNT, "user": {"token": token}}]);
    if let Some(contexts) = kc["contexts"].as_array_mut() {
        for c in contexts {
            c["context"]["user"] = json!(SERVICE_ACCOUNT);
        }
    }
    let path = work.join("kueue.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kc)?)?;
    Ok(path)
}

/// Sets Kueue up on a fresh cluster, starts it, and creates the queues.
pub async fn start(
    o: &Options,
    client: &kube::Client,
    kubeconfig: &Path,
    work: &Path,
    setup: Setup,
    shape: Shape,
    pods: bool,
) -> anyhow::Result<Controller> {
    let fair = shape == Shape::Fair;
    let (health, metrics, webhook, visibility) =
        (free_port()?, free_port()?, free_port()?, free_port()?);
    let certs = work.join("certs");
    let own_ca = if pods {
        let ca = own_certificate(&certs)?;
        // Without internal certificate management Kueue serves its metrics with certificates
        // from a fixed path (cmd/kueue/main.go: /etc/kueue/metrics/certs), which a Deployment
        // would mount: the harness puts the same certificate there.
        let metrics_certs = Path::new("/etc/kueue/metrics/certs");
        std::fs::create_dir_all(metrics_certs)
            .and_then(|()| std::fs::copy(certs.join("tls.crt"), metrics_certs.join("tls.crt")))
            .and_then(|_| std::fs::copy(certs.join("tls.key"), metrics_certs.join("tls.key")))
            .with_context(|| {
                format!(
                    "writing Kueue's metrics certificates into {} (tuned Kueue's pod integration needs them there; run as root or pass --systems tuneplane,kueue-shipped)",
                    metrics_certs.display()
                )
            })?;
        Some(ca)
    } else {
        None
    };
    install_crds(
        client,
        &o.kueue.join("crds"),
        own_ca.as_deref().map(|ca| (webhook, ca)),
    )
    .await?;
    let v1 = |kind: &str, plural: &str| resource("", "v1", kind, plural);
    let ns = v1("Namespace", "namespaces");
    for name in [NAMESPACE].iter().chain(TENANTS.iter()) {
        create(
            client,
            &ns,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await?;
    }
    create(
        client,
        &v1("Secret", "secrets"),
        Some(NAMESPACE),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE}}),
    )
    .await?;
    // Empty webhook configurations: the rotator injects its CA into them; nothing calls them.
    let adm =
        |kind: &str, plural: &str| resource("admissionregistration.k8s.io", "v1", kind, plural);
    create(client, &adm("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"), None,
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": "kueue-validating-webhook-configuration"}})).await?;
    create(client, &adm("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"), None,
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "kueue-mutating-webhook-configuration"}})).await?;

    std::fs::create_dir_all(&certs)?;
    let config_path = work.join("kueue-config.yaml");
    std::fs::write(
        &config_path,
        config(work, (health, metrics, webhook), setup, fair, pods),
    )?;
    let as_sa = service_account_kubeconfig(client, o, kubeconfig, work).await?;
    let log = std::fs::File::create(work.join("kueue.log"))?;
    let mut child = Command::new(o.kueue.join("bin/kueue"))
        .arg(format!("--config={}", config_path.display()))
        .arg(format!("--visibility-server-port={visibility}"))
        .env("KUBECONFIG", &as_sa)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting kueue")?;
    // The rotator writes its certificates into the Secret; the kubelet would mount them into
    // the webhook server's certDir: here the harness copies them.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), NAMESPACE);
    // With its own certificate the harness wrote it before the start.
    let mut mounted = own_ca.is_some();
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if !mounted
            && let Some(data) = secrets.get(SECRET).await?.data
            && data.contains_key("tls.crt")
        {
            for (name, value) in &data {
                std::fs::write(certs.join(name), &value.0)?;
            }
            mounted = true;
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "kueue exited ({status}); see {}",
                work.join("kueue.log").display()
            );
        }
        let ok = http
            .get(format!("http://127.0.0.1:{health}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ok {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "kueue not ready after 120 s; see {}",
                work.join("kueue.log").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if let Some(ca) = &own_ca {
        register_pod_webhooks(client, webhook, ca).await?;
    }
    if shape == Shape::Reclaim {
        reclaim_queues(client, o).await?;
    } else {
        create_queues(client, fair).await?;
    }
    Ok(Controller {
        pid: child.id(),
        child,
        api: None,
        kueue_pods: pods,
    })
}

/// ResourceFlavors per series, one ClusterQueue whose quotas equal the fleet (usage-based
/// admission fair sharing in the fairness run), LocalQueues.
async fn create_queues(client: &kube::Client, fair: bool) -> anyhow::Result<()> {
    let k = |kind: &str, plural: &str| resource("kueue.x-k8s.io", "v1beta2", kind, plural);
    let api_version = "kueue.x-k8s.io/v1beta2";
    let mut flavors = Vec::new();
    for series in SERIES {
        create(
            client,
            &k("ResourceFlavor", "resourceflavors"),
            None,
            json!({
                "apiVersion": api_version, "kind": "ResourceFlavor", "metadata": {"name": series},
                "spec": {"nodeLabels": {tuneplane_core::constants::SERIES_LABEL: series}},
            }),
        )
        .await?;
        flavors.push(json!({"name": series, "resources": [
            {"name": "cpu", "nominalQuota": (NODES_PER_SERIES * NODE_CPUS).to_string()},
            {"name": "memory", "nominalQuota": format!("{}Gi", NODES_PER_SERIES * NODE_MEMORY_GB)},
            {"name": "nvidia.com/gpu", "nominalQuota": (NODES_PER_SERIES * NODE_GPUS).to_string()},
        ]}));
    }
    let mut spec = json!({
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": flavors}],
    });
    if fair {
        spec["admissionScope"] = json!({"admissionMode": "UsageBasedAdmissionFairSharing"});
    }
    create(
        client,
        &k("ClusterQueue", "clusterqueues"),
        None,
        json!({
            "apiVersion": api_version, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
            "spec": spec,
        }),
    )
    .await?;
    for tenant in TENANTS {
        create(
            client,
            &k("LocalQueue", "localqueues"),
            Some(tenant),
            json!({
                "apiVersion": api_version, "kind": "LocalQueue",
                "metadata": {"name": tenant, "namespace": tenant},
                "spec": {"clusterQueue": CLUSTER_QUEUE},
            }),
        )
        .await?;
    }
    wait_active(client, CLUSTER_QUEUE).await
}

/// The cohort of the reclaim run's two ClusterQueues.
pub const RECLAIM_COHORT: &str = "reclaim";

/// The ClusterQueues' preemption in the reclaim run (v1beta2 `ClusterQueuePreemption`):
/// a queue within its nominal quota may preempt any workload of another queue of the cohort that
/// uses more than its own nominal quota (`reclaimWithinCohort: Any`: team-b's jobs are all of one
/// priority, so `LowerPriority` would never preempt them); a borrowing workload preempts nothing
/// in the cohort (`borrowWithinCohort.policy: Never`, the default: team-a never needs to borrow,
/// and team-b's requeued jobs must not take back what team-a reclaimed); within a queue only lower
/// priorities (`withinClusterQueue: LowerPriority`; every job has the same priority, so never).
pub fn reclaim_preemption() -> Value {
    json!({
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "LowerPriority",
    })
}

/// The reclaim run's queues: the h200 ResourceFlavor, a ClusterQueue per tenant (named after it)
/// in one cohort, each with its h200 GPU limit as the nominal quota (team-a `--reclaim-a-gpus`,
/// team-b the rest of the series) and CPU and memory quotas equal to the whole series (never the
/// constraint: every job takes 8 GPUs of a node); borrowing unlimited (no `borrowingLimit`, as
/// TunePlane's `borrow: true`); [`reclaim_preemption`]; BestEffortFIFO; LocalQueues as before.
async fn reclaim_queues(client: &kube::Client, o: &Options) -> anyhow::Result<()> {
    let k = |kind: &str, plural: &str| resource("kueue.x-k8s.io", "v1beta2", kind, plural);
    let api_version = "kueue.x-k8s.io/v1beta2";
    create(
        client,
        &k("ResourceFlavor", "resourceflavors"),
        None,
        json!({
            "apiVersion": api_version, "kind": "ResourceFlavor", "metadata": {"name": RECLAIM_SERIES},
            "spec": {"nodeLabels": {tuneplane_core::constants::SERIES_LABEL: RECLAIM_SERIES}},
        }),
    )
    .await?;
    let series_gpus = NODES_PER_SERIES * NODE_GPUS;
    for (tenant, gpus) in [
        ("team-a", o.reclaim_a_gpus),
        ("team-b", series_gpus - o.reclaim_a_gpus),
    ] {
        let flavor = json!({"name": RECLAIM_SERIES, "resources": [
            {"name": "cpu", "nominalQuota": (NODES_PER_SERIES * NODE_CPUS).to_string()},
            {"name": "memory", "nominalQuota": format!("{}Gi", NODES_PER_SERIES * NODE_MEMORY_GB)},
            {"name": "nvidia.com/gpu", "nominalQuota": gpus.to_string()},
        ]});
        create(
            client,
            &k("ClusterQueue", "clusterqueues"),
            None,
            json!({
                "apiVersion": api_version, "kind": "ClusterQueue", "metadata": {"name": tenant},
                "spec": {
                    "cohortName": RECLAIM_COHORT,
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": reclaim_preemption(),
                    "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [flavor]}],
                },
            }),
        )
        .await?;
        create(
            client,
            &k("LocalQueue", "localqueues"),
            Some(tenant),
            json!({
                "apiVersion": api_version, "kind": "LocalQueue",
                "metadata": {"name": tenant, "namespace": tenant},
                "spec": {"clusterQueue": tenant},
            }),
        )
        .await?;
    }
    for tenant in TENANTS {
        wait_active(client, tenant).await?;
    }
    Ok(())
}

/// Waits until Kueue reports the ClusterQueue `name` Active (usable).
async fn wait_active(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let cq: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues"),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let obj = cq.get(name).await?;
        let active = obj.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Active" && c["status"] == "True")
            });
        if active {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "ClusterQueue {name} not Active after 60 s: {}",
                obj.data["status"]
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn labels(job: &Job) -> Value {
    json!({KEY_LABEL: job.key, "kueue.x-k8s.io/queue-name": job.tenant})
}

/// A pod template with the same resources TunePlane renders for the job's pool.
fn template(job: &Job, head: bool) -> Value {
    let (image, resources, selector) = match job.series {
        None => (
            "python:3.12-slim",
            json!({"cpu": "1", "memory": "1Gi"}),
            json!({}),
        ),
        Some(series) => (
            "rayproject/ray:2.60.0-gpu",
            json!({"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}),
            json!({tuneplane_core::constants::SERIES_LABEL: series}),
        ),
    };
    let name = match (job.series, head) {
        (None, _) => "main",
        (Some(_), true) => "ray-head",
        (Some(_), false) => "ray-worker",
    };
    let mut spec = json!({
            "restartPolicy": if job.series.is_none() { "Never" } else { "Always" },
            "nodeSelector": selector,
            "containers": [{
                "name": name, "image": image, "command": ["python3", "train.py"],
                "resources": {"requests": resources.clone(), "limits": resources},
            }],
    });
    if let Some(g) = job.grace_seconds {
        spec["terminationGracePeriodSeconds"] = json!(g);
    }
    json!({"metadata": {"labels": {KEY_LABEL: job.key}}, "spec": spec})
}

/// Creates the job as Kueue expects it: suspended, labelled with its LocalQueue; with `pods`
/// (the pod integration), a CPU job as a plain Pod with the queue label, which Kueue's webhook
/// gates until admission.
pub async fn submit(client: &kube::Client, job: &Job, pods: bool) -> anyhow::Result<()> {
    let name = &job.key;
    match job.series {
        None if pods => {
            let mut pod = template(job, true);
            pod["apiVersion"] = json!("v1");
            pod["kind"] = json!("Pod");
            pod["metadata"] = json!({"name": name, "namespace": job.tenant, "labels": labels(job)});
            pod["spec"]["activeDeadlineSeconds"] = json!(7200);
            let obj: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod)?;
            let api: Api<k8s_openapi::api::core::v1::Pod> =
                Api::namespaced(client.clone(), job.tenant);
            api.create(&PostParams::default(), &obj).await?;
        }
        None => {
            let obj: BatchJob = serde_json::from_value(json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": job.tenant, "labels": labels(job)},
                "spec": {
                    "suspend": true, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                    "activeDeadlineSeconds": 7200,
                    "template": template(job, true),
                },
            }))?;
            let api: Api<BatchJob> = Api::namespaced(client.clone(), job.tenant);
            api.create(&PostParams::default(), &obj).await?;
        }
        Some(_) => {
            let workers = job.nodes - 1;
            let v = json!({
                "apiVersion": "ray.io/v1", "kind": "RayJob",
                "metadata": {"name": name, "namespace": job.tenant, "labels": labels(job)},
                "spec": {
                    "suspend": true,
                    "entrypoint": "python train.py",
                    "shutdownAfterJobFinishes": true,
                    "activeDeadlineSeconds": 7200,
                    "backoffLimit": 0,
                    "submissionMode": "K8sJobMode",
                    "submitterConfig": {"backoffLimit": 0},
                    "rayClusterSpec": {
                        "headGroupSpec": {"rayStartParams": {}, "template": template(job, true)},
                        "workerGroupSpecs": [{
                            "groupName": "main", "replicas": workers, "minReplicas": workers,
                            "maxReplicas": workers, "rayStartParams": {},
                            "template": template(job, false),
                        }],
                    },
                },
            });
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), job.tenant, &rayjob_resource());
            api.create(&PostParams::default(), &serde_json::from_value(v)?)
                .await?;
        }
    }
    Ok(())
}
