//! Pure helpers of the console's pages: time and duration text, plain-word pending reasons, pool
//! summaries and the grouping of a job's events. No I/O; unit-tested below.

use tuneplane_core::job::{
    EventSource, FailureCause, FailureReason, JobEvent, JobRecord, JobState, PendingReason,
};
use tuneplane_core::spec::{JobSpec, WorkloadKind};

/// `2026-11-30T01:50:00Z` for Unix milliseconds (the `datetime` attribute).
pub fn iso_utc(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// `2026-11-30 01:50:00 UTC`, the text shown until the script renders local time.
pub fn display_utc(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| "-".into())
}

/// One clock: elapsed ms, start ms, still counting; `None` when it has not started.
pub type ClockReading = Option<(i64, i64, bool)>;

/// The three clocks of a job at `now`: (label, elapsed ms, start ms, still counting).
pub fn clocks(job: &JobRecord, now: i64) -> [(&'static str, ClockReading); 3] {
    let end = |t: Option<i64>| t.or(job.finished_at_ms).unwrap_or(now);
    let queue_end = end(job.admitted_at_ms);
    let queue = Some((
        queue_end - job.submitted_at_ms,
        job.submitted_at_ms,
        job.state == JobState::Queued,
    ));
    let pre = job.admitted_at_ms.map(|a| {
        (
            end(job.running_at_ms) - a,
            a,
            job.state == JobState::Admitted,
        )
    });
    let run = job
        .running_at_ms
        .map(|r| (end(None) - r, r, job.state == JobState::Running));
    [("Queue wait", queue), ("Pre-running", pre), ("Run", run)]
}

/// A short duration: `12s`, `4m 12s`, `3h 05m`, `2d 04h`.
pub fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// What a pending reason means, in plain words.
pub fn pending_words(reason: PendingReason) -> &'static str {
    match reason {
        PendingReason::InsufficientGpu => {
            "Waiting for GPUs: not enough nodes of the series have enough free GPUs at once right now."
        }
        PendingReason::InsufficientCpu => {
            "Waiting for CPU: too few of the nodes the job may use have enough free CPU right now."
        }
        PendingReason::InsufficientMemory => {
            "Waiting for memory: too few of the nodes the job may use have enough free memory right now."
        }
        PendingReason::NoMatchingNode => {
            "Not enough usable nodes of this series: it has fewer Ready, uncordoned nodes than the job needs (or none)."
        }
        PendingReason::QueuedBehindOthers => {
            "Waiting behind a job of higher priority or submitted earlier, which holds the nodes this job would use until they drain."
        }
        PendingReason::QuotaExceeded => {
            "Waiting for quota: your team's quota for this GPU series (or for CPU-only jobs) is in use; the job starts when your own jobs finish."
        }
        PendingReason::ImagePull => {
            "Kubernetes cannot pull the container image: check its name, tag and registry access."
        }
        PendingReason::Starting => {
            "Pods are created and starting (pulling, initialising, waiting for Ray)."
        }
        PendingReason::InvalidWorkload => "Kubernetes rejected the workload or never acted on it.",
        PendingReason::PreviousAttemptStopping => {
            "Queued again: the previous attempt's pods are still saving a checkpoint; the next attempt starts from it."
        }
        PendingReason::Preempting => {
            "Admitted onto nodes whose jobs were preempted for it: they save a checkpoint and stop within their grace, then this job starts."
        }
        PendingReason::ArrayParallelism => {
            "Its array already runs as many children as its array.parallelism allows; this child starts when one of them ends."
        }
        PendingReason::WaitingForDependencies => {
            "Waiting for the jobs it depends on (depends_on) to end; it holds nothing until then and joins the queue in its place by submission time."
        }
    }
}

/// The machine-readable name of a pending reason (`InsufficientGpu`).
pub fn pending_code(reason: PendingReason) -> String {
    format!("{reason:?}")
}

/// What a failure reason means, in plain words.
pub fn failure_words(reason: FailureReason) -> &'static str {
    match reason {
        FailureReason::EntrypointFailed => "The entrypoint exited with an error.",
        FailureReason::PreRunningDeadlineExceeded => {
            "It did not start running before its pre-running deadline."
        }
        FailureReason::RunDeadlineExceeded => "It was still running at its run deadline.",
        FailureReason::ImagePull => "The container image could not be pulled.",
        FailureReason::InvalidWorkload => "Kubernetes rejected the workload.",
        FailureReason::WorkloadLost => "The workload disappeared without a final status.",
        FailureReason::StopRequested => "Stopped at a user's request.",
        FailureReason::CapsuleMismatch => {
            "The code a pod received did not match its checksum; nothing of it ran."
        }
        FailureReason::CapsuleUnavailable => {
            "A pod could not download the job's code (the endpoint refused or answered an error); nothing of it ran."
        }
        FailureReason::OutOfMemory => "The entrypoint used more memory than its limit.",
        FailureReason::NodeLost => "A node it ran on was lost (deleted or not ready).",
        FailureReason::Evicted => "Kubernetes evicted, preempted or deleted one of its pods.",
        FailureReason::Interrupted => "A node it ran on was reclaimed (an interruption notice).",
        FailureReason::RayNodeLost => "A Ray node of it was lost while it ran.",
        FailureReason::Preempted => {
            "The platform stopped it to give its GPUs to another job (quota reclaim or a higher-priority job of its tenant); it had its grace to save."
        }
        FailureReason::ArrayChildFailed => {
            "Some children of this array failed; each child's page says why."
        }
        FailureReason::DependencyFailed => {
            "A job it depended on failed, was stopped or is gone, so it never ran."
        }
    }
}

/// What a failure's cause means for the job, in plain words.
pub fn cause_words(cause: FailureCause) -> &'static str {
    match cause {
        FailureCause::Application => {
            "The job's own doing (its code, image, spec or deadlines); retried only as its spec's retries.application allow."
        }
        FailureCause::Infrastructure => {
            "The platform lost the attempt (a node, an eviction, an interruption); retried as its spec's retries.infrastructure allow."
        }
        FailureCause::User => "Someone stopped it; never retried.",
        FailureCause::Preempted => {
            "Preempted for another job; always run again from its newest complete checkpoint, never counted against its retries."
        }
    }
}

/// `2 of up to 3`, or `None` for a job on its first attempt ([`JobRecord::attempt_label`]).
pub fn attempt_label(job: &JobRecord) -> Option<String> {
    job.attempt_label()
}

/// `/console/jobs/<id>/outputs/<path>`, each segment of the path percent-encoded.
pub fn output_href(job_id: &str, path: &str) -> String {
    format!(
        "/console/jobs/{}/outputs/{}",
        super::viewer::encode_component(job_id),
        super::viewer::encode_component(path)
    )
}

/// `RayJob` or `Pod`.
pub fn kind_label(spec: &JobSpec) -> &'static str {
    match spec.kind() {
        WorkloadKind::RayJob => "RayJob",
        WorkloadKind::Pod => "Pod",
    }
}

/// One line per pool: `main: h200 × 2 nodes × 8 GPUs`, or `main: CPU × 1 node (2 CPU, 4 GiB)`.
pub fn pool_lines(spec: &JobSpec) -> Vec<String> {
    spec.pools
        .iter()
        .map(|p| {
            let nodes = if p.nodes == 1 {
                "1 node".to_owned()
            } else {
                format!("{} nodes", p.nodes)
            };
            match &p.series {
                Some(series) => {
                    let gpus = if p.gpus_per_node == 1 { "GPU" } else { "GPUs" };
                    format!(
                        "{}: {series} × {nodes} × {} {gpus}",
                        p.name, p.gpus_per_node
                    )
                }
                None => format!(
                    "{}: CPU × {nodes} ({} CPU, {} GiB)",
                    p.name, p.cpus, p.memory_gb
                ),
            }
        })
        .collect()
}

/// Events that repeat (same source, kind, reason, message and object), shown once with a count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventGroup {
    /// First occurrence, Unix ms.
    pub first_ms: i64,
    /// Latest occurrence, Unix ms.
    pub last_ms: i64,
    /// How many events were folded into this group (at least 1).
    pub count: usize,
    /// `Platform` or `Kubernetes`.
    pub source: &'static str,
    /// `Normal` or `Warning`.
    pub kind: String,
    /// Short CamelCase reason (`Admitted`, `FailedScheduling`, `BackOff`).
    pub reason: String,
    /// Human message, the same for every event of the group.
    pub message: String,
    /// The object the events concern (`pod/tp-abc-head-x`), if any.
    pub object: Option<String>,
}

/// Groups repeated events and orders the groups newest first.
pub fn group_events(events: &[JobEvent]) -> Vec<EventGroup> {
    let mut groups: Vec<EventGroup> = Vec::new();
    for e in events {
        let source = match e.source {
            EventSource::Platform => "Platform",
            EventSource::Kubernetes => "Kubernetes",
        };
        let same = |g: &&mut EventGroup| {
            g.source == source
                && g.kind == e.kind
                && g.reason == e.reason
                && g.message == e.message
                && g.object == e.object
        };
        if let Some(g) = groups.iter_mut().find(same) {
            g.count += 1;
            g.first_ms = g.first_ms.min(e.at_ms);
            g.last_ms = g.last_ms.max(e.at_ms);
        } else {
            groups.push(EventGroup {
                first_ms: e.at_ms,
                last_ms: e.at_ms,
                count: 1,
                source,
                kind: e.kind.clone(),
                reason: e.reason.clone(),
                message: e.message.clone(),
                object: e.object.clone(),
            });
        }
    }
    groups.sort_by(|a, b| b.last_ms.cmp(&a.last_ms).then(b.first_ms.cmp(&a.first_ms)));
    groups
}

/// Percentage of `part` in `whole`, 0..=100 (0 when `whole` is 0).
pub fn percent(part: u32, whole: u32) -> u32 {
    if whole == 0 {
        0
    } else {
        (u64::from(part) * 100 / u64::from(whole)).min(100) as u32
    }
}

/// Human size: `512 B`, `3.4 KiB`, `12.0 MiB`, `7.5 GiB`.
pub fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
        _ => format!("{:.1} GiB", bytes as f64 / 1_073_741_824.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at_ms: i64, key: &str, reason: &str, message: &str) -> JobEvent {
        JobEvent {
            at_ms,
            key: key.into(),
            source: EventSource::Kubernetes,
            kind: "Warning".into(),
            reason: reason.into(),
            message: message.into(),
            object: Some("pod/p".into()),
        }
    }

    #[test]
    fn repeated_events_are_counted_once_and_groups_list_newest_first() {
        let events = [
            event(1, "a", "FailedScheduling", "0/3 nodes"),
            event(2, "b", "BackOff", "pull"),
            event(5, "c", "FailedScheduling", "0/3 nodes"),
        ];
        let groups = group_events(&events);
        assert_eq!(groups.len(), 2);
        assert_eq!(
            (groups[0].reason.as_str(), groups[0].count),
            ("FailedScheduling", 2)
        );
        assert_eq!((groups[0].first_ms, groups[0].last_ms), (1, 5));
        assert_eq!(groups[1].reason, "BackOff");
    }

    #[test]
    fn durations_and_times_read_naturally() {
        assert_eq!(duration(12_400), "12s");
        assert_eq!(duration(252_000), "4m 12s");
        assert_eq!(duration(3_900_000), "1h 05m");
        assert_eq!(duration(-5), "0s");
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(display_utc(86_400_000), "1970-01-02 00:00:00 UTC");
    }

    #[test]
    fn percentages_are_bounded() {
        assert_eq!(percent(3, 8), 37);
        assert_eq!(percent(9, 8), 100);
        assert_eq!(percent(1, 0), 0);
        assert_eq!(size(2048), "2.0 KiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
    }

    #[test]
    fn output_links_encode_each_segment_and_keep_the_folders() {
        assert_eq!(
            output_href("j-1", "model/w 1.bin"),
            "/console/jobs/j-1/outputs/model/w%201.bin"
        );
        assert_eq!(
            output_href("j-1", "a\"<b>.txt"),
            "/console/jobs/j-1/outputs/a%22%3Cb%3E.txt"
        );
    }
}
