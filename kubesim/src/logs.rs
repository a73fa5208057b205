//! Container logs of simulated pods: appended by the kubelet simulation or by executed processes,
//! read (and followed) by the `pods/log` endpoint.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::watch;

/// Most bytes kept per container; older output is dropped first.
const MAX_LOG_BYTES: usize = 4 * 1024 * 1024;

#[derive(Debug, Default, Clone)]
struct Buffer {
    text: String,
    closed: bool,
    /// Bytes dropped from the front so far (offsets below are counted from the first byte ever).
    dropped: usize,
    /// Where each line began and when it was written (for `timestamps` and `sinceTime`).
    starts: VecDeque<(usize, jiff::Timestamp)>,
}

impl Buffer {
    fn append(&mut self, text: &str, at: jiff::Timestamp) {
        let mut abs = self.dropped + self.text.len();
        let mut at_line_start = self.text.is_empty() || self.text.ends_with('\n');
        for piece in text.split_inclusive('\n') {
            if at_line_start {
                self.starts.push_back((abs, at));
            }
            abs += piece.len();
            at_line_start = piece.ends_with('\n');
        }
        let before = self.text.len();
        append_bounded(&mut self.text, text, MAX_LOG_BYTES);
        self.dropped += before + text.len() - self.text.len();
        while self.starts.len() > 1 && self.starts[1].0 <= self.dropped {
            self.starts.pop_front();
        }
    }
}

/// Logs of every container, keyed by (namespace, pod, container).
#[derive(Debug)]
pub struct LogBook {
    buffers: Mutex<HashMap<(String, String, String), Buffer>>,
    changed: watch::Sender<u64>,
    /// Generated prefixes: pods whose name starts with the first serve that many generated
    /// bytes (dated when it was set) before what their containers wrote.
    generated: Mutex<Vec<(String, u64, jiff::Timestamp)>>,
}

impl Default for LogBook {
    fn default() -> Self {
        Self {
            buffers: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            generated: Mutex::new(Vec::new()),
        }
    }
}

/// Length of a generated line, its newline included.
pub const GENERATED_LINE_BYTES: u64 = 100;

/// A log prefix the simulator generates as it serves it instead of keeping it: `bytes` bytes of
/// numbered lines of [`GENERATED_LINE_BYTES`] (the last one shorter when `bytes` is not a
/// multiple), all dated `at`. Logs far larger than a simulated container keeps (4 MiB) can so
/// be served, streamed, at no memory cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The pod.
    pub pod: String,
    /// The container.
    pub container: String,
    /// Length of the prefix.
    pub bytes: u64,
    /// When its lines count as written (for `sinceTime` and `timestamps`).
    pub at: jiff::Timestamp,
}

impl Generated {
    /// Number of lines.
    pub fn lines(&self) -> u64 {
        self.bytes.div_ceil(GENERATED_LINE_BYTES)
    }

    /// Length of line `i`, its newline included.
    pub fn line_len(&self, i: u64) -> u64 {
        (self.bytes - i * GENERATED_LINE_BYTES).min(GENERATED_LINE_BYTES)
    }

    /// Line `i`: `<pod>/<container> generated line <i>` padded with dots, and a newline.
    pub fn line(&self, i: u64) -> String {
        let width = usize::try_from(self.line_len(i))
            .unwrap_or(0)
            .saturating_sub(1);
        let mut text = format!("{}/{} generated line {i} ", self.pod, self.container);
        let full = usize::try_from(GENERATED_LINE_BYTES).unwrap_or(100) - 1;
        while text.len() < full {
            text.push('.');
        }
        // Names are DNS labels (ASCII): any byte count is a character boundary.
        text.truncate(width.min(full));
        text.push('\n');
        text
    }
}

/// A snapshot of one container's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSnapshot {
    /// Everything written so far (bounded).
    pub text: String,
    /// Whether the container has terminated (no more output will come).
    pub closed: bool,
    /// Each line of `text`: its start and when it was written, in order.
    pub lines: Vec<(usize, jiff::Timestamp)>,
}

impl LogSnapshot {
    /// The log as a `pods/log` request asks for it: `sinceTime` (lines written at or after it,
    /// RFC 3339), `timestamps=true` (each line prefixed with its RFC 3339 time with nanoseconds
    /// and a space, as the kubelet does), then `tailLines` and `limitBytes` ([`requested_part`]).
    pub fn requested(&self, query: &HashMap<String, String>) -> String {
        let since = query
            .get("sinceTime")
            .and_then(|v| v.parse::<jiff::Timestamp>().ok());
        let stamps = query
            .get("timestamps")
            .is_some_and(|v| v == "true" || v == "1");
        if since.is_none() && !stamps {
            return requested_part(&self.text, query).to_owned();
        }
        let mut out = String::new();
        for (i, &(start, at)) in self.lines.iter().enumerate() {
            if since.is_some_and(|s| at < s) {
                continue;
            }
            let end = self.lines.get(i + 1).map_or(self.text.len(), |l| l.0);
            if stamps {
                out.push_str(&format!("{} ", at.strftime("%Y-%m-%dT%H:%M:%S%.9fZ")));
            }
            out.push_str(&self.text[start..end]);
        }
        requested_part(&out, query).to_owned()
    }
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
            buf.append(text, jiff::Timestamp::now());
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
            let lines = b
                .starts
                .iter()
                .map(|&(abs, at)| (abs.saturating_sub(b.dropped), at))
                .collect();
            LogSnapshot {
                text: b.text,
                closed: b.closed,
                lines,
            }
        })
    }

    /// From now on, every container of the pods whose name starts with `pod_prefix` serves
    /// `bytes` generated bytes ([`Generated`]) before what it wrote; 0 stops that.
    pub fn generate(&self, pod_prefix: &str, bytes: u64) {
        let mut generated = self.generated.lock().unwrap_or_else(|p| p.into_inner());
        generated.retain(|(prefix, _, _)| prefix != pod_prefix);
        if bytes > 0 {
            generated.push((pod_prefix.to_owned(), bytes, jiff::Timestamp::now()));
        }
    }

    /// The generated prefix of a container's log, if [`LogBook::generate`] gave it one.
    pub fn generated(&self, pod: &str, container: &str) -> Option<Generated> {
        let generated = self.generated.lock().unwrap_or_else(|p| p.into_inner());
        generated
            .iter()
            .find(|(prefix, _, _)| pod.starts_with(prefix.as_str()))
            .map(|(_, bytes, at)| Generated {
                pod: pod.to_owned(),
                container: container.to_owned(),
                bytes: *bytes,
                at: *at,
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

/// Appends `text` to a log, then drops its oldest output past `max` bytes.
pub fn append_bounded(log: &mut String, text: &str, max: usize) {
    log.push_str(text);
    if log.len() > max {
        let mut cut = log.len() - max;
        while !log.is_char_boundary(cut) {
            cut += 1;
        }
        log.drain(..cut);
    }
}

/// The part of a log that a `pods/log` request asks for with its `tailLines` (the last lines) and
/// `limitBytes` (at most that many bytes of those, cut back to a character boundary) parameters;
/// parameters that are missing or not numbers are ignored.
pub fn requested_part<'a>(text: &'a str, query: &HashMap<String, String>) -> &'a str {
    let number = |key: &str| query.get(key).and_then(|v| v.parse::<usize>().ok());
    let mut out = match number("tailLines") {
        Some(n) => tail_lines(text, n),
        None => text,
    };
    if let Some(limit) = number("limitBytes")
        && out.len() > limit
    {
        let mut cut = limit;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out = &out[..cut];
    }
    out
}

fn status_of<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .find_map(|list| {
            crate::json::at(pod, &format!("/status/{list}"))
                .and_then(Value::as_array)
                .and_then(|a| {
                    a.iter()
                        .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
                })
        })
}

/// Why the log of `container` of `pod` cannot be read yet, in the kubelet's words (`container
/// "main" in pod "p" is waiting to start: trying and failing to pull image`); `None` once the
/// container has run (running, terminated, or restarting after a run).
pub fn not_started(pod: &Value, container: &str) -> Option<String> {
    let status = status_of(pod, container);
    let ran = status.is_some_and(|s| {
        [
            "/state/running",
            "/state/terminated",
            "/lastState/terminated",
        ]
        .iter()
        .any(|p| crate::json::at(s, p).is_some())
    });
    if ran {
        return None;
    }
    let reason = status
        .and_then(|s| crate::json::str_at(s, "/state/waiting/reason"))
        .unwrap_or("ContainerCreating");
    let why = match reason {
        "ErrImagePull" => "image can't be pulled",
        "ImagePullBackOff" => "trying and failing to pull image",
        other => other,
    };
    let pod_name = crate::json::name(pod);
    Some(format!(
        "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {why}"
    ))
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
    fn logs_of_containers_that_never_ran_are_refused_in_the_kubelets_words() {
        let pod = |state: Value| serde_json::json!({"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "main", "state": state}]}});
        let waiting = |r: &str| pod(serde_json::json!({"waiting": {"reason": r}}));
        assert_eq!(
            not_started(&waiting("ImagePullBackOff"), "main").as_deref(),
            Some(
                "container \"main\" in pod \"p\" is waiting to start: trying and failing to pull image"
            )
        );
        assert!(
            not_started(&waiting("ErrImagePull"), "main")
                .is_some_and(|m| m.ends_with("image can't be pulled"))
        );
        assert!(
            not_started(&pod(serde_json::json!({})), "other")
                .is_some_and(|m| m.ends_with(": ContainerCreating"))
        );
        assert_eq!(
            not_started(&pod(serde_json::json!({"running": {}})), "main"),
            None
        );
    }

    #[test]
    fn bounded_logs_drop_the_oldest_bytes_and_limits_cut_at_characters() {
        let mut log = String::from("abc");
        append_bounded(&mut log, "déf", 4);
        assert_eq!(log, "déf");
        let query = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(requested_part("héllo", &query(&[("limitBytes", "2")])), "h");
        assert_eq!(
            requested_part("héllo", &query(&[("limitBytes", "3")])),
            "hé"
        );
        assert_eq!(
            requested_part(
                "a\nb\nc\n",
                &query(&[("tailLines", "2"), ("limitBytes", "3")])
            ),
            "b\nc"
        );
        assert_eq!(
            requested_part("hi", &query(&[("limitBytes", "x"), ("follow", "true")])),
            "hi"
        );
    }

    #[test]
    fn generated_lines_have_their_length_and_add_up_to_the_prefix() {
        let g = Generated {
            pod: "tp-j-head".into(),
            container: "ray-head".into(),
            bytes: 250,
            at: jiff::Timestamp::UNIX_EPOCH,
        };
        assert_eq!(g.lines(), 3);
        let lines: Vec<String> = (0..g.lines()).map(|i| g.line(i)).collect();
        assert_eq!(lines.iter().map(String::len).sum::<usize>(), 250);
        assert_eq!((lines[0].len(), lines[2].len()), (100, 50));
        assert!(lines[1].starts_with("tp-j-head/ray-head generated line 1 ..."));
        assert!(lines.iter().all(|l| l.ends_with('\n')));
        let book = LogBook::default();
        book.generate("tp-j", 1_000);
        assert_eq!(
            book.generated("tp-j-head", "c").map(|g| g.bytes),
            Some(1_000)
        );
        assert_eq!(book.generated("tp-k-head", "c"), None);
        book.generate("tp-j", 0);
        assert_eq!(book.generated("tp-j-head", "c"), None);
    }

    #[test]
    fn logs_append_close_and_vanish_with_the_pod() {
        let book = LogBook::default();
        book.append("ns", "p", "c", "hello\n");
        book.close("ns", "p", "c");
        let snap = book.read("ns", "p", "c");
        assert_eq!((snap.text.as_str(), snap.closed), ("hello\n", true));
        book.remove_pod("ns", "p");
        assert_eq!(book.read("ns", "p", "c").text, "");
    }

    #[test]
    fn lines_carry_their_time_and_since_time_keeps_the_later_ones() {
        let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        let query = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let mut b = Buffer::default();
        b.append("one\ntw", t("2026-01-01T00:00:01.5Z"));
        b.append("o\nthree\n", t("2026-01-01T00:00:02.25Z"));
        let snap = LogSnapshot {
            text: b.text.clone(),
            closed: false,
            lines: b.starts.iter().map(|&(o, at)| (o, at)).collect(),
        };
        // "two" began in the first write: it carries that write's time.
        assert_eq!(
            snap.requested(&query(&[("timestamps", "true")])),
            "2026-01-01T00:00:01.500000000Z one\n2026-01-01T00:00:01.500000000Z two\n\
             2026-01-01T00:00:02.250000000Z three\n"
        );
        assert_eq!(
            snap.requested(&query(&[("sinceTime", "2026-01-01T00:00:02Z")])),
            "three\n"
        );
        assert_eq!(snap.requested(&query(&[])), "one\ntwo\nthree\n");
    }

    #[test]
    fn line_times_follow_dropped_output() {
        let mut b = Buffer::default();
        let at = jiff::Timestamp::UNIX_EPOCH;
        let line = "x".repeat(1023) + "\n";
        for _ in 0..(MAX_LOG_BYTES / 1024 + 10) {
            b.append(&line, at);
        }
        assert_eq!(b.text.len(), MAX_LOG_BYTES);
        assert_eq!(b.starts.front().map(|s| s.0), Some(b.dropped));
        assert_eq!(b.starts.len(), MAX_LOG_BYTES / 1024);
    }
}
