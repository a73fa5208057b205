//! Writes core/v1 Events the way kubelet, the scheduler and operators do: one Event per
//! (object, type, reason, message), whose `count` and `lastTimestamp` grow on repeats.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::json;
use crate::resources::EVENTS;
use crate::store::Store;

/// Event type `Normal`.
pub const NORMAL: &str = "Normal";
/// Event type `Warning`.
pub const WARNING: &str = "Warning";

/// Records Events, folding repeats into a count.
pub struct Recorder {
    store: Arc<Store>,
    seen: HashMap<(String, String, String, String), (String, String)>,
}

impl Recorder {
    /// A recorder writing into `store`.
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            seen: HashMap::new(),
        }
    }

    /// Records an event about `obj` from `component`.
    pub fn record(&mut self, obj: &Value, ty: &str, reason: &str, message: &str, component: &str) {
        if self.seen.len() > 50_000 {
            self.seen.clear();
        }
        let uid = json::uid(obj).to_string();
        let key = (
            uid.clone(),
            ty.to_string(),
            reason.to_string(),
            message.to_string(),
        );
        let now = json::now_rfc3339();
        if let Some((ens, ename)) = self.seen.get(&key) {
            let bumped = self.store.update(&EVENTS, ens, ename, false, |cur| {
                let mut e = cur.clone();
                let count = e.get("count").and_then(Value::as_i64).unwrap_or(1) + 1;
                e["count"] = json!(count);
                e["lastTimestamp"] = json!(now);
                Ok(e)
            });
            if bumped.is_ok() {
                return;
            }
        }
        match create(&self.store, obj, ty, reason, message, component) {
            Ok((ns, name)) => {
                self.seen.insert(key, (ns, name));
            }
            Err(e) => tracing::debug!(error = %e, reason, "event not recorded"),
        }
    }
}

/// Writes one new Event about `obj`; returns its namespace and name.
pub fn create(
    store: &Store,
    obj: &Value,
    ty: &str,
    reason: &str,
    message: &str,
    component: &str,
) -> Result<(String, String), crate::ApiError> {
    let now = json::now_rfc3339();
    let mut ns = json::namespace(obj).to_string();
    if ns.is_empty() {
        ns = "default".into();
    }
    let involved = json!({
        "kind": obj.get("kind").cloned().unwrap_or(Value::Null),
        "apiVersion": obj.get("apiVersion").cloned().unwrap_or(Value::Null),
        "namespace": json::namespace(obj),
        "name": json::name(obj),
        "uid": json::uid(obj),
        "resourceVersion": json::str_at(obj, "/metadata/resourceVersion").unwrap_or_default(),
    });
    let name = format!(
        "{}.{:x}{}",
        json::name(obj),
        jiff::Timestamp::now().as_nanosecond() as u64 & 0xffff_ffff_ffff,
        json::random_suffix(2)
    );
    let event = json!({
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": ty,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": "",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    store.create(&EVENTS, &ns, event)?;
    Ok((ns, name))
}

/// Deletes Events last seen more than `ttl` ago, as the API server's event TTL does.
pub fn expire(store: &Store, ttl: std::time::Duration) {
    for e in store.all(&EVENTS) {
        let last = [
            "/lastTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ]
        .iter()
        .find_map(|p| json::str_at(&e, p).filter(|s| !s.is_empty()))
        .unwrap_or_default();
        if json::seconds_since(last) > ttl.as_secs_f64() {
            // Already gone (deleted with its namespace) is fine.
            let _ = store.delete(
                &EVENTS,
                json::namespace(&e),
                json::name(&e),
                &Default::default(),
            );
        }
    }
}
