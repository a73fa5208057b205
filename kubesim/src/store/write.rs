//! Writes: create, update (main resource or `/status`), delete with finalizers and cascading.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{EventType, Inner, Store, defaults};
use crate::error::StatusError;
use crate::json::{self, str_at};
use crate::resources::{self, ResourceType};

/// Which part of an object an [`Store::update`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource, as a client's PUT or PATCH: the stored `status` is kept for types with a
    /// status subresource.
    Main,
    /// The `/status` subresource: only the returned `status` is kept.
    Status,
    /// Spec and status at once, as the simulated controllers do (no client can).
    Full,
}

/// What to do with dependents of a deleted object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete dependents after the owner (the default here; `Foreground` is treated alike).
    #[default]
    Background,
    /// Leave dependents alone.
    Orphan,
}

/// Options of a delete request.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Dependents policy.
    pub propagation: Propagation,
    /// Precondition on the resourceVersion.
    pub resource_version: Option<String>,
    /// Precondition on the uid.
    pub uid: Option<String>,
    /// `gracePeriodSeconds` of the request: `Some(0)` deletes a pod at once (force); otherwise a
    /// pod whose kubelet cannot confirm its end is only marked (see [`Store::delete`]).
    pub grace_period_seconds: Option<i64>,
}

impl Store {
    /// Creates an object in namespace `ns` (ignored for cluster-scoped types).
    pub fn create(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, StatusError> {
        if !obj.is_object() {
            return Err(StatusError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type_meta(rt, &obj)?;
        let ns = if rt.namespaced { ns } else { "" };
        let meta = json::obj_mut(&mut obj, "metadata");
        match meta.get("namespace").and_then(Value::as_str) {
            Some(body_ns) if rt.namespaced && !body_ns.is_empty() && body_ns != ns => {
                return Err(StatusError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
        let name = match (
            meta.get("name").and_then(Value::as_str),
            meta.get("generateName").and_then(Value::as_str),
        ) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(prefix)) if !prefix.is_empty() => {
                format!("{prefix}{}", json::random_suffix(5))
            }
            _ => {
                return Err(StatusError::invalid(
                    rt.kind,
                    rt.group,
                    "",
                    &[(
                        "metadata.name".into(),
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        };
        let mut causes: Vec<(String, String)> = Vec::new();
        if !json::is_dns_subdomain(&name) {
            causes.push((
                "metadata.name".into(),
                format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                ),
            ));
        }
        if std::ptr::eq(rt, &resources::PODS)
            && obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
        {
            causes.push(("spec.containers".into(), "Required value".into()));
        }
        if !causes.is_empty() {
            return Err(StatusError::invalid(rt.kind, rt.group, &name, &causes));
        }
        let meta = json::obj_mut(&mut obj, "metadata");
        meta.insert("name".into(), Value::String(name.clone()));
        if rt.namespaced {
            meta.insert("namespace".into(), Value::String(ns.to_string()));
        } else {
            meta.remove("namespace");
        }
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.insert(
            "creationTimestamp".into(),
            Value::String(json::now_rfc3339()),
        );
        meta.insert("generation".into(), json!(1));
        defaults::prepare_create(rt, &mut obj);

        let mut inner = self.lock();
        if rt.namespaced {
            let exists = inner
                .tables
                .get(resources::NAMESPACES.plural)
                .is_some_and(|t| t.contains_key(&(String::new(), ns.to_string())));
            if !exists {
                return Err(StatusError::not_found("namespaces", "", ns));
            }
        }
        if inner
            .table(rt)
            .contains_key(&(ns.to_string(), name.clone()))
        {
            return Err(StatusError::already_exists(rt.plural, rt.group, &name));
        }
        inner.uid_seq += 1;
        let uid = make_uid(inner.uid_seq);
        json::obj_mut(&mut obj, "metadata").insert("uid".into(), Value::String(uid));
        Ok(inner.commit(self, rt, EventType::Added, obj, None))
    }

    /// Updates `part` of an object through `f`, which gets the current object and returns the new
    /// one.
    ///
    /// A `metadata.resourceVersion` in the result that differs from the stored one is a 409
    /// Conflict. A write that changes nothing does not bump the resourceVersion. Removing the last
    /// finalizer of an object being deleted removes it.
    pub fn update(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        part: Part,
        f: impl FnOnce(&Value) -> Result<Value, StatusError>,
    ) -> Result<Arc<Value>, StatusError> {
        let status_only = part == Part::Status;
        let mut inner = self.lock();
        let current = inner.existing(rt, ns, name)?;
        let mut new = f(&current)?;
        if !new.is_object() {
            return Err(StatusError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        check_type_meta(rt, &new)?;
        let cur_rv = str_at(&current, "/metadata/resourceVersion").unwrap_or_default();
        match str_at(&new, "/metadata/resourceVersion") {
            Some(rv) if !rv.is_empty() && rv != cur_rv => {
                return Err(StatusError::conflict(rt.plural, rt.group, name));
            }
            _ => {}
        }
        if let Some(n) = str_at(&new, "/metadata/name")
            && n != name
        {
            return Err(StatusError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if status_only {
            let status = new.get("status").cloned();
            new = (*current).clone();
            set_status(&mut new, status);
        } else if rt.status && part == Part::Main {
            set_status(&mut new, current.get("status").cloned());
        }
        // Server-owned metadata is never taken from the client.
        let old_meta = current.get("metadata").cloned().unwrap_or_default();
        let meta = json::obj_mut(&mut new, "metadata");
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ] {
            match old_meta.get(k) {
                Some(v) => meta.insert(k.into(), v.clone()),
                None => meta.remove(k),
            };
        }
        meta.insert("name".into(), Value::String(name.to_string()));
        meta.insert("resourceVersion".into(), Value::String(cur_rv.to_string()));
        new["kind"] = Value::String(rt.kind.to_string());
        new["apiVersion"] = Value::String(rt.api_version());
        if new == *current {
            return Ok(current);
        }
        if !status_only && spec_changed(&current, &new) {
            let generation = json::i64_at(&current, "/metadata/generation").unwrap_or(1) + 1;
            json::obj_mut(&mut new, "metadata").insert("generation".into(), json!(generation));
        }
        // An object being deleted goes with its last finalizer, unless it is a pod in its
        // graceful deletion (its kubelet still has to confirm, with a delete of grace 0).
        let deleting = new.pointer("/metadata/deletionTimestamp").is_some();
        if deleting && finalizers(&new).is_empty() && deletion_grace(&new) == 0 {
            let obj = inner.commit(self, rt, EventType::Deleted, new, Some(current));
            self.after_removal(&mut inner, rt, &obj, Propagation::Background);
            return Ok(obj);
        }
        Ok(inner.commit(self, rt, EventType::Modified, new, Some(current)))
    }

    /// [`Store::update`] of [`Part::Full`]: what the simulated controllers write.
    pub fn update_all(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        f: impl FnOnce(&Value) -> Result<Value, StatusError>,
    ) -> Result<Arc<Value>, StatusError> {
        self.update(rt, ns, name, Part::Full, f)
    }

    /// Deletes an object. With finalizers it is only marked (`deletionTimestamp`) and returned;
    /// otherwise it is removed and its dependents are deleted (unless orphaned).
    ///
    /// Pods: the real API server deletes a bound, non-terminal pod gracefully (it is marked with
    /// `deletionTimestamp` = now + the grace period and `deletionGracePeriodSeconds`) and its
    /// kubelet removes it once its containers stopped. kubesim's kubelet of a Ready node does
    /// that at once for a simulated pod, so such a pod is removed here as before; an executed
    /// pod (a process on this machine) is marked and its kubelet removes it once the process
    /// ended after its SIGTERM (what it prints meanwhile is in its log); a pod whose kubelet is gone (its
    /// node NotReady, or no longer there) stays marked — `Terminating` — until the node is Ready
    /// again, the pod is deleted with `gracePeriodSeconds: 0` (force) or the pod garbage
    /// collector removes it. A shorter grace period on a marked pod moves its deadline earlier.
    pub fn delete(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<Value>, StatusError> {
        let executing = std::ptr::eq(rt, &resources::PODS)
            && self
                .try_get(rt, ns, name)
                .is_some_and(|p| self.is_executing(json::uid(&p)));
        let mut inner = self.lock();
        let current = inner.existing(rt, ns, name)?;
        if let Some(u) = opts.uid.as_deref()
            && u != json::uid(&current)
        {
            let have = json::uid(&current);
            return Err(StatusError::precondition_failed(
                rt.kind, name, "UID", u, have,
            ));
        }
        let have_rv = str_at(&current, "/metadata/resourceVersion").unwrap_or_default();
        if let Some(rv) = opts.resource_version.as_deref()
            && rv != have_rv
        {
            return Err(StatusError::precondition_failed(
                rt.kind,
                name,
                "ResourceVersion",
                rv,
                have_rv,
            ));
        }
        if std::ptr::eq(rt, &resources::PODS)
            && opts.grace_period_seconds != Some(0)
            && finalizers(&current).is_empty()
            && (executing || awaits_kubelet(&inner, &current))
        {
            let grace = opts
                .grace_period_seconds
                .unwrap_or_else(|| termination_grace(&current))
                .max(1);
            let marked_grace = deletion_grace(&current);
            if marked_grace > 0 && marked_grace <= grace {
                return Ok(current);
            }
            return Ok(mark_graceful(self, &mut inner, &current, grace));
        }
        if opts.grace_period_seconds == Some(0)
            && deletion_grace(&current) > 0
            && !finalizers(&current).is_empty()
        {
            // Forced: the object now goes with its last finalizer.
            let mut forced = (*current).clone();
            json::obj_mut(&mut forced, "metadata")
                .insert("deletionGracePeriodSeconds".into(), json!(0));
            return Ok(inner.commit(self, rt, EventType::Modified, forced, Some(current)));
        }
        let mut current = current;
        if std::ptr::eq(rt, &resources::PODS)
            && opts.grace_period_seconds == Some(0)
            && finalizers(&current).is_empty()
            && !str_at(&current, "/spec/nodeName")
                .unwrap_or_default()
                .is_empty()
            && current.pointer("/metadata/deletionGracePeriodSeconds") != Some(&json!(0))
        {
            // A bound pod deleted with grace period 0 (its kubelet's confirmation, a force
            // delete, the pod garbage collector): the API server writes it marked with grace 0
            // first, then removes it, so watchers see that version too.
            let mut marked = (*current).clone();
            let meta = json::obj_mut(&mut marked, "metadata");
            meta.entry("deletionTimestamp")
                .or_insert_with(|| Value::String(json::now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            current = inner.commit(self, rt, EventType::Modified, marked, Some(current));
        }
        Ok(self.delete_locked(&mut inner, rt, current, opts.propagation))
    }

    fn delete_locked(
        &self,
        inner: &mut Inner,
        rt: &'static ResourceType,
        current: Arc<Value>,
        propagation: Propagation,
    ) -> Arc<Value> {
        if !finalizers(&current).is_empty() {
            if current.pointer("/metadata/deletionTimestamp").is_some() {
                return current;
            }
            let mut marked = (*current).clone();
            let meta = json::obj_mut(&mut marked, "metadata");
            meta.insert(
                "deletionTimestamp".into(),
                Value::String(json::now_rfc3339()),
            );
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            return inner.commit(self, rt, EventType::Modified, marked, Some(current));
        }
        let obj = inner.commit(
            self,
            rt,
            EventType::Deleted,
            (*current).clone(),
            Some(current),
        );
        self.after_removal(inner, rt, &obj, propagation);
        obj
    }

    /// Cascades a removal: dependents by ownerReference, namespace contents, pod logs.
    fn after_removal(
        &self,
        inner: &mut Inner,
        rt: &'static ResourceType,
        obj: &Value,
        propagation: Propagation,
    ) {
        if std::ptr::eq(rt, &resources::PODS) {
            self.logs.remove_pod(json::namespace(obj), json::name(obj));
        }
        let mut doomed: Vec<(&'static ResourceType, Arc<Value>)> = Vec::new();
        if std::ptr::eq(rt, &resources::NAMESPACES) {
            let ns = json::name(obj);
            for t in resources::ALL.iter().filter(|t| t.namespaced) {
                if let Some(table) = inner.tables.get(t.plural) {
                    doomed.extend(
                        table
                            .iter()
                            .filter(|((n, _), _)| n == ns)
                            .map(|(_, o)| (*t, o.clone())),
                    );
                }
            }
        } else if propagation == Propagation::Background {
            let uid = json::uid(obj);
            for t in resources::ALL {
                if let Some(table) = inner.tables.get(t.plural) {
                    doomed.extend(
                        table
                            .values()
                            .filter(|o| owned_by(o, uid))
                            .map(|o| (*t, o.clone())),
                    );
                }
            }
        }
        for (t, o) in doomed {
            let key = (json::namespace(&o).to_string(), json::name(&o).to_string());
            // A dependent may already be gone through an earlier cascade step.
            if let Some(current) = inner.table(t).get(&key).cloned() {
                // The garbage collector deletes a pod as any client does, gracefully: an
                // executed pod gets its SIGTERM and grace (a RayJob's submitter, deleted with
                // its RayJob, prints its last lines), and its kubelet removes it.
                if std::ptr::eq(t, &resources::PODS)
                    && finalizers(&current).is_empty()
                    && self.is_executing(json::uid(&current))
                {
                    if deletion_grace(&current) == 0 {
                        let grace = termination_grace(&current);
                        mark_graceful(self, inner, &current, grace);
                    }
                    continue;
                }
                self.delete_locked(inner, t, current, Propagation::Background);
            }
        }
    }
}

fn check_type_meta(rt: &ResourceType, obj: &Value) -> Result<(), StatusError> {
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != rt.kind
    {
        return Err(StatusError::bad_request(format!(
            "the kind {kind:?} does not match the resource {}",
            rt.plural
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != rt.api_version()
    {
        return Err(StatusError::bad_request(format!(
            "the apiVersion {av:?} does not match {}",
            rt.api_version()
        )));
    }
    Ok(())
}

/// `metadata.deletionGracePeriodSeconds` (0 when unset).
/// The grace a pod's deletion gives it by default: its `terminationGracePeriodSeconds` (30 s
/// when unset), at least 1 s.
fn termination_grace(pod: &Value) -> i64 {
    json::i64_at(pod, "/spec/terminationGracePeriodSeconds")
        .unwrap_or(30)
        .max(1)
}

/// Marks `current` (a pod) deleted gracefully: `deletionTimestamp` = now + `grace` and
/// `deletionGracePeriodSeconds`; its kubelet removes it once its containers stopped.
fn mark_graceful(store: &Store, inner: &mut Inner, current: &Arc<Value>, grace: i64) -> Arc<Value> {
    let mut marked = (**current).clone();
    let meta = json::obj_mut(&mut marked, "metadata");
    let now = jiff::Timestamp::now();
    let at = now
        .checked_add(jiff::SignedDuration::from_secs(grace))
        .unwrap_or(now);
    meta.insert("deletionTimestamp".into(), Value::String(json::rfc3339(at)));
    meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
    inner.commit(
        store,
        &resources::PODS,
        EventType::Modified,
        marked,
        Some(current.clone()),
    )
}

fn deletion_grace(obj: &Value) -> i64 {
    json::i64_at(obj, "/metadata/deletionGracePeriodSeconds").unwrap_or(0)
}

/// Whether deleting `pod` needs its kubelet's confirmation that no kubelet of kubesim can give:
/// the pod is bound, not terminal, and its node is gone or not Ready (its kubelet is taken to be
/// down, as a real NotReady node's mostly is).
fn awaits_kubelet(inner: &Inner, pod: &Value) -> bool {
    let node = str_at(pod, "/spec/nodeName").unwrap_or_default();
    if node.is_empty() || matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed")) {
        return false;
    }
    inner
        .find(&resources::NODES, "", node)
        .is_none_or(|n| !crate::fleet::is_ready(&n))
}

fn finalizers(obj: &Value) -> Vec<&str> {
    json::strs(obj.pointer("/metadata/finalizers")).collect()
}

fn owned_by(obj: &Value, uid: &str) -> bool {
    crate::json::at(obj, "/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
        })
}

/// Whether anything outside `metadata` and `status` changed (bumps `generation`).
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

fn make_uid(seq: u64) -> String {
    let nanos = tuneplane_core::clock::now_nanos() as u64;
    let a = nanos.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq;
    let b = seq.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ nanos.rotate_left(29);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        (a & 0xfff) as u16,
        (b >> 52) as u16 & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

/// Puts `status` into `object`, or removes the object's status when there is none.
fn set_status(object: &mut Value, status: Option<Value>) {
    match status {
        Some(s) => object["status"] = s,
        None => {
            if let Some(m) = object.as_object_mut() {
                m.remove("status");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is a failure with its location

    use super::*;

    #[test]
    fn a_cascade_deletes_an_executed_pod_gracefully_and_removes_a_simulated_one() {
        let store = Store::new(100);
        store
            .create(
                &resources::NAMESPACES,
                "",
                json!({"metadata": {"name": "ns"}}),
            )
            .unwrap();
        let owner = store
            .create(
                &resources::JOBS,
                "ns",
                json!({"metadata": {"name": "submitter"}}),
            )
            .unwrap();
        let owned = |name: &str| {
            json!({
                "metadata": {"name": name, "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "Job", "name": "submitter",
                    "uid": json::uid(&owner), "controller": true,
                }]},
                "spec": {"terminationGracePeriodSeconds": 12, "containers": [{"name": "c", "image": "i"}]},
            })
        };
        let running = store
            .create(&resources::PODS, "ns", owned("running"))
            .unwrap();
        store
            .create(&resources::PODS, "ns", owned("simulated"))
            .unwrap();
        store.set_executing(json::uid(&running), true);

        store
            .delete(
                &resources::JOBS,
                "ns",
                "submitter",
                &DeleteOptions::default(),
            )
            .unwrap();

        // The executed pod stays, Terminating with its own grace, for its kubelet to remove.
        let marked = store.try_get(&resources::PODS, "ns", "running").unwrap();
        assert_eq!(deletion_grace(&marked), 12);
        assert!(marked.pointer("/metadata/deletionTimestamp").is_some());
        assert!(store.try_get(&resources::PODS, "ns", "simulated").is_none());
    }
}
