//! `tuneplane`: the command-line interface of TunePlane.
//!
//! Local commands work on files (validate a spec, build and inspect capsules); client commands talk
//! to a TunePlane API (`--api`/`TUNEPLANE_API`, `--key`/`TUNEPLANE_API_KEY`). Every subcommand has
//! `--help`. Errors go to stderr and the exit status is non-zero; results go to stdout.

use tuneplane::{client, cmd};

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// TunePlane: training jobs on a Kubernetes GPU fleet.
#[derive(Parser)]
#[command(name = "tuneplane", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a JobSpec and print the authoritative spec (every default filled in) as JSON.
    Validate(cmd::validate::Args),
    /// Print the RayJob or Pod the reconciler would create for a spec (YAML; nothing is created).
    Render(cmd::render::Args),
    /// Build and inspect capsules (the deterministic zip a job runs from).
    #[command(subcommand)]
    Capsule(cmd::capsule::Command),
    /// Run the example job end to end on this machine (the README's main-job command).
    #[cfg(feature = "dev")]
    Demo(cmd::demo::Args),
    /// Operator commands on the stores (create API keys and schedules, set tenants' quotas).
    #[command(subcommand)]
    Admin(cmd::admin::Command),
    /// Start the whole platform on this machine (API, stores, simulated cluster, reconciler).
    #[cfg(feature = "dev")]
    Dev(tuneplane::dev::DevArgs),
    /// Submit a job (code + JobSpec) to the API.
    Submit {
        #[command(flatten)]
        client: client::ClientArgs,
        #[command(flatten)]
        args: cmd::jobs::SubmitArgs,
    },
    /// List your jobs, newest first.
    Jobs {
        #[command(flatten)]
        client: client::ClientArgs,
        /// Only jobs in this state (queued, admitted, running, succeeded, failed, stopped).
        #[arg(long)]
        status: Option<String>,
        /// Most jobs to show (1 to 1000).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
        /// Continue a listing where the previous page ended (the `next` line it printed).
        #[arg(long)]
        cursor: Option<String>,
        /// List array jobs' children too (by default an array is one line with their counts).
        #[arg(long)]
        children: bool,
    },
    /// Show one job: state, attempt, pending reason or how it ended (cause, evidence), clocks,
    /// workload, logs, earlier attempts; a running job's last lines of output up to now.
    Status {
        #[command(flatten)]
        client: client::ClientArgs,
        /// Job id.
        id: String,
        /// A running job's last lines as shipped so far, at once (by default the API waits a
        /// few seconds for its output up to now).
        #[arg(long)]
        no_wait: bool,
    },
    /// Follow a job until it ends (exit 0 if it succeeded, 3 if it failed, 4 if stopped).
    Watch {
        #[command(flatten)]
        client: client::ClientArgs,
        /// Job id.
        id: String,
        /// Give up after this many seconds.
        #[arg(long)]
        timeout_seconds: Option<u64>,
    },
    /// Show a job's events (platform events and copied Kubernetes warnings).
    Events {
        #[command(flatten)]
        client: client::ClientArgs,
        /// Job id.
        id: String,
    },
    /// Print a job's output: up to now while it runs (the API waits a few seconds for it;
    /// --no-wait: shipped so far), archived once it ended; -f follows it to the end;
    /// --attempt N an earlier attempt's archive.
    Logs {
        #[command(flatten)]
        client: client::ClientArgs,
        #[command(flatten)]
        args: cmd::logs::LogsArgs,
    },
    /// List a job's outputs (what it left in TUNEPLANE_OUTPUT_DIR) and complete checkpoints;
    /// --get PATH downloads outputs: a file as listed, a folder (`model/`: everything under it)
    /// or `.` (everything), into --dir at their listed paths.
    Outputs {
        #[command(flatten)]
        client: client::ClientArgs,
        #[command(flatten)]
        args: cmd::outputs::OutputsArgs,
    },
    /// Ask for a job to be stopped.
    Stop {
        #[command(flatten)]
        client: client::ClientArgs,
        /// Job id.
        id: String,
    },
    /// Show per-series and per-node GPU capacity (the snapshot admission uses).
    Capacity {
        #[command(flatten)]
        client: client::ClientArgs,
    },
    /// Show your tenant's quota, what its jobs hold and wait for per series, and the fleet's totals.
    Quota {
        #[command(flatten)]
        client: client::ClientArgs,
    },
    /// Show what your tenant held: GPU-hours, CPU- and memory-hours per series, day or job.
    Usage {
        #[command(flatten)]
        client: client::ClientArgs,
        #[command(flatten)]
        args: cmd::usage::UsageArgs,
    },
    /// Manage your tenant's job-event callbacks (subscriptions) and their signing secret.
    Subscriptions {
        #[command(flatten)]
        client: client::ClientArgs,
        #[command(subcommand)]
        command: cmd::subscriptions::Command,
    },
    /// Print a shell completion script (`source <(tuneplane completion bash)`).
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Manage vLLM playgrounds.
    Playground {
        #[command(flatten)]
        client: client::ClientArgs,
        #[command(subcommand)]
        command: cmd::playground::Command,
    },
}

/// Runs client command `run` with `arg` (its id, arguments or subcommand) on a fresh async runtime,
/// against the API and key of `args`.
fn client_command<A>(
    args: &client::ClientArgs,
    arg: A,
    run: impl AsyncFnOnce(&client::Api, client::Output, A) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    let api = cmd::jobs::api(args)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(&api, args.output, arg))
}

/// Ends the process quietly when stdout is a closed pipe (`tuneplane events J | head`): Rust
/// ignores SIGPIPE, so printing then fails and `println!` panics with this text. Anything else
/// is reported by the default hook.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Writes the completion script of `shell` to stdout (a closed pipe ends quietly).
fn completion(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tuneplane", &mut script);
    match std::io::stdout().lock().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate(args) => cmd::validate::run(&args),
        Command::Render(args) => cmd::render::run(&args),
        Command::Capsule(c) => cmd::capsule::run(c),
        #[cfg(feature = "dev")]
        Command::Demo(args) => cmd::demo::run(&args),
        Command::Admin(c) => cmd::admin::run(c),
        #[cfg(feature = "dev")]
        Command::Dev(args) => tuneplane::dev::run(&args),
        Command::Submit { client, args } => {
            client_command(&client, &args, cmd::pipeline::submit_any)
        }
        Command::Jobs {
            client,
            status,
            limit,
            cursor,
            children,
        } => client_command(&client, (), async |api, out, ()| {
            cmd::jobs::list(
                api,
                out,
                status.as_deref(),
                limit,
                cursor.as_deref(),
                children,
            )
            .await
        }),
        Command::Status {
            client,
            id,
            no_wait,
        } => client_command(&client, &*id, async |api, out, id| {
            cmd::jobs::status(api, out, id, no_wait).await
        }),
        Command::Watch {
            client,
            id,
            timeout_seconds,
        } => client_command(&client, &*id, async |api, out, id| {
            let timeout = timeout_seconds.map(std::time::Duration::from_secs);
            cmd::jobs::watch_job(api, out, id, timeout).await
        }),
        Command::Events { client, id } => client_command(&client, &*id, cmd::jobs::events),
        Command::Logs { client, args } => client_command(&client, &args, cmd::logs::logs),
        Command::Outputs { client, args } => client_command(&client, &args, cmd::outputs::outputs),
        Command::Stop { client, id } => client_command(&client, &*id, cmd::jobs::stop),
        Command::Capacity { client } => client_command(&client, (), async |api, out, ()| {
            cmd::jobs::capacity(api, out).await
        }),
        Command::Quota { client } => client_command(&client, (), async |api, out, ()| {
            cmd::quota::show(api, out).await
        }),
        Command::Usage { client, args } => client_command(&client, args, cmd::usage::usage),
        Command::Subscriptions { client, command } => {
            client_command(&client, command, cmd::subscriptions::run)
        }
        Command::Completion { shell } => completion(shell),
        Command::Playground { client, command } => {
            client_command(&client, command, cmd::playground::run)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
