//! Prepares a RayJob's working directory the way Ray does for a remote `working_dir`: fetch the
//! archive (HTTP(S) or `file:///abs/path.zip`), unzip it safely, and strip a single top-level folder.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

/// A prepared run directory and the runtime env's `env_vars`.
pub(super) struct Prepared {
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
}

/// Reads the runtime env and prepares `<root>/working_dir`.
pub(super) async fn working_dir(runtime_env_yaml: &str, root: &Path) -> Result<Prepared, String> {
    let env: Value = if runtime_env_yaml.trim().is_empty() {
        Value::Null
    } else {
        yaml_serde::from_str(runtime_env_yaml)
            .map_err(|e| format!("runtimeEnvYAML is not valid YAML: {e}"))?
    };
    let env_vars = env
        .get("env_vars")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_string),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let dir = root.join("working_dir");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if let Some(url) = env.get("working_dir").and_then(Value::as_str) {
        let bytes = fetch(url).await?;
        unzip(&bytes, &dir)?;
    }
    Ok(Prepared { dir, env: env_vars })
}

async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let path_part = url.split(['?', '#']).next().unwrap_or_default();
    if !path_part.ends_with(".zip") {
        return Err(format!(
            "working_dir {url:?}: only .zip archives are supported"
        ));
    }
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') || path.starts_with("//") {
            return Err(format!(
                "working_dir {url:?} must be file:///absolute/path.zip"
            ));
        }
        return std::fs::read(path_part.trim_start_matches("file://"))
            .map_err(|e| format!("cannot read {path}: {e}"));
    }
    if url.starts_with("http://") || url.starts_with("https://") {
        let resp = reqwest::get(url)
            .await
            .map_err(|e| format!("cannot download working_dir: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!(
                "cannot download working_dir: HTTP {}",
                resp.status()
            ));
        }
        return resp
            .bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(|e| format!("cannot download working_dir: {e}"));
    }
    Err(format!("working_dir {url:?}: unsupported URL scheme"))
}

/// Unzips into `dir`, refusing unsafe names; a single top-level folder is stripped like Ray does.
pub(super) fn unzip(bytes: &[u8], dir: &Path) -> Result<(), String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("working_dir is not a zip: {e}"))?;
    let mut names = Vec::new();
    for i in 0..archive.len() {
        let entry = archive
            .by_index(i)
            .map_err(|e| format!("bad zip entry: {e}"))?;
        let raw = entry
            .name()
            .map_err(|e| format!("bad zip entry name: {e}"))?
            .to_string();
        let path = PathBuf::from(&raw);
        if path
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(format!("unsafe path in working_dir archive: {raw}"));
        }
        names.push((path, entry.is_dir()));
    }
    let tops: std::collections::BTreeSet<_> = names
        .iter()
        .filter_map(|(p, _)| p.components().next())
        .collect();
    let strip = tops.len() == 1
        && names
            .iter()
            .all(|(p, is_dir)| p.components().count() > 1 || *is_dir);
    for (i, (path, is_dir)) in names.iter().enumerate() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| format!("bad zip entry: {e}"))?;
        let rel: PathBuf = if strip {
            path.components().skip(1).collect()
        } else {
            path.clone()
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let target = dir.join(rel);
        if *is_dir {
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        let mut out = std::fs::File::create(&target)
            .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| format!("cannot unpack {}: {e}", target.display()))?;
        #[cfg(unix)]
        if let Some(mode) = entry.unix_mode() {
            use std::os::unix::fs::PermissionsExt;
            let _ =
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode & 0o755));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(files: &[(&str, &str)]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, body) in files {
            let _ = w.start_file(*name, zip::write::SimpleFileOptions::default());
            let _ = w.write_all(body.as_bytes());
        }
        w.finish().map(|c| c.into_inner()).unwrap_or_default()
    }

    #[test]
    fn single_top_level_folder_is_stripped_and_root_files_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a");
        assert_eq!(
            unzip(
                &zip_of(&[("proj/train.py", "x"), ("proj/lib/m.py", "y")]),
                &dir
            ),
            Ok(())
        );
        assert!(dir.join("train.py").exists());
        let dir = tmp.path().join("b");
        assert_eq!(
            unzip(
                &zip_of(&[("train.py", "x"), (".tuneplane/jobspec.json", "{}")]),
                &dir
            ),
            Ok(())
        );
        assert!(dir.join(".tuneplane/jobspec.json").exists());
    }

    #[test]
    fn unsafe_entries_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(unzip(&zip_of(&[("../evil", "x")]), tmp.path()).is_err());
    }
}
