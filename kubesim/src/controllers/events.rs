//! Writes core/v1 Events the way kubelet, the scheduler and operators do: one Event per
//! (object, type, reason, message), whose `count` and `lastTimestamp` grow on repeats.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::json;
use crate::resources::EVENTS;
use crate::store::{Part, Store};

/// `source.component` of the kubelet's events.
pub const KUBELET: &str = "kubelet";

/// One event the kubelet writes about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletEvent {
    /// `Normal` or `Warning`.
    pub ty: &'static str,
    /// The event reason (`Pulled`, `Failed`, `BackOff`, ...).
    pub reason: &'static str,
    /// The event message, in the kubelet's wording.
    pub message: String,
    /// The part of the pod the event is about (`spec.containers{main}`), as the kubelet's
    /// `involvedObject.fieldPath`; `None` for the pod as a whole.
    pub field_path: Option<String>,
}

impl KubeletEvent {
    pub(crate) fn new(
        ty: &'static str,
        reason: &'static str,
        message: String,
        field_path: Option<String>,
    ) -> Self {
        Self {
            ty,
            reason,
            message,
            field_path,
        }
    }
}

/// Event type `Normal`.
pub const NORMAL: &str = "Normal";
/// Event type `Warning`.
pub const WARNING: &str = "Warning";

/// Records Events, folding repeats into a count.
pub struct Recorder {
    store: Arc<Store>,
    seen: HashMap<FoldKey, (String, String)>,
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
        let event = || event_object(obj, ty, reason, message, component, &Origin::default());
        self.record_core(fold_key(obj, ty, reason, message), reason, event);
    }

    /// Records the kubelet's event `e` about the pod `pod`, about a part of it when `e` names one
    /// (`involvedObject.fieldPath`, like `spec.containers{main}`).
    pub fn record_kubelet(&mut self, pod: &Value, e: &KubeletEvent) {
        let origin = Origin {
            host: None,
            field_path: e.field_path.as_deref(),
        };
        let event = || event_object(pod, e.ty, e.reason, &e.message, KUBELET, &origin);
        self.record_core(fold_key(pod, e.ty, e.reason, &e.message), e.reason, event);
    }

    /// Records an event the way components on the `events.k8s.io/v1` API do (kube-scheduler):
    /// `eventTime` and `action` set, no `source` and no `firstTimestamp`/`lastTimestamp` in the
    /// core/v1 view; a repeat bumps `series.count`.
    pub fn record_new(
        &mut self,
        obj: &Value,
        ty: &str,
        reason: &str,
        message: &str,
        component: &str,
        action: &str,
    ) {
        let now = json::now_micro();
        let bump = |e: &mut Value| {
            let count = e
                .pointer("/series/count")
                .and_then(Value::as_i64)
                .unwrap_or(1)
                + 1;
            e["series"] = json!({"count": count, "lastObservedTime": now});
        };
        let event = || {
            let mut event = event_object(obj, ty, reason, message, component, &Origin::default());
            if let Some(m) = event.as_object_mut() {
                for k in ["source", "firstTimestamp", "lastTimestamp", "count"] {
                    m.remove(k);
                }
                m.insert("eventTime".into(), json!(now));
                m.insert("action".into(), json!(action));
                m.insert("reportingInstance".into(), json!(component));
            }
            event
        };
        self.fold_or_create(fold_key(obj, ty, reason, message), reason, bump, event);
    }

    /// A core/v1 Event: a repeat of `key` bumps `count` and `lastTimestamp`.
    fn record_core(&mut self, key: FoldKey, reason: &str, event: impl FnOnce() -> Value) {
        let now = json::now_rfc3339();
        let bump = |e: &mut Value| {
            let count = e.get("count").and_then(Value::as_i64).unwrap_or(1) + 1;
            e["count"] = json!(count);
            e["lastTimestamp"] = json!(now);
        };
        self.fold_or_create(key, reason, bump, event);
    }

    /// A repeat of `key` bumped into its Event with `bump`; otherwise `event()` is created and
    /// remembered under `key`. A failed write is only logged.
    fn fold_or_create(
        &mut self,
        key: FoldKey,
        reason: &str,
        bump: impl FnOnce(&mut Value),
        event: impl FnOnce() -> Value,
    ) {
        if self.seen.len() > MAX_FOLDED {
            self.seen.clear();
        }
        if let Some((ens, ename)) = self.seen.get(&key) {
            let bumped = self.store.update(&EVENTS, ens, ename, Part::Main, |cur| {
                let mut e = cur.clone();
                bump(&mut e);
                Ok(e)
            });
            if bumped.is_ok() {
                return;
            }
        }
        match create_object(&self.store, event()) {
            Ok(at) => {
                self.seen.insert(key, at);
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
) -> Result<(String, String), crate::StatusError> {
    let event = event_object(obj, ty, reason, message, component, &Origin::default());
    create_object(store, event)
}

/// Stores the Event `event`; returns its namespace and name.
fn create_object(store: &Store, event: Value) -> Result<(String, String), crate::StatusError> {
    let (ns, name) = (
        json::namespace(&event).to_string(),
        json::name(&event).to_string(),
    );
    store.create(&EVENTS, &ns, event)?;
    Ok((ns, name))
}

/// Where an event comes from beyond its component: the node that reports it and the part of the
/// object it is about. The simulator leaves both empty; the node agent fills them like a kubelet.
#[derive(Debug, Clone, Copy, Default)]
pub struct Origin<'a> {
    /// The reporting host (`source.host`, `reportingInstance`).
    pub host: Option<&'a str>,
    /// The `involvedObject.fieldPath` (`spec.containers{main}`).
    pub field_path: Option<&'a str>,
}

/// A new core/v1 Event about `obj` (count 1, both timestamps now), named `<object>.<hex time>`
/// in the object's namespace (`default` for cluster-scoped objects).
pub fn event_object(
    obj: &Value,
    ty: &str,
    reason: &str,
    message: &str,
    component: &str,
    origin: &Origin<'_>,
) -> Value {
    let now = json::now_rfc3339();
    let mut ns = json::namespace(obj).to_string();
    if ns.is_empty() {
        ns = "default".into();
    }
    let mut involved = json!({
        "kind": obj.get("kind").cloned().unwrap_or(Value::Null),
        "apiVersion": obj.get("apiVersion").cloned().unwrap_or(Value::Null),
        "namespace": json::namespace(obj),
        "name": json::name(obj),
        "uid": json::uid(obj),
        "resourceVersion": json::str_at(obj, "/metadata/resourceVersion").unwrap_or_default(),
    });
    if let Some(path) = origin.field_path {
        involved["fieldPath"] = json!(path);
    }
    let name = format!(
        "{}.{:x}{}",
        json::name(obj),
        jiff::Timestamp::now().as_nanosecond() as u64 & 0xffff_ffff_ffff,
        json::random_suffix(2)
    );
    let mut source = json!({"component": component});
    if let Some(host) = origin.host {
        source["host"] = json!(host);
    }
    json!({
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": ty,
        "source": source,
        "reportingComponent": component,
        "reportingInstance": origin.host.unwrap_or_default(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    })
}

/// The key under which repeats of an event are folded into one Event's count: the object's uid,
/// the type, reason and message.
pub type FoldKey = (String, String, String, String);

/// The [`FoldKey`] of an event about `obj`.
pub fn fold_key(obj: &Value, ty: &str, reason: &str, message: &str) -> FoldKey {
    (
        json::uid(obj).to_string(),
        ty.to_string(),
        reason.to_string(),
        message.to_string(),
    )
}

/// Most folded events a recorder remembers; past that it forgets them all (and starts new
/// Events for later repeats).
pub const MAX_FOLDED: usize = 50_000;

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
