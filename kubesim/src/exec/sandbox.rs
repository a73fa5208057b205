//! A container's sandbox on a node of the node agent's real execution mode: the pod's network
//! namespace (entered with `ip netns exec`, which also gives the container a mount namespace of its
//! own), and in that mount namespace the pod's folders really mounted where the pod spec says:
//! its volumes at their mount paths, a private `/tmp`, the cluster's hosts file as `/etc/hosts` and
//! a resolver file with no name server (names outside the cluster do not resolve). The image's
//! runtime (from the agent's image map) comes first on `PATH`.
//!
//! Host folders reach the container through one bind mount of the agent's data folder at
//! [`STAGE`], made before anything else is mounted: a pod folder under the host's `/tmp` stays
//! reachable after `/tmp` itself is replaced. The runtime's own folders ([`Sandbox::keep`]) that
//! lie under the host's `/tmp` are mounted back at their paths from [`HOST_TMP`] after that.

use std::path::{Path, PathBuf};

/// Where the agent's data folder appears inside every container.
pub const STAGE: &str = "/run/tuneplane-agent";
/// Where the host's `/tmp` appears inside a container that needs folders under it.
pub const HOST_TMP: &str = "/run/tuneplane-host-tmp";

/// How a container of a real pod runs.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The pod's network namespace (a name under `/var/run/netns`).
    pub netns: String,
    /// The agent's data folder: every host path the container uses lies under it.
    pub stage: PathBuf,
    /// The cluster's hosts file (service and pod names → pod IPs).
    pub hosts: PathBuf,
    /// The resolver file the container sees as `/etc/resolv.conf`.
    pub resolv: PathBuf,
    /// The image runtime's `bin` folders, first on `PATH`.
    pub bin: Vec<PathBuf>,
    /// The image runtime's environment (before the container's own).
    pub env: Vec<(String, String)>,
    /// Host folders the runtime needs at their own paths (its virtualenv, its entrypoint's
    /// folder), also when they lie under the `/tmp` the container gets a private one of.
    pub keep: Vec<PathBuf>,
}

/// `text` quoted for bash (single quotes).
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl Sandbox {
    /// `PATH` of the container: the runtime's folders, then the host's usual ones.
    pub fn path_env(&self) -> String {
        let mut parts: Vec<String> = self.bin.iter().map(|b| b.display().to_string()).collect();
        parts.push("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
        parts.join(":")
    }

    /// Where host path `path` (under the stage) appears inside the container.
    pub fn inside(&self, path: &Path) -> Result<String, String> {
        let rel = path.strip_prefix(&self.stage).map_err(|_| {
            format!(
                "{} is not under the agent's data folder {}",
                path.display(),
                self.stage.display()
            )
        })?;
        Ok(Path::new(STAGE).join(rel).display().to_string())
    }

    /// The bash script that mounts the pod's folders for a container whose pod folder is `root`,
    /// volume `mounts` (path in the pod → host folder) and working directory `workdir`, then runs
    /// the container's command (its arguments).
    pub fn prelude(
        &self,
        root: &Path,
        mounts: &[(String, PathBuf)],
        workdir: &str,
    ) -> Result<String, String> {
        let tmp = root.join("tmp");
        std::fs::create_dir_all(&tmp)
            .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
        let under_tmp: Vec<&Path> = self
            .keep
            .iter()
            .filter_map(|k| k.strip_prefix("/tmp").ok())
            .filter(|rel| !rel.as_os_str().is_empty())
            .collect();
        let mut lines = vec![
            "set -e".to_string(),
            "mount --make-rprivate /".to_string(),
            format!("mkdir -p {STAGE}"),
            format!(
                "mount --bind {} {STAGE}",
                quote(&self.stage.display().to_string())
            ),
        ];
        if !under_tmp.is_empty() {
            lines.push(format!("mkdir -p {HOST_TMP}"));
            lines.push(format!("mount --bind /tmp {HOST_TMP}"));
        }
        lines.push(format!("mount --bind {} /tmp", quote(&self.inside(&tmp)?)));
        for rel in under_tmp {
            let (host, path) = (Path::new(HOST_TMP).join(rel), Path::new("/tmp").join(rel));
            let path = quote(&path.display().to_string());
            lines.push(format!("mkdir -p {path}"));
            lines.push(format!(
                "mount --bind {} {path}",
                quote(&host.display().to_string())
            ));
        }
        lines.push(format!(
            "mount --bind {} /etc/hosts",
            quote(&self.inside(&self.hosts)?)
        ));
        lines.push(format!(
            "mount --bind {} /etc/resolv.conf",
            quote(&self.inside(&self.resolv)?)
        ));
        // Parents before children.
        let mut ordered: Vec<&(String, PathBuf)> = mounts.iter().collect();
        ordered.sort_by_key(|(p, _)| p.len());
        for (path, host) in ordered {
            let path = quote(path);
            lines.push(format!("mkdir -p {path}"));
            lines.push(format!(
                "mount --bind {} {path}",
                quote(&self.inside(host)?)
            ));
        }
        let workdir = quote(if workdir.is_empty() { "/" } else { workdir });
        lines.push(format!("mkdir -p {workdir}"));
        lines.push(format!("cd {workdir}"));
        lines.push("set +e".into());
        lines.push("exec \"$@\"".into());
        Ok(lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> Sandbox {
        Sandbox {
            netns: "tp-abc".into(),
            stage: PathBuf::from("/data/agent"),
            hosts: PathBuf::from("/data/agent/hosts"),
            resolv: PathBuf::from("/data/agent/resolv.conf"),
            bin: vec![PathBuf::from("/rt/ray/bin")],
            env: Vec::new(),
            keep: Vec::new(),
        }
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
    }

    #[test]
    fn host_paths_are_reached_through_the_stage_and_parents_mount_first() {
        let sb = sandbox();
        assert_eq!(
            sb.inside(Path::new("/data/agent/pods/x/tmp")).unwrap(),
            "/run/tuneplane-agent/pods/x/tmp"
        );
        assert!(sb.inside(Path::new("/elsewhere")).is_err());
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox {
            stage: dir.path().to_path_buf(),
            hosts: dir.path().join("hosts"),
            resolv: dir.path().join("resolv.conf"),
            ..sb
        };
        let root = dir.path().join("pods/p");
        let mounts = vec![
            (
                "/tuneplane/capsule/inner".to_string(),
                root.join("volumes/b"),
            ),
            ("/tuneplane/capsule".to_string(), root.join("volumes/a")),
        ];
        let script = sb.prelude(&root, &mounts, "/tuneplane/capsule").unwrap();
        let outer = script
            .find("mount --bind '/run/tuneplane-agent/pods/p/volumes/a' '/tuneplane/capsule'")
            .unwrap();
        let inner = script.find("'/tuneplane/capsule/inner'").unwrap();
        assert!(outer < inner, "{script}");
        assert!(script.contains("mount --bind '/run/tuneplane-agent/pods/p/tmp' /tmp"));
        assert!(script.ends_with("cd '/tuneplane/capsule'\nset +e\nexec \"$@\""));
        assert_eq!(sb.path_env().split(':').next(), Some("/rt/ray/bin"));
        assert!(
            !script.contains(HOST_TMP),
            "nothing to keep under /tmp: {script}"
        );
    }

    #[test]
    fn runtime_folders_under_tmp_are_mounted_back_after_the_private_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let sb = Sandbox {
            stage: dir.path().to_path_buf(),
            hosts: dir.path().join("hosts"),
            resolv: dir.path().join("resolv.conf"),
            keep: vec![
                PathBuf::from("/tmp/checkout/testenv/playground"),
                PathBuf::from("/opt/rt"),
            ],
            ..sandbox()
        };
        let script = sb.prelude(&dir.path().join("pods/p"), &[], "/").unwrap();
        let host = script
            .find("mount --bind /tmp /run/tuneplane-host-tmp")
            .unwrap();
        let private = script.find("/pods/p/tmp' /tmp").unwrap();
        let back = script
            .find("mount --bind '/run/tuneplane-host-tmp/checkout/testenv/playground' '/tmp/checkout/testenv/playground'")
            .unwrap();
        assert!(host < private && private < back, "{script}");
        assert!(
            !script.contains("/opt/rt"),
            "only folders under /tmp are mounted back: {script}"
        );
    }
}
