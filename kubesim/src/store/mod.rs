//! The in-memory object store: typed tables of JSON objects with Kubernetes write semantics
//! (uid, increasing resourceVersion, generation, optimistic concurrency, status subresource,
//! finalizers, cascading deletion) and a bounded history of watch events.
//!
//! One mutex guards everything: critical sections are short (no I/O, no awaits), which keeps
//! resourceVersions totally ordered and makes watch hand-over (backlog + live) gap-free.

mod defaults;
mod query;
mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::broadcast;

use crate::logs::LogBook;
use crate::resources::ResourceType;

pub use query::{ListPage, ListQuery, WatchStart};
pub use write::{DeleteOptions, Part, Propagation};

/// Kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created (or entered the selector).
    Added,
    /// Object changed.
    Modified,
    /// Object removed (or left the selector).
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, `MODIFIED`, `DELETED`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history and sent to watchers.
#[derive(Debug)]
pub struct WatchEvent {
    /// resourceVersion the change produced.
    pub rv: u64,
    /// Type of the changed object.
    pub rt: &'static ResourceType,
    /// What happened.
    pub ty: EventType,
    /// The object after the change (the last state for deletions).
    pub object: Arc<Value>,
    /// The object before the change, for selector transitions.
    pub old: Option<Arc<Value>>,
}

type Key = (String, String);

#[derive(Default)]
struct Inner {
    rv: u64,
    uid_seq: u64,
    tables: HashMap<&'static str, BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<WatchEvent>>,
    /// Highest resourceVersion whose event is no longer in the history.
    compacted: u64,
}

/// The shared store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<WatchEvent>>,
    history_cap: usize,
    resets: tokio::sync::watch::Sender<u64>,
    /// Container logs of pods.
    pub logs: LogBook,
    /// Uids of pods whose process runs on this machine ([`crate::exec::Executor`]): deleting
    /// one is graceful even on a Ready node (see [`Store::delete`]).
    executing: Mutex<std::collections::HashSet<String>>,
}

impl Store {
    /// An empty store keeping at most `history_cap` watch events.
    pub fn new(history_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        Self {
            inner: Mutex::new(Inner::default()),
            tx,
            history_cap: history_cap.max(16),
            resets: tokio::sync::watch::channel(0).0,
            logs: LogBook::default(),
            executing: Mutex::default(),
        }
    }

    /// Notes whether pod `uid` has a process running on this machine (the executor's).
    pub(crate) fn set_executing(&self, uid: &str, running: bool) {
        let mut set = self.executing.lock().unwrap_or_else(|p| p.into_inner());
        if running {
            set.insert(uid.to_owned());
        } else {
            set.remove(uid);
        }
    }

    fn is_executing(&self, uid: &str) -> bool {
        self.executing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(uid)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves data that is still structurally valid JSON.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Forgets the whole watch history and ends every open watch, like an API server restart after
    /// compaction: a watch from any earlier resourceVersion now gets 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted = inner.rv;
        self.resets.send_modify(|n| *n += 1);
    }

    /// A receiver that changes when open watches must end.
    pub fn resets(&self) -> tokio::sync::watch::Receiver<u64> {
        self.resets.subscribe()
    }

    /// Every object of a type (all namespaces), in (namespace, name) order.
    pub fn all(&self, rt: &'static ResourceType) -> Vec<Arc<Value>> {
        self.lock()
            .tables
            .get(rt.plural)
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Number of objects of a type.
    pub fn count(&self, rt: &'static ResourceType) -> usize {
        self.lock().tables.get(rt.plural).map_or(0, BTreeMap::len)
    }

    /// One object, if it exists.
    pub fn try_get(&self, rt: &'static ResourceType, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.lock().find(rt, ns, name)
    }

    /// One object, or `404 NotFound`.
    pub fn get(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
    ) -> Result<Arc<Value>, crate::StatusError> {
        self.lock().existing(rt, ns, name)
    }

    /// A receiver of every future change.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.tx.subscribe()
    }
}

impl Inner {
    fn table(&mut self, rt: &'static ResourceType) -> &mut BTreeMap<Key, Arc<Value>> {
        self.tables.entry(rt.plural).or_default()
    }

    /// The stored object `name` (in `ns` when the type is namespaced).
    fn find(&self, rt: &'static ResourceType, ns: &str, name: &str) -> Option<Arc<Value>> {
        let ns = if rt.namespaced { ns } else { "" };
        self.tables
            .get(rt.plural)
            .and_then(|t| t.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    /// [`find`](Self::find), with a missing object as `404 NotFound`.
    fn existing(
        &self,
        rt: &'static ResourceType,
        ns: &str,
        name: &str,
    ) -> Result<Arc<Value>, crate::StatusError> {
        self.find(rt, ns, name)
            .ok_or_else(|| crate::StatusError::not_found(rt.plural, rt.group, name))
    }

    /// Records a change: bumps the resourceVersion, stores or removes the object, keeps history.
    fn commit(
        &mut self,
        store: &Store,
        rt: &'static ResourceType,
        ty: EventType,
        mut object: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        crate::json::obj_mut(&mut object, "metadata")
            .insert("resourceVersion".into(), Value::String(rv.to_string()));
        let key = (
            crate::json::namespace(&object).to_string(),
            crate::json::name(&object).to_string(),
        );
        let object = Arc::new(object);
        if ty == EventType::Deleted {
            self.table(rt).remove(&key);
        } else {
            self.table(rt).insert(key, object.clone());
        }
        let event = Arc::new(WatchEvent {
            rv,
            rt,
            ty,
            object: object.clone(),
            old,
        });
        self.history.push_back(event.clone());
        while self.history.len() > store.history_cap {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = store.tx.send(event);
        object
    }
}
