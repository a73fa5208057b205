//! `GET pods/<name>/log` with `container`, `sinceTime`, `timestamps`, `tailLines`, `limitBytes`
//! and `follow` (followed output comes without timestamps), answering the
//! real server's errors for a missing container name or a container that has not started. A log
//! with a generated prefix (`LogBook::generate`) is streamed as its lines are made.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{ApiState, Pieces, ok_body, streamed};
use crate::error::StatusError;
use crate::logs::{GENERATED_LINE_BYTES, Generated, not_started};
use crate::resources::PODS;
use crate::store::Store;

pub(super) async fn serve(
    state: &ApiState,
    ns: &str,
    name: &str,
    query: &HashMap<String, String>,
) -> Result<Response, StatusError> {
    let pod = state.store.get(&PODS, ns, name)?;
    let container = pick_container(&pod, name, query.get("container").map(String::as_str))?;
    // A pod without a node has no kubelet to ask: the API server answers 204 with no body.
    if crate::json::str_at(&pod, "/spec/nodeName").is_none_or(str::is_empty) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    if let Some(why) = not_started(&pod, &container) {
        // The kubelet's error body (with its newline) becomes the Status message.
        return Err(StatusError::bad_request(format!("{why}\n")));
    }
    let snapshot = state.store.logs.read(ns, name, &container);
    let follow = query.get("follow").is_some_and(|v| v == "true" || v == "1");
    let generated = state.store.logs.generated(name, &container);
    let (lines, first) = match generated {
        Some(g) => {
            let (lines, first) = with_generated(g, &snapshot, query);
            (Some(lines), first)
        }
        None => (None, snapshot.requested(query)),
    };
    let follower = Follower {
        store: state.store.clone(),
        rx: state.store.logs.subscribe(),
        ns: ns.to_string(),
        pod: name.to_string(),
        container,
        offset: snapshot.text.len(),
        pending: Some(first),
        follow: follow && !snapshot.closed,
    };
    match lines {
        Some(lines) => Ok(streamed(
            "text/plain",
            GeneratedFirst {
                lines,
                then: follower,
            },
        )),
        None if follower.follow => Ok(streamed("text/plain", follower)),
        None => Ok(ok_body(
            "text/plain",
            Body::from(follower.pending.unwrap_or_default()),
        )),
    }
}

/// Most bytes of generated lines sent as one piece.
const GENERATED_PIECE_BYTES: usize = 64 * 1024;

/// The generated lines a request asks for, sent as they are made.
struct GeneratedLines {
    generated: Generated,
    /// The next line to send, and the end of the lines asked for.
    next: u64,
    end: u64,
    /// Each line's timestamp prefix (`timestamps=true`), else empty.
    stamp: String,
    /// Bytes that may still be sent (`limitBytes`).
    room: u64,
}

/// The request for a log with a generated prefix: the generated lines it asks for (with
/// `sinceTime`, `tailLines`, `timestamps`) and then the part of what the container wrote, with
/// `limitBytes` applied to the whole.
fn with_generated(
    generated: Generated,
    snapshot: &crate::logs::LogSnapshot,
    query: &HashMap<String, String>,
) -> (GeneratedLines, String) {
    let mut unlimited = query.clone();
    let limit = unlimited
        .remove("limitBytes")
        .and_then(|v| v.parse::<u64>().ok());
    let mut written = snapshot.requested(&unlimited);
    let since = query
        .get("sinceTime")
        .and_then(|v| v.parse::<jiff::Timestamp>().ok());
    let stamp = if query
        .get("timestamps")
        .is_some_and(|v| v == "true" || v == "1")
    {
        format!("{} ", generated.at.strftime("%Y-%m-%dT%H:%M:%S%.9fZ"))
    } else {
        String::new()
    };
    let end = if since.is_some_and(|s| generated.at < s) {
        0
    } else {
        generated.lines()
    };
    let mut next = 0;
    if let Some(n) = query.get("tailLines").and_then(|v| v.parse::<u64>().ok()) {
        let own = written.split_inclusive('\n').count() as u64;
        next = end.saturating_sub(n.saturating_sub(own));
    }
    let lines_bytes: u64 = if next < end {
        (end - next) * stamp.len() as u64
            + (end - next - 1) * GENERATED_LINE_BYTES
            + generated.line_len(end - 1)
    } else {
        0
    };
    let room = limit.unwrap_or(u64::MAX);
    if let Some(limit) = limit {
        let mut cut = usize::try_from(limit.saturating_sub(lines_bytes)).unwrap_or(usize::MAX);
        if cut < written.len() {
            while !written.is_char_boundary(cut) {
                cut -= 1;
            }
            written.truncate(cut);
        }
    }
    let lines = GeneratedLines {
        generated,
        next,
        end,
        stamp,
        room,
    };
    (lines, written)
}

impl GeneratedLines {
    /// The next piece of lines, or `None` once they are all sent.
    fn piece(&mut self) -> Option<String> {
        let mut out = String::new();
        while self.next < self.end && self.room > 0 && out.len() < GENERATED_PIECE_BYTES {
            out.push_str(&self.stamp);
            out.push_str(&self.generated.line(self.next));
            self.next += 1;
            let over = (out.len() as u64).saturating_sub(self.room);
            if over > 0 {
                // Stamps and lines are ASCII: any length is a character boundary.
                out.truncate(out.len() - usize::try_from(over).unwrap_or(0));
            }
        }
        self.room = self.room.saturating_sub(out.len() as u64);
        (!out.is_empty()).then_some(out)
    }
}

/// A log with a generated prefix: its lines, then what the container wrote (and, when followed,
/// what it writes).
struct GeneratedFirst {
    lines: GeneratedLines,
    then: Follower,
}

impl Pieces for GeneratedFirst {
    async fn next_piece(&mut self) -> Option<String> {
        if let Some(piece) = self.lines.piece() {
            return Some(piece);
        }
        self.then.next_piece().await
    }
}

struct Follower {
    store: Arc<Store>,
    rx: tokio::sync::watch::Receiver<u64>,
    ns: String,
    pod: String,
    container: String,
    offset: usize,
    pending: Option<String>,
    /// Whether to go on with what is appended (`follow=true` on a log not closed yet).
    follow: bool,
}

impl Pieces for Follower {
    /// What was asked of the log first, then (followed) what is appended, until the pod's log
    /// is closed.
    async fn next_piece(&mut self) -> Option<String> {
        if let Some(first) = self.pending.take() {
            return Some(first);
        }
        if !self.follow {
            return None;
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

fn pick_container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, StatusError> {
    let main = container_names(pod, "containers");
    let init = container_names(pod, "initContainers");
    match asked {
        Some(c) if !c.is_empty() => {
            if main.iter().chain(init.iter()).any(|n| n == c) {
                Ok(c.to_string())
            } else {
                Err(StatusError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )))
            }
        }
        _ if main.len() == 1 => Ok(main[0].clone()),
        _ => Err(StatusError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            main.join(" ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Everything a request for the log of `generated` + `snapshot` gets.
    fn served(
        generated: &Generated,
        snapshot: &crate::logs::LogSnapshot,
        q: &[(&str, &str)],
    ) -> String {
        let (mut lines, written) = with_generated(generated.clone(), snapshot, &query(q));
        let mut out = String::new();
        while let Some(piece) = lines.piece() {
            assert!(piece.len() <= GENERATED_PIECE_BYTES + 200);
            out.push_str(&piece);
        }
        out + &written
    }

    #[test]
    fn a_generated_prefix_comes_first_and_requests_apply_to_the_whole_log() {
        let at: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let g = Generated {
            pod: "p".into(),
            container: "c".into(),
            bytes: 200_050,
            at,
        };
        let snapshot = crate::logs::LogSnapshot {
            text: "end one\nend two\n".into(),
            closed: true,
            lines: vec![(0, at), (8, at)],
        };
        let whole = served(&g, &snapshot, &[]);
        assert_eq!(whole.len(), 200_050 + 16);
        assert!(whole.starts_with("p/c generated line 0 ."));
        assert!(whole.ends_with(".\nend one\nend two\n"));
        // The last lines: the container's own, then the generated ones before them.
        assert_eq!(served(&g, &snapshot, &[("tailLines", "1")]), "end two\n");
        let three = served(&g, &snapshot, &[("tailLines", "3")]);
        assert!(three.starts_with("p/c generated line 2000 "), "{three}");
        assert_eq!(three.len(), 50 + 16);
        // limitBytes counts the whole log, generated part first.
        assert_eq!(served(&g, &snapshot, &[("limitBytes", "150")]).len(), 150);
        let all_but = served(&g, &snapshot, &[("limitBytes", "200057")]);
        assert!(
            all_but.ends_with(".\nend one"),
            "{}",
            &all_but[all_but.len() - 20..]
        );
        // sinceTime after the prefix's time leaves it out; timestamps prefix every line.
        let later = served(&g, &snapshot, &[("sinceTime", "2026-01-01T00:00:01Z")]);
        assert_eq!(later, "");
        let stamped = served(&g, &snapshot, &[("timestamps", "true"), ("tailLines", "3")]);
        assert!(stamped.starts_with("2026-01-01T00:00:00.000000000Z p/c generated line 2000"));
    }
}
