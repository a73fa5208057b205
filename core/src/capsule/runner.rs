//! The platform runner, `.tuneplane/runner.pex`: a stdlib-only Python zip application.
//!
//! Its source lives in `core/runner/__main__.py`; the zip is built here with the capsule's own
//! deterministic writer, so its bytes (and every capsule's identity) are the same on every machine.

use std::sync::OnceLock;

use super::zipw::{ZipWriter, compressor};

/// Python source of the runner.
pub const RUNNER_SOURCE: &str = include_str!("../../runner/__main__.py");

/// The runner as a zip application (`python runner.pex` runs its `__main__.py`), built once per
/// process.
pub fn runner_pex() -> &'static [u8] {
    static PEX: OnceLock<Vec<u8>> = OnceLock::new();
    PEX.get_or_init(build_runner_pex)
}

/// Builds the runner zip from its source (uncached; [`runner_pex`] caches it).
pub fn build_runner_pex() -> Vec<u8> {
    let mut zip = ZipWriter::new(Vec::new());
    let mut c = compressor();
    // Writing to a Vec cannot fail and one small entry is far inside the zip32 limits.
    if zip
        .add_bytes("__main__.py", 0o644, RUNNER_SOURCE.as_bytes(), &mut c)
        .is_err()
    {
        return Vec::new();
    }
    zip.finish().map(|(bytes, _)| bytes).unwrap_or_default()
}
