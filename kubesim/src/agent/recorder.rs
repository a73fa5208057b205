//! The agent's event recorder: writes core/v1 Events through the API the way a kubelet does
//! (source component `kubelet` and host = the node, reportingInstance = the node, fieldPath of the
//! container), folding repeats of the same (object, type, reason, message) into one Event's
//! `count` and `lastTimestamp`, like the simulator's [`Recorder`](crate::controllers::events::Recorder).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::COMPONENT;
use super::retry::{retry, status_code};
use crate::controllers::events::{FoldKey, MAX_FOLDED, Origin, event_object, fold_key};
use crate::json;

/// An Event written before: where it is and its count.
#[derive(Debug, Clone)]
struct Written {
    namespace: String,
    name: String,
    count: i64,
}

/// Records Events through the API, folding repeats into a count. Failures are logged, never
/// returned: events are best effort, as in a kubelet.
pub(crate) struct Recorder {
    client: kube::Client,
    seen: Mutex<HashMap<FoldKey, Written>>,
}

impl Recorder {
    /// A recorder writing with `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            client,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<FoldKey, Written>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an event about `obj` (a pod or node as JSON, with kind and uid) reported by the
    /// kubelet of `node`.
    pub(crate) async fn record(
        &self,
        obj: &Value,
        ty: &str,
        reason: &str,
        message: &str,
        node: &str,
        field_path: Option<&str>,
    ) {
        let key = fold_key(obj, ty, reason, message);
        let previous = {
            let mut seen = self.seen();
            if seen.len() > MAX_FOLDED {
                seen.clear();
            }
            seen.get(&key).cloned()
        };
        if let Some(w) = previous {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &w.namespace);
            let patch = json!({"count": w.count + 1, "lastTimestamp": json::now_rfc3339()});
            let bumped = retry("bumping an event's count", || async {
                api.patch(&w.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            })
            .await;
            match bumped {
                Ok(_) => {
                    self.seen().insert(
                        key,
                        Written {
                            count: w.count + 1,
                            ..w
                        },
                    );
                    return;
                }
                // Expired or deleted: write a new one.
                Err(e) if status_code(&e) == Some(404) => {}
                Err(e) => {
                    tracing::warn!(error = %e, reason, "event count not updated");
                    return;
                }
            }
        }
        let origin = Origin {
            host: Some(node),
            field_path,
        };
        let body = event_object(obj, ty, reason, message, COMPONENT, &origin);
        let event: Event = match serde_json::from_value(body) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, reason, "event not built");
                return;
            }
        };
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match retry("creating an event", || async {
            api.create(&PostParams::default(), &event).await
        })
        .await
        {
            Ok(created) => {
                let name = created.metadata.name.unwrap_or_default();
                self.seen().insert(
                    key,
                    Written {
                        namespace,
                        name,
                        count: 1,
                    },
                );
            }
            Err(e) => tracing::warn!(error = %e, reason, "event not recorded"),
        }
    }
}
