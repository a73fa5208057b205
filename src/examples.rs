//! The examples (`examples/` of the source tree) built into the binary, so `tuneplane demo` and
//! `tuneplane dev` work from any directory after `cargo install`.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Every file of `examples/`: its path below that folder and its text.
pub const FILES: &[(&str, &str)] = &[
    (
        "bad-image/train.py",
        include_str!("../examples/bad-image/train.py"),
    ),
    (
        "bad-image/tuneplane.yaml",
        include_str!("../examples/bad-image/tuneplane.yaml"),
    ),
    ("fleet.yaml", include_str!("../examples/fleet.yaml")),
    (
        "hello-cpu/greeting.py",
        include_str!("../examples/hello-cpu/greeting.py"),
    ),
    (
        "hello-cpu/hello.py",
        include_str!("../examples/hello-cpu/hello.py"),
    ),
    (
        "hello-cpu/tuneplane.yaml",
        include_str!("../examples/hello-cpu/tuneplane.yaml"),
    ),
    (
        "pipeline/evaluate/evaluate.py",
        include_str!("../examples/pipeline/evaluate/evaluate.py"),
    ),
    (
        "pipeline/evaluate/tuneplane.yaml",
        include_str!("../examples/pipeline/evaluate/tuneplane.yaml"),
    ),
    (
        "pipeline/pipeline.yaml",
        include_str!("../examples/pipeline/pipeline.yaml"),
    ),
    (
        "pipeline/prepare/prepare.py",
        include_str!("../examples/pipeline/prepare/prepare.py"),
    ),
    (
        "pipeline/prepare/tuneplane.yaml",
        include_str!("../examples/pipeline/prepare/tuneplane.yaml"),
    ),
    (
        "pipeline/train/train.py",
        include_str!("../examples/pipeline/train/train.py"),
    ),
    (
        "pipeline/train/tuneplane.yaml",
        include_str!("../examples/pipeline/train/tuneplane.yaml"),
    ),
    (
        "queued-behind/train.py",
        include_str!("../examples/queued-behind/train.py"),
    ),
    (
        "queued-behind/tuneplane.yaml",
        include_str!("../examples/queued-behind/tuneplane.yaml"),
    ),
    (
        "ray-multipool/model.py",
        include_str!("../examples/ray-multipool/model.py"),
    ),
    (
        "ray-multipool/train.py",
        include_str!("../examples/ray-multipool/train.py"),
    ),
    (
        "ray-multipool/tuneplane.yaml",
        include_str!("../examples/ray-multipool/tuneplane.yaml"),
    ),
    (
        "resume/train.py",
        include_str!("../examples/resume/train.py"),
    ),
    (
        "resume/tuneplane.yaml",
        include_str!("../examples/resume/tuneplane.yaml"),
    ),
    ("sweep/sweep.py", include_str!("../examples/sweep/sweep.py")),
    (
        "sweep/tuneplane.yaml",
        include_str!("../examples/sweep/tuneplane.yaml"),
    ),
    (
        "too-big/train.py",
        include_str!("../examples/too-big/train.py"),
    ),
    (
        "too-big/tuneplane.yaml",
        include_str!("../examples/too-big/tuneplane.yaml"),
    ),
];

/// The fleet file the examples are written for.
pub fn fleet_yaml() -> &'static str {
    FILES
        .iter()
        .find(|(path, _)| *path == "fleet.yaml")
        .map_or("", |(_, text)| text)
}

/// Writes the built-in examples into `dir` (created if needed) and returns it.
pub fn write_to(dir: &Path) -> anyhow::Result<PathBuf> {
    for (path, text) in FILES {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&target, text)
            .with_context(|| format!("cannot write {}", target.display()))?;
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list is complete: a file added to `examples/` without a line here fails this test.
    #[test]
    fn every_example_file_is_built_in() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    on_disk.push(p.strip_prefix(&root).unwrap_or(&p).display().to_string());
                }
            }
        }
        on_disk.sort();
        let built_in: Vec<String> = FILES.iter().map(|(p, _)| (*p).to_owned()).collect();
        assert_eq!(on_disk, built_in);
        assert!(fleet_yaml().contains("node_groups"));
    }
}
