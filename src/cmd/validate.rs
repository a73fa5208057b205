//! `tuneplane validate SPEC [--fleet FLEET]`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `validate`.
#[derive(clap::Args)]
pub struct Args {
    /// JobSpec file (YAML or JSON).
    pub spec: PathBuf,
    /// Fleet file; with it, jobs that could never fit the fleet are rejected.
    #[arg(long)]
    pub fleet: Option<PathBuf>,
}

/// Prints the authoritative spec as JSON, or every problem (exit 1).
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let Some(v) = super::load_spec(&args.spec, args.fleet.as_deref())? else {
        return Ok(ExitCode::FAILURE);
    };
    for note in &v.notes {
        eprintln!("note: {note}");
    }
    println!("{}", serde_json::to_string_pretty(&v.spec)?);
    Ok(ExitCode::SUCCESS)
}
