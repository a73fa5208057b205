//! Verifying a capsule against its manifest.

use std::collections::BTreeMap;
use std::io::{Read, Seek};

use sha2::{Digest, Sha256};

use super::manifest::Manifest;
use super::{CapsuleError, JOBSPEC_PATH, MANIFEST_PATH, RUNNER_PATH, Result};
use crate::spec::JobSpec;

/// A verified capsule.
#[derive(Debug, Clone)]
pub struct Inspected {
    /// Lower-case hex SHA-256 of the whole zip.
    pub sha256: String,
    /// Size of the zip in bytes.
    pub size: u64,
    /// The manifest, verified against every entry.
    pub manifest: Manifest,
    /// The authoritative JobSpec inside.
    pub spec: JobSpec,
}

fn invalid(msg: impl Into<String>) -> CapsuleError {
    CapsuleError::Invalid(msg.into())
}

/// Reads a capsule, checks that every entry matches the manifest (path, size, mode, SHA-256),
/// that nothing is missing or extra, and that the JobSpec parses.
pub fn inspect<R: Read + Seek>(mut reader: R) -> Result<Inspected> {
    let io = |e| CapsuleError::io("<capsule>", e);
    let mut whole = Sha256::new();
    let size = std::io::copy(&mut (&mut reader), &mut HashSink(&mut whole)).map_err(io)?;
    reader.rewind().map_err(io)?;
    let mut zip =
        zip::ZipArchive::new(reader).map_err(|e| invalid(format!("not a readable zip: {e}")))?;

    let manifest: Manifest = {
        let mut entry = zip
            .by_name(MANIFEST_PATH)
            .map_err(|_| invalid(format!("{MANIFEST_PATH} is missing")))?;
        let mut text = String::new();
        entry
            .read_to_string(&mut text)
            .map_err(|e| invalid(format!("{MANIFEST_PATH}: {e}")))?;
        serde_json::from_str(&text)
            .map_err(|e| invalid(format!("{MANIFEST_PATH} is not a manifest: {e}")))?
    };
    let mut expected: BTreeMap<&str, &super::ManifestFile> = manifest
        .files
        .iter()
        .map(|f| (f.path.as_str(), f))
        .collect();
    let mut spec_text = String::new();
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| invalid(format!("entry {i}: {e}")))?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        if name == MANIFEST_PATH {
            continue;
        }
        let Some(want) = expected.remove(name.as_str()) else {
            return Err(invalid(format!("{name}: not listed in the manifest")));
        };
        let mut hasher = Sha256::new();
        let mut data = Vec::new();
        let n = if name == JOBSPEC_PATH {
            entry
                .read_to_end(&mut data)
                .map_err(|e| invalid(format!("{name}: {e}")))?;
            hasher.update(&data);
            spec_text =
                String::from_utf8(data).map_err(|_| invalid(format!("{name}: not UTF-8")))?;
            spec_text.len() as u64
        } else {
            std::io::copy(&mut entry, &mut HashSink(&mut hasher))
                .map_err(|e| invalid(format!("{name}: {e}")))?
        };
        let mode = entry.unix_mode().map(|m| m & 0o7777);
        let sha = hex::encode(hasher.finalize());
        if n != want.size || sha != want.sha256 || mode != Some(want.mode) {
            return Err(invalid(format!(
                "{name}: content does not match the manifest (size {n} vs {}, mode {mode:?} vs {:o}, sha256 {sha} vs {})",
                want.size, want.mode, want.sha256
            )));
        }
    }
    if let Some(missing) = expected.keys().next() {
        return Err(invalid(format!(
            "{missing}: listed in the manifest but missing from the capsule"
        )));
    }
    let runner = manifest
        .files
        .iter()
        .find(|f| f.path == RUNNER_PATH)
        .ok_or_else(|| invalid("the runner is missing"))?;
    if runner.sha256 != manifest.runner_sha256 {
        return Err(invalid("runner_sha256 does not match the runner entry"));
    }
    let spec: JobSpec =
        serde_json::from_str(&spec_text).map_err(|e| invalid(format!("{JOBSPEC_PATH}: {e}")))?;
    Ok(Inspected {
        sha256: hex::encode(whole.finalize()),
        size,
        manifest,
        spec,
    })
}

struct HashSink<'a>(&'a mut Sha256);

impl std::io::Write for HashSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
