//! Container logs of simulated pods: appended by the kubelet simulation or by executed processes,
//! read (and followed) by the `pods/log` endpoint.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

/// Most bytes kept per container; older output is dropped first.
const MAX_LOG_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, Default, Clone)]
struct Buffer {
    text: String,
    closed: bool,
}

/// Logs of every container, keyed by (namespace, pod, container).
#[derive(Debug)]
pub struct LogBook {
    buffers: Mutex<HashMap<(String, String, String), Buffer>>,
    changed: watch::Sender<u64>,
}

impl Default for LogBook {
    fn default() -> Self {
        Self {
            buffers: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
        }
    }
}

/// A snapshot of one container's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSnapshot {
    /// Everything written so far (bounded).
    pub text: String,
    /// Whether the container has terminated (no more output will come).
    pub closed: bool,
}

impl LogBook {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<(String, String, String), Buffer>) -> R) -> R {
        let mut guard = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn key(ns: &str, pod: &str, container: &str) -> (String, String, String) {
        (ns.to_string(), pod.to_string(), container.to_string())
    }

    /// Appends output of a container.
    pub fn append(&self, ns: &str, pod: &str, container: &str, text: &str) {
        self.with(|m| {
            let buf = m.entry(Self::key(ns, pod, container)).or_default();
            buf.text.push_str(text);
            if buf.text.len() > MAX_LOG_BYTES {
                let mut cut = buf.text.len() - MAX_LOG_BYTES;
                while !buf.text.is_char_boundary(cut) {
                    cut += 1;
                }
                buf.text.drain(..cut);
            }
        });
        self.changed.send_modify(|n| *n += 1);
    }

    /// Marks a container's output as finished.
    pub fn close(&self, ns: &str, pod: &str, container: &str) {
        self.with(|m| m.entry(Self::key(ns, pod, container)).or_default().closed = true);
        self.changed.send_modify(|n| *n += 1);
    }

    /// The current log of a container (empty and open when nothing was written yet).
    pub fn read(&self, ns: &str, pod: &str, container: &str) -> LogSnapshot {
        self.with(|m| {
            let b = m
                .get(&Self::key(ns, pod, container))
                .cloned()
                .unwrap_or_default();
            LogSnapshot {
                text: b.text,
                closed: b.closed,
            }
        })
    }

    /// Forgets every log of a pod (the pod was deleted).
    pub fn remove_pod(&self, ns: &str, pod: &str) {
        self.with(|m| m.retain(|(n, p, _), _| !(n == ns && p == pod)));
        self.changed.send_modify(|n| *n += 1);
    }

    /// A receiver that changes whenever any log changes (for `follow`).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// The last `n` lines of `text`.
pub fn tail_lines(text: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    let trimmed = text.strip_suffix('\n').unwrap_or(text);
    let mut count = 0;
    for (i, b) in trimmed.bytes().enumerate().rev() {
        if b == b'\n' {
            count += 1;
            if count == n {
                return &text[i + 1..];
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail_lines("a\nb\nc", 5), "a\nb\nc");
        assert_eq!(tail_lines("a\nb\n", 0), "");
    }

    #[test]
    fn logs_append_close_and_vanish_with_the_pod() {
        let book = LogBook::default();
        book.append("ns", "p", "c", "hello\n");
        book.close("ns", "p", "c");
        assert_eq!(
            book.read("ns", "p", "c"),
            LogSnapshot {
                text: "hello\n".into(),
                closed: true
            }
        );
        book.remove_pod("ns", "p");
        assert_eq!(book.read("ns", "p", "c").text, "");
    }
}
