//! The image map of the real execution mode: which runtime on this machine plays each container
//! image. A runtime is a set of folders put first on `PATH` (a Python virtualenv's `bin`, say)
//! and environment variables; an image that no entry matches fails to pull, like an image that
//! does not exist.
//!
//! ```yaml
//! runtimes:
//!   ray: {path: ["${TUNEPLANE_RUNTIMES}/ray/bin"], env: {RAY_USAGE_STATS_ENABLED: "0"}}
//! images:
//!   - {image: "rayproject/ray:*", runtime: ray}
//! ```
//!
//! `image` patterns may hold `*` (any run of characters); the first matching entry wins.
//! `${NAME}` in paths and values is replaced by the agent's environment variable `NAME`, and a
//! relative path is taken from the map file's folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A runtime as the file spells it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuntimeSpec {
    #[serde(default)]
    path: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    entrypoint: Vec<String>,
}

/// One image pattern as the file spells it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageSpec {
    image: String,
    runtime: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    runtimes: BTreeMap<String, RuntimeSpec>,
    images: Vec<ImageSpec>,
}

/// What a container of a mapped image runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// The runtime's name in the map.
    pub name: String,
    /// Folders first on `PATH`.
    pub path: Vec<PathBuf>,
    /// Environment variables (before the container's own).
    pub env: Vec<(String, String)>,
    /// The image's entrypoint: the command of a container that sets none.
    pub entrypoint: Vec<String>,
}

/// The parsed image map.
#[derive(Debug, Clone, Default)]
pub struct ImageMap {
    entries: Vec<(String, Runtime)>,
}

/// Whether `image` matches `pattern` (`*` matches any run of characters).
fn glob(pattern: &str, image: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == image;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !image.starts_with(first) || image.len() < first.len() + last.len() || !image.ends_with(last)
    {
        return false;
    }
    let mut rest = &image[first.len()..image.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Replaces `${NAME}` with `lookup(NAME)`; an unknown name is an error.
fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {text:?}"))?;
        let name = &after[..end];
        let value = lookup(name).ok_or_else(|| {
            format!("{text:?} uses ${{{name}}}, which is not set in the agent's environment")
        })?;
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl ImageMap {
    /// Reads the map at `path`, with `${NAME}` from the process environment.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the image map {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let dir = std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf());
        Self::parse(&text, base, &|n| {
            if n == "IMAGE_MAP_DIR" {
                Some(dir.display().to_string())
            } else {
                std::env::var(n).ok()
            }
        })
        .map_err(|e| format!("image map {}: {e}", path.display()))
    }

    /// Parses a map; relative paths are taken from `base`.
    pub fn parse(
        text: &str,
        base: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let file: MapFile = yaml_serde::from_str(text).map_err(|e| e.to_string())?;
        let mut runtimes = BTreeMap::new();
        for (name, spec) in &file.runtimes {
            let path = spec
                .path
                .iter()
                .map(|p| expand(p, lookup).map(|p| base.join(p)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("runtimes.{name}.path: {e}"))?;
            let env = spec
                .env
                .iter()
                .map(|(k, v)| expand(v, lookup).map(|v| (k.clone(), v)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("runtimes.{name}.env: {e}"))?;
            let entrypoint = spec
                .entrypoint
                .iter()
                .map(|a| expand(a, lookup))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("runtimes.{name}.entrypoint: {e}"))?;
            runtimes.insert(
                name.clone(),
                Runtime {
                    name: name.clone(),
                    path,
                    env,
                    entrypoint,
                },
            );
        }
        let entries = file
            .images
            .iter()
            .enumerate()
            .map(|(i, e)| {
                runtimes
                    .get(&e.runtime)
                    .map(|r| (e.image.clone(), r.clone()))
                    .ok_or_else(|| {
                        format!(
                            "images[{i}].runtime: unknown runtime {:?}; known: {}",
                            e.runtime,
                            runtimes.keys().cloned().collect::<Vec<_>>().join(", ")
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { entries })
    }

    /// The runtime that plays `image`, if any entry matches.
    pub fn runtime(&self, image: &str) -> Option<&Runtime> {
        self.entries
            .iter()
            .find(|(pattern, _)| glob(pattern, image))
            .map(|(_, r)| r)
    }

    /// The runtimes whose first `PATH` folder does not exist (not installed yet).
    pub fn missing(&self) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = self
            .entries
            .iter()
            .filter_map(|(_, r)| {
                r.path
                    .first()
                    .filter(|p| !p.is_dir())
                    .map(|p| (r.name.clone(), p.clone()))
            })
            .collect();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = r#"
runtimes:
  ray: {path: ["${RT}/ray/bin"], env: {RAY_USAGE_STATS_ENABLED: "0"}}
  python: {path: ["py/bin"]}
images:
  - {image: "rayproject/ray:*", runtime: ray}
  - {image: "python:3*-slim", runtime: python}
"#;

    fn lookup(name: &str) -> Option<String> {
        (name == "RT").then(|| "/rt".to_string())
    }

    #[test]
    fn first_matching_pattern_gives_the_runtime() {
        let map = ImageMap::parse(MAP, Path::new("/base"), &lookup).unwrap();
        let ray = map.runtime("rayproject/ray:2.60.0-gpu").unwrap();
        assert_eq!(ray.path, [PathBuf::from("/rt/ray/bin")]);
        assert_eq!(
            ray.env,
            [("RAY_USAGE_STATS_ENABLED".to_string(), "0".to_string())]
        );
        assert_eq!(
            map.runtime("python:3.12-slim").unwrap().path,
            [PathBuf::from("/base/py/bin")]
        );
        assert!(map.runtime("python:3.12").is_none());
        assert!(map.runtime("registry.invalid/x:1").is_none());
    }

    #[test]
    fn errors_name_the_field() {
        let bad = MAP.replace("runtime: python", "runtime: pyhton");
        let err = ImageMap::parse(&bad, Path::new("/"), &lookup).unwrap_err();
        assert!(
            err.contains("images[1].runtime: unknown runtime \"pyhton\""),
            "{err}"
        );
        let err = ImageMap::parse(MAP, Path::new("/"), &|_| None).unwrap_err();
        assert!(
            err.contains("runtimes.ray.path") && err.contains("${RT}"),
            "{err}"
        );
    }

    #[test]
    fn globs_match_runs_of_characters() {
        assert!(glob("a*b*c", "aXXbYc"));
        assert!(!glob("a*b*c", "aXXcYb"));
        assert!(glob("*", "anything"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exact2"));
    }
}
