//! The capsule manifest: every file's path, size, mode and SHA-256, and the runner's digest.

use serde::{Deserialize, Serialize};

/// Version of the capsule format described by the manifest.
pub const FORMAT_VERSION: u32 = 1;

/// `.tuneplane/manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Capsule format version.
    pub format: u32,
    /// Every file in the capsule except the manifest itself, sorted by path.
    pub files: Vec<ManifestFile>,
    /// SHA-256 of `.tuneplane/runner.pex`.
    pub runner_sha256: String,
    /// SHA-256 of `.tuneplane/jobspec.json`.
    pub jobspec_sha256: String,
}

/// One file of the capsule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// Path inside the capsule.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Unix mode (0o644 or 0o755).
    pub mode: u32,
    /// Lower-case hex SHA-256 of the content.
    pub sha256: String,
}

impl Manifest {
    /// Canonical JSON bytes (sorted keys), as stored in the capsule.
    pub fn to_canonical_json(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        crate::canonical::to_string(&value)
    }

    /// Total bytes of the user's files (the platform's excluded).
    pub fn user_bytes(&self) -> u64 {
        self.user_files().map(|f| f.size).sum()
    }

    /// The user's files (everything outside `.tuneplane/`).
    pub fn user_files(&self) -> impl Iterator<Item = &ManifestFile> {
        self.files
            .iter()
            .filter(|f| !f.path.starts_with(".tuneplane/"))
    }
}
