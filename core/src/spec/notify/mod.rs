//! What a callback may name: the events it reports, the shape of its body, and where it may be
//! sent ([`target`]). The job spec's `notify` list and a tenant's subscriptions are checked with
//! these rules; delivering them is [`crate::callback`].

pub mod target;

pub use target::{check_ip, check_url};

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Most `notify` entries of one job.
pub const MAX_NOTIFY: usize = 5;
/// Longest callback URL, bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// A state change a callback reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The job was accepted and waits for capacity.
    Queued,
    /// Admission placed the job; its workload is being created.
    Admitted,
    /// Every pod of the workload runs.
    Running,
    /// The entrypoint exited 0.
    Succeeded,
    /// The job failed (its cause and reason say why).
    Failed,
    /// The job was stopped on request.
    Stopped,
    /// An attempt ended by an infrastructure failure and the job is queued again.
    Requeued,
}

impl EventKind {
    /// Every kind, in lifecycle order.
    pub const ALL: [EventKind; 7] = [
        EventKind::Queued,
        EventKind::Admitted,
        EventKind::Running,
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::Stopped,
        EventKind::Requeued,
    ];
    /// The kinds `terminal` stands for.
    pub const TERMINAL: [EventKind; 3] =
        [EventKind::Succeeded, EventKind::Failed, EventKind::Stopped];

    /// The name used in specs, payloads and the API (`queued`, `succeeded`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Queued => "queued",
            EventKind::Admitted => "admitted",
            EventKind::Running => "running",
            EventKind::Succeeded => "succeeded",
            EventKind::Failed => "failed",
            EventKind::Stopped => "stopped",
            EventKind::Requeued => "requeued",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The accepted event names, for messages: every kind and `terminal`.
pub fn event_names() -> String {
    let mut names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
    names.push("terminal");
    names.join(", ")
}

/// Parses event names (`terminal` stands for succeeded, failed and stopped); an empty list means
/// every event. Returns the set, or the first unknown name with what is accepted.
pub fn parse_events<S: AsRef<str>>(names: &[S]) -> Result<Vec<EventKind>, String> {
    if names.is_empty() {
        return Ok(EventKind::ALL.to_vec());
    }
    let mut set = BTreeSet::new();
    for name in names {
        let name = name.as_ref().trim();
        if name == "terminal" {
            set.extend(EventKind::TERMINAL);
            continue;
        }
        match EventKind::ALL.iter().find(|k| k.as_str() == name) {
            Some(k) => {
                set.insert(*k);
            }
            None => {
                return Err(format!("unknown event {name:?}; known: {}", event_names()));
            }
        }
    }
    Ok(set.into_iter().collect())
}

/// How a delivery's body is shaped.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// TunePlane's JSON event (`payload::body`).
    #[default]
    Json,
    /// A Slack incoming-webhook message (`{"text": ...}`).
    Slack,
}

impl Format {
    /// The name used in specs and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Slack => "slack",
        }
    }

    /// Parses `json` or `slack`.
    pub fn parse(name: &str) -> Result<Format, String> {
        match name {
            "json" => Ok(Format::Json),
            "slack" => Ok(Format::Slack),
            other => Err(format!("unknown format {other:?}; known: json, slack")),
        }
    }
}

/// One callback of a job's spec: where to send which events, in which shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// An `https://` URL (`http://` only for loopback in dev).
    pub url: String,
    /// The events sent there (every event when the spec named none).
    pub events: Vec<EventKind>,
    /// The body's shape.
    #[serde(default)]
    pub format: Format,
}

impl Notify {
    /// True when this callback wants `kind`.
    pub fn wants(&self, kind: EventKind) -> bool {
        self.events.contains(&kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_stands_for_the_three_ends_and_nothing_means_everything() {
        assert_eq!(
            parse_events(&["terminal"]).unwrap(),
            vec![EventKind::Succeeded, EventKind::Failed, EventKind::Stopped]
        );
        assert_eq!(parse_events::<&str>(&[]).unwrap(), EventKind::ALL.to_vec());
        assert_eq!(
            parse_events(&["running", "queued", "running"]).unwrap(),
            vec![EventKind::Queued, EventKind::Running]
        );
    }

    #[test]
    fn an_unknown_event_is_named_with_the_known_ones() {
        let err = parse_events(&["finished"]).unwrap_err();
        assert!(err.contains("\"finished\""), "{err}");
        assert!(err.contains("requeued, terminal"), "{err}");
    }
}
