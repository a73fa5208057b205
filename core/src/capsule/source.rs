//! Walking a directory of user code: every entry checked, files listed in sorted path order.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::paths::{PathSet, clean_path};
use super::{CapsuleError, Limits, Result};

/// One regular file of the user's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Path inside the capsule, `/`-separated.
    pub path: String,
    /// Where to read it.
    pub abs: PathBuf,
    /// Size when listed; a file that changes size while it is read is an error.
    pub size: u64,
    /// 0o755 if any execute bit is set, else 0o644.
    pub mode: u32,
}

/// Normalised mode: executables 0755, everything else 0644.
pub fn normal_mode(mode: u32) -> u32 {
    if mode & 0o111 != 0 { 0o755 } else { 0o644 }
}

/// Lists the regular files under `root`, sorted by capsule path, refusing symlinks, devices,
/// FIFOs, sockets, bad names, the reserved folder and anything past `limits`.
pub fn walk_dir(root: &Path, limits: &Limits) -> Result<Vec<SourceFile>> {
    let meta = fs::metadata(root).map_err(|e| CapsuleError::io(root, e))?;
    if !meta.is_dir() {
        return Err(CapsuleError::RejectedSource(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let mut w = Walk {
        limits,
        files: Vec::new(),
        names: PathSet::default(),
        entries: 0,
        total: 0,
    };
    w.dir(root, "")?;
    if w.files.is_empty() {
        return Err(CapsuleError::RejectedSource(
            "the code has no files; a capsule needs at least one file (e.g. the script the entrypoint runs)".into(),
        ));
    }
    w.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(w.files)
}

struct Walk<'a> {
    limits: &'a Limits,
    files: Vec<SourceFile>,
    names: PathSet,
    entries: usize,
    total: u64,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Path, prefix: &str) -> Result<()> {
        let rd = fs::read_dir(dir).map_err(|e| CapsuleError::io(dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| CapsuleError::io(dir, e))?;
            let raw = entry.file_name();
            let mut rel = prefix.as_bytes().to_vec();
            rel.extend_from_slice(raw.as_bytes());
            let shown = String::from_utf8_lossy(&rel).into_owned();
            let path = clean_path(&rel).map_err(|r| CapsuleError::rejected(&shown, r))?;
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(CapsuleError::RejectedSource(format!(
                    "more than {} entries; package fewer files (e.g. leave data sets out of the code)",
                    self.limits.max_entries
                )));
            }
            let abs = entry.path();
            let meta = fs::symlink_metadata(&abs).map_err(|e| CapsuleError::io(&abs, e))?;
            let ft = meta.file_type();
            if ft.is_symlink() {
                return Err(CapsuleError::rejected(
                    shown,
                    "symbolic links are not allowed; copy the file in instead",
                ));
            } else if ft.is_dir() {
                self.names
                    .add_dir(&path)
                    .map_err(|r| CapsuleError::rejected(&shown, r))?;
                self.dir(&abs, &format!("{path}/"))?;
            } else if ft.is_file() {
                self.names
                    .add_file(&path)
                    .map_err(|r| CapsuleError::rejected(&shown, r))?;
                self.total += meta.len();
                if self.total > self.limits.max_total_bytes {
                    return Err(CapsuleError::RejectedSource(format!(
                        "more than {} bytes of code; keep data sets out of the code and load them at run time",
                        self.limits.max_total_bytes
                    )));
                }
                let mode = normal_mode(meta.permissions().mode());
                self.files.push(SourceFile {
                    path,
                    abs,
                    size: meta.len(),
                    mode,
                });
            } else {
                return Err(CapsuleError::rejected(
                    shown,
                    "device files, FIFOs and sockets are not allowed",
                ));
            }
        }
        Ok(())
    }
}
