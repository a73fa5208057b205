//! `GET pods/<name>/log` with `container`, `sinceTime`, `timestamps`, `tailLines`, `limitBytes`
//! and `follow` (followed output comes without timestamps), answering the
//! real server's errors for a missing container name or a container that has not started.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{ApiState, Pieces, ok_body, streamed};
use crate::error::ApiError;
use crate::logs::not_started;
use crate::resources::PODS;
use crate::store::Store;

pub(super) async fn serve(
    state: &ApiState,
    ns: &str,
    name: &str,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let pod = state.store.get(&PODS, ns, name)?;
    let container = pick_container(&pod, name, query.get("container").map(String::as_str))?;
    // A pod without a node has no kubelet to ask: the API server answers 204 with no body.
    if crate::json::str_at(&pod, "/spec/nodeName").is_none_or(str::is_empty) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    if let Some(why) = not_started(&pod, &container) {
        // The kubelet's error body (with its newline) becomes the Status message.
        return Err(ApiError::bad_request(format!("{why}\n")));
    }
    let snapshot = state.store.logs.read(ns, name, &container);
    let first = snapshot.requested(query);
    let follow = query.get("follow").is_some_and(|v| v == "true" || v == "1");
    if !follow || snapshot.closed {
        return Ok(ok_body("text/plain", Body::from(first)));
    }
    let follower = Follower {
        store: state.store.clone(),
        rx: state.store.logs.subscribe(),
        ns: ns.to_string(),
        pod: name.to_string(),
        container,
        offset: snapshot.text.len(),
        pending: Some(first),
    };
    Ok(streamed("text/plain", follower))
}

struct Follower {
    store: Arc<Store>,
    rx: tokio::sync::watch::Receiver<u64>,
    ns: String,
    pod: String,
    container: String,
    offset: usize,
    pending: Option<String>,
}

impl Pieces for Follower {
    /// What was asked of the log first, then what is appended, until the pod's log is closed.
    async fn next_piece(&mut self) -> Option<String> {
        if let Some(first) = self.pending.take() {
            return Some(first);
        }
        loop {
            let snap = self.store.logs.read(&self.ns, &self.pod, &self.container);
            if snap.text.len() > self.offset && snap.text.is_char_boundary(self.offset) {
                let chunk = snap.text[self.offset..].to_string();
                self.offset = snap.text.len();
                return Some(chunk);
            }
            if snap.closed || self.store.try_get(&PODS, &self.ns, &self.pod).is_none() {
                return None;
            }
            // Bounded wait so a deleted pod ends the stream even without further log changes.
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(1), self.rx.changed()).await;
        }
    }
}

fn container_names(pod: &Value, list: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn pick_container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let main = container_names(pod, "containers");
    let init = container_names(pod, "initContainers");
    match asked {
        Some(c) if !c.is_empty() => {
            if main.iter().chain(init.iter()).any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )))
            }
        }
        _ if main.len() == 1 => Ok(main[0].clone()),
        _ => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            main.join(" ")
        ))),
    }
}
