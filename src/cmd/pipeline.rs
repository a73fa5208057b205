//! `tuneplane submit PIPELINE.yaml`: every step of a pipeline file in one request
//! (`POST /v1/pipelines`), and with `--wait` the whole pipeline followed until every step ended.
//!
//! ```yaml
//! name: nightly
//! steps:
//!   - {name: prepare, folder: prepare}                 # folder: relative to this file
//!   - {name: train, folder: train, after: [prepare]}   # spec: default <folder>/tuneplane.yaml
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};
use tuneplane_core::job::{JobRecord, JobState};

use crate::client::{Api, Output, pack};

/// A pipeline file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// The pipeline's name.
    pub name: String,
    /// Its steps.
    pub steps: Vec<StepFile>,
}

/// One step of a pipeline file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFile {
    /// Its name.
    pub name: String,
    /// Its code's folder, relative to the pipeline file.
    pub folder: PathBuf,
    /// Its JobSpec file, relative to the pipeline file (default `<folder>/tuneplane.yaml`).
    #[serde(default)]
    pub spec: Option<PathBuf>,
    /// The steps it waits for.
    #[serde(default)]
    pub after: Vec<String>,
}

/// True when `source` is a pipeline file rather than a job's code (a `.yaml`, `.yml` or
/// `.json` file).
pub fn is_pipeline_file(source: &Path) -> bool {
    source.is_file()
        && source
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// Reads and checks `path`: its graph (names, `after`, cycles) and every step's spec, before
/// anything is packed or sent. Returns the file and each step's spec text.
pub fn read(path: &Path) -> anyhow::Result<(PipelineFile, Vec<String>)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the pipeline {}", path.display()))?;
    let file: PipelineFile = yaml_serde::from_str(&text).with_context(|| {
        format!(
            "{} is not a pipeline file: expected name and steps: [{{name, folder, after: [steps]}}]",
            path.display()
        )
    })?;
    let graph: Vec<(&str, &[String])> = file
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.after.as_slice()))
        .collect();
    if let Err(errors) = tuneplane_core::submit::pipeline::step_order(&file.name, &graph) {
        bail!(
            "{} is not a valid pipeline (nothing was sent):\n{errors}",
            path.display()
        );
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let mut specs = Vec::with_capacity(file.steps.len());
    for (i, step) in file.steps.iter().enumerate() {
        let folder = base.join(&step.folder);
        if !folder.is_dir() {
            bail!(
                "steps[{i}] ({}): its folder {} does not exist (folders are relative to the pipeline file)",
                step.name,
                folder.display()
            );
        }
        let spec_path = step
            .spec
            .as_ref()
            .map_or_else(|| folder.join("tuneplane.yaml"), |s| base.join(s));
        let spec = std::fs::read_to_string(&spec_path).with_context(|| {
            format!(
                "steps[{i}] ({}): cannot read its spec {}",
                step.name,
                spec_path.display()
            )
        })?;
        if let Err(errors) = super::jobs::check_locally(&spec) {
            bail!(
                "steps[{i}] ({}): {} is not a valid job spec (nothing was sent):\n{errors}",
                step.name,
                spec_path.display()
            );
        }
        specs.push(spec);
    }
    Ok((file, specs))
}

/// `submit SOURCE ...`: a pipeline file goes to [`submit`], anything else to
/// [`super::jobs::submit`].
pub async fn submit_any(
    api: &Api,
    out: Output,
    a: &super::jobs::SubmitArgs,
) -> anyhow::Result<ExitCode> {
    if a.spec.is_some() || !is_pipeline_file(&a.source) {
        return super::jobs::submit(api, out, a).await;
    }
    if a.dry_run || a.idempotency_key.is_some() {
        bail!("a pipeline file takes --wait only (not --dry-run or --idempotency-key)");
    }
    submit(api, out, &a.source, a.wait).await
}

/// `submit PIPELINE.yaml [--wait]`.
pub async fn submit(api: &Api, out: Output, path: &Path, wait: bool) -> anyhow::Result<ExitCode> {
    api.require_key()?;
    let (file, specs) = read(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut steps = Vec::with_capacity(file.steps.len());
    for (step, spec) in file.steps.iter().zip(specs) {
        let code = pack::pack_quiet(&base.join(&step.folder))?;
        let code_field = if code.len() <= super::jobs::INLINE_LIMIT {
            json!({"inline": base64::engine::general_purpose::STANDARD.encode(&code)})
        } else {
            json!({"upload_id": super::jobs::upload(api, code).await?})
        };
        steps.push(
            json!({"name": step.name, "spec": spec, "code": code_field, "after": step.after}),
        );
    }
    let (_, body): (_, Value) = api
        .post(
            "/pipelines",
            &json!({"name": file.name, "steps": steps}),
            &[],
        )
        .await?;
    let jobs: Vec<(String, JobRecord)> = body["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let job: JobRecord = serde_json::from_value(s["job"].clone())?;
            Ok((s["step"].as_str().unwrap_or_default().to_owned(), job))
        })
        .collect::<Result<_, serde_json::Error>>()
        .context("unexpected pipeline answer")?;
    if out == Output::Json {
        println!("{body}");
    } else {
        println!("submitted pipeline {} ({} steps):", file.name, jobs.len());
        for (step, job) in &jobs {
            println!("  {step:<16} {} ({})", job.id, job.state);
        }
        super::jobs::print_notes(&body);
    }
    if !wait {
        return Ok(ExitCode::SUCCESS);
    }
    follow(api, out, &jobs).await
}

/// Follows every step until all ended, printing each change of state; the exit code is the
/// pipeline's: 0 when every step succeeded, else that of the first step that did not.
async fn follow(api: &Api, out: Output, jobs: &[(String, JobRecord)]) -> anyhow::Result<ExitCode> {
    let mut last: BTreeMap<&str, (JobState, Option<String>)> = BTreeMap::new();
    loop {
        let mut all_ended = true;
        for (step, job) in jobs {
            let now: JobRecord = api.get(&format!("/jobs/{}", job.id)).await?;
            let detail = now
                .failure
                .as_ref()
                .map(|f| format!("{:?}: {}", f.reason, f.message))
                .or_else(|| now.pending.as_ref().map(|p| format!("{:?}", p.reason)));
            let seen = (now.state, detail.clone());
            if last.get(step.as_str()) != Some(&seen) && out == Output::Table {
                match &detail {
                    Some(d) => eprintln!("{step}: {} ({d})", now.state),
                    None => eprintln!("{step}: {}", now.state),
                }
            }
            last.insert(step, seen);
            all_ended &= now.state.is_terminal();
        }
        if all_ended {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let failed = jobs
        .iter()
        .map(|(step, _)| (step, last[step.as_str()].0))
        .find(|(_, state)| *state != JobState::Succeeded);
    match failed {
        None => {
            if out == Output::Table {
                println!("pipeline succeeded: every step SUCCEEDED");
            }
            Ok(ExitCode::SUCCESS)
        }
        Some((step, state)) => {
            if out == Output::Table {
                println!("pipeline did not succeed: step {step} ended {state}");
            }
            Ok(super::output::exit_for(state))
        }
    }
}
