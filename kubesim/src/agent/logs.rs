//! The container logs the agent writes for its pods, in memory and keyed by pod uid, with the
//! (namespace, name) → uid index the kubelet endpoint looks pods up by and whether each container
//! has run yet (a kubelet refuses the log of one that never started). A deleted pod's logs stay
//! readable for a retention period, then are dropped. A log can be followed: each change is
//! announced, and a container's log ends once it terminated or its pod was deleted.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;

/// Most bytes kept per container; older output is dropped first.
const MAX_LOG_BYTES: usize = 1024 * 1024;

/// Why a log could not be read, worded like the kubelet's answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogLookupError {
    /// The container has not run yet (400 from a kubelet), with the kubelet's message.
    #[error("{0}")]
    NotStarted(String),
    /// No pod of that name on the agent's nodes.
    #[error("pod \"{0}\" does not exist")]
    NoPod(String),
    /// The pod has no container of that name.
    #[error("container \"{container}\" not found in pod \"{pod}\"")]
    NoContainer {
        /// The pod asked for, which is on one of the agent's nodes.
        pod: String,
        /// The container asked for.
        container: String,
    },
}

#[derive(Debug, Default)]
struct ContainerLog {
    text: String,
    /// Bytes dropped from the front of `text` (the cap): `text` starts at this offset.
    dropped: u64,
    /// Why the log cannot be read yet; `None` once the container has run.
    not_started: Option<String>,
    /// The container terminated (or its pod was deleted): nothing more comes.
    ended: bool,
}

/// A container's log from an offset on, for following it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Since {
    /// The text from the offset asked for (from the oldest kept byte if that was dropped).
    pub text: String,
    /// The offset the next read goes on from.
    pub next: u64,
    /// Whether the container's log is complete.
    pub ended: bool,
}

#[derive(Debug)]
struct PodLogs {
    namespace: String,
    name: String,
    containers: BTreeMap<String, ContainerLog>,
    deleted_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Book {
    pods: HashMap<String, PodLogs>,
    by_name: HashMap<(String, String), String>,
}

/// Logs of every container of the agent's pods.
#[derive(Debug)]
pub struct AgentLogs {
    book: Mutex<Book>,
    /// Bumped on every change (for followers).
    changed: watch::Sender<u64>,
}

impl Default for AgentLogs {
    fn default() -> Self {
        AgentLogs {
            book: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

/// Whether container `name` of `pod` has terminated (its status says so).
fn terminated(pod: &Value, name: &str) -> bool {
    ["initContainerStatuses", "containerStatuses"]
        .into_iter()
        .filter_map(|list| pod.pointer(&format!("/status/{list}"))?.as_array())
        .flatten()
        .any(|c| {
            c.get("name").and_then(Value::as_str) == Some(name)
                && c.pointer("/state/terminated").is_some()
        })
}

impl AgentLogs {
    fn with<R>(&self, f: impl FnOnce(&mut Book) -> R) -> R {
        let out = {
            let mut guard = self.book.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        };
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
        out
    }

    /// A receiver that changes whenever any log changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Takes in the latest copy of pod `uid`: its name resolves to it, and its containers are
    /// known with whether each has run yet.
    pub fn observe(&self, uid: &str, pod: &Value) {
        let (namespace, name) = (crate::json::namespace(pod), crate::json::name(pod));
        let names = ["initContainers", "containers"]
            .into_iter()
            .flat_map(|list| crate::controllers::lifecycle::containers(pod, list))
            .map(|(c, _)| c);
        self.with(|b| {
            let entry = b.pods.entry(uid.to_string()).or_insert_with(|| PodLogs {
                namespace: namespace.to_string(),
                name: name.to_string(),
                containers: BTreeMap::new(),
                deleted_at: None,
            });
            for c in names {
                let log = entry.containers.entry(c.clone()).or_default();
                log.not_started = crate::logs::not_started(pod, &c);
                log.ended |= terminated(pod, &c);
            }
            b.by_name
                .insert((namespace.to_string(), name.to_string()), uid.to_string());
        });
    }

    /// Appends `text` to the log of container `container` of pod `uid` (ignored for a pod never
    /// observed).
    pub fn append(&self, uid: &str, container: &str, text: &str) {
        self.with(|b| {
            if let Some(p) = b.pods.get_mut(uid) {
                let log = p.containers.entry(container.to_string()).or_default();
                let before = log.text.len() + text.len();
                crate::logs::append_bounded(&mut log.text, text, MAX_LOG_BYTES);
                log.dropped += (before - log.text.len()) as u64;
            }
        });
    }

    /// The log of a container of the pod currently (or last) named `namespace/name`.
    pub fn read(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
    ) -> Result<String, LogLookupError> {
        self.since(namespace, name, container, 0).map(|s| s.text)
    }

    /// The log of a container of the pod named `namespace/name` from byte `offset` on.
    pub fn since(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
        offset: u64,
    ) -> Result<Since, LogLookupError> {
        let book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        Self::lookup(&book, namespace, name, container, offset)
    }

    fn lookup(
        b: &Book,
        namespace: &str,
        name: &str,
        container: &str,
        offset: u64,
    ) -> Result<Since, LogLookupError> {
        {
            let pod = b
                .by_name
                .get(&(namespace.to_string(), name.to_string()))
                .and_then(|uid| b.pods.get(uid))
                .ok_or_else(|| LogLookupError::NoPod(name.to_string()))?;
            let log = pod
                .containers
                .get(container)
                .ok_or_else(|| LogLookupError::NoContainer {
                    pod: name.to_string(),
                    container: container.to_string(),
                })?;
            if let Some(why) = &log.not_started {
                return Err(LogLookupError::NotStarted(why.clone()));
            }
            let end = log.dropped + log.text.len() as u64;
            // Offsets handed out are ends of appended text: character boundaries.
            let from = usize::try_from(offset.clamp(log.dropped, end) - log.dropped).unwrap_or(0);
            Ok(Since {
                text: log.text.get(from..).unwrap_or_default().to_string(),
                next: end,
                ended: log.ended,
            })
        }
    }

    /// Notes that the containers of pod `uid` stopped (its deletion confirmed, the object maybe
    /// still kept by finalizers): its logs are complete, and followers end.
    pub fn containers_stopped(&self, uid: &str) {
        self.with(|b| {
            if let Some(p) = b.pods.get_mut(uid) {
                p.containers.values_mut().for_each(|c| c.ended = true);
            }
        });
    }

    /// Notes that pod `uid` was deleted: its logs go after the retention period.
    pub fn pod_deleted(&self, uid: &str) {
        self.with(|b| {
            if let Some(p) = b.pods.get_mut(uid) {
                p.deleted_at.get_or_insert_with(Instant::now);
                p.containers.values_mut().for_each(|c| c.ended = true);
            }
        });
    }

    /// Drops the logs of pods deleted more than `retention` ago.
    pub fn expire(&self, retention: Duration) {
        self.with(|b| {
            let gone: Vec<String> = b
                .pods
                .iter()
                .filter(|(_, p)| p.deleted_at.is_some_and(|t| t.elapsed() >= retention))
                .map(|(uid, _)| uid.clone())
                .collect();
            for uid in gone {
                if let Some(p) = b.pods.remove(&uid) {
                    let key = (p.namespace, p.name);
                    if b.by_name.get(&key) == Some(&uid) {
                        b.by_name.remove(&key);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, state: Value) -> Value {
        serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [{"name": "main", "image": "i"}]},
            "status": {"containerStatuses": [{"name": "main", "state": state}]},
        })
    }

    #[test]
    fn logs_are_found_by_name_and_expire_after_deletion() {
        let logs = AgentLogs::default();
        logs.observe(
            "u1",
            &pod(
                "p",
                serde_json::json!({"waiting": {"reason": "ContainerCreating"}}),
            ),
        );
        assert_eq!(
            logs.read("ns", "p", "main"),
            Err(LogLookupError::NotStarted(
                "container \"main\" in pod \"p\" is waiting to start: ContainerCreating".into()
            ))
        );
        logs.observe("u1", &pod("p", serde_json::json!({"running": {}})));
        logs.append("u1", "main", "hello\n");
        logs.append("unknown", "main", "ignored\n");
        assert_eq!(logs.read("ns", "p", "main").as_deref(), Ok("hello\n"));
        assert_eq!(
            logs.read("ns", "p", "side"),
            Err(LogLookupError::NoContainer {
                pod: "p".into(),
                container: "side".into()
            })
        );
        assert_eq!(
            logs.read("ns", "q", "main"),
            Err(LogLookupError::NoPod("q".into()))
        );
        assert_eq!(
            LogLookupError::NoPod("q".into()).to_string(),
            "pod \"q\" does not exist"
        );
        // A new pod of the same name takes the name over.
        logs.observe("u2", &pod("p", serde_json::json!({"running": {}})));
        assert_eq!(logs.read("ns", "p", "main").as_deref(), Ok(""));
        logs.pod_deleted("u1");
        logs.expire(Duration::ZERO);
        assert_eq!(logs.read("ns", "p", "main").as_deref(), Ok(""));
        logs.pod_deleted("u2");
        logs.expire(Duration::from_secs(60));
        assert!(logs.read("ns", "p", "main").is_ok());
        logs.expire(Duration::ZERO);
        assert!(logs.read("ns", "p", "main").is_err());
    }
}
