//! `logs`: a job's output, while it runs (the live segments the reconciler ships) and after it
//! ended (the archive), for every pod and container or the ones asked for.
//!
//! A plain look at a running job asks the API for the output up to now: the API marks the job
//! wanted and waits a few seconds for the reconciler's read that answers it (`--no-wait`: what
//! was shipped so far, at once). Every container's output is counted in bytes as it is printed;
//! the archive continues each container at the byte where its live output stopped, so a
//! followed job's output is printed whole, in order, each line once.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::{Value, json};
use tuneplane_core::job::{JobRecord, JobState};

use super::output::exit_for;
use super::output::written;
use crate::client::{Api, Output};

/// How often a follower asks for new output (each ask keeps its mark of interest alive).
const POLL: Duration = Duration::from_secs(2);

/// Arguments of `logs`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LogsArgs {
    /// Job id.
    pub id: String,
    /// Keep printing new output until the job ends, then the rest from the archive.
    #[arg(long, short)]
    pub follow: bool,
    /// Only the last N lines of each container (of what there is when the command starts).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Only this pod's output.
    #[arg(long)]
    pub pod: Option<String>,
    /// Only this container's output.
    #[arg(long)]
    pub container: Option<String>,
    /// A running job's output shipped so far, at once (by default the API waits a few seconds
    /// for the output up to now).
    #[arg(long, conflicts_with = "follow")]
    pub no_wait: bool,
    /// An earlier attempt's archived logs (a job the platform ran again after a failure; `tuneplane
    /// status` lists its attempts). Default: the current attempt.
    #[arg(long, value_name = "N", conflicts_with_all = ["follow", "no_wait"], value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: Option<u32>,
    /// For an array job: the output of its child with this index (0-based).
    #[arg(long, value_name = "I")]
    pub index: Option<u32>,
}

/// How one ask for a running job's output went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Look {
    /// The answer holds the output up to the ask (a read of the job answered it).
    pub up_to_date: bool,
    /// The job's state then.
    pub state: String,
    /// Its archive is written (it ended).
    pub archived: bool,
}

/// `value` when it can go into a query string as it is (pod and container names can).
fn query_safe(value: &str) -> Option<&str> {
    value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        .then_some(value)
}

/// Prints a job's output as it arrives: live segments, then the archive's remainder.
pub struct Follower {
    id: String,
    pod: Option<String>,
    container: Option<String>,
    tail: Option<usize>,
    /// Only the main output (the CPU pod's or the RayJob submitter's).
    main_only: bool,
    json: bool,
    after: u64,
    printed: HashMap<(String, String), u64>,
    current: Option<(String, String)>,
    /// Output kept here instead of printed ([`Follower::capturing`]).
    captured: Option<String>,
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    match body.rmatch_indices('\n').nth(n - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

impl Follower {
    /// A follower of `args.id`.
    pub fn new(args: &LogsArgs, out: Output, main_only: bool) -> Follower {
        Follower {
            id: args.id.clone(),
            pod: args.pod.clone(),
            container: args.container.clone(),
            tail: args.tail,
            main_only,
            json: out == Output::Json,
            after: 0,
            printed: HashMap::new(),
            current: None,
            captured: None,
        }
    }

    /// The same follower keeping its output for [`Follower::take_captured`] instead of
    /// printing it.
    pub fn capturing(mut self) -> Follower {
        self.captured = Some(String::new());
        self
    }

    /// The output kept so far (emptied).
    pub fn take_captured(&mut self) -> String {
        self.captured
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn wanted(&self, pod: &str, container: &str) -> bool {
        self.pod.as_deref().is_none_or(|p| p == pod)
            && self.container.as_deref().is_none_or(|c| c == container)
    }

    /// Prints the part of `text` (bytes `offset..`) of `pod`/`container` not printed yet.
    fn emit(&mut self, pod: &str, container: &str, offset: u64, text: &str) {
        let key = (pod.to_owned(), container.to_owned());
        let done = self.printed.get(&key).copied();
        let start = usize::try_from(done.unwrap_or(0).saturating_sub(offset)).unwrap_or(usize::MAX);
        let Some(mut new) = text.get(start..).filter(|t| !t.is_empty()) else {
            return;
        };
        self.printed.insert(key.clone(), offset + text.len() as u64);
        if done.is_none()
            && let Some(n) = self.tail
        {
            // --tail applies to what there is the first time a container is seen.
            new = last_lines(new, n);
        }
        if let Some(kept) = self.captured.as_mut() {
            kept.push_str(new);
            self.current = Some(key);
            return;
        }
        let mut stdout = std::io::stdout().lock();
        if self.json {
            written(writeln!(
                stdout,
                "{}",
                json!({"pod": pod, "container": container, "text": new})
            ));
        } else {
            if self.current.as_ref() != Some(&key) && !self.main_only {
                written(writeln!(stdout, "==> {pod}/{container} <=="));
            }
            written(stdout.write_all(new.as_bytes()));
        }
        written(stdout.flush());
        self.current = Some(key);
    }

    /// Prints new live output, keeping the job marked followed (so the reconciler ships it
    /// every few seconds).
    pub async fn poll(&mut self, api: &Api) -> anyhow::Result<()> {
        self.pages(api, "follow=true", "follow=true").await?;
        Ok(())
    }

    /// A one-off look: prints the output up to now, which the API waits a few seconds for
    /// (`wait`), or what was shipped so far (`!wait`).
    pub async fn look(&mut self, api: &Api, wait: bool) -> anyhow::Result<Look> {
        let first = if wait { "wait=true" } else { "wait=false" };
        let page = self.pages(api, first, "wait=false").await?;
        Ok(Look {
            up_to_date: page["up_to_date"] == Value::Bool(true),
            state: page["state"].as_str().unwrap_or_default().to_owned(),
            archived: page["archived"] == Value::Bool(true),
        })
    }

    /// Asks for the live segments after the last one printed (`first` in the first ask's query,
    /// `next` in the asks for more) and prints them; returns the first answer.
    async fn pages(&mut self, api: &Api, first: &str, next: &str) -> anyhow::Result<Value> {
        let mut answer = Value::Null;
        // Bounded: a long backlog continues at the next poll.
        for round in 0..64 {
            let mut path = format!(
                "/jobs/{}/logs/live?after={}&{}",
                self.id,
                self.after,
                if round == 0 { first } else { next }
            );
            if self.main_only {
                path.push_str("&main=true");
            }
            if let Some(p) = self.pod.as_deref().and_then(query_safe) {
                path.push_str(&format!("&pod={p}"));
            }
            if let Some(c) = self.container.as_deref().and_then(query_safe) {
                path.push_str(&format!("&container={c}"));
            }
            if let Some(n) = self
                .tail
                .filter(|_| self.printed.is_empty() && self.after == 0)
            {
                // Nothing printed yet: the API sends only each container's last lines.
                path.push_str(&format!("&tail={n}"));
            }
            let page: Value = api.get(&path).await?;
            for seg in page["segments"].as_array().into_iter().flatten() {
                let (Some(pod), Some(container)) = (seg["pod"].as_str(), seg["container"].as_str())
                else {
                    continue;
                };
                if self.wanted(pod, container) {
                    let offset = seg["offset"].as_u64().unwrap_or(0);
                    self.emit(
                        pod,
                        container,
                        offset,
                        seg["text"].as_str().unwrap_or_default(),
                    );
                }
            }
            self.after = page["last_seq"].as_u64().unwrap_or(self.after);
            let more = page["more"] == Value::Bool(true);
            if round == 0 {
                answer = page;
            }
            if !more {
                break;
            }
        }
        Ok(answer)
    }

    /// Prints what the archive holds beyond what was printed, and per-container problems.
    pub async fn finish(&mut self, api: &Api) -> anyhow::Result<()> {
        let files = download_archive(api, &self.id, None).await?;
        let cut = truncated_logs(&files);
        for (name, text) in &files {
            if name == "index.json" {
                continue;
            }
            let Some((pod, file)) = name.split_once('/') else {
                continue;
            };
            let container = file.strip_suffix(".log").unwrap_or(file);
            if !self.wanted(pod, container) || (self.main_only && !self.main_seen(pod, container)) {
                continue;
            }
            let truncated = cut
                .get(&(pod.to_owned(), container.to_owned()))
                .copied()
                .unwrap_or(0);
            self.emit_archived(pod, container, text, truncated);
        }
        if !self.main_only {
            report_unreadable(&files, |p, c| self.wanted(p, c));
        }
        Ok(())
    }

    /// Prints the archived log `text` of `pod`/`container` beyond what was printed. A log the
    /// archive cut (`truncated` leading bytes left out, the job's archive cap) holds a marker
    /// line and then the log from byte `truncated` on: output from there is continued at its
    /// byte; when what was printed stops before it, the marker says that output is missing
    /// (unless nothing was printed yet and only the last lines are asked for).
    fn emit_archived(&mut self, pod: &str, container: &str, text: &str, truncated: u64) {
        if truncated == 0 {
            self.emit(pod, container, 0, text);
            return;
        }
        let (marker, rest) = match text.find('\n') {
            Some(i) => text.split_at(i + 1),
            None => (text, ""),
        };
        let key = (pod.to_owned(), container.to_owned());
        let done = self.printed.get(&key).copied();
        if done.unwrap_or(0) < truncated && !(done.is_none() && self.tail.is_some()) {
            let at = done.unwrap_or(0);
            self.emit(pod, container, at, marker);
            self.printed.insert(key, truncated);
        }
        self.emit(pod, container, truncated, rest);
    }

    /// Whether `pod`/`container` is main output: seen as such live, or (never shipped live) the
    /// only container of a CPU job's pod, which the archive cannot tell; in doubt, printed.
    fn main_seen(&self, pod: &str, container: &str) -> bool {
        self.printed.is_empty()
            || self
                .printed
                .contains_key(&(pod.to_owned(), container.to_owned()))
    }
}

/// Downloads and unpacks a job's archive: its current attempt's, or `attempt`'s.
async fn download_archive(
    api: &Api,
    id: &str,
    attempt: Option<u32>,
) -> anyhow::Result<Vec<(String, String)>> {
    let query = attempt.map(|n| format!("?attempt={n}")).unwrap_or_default();
    let link: Value = api.get(&format!("/jobs/{id}/logs{query}")).await?;
    let url = link["url"].as_str().context("logs answer has no url")?;
    let resp = api
        .raw(Method::GET, url)
        .send()
        .await
        .context("cannot download the logs")?;
    if !resp.status().is_success() {
        bail!("cannot download the logs: {}", resp.status());
    }
    read_logs_archive(&resp.bytes().await?)
}

/// The logs an archive's `index.json` says were cut: (pod, container) → leading bytes left out.
fn truncated_logs(files: &[(String, String)]) -> HashMap<(String, String), u64> {
    let Some((_, index)) = files.iter().find(|(n, _)| n == "index.json") else {
        return HashMap::new();
    };
    let index: Value = serde_json::from_str(index).unwrap_or_default();
    index["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let cut = e["truncated_bytes"].as_u64().filter(|&n| n > 0)?;
            let key = (
                e["pod"].as_str()?.to_owned(),
                e["container"].as_str()?.to_owned(),
            );
            Some((key, cut))
        })
        .collect()
}

/// Prints to stderr, in plain words, each container whose log could not be read.
fn report_unreadable(files: &[(String, String)], wanted: impl Fn(&str, &str) -> bool) {
    let Some((_, index)) = files.iter().find(|(n, _)| n == "index.json") else {
        return;
    };
    let index: Value = serde_json::from_str(index).unwrap_or_default();
    for e in index["entries"].as_array().into_iter().flatten() {
        let (Some(pod), Some(container), Some(error)) = (
            e["pod"].as_str(),
            e["container"].as_str(),
            e["error"].as_str(),
        ) else {
            continue;
        };
        if wanted(pod, container) {
            eprintln!("{pod}/{container}: no output kept: {}", plain_error(error));
        }
    }
}

/// An archive's reason for a missing log, without the API server's status wording.
fn plain_error(error: &str) -> String {
    let text = match error.strip_prefix("the API server answered ") {
        // "400 BadRequest: container ..." -> "container ..."
        Some(rest) => rest.split_once(": ").map_or(rest, |(_, m)| m),
        None => error,
    };
    text.trim_end().to_owned()
}

/// `logs ID [--follow] [--tail N] [--pod P] [--container C] [--attempt N]`.
pub async fn logs(api: &Api, out: Output, a: &LogsArgs) -> anyhow::Result<ExitCode> {
    if let Some(index) = a.index {
        let child = LogsArgs {
            id: tuneplane_core::array::child_id(&a.id, index),
            index: None,
            ..a.clone()
        };
        return Box::pin(logs(api, out, &child)).await;
    }
    if a.attempt.is_some() {
        // An attempt's archive, whatever the job does now (the API says when there is none).
        return print_archive(api, out, a).await;
    }
    let job: JobRecord = api.get(&format!("/jobs/{}", a.id)).await?;
    if let (true, Some(size)) = (job.is_array_parent(), job.array_size()) {
        bail!(
            "job {} is an array of {size} children and has no output of its own: tuneplane logs {} --index I (0 to {})",
            a.id,
            a.id,
            size - 1
        );
    }
    if job.logs_key.is_some() && !a.follow {
        return print_archive(api, out, a).await;
    }
    let mut f = Follower::new(a, out, false);
    if !job.state.is_terminal() {
        if !a.follow {
            let look = f.look(api, !a.no_wait).await?;
            if look.archived {
                // It ended while the API waited: the rest is in the archive.
                f.finish(api).await?;
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!("{}", look_note(&a.id, &look, !a.no_wait));
            return Ok(ExitCode::SUCCESS);
        }
        loop {
            f.poll(api).await?;
            let now: JobRecord = api.get(&format!("/jobs/{}", a.id)).await?;
            if now.state.is_terminal() && now.logs_key.is_some() {
                f.poll(api).await?;
                f.finish(api).await?;
                return Ok(exit_for(now.state));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    // Terminal but its archive is not written yet (a moment at the end): wait for it.
    for _ in 0..60 {
        let now: JobRecord = api.get(&format!("/jobs/{}", a.id)).await?;
        if now.logs_key.is_some() {
            f.finish(api).await?;
            return Ok(exit_for(now.state));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    bail!(
        "job {} ended but its logs were not archived within a minute",
        a.id
    )
}

/// What a one-off look at job `id` printed, for stderr.
pub fn look_note(id: &str, look: &Look, waited: bool) -> String {
    if look.up_to_date {
        format!(
            "job {id} is {}: this is its output up to now (to keep printing it as it comes: tuneplane logs -f {id})",
            look.state
        )
    } else if waited && look.state == "RUNNING" {
        format!(
            "job {id} is RUNNING: this is the output shipped so far; its newer output was not \
             shipped within a few seconds (tuneplane logs -f {id} prints it as it comes)"
        )
    } else if look.state == "RUNNING" {
        format!(
            "job {id} is RUNNING: this is the output shipped so far (without --no-wait, the output \
             up to now; tuneplane logs -f {id} prints it as it comes)"
        )
    } else if JobState::parse(&look.state).is_some_and(JobState::is_terminal) {
        format!(
            "job {id} is {}: its logs are being archived (tuneplane logs {id} prints them in a moment)",
            look.state
        )
    } else {
        format!(
            "job {id} is {}: it prints nothing before it runs (tuneplane logs -f {id} waits for its output)",
            look.state
        )
    }
}

/// The archive of an ended job: each container (filtered, `--tail`), `index.json` only as JSON.
async fn print_archive(api: &Api, out: Output, a: &LogsArgs) -> anyhow::Result<ExitCode> {
    let files = download_archive(api, &a.id, a.attempt).await?;
    let wanted = |pod: &str, container: &str| {
        a.pod.as_deref().is_none_or(|p| p == pod)
            && a.container.as_deref().is_none_or(|c| c == container)
    };
    let split = |name: &str| -> Option<(String, String)> {
        let (pod, file) = name.split_once('/')?;
        Some((
            pod.to_owned(),
            file.strip_suffix(".log").unwrap_or(file).to_owned(),
        ))
    };
    let tail = |text: &str| a.tail.map_or(text, |n| last_lines(text, n)).to_owned();
    if out == Output::Json {
        let map: serde_json::Map<String, Value> = files
            .iter()
            .filter(|(name, _)| {
                name == "index.json" || split(name).is_some_and(|(p, c)| wanted(&p, &c))
            })
            .map(|(k, v)| {
                let v = if k == "index.json" {
                    v.clone()
                } else {
                    tail(v)
                };
                (k.clone(), Value::String(v))
            })
            .collect();
        println!("{}", Value::Object(map));
        return Ok(ExitCode::SUCCESS);
    }
    let mut stdout = std::io::stdout().lock();
    for (name, text) in &files {
        let Some((pod, container)) = split(name) else {
            continue;
        };
        if !wanted(&pod, &container) {
            continue;
        }
        written(writeln!(stdout, "==> {pod}/{container} <=="));
        let text = tail(text);
        written(stdout.write_all(text.as_bytes()));
        if !text.is_empty() && !text.ends_with('\n') {
            written(writeln!(stdout));
        }
    }
    drop(stdout);
    report_unreadable(&files, wanted);
    Ok(ExitCode::SUCCESS)
}

/// Every file of a `logs.tar.gz`, in archive order.
pub fn read_logs_archive(bytes: &[u8]) -> anyhow::Result<Vec<(String, String)>> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut files = Vec::new();
    for entry in archive
        .entries()
        .context("the logs archive is not a tar.gz")?
    {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry.path()?.to_string_lossy().into_owned();
        let mut text = String::new();
        entry.by_ref().take(64 << 20).read_to_string(&mut text).ok();
        files.push((name, text));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_and_plain_errors() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb", 5), "a\nb");
        assert_eq!(last_lines("a\n", 0), "");
        assert_eq!(
            plain_error(
                "the API server answered 400 BadRequest: container \"main\" in pod \"p\" is waiting to start: image can't be pulled\n"
            ),
            "container \"main\" in pod \"p\" is waiting to start: image can't be pulled"
        );
    }

    #[test]
    fn a_look_says_how_current_its_output_is() {
        let look = |up_to_date: bool, state: &str| Look {
            up_to_date,
            state: state.into(),
            archived: false,
        };
        assert!(look_note("j", &look(true, "RUNNING"), true).contains("up to now"));
        let late = look_note("j", &look(false, "RUNNING"), true);
        assert!(late.contains("shipped so far") && late.contains("not shipped within"));
        let instant = look_note("j", &look(false, "RUNNING"), false);
        assert!(instant.contains("shipped so far") && instant.contains("--no-wait"));
        assert!(look_note("j", &look(false, "QUEUED"), true).contains("nothing before it runs"));
        assert!(look_note("j", &look(false, "STOPPED"), true).contains("being archived"));
        assert_eq!(query_safe("tp-j-1.main_0"), Some("tp-j-1.main_0"));
        assert_eq!(query_safe("a&after=9"), None);
    }

    #[test]
    fn output_continues_at_the_byte_where_it_stopped() {
        let args = LogsArgs {
            id: "j".into(),
            ..LogsArgs::default()
        };
        let mut f = Follower::new(&args, Output::Table, true);
        f.emit("p", "main", 0, "one\n");
        f.emit("p", "main", 4, "two\n");
        // The archive from byte 0: only the rest is new.
        f.emit("p", "main", 0, "one\ntwo\nthree\n");
        assert_eq!(f.printed.get(&("p".into(), "main".into())), Some(&14));
        // Nothing new: nothing changes.
        f.emit("p", "main", 0, "one\ntwo\nthree\n");
        assert_eq!(f.printed.get(&("p".into(), "main".into())), Some(&14));
    }

    #[test]
    fn a_cut_archived_log_continues_at_its_byte_and_says_when_output_is_missing() {
        let args = LogsArgs {
            id: "j".into(),
            ..LogsArgs::default()
        };
        let marker = "[tuneplane: the first 8 of this log's 18 bytes were left out ...]\n";
        let archived = format!("{marker}four\nfive\n");
        let index = r#"{"entries": [{"pod": "p", "container": "main", "truncated_bytes": 8},
            {"pod": "p", "container": "init", "truncated_bytes": 0}]}"#;
        let files = vec![("index.json".to_owned(), index.to_owned())];
        let cut = truncated_logs(&files);
        assert_eq!(cut.get(&("p".into(), "main".into())), Some(&8));
        assert_eq!(cut.len(), 1);

        // Printed live up to byte 4 (of "one\ntwo\nthree\n"...): bytes 4..8 are gone, the
        // marker says so, then the archive's end.
        let mut f = Follower::new(&args, Output::Table, true).capturing();
        f.emit("p", "main", 0, "one\n");
        f.emit_archived("p", "main", &archived, 8);
        assert_eq!(f.take_captured(), format!("one\n{marker}four\nfive\n"));
        assert_eq!(f.printed.get(&("p".into(), "main".into())), Some(&18));

        // Printed live past the cut: only what follows, no marker.
        let mut f = Follower::new(&args, Output::Table, true).capturing();
        f.emit("p", "main", 0, "one\ntwo\nfour\n");
        f.emit_archived("p", "main", &archived, 8);
        assert_eq!(f.take_captured(), "one\ntwo\nfour\nfive\n");

        // Nothing printed, whole output asked: the marker, then the end.
        let mut f = Follower::new(&args, Output::Table, true).capturing();
        f.emit_archived("p", "main", &archived, 8);
        assert_eq!(f.take_captured(), archived);

        // Nothing printed, only the last line asked: just that line.
        let tail = LogsArgs {
            tail: Some(1),
            ..args.clone()
        };
        let mut f = Follower::new(&tail, Output::Table, true).capturing();
        f.emit_archived("p", "main", &archived, 8);
        assert_eq!(f.take_captured(), "five\n");
    }
}
