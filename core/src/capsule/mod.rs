//! Capsules: deterministic, content-addressed zips of the user's code and the platform's files.
//!
//! Layout (docs/design.md §3): the user's files at the archive root, the platform's files under
//! `.tuneplane/` (`jobspec.json`, `manifest.json`, `runner.pex`). Same inputs give the same bytes on
//! every machine, so the archive's SHA-256 is the capsule's identity and storage key.
//!
//! Code arrives as a directory or as a tar, tar.gz or zip archive. Archives are read entry by entry
//! and unpacked into a private staging folder, refusing anything hostile with a message that names
//! the entry; the capsule is then built from that folder in sorted order, so the same files give the
//! same capsule whatever container they came in.

mod build;
mod ingest;
mod inspect;
mod manifest;
mod paths;
mod runner;
mod source;
pub mod zipw;

use std::path::PathBuf;

pub use build::{Built, build_capsule, build_from_source};
pub use ingest::{ArchiveKind, stage_archive};
pub use inspect::{Inspected, inspect};
pub use manifest::{FORMAT_VERSION, Manifest, ManifestFile};
pub use paths::clean_path;
pub use runner::{RUNNER_SOURCE, build_runner_pex, runner_pex};
pub use source::{SourceFile, walk_dir};

/// Path of the authoritative JobSpec inside a capsule.
pub const JOBSPEC_PATH: &str = ".tuneplane/jobspec.json";
/// Path of the manifest inside a capsule.
pub const MANIFEST_PATH: &str = ".tuneplane/manifest.json";
/// Path of the runner inside a capsule.
pub const RUNNER_PATH: &str = ".tuneplane/runner.pex";

/// Storage key of a capsule: the hash is in the path and the key ends in `.zip` (Ray requires it).
pub fn storage_key(sha256_hex: &str) -> String {
    format!("capsules/sha256/{sha256_hex}/capsule.zip")
}

/// Limits on user code; anything beyond them is refused before a byte is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries (files and folders).
    pub max_entries: usize,
    /// Most uncompressed bytes in total (kept below the 4 GiB zip32 limit).
    pub max_total_bytes: u64,
    /// Largest uncompressed/compressed ratio accepted once `ratio_floor_bytes` have been unpacked.
    pub max_ratio: u64,
    /// Unpacked size below which the ratio is not judged (small files compress extremely well).
    pub ratio_floor_bytes: u64,
    /// Largest uploaded code archive (`POST /v1/uploads` advertises it): a larger upload is
    /// refused before it is downloaded, and a download stops there.
    pub max_archive_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_entries: 20_000,
            max_total_bytes: 2 << 30,
            max_ratio: 200,
            ratio_floor_bytes: 1 << 20,
            max_archive_bytes: 1 << 30,
        }
    }
}

/// Why a capsule could not be built or verified.
#[derive(Debug, thiserror::Error)]
pub enum CapsuleError {
    /// An entry of the user's code breaks a rule; nothing was stored.
    #[error("rejected entry {entry:?}: {reason}")]
    Rejected {
        /// The entry's name as it appeared (lossy UTF-8).
        entry: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The code as a whole breaks a rule (too many entries, too large, empty, unreadable archive).
    #[error("rejected code: {0}")]
    RejectedSource(String),
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// File involved.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A capsule under inspection does not match its manifest.
    #[error("capsule is not valid: {0}")]
    Invalid(String),
}

impl CapsuleError {
    pub(crate) fn rejected(entry: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Rejected {
            entry: entry.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// True when the user's input was at fault (a 4xx), false for an internal failure.
    pub fn is_user_error(&self) -> bool {
        !matches!(self, Self::Io { .. })
    }
}

/// Result with [`CapsuleError`].
pub type Result<T, E = CapsuleError> = std::result::Result<T, E>;
