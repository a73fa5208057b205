//! A job's outputs and checkpoints in the blob store (docs/design.md §4, "Outputs and
//! checkpoints").
//!
//! - Outputs: `outputs/<tenant>/<job>/<path>`, what the job left in `TUNEPLANE_OUTPUT_DIR`.
//! - Checkpoints: `checkpoints/<tenant>/<job>/<name>/<path>`, one folder per checkpoint of
//!   `TUNEPLANE_CHECKPOINT_DIR`. A checkpoint is complete once its marker
//!   `checkpoints/<tenant>/<job>/<name>/.complete` exists: the API writes it (with the list of
//!   files) after the runner uploaded every file, so a folder without it is never offered for
//!   resume. Only the newest `checkpoints.keep` complete checkpoints are kept; an older one loses
//!   its marker first, then its files, so a pruning cut short leaves no checkpoint that looks
//!   complete but is not.
//!
//! The runner names what it writes by a path relative to the job: `outputs/<path>` or
//! `checkpoints/<name>/<path>` ([`JobPath`]); anything else, or a path that would leave the job's
//! folders, is refused.

use serde::{Deserialize, Serialize};

use crate::grant::{
    COMPLETE_MARKER, check_checkpoint_name, check_relative_path, checkpoints_prefix, outputs_prefix,
};
use crate::store::{BlobStore, Result as StoreResult};

/// Most objects a listing of one job's outputs or checkpoints reads.
pub const MAX_LISTED: usize = 10_000;

/// A path the runner names inside its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobPath {
    /// `outputs/<path>`.
    Output(String),
    /// `checkpoints/<name>/<path>`.
    Checkpoint {
        /// The checkpoint (its folder's name).
        name: String,
        /// The file inside it.
        path: String,
    },
}

impl JobPath {
    /// Parses `outputs/<path>` or `checkpoints/<name>/<path>`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<JobPath, String> {
        if let Some(rest) = text.strip_prefix("outputs/") {
            check_relative_path(rest)?;
            return Ok(JobPath::Output(rest.to_owned()));
        }
        if let Some(rest) = text.strip_prefix("checkpoints/") {
            let (name, path) = rest
                .split_once('/')
                .ok_or_else(|| format!("{text:?} names no file inside the checkpoint"))?;
            check_checkpoint_name(name)?;
            check_relative_path(path)?;
            if path == COMPLETE_MARKER {
                return Err(format!(
                    "{text:?}: the {COMPLETE_MARKER} marker is the platform's to write (POST .../complete)"
                ));
            }
            return Ok(JobPath::Checkpoint {
                name: name.to_owned(),
                path: path.to_owned(),
            });
        }
        Err(format!(
            "{text:?} must start with outputs/ or checkpoints/<name>/"
        ))
    }

    /// The blob key of this path for job `job_id` of `tenant`.
    pub fn key(&self, tenant: &str, job_id: &str) -> String {
        match self {
            JobPath::Output(path) => format!("{}{path}", outputs_prefix(tenant, job_id)),
            JobPath::Checkpoint { name, path } => {
                format!("{}{name}/{path}", checkpoints_prefix(tenant, job_id))
            }
        }
    }
}

/// One file of a checkpoint or of the outputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the outputs folder or to the checkpoint's folder.
    pub path: String,
    /// Bytes.
    pub size: u64,
}

/// The marker of a complete checkpoint (its `.complete` object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The folder's name.
    pub name: String,
    /// The attempt that wrote it.
    pub attempt: u32,
    /// When the API recorded it complete (Unix ms).
    pub completed_at_ms: i64,
    /// Its files.
    pub files: Vec<FileEntry>,
}

impl Checkpoint {
    /// Bytes in all its files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

fn marker_key(tenant: &str, job_id: &str, name: &str) -> String {
    format!(
        "{}{name}/{COMPLETE_MARKER}",
        checkpoints_prefix(tenant, job_id)
    )
}

/// The job's outputs, relative paths with sizes, sorted (at most [`MAX_LISTED`]).
pub async fn list_outputs(
    blobs: &dyn BlobStore,
    tenant: &str,
    job_id: &str,
) -> StoreResult<Vec<FileEntry>> {
    let prefix = outputs_prefix(tenant, job_id);
    Ok(blobs
        .list(&prefix, MAX_LISTED)
        .await?
        .into_iter()
        .filter_map(|(key, size)| {
            key.strip_prefix(&prefix).map(|p| FileEntry {
                path: p.to_owned(),
                size,
            })
        })
        .collect())
}

/// The job's complete checkpoints, oldest first (by completion, then name).
pub async fn list_checkpoints(
    blobs: &dyn BlobStore,
    tenant: &str,
    job_id: &str,
) -> StoreResult<Vec<Checkpoint>> {
    let prefix = checkpoints_prefix(tenant, job_id);
    let mut found = Vec::new();
    for (key, _) in blobs.list(&prefix, MAX_LISTED).await? {
        let Some(rest) = key.strip_prefix(&prefix) else {
            continue;
        };
        let Some((name, COMPLETE_MARKER)) = rest.split_once('/') else {
            continue;
        };
        // A marker that vanished between list and get was being pruned.
        let Some(bytes) = blobs.get(&key).await? else {
            continue;
        };
        // A marker that does not parse (or names another folder) is no checkpoint.
        if let Ok(c) = serde_json::from_slice::<Checkpoint>(&bytes)
            && c.name == name
        {
            found.push(c);
        }
    }
    found.sort_by(|a, b| (a.completed_at_ms, &a.name).cmp(&(b.completed_at_ms, &b.name)));
    Ok(found)
}

/// The newest complete checkpoint, if any.
pub async fn latest_checkpoint(
    blobs: &dyn BlobStore,
    tenant: &str,
    job_id: &str,
) -> StoreResult<Option<Checkpoint>> {
    Ok(list_checkpoints(blobs, tenant, job_id).await?.pop())
}

/// What [`complete_checkpoint`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Completed {
    /// The marker written.
    pub checkpoint: Checkpoint,
    /// Names of the checkpoints kept, oldest first.
    pub kept: Vec<String>,
    /// Names of the older checkpoints deleted.
    pub deleted: Vec<String>,
}

/// Records checkpoint `name` complete with the files uploaded under it, then keeps only the
/// newest `keep` complete checkpoints. An empty checkpoint is refused (the runner uploads every
/// file first).
pub async fn complete_checkpoint(
    blobs: &dyn BlobStore,
    tenant: &str,
    job_id: &str,
    name: &str,
    attempt: u32,
    now_ms: i64,
    keep: usize,
) -> Result<Completed, CompleteError> {
    check_checkpoint_name(name).map_err(CompleteError::Invalid)?;
    let folder = format!("{}{name}/", checkpoints_prefix(tenant, job_id));
    let files: Vec<FileEntry> = blobs
        .list(&folder, MAX_LISTED)
        .await?
        .into_iter()
        .filter_map(|(key, size)| {
            let path = key.strip_prefix(&folder)?;
            (path != COMPLETE_MARKER).then(|| FileEntry {
                path: path.to_owned(),
                size,
            })
        })
        .collect();
    if files.is_empty() {
        return Err(CompleteError::Invalid(format!(
            "checkpoint {name:?} has no uploaded files; upload them first"
        )));
    }
    let checkpoint = Checkpoint {
        name: name.to_owned(),
        attempt,
        completed_at_ms: now_ms,
        files,
    };
    let body = serde_json::to_vec(&checkpoint).unwrap_or_default();
    blobs.put(&marker_key(tenant, job_id, name), body).await?;
    let all = list_checkpoints(blobs, tenant, job_id).await?;
    let cut = all.len().saturating_sub(keep.max(1));
    let mut deleted = Vec::new();
    for old in &all[..cut] {
        // The marker first: a pruning cut short leaves files without a marker, which nothing
        // offers for resume, never a marker without its files.
        blobs.delete(&marker_key(tenant, job_id, &old.name)).await?;
        let old_folder = format!("{}{}/", checkpoints_prefix(tenant, job_id), old.name);
        for (key, _) in blobs.list(&old_folder, MAX_LISTED).await? {
            blobs.delete(&key).await?;
        }
        deleted.push(old.name.clone());
    }
    Ok(Completed {
        checkpoint,
        kept: all[cut..].iter().map(|c| c.name.clone()).collect(),
        deleted,
    })
}

/// Why a checkpoint could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// The name or the folder is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The blob store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_paths_map_into_the_jobs_own_folders_only() {
        assert_eq!(
            JobPath::parse("outputs/model/w.bin").map(|p| p.key("acme", "j1")),
            Ok("outputs/acme/j1/model/w.bin".to_owned())
        );
        assert_eq!(
            JobPath::parse("checkpoints/step-5/opt.pt").map(|p| p.key("acme", "j1")),
            Ok("checkpoints/acme/j1/step-5/opt.pt".to_owned())
        );
        for bad in [
            "outputs/../../other/j2/x",
            "outputs//x",
            "checkpoints/step-5",
            "checkpoints/../x/y",
            "checkpoints/step-5/.complete",
            "logs/j1/logs.tar.gz",
            "/outputs/x",
        ] {
            assert!(JobPath::parse(bad).is_err(), "{bad}");
        }
    }
}
