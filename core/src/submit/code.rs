//! The blocking half of a submission: validate the spec, stage the archive safely, build the capsule.
//!
//! Runs inside a per-request scratch folder that is removed when the request ends, whatever
//! happens. Everything here is synchronous CPU and local-disk work; [`super::Offload`] decides
//! which thread runs it.

use std::fs::File;
use std::io::{BufWriter, Cursor, Read, Write};
use std::path::{Path, PathBuf};

use super::{Result, SubmitConfig, SubmitError};
use crate::capsule::{ArchiveKind, CapsuleError, build_capsule, stage_archive, walk_dir};
use crate::fleet::FleetShape;
use crate::spec::{JobSpec, MAX_SPEC_BYTES, validate};

/// Names of the spec file accepted at the root of an inbox archive, in order of preference.
pub const SPEC_FILE_IN_ARCHIVE: &[&str] = &["tuneplane.yaml", "tuneplane.yml", "tuneplane.json"];

/// Where the archive's bytes are.
#[derive(Debug)]
pub(crate) enum ArchiveSource {
    /// In memory.
    Bytes(Vec<u8>),
    /// A local file (downloaded from the blob store).
    File(PathBuf),
}

/// A validated spec and its built capsule, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The authoritative spec.
    pub spec: JobSpec,
    /// SHA-256 (hex) of the capsule.
    pub sha256: String,
    /// The capsule file to upload; `None` when the capsule already exists in the blob store.
    pub capsule_file: Option<PathBuf>,
    /// Notes from validation.
    pub notes: Vec<String>,
}

/// Validates `spec_text` (or the archive's own `tuneplane.yaml` when `None`), stages `archive`
/// under `dir` and builds the capsule file there.
pub(crate) fn prepare(
    spec_text: Option<&str>,
    archive: ArchiveSource,
    shape: Option<&FleetShape>,
    config: &SubmitConfig,
    dir: &Path,
) -> Result<Prepared> {
    // The spec is checked before the code is touched, so a bad spec costs no unpacking.
    let early = spec_text
        .map(|text| validate(text, shape, &config.defaults))
        .transpose()?;
    let staging = dir.join("stage");
    std::fs::create_dir_all(&staging).map_err(|e| CapsuleError::Io {
        path: staging.clone(),
        source: e,
    })?;
    match archive {
        ArchiveSource::Bytes(bytes) => {
            let kind = kind_of(&bytes)?;
            stage_archive(Cursor::new(bytes), kind, &staging, &config.limits)?;
        }
        ArchiveSource::File(path) => {
            let kind = ArchiveKind::sniff(&path)?;
            let file = File::open(&path).map_err(|e| CapsuleError::Io {
                path: path.clone(),
                source: e,
            })?;
            stage_archive(file, kind, &staging, &config.limits)?;
        }
    }
    let validated = match early {
        Some(v) => v,
        None => {
            let text = read_spec_file(&staging)?;
            validate(&text, shape, &config.defaults)?
        }
    };
    let files = walk_dir(&staging, &config.limits)?;
    let capsule_path = dir.join("capsule.zip");
    let io = |e: std::io::Error| CapsuleError::Io {
        path: capsule_path.clone(),
        source: e,
    };
    let out = BufWriter::new(File::create(&capsule_path).map_err(io)?);
    let (out, built) = build_capsule(&files, &validated.spec, out)?;
    out.into_inner()
        .map_err(|e| io(e.into_error()))?
        .flush()
        .map_err(io)?;
    Ok(Prepared {
        spec: validated.spec,
        sha256: built.sha256,
        capsule_file: Some(capsule_path),
        notes: validated.notes,
    })
}

fn kind_of(bytes: &[u8]) -> Result<ArchiveKind> {
    ArchiveKind::from_magic(&bytes[..bytes.len().min(512)]).ok_or_else(|| {
        SubmitError::InvalidCode(CapsuleError::RejectedSource(
            "the code is not a tar, tar.gz or zip archive".into(),
        ))
    })
}

/// Reads the spec file at the root of a staged archive.
fn read_spec_file(staging: &Path) -> Result<String> {
    for name in SPEC_FILE_IN_ARCHIVE {
        let path = staging.join(name);
        let Ok(file) = File::open(&path) else {
            continue;
        };
        let mut text = String::new();
        file.take(MAX_SPEC_BYTES as u64 + 1)
            .read_to_string(&mut text)
            .map_err(|e| {
                SubmitError::InvalidRequest(format!("{name} is not readable UTF-8 text: {e}"))
            })?;
        return Ok(text);
    }
    Err(SubmitError::InvalidRequest(
        "the archive has no tuneplane.yaml at its root; add the JobSpec there".into(),
    ))
}

/// A private folder removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// Creates a fresh folder under `parent`.
    pub(crate) fn new(parent: &Path) -> Result<Scratch> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = crate::clock::now_nanos();
        let path = parent.join(format!(
            "tuneplane-submit-{}-{nanos}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).map_err(|e| {
            SubmitError::Build(CapsuleError::Io {
                path: path.clone(),
                source: e,
            })
        })?;
        Ok(Scratch(path))
    }

    /// The folder.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
