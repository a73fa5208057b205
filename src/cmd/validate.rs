//! `tuneplane validate SPEC [--fleet FLEET | --api URL]`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `validate`.
#[derive(clap::Args)]
pub struct Args {
    /// JobSpec file (YAML or JSON).
    pub spec: PathBuf,
    /// Fleet file; with it, jobs that could never fit the fleet are rejected.
    #[arg(long, conflicts_with = "api")]
    pub fleet: Option<PathBuf>,
    /// Check the fit against this API's live capacity instead (e.g. http://127.0.0.1:8080).
    #[arg(long, value_name = "URL")]
    pub api: Option<String>,
    /// API key for --api.
    #[arg(long, env = "TUNEPLANE_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
}

/// Prints the authoritative spec as JSON, or every problem (exit 1).
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let v = match &args.api {
        Some(url) => {
            let api = crate::client::Api::new(&crate::client::ClientArgs {
                api: url.clone(),
                key: args.key.clone(),
                output: crate::client::Output::Json,
            })?;
            let text = super::read_text(&args.spec)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            match rt.block_on(super::jobs::validate_live(&api, &text))? {
                Ok(v) => v,
                Err(errors) => {
                    eprintln!(
                        "error: {} is not a valid job spec for this fleet",
                        args.spec.display()
                    );
                    eprintln!("{errors}");
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        None => match super::load_spec(&args.spec, args.fleet.as_deref())? {
            Some(v) => v,
            None => return Ok(ExitCode::FAILURE),
        },
    };
    if args.fleet.is_none() && args.api.is_none() {
        // Without a fleet only the spec's own rules were checked (a series name, GPUs per node
        // and sizes are checked against a fleet).
        eprintln!(
            "note: checked against the spec's rules only; series, GPUs per node and sizes are \
             checked with --fleet FILE or --api URL (the live capacity)"
        );
    } else {
        for note in &v.notes {
            eprintln!("note: {note}");
        }
    }
    println!("{}", serde_json::to_string_pretty(&v.spec)?);
    Ok(ExitCode::SUCCESS)
}
