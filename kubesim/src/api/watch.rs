//! Watch streams: newline-delimited JSON events from a resourceVersion, with selector transitions
//! (an object leaving the selector is `DELETED`, entering it is `ADDED`), optional bookmarks,
//! `timeoutSeconds`, and an in-stream `ERROR` event carrying a 410 Status for a compacted version.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use super::{ApiState, Pieces, ok_body, streamed};
use crate::error::StatusError;
use crate::resources::ResourceType;
use crate::store::{EventType, ListQuery, WatchEvent};

/// Watches without `timeoutSeconds` end after this long (clients re-watch).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

struct WatchStream {
    rt: &'static ResourceType,
    query: ListQuery,
    backlog: VecDeque<Arc<WatchEvent>>,
    rx: broadcast::Receiver<Arc<WatchEvent>>,
    resets: tokio::sync::watch::Receiver<u64>,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    bookmark_every: Duration,
    /// Highest resourceVersion of which every change has been seen (bookmarks may claim it).
    seen_rv: u64,
    done: bool,
}

pub(super) async fn serve(
    state: &ApiState,
    rt: &'static ResourceType,
    query: ListQuery,
    params: &HashMap<String, String>,
) -> Result<Response, StatusError> {
    let from = match params.get("resourceVersion").map(String::as_str) {
        None | Some("") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| StatusError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let timeout = params
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let bookmarks = params
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    let resets = state.store.resets();
    let start = match state.store.watch_from(rt, from) {
        Ok(s) => s,
        Err(e) if e.code == 410 => {
            // The real server answers 200 with one ERROR event; clients relist on it.
            let line = format!("{}\n", json!({"type": "ERROR", "object": e.to_status()}));
            return Ok(ok_body("application/json", Body::from(line)));
        }
        Err(e) => return Err(e),
    };
    let now = Instant::now();
    let stream = WatchStream {
        rt,
        query,
        backlog: start.backlog.into(),
        rx: start.rx,
        resets,
        deadline: now + timeout,
        bookmarks,
        next_bookmark: now + state.bookmark_interval,
        bookmark_every: state.bookmark_interval,
        seen_rv: start.rv,
        done: false,
    };
    Ok(streamed("application/json", stream))
}

impl Pieces for WatchStream {
    /// The next line to send, or `None` when the stream ends.
    async fn next_piece(&mut self) -> Option<String> {
        loop {
            if self.done {
                return None;
            }
            if let Some(ev) = self.backlog.pop_front() {
                if let Some(line) = self.render(&ev) {
                    return Some(line);
                }
                continue;
            }
            let wake = if self.bookmarks {
                self.deadline.min(self.next_bookmark)
            } else {
                self.deadline
            };
            tokio::select! {
                received = self.rx.recv() => match received {
                    Ok(ev) => {
                        self.seen_rv = self.seen_rv.max(ev.rv);
                        if let Some(line) = self.render(&ev) {
                            return Some(line);
                        }
                    }
                    // A watcher that fell behind is closed; the client re-watches from its last version.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => self.done = true,
                },
                _ = self.resets.changed() => self.done = true,
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= self.deadline {
                        self.done = true;
                    } else {
                        self.next_bookmark = Instant::now() + self.bookmark_every;
                        let object = json!({
                            "kind": self.rt.kind,
                            "apiVersion": self.rt.api_version(),
                            "metadata": {"resourceVersion": self.seen_rv.to_string()},
                        });
                        return Some(format!("{}\n", json!({"type": "BOOKMARK", "object": object})));
                    }
                }
            }
        }
    }
}

impl WatchStream {
    /// The wire line for an event, if this watch selects it.
    fn render(&self, ev: &WatchEvent) -> Option<String> {
        if !std::ptr::eq(ev.rt, self.rt) {
            return None;
        }
        let new_match = self.query.matches(&ev.object);
        let ty = match ev.ty {
            EventType::Added if new_match => EventType::Added,
            EventType::Deleted if new_match => EventType::Deleted,
            EventType::Modified => {
                let old_match = ev.old.as_deref().is_some_and(|o| self.query.matches(o));
                match (old_match, new_match) {
                    (true, true) => EventType::Modified,
                    (false, true) => EventType::Added,
                    (true, false) => EventType::Deleted,
                    (false, false) => return None,
                }
            }
            _ => return None,
        };
        let mut line = format!("{{\"type\":\"{}\",\"object\":", ty.as_str());
        line.push_str(&serde_json::to_string::<Value>(&ev.object).unwrap_or_else(|_| "{}".into()));
        line.push_str("}\n");
        Some(line)
    }
}
