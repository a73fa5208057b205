//! Step `fleet`: the nodes as the reconciler reads them.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tuneplane_core::capacity_compute::compute_capacity;
use tuneplane_reconciler::cluster::node_info;

use crate::common::*;
use crate::support::*;

async fn step_fleet(h: &Harness) -> Value {
    let nodes: Api<Node> = Api::all(h.client.clone());
    let mut list = nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items;
    list.sort_by_key(ResourceExt::name_any);
    let infos: Vec<_> = list.iter().map(node_info).collect();
    let mut snapshot = to_json(&compute_capacity(0, &infos, &[]));
    snapshot["taken_at_ms"] = json!(0);
    let nodes: Vec<Value> = list
        .iter()
        .map(|n| {
            let spec = n.spec.clone().unwrap_or_default();
            let status = n.status.clone().unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.clone());
            json!({
                "name": n.name_any(),
                "labels": n.labels(),
                "capacity": status.capacity,
                "allocatable": status.allocatable,
                "unschedulable": spec.unschedulable,
                "taints": spec.taints,
                "ready": ready,
            })
        })
        .collect();
    json!({"nodes": nodes, "node_info": format!("{infos:#?}").lines().collect::<Vec<_>>(), "capacity": snapshot})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_matches_the_real_control_plane() {
    let h = start_transcript().await;
    let obs = step_fleet(&h).await;
    TRANSCRIPT.check("fleet", obs, &Redactor::default());
}
