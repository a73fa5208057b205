//! The repository and the tools `scripts/bootstrap-venv.sh` installs into its venv, for the tests
//! that run those tools (they fail with that instruction when the venv lacks one).

use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `.venv/bin/<name>`; panics, saying how to install `what`, when it is missing.
pub fn venv_tool(name: &str, what: &str) -> PathBuf {
    let path = root().join(".venv/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/bootstrap-venv.sh (scripts/test.sh does) to install {what}",
        path.display()
    );
    path
}
