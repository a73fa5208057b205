//! `tuneplane`: the command-line interface of TunePlane.
//!
//! Local commands work on files (validate a spec, build and inspect capsules). Every subcommand has
//! `--help`. Errors go to stderr and the exit status is non-zero; results go to stdout.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Build and inspect capsules (the deterministic zip a job runs from).
    #[command(subcommand)]
    Capsule(cmd::capsule::Command),
    /// Run the example job end to end on this machine (the README's main-job command).
    Demo(cmd::demo::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate(args) => cmd::validate::run(&args),
        Command::Capsule(c) => cmd::capsule::run(c),
        Command::Demo(args) => cmd::demo::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
