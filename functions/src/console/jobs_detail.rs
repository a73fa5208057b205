//! Rendering of the job detail page: what the job is, why it waits or how it ended, its history,
//! the event view (newest first, repeats counted) and the log preview.

use maud::{Markup, html};
use tuneplane_core::job::{EventSource, JobEvent, JobRecord};
use tuneplane_core::store::BlobMeta;

use super::layout::{clock, csrf_field, status_badge, table_head, time};
use super::logs::LogTail;
use super::view;
use super::viewer::Viewer;

/// What the detail page shows beside the job's own records.
pub struct PageState<'a> {
    /// Now, Unix milliseconds.
    pub now: i64,
    /// A notice after an action (submitted, stop requested).
    pub notice: Option<&'a str>,
    /// The job's place in the queue while it is queued.
    pub queue_position: Option<u64>,
    /// The live tail of a running job's output (empty: nothing shipped yet).
    pub live: Option<&'a [LogTail]>,
}

/// When an admitted job that is not running yet fails on its pre-running deadline (Unix ms).
fn pre_running_deadline(job: &JobRecord) -> Option<i64> {
    if job.state != tuneplane_core::job::JobState::Admitted {
        return None;
    }
    let secs = i64::try_from(job.spec.deadlines.pre_running_seconds).unwrap_or(i64::MAX / 2000);
    Some(job.admitted_at_ms? + secs * 1000)
}

/// The body of the detail page.
pub fn render(
    viewer: &Viewer,
    job: &JobRecord,
    events: &[JobEvent],
    capsule: Option<&BlobMeta>,
    preview: Option<&[LogTail]>,
    state: &PageState,
) -> Markup {
    let (now, notice) = (state.now, state.notice);
    let groups = view::group_events(events);
    let latest_warning = events
        .iter()
        .filter(|e| e.source == EventSource::Kubernetes && e.kind == "Warning")
        .max_by_key(|e| e.at_ms);
    let spec_json = serde_json::to_string_pretty(&job.spec).unwrap_or_default();
    html! {
        p.crumbs { a href="/console/jobs" { "← Jobs" } }
        h1 { (job.spec.name) " " (status_badge(job.state.as_str())) }
        @if let Some(n) = notice { p.notice role="status" { (n) } }
        div data-refresh="5" id="job-region" data-status=(job.state.as_str()) {
            @if let Some(p) = &job.pending {
                section.pending aria-labelledby="pending-title" {
                    h2 id="pending-title" { "Why is it pending?" }
                    p.words { (view::pending_words(p.reason)) }
                    dl {
                        dt { "Reason" } dd { code { (view::pending_code(p.reason)) } }
                        dt { "Message" } dd.message { (p.message) }
                        @if let Some(w) = latest_warning {
                            dt { "Kubernetes says" } dd.k8s { strong { (w.reason) } ": " (w.message) }
                        }
                        dt { "Since" } dd { (time(p.since_ms, true)) }
                        @if let Some(deadline) = pre_running_deadline(job) {
                            dt { "Deadline" }
                            dd.deadline {
                                @if deadline > now {
                                    "fails as PreRunningDeadlineExceeded in "
                                    strong { span data-countdown-to=(deadline) { (view::duration(deadline - now)) } }
                                    " (" (time(deadline, false)) ")"
                                } @else {
                                    "passed " (time(deadline, true)) "; the job fails on the next pass"
                                }
                            }
                        } @else if job.state == tuneplane_core::job::JobState::Queued {
                            dt { "Deadline" }
                            dd.deadline { "the pre-running deadline (" (view::duration(job.spec.deadlines.pre_running_seconds as i64 * 1000)) ") starts at admission" }
                        }
                        @if let Some(q) = state.queue_position {
                            dt { "Queue position" } dd.queue { (q) " (1 is next in priority and submission order)" }
                        }
                    }
                }
            }
            @if let Some(f) = &job.failure {
                section.failure aria-labelledby="failure-title" {
                    h2 id="failure-title" { "How it ended" }
                    p.words { (view::failure_words(f.reason)) }
                    p { code { (format!("{:?}", f.reason)) } " " (f.message) }
                }
            }
            section aria-labelledby="summary-title" {
                h2 id="summary-title" { "Summary" }
                dl.grid {
                    dt { "Job id" } dd { code { (job.id) } }
                    dt { "Kind" } dd { (view::kind_label(&job.spec)) }
                    dt { "Pools" } dd { @for line in view::pool_lines(&job.spec) { span.pool { (line) } } }
                    @for (label, c) in view::clocks(job, now) {
                        dt { (label) }
                        dd { @match c { Some((ms, start, running)) => (clock(ms, start, running)), None => span.muted { "not started" } } }
                    }
                    dt { "Capsule" } dd { code.digest { (job.capsule_sha256) } }
                    dt { "Capsule size" } dd { @match capsule { Some(m) => (view::size(m.size)), None => "unknown" } }
                    @if let Some(w) = &job.workload_name { dt { "Workload" } dd { code { (w) } } }
                }
            }
            section aria-labelledby="history-title" {
                h2 id="history-title" { "Status history" }
                ol.history {
                    li { "Submitted (QUEUED) " (time(job.submitted_at_ms, true)) }
                    @if let Some(t) = job.admitted_at_ms { li { "ADMITTED " (time(t, true)) } }
                    @if let Some(t) = job.running_at_ms { li { "RUNNING " (time(t, true)) } }
                    @if let Some(t) = job.finished_at_ms { li { (job.state.as_str()) " " (time(t, true)) } }
                }
            }
            section aria-labelledby="events-title" {
                h2 id="events-title" { "Events" }
                @if groups.is_empty() {
                    p.empty { "No events yet." }
                } @else {
                    table.events.compact {
                        (table_head("Events, newest first; repeated events are counted", &["Last seen", "Count", "Source", "Type", "Reason", "Message"]))
                        tbody {
                            @for g in &groups {
                                tr class=(if g.kind == "Warning" { "warning" } else { "" }) {
                                    td.when data-label="Last seen" { (time(g.last_ms, true)) }
                                    td.count data-label="Count" data-one[g.count == 1] { (g.count) }
                                    td.src data-label="Source" { (g.source) }
                                    td.type data-label="Type" { (g.kind) }
                                    td.reason data-label="Reason" { strong { (g.reason) } }
                                    td.msg data-label="Message" { div {
                                        (g.message)
                                        @if let Some(o) = &g.object { br; code.small { (o) } }
                                    } }
                                }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="logs-title" {
                h2 id="logs-title" { "Logs" }
                @if job.logs_key.is_some() {
                    p { a.button href=(format!("/console/jobs/{}/logs", job.id)) download { "Download archived logs (.tar.gz)" } }
                    @match preview {
                        Some(tails) if !tails.is_empty() => {
                            @for (i, t) in tails.iter().enumerate() {
                                details.log open[i == 0] {
                                    summary { (t.path) @if t.truncated { " (last lines)" } }
                                    pre.log tabindex="0" { (t.lines.join("\n")) }
                                }
                            }
                        }
                        _ => p.muted { "No preview available; download the archive." },
                    }
                } @else if let Some(tails) = state.live {
                    @if tails.is_empty() {
                        p.muted { "No output shipped yet: while this page is open, the job's output appears here within a few seconds of being written." }
                    } @else {
                        p.muted.live-note { "Live output, updated every few seconds while this page is open; the whole logs are archived when the job ends." }
                        @for (i, t) in tails.iter().enumerate() {
                            details.log.live open[i == 0] {
                                summary { (t.path) @if t.truncated { " (last lines)" } }
                                pre.log tabindex="0" { (t.lines.join("\n")) }
                            }
                        }
                    }
                } @else {
                    p.muted { "Logs are archived when the job ends." }
                }
            }
        }
        @if !job.is_terminal() && !job.stop_requested {
            section aria-labelledby="stop-title" {
                h2 id="stop-title" { "Stop" }
                details.stop {
                    summary { "Stop this job…" }
                    form method="post" action=(format!("/console/jobs/{}/stop", job.id))
                        data-confirm=(format!("Stop job {}? This cannot be undone.", job.spec.name)) {
                        (csrf_field(&viewer.csrf))
                        p { "The job ends as STOPPED; its logs are archived first." }
                        button.danger type="submit" { "Yes, stop " (job.spec.name) }
                    }
                }
            }
        }
        section aria-labelledby="spec-title" {
            h2 id="spec-title" { "Authoritative spec" }
            pre.spec tabindex="0" { (spec_json) }
        }
    }
}
