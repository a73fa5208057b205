//! Entry names: the rules every user path must pass, and collision tracking.
//!
//! Directory walks and archive readers both feed names through [`clean_path`] and [`PathSet`], so a
//! name is judged the same way whatever the code arrived in.

use std::collections::{HashMap, HashSet};

use crate::constants::RESERVED_DIR;

/// Longest path accepted, bytes.
const MAX_PATH: usize = 1024;
/// Longest single path component, bytes.
const MAX_COMPONENT: usize = 255;

/// Checks a raw entry name and returns it normalised (`./a//b` → `a/b`), or why it is refused.
pub fn clean_path(raw: &[u8]) -> Result<String, String> {
    let Ok(name) = std::str::from_utf8(raw) else {
        return Err("name is not valid UTF-8; rename the file".into());
    };
    if name.chars().any(|c| c.is_control()) {
        return Err("name contains control characters; rename the file".into());
    }
    if name.contains('\\') {
        return Err("name contains a backslash; archives must use '/' as the separator".into());
    }
    if name.starts_with('/') || name.as_bytes().get(1) == Some(&b':') {
        return Err("absolute path; archive entries must be relative to the code root".into());
    }
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("path escapes the code root ('..'); remove the entry".into()),
            p if p.len() > MAX_COMPONENT => {
                return Err(format!(
                    "a path component is longer than {MAX_COMPONENT} bytes"
                ));
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err("empty name".into());
    }
    if parts[0] == RESERVED_DIR {
        return Err(format!(
            "the {RESERVED_DIR}/ folder is reserved for the platform; rename it"
        ));
    }
    let clean = parts.join("/");
    if clean.len() > MAX_PATH {
        return Err(format!("path is longer than {MAX_PATH} bytes"));
    }
    Ok(clean)
}

/// The set of names seen so far: catches duplicates, case collisions and file/folder clashes.
#[derive(Default)]
pub struct PathSet {
    /// Lower-cased file path → the path as first seen.
    files: HashMap<String, String>,
    /// Lower-cased folder paths implied by the files and folders seen.
    dirs: HashSet<String>,
}

impl PathSet {
    /// Records a file; refuses duplicates and names that clash with another entry.
    pub fn add_file(&mut self, path: &str) -> Result<(), String> {
        let lower = path.to_lowercase();
        if let Some(prev) = self.files.get(&lower) {
            return Err(if prev == path {
                "duplicate entry; each path may appear only once".into()
            } else {
                format!(
                    "collides with {prev:?} on case-insensitive file systems; rename one of them"
                )
            });
        }
        if self.dirs.contains(&lower) {
            return Err("is a file here but a folder elsewhere in the archive".into());
        }
        self.add_parents(&lower)?;
        self.files.insert(lower, path.to_string());
        Ok(())
    }

    /// Records a folder (and its parents).
    pub fn add_dir(&mut self, path: &str) -> Result<(), String> {
        let lower = path.to_lowercase();
        if self.files.contains_key(&lower) {
            return Err("is a folder here but a file elsewhere in the archive".into());
        }
        self.add_parents(&lower)?;
        self.dirs.insert(lower);
        Ok(())
    }

    fn add_parents(&mut self, lower: &str) -> Result<(), String> {
        let mut end = 0;
        while let Some(i) = lower[end..].find('/') {
            let parent = &lower[..end + i];
            if let Some(f) = self.files.get(parent) {
                return Err(format!("needs {f:?} to be a folder, but it is a file"));
            }
            self.dirs.insert(parent.to_string());
            end += i + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_and_double_slashes_are_normalised() {
        assert_eq!(clean_path(b"./src//a.py").unwrap(), "src/a.py");
    }

    #[test]
    fn hostile_names_are_refused_with_a_reason() {
        for (raw, needle) in [
            (&b"../etc/passwd"[..], "escapes"),
            (b"a/../../b", "escapes"),
            (b"/etc/passwd", "absolute"),
            (b"C:/x", "absolute"),
            (b"a\\b", "backslash"),
            (b".tuneplane/jobspec.json", "reserved"),
            (b"bad\xffname", "UTF-8"),
            (b"line\nbreak", "control"),
            (b"./", "empty"),
        ] {
            let err = clean_path(raw).unwrap_err();
            assert!(err.contains(needle), "{raw:?}: {err}");
        }
    }

    #[test]
    fn duplicates_case_collisions_and_file_folder_clashes_are_refused() {
        let mut s = PathSet::default();
        s.add_file("a/b.py").unwrap();
        assert!(s.add_file("a/b.py").unwrap_err().contains("duplicate"));
        assert!(
            s.add_file("A/B.py")
                .unwrap_err()
                .contains("case-insensitive")
        );
        assert!(s.add_file("a").unwrap_err().contains("folder"));
        assert!(s.add_file("a/b.py/c").unwrap_err().contains("file"));
        s.add_dir("a").unwrap();
        s.add_file("c.py").unwrap();
        assert!(s.add_dir("c.py").is_err());
    }
}
