//! `outputs`: what a job left in `TUNEPLANE_OUTPUT_DIR` (its outputs) and its complete
//! checkpoints, and downloading outputs through their presigned links.
//!
//! `--get PATH` picks outputs by one rule: PATH is an output's path as listed (that file), a
//! folder (`model` or `model/`: every output under it), or `.` (every output). Each file is
//! written under `--dir` (default: the current folder) at its listed path, through a temporary
//! file renamed into place once complete, so an interrupted download leaves no partial file
//! under the output's name. A path that would leave `--dir` (absolute, `..`, or through a
//! symbolic link) is refused, whatever the API sent.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::capsule::human_bytes;
use super::output::{age, print_table};
use crate::client::{Api, Output};

/// Longest a download may go without receiving a byte before it is given up.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest one file's download may take in all (a large model over a slow link).
const FILE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Outputs named in the error when `--get` matches none.
const LISTED_IN_ERROR: usize = 20;

/// Arguments of `outputs`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct OutputsArgs {
    /// Job id.
    pub id: String,
    /// Download outputs instead of listing them: an output's path as listed (that file), a
    /// folder (`model` or `model/`: every output under it), or `.` (every output).
    #[arg(long, value_name = "PATH")]
    pub get: Option<String>,
    /// With --get: the folder the files go to, each at its listed path (created if missing);
    /// nothing is written outside it (a path through `..` or a symbolic link is refused). Each
    /// file is named on stderr with its size once downloaded.
    #[arg(long, value_name = "DIR", default_value = ".", requires = "get")]
    pub dir: PathBuf,
    /// Checkpoints instead of outputs: alone, list the complete checkpoints; with `--get NAME`
    /// (a name as listed, or `latest`), download that checkpoint's files into DIR/NAME/.
    #[arg(long)]
    pub checkpoints: bool,
}

/// One output as `GET /v1/jobs/{id}/outputs` lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct OutputFile {
    /// Relative to the job's outputs folder.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Presigned download link.
    pub url: String,
}

/// One complete checkpoint as `GET /v1/jobs/{id}/outputs` lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckpointRow {
    /// Its folder's name.
    pub name: String,
    /// The attempt that wrote it.
    pub attempt: u32,
    /// When it was recorded complete (Unix ms).
    pub completed_at_ms: i64,
    /// Number of files.
    pub files: u64,
    /// Bytes in all its files.
    pub bytes: u64,
}

/// `outputs ID [--get PATH [--dir DIR]]`.
pub async fn outputs(api: &Api, out: Output, a: &OutputsArgs) -> anyhow::Result<ExitCode> {
    if a.checkpoints {
        return checkpoints(api, out, a).await;
    }
    let path = format!("/jobs/{}/outputs", a.id);
    let Some(want) = &a.get else {
        let Some(body) = api.get_or_print(&path, out).await? else {
            return Ok(ExitCode::SUCCESS);
        };
        print_listing(&a.id, &body)?;
        return Ok(ExitCode::SUCCESS);
    };
    let body: Value = api.get(&path).await?;
    let files: Vec<OutputFile> =
        serde_json::from_value(body["outputs"].clone()).context("unexpected outputs answer")?;
    let state = body["state"].as_str().unwrap_or_default();
    let picked =
        select(&files, want).map_err(|e| anyhow::anyhow!(no_match(&a.id, state, &files, &e)))?;
    std::fs::create_dir_all(&a.dir)
        .with_context(|| format!("cannot create the folder {}", a.dir.display()))?;
    let mut done = Vec::with_capacity(picked.len());
    let mut total = 0u64;
    for f in picked {
        let target = target_in(&a.dir, &f.path)?;
        let bytes = download(api, f, &target).await?;
        total += bytes;
        eprintln!("{}  {}", f.path, human_bytes(bytes));
        done.push(json!({"path": f.path, "size": bytes, "file": target.display().to_string()}));
    }
    if out == Output::Json {
        println!("{}", json!({"job_id": a.id, "downloaded": done}));
    } else {
        println!(
            "{} {} ({}) into {}",
            done.len(),
            if done.len() == 1 { "file" } else { "files" },
            human_bytes(total),
            a.dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `outputs ID --checkpoints [--get NAME|latest [--dir DIR]]`: lists the complete checkpoints,
/// or downloads one into DIR/NAME/ (the same safe writes as outputs).
async fn checkpoints(api: &Api, out: Output, a: &OutputsArgs) -> anyhow::Result<ExitCode> {
    let Some(want) = &a.get else {
        let path = format!("/jobs/{}/outputs", a.id);
        let Some(body) = api.get_or_print(&path, out).await? else {
            return Ok(ExitCode::SUCCESS);
        };
        let rows: Vec<CheckpointRow> = serde_json::from_value(body["checkpoints"].clone())
            .context("unexpected outputs answer")?;
        print_checkpoints(&a.id, &rows);
        return Ok(ExitCode::SUCCESS);
    };
    let query = if want == "latest" {
        String::new()
    } else {
        tuneplane_core::grant::check_checkpoint_name(want)
            .map_err(|e| anyhow::anyhow!("--get {want:?}: {e}"))?;
        format!("?name={}", query_escaped(want))
    };
    let body: Value = api
        .get(&format!("/jobs/{}/checkpoint{query}", a.id))
        .await?;
    let name = body["name"]
        .as_str()
        .context("unexpected checkpoint answer")?
        .to_owned();
    let files: Vec<OutputFile> =
        serde_json::from_value(body["files"].clone()).context("unexpected checkpoint answer")?;
    let dir = a.dir.join(&name);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    let mut done = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for f in &files {
        let target = target_in(&dir, &f.path)?;
        let bytes = download(api, f, &target).await?;
        total += bytes;
        eprintln!("{name}/{}  {}", f.path, human_bytes(bytes));
        done.push(json!({"path": f.path, "size": bytes, "file": target.display().to_string()}));
    }
    if out == Output::Json {
        println!(
            "{}",
            json!({"job_id": a.id, "checkpoint": name, "downloaded": done})
        );
    } else {
        println!(
            "checkpoint {name}: {} {} ({}) into {}",
            done.len(),
            if done.len() == 1 { "file" } else { "files" },
            human_bytes(total),
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `text` for a query string: every byte but unreserved characters percent-encoded.
fn query_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The checkpoints table (or why there is none).
fn print_checkpoints(id: &str, checkpoints: &[CheckpointRow]) {
    if checkpoints.is_empty() {
        println!("no complete checkpoints");
        return;
    }
    let rows: Vec<Vec<String>> = checkpoints
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.attempt.to_string(),
                age(c.completed_at_ms),
                c.files.to_string(),
                human_bytes(c.bytes),
            ]
        })
        .collect();
    print_table(
        &["CHECKPOINT", "ATTEMPT", "COMPLETED", "FILES", "SIZE"],
        &rows,
    );
    println!(
        "(download: tuneplane outputs {id} --checkpoints --get NAME, or latest; a new attempt resumes from the newest)"
    );
}

/// Prints the outputs and checkpoints tables of an outputs answer.
fn print_listing(id: &str, body: &Value) -> anyhow::Result<()> {
    let files: Vec<OutputFile> =
        serde_json::from_value(body["outputs"].clone()).context("unexpected outputs answer")?;
    let checkpoints: Vec<CheckpointRow> =
        serde_json::from_value(body["checkpoints"].clone()).context("unexpected outputs answer")?;
    let state = body["state"].as_str().unwrap_or_default();
    if files.is_empty() {
        println!("{}", no_outputs(id, state));
    } else {
        let rows: Vec<Vec<String>> = files
            .iter()
            .map(|f| vec![f.path.clone(), human_bytes(f.size)])
            .collect();
        print_table(&["PATH", "SIZE"], &rows);
        let total: u64 = files.iter().map(|f| f.size).sum();
        println!(
            "{} {}, {} (download: tuneplane outputs {id} --get PATH, a file, a folder or .)",
            files.len(),
            if files.len() == 1 {
                "output"
            } else {
                "outputs"
            },
            human_bytes(total)
        );
    }
    println!();
    print_checkpoints(id, &checkpoints);
    Ok(())
}

/// Why a job has no outputs to list, in plain words.
fn no_outputs(id: &str, state: &str) -> String {
    let ended = tuneplane_core::job::JobState::parse(state).is_some_and(|s| s.is_terminal());
    if ended {
        format!("job {id} ({state}) left no outputs (nothing in TUNEPLANE_OUTPUT_DIR)")
    } else {
        format!(
            "job {id} is {state}: no outputs yet (what it leaves in TUNEPLANE_OUTPUT_DIR is uploaded when its entrypoint ends)"
        )
    }
}

/// The outputs `want` picks (see the module docs), or why it picks none.
pub fn select<'a>(files: &'a [OutputFile], want: &str) -> Result<Vec<&'a OutputFile>, String> {
    let want = want.trim();
    if want == "." || want == "./" {
        return if files.is_empty() {
            Err("there are none".into())
        } else {
            Ok(files.iter().collect())
        };
    }
    let want = want.strip_prefix("./").unwrap_or(want);
    if let Some(f) = files.iter().find(|f| f.path == want) {
        return Ok(vec![f]);
    }
    let folder = format!("{}/", want.trim_end_matches('/'));
    let under: Vec<&OutputFile> = files
        .iter()
        .filter(|f| f.path.starts_with(&folder))
        .collect();
    if under.is_empty() {
        Err(format!("no output is {want:?} or under {folder:?}"))
    } else {
        Ok(under)
    }
}

/// The error of a `--get` that matched nothing: what exists instead.
fn no_match(id: &str, state: &str, files: &[OutputFile], why: &str) -> String {
    if files.is_empty() {
        return no_outputs(id, state);
    }
    let mut text = format!("--get: {why}; the outputs of job {id} are:");
    for f in files.iter().take(LISTED_IN_ERROR) {
        text.push_str(&format!("\n  {}  {}", f.path, human_bytes(f.size)));
    }
    if files.len() > LISTED_IN_ERROR {
        text.push_str(&format!(
            "\n  ... and {} more (tuneplane outputs {id})",
            files.len() - LISTED_IN_ERROR
        ));
    }
    text.push_str("\n(name a file, a folder, or . for all)");
    text
}

/// Where output `path` goes under `dir`: refused unless it is a relative path of plain names
/// that stays inside `dir` (the API checks it too; this does not trust that), and unless every
/// part of it that exists already under `dir` is a real folder (or, for the file itself, a
/// regular file), never a symbolic link that would lead elsewhere.
pub fn target_in(dir: &Path, path: &str) -> anyhow::Result<PathBuf> {
    let refuse = |why: &str| anyhow::anyhow!("refusing output {path:?}: {why}");
    tuneplane_core::grant::check_relative_path(path).map_err(|e| refuse(&e))?;
    if path.contains('\\') || path.contains('\0') {
        bail!(refuse("it holds a backslash or NUL"));
    }
    let rel = Path::new(path);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        bail!(refuse("it would leave the download folder"));
    }
    let mut at = dir.to_path_buf();
    let parts: Vec<Component> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot look at {}", at.display())),
            Ok(m) if m.file_type().is_symlink() => bail!(refuse(&format!(
                "{} is a symbolic link; files are written only inside {}",
                at.display(),
                dir.display()
            ))),
            Ok(m) if last && m.is_dir() => {
                bail!(refuse(&format!("{} is a folder", at.display())))
            }
            Ok(m) if !last && !m.is_dir() => bail!(refuse(&format!(
                "{} exists and is not a folder",
                at.display()
            ))),
            Ok(_) => {}
        }
    }
    Ok(at)
}

/// Downloads output `f` to `target` (its folders created), through a temporary file beside it
/// renamed into place once every byte arrived; returns the bytes written.
async fn download(api: &Api, f: &OutputFile, target: &Path) -> anyhow::Result<u64> {
    let parent = target.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create the folder {}", parent.display()))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = parent.join(format!(".{name}.tuneplane-partial"));
    let result = fetch_to(api, f, &temp).await;
    let written = match result {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    };
    if written != f.size {
        let _ = std::fs::remove_file(&temp);
        bail!(
            "{}: got {written} bytes, the listing said {}; the output changed meanwhile, run the command again",
            f.path,
            f.size
        );
    }
    std::fs::rename(&temp, target).with_context(|| format!("cannot write {}", target.display()))?;
    Ok(written)
}

/// Streams `f`'s presigned link into the new file `temp`.
async fn fetch_to(api: &Api, f: &OutputFile, temp: &Path) -> anyhow::Result<u64> {
    let mut resp = api
        .raw(Method::GET, &f.url)
        .timeout(FILE_TIMEOUT)
        .send()
        .await
        .with_context(|| format!("cannot download {}", f.path))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let why = resp.text().await.unwrap_or_default();
        bail!(
            "cannot download {}: the blob store answered {status}{}",
            f.path,
            if why.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", why.trim())
            }
        );
    }
    let mut file =
        std::fs::File::create(temp).with_context(|| format!("cannot create {}", temp.display()))?;
    let mut written = 0u64;
    loop {
        let chunk = tokio::time::timeout(IDLE_TIMEOUT, resp.chunk())
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "downloading {}: nothing arrived for {}s",
                    f.path,
                    IDLE_TIMEOUT.as_secs()
                )
            })?
            .with_context(|| format!("downloading {}", f.path))?;
        let Some(chunk) = chunk else { break };
        file.write_all(&chunk)
            .with_context(|| format!("cannot write {}", temp.display()))?;
        written += chunk.len() as u64;
    }
    file.sync_all()
        .with_context(|| format!("cannot write {}", temp.display()))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> OutputFile {
        OutputFile {
            path: path.into(),
            size: 1,
            url: String::new(),
        }
    }

    fn paths(picked: Result<Vec<&OutputFile>, String>) -> Vec<String> {
        picked
            .unwrap_or_default()
            .iter()
            .map(|f| f.path.clone())
            .collect()
    }

    #[test]
    fn get_picks_a_file_a_folder_or_everything() {
        let files = [
            file("metrics.json"),
            file("model/w.bin"),
            file("model/cfg/a.json"),
            file("modelcard.md"),
        ];
        assert_eq!(paths(select(&files, "metrics.json")), ["metrics.json"]);
        assert_eq!(
            paths(select(&files, "model")),
            ["model/w.bin", "model/cfg/a.json"]
        );
        assert_eq!(
            paths(select(&files, "model/")),
            paths(select(&files, "model"))
        );
        assert_eq!(paths(select(&files, "./model/cfg")), ["model/cfg/a.json"]);
        assert_eq!(paths(select(&files, ".")).len(), 4);
        // A prefix of a name is not a folder.
        assert!(select(&files, "mod").is_err());
        assert!(select(&[], ".").is_err());
        let err = no_match("j1", "SUCCEEDED", &files, "no output is \"x\"");
        assert!(
            err.contains("model/w.bin") && err.contains("metrics.json"),
            "{err}"
        );
    }

    #[test]
    fn targets_stay_inside_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(
            target_in(d, "model/w.bin").ok(),
            Some(d.join("model").join("w.bin"))
        );
        for bad in [
            "../x",
            "/etc/passwd",
            "a/../../x",
            "a//b",
            "./a",
            "",
            "a\\..\\b",
        ] {
            assert!(target_in(d, bad).is_err(), "{bad:?}");
        }
        // A symbolic link under the folder is not followed.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), d.join("model")).unwrap();
        let err = target_in(d, "model/w.bin").map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        std::fs::create_dir(d.join("taken")).unwrap();
        assert!(target_in(d, "taken").is_err());
    }
}
