//! Client commands for jobs: submit, jobs, status, watch, events, logs, stop, capacity.
//!
//! Exit codes scripts can rely on: 0 success (for `watch` and `submit --wait`: the job SUCCEEDED),
//! 1 an error (bad input, API unreachable, refused request), 3 the job FAILED, 4 the job was STOPPED.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};
use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::job::{Failure, JobEvent, JobRecord, JobState};
use tuneplane_core::spec::Defaults;

use super::output::{
    age, clock, duration, now_ms, pools_of, print_table, print_table_coloured, rows_of,
};
use crate::client::{Api, ClientArgs, Output, pack};

/// Inline code above this size goes through a presigned upload instead.
pub(crate) const INLINE_LIMIT: usize = 3 * 1024 * 1024;

/// Arguments of `submit`.
#[derive(clap::Args)]
pub struct SubmitArgs {
    /// Directory, tar, tar.gz or zip with the job's code; or a pipeline file (`.yaml`: name and
    /// steps, each a folder with its own tuneplane.yaml and the steps it comes after).
    pub source: PathBuf,
    /// JobSpec file (YAML or JSON); default: tuneplane.yaml in SOURCE.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Idempotency key: the same key and body give the same job; another body is refused (409).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Follow the job until it ends, printing its events and its main output; the exit code
    /// tells how it ended.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: events only, not the job's output.
    #[arg(long, requires = "wait")]
    pub quiet: bool,
    /// Check everything (key, spec, its fit to the live capacity, the code) and submit nothing.
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,
}

/// The spec checked against the API's live capacity snapshot (every rule, and the fit to the
/// fleet when there is a snapshot): the outer error is the API's, the inner lists every problem
/// of the spec.
pub async fn validate_live(
    api: &Api,
    spec: &str,
) -> anyhow::Result<Result<tuneplane_core::spec::Validated, tuneplane_core::spec::SpecErrors>> {
    let body: Value = api.get("/capacity").await?;
    let snap: Option<CapacitySnapshot> = serde_json::from_value(body["snapshot"].clone()).ok();
    let shape = snap.as_ref().map(CapacitySnapshot::shape);
    Ok(tuneplane_core::spec::validate(
        spec,
        shape.as_ref(),
        &Defaults::client_side(),
    ))
}

/// The spec's own rules, checked before anything is packed or sent; rules that depend on the
/// server's configuration are the server's to apply ([`Defaults::client_side`]).
pub fn check_locally(
    spec: &str,
) -> Result<tuneplane_core::spec::Validated, tuneplane_core::spec::SpecErrors> {
    tuneplane_core::spec::validate(spec, None, &Defaults::client_side())
}

/// `submit`.
pub async fn submit(api: &Api, out: Output, a: &SubmitArgs) -> anyhow::Result<ExitCode> {
    let spec_path = a
        .spec
        .clone()
        .unwrap_or_else(|| a.source.join("tuneplane.yaml"));
    let spec = std::fs::read_to_string(&spec_path)
        .with_context(|| format!("cannot read the spec {}", spec_path.display()))?;
    // Everything that can be checked here is, before the folder is packed: the key, and the
    // spec's own rules (the API checks the fit to the fleet).
    api.require_key()?;
    if let Err(errors) = check_locally(&spec) {
        bail!(
            "{} is not a valid job spec (nothing was sent):\n{errors}",
            spec_path.display()
        );
    }
    if !a.source.exists() {
        bail!(
            "cannot read the job's code: {} does not exist",
            a.source.display()
        );
    }
    if a.dry_run {
        let checked = match validate_live(api, &spec).await? {
            Ok(v) => v,
            Err(errors) => bail!(
                "{} does not fit the fleet (nothing was sent):\n{errors}",
                spec_path.display()
            ),
        };
        let code = pack::pack_quiet(&a.source)?;
        if out == Output::Json {
            println!(
                "{}",
                json!({"spec": checked.spec, "notes": checked.notes, "code_bytes": code.len()})
            );
        } else {
            println!(
                "dry run: {} ({:?}, {}) is valid{}; code {}; nothing was submitted",
                checked.spec.name,
                checked.spec.kind(),
                pools_of(&checked.spec),
                if checked.notes.is_empty() {
                    " and fits the fleet's live capacity"
                } else {
                    ""
                },
                super::capsule::human_bytes(code.len() as u64)
            );
            for note in &checked.notes {
                println!("note: {note}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let code = pack::pack(&a.source)?;
    let code_field = if code.len() <= INLINE_LIMIT {
        json!({"inline": base64::engine::general_purpose::STANDARD.encode(&code)})
    } else {
        json!({"upload_id": upload(api, code).await?})
    };
    let headers: Vec<(&str, &str)> = a
        .idempotency_key
        .as_deref()
        .map(|k| vec![("idempotency-key", k)])
        .unwrap_or_default();
    let (status, body): (_, Value) = api
        .post(
            "/jobs",
            &json!({"spec": spec, "code": code_field}),
            &headers,
        )
        .await?;
    let job: JobRecord =
        serde_json::from_value(body["job"].clone()).context("unexpected submission answer")?;
    if out == Output::Json {
        println!("{body}");
    } else {
        let what = if status.as_u16() == 201 {
            "submitted"
        } else {
            "already submitted (same idempotency key)"
        };
        println!(
            "{what}: {} ({}) capsule sha256:{}",
            job.id, job.state, job.capsule_sha256
        );
        print_notes(&body);
    }
    if a.wait {
        let follower = (!a.quiet && out == Output::Table).then(|| {
            let args = super::logs::LogsArgs {
                id: String::from(&job.id),
                ..Default::default()
            };
            super::logs::Follower::new(&args, out, true)
        });
        return watch_with_output(api, out, &job.id, None, follower).await;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn upload(api: &Api, code: Vec<u8>) -> anyhow::Result<String> {
    let (_, up): (_, Value) = api.post("/uploads", &json!({}), &[]).await?;
    let url = up["url"].as_str().context("upload answer has no url")?;
    let mut req = api
        .raw(Method::PUT, url)
        .header("content-type", "application/octet-stream");
    for (k, v) in up["headers"].as_object().into_iter().flatten() {
        req = req.header(k.as_str(), v.as_str().unwrap_or_default());
    }
    eprintln!(
        "uploading {} ...",
        super::capsule::human_bytes(code.len() as u64)
    );
    let resp = req.body(code).send().await.context("upload failed")?;
    if !resp.status().is_success() {
        bail!(
            "upload refused ({}): {}",
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
    }
    up["upload_id"]
        .as_str()
        .map(str::to_string)
        .context("upload answer has no upload_id")
}

/// Prints the `notes` of a submission's answer, one `note:` line each.
pub(crate) fn print_notes(body: &Value) {
    for note in body["notes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        println!("note: {note}");
    }
}

/// `jobs [--status S] [--limit N] [--cursor C] [--children]`: an array is one line (its
/// parent, with its children's counts) unless `children` lists its children too.
pub async fn list(
    api: &Api,
    out: Output,
    status: Option<&str>,
    limit: u16,
    cursor: Option<&str>,
    children: bool,
) -> anyhow::Result<ExitCode> {
    let mut path = format!("/jobs?limit={limit}");
    if children {
        path.push_str("&children=true");
    }
    if let Some(s) = status {
        path.push_str(&format!("&status={}", s.to_ascii_uppercase()));
    }
    if let Some(c) = cursor {
        if !c.bytes().all(|b| b.is_ascii_alphanumeric()) {
            bail!(
                "--cursor {c:?} is not a cursor: pass the value a previous `tuneplane jobs` printed after `--cursor`"
            );
        }
        path.push_str(&format!("&cursor={c}"));
    }
    let Some(page) = api.get_or_print(&path, out).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    let rows = rows_of(&page, "jobs", "unexpected job list", |j: &JobRecord| {
        vec![
            String::from(&j.id),
            j.spec.name.clone(),
            match j.array_size() {
                Some(n) if j.is_array_parent() => format!("{:?} array x{n}", j.spec.kind()),
                _ => format!("{:?}", j.spec.kind()),
            },
            pools_of(&j.spec),
            status_of(j),
            age(j.submitted_at_ms),
            duration(j.clock_ms(now_ms())),
        ]
    })?;
    print_table_coloured(
        &[
            "ID",
            "NAME",
            "KIND",
            "POOLS",
            "STATUS",
            "SUBMITTED",
            "DURATION",
        ],
        &rows,
        Some(4),
    );
    if let Some(next) = page["next_cursor"].as_str() {
        println!("(more: tuneplane jobs --cursor {next})");
    }
    Ok(ExitCode::SUCCESS)
}

fn status_of(j: &JobRecord) -> String {
    if let (Some(book), Some(size)) = (j.array_parent(), j.array_size()) {
        return format!("{} ({})", j.state, book.counts.summary(size));
    }
    let base = match (&j.pending, &j.failure) {
        (_, Some(f)) => format!("{} ({:?})", j.state, f.reason),
        // Told to stop for another job: that is what happens to it now.
        (_, None) if j.preempt.is_some() && !j.state.is_terminal() => {
            format!("{} (Preempted: saving and stopping)", j.state)
        }
        (Some(p), None) if !j.state.is_terminal() => format!("{} ({:?})", j.state, p.reason),
        _ => j.state.to_string(),
    };
    match j.preempted_attempts() {
        0 => base,
        1 => format!("{base}, preempted once"),
        n => format!("{base}, preempted {n}x"),
    }
}

/// Lines of a running job's main output `status` shows.
pub const STATUS_LINES: usize = 5;

/// `status ID [--no-wait]`: the job, and a running job's last lines of output, up to now (the
/// API waits a few seconds for them) or, with `no_wait`, as shipped so far.
pub async fn status(api: &Api, out: Output, id: &str, no_wait: bool) -> anyhow::Result<ExitCode> {
    let Some(job) = api.get_or_print(&format!("/jobs/{id}"), out).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    let position = job["queue_position"].as_u64();
    let j: JobRecord = serde_json::from_value(job).context("unexpected job")?;
    println!("job       {} ({})", j.id, j.spec.name);
    println!(
        "status    {}",
        super::output::paint_status(&status_of(&j), super::output::stdout_colour())
    );
    if let Some(line) = attempt_line(&j) {
        println!("attempt   {line}");
    }
    if let Some(p) = position {
        println!("queue     position {p} (1 = next in priority and submission order)");
    }
    println!("kind      {:?}, pools {}", j.spec.kind(), pools_of(&j.spec));
    println!("capsule   sha256:{}", j.capsule_sha256);
    println!(
        "clocks    queued {}, pre-running {}, running {}",
        clock(
            Some(j.submitted_at_ms),
            j.admitted_at_ms.or(j.finished_at_ms)
        ),
        clock(j.admitted_at_ms, j.running_at_ms.or(j.finished_at_ms)),
        clock(j.running_at_ms, j.finished_at_ms)
    );
    if let Some(p) = &j.pending {
        println!("pending   {:?}: {}", p.reason, p.message);
    }
    if let Some(n) = &j.preempt
        && !j.state.is_terminal()
    {
        println!("preempted {}", n.message(j.spec.deadlines.grace_seconds));
    }
    if let Some(f) = &j.failure {
        println!("failure   {:?}: {}", f.reason, f.message);
        for line in failure_lines(f) {
            println!("{line}");
        }
    }
    if let Some(w) = &j.workload_name {
        println!("workload  {}/{w}", j.spec.namespace);
    }
    if j.logs_key.is_some() {
        println!("logs      tuneplane logs {}", j.id);
    }
    for line in attempts_lines(&j, now_ms()) {
        println!("{line}");
    }
    if j.state == JobState::Running && !j.stop_requested {
        last_lines(api, &j.id, no_wait).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `2 of up to 3` (`2` when the spec allows no more), or `None` for a job on its first attempt
/// with nothing earlier (the common case says nothing).
pub fn attempt_line(j: &JobRecord) -> Option<String> {
    j.attempt_label()
}

/// The lines under `failure`: its cause, exit code and Kubernetes evidence.
pub fn failure_lines(f: &Failure) -> Vec<String> {
    let mut lines = vec![format!("cause     {} ({:?})", f.cause.as_str(), f.reason)];
    if let Some(code) = f.exit_code {
        lines.push(format!("exit code {code}"));
    }
    for (i, e) in f.evidence.iter().enumerate() {
        let label = if i == 0 { "evidence" } else { "" };
        lines.push(format!("{label:<9} {e}"));
    }
    lines
}

/// The `attempts` section of `status`: each earlier attempt, oldest first, with how it ended,
/// its cause, when, how long it ran, its message and evidence; empty without earlier attempts.
pub fn attempts_lines(j: &JobRecord, now: i64) -> Vec<String> {
    if j.attempts.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!(
        "attempts  {} earlier (their logs: tuneplane logs {} --attempt N)",
        j.attempts.len(),
        j.id
    )];
    for a in &j.attempts {
        let f = &a.failure;
        let ran = match a.running_at_ms {
            Some(r) => format!("ran {}", duration(a.finished_at_ms - r)),
            None => "never ran".to_owned(),
        };
        lines.push(format!(
            "  #{:<6} {:?} ({}), ended {} ({ran}){}",
            a.number,
            f.reason,
            f.cause.as_str(),
            duration_ago(now, a.finished_at_ms),
            if a.logs_key.is_none() {
                ", no logs archived"
            } else {
                ""
            }
        ));
        if !f.message.is_empty() {
            lines.push(format!("          {}", f.message));
        }
        if let Some(lost) = f.lost_seconds {
            lines.push(format!(
                "          lost at most {} of work (since its newest complete checkpoint when told to stop)",
                duration(i64::try_from(lost.saturating_mul(1000)).unwrap_or(i64::MAX))
            ));
        }
        for e in &f.evidence {
            lines.push(format!("          evidence: {e}"));
        }
    }
    lines
}

/// `3m10s ago` as of `now`.
fn duration_ago(now: i64, at_ms: i64) -> String {
    format!("{} ago", duration(now - at_ms))
}

/// Prints the last [`STATUS_LINES`] lines of a running job's main output.
async fn last_lines(api: &Api, id: &str, no_wait: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let args = super::logs::LogsArgs {
        id: id.to_owned(),
        tail: Some(STATUS_LINES),
        ..Default::default()
    };
    let mut f = super::logs::Follower::new(&args, Output::Table, true).capturing();
    let look = f.look(api, !no_wait).await?;
    if look.archived {
        println!("output    it ended meanwhile: tuneplane logs {id}");
        return Ok(());
    }
    let when = if look.up_to_date {
        "up to now"
    } else {
        "as shipped so far"
    };
    let text = f.take_captured();
    if text.is_empty() {
        println!("output    nothing yet ({when}; tuneplane logs -f {id} follows it)");
        return Ok(());
    }
    let lines = text.lines().count();
    println!("output    last {lines} lines, {when} (tuneplane logs -f {id} follows it):");
    let mut stdout = std::io::stdout().lock();
    for line in text.lines() {
        super::output::written(writeln!(stdout, "  {line}"));
    }
    Ok(())
}

pub use super::output::exit_for;

/// `watch ID`: live state, pending reason and new events until the job ends.
pub async fn watch_job(
    api: &Api,
    out: Output,
    id: &str,
    timeout: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    watch_with_output(api, out, id, timeout, None).await
}

/// [`watch_job`], also printing the job's output through `follower` (`submit --wait`).
pub async fn watch_with_output(
    api: &Api,
    out: Output,
    id: &str,
    timeout: Option<Duration>,
    mut follower: Option<super::logs::Follower>,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let mut seen: HashSet<String> = HashSet::new();
    let mut last = String::new();
    loop {
        let raw: Value = api.get(&format!("/jobs/{id}")).await?;
        let position = raw["queue_position"].as_u64();
        let job: JobRecord = serde_json::from_value(raw).context("unexpected job")?;
        let events: Value = api.get(&format!("/jobs/{id}/events?limit=1000")).await?;
        let events: Vec<JobEvent> =
            serde_json::from_value(events["events"].clone()).unwrap_or_default();
        for e in events.iter().filter(|e| seen.insert(e.key.clone())) {
            if out == Output::Json {
                println!("{}", json!({"event": e}));
            } else {
                println!(
                    "  {} {:<8} {:<22} {}",
                    age(e.at_ms),
                    e.kind,
                    e.reason,
                    e.message
                );
            }
        }
        let mut line = status_of(&job);
        if let Some(p) = position {
            line.push_str(&format!(" #{p} in queue"));
        }
        if line != last {
            if out == Output::Json {
                println!(
                    "{}",
                    json!({"job": job.id, "state": job.state, "pending": job.pending, "failure": job.failure, "queue_position": position})
                );
            } else {
                let why = job
                    .pending
                    .as_ref()
                    .filter(|_| !job.state.is_terminal())
                    .map(|p| format!(": {}", p.message))
                    .unwrap_or_default();
                println!("{} {line}{why}", job.id);
            }
            last = line;
        }
        if let Some(f) = follower.as_mut() {
            if job.state.is_terminal() && job.logs_key.is_some() {
                f.poll(api).await?;
                f.finish(api).await?;
            } else if job.state == JobState::Running {
                f.poll(api).await?;
            }
        }
        if job.state.is_terminal() {
            return Ok(exit_for(job.state));
        }
        if timeout.is_some_and(|t| started.elapsed() > t) {
            bail!(
                "job {id} still {} after {:?}",
                job.state,
                timeout.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `events ID`.
pub async fn events(api: &Api, out: Output, id: &str) -> anyhow::Result<ExitCode> {
    let path = format!("/jobs/{id}/events?limit=1000");
    let Some(page) = api.get_or_print(&path, out).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    let rows = rows_of(&page, "events", "unexpected events", |e: &JobEvent| {
        vec![
            age(e.at_ms),
            format!("{:?}", e.source),
            e.kind.clone(),
            e.reason.clone(),
            e.object.clone().unwrap_or_default(),
            e.message.clone(),
        ]
    })?;
    print_table(
        &["AGE", "SOURCE", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

/// `stop ID`.
pub async fn stop(api: &Api, out: Output, id: &str) -> anyhow::Result<ExitCode> {
    let (status, job): (_, JobRecord) = api
        .post(&format!("/jobs/{id}/stop"), &json!({}), &[])
        .await?;
    if out == Output::Json {
        println!("{}", serde_json::to_string(&job)?);
    } else if status.as_u16() == 202 {
        println!(
            "stop requested for {}; the reconciler ends it as STOPPED",
            job.id
        );
    } else {
        println!(
            "{} is {}{}",
            job.id,
            job.state,
            if job.stop_requested && !job.state.is_terminal() {
                " (stop already requested)"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `capacity`.
pub async fn capacity(api: &Api, out: Output) -> anyhow::Result<ExitCode> {
    let Some(body) = api.get_or_print("/capacity", out).await? else {
        return Ok(ExitCode::SUCCESS);
    };
    if body["snapshot"].is_null() {
        println!(
            "{}",
            body["note"].as_str().unwrap_or("no capacity snapshot yet")
        );
        return Ok(ExitCode::SUCCESS);
    }
    let snap: CapacitySnapshot =
        serde_json::from_value(body["snapshot"].clone()).context("unexpected capacity snapshot")?;
    print_capacity(&snap);
    Ok(ExitCode::SUCCESS)
}

/// Prints the per-series and per-node tables of a snapshot.
pub fn print_capacity(snap: &CapacitySnapshot) {
    println!("capacity snapshot taken {}", age(snap.taken_at_ms as i64));
    let rows: Vec<Vec<String>> = snap
        .series
        .iter()
        .map(|(name, s)| {
            vec![
                name.clone(),
                s.nodes.to_string(),
                s.total_gpus.to_string(),
                s.used_gpus.to_string(),
                s.free_gpus.to_string(),
                s.blocked_gpus.to_string(),
                s.largest_free_block.to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "SERIES",
            "NODES",
            "GPUS",
            "USED",
            "FREE",
            "BLOCKED",
            "LARGEST FREE BLOCK",
        ],
        &rows,
    );
    println!();
    let rows: Vec<Vec<String>> = snap
        .nodes
        .iter()
        .map(|n| {
            let state = match (n.cordoned, n.ready) {
                (true, _) => "cordoned",
                (false, false) => "NotReady",
                _ => "ready",
            };
            vec![
                n.name.clone(),
                n.series.clone().unwrap_or_else(|| "-".into()),
                format!("{}/{}", n.gpus_used, n.gpus),
                format!("{:.1}/{:.0}", n.cpus_used, n.cpus),
                format!("{:.0}/{:.0}", n.memory_gb_used, n.memory_gb),
                state.into(),
            ]
        })
        .collect();
    print_table(
        &[
            "NODE",
            "SERIES",
            "GPUS USED",
            "CPUS USED",
            "MEMORY GiB USED",
            "STATE",
        ],
        &rows,
    );
    let c = &snap.cpu;
    println!();
    println!(
        "CPU-only jobs may use {:.1} free CPUs and {:.0} GiB (at most {:.1} CPUs / {:.0} GiB on one node); \
         on GPU nodes each free GPU keeps {} CPUs and {} GiB for GPU jobs",
        c.free_cpus,
        c.free_memory_gb,
        c.largest_free_cpus,
        c.largest_free_memory_gb,
        snap.gpu_share.cpus,
        snap.gpu_share.memory_gb
    );
}

/// Client commands share their connection flags.
pub fn api(args: &ClientArgs) -> anyhow::Result<Api> {
    Api::new(args)
}

#[cfg(test)]
mod tests {
    use tuneplane_core::job::{Attempt, FailureReason};

    use super::*;

    fn job(retries: &str) -> JobRecord {
        let spec = format!(
            "name: r\nimage: python:3.12-slim\nentrypoint: python3 a.py\nretries: {retries}\n\
             pools:\n  - {{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}}\n"
        );
        let v = tuneplane_core::spec::validate(&spec, None, &Default::default()).unwrap();
        JobRecord::new_queued(
            "j1".parse().unwrap(),
            "acme".parse().unwrap(),
            v.spec,
            "00",
            0,
        )
    }

    fn lost(number: u32, evidence: &[&str]) -> Attempt {
        let mut failure = Failure::new(FailureReason::NodeLost, "node h200-1 was deleted");
        failure.evidence = evidence.iter().map(|e| e.to_string()).collect();
        Attempt {
            number,
            admitted_at_ms: Some(1_000),
            running_at_ms: Some(2_000),
            finished_at_ms: 62_000,
            workload_name: Some(format!("tp-j1-{number}")),
            logs_key: Some(format!("logs/j1/{number}.tar.gz")),
            placements: Vec::new(),
            failure,
        }
    }

    #[test]
    fn a_first_attempt_says_nothing_a_later_one_its_number_and_bound() {
        let mut j = job("{infrastructure: 2, application: 1}");
        assert_eq!(attempt_line(&j), None);
        assert!(attempts_lines(&j, 0).is_empty());
        j.attempts.push(lost(1, &["node/h200-1: deleted"]));
        j.attempt = 2;
        assert_eq!(attempt_line(&j).as_deref(), Some("2 of up to 4"));
        let mut none = job("{infrastructure: 0, application: 0}");
        none.attempt = 2;
        none.attempts.push(lost(1, &[]));
        assert_eq!(attempt_line(&none).as_deref(), Some("2"));
    }

    /// A loopback callback is the server's to judge (`tuneplane dev` allows it); the spec's own
    /// rules are still checked before anything is sent.
    #[test]
    fn the_local_check_leaves_server_rules_to_the_server() {
        let spec = "name: t\nplugin: custom/custom\nimage: python:3.12-slim\nentrypoint: python3 x.py\n\
                    pools:\n  - {name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}\n\
                    notify:\n  - {url: 'http://127.0.0.1:9000/hook', events: [terminal]}\n";
        check_locally(spec).expect("loopback callbacks are the server's to refuse");
        let strict = tuneplane_core::spec::validate(spec, None, &Default::default()).unwrap_err();
        assert!(strict.to_string().contains("loopback"), "{strict}");
        let bad = spec.replace("cpus: 1,", "cpus: -1,");
        assert!(check_locally(&bad).is_err());
    }

    #[test]
    fn a_preempted_attempt_uses_no_retry_and_says_what_it_lost() {
        let mut j = job("{infrastructure: 0, application: 0}");
        let mut first = lost(1, &[]);
        first.failure = Failure::new(FailureReason::Preempted, "preempted by quota reclaim: ...");
        first.failure.lost_seconds = Some(65);
        j.attempts.push(first);
        j.attempt = 2;
        j.state = JobState::Queued;
        assert_eq!(attempt_line(&j).as_deref(), Some("2 of up to 2"));
        let lines = attempts_lines(&j, 122_000);
        assert_eq!(
            lines[1],
            "  #1      Preempted (preempted), ended 1m00s ago (ran 1m00s)"
        );
        assert_eq!(
            lines[3],
            "          lost at most 1m05s of work (since its newest complete checkpoint when told to stop)"
        );
        assert_eq!(status_of(&j), "QUEUED, preempted once");
        j.attempts.push(j.attempts[0].clone());
        j.pending = Some(tuneplane_core::job::Pending {
            reason: tuneplane_core::job::PendingReason::InsufficientGpu,
            message: String::new(),
            since_ms: 0,
        });
        assert_eq!(status_of(&j), "QUEUED (InsufficientGpu), preempted 2x");
    }

    #[test]
    fn failures_and_earlier_attempts_show_cause_and_evidence() {
        let mut f = Failure::new(FailureReason::Evicted, "evicted");
        f.evidence = vec!["pod/p: DisruptionTarget".into(), "node/n: NotReady".into()];
        f.exit_code = Some(137);
        assert_eq!(
            failure_lines(&f),
            [
                "cause     infrastructure (Evicted)",
                "exit code 137",
                "evidence  pod/p: DisruptionTarget",
                "          node/n: NotReady",
            ]
        );
        let mut j = job("{infrastructure: 2, application: 0}");
        j.attempts.push(lost(1, &["node/h200-1: deleted"]));
        let mut second = lost(2, &[]);
        second.running_at_ms = None;
        second.logs_key = None;
        j.attempts.push(second);
        j.attempt = 3;
        let lines = attempts_lines(&j, 122_000);
        assert_eq!(
            lines[0],
            "attempts  2 earlier (their logs: tuneplane logs j1 --attempt N)"
        );
        assert_eq!(
            lines[1],
            "  #1      NodeLost (infrastructure), ended 1m00s ago (ran 1m00s)"
        );
        assert_eq!(lines[2], "          node h200-1 was deleted");
        assert_eq!(lines[3], "          evidence: node/h200-1: deleted");
        assert_eq!(
            lines[4],
            "  #2      NodeLost (infrastructure), ended 1m00s ago (never ran), no logs archived"
        );
    }
}
