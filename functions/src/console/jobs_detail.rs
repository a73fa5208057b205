//! Rendering of the job detail page: what the job is, why it waits or how it ended (cause and
//! Kubernetes evidence), its attempts, its history, the event view (newest first, repeats
//! counted), the log preview and its outputs and checkpoints.

use maud::{Markup, html};
use tuneplane_core::job::{EventSource, Failure, JobEvent, JobRecord};
use tuneplane_core::outputs::{Checkpoint, FileEntry};
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
    /// The job's outputs and checkpoints (`None`: they could not be listed).
    pub outputs: Option<&'a Outputs>,
    /// An array parent's children (the first [`CHILDREN_SHOWN`]).
    pub children: &'a [JobRecord],
    /// The jobs this job depends on, by id (`None`: no longer there).
    pub dependencies: &'a [(String, Option<JobRecord>)],
}

/// The most children an array's page lists.
pub const CHILDREN_SHOWN: u32 = 200;

/// An array parent's children: counts, then each child with its state and reason.
fn children_section(job: &JobRecord, children: &[JobRecord]) -> Markup {
    let size = job.array_size().unwrap_or(0);
    let counts = job.array_parent().map(|b| b.counts).unwrap_or_default();
    html! {
        section.children aria-labelledby="children-title" {
            h2 id="children-title" { "Children" }
            p.counts { (counts.summary(size)) }
            table.jobs.compact {
                (super::layout::table_head("Children by index", &["Index", "Job", "Status"]))
                tbody {
                    @for c in children {
                        tr data-status=(c.state.as_str()) {
                            td data-label="Index" { (c.array_child().map(|a| a.index).unwrap_or(0)) }
                            td data-label="Job" { a href=(format!("/console/jobs/{}", c.id)) { code { (c.id) } } }
                            td data-label="Status" {
                                (super::layout::status_badge(c.state.as_str()))
                                @if let Some(p) = &c.pending { " " span.reason { (view::pending_code(p.reason)) } }
                                @if let Some(f) = &c.failure { " " span.reason { (format!("{:?}", f.reason)) } }
                            }
                        }
                    }
                }
            }
            @if size > CHILDREN_SHOWN { p.muted { "The first " (CHILDREN_SHOWN) " of " (size) " children; tuneplane jobs --children lists them all." } }
        }
    }
}

/// The jobs a job waits for (a pipeline's earlier steps), in the spec's order, with their states.
fn dependencies_section(job: &JobRecord, dependencies: &[(String, Option<JobRecord>)]) -> Markup {
    html! {
        section.dependencies aria-labelledby="deps-title" {
            h2 id="deps-title" { "Depends on" }
            ol.dependencies {
                @for ((id, dep), entry) in dependencies.iter().zip(&job.spec.depends_on) {
                    li {
                        a href=(format!("/console/jobs/{id}")) { code { (id) } }
                        @if let Some(d) = dep { " " (d.spec.name) " " (super::layout::status_badge(d.state.as_str())) }
                        @else { " " span.muted { "(gone)" } }
                        " — must " (match entry.when { tuneplane_core::spec::DependencyWhen::Succeeded => "succeed", tuneplane_core::spec::DependencyWhen::Ended => "end" })
                    }
                }
            }
        }
    }
}

/// A job's outputs and complete checkpoints, as the blob store lists them.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// What the job left in `TUNEPLANE_OUTPUT_DIR`, sorted by path.
    pub files: Vec<FileEntry>,
    /// Its complete checkpoints, oldest first.
    pub checkpoints: Vec<Checkpoint>,
}

/// Most outputs listed on the page (the CLI lists them all).
pub const MAX_OUTPUT_ROWS: usize = 200;

/// The details of a failure: its cause in plain words, exit code and Kubernetes evidence.
fn failure_details(f: &Failure) -> Markup {
    html! {
        dl.failure-details {
            dt { "Cause" }
            dd.cause { strong { (f.cause.as_str()) } " — " (view::cause_words(f.cause)) }
            @if let Some(code) = f.exit_code { dt { "Exit code" } dd { code { (code) } } }
            @if !f.evidence.is_empty() {
                dt { "Evidence" }
                dd { ul.evidence { @for e in &f.evidence { li { code { (e) } } } } }
            }
        }
    }
}

/// The earlier attempts of a job that was run again, oldest first, each with its logs.
fn attempts_section(job: &JobRecord) -> Markup {
    html! {
        section.attempts aria-labelledby="attempts-title" {
            h2 id="attempts-title" { "Earlier attempts" }
            p.muted {
                "This is attempt " (job.attempt) " of the job"
                @if let Some(label) = view::attempt_label(job) { " (" (label) ")" }
                "; each earlier attempt ended as below and its logs stay archived."
            }
            table.attempts.cards {
                (table_head("Earlier attempts, oldest first", &["Attempt", "Ended as", "Cause", "Ended", "Ran", "What happened", "Logs"]))
                tbody {
                    @for a in &job.attempts {
                        tr data-attempt=(a.number) {
                            td data-label="Attempt" { (a.number) }
                            td data-label="Ended as" { code { (format!("{:?}", a.failure.reason)) } }
                            td data-label="Cause" { (a.failure.cause.as_str()) }
                            td data-label="Ended" { (time(a.finished_at_ms, true)) }
                            td data-label="Ran" {
                                @match a.running_at_ms {
                                    Some(r) => (view::duration(a.finished_at_ms - r)),
                                    None => span.muted { "never ran" },
                                }
                            }
                            td.msg data-label="What happened" { div {
                                (a.failure.message)
                                @if let Some(lost) = a.failure.lost_seconds {
                                    p.lost { "Lost at most " (view::duration(i64::try_from(lost.saturating_mul(1000)).unwrap_or(i64::MAX))) " of work (since its newest complete checkpoint when it was told to stop)." }
                                }
                                @if !a.failure.evidence.is_empty() {
                                    ul.evidence { @for e in &a.failure.evidence { li { code.small { (e) } } } }
                                }
                            } }
                            td data-label="Logs" {
                                @if a.logs_key.is_some() {
                                    a href=(format!("/console/jobs/{}/logs?attempt={}", super::viewer::encode_component(&job.id), a.number)) download { "Logs of attempt " (a.number) }
                                } @else {
                                    span.muted { "none archived" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The job's outputs with their download links, and its complete checkpoints.
fn outputs_section(job: &JobRecord, outputs: Option<&Outputs>) -> Markup {
    html! {
        section.outputs aria-labelledby="outputs-title" {
            h2 id="outputs-title" { "Outputs" }
            @match outputs {
                None => p.muted { "The outputs could not be listed right now; the page tries again when it refreshes." },
                Some(o) => {
                    @if o.files.is_empty() {
                        @if job.is_terminal() {
                            p.empty { "The job left no outputs (nothing in TUNEPLANE_OUTPUT_DIR)." }
                        } @else {
                            p.empty { "No outputs yet: what the job leaves in TUNEPLANE_OUTPUT_DIR is uploaded when its entrypoint ends." }
                        }
                    } @else {
                        table.outputs.compact {
                            (table_head("The job's outputs; each link downloads one file", &["Path", "Size"]))
                            tbody {
                                @for f in o.files.iter().take(MAX_OUTPUT_ROWS) {
                                    tr {
                                        td data-label="Path" { a href=(view::output_href(&job.id, &f.path)) download { code { (f.path) } } }
                                        td data-label="Size" { (view::size(f.size)) }
                                    }
                                }
                            }
                        }
                        @if o.files.len() > MAX_OUTPUT_ROWS {
                            p.muted { "… and " (o.files.len() - MAX_OUTPUT_ROWS) " more: " code { "tuneplane outputs " (job.id) } " lists them all." }
                        }
                        p.muted {
                            (o.files.len()) " " (if o.files.len() == 1 { "file" } else { "files" }) ", "
                            (view::size(o.files.iter().map(|f| f.size).sum())) "; from a terminal: "
                            code { "tuneplane outputs " (job.id) " --get ." }
                            "; a checkpoint: "
                            code { "tuneplane outputs " (job.id) " --checkpoints --get latest" }
                        }
                    }
                    h3 { "Checkpoints" }
                    @if o.checkpoints.is_empty() {
                        p.empty { "No complete checkpoints." }
                    } @else {
                        table.checkpoints.cards {
                            (table_head("Complete checkpoints, oldest first; a new attempt resumes from the newest", &["Name", "Attempt", "Completed", "Files", "Size"]))
                            tbody {
                                @for c in &o.checkpoints {
                                    tr {
                                        td data-label="Name" { code { (c.name) } }
                                        td data-label="Attempt" { (c.attempt) }
                                        td data-label="Completed" { (time(c.completed_at_ms, true)) }
                                        td data-label="Files" {
                                            details {
                                                summary { (c.files.len()) @if c.files.len() == 1 { " file" } @else { " files" } }
                                                ul.files {
                                                    @for f in &c.files {
                                                        li { a href=(format!("/console/jobs/{}/checkpoints/{}/{}", super::viewer::encode_component(&job.id), super::viewer::encode_component(&c.name), f.path.split('/').map(super::viewer::encode_component).collect::<Vec<_>>().join("/"))) download { (f.path) } " " span.muted { (view::size(f.size)) } }
                                                    }
                                                }
                                            }
                                        }
                                        td data-label="Size" { (view::size(c.bytes())) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
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
            @if let Some(n) = job.preempt.as_ref().filter(|_| !job.is_terminal()) {
                p.notice.preempt role="status" { (n.message(job.spec.deadlines.grace_seconds)) }
            }
            @if let Some(f) = &job.failure {
                section.failure aria-labelledby="failure-title" {
                    h2 id="failure-title" { "How it ended" }
                    p.words { (view::failure_words(f.reason)) }
                    p { code { (format!("{:?}", f.reason)) } " " (f.message) }
                    (failure_details(f))
                }
            } @else if let Some(last) = job.attempts.last().filter(|_| !job.is_terminal()) {
                p.notice.retry role="status" {
                    "Attempt " (job.attempt) ": the platform runs the job again after attempt " (last.number)
                    " ended as " code { (format!("{:?}", last.failure.reason)) } " (" (last.failure.cause.as_str()) ")."
                }
            }
            section aria-labelledby="summary-title" {
                h2 id="summary-title" { "Summary" }
                dl.grid {
                    dt { "Job id" } dd { code { (job.id) } }
                    @if let Some(label) = view::attempt_label(job) { dt { "Attempt" } dd.attempt { (label) } }
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
            @if job.is_array_parent() { (children_section(job, state.children)) }
            @if !state.dependencies.is_empty() { (dependencies_section(job, state.dependencies)) }
            @if !job.attempts.is_empty() { (attempts_section(job)) }
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
            @if job.is_array_parent() {
                section aria-labelledby="logs-title" {
                    h2 id="logs-title" { "Logs and outputs" }
                    p.muted {
                        "An array runs nothing itself: its logs and outputs are its children's. Open a child above, or from a terminal: "
                        code { "tuneplane logs " (job.id) " --index 0" } " and " code { "tuneplane outputs " (job.id) "-0" } "."
                    }
                }
            } @else {
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
            (outputs_section(job, state.outputs))
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
