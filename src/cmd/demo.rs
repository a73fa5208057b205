//! `tuneplane demo`: the main job on embedded defaults.
//!
//! Starts the whole stack (`tuneplane dev`) in a temporary data directory, submits the examples
//! through the HTTP API exactly as a user would, follows every job to its end with live progress,
//! then prints a summary table, the capacity per series and the last lines of each job's archived
//! logs. It exits 0 only if every example ended as it is meant to.
//!
//! With `--kubeconfig` the reconciler works against that cluster (`scripts/k8s-up.sh`'s real
//! control plane, whose node agent runs the pods for real): every example ends as on the embedded
//! stack, the RayJobs through real Ray and the real KubeRay operator. (On a cluster whose nodes only
//! pretend, `kubesim agent --simulate`, a RayJob never learns its end and the demo times out.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::job::{JobRecord, JobState};

use super::jobs::print_capacity;
use super::logs::read_logs_archive;
use super::output::{clock, pools_of, print_table};
use crate::client::{Api, ClientArgs, Output};
use crate::dev::{DevArgs, Stack};

/// Arguments of `demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder holding the examples and `fleet.yaml` [default: the examples built into the binary].
    #[arg(long)]
    pub examples: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
    /// Run against this cluster instead of kubesim (e.g. the kubeconfig `scripts/k8s-up.sh`
    /// prints); its nodes must be the examples' fleet.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// How an example is meant to end.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Succeeded,
    /// FAILED with this failure reason.
    Failed(&'static str),
    /// Refused at submit with a message containing this.
    Rejected(&'static str),
}

/// The examples in submission order.
const EXAMPLES: &[(&str, Expect)] = &[
    ("hello-cpu", Expect::Succeeded),
    ("ray-multipool", Expect::Succeeded),
    ("queued-behind", Expect::Succeeded),
    ("bad-image", Expect::Failed("PreRunningDeadlineExceeded")),
    ("too-big", Expect::Rejected("largest h200 node has 8")),
];

struct Tracked {
    example: &'static str,
    expect: Expect,
    job: Option<JobRecord>,
    rejection: Option<String>,
    last_line: String,
}

/// `tuneplane demo`: starts the stack in a temporary directory (removed afterwards), runs every
/// example and prints the summary; exit 0 only if each ended as expected.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let data_dir = std::env::temp_dir().join(format!("tuneplane-demo-{}", std::process::id()));
    let examples_dir = match &args.examples {
        Some(dir) => dir.clone(),
        None => crate::examples::write_to(&data_dir.join("examples"))?,
    };
    let dev = DevArgs {
        data_dir: data_dir.clone(),
        port: 0,
        fleet: Some(examples_dir.join("fleet.yaml")),
        fail_images: Vec::new(),
        no_exec: false,
        kubeconfig: args.kubeconfig.clone(),
        webhooks: None,
        capsule_delivery: "presigned".into(),
        blob_tls_cert: None,
        blob_tls_key: None,
    };
    let opts = dev.options()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        match &args.kubeconfig {
            None => println!("starting the stack (API, embedded stores, simulated cluster in execution mode, reconciler) ..."),
            Some(k) => println!("starting the stack (API, embedded stores, reconciler against the cluster of {}) ...", k.display()),
        }
        let stack = Stack::start(opts).await?;
        println!("API {} — data in {}\n", stack.api_url, data_dir.display());
        let outcome = demo(
            &stack,
            &examples_dir,
            EXAMPLES,
            Duration::from_secs(args.timeout_seconds),
        )
        .await;
        stack.shutdown().await;
        outcome
    });
    let _ = std::fs::remove_dir_all(&data_dir);
    result
}

async fn demo(
    stack: &Stack,
    examples: &Path,
    list: &[(&'static str, Expect)],
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let api = Api::new(&ClientArgs {
        api: stack.api_url.clone(),
        key: Some(stack.api_key.clone()),
        output: Output::Table,
    })?;
    wait_for_capacity(&api).await?;
    let started = Instant::now();
    let mut tracked = Vec::new();
    for (example, expect) in list {
        let t = submit(&api, examples, example, *expect).await?;
        match (&t.job, &t.rejection) {
            (Some(j), _) => println!(
                "[{:>5.1}s] {example:<14} submitted as {} ({})",
                started.elapsed().as_secs_f64(),
                j.id,
                pools_of(&j.spec)
            ),
            (None, Some(r)) => println!(
                "[{:>5.1}s] {example:<14} rejected at submit: {r}",
                started.elapsed().as_secs_f64()
            ),
            _ => {}
        }
        tracked.push(t);
    }
    follow(&api, &mut tracked, started, timeout).await?;

    println!("\nSUMMARY");
    let rows: Vec<Vec<String>> = tracked.iter().map(summary_row).collect();
    print_table(
        &[
            "EXAMPLE",
            "JOB",
            "KIND",
            "POOLS",
            "STATUS",
            "REASON",
            "QUEUED",
            "PRE-RUNNING",
            "RUN",
            "AS EXPECTED",
        ],
        &rows,
    );

    println!("\nCAPACITY");
    let body: Value = api.get("/capacity").await?;
    let snap: CapacitySnapshot =
        serde_json::from_value(body["snapshot"].clone()).context("no capacity snapshot")?;
    print_capacity(&snap);

    println!("\nLOGS (last lines of each archived log)");
    for t in &tracked {
        let Some(job) = &t.job else { continue };
        print_log_tail(&api, t.example, job).await;
    }
    let ok = tracked.iter().all(as_expected);
    if ok {
        println!("\ndemo ok: every example ended as expected");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\ndemo FAILED: some examples did not end as expected (see the last column)");
        Ok(ExitCode::FAILURE)
    }
}

async fn wait_for_capacity(api: &Api) -> anyhow::Result<()> {
    for _ in 0..100 {
        let body: Value = api.get("/capacity").await?;
        if !body["snapshot"].is_null() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("the reconciler published no capacity snapshot within 20 s")
}

async fn submit(
    api: &Api,
    examples: &Path,
    example: &'static str,
    expect: Expect,
) -> anyhow::Result<Tracked> {
    let dir = examples.join(example);
    let spec = std::fs::read_to_string(dir.join("tuneplane.yaml"))
        .with_context(|| format!("cannot read {}/tuneplane.yaml", dir.display()))?;
    let code = super::super::client::pack::pack_quiet(&dir)?;
    let body = serde_json::json!({
        "spec": spec,
        "code": {"inline": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &code)},
    });
    let mut t = Tracked {
        example,
        expect,
        job: None,
        rejection: None,
        last_line: String::new(),
    };
    match api
        .post::<Value>(
            "/jobs",
            &body,
            &[("idempotency-key", &format!("demo-{example}"))],
        )
        .await
    {
        Ok((_, v)) => {
            t.job = Some(
                serde_json::from_value(v["job"].clone()).context("unexpected submission answer")?,
            )
        }
        Err(e) => match e.downcast_ref::<crate::client::ErrorReply>() {
            Some(api_err) if api_err.status.is_client_error() => {
                // One line for the table: the field errors if there are any, else the message.
                let text = if api_err.details.trim().is_empty() {
                    &api_err.message
                } else {
                    &api_err.details
                };
                t.rejection = Some(text.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            _ => return Err(e),
        },
    }
    Ok(t)
}

/// Polls every job until all have ended, printing each change of state or pending reason.
async fn follow(
    api: &Api,
    tracked: &mut [Tracked],
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    loop {
        let mut open = 0;
        for t in tracked.iter_mut() {
            let Some(job) = &t.job else { continue };
            if job.state.is_terminal() {
                continue;
            }
            let job: JobRecord = api.get(&format!("/jobs/{}", job.id)).await?;
            let line = match (&job.pending, &job.failure) {
                (_, Some(f)) => format!("{} ({:?}: {})", job.state, f.reason, f.message),
                (Some(p), None) if !job.state.is_terminal() => {
                    format!("{} — pending {:?}: {}", job.state, p.reason, p.message)
                }
                _ => job.state.to_string(),
            };
            if line != t.last_line {
                println!(
                    "[{:>5.1}s] {:<14} {line}",
                    started.elapsed().as_secs_f64(),
                    t.example
                );
                t.last_line = line;
            }
            if !job.state.is_terminal() {
                open += 1;
            }
            t.job = Some(job);
        }
        if open == 0 {
            return Ok(());
        }
        if started.elapsed() > timeout {
            anyhow::bail!("{open} job(s) still running after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn as_expected(t: &Tracked) -> bool {
    match (t.expect, &t.job, &t.rejection) {
        (Expect::Succeeded, Some(j), _) => j.state == JobState::Succeeded,
        (Expect::Failed(reason), Some(j), _) => {
            j.state == JobState::Failed
                && j.failure
                    .as_ref()
                    .is_some_and(|f| format!("{:?}", f.reason) == reason)
        }
        (Expect::Rejected(needle), None, Some(msg)) => msg.contains(needle),
        _ => false,
    }
}

fn summary_row(t: &Tracked) -> Vec<String> {
    let ok = if as_expected(t) { "yes" } else { "NO" }.to_string();
    let Some(j) = &t.job else {
        let why = t.rejection.clone().unwrap_or_default();
        return vec![
            t.example.into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "REJECTED".into(),
            why,
            "-".into(),
            "-".into(),
            "-".into(),
            ok,
        ];
    };
    let reason = j
        .failure
        .as_ref()
        .map(|f| format!("{:?}", f.reason))
        .unwrap_or_default();
    vec![
        t.example.into(),
        String::from(&j.id),
        format!("{:?}", j.spec.kind()),
        pools_of(&j.spec),
        j.state.to_string(),
        reason,
        clock(
            Some(j.submitted_at_ms),
            j.admitted_at_ms.or(j.finished_at_ms),
        ),
        clock(j.admitted_at_ms, j.running_at_ms.or(j.finished_at_ms)),
        clock(j.running_at_ms, j.finished_at_ms),
        ok,
    ]
}

async fn print_log_tail(api: &Api, example: &str, job: &JobRecord) {
    let files = async {
        let link: Value = api.get(&format!("/jobs/{}/logs", job.id)).await?;
        let url = link["url"].as_str().context("no logs url")?;
        let bytes = api
            .raw(reqwest::Method::GET, url)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        read_logs_archive(&bytes)
    }
    .await;
    match files {
        Ok(files) => {
            let mut by_name: BTreeMap<String, String> = files.into_iter().collect();
            by_name.remove("index.json");
            for (name, text) in by_name {
                let lines: Vec<&str> = text.lines().collect();
                if lines.is_empty() {
                    continue;
                }
                println!("--- {example}: {name}");
                for l in &lines[lines.len().saturating_sub(4)..] {
                    println!("    {l}");
                }
            }
        }
        Err(e) => println!("--- {example}: no archived logs ({e:#})"),
    }
}
