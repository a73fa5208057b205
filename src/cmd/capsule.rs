//! `tuneplane capsule build|inspect`.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use tuneplane_core::capsule::{self, Limits};

/// Capsule subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Build a capsule from a directory or a tar / tar.gz / zip archive; prints `sha256:<hex>` last.
    Build {
        /// Directory or archive with the job's code.
        source: PathBuf,
        /// JobSpec file (YAML or JSON).
        #[arg(long)]
        spec: PathBuf,
        /// Fleet file; with it, jobs that could never fit the fleet are rejected.
        #[arg(long)]
        fleet: Option<PathBuf>,
        /// Where to write the capsule (written only if the build succeeds).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Verify a capsule against its manifest and print the manifest.
    Inspect {
        /// Capsule zip.
        capsule: PathBuf,
        /// Print the manifest as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a capsule subcommand.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Build {
            source,
            spec,
            fleet,
            output,
        } => build(&source, &spec, fleet.as_deref(), &output),
        Command::Inspect { capsule, json } => inspect(&capsule, json),
    }
}

fn build(
    source: &Path,
    spec: &Path,
    fleet: Option<&Path>,
    output: &Path,
) -> anyhow::Result<ExitCode> {
    let Some(v) = super::load_spec(spec, fleet)? else {
        return Ok(ExitCode::FAILURE);
    };
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = output
        .file_name()
        .context("--output must name a file")?
        .to_string_lossy();
    // Build into a hidden file beside the output and rename at the end: a failed build leaves nothing.
    let partial = dir.join(format!(".{name}.partial-{}", std::process::id()));
    let started = Instant::now();
    let result = (|| {
        let file = File::create(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let (writer, built) = capsule::build_from_source(
            source,
            &v.spec,
            &Limits::default(),
            dir,
            BufWriter::new(file),
        )?;
        writer
            .into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()?;
        std::fs::rename(&partial, output)
            .with_context(|| format!("cannot write {}", output.display()))?;
        anyhow::Ok(built)
    })();
    let built = match result {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    let user_bytes = built.manifest.user_bytes();
    eprintln!(
        "built {} ({} files, {} of code -> {} capsule) in {:.2}s",
        output.display(),
        built.manifest.user_files().count(),
        human_bytes(user_bytes),
        human_bytes(built.size),
        secs
    );
    println!("sha256:{}", built.sha256);
    Ok(ExitCode::SUCCESS)
}

fn inspect(path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let ins = capsule::inspect(std::io::BufReader::new(file))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&ins.manifest)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("capsule   sha256:{}", ins.sha256);
    println!("size      {}", human_bytes(ins.size));
    println!(
        "job       {} ({:?}, image {})",
        ins.spec.name,
        ins.spec.kind(),
        ins.spec.image
    );
    println!("format    {}", ins.manifest.format);
    println!("runner    sha256:{}", ins.manifest.runner_sha256);
    println!(
        "files     {} ({} of user code)",
        ins.manifest.files.len(),
        human_bytes(ins.manifest.user_bytes())
    );
    println!();
    println!("{:>5}  {:>10}  {:<64}  PATH", "MODE", "SIZE", "SHA256");
    for f in &ins.manifest.files {
        println!(
            "{:>5o}  {:>10}  {:<64}  {}",
            f.mode, f.size, f.sha256, f.path
        );
    }
    println!();
    println!("ok: every entry matches the manifest");
    Ok(ExitCode::SUCCESS)
}

pub use crate::client::pack::human_bytes;
