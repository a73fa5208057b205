//! The agent's Nodes: registration (create, or update labels and spec when the node exists, then
//! the status through `/status`: the API server drops status on create), the Lease each node
//! renews in `kube-node-lease`, the Ready condition's heartbeat, readiness and cordon changes, and
//! deletion.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::Resource;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;
use tuneplane_core::fleet::Fleet;

use super::recorder::Recorder;
use super::retry::{retry, status_code};
use super::{AgentError, NODE_IP};
use crate::controllers::events::NORMAL;
use crate::json;

/// Namespace of the node Leases.
pub(crate) const LEASE_NAMESPACE: &str = "kube-node-lease";

/// `leaseDurationSeconds` of the node Leases (the kubelet's default).
pub(crate) const LEASE_SECONDS: i32 = 40;

/// What the agent knows of one of its nodes.
#[derive(Debug, Clone)]
struct NodeState {
    /// The Node as the fleet describes it (adjusted for the agent), status included.
    object: Value,
    /// Whether it reports Ready.
    ready: bool,
    /// When its Ready condition last changed (RFC 3339).
    transition: String,
    /// Its uid once registered.
    uid: String,
    /// Deleted by [`NodeSet::delete_all`] or [`NodeSet::delete_one`]: no more heartbeats.
    deleted: bool,
    /// Its kubelet is down ([`NodeSet::set_ready`] false): no Lease renewals, no heartbeats, no
    /// pod work.
    down: bool,
}

/// How one of the agent's nodes is, as its pods see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// The kubelet runs: pods advance, deletions are confirmed.
    Up,
    /// The kubelet is down (the node NotReady, then stale): pods are left as they are, their
    /// processes keep running, nothing is written for them.
    Down,
    /// The machine is gone: its pods' processes are killed, nothing is written for them.
    Gone,
}

/// The agent's nodes and their API writes.
pub(crate) struct NodeSet {
    nodes: Api<Node>,
    leases: Api<Lease>,
    names: Vec<String>,
    state: Mutex<BTreeMap<String, NodeState>>,
    recorder: std::sync::Arc<Recorder>,
}

fn build<T: DeserializeOwned>(what: &str, v: Value) -> Result<T, AgentError> {
    serde_json::from_value(v).map_err(|source| AgentError::Build {
        what: what.to_string(),
        source,
    })
}

fn kube_err(what: String) -> impl FnOnce(kube::Error) -> AgentError {
    move |source| AgentError::Kube { what, source }
}

/// The fleet's Node `node` as the agent registers it: InternalIP 127.0.0.1 and the kubelet
/// endpoint's port.
fn agent_node(mut node: Value, kubelet_port: u16) -> Value {
    let name = json::name(&node).to_string();
    node["status"]["addresses"] = json!([
        {"type": "InternalIP", "address": NODE_IP},
        {"type": "Hostname", "address": name},
    ]);
    node["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": kubelet_port}});
    node
}

/// The merge patch that writes a node's whole status, its conditions last heard now.
fn status_patch(state: &NodeState) -> Value {
    let mut status = state.object["status"].clone();
    status["conditions"] = heartbeat_conditions(state);
    json!({"status": status})
}

fn heartbeat_conditions(state: &NodeState) -> Value {
    crate::fleet::node_conditions(state.ready, &json::now_rfc3339(), &state.transition)
}

/// The merge patch that brings an existing node's labels and spec to the fleet's.
fn spec_patch(node: &Value) -> Value {
    let mut spec = json!({"taints": node["spec"]["taints"].clone()});
    spec["unschedulable"] = if node["spec"]["unschedulable"] == true {
        json!(true)
    } else {
        Value::Null
    };
    json!({"metadata": {"labels": node["metadata"]["labels"].clone()}, "spec": spec})
}

fn lease_object(name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": json::now_micro(),
        },
    })
}

/// The kind of `K` in messages (`Node`, `Lease`).
fn kind<K: Resource<DynamicType = ()>>() -> String {
    K::kind(&()).into_owned()
}

/// Merge-patches object `name` (its `/status` when `status`), with the bounded retries.
async fn merge_raw<K>(
    api: &Api<K>,
    name: &str,
    patch: &Value,
    status: bool,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
    retry("merge-patching an object", || async {
        if status {
            api.patch_status(name, &params, &patch).await
        } else {
            api.patch(name, &params, &patch).await
        }
    })
    .await
}

/// [`merge_raw`], failing with what was patched.
async fn merge<K>(api: &Api<K>, name: &str, patch: &Value, status: bool) -> Result<K, AgentError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let what = if status { "the status of " } else { "" };
    merge_raw(api, name, patch, status)
        .await
        .map_err(kube_err(format!("patching {what}{} {name}", kind::<K>())))
}

/// Creates `object`, or merge-patches it with `patch` when it exists, with the bounded retries.
async fn create_or_patch<K>(
    api: &Api<K>,
    name: &str,
    object: &K,
    patch: &Value,
) -> Result<K, AgentError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    // An existing object may be deleted between the create's 409 and the patch: a node Lease of
    // an earlier run, owned by a Node of the same name that no longer exists, is removed by the
    // garbage collector at any moment. Then the create is tried again (a few times at most).
    let mut attempts = 0;
    loop {
        attempts += 1;
        let created = retry("creating an object", || async {
            api.create(&PostParams::default(), object).await
        })
        .await;
        match created {
            Ok(o) => return Ok(o),
            Err(e) if status_code(&e) == Some(409) => {
                match merge_raw(api, name, patch, false).await {
                    Ok(o) => return Ok(o),
                    Err(e) if status_code(&e) == Some(404) && attempts < 5 => continue,
                    Err(e) => return Err(kube_err(format!("patching {} {name}", kind::<K>()))(e)),
                }
            }
            Err(e) => return Err(kube_err(format!("creating {} {name}", kind::<K>()))(e)),
        }
    }
}

impl NodeSet {
    /// The fleet's nodes, reporting `kubelet_port` as their kubelet endpoint.
    pub(crate) fn new(
        client: kube::Client,
        fleet: &Fleet,
        kubelet_port: u16,
        recorder: std::sync::Arc<Recorder>,
    ) -> Self {
        let now = json::now_rfc3339();
        let mut names = Vec::new();
        let mut state = BTreeMap::new();
        for node in crate::fleet::nodes(fleet) {
            let name = json::name(&node).to_string();
            let ready = crate::fleet::is_ready(&node);
            names.push(name.clone());
            state.insert(
                name,
                NodeState {
                    object: agent_node(node, kubelet_port),
                    ready,
                    transition: now.clone(),
                    uid: String::new(),
                    deleted: false,
                    down: false,
                },
            );
        }
        Self {
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client, LEASE_NAMESPACE),
            names,
            state: Mutex::new(state),
            recorder,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeState>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, name: &str) -> Result<NodeState, AgentError> {
        self.state()
            .get(name)
            .cloned()
            .ok_or_else(|| AgentError::UnknownNode(name.to_string()))
    }

    /// The node names, in fleet order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Registers every node: Node, status, Lease.
    pub(crate) async fn register(&self) -> Result<(), AgentError> {
        for name in &self.names {
            self.register_one(name).await?;
        }
        Ok(())
    }

    async fn register_one(&self, name: &str) -> Result<(), AgentError> {
        let st = self.get(name)?;
        let mut bare = st.object.clone();
        if let Some(m) = bare.as_object_mut() {
            m.remove("status");
        }
        let node: Node = build(&format!("node {name}"), bare)?;
        let registered = create_or_patch(&self.nodes, name, &node, &spec_patch(&st.object)).await?;
        let uid = registered.metadata.uid.unwrap_or_default();
        merge(&self.nodes, name, &status_patch(&st), true).await?;
        if let Some(s) = self.state().get_mut(name) {
            s.uid = uid.clone();
            s.deleted = false;
            s.down = false;
        }
        self.ensure_lease(name, &uid).await?;
        tracing::info!(node = name, ready = st.ready, "node registered");
        Ok(())
    }

    /// Creates the node's Lease, or takes over an existing one.
    async fn ensure_lease(&self, name: &str, uid: &str) -> Result<(), AgentError> {
        let object = lease_object(name, uid);
        let lease: Lease = build(&format!("lease {name}"), object.clone())?;
        create_or_patch(&self.leases, name, &lease, &object)
            .await
            .map(|_| ())
    }

    /// How node `name` is (a name not of the agent's counts as gone).
    pub(crate) fn health(&self, name: &str) -> Health {
        match self.state().get(name) {
            Some(s) if s.deleted => Health::Gone,
            Some(s) if s.down => Health::Down,
            Some(_) => Health::Up,
            None => Health::Gone,
        }
    }

    fn live(&self) -> Vec<(String, NodeState)> {
        self.state()
            .iter()
            .filter(|(_, s)| !s.deleted && !s.down)
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect()
    }

    /// Renews every live node's Lease (re-creating a missing one).
    async fn renew_leases(&self) {
        for (name, st) in self.live() {
            let patch = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": json::now_micro()}});
            let renewed = merge_raw(&self.leases, &name, &patch, false).await;
            match renewed {
                Ok(_) => {}
                Err(e) if status_code(&e) == Some(404) => {
                    if let Err(e) = self.ensure_lease(&name, &st.uid).await {
                        tracing::warn!(error = %e, node = name, "node lease not re-created");
                    }
                }
                Err(e) => tracing::warn!(error = %e, node = name, "node lease not renewed"),
            }
        }
    }

    /// Writes the conditions of one node, last heard now.
    async fn write_conditions(&self, name: &str, st: &NodeState) -> Result<(), AgentError> {
        let patch = json!({"status": {"conditions": heartbeat_conditions(st)}});
        merge(&self.nodes, name, &patch, true).await.map(|_| ())
    }

    /// Refreshes every live node's heartbeat.
    async fn heartbeat(&self) {
        for (name, st) in self.live() {
            if let Err(e) = self.write_conditions(&name, &st).await {
                tracing::warn!(error = %e, node = name, "node heartbeat not written");
            }
        }
    }

    /// Renews Leases every `lease_every` and heartbeats every `heartbeat_every` until `stop`.
    pub(crate) async fn run(
        &self,
        lease_every: Duration,
        heartbeat_every: Duration,
        mut stop: watch::Receiver<bool>,
    ) {
        let start = tokio::time::Instant::now();
        let mut leases = tokio::time::interval_at(start + lease_every, lease_every);
        let mut beats = tokio::time::interval_at(start + heartbeat_every, heartbeat_every);
        for i in [&mut leases, &mut beats] {
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = leases.tick() => self.renew_leases().await,
                _ = beats.tick() => self.heartbeat().await,
            }
        }
    }

    /// Turns a node Ready or NotReady, with the kubelet's `NodeReady` / `NodeNotReady` event.
    ///
    /// NotReady is a kubelet that reports NotReady once and then goes silent: its Lease is no
    /// longer renewed nor its heartbeat written (the node lifecycle controller turns the node
    /// `Unknown` once they are older than its grace period) and its pods are left alone (no
    /// status writes, graceful deletions not confirmed). Ready again renews the Lease at once and
    /// resumes all of it.
    pub(crate) async fn set_ready(&self, name: &str, ready: bool) -> Result<(), AgentError> {
        let st = {
            let mut state = self.state();
            let s = state
                .get_mut(name)
                .ok_or_else(|| AgentError::UnknownNode(name.to_string()))?;
            if s.deleted {
                return Err(AgentError::UnknownNode(name.to_string()));
            }
            if s.ready != ready {
                s.ready = ready;
                s.transition = json::now_rfc3339();
            }
            s.down = !ready;
            s.clone()
        };
        self.write_conditions(name, &st).await?;
        if ready {
            let patch = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": json::now_micro()}});
            if let Err(e) = merge_raw(&self.leases, name, &patch, false).await {
                if status_code(&e) == Some(404) {
                    self.ensure_lease(name, &st.uid).await?;
                } else {
                    return Err(kube_err(format!("renewing the Lease of node {name}"))(e));
                }
            }
        }
        let reason = if ready { "NodeReady" } else { "NodeNotReady" };
        let mut node = st.object.clone();
        node["metadata"]["uid"] = json!(st.uid);
        let message = format!("Node {name} status is now: {reason}");
        self.recorder
            .record(&node, NORMAL, reason, &message, name, None)
            .await;
        Ok(())
    }

    /// Sets or clears `spec.unschedulable`.
    pub(crate) async fn cordon(&self, name: &str, cordoned: bool) -> Result<(), AgentError> {
        self.get(name)?;
        let value = if cordoned { json!(true) } else { Value::Null };
        let patch = json!({"spec": {"unschedulable": value}});
        merge(&self.nodes, name, &patch, false).await.map(|_| ())
    }

    /// Puts `taint` on node `name` (replacing one with the same key and effect), read-modify-
    /// write with the resourceVersion as precondition, retried on conflicts.
    pub(crate) async fn taint(&self, name: &str, taint: Value) -> Result<(), AgentError> {
        self.get(name)?;
        self.edit_taints(name, |node| crate::fleet::add_taint(node, taint.clone()))
            .await
    }

    /// Removes node `name`'s taints with key `key`.
    pub(crate) async fn untaint(&self, name: &str, key: &str) -> Result<(), AgentError> {
        self.get(name)?;
        self.edit_taints(name, |node| crate::fleet::remove_taint(node, key, None))
            .await
    }

    async fn edit_taints(
        &self,
        name: &str,
        edit: impl Fn(&mut Value) -> bool,
    ) -> Result<(), AgentError> {
        let what = || format!("changing the taints of node {name}");
        let mut attempts = 0;
        loop {
            attempts += 1;
            let node = retry("reading a node", || async { self.nodes.get(name).await })
                .await
                .map_err(kube_err(what()))?;
            let mut value = serde_json::to_value(&node).map_err(|source| AgentError::Build {
                what: format!("node {name}"),
                source,
            })?;
            if !edit(&mut value) {
                return Ok(());
            }
            let taints = value
                .pointer("/spec/taints")
                .cloned()
                .unwrap_or_else(|| json!([]));
            let patch = json!({
                "metadata": {"resourceVersion": node.metadata.resource_version},
                "spec": {"taints": taints},
            });
            match merge_raw(&self.nodes, name, &patch, false).await {
                Ok(_) => return Ok(()),
                Err(e) if status_code(&e) == Some(409) && attempts < 5 => continue,
                Err(e) => return Err(kube_err(what())(e)),
            }
        }
    }

    /// Deletes node `name` and its Lease as a lost machine goes: heartbeats stop, its pods are
    /// left to the cluster (the agent kills their processes and writes nothing for them).
    pub(crate) async fn delete_one(&self, name: &str) -> Result<(), AgentError> {
        match self.state().get_mut(name) {
            Some(s) => s.deleted = true,
            None => return Err(AgentError::UnknownNode(name.to_string())),
        }
        self.delete_objects(name).await
    }

    /// Deletes the Lease and the Node `name` (already gone is fine).
    async fn delete_objects(&self, name: &str) -> Result<(), AgentError> {
        let lease = retry("deleting a node lease", || async {
            self.leases.delete(name, &DeleteParams::default()).await
        })
        .await;
        let node = retry("deleting a node", || async {
            self.nodes.delete(name, &DeleteParams::default()).await
        })
        .await;
        let mut first_error = None;
        for (what, result) in [("lease", lease.map(|_| ())), ("node", node.map(|_| ()))] {
            if let Err(e) = result
                && status_code(&e) != Some(404)
            {
                tracing::warn!(error = %e, node = %name, what, "delete failed");
                first_error.get_or_insert_with(|| {
                    kube_err(format!("deleting the {what} of node {name}"))(e)
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Deletes every node and its Lease (already gone is fine); heartbeats for them stop.
    pub(crate) async fn delete_all(&self) -> Result<(), AgentError> {
        for s in self.state().values_mut() {
            s.deleted = true;
        }
        let mut first_error = None;
        for name in &self.names {
            if let Err(e) = self.delete_objects(name).await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Fleet {
        Fleet::from_yaml(
            "node_groups:\n- {name: g, series: h200, count: 3, gpus: 8, cpus: 8, memory_gb: 64, cordoned: 1, not_ready: 1}\n",
        )
        .unwrap()
    }

    #[test]
    fn agent_nodes_report_loopback_and_the_kubelet_port() {
        let nodes = crate::fleet::nodes(&fleet());
        let n = agent_node(nodes[0].clone(), 10250);
        assert_eq!(
            n["status"]["addresses"][0],
            json!({"type": "InternalIP", "address": "127.0.0.1"})
        );
        assert_eq!(n["status"]["addresses"][1]["address"], "g-0");
        assert_eq!(
            n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            10250
        );
        // The whole object converts to the API type.
        let node: Node = build("node", n).unwrap();
        assert_eq!(node.metadata.name.as_deref(), Some("g-0"));
    }

    #[test]
    fn patches_carry_conditions_cordons_and_lease_owners() {
        let nodes = crate::fleet::nodes(&fleet());
        let st = NodeState {
            object: agent_node(nodes[1].clone(), 1),
            ready: false,
            transition: "2025-01-01T00:00:00Z".into(),
            uid: "u".into(),
            deleted: false,
            down: false,
        };
        let p = status_patch(&st);
        let ready = &p["status"]["conditions"][3];
        assert_eq!(ready["type"], "Ready");
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["lastTransitionTime"], "2025-01-01T00:00:00Z");
        assert_ne!(ready["lastHeartbeatTime"], "2025-01-01T00:00:00Z");
        assert_eq!(p["status"]["capacity"]["nvidia.com/gpu"], "8");
        assert_eq!(spec_patch(&nodes[2])["spec"]["unschedulable"], true);
        assert_eq!(spec_patch(&nodes[0])["spec"]["unschedulable"], Value::Null);
        let lease: Lease = build("lease", lease_object("g-0", "u")).unwrap();
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("g-0"));
        assert_eq!(spec.lease_duration_seconds, Some(LEASE_SECONDS));
        assert!(spec.renew_time.is_some());
        let owners = lease.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners[0].uid, "u");
    }
}
