//! Server-side printing: `meta.k8s.io/v1 Table` answers for clients (kubectl) that ask for them,
//! with the columns `kubectl get` shows for each kind.

use std::sync::Arc;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::json::{age, str_at};
use crate::resources::ResourceType;

/// Whether the request's `Accept` header asks for a Table.
pub(super) fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

/// Renders objects as a Table.
pub(super) fn render(rt: &ResourceType, items: &[Arc<Value>], rv: u64) -> Value {
    let columns: &[&str] = match rt.kind {
        "Pod" => &["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"],
        "Node" => &["Name", "Status", "Roles", "Age", "Version"],
        "Event" => &["Last Seen", "Type", "Reason", "Object", "Message"],
        "RayJob" => &[
            "Name",
            "Job Status",
            "Deployment Status",
            "Ray Cluster Name",
            "Start Time",
            "End Time",
            "Age",
        ],
        "RayCluster" => &[
            "Name",
            "Desired Workers",
            "Available Workers",
            "Status",
            "Age",
        ],
        "Job" => &["Name", "Status", "Completions", "Age"],
        "Namespace" => &["Name", "Status", "Age"],
        _ => &["Name", "Age"],
    };
    let defs: Vec<Value> = columns
        .iter()
        .map(|c| {
            let priority = i32::from(matches!((rt.kind, *c), ("Pod", "IP" | "Node")));
            let format = if *c == "Name" { "name" } else { "" };
            json!({"name": c, "type": "string", "format": format, "description": c, "priority": priority})
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let cells: Vec<Value> = columns
                .iter()
                .map(|c| Value::String(cell(rt, o, c)))
                .collect();
            json!({"cells": cells, "object": **o})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

fn cell(rt: &ResourceType, o: &Value, column: &str) -> String {
    let s = |p: &str| str_at(o, p).unwrap_or_default().to_string();
    let created = s("/metadata/creationTimestamp");
    match (rt.kind, column) {
        (_, "Name") => s("/metadata/name"),
        (_, "Age") => age(&created),
        ("Pod", "Ready") => {
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array);
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses.map_or(0, |a| {
                a.iter()
                    .filter(|c| c.get("ready") == Some(&json!(true)))
                    .count()
            });
            format!("{ready}/{total}")
        }
        ("Pod", "Status") => {
            let waiting = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .find_map(|c| c.pointer("/state/waiting/reason").and_then(Value::as_str))
                });
            let terminated = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter().find_map(|c| {
                        c.pointer("/state/terminated/reason")
                            .and_then(Value::as_str)
                    })
                });
            let pod_reason = s("/status/reason");
            if o.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating".into()
            } else if !pod_reason.is_empty() {
                pod_reason
            } else if let Some(r) = waiting.or(terminated) {
                r.to_string()
            } else {
                s("/status/phase")
            }
        }
        ("Pod", "Restarts") => {
            let n: i64 = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |a| {
                    a.iter()
                        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                        .sum()
                });
            n.to_string()
        }
        ("Pod", "IP") => or_none(s("/status/podIP")),
        ("Pod", "Node") => or_none(s("/spec/nodeName")),
        ("Node", "Status") => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|c| c.get("type") == Some(&json!("Ready"))))
                .and_then(|c| c.get("status").and_then(Value::as_str))
                == Some("True");
            let mut status = if ready {
                "Ready".to_string()
            } else {
                "NotReady".to_string()
            };
            if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            status
        }
        ("Node", "Roles") => "<none>".into(),
        ("Node", "Version") => s("/status/nodeInfo/kubeletVersion"),
        ("Event", "Last Seen") => {
            let t = [s("/lastTimestamp"), s("/eventTime"), created]
                .into_iter()
                .find(|t| !t.is_empty())
                .unwrap_or_default();
            age(&t)
        }
        ("Event", "Type") => s("/type"),
        ("Event", "Reason") => s("/reason"),
        ("Event", "Object") => format!(
            "{}/{}",
            s("/involvedObject/kind").to_lowercase(),
            s("/involvedObject/name")
        ),
        ("Event", "Message") => s("/message"),
        ("RayJob", "Job Status") => s("/status/jobStatus"),
        ("RayJob", "Deployment Status") => s("/status/jobDeploymentStatus"),
        ("RayJob", "Ray Cluster Name") => s("/status/rayClusterName"),
        ("RayJob", "Start Time") => s("/status/startTime"),
        ("RayJob", "End Time") => s("/status/endTime"),
        ("RayCluster", "Desired Workers") => o
            .pointer("/status/desiredWorkerReplicas")
            .map(Value::to_string)
            .unwrap_or_default(),
        ("RayCluster", "Available Workers") => o
            .pointer("/status/availableWorkerReplicas")
            .map(Value::to_string)
            .unwrap_or_default(),
        ("RayCluster", "Status") => s("/status/state"),
        ("Job", "Status") => {
            let conds = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let has = |t: &str| {
                conds.iter().any(|c| {
                    c.get("type") == Some(&json!(t)) && c.get("status") == Some(&json!("True"))
                })
            };
            if has("Complete") {
                "Complete".into()
            } else if has("Failed") {
                "Failed".into()
            } else {
                "Running".into()
            }
        }
        ("Job", "Completions") => {
            let done = o
                .pointer("/status/succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = o
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            format!("{done}/{want}")
        }
        ("Namespace", "Status") => s("/status/phase"),
        _ => String::new(),
    }
}

fn or_none(s: String) -> String {
    if s.is_empty() { "<none>".into() } else { s }
}
