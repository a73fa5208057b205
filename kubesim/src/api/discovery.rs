//! Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`, `/version`) in the
//! legacy (non-aggregated) form, which kubectl and kube-rs fall back to.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiState, Route, json_response};
use crate::resources::{self, ResourceType};

/// The Kubernetes version the simulator reports.
pub const KUBE_VERSION: (&str, &str) = ("1", "33");

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(super) fn handle(state: &ApiState, route: &Route, uri: &Uri) -> Response {
    match route {
        Route::CoreVersions => json_response(
            StatusCode::OK,
            &json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": uri.authority().map(|a| a.to_string()).unwrap_or_default()}],
            }),
        ),
        Route::Groups => {
            let groups: Vec<Value> = resources::groups(state.kuberay)
                .iter()
                .map(|(g, v)| group_doc(g, v))
                .collect();
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            )
        }
        Route::Group(g) => {
            let v = resources::groups(state.kuberay)
                .into_iter()
                .find(|(name, _)| name == g)
                .map(|(_, v)| v)
                .unwrap_or("v1");
            let mut doc = group_doc(g, v);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            json_response(StatusCode::OK, &doc)
        }
        Route::Resources(group, version) => {
            let list: Vec<Value> = resources::ALL
                .iter()
                .filter(|r| {
                    r.group == group && r.version == version && (state.kuberay || !r.kuberay)
                })
                .flat_map(|r| resource_docs(r))
                .collect();
            let gv = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
            )
        }
        Route::Version => json_response(
            StatusCode::OK,
            &json!({
                "major": KUBE_VERSION.0,
                "minor": KUBE_VERSION.1,
                "gitVersion": format!("v{}.{}.0-kubesim", KUBE_VERSION.0, KUBE_VERSION.1),
                "gitCommit": "kubesim",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "none",
                "compiler": "rustc",
                "platform": "linux/amd64",
            }),
        ),
        Route::Health => (StatusCode::OK, "ok").into_response(),
        Route::Resource(_) | Route::PodProxy(..) => {
            crate::error::StatusError::no_route(uri.path()).into_response()
        }
    }
}

fn group_doc(group: &str, version: &str) -> Value {
    let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
}

fn resource_docs(r: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": VERBS,
    });
    if !r.short_names.is_empty() {
        main["shortNames"] = json!(r.short_names);
    }
    if matches!(
        r.plural,
        "pods" | "rayjobs" | "rayclusters" | "jobs" | "services"
    ) {
        main["categories"] = json!(["all"]);
    }
    let mut out = vec![main];
    if r.status {
        out.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
    }
    if r.plural == "pods" {
        out.push(json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}));
    }
    out
}
