//! One executed process: what to run (from a pod or a RayJob submitter), where, with which env,
//! and the run itself with output streamed into the pod's log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

use super::sandbox::Sandbox;
use super::{RAYJOB_ENTRYPOINT, RAYJOB_RUNTIME_ENV, prepare};
use crate::json::{self, str_at};
use crate::store::Store;

/// Where a container's output goes, as it comes.
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// How a running container is to be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// As the kubelet stops a container: SIGTERM, then SIGKILL after the grace period.
    Graceful,
    /// At once with SIGKILL, as the processes of a machine that is lost end.
    Now,
}

/// What runs for a pod.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    ns: String,
    pod: String,
    container: String,
    root: PathBuf,
    kind: Kind,
    /// How long a stopped process gets between SIGTERM and SIGKILL.
    grace: std::time::Duration,
}

#[derive(Debug, Clone)]
enum Kind {
    /// A pod's container: argv, env and working directory as the pod spec says (paths inside the
    /// pod), and its volume mounts (path inside the pod → host folder, longest path first).
    Container {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        workdir: String,
        mounts: Vec<(String, PathBuf)>,
    },
    /// A RayJob entrypoint with its runtime env YAML, and the submitter container's plain env
    /// (the stand-in for the head's, which a real driver inherits).
    RayJob {
        entrypoint: String,
        runtime_env: String,
        env: Vec<(String, String)>,
    },
}

/// Maps a path inside the pod to the host: under a mount it goes to that mount's folder,
/// anything else goes under the pod's root folder.
fn map_path(path: &str, mounts: &[(String, PathBuf)], root: &Path) -> PathBuf {
    for (mount, host) in mounts {
        if let Some(rest) = path.strip_prefix(mount.as_str())
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return host.join(rest.trim_start_matches('/'));
        }
    }
    root.join("rootfs").join(path.trim_start_matches('/'))
}

/// Rewrites every occurrence of a mount path (at a path boundary) to its host folder.
fn rewrite(text: &str, mounts: &[(String, PathBuf)]) -> String {
    let mut out = text.to_string();
    for (mount, host) in mounts {
        let host = host.display().to_string();
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(mount.as_str()) {
            let after = &rest[i + mount.len()..];
            let boundary_after =
                after.is_empty() || after.starts_with(['/', ' ', '"', '\'', ':', ';', '\n']);
            let boundary_before =
                i == 0 || rest[..i].ends_with([' ', '"', '\'', '=', ':', '\n', '(']);
            result.push_str(&rest[..i]);
            result.push_str(if boundary_after && boundary_before {
                &host
            } else {
                mount
            });
            rest = after;
        }
        result.push_str(rest);
        out = result;
    }
    out
}

/// The value of a `fieldRef` into the pod's labels or annotations
/// (`metadata.labels['ray.io/group']`).
fn field_ref_map(pod: &Value, path: &str) -> Option<String> {
    let (map, rest) = path
        .strip_prefix("metadata.labels['")
        .map(|r| ("labels", r))
        .or_else(|| {
            path.strip_prefix("metadata.annotations['")
                .map(|r| ("annotations", r))
        })?;
    let key = rest.strip_suffix("']")?;
    Some(
        pod.pointer(&format!("/metadata/{map}"))
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    )
}

impl Job {
    /// What to run for a pod, in order: its init containers then its first container, or the
    /// RayJob entrypoint for a submitter pod.
    pub(crate) fn steps(pod: &Value, data_dir: &Path) -> Vec<Self> {
        let main = pod
            .pointer("/spec/containers/0")
            .cloned()
            .unwrap_or_default();
        if json::annotation(pod, RAYJOB_ENTRYPOINT).is_some() {
            return vec![Self::from_container(pod, &main, data_dir)];
        }
        let init = pod
            .pointer("/spec/initContainers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        init.iter()
            .chain(std::iter::once(&main))
            .map(|c| Self::from_container(pod, c, data_dir))
            .collect()
    }

    /// Reads what to run for one container of a pod (or the RayJob annotations).
    pub(crate) fn from_container(pod: &Value, c: &Value, data_dir: &Path) -> Self {
        let (ns, name) = (
            json::namespace(pod).to_string(),
            json::name(pod).to_string(),
        );
        let uid8: String = json::uid(pod).chars().take(8).collect();
        let root = data_dir
            .join("pods")
            .join(&ns)
            .join(format!("{name}-{uid8}"));
        let container = str_at(c, "/name").unwrap_or("main").to_string();
        // The pod's grace period, capped so a stuck process cannot hold a test for long.
        let grace_secs = json::i64_at(pod, "/spec/terminationGracePeriodSeconds")
            .unwrap_or(30)
            .clamp(0, 10);
        let grace = std::time::Duration::from_secs(grace_secs as u64);
        if let Some(entrypoint) = json::annotation(pod, RAYJOB_ENTRYPOINT) {
            let runtime_env = json::annotation(pod, RAYJOB_RUNTIME_ENV)
                .unwrap_or_default()
                .to_string();
            return Self {
                ns,
                pod: name,
                container,
                root,
                grace,
                kind: Kind::RayJob {
                    entrypoint: entrypoint.to_string(),
                    runtime_env,
                    env: c
                        .get("env")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter(|e| json::string(e, "name").starts_with("TUNEPLANE_"))
                        .filter_map(|e| {
                            Some((
                                e.get("name")?.as_str()?.to_string(),
                                e.get("value")?.as_str()?.to_string(),
                            ))
                        })
                        .collect(),
                },
            };
        }
        let mut mounts: Vec<(String, PathBuf)> = c
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let path = m
                    .get("mountPath")?
                    .as_str()?
                    .trim_end_matches('/')
                    .to_string();
                let vol = m.get("name")?.as_str()?;
                let sub = m.get("subPath").and_then(Value::as_str).unwrap_or_default();
                Some((path, root.join("volumes").join(vol).join(sub)))
            })
            .filter(|(p, _)| !p.is_empty())
            .collect();
        // Longest mount first so nested mounts win.
        mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        let strings =
            |k: &str| -> Vec<String> { json::strs(c.get(k)).map(str::to_string).collect() };
        let argv: Vec<String> = strings("command")
            .into_iter()
            .chain(strings("args"))
            .collect();
        let env = c
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let key = e.get("name")?.as_str()?.to_string();
                let value = match e.get("value").and_then(Value::as_str) {
                    Some(v) => v.to_string(),
                    None => match str_at(e, "/valueFrom/fieldRef/fieldPath")? {
                        "metadata.name" => name.clone(),
                        "metadata.namespace" => ns.clone(),
                        "metadata.uid" => json::uid(pod).to_string(),
                        "spec.nodeName" => str_at(pod, "/spec/nodeName")
                            .unwrap_or_default()
                            .to_string(),
                        "status.podIP" => {
                            str_at(pod, "/status/podIP").unwrap_or_default().to_string()
                        }
                        "status.hostIP" => str_at(pod, "/status/hostIP")
                            .unwrap_or_default()
                            .to_string(),
                        other => field_ref_map(pod, other)?,
                    },
                };
                Some((key, value))
            })
            .collect();
        let workdir = str_at(c, "/workingDir").unwrap_or("/").to_string();
        Self {
            ns,
            pod: name,
            container,
            root,
            grace,
            kind: Kind::Container {
                argv,
                env,
                workdir,
                mounts,
            },
        }
    }

    /// The container's name.
    pub(crate) fn container(&self) -> &str {
        &self.container
    }

    /// A sink writing into kubesim's log store under this job's pod and container.
    pub(super) fn store_sink(&self, store: &Arc<Store>) -> LogSink {
        let (store, ns, pod, container) = (
            store.clone(),
            self.ns.clone(),
            self.pod.clone(),
            self.container.clone(),
        );
        Arc::new(move |text: &str| store.logs.append(&ns, &pod, &container, text))
    }

    /// Runs to completion (or until killed), with output into `sink`; returns the exit code and
    /// whether it was killed. Without a sandbox, mount paths are rewritten to the pod's folders;
    /// with one, the container runs in the sandbox's namespaces with its volumes really mounted.
    pub(crate) async fn run(
        &self,
        sink: &LogSink,
        sandbox: Option<&Sandbox>,
        kill: &mut oneshot::Receiver<Stop>,
    ) -> (i32, bool) {
        match self.command(sandbox).await {
            Ok(cmd) => self.spawn(sink, cmd, kill).await,
            Err(message) => {
                sink(&format!("kubesim: {message}\n"));
                (127, false)
            }
        }
    }

    async fn command(&self, sandbox: Option<&Sandbox>) -> Result<tokio::process::Command, String> {
        let home = self.root.join("home");
        let tmp = self.root.join("tmp");
        for d in [&home, &tmp] {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        let mut cmd = tokio::process::Command::new("bash");
        cmd.env_clear()
            .env(
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .env("HOME", &home)
            .env("TMPDIR", &tmp)
            .env("HOSTNAME", &self.pod);
        match &self.kind {
            Kind::Container {
                argv,
                env,
                workdir,
                mounts,
            } => {
                if argv.is_empty() {
                    return Err(
                        "the container has no command; execution mode needs an explicit command"
                            .into(),
                    );
                }
                for (_, host) in mounts {
                    std::fs::create_dir_all(host)
                        .map_err(|e| format!("cannot create {}: {e}", host.display()))?;
                }
                match sandbox {
                    None => {
                        let workdir = map_path(workdir, mounts, &self.root);
                        std::fs::create_dir_all(&workdir)
                            .map_err(|e| format!("cannot create {}: {e}", workdir.display()))?;
                        cmd.arg("-c")
                            .arg("exec \"$@\"")
                            .arg("bash")
                            .args(argv.iter().map(|a| rewrite(a, mounts)))
                            .current_dir(workdir);
                        cmd.envs(env.iter().map(|(k, v)| (k, rewrite(v, mounts))));
                    }
                    Some(sb) => {
                        let mut real = tokio::process::Command::new("ip");
                        real.env_clear()
                            .env("PATH", sb.path_env())
                            .env("HOME", sb.inside(&home)?)
                            .env("TMPDIR", "/tmp")
                            .env("HOSTNAME", &self.pod);
                        real.envs(sb.env.iter().map(|(k, v)| (k, v)));
                        real.envs(env.iter().map(|(k, v)| (k, v)));
                        real.args(["netns", "exec", &sb.netns, "bash", "-c"])
                            .arg(sb.prelude(&self.root, mounts, workdir)?)
                            .arg("bash")
                            .args(argv)
                            .current_dir(&self.root);
                        return Ok(real);
                    }
                }
            }
            Kind::RayJob {
                entrypoint,
                runtime_env,
                env,
            } => {
                let prepared = prepare::working_dir(runtime_env, &self.root).await?;
                cmd.arg("-c").arg(entrypoint).current_dir(&prepared.dir);
                cmd.envs(env.iter().map(|(k, v)| (k, v)));
                cmd.envs(prepared.env);
                cmd.env("PYTHONPATH", &prepared.dir);
            }
        }
        Ok(cmd)
    }

    async fn spawn(
        &self,
        sink: &LogSink,
        mut cmd: tokio::process::Command,
        kill: &mut oneshot::Receiver<Stop>,
    ) -> (i32, bool) {
        // Its own process group, like a container's cgroup: ending the group ends everything
        // the container started, not only its first process.
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                sink(&format!("kubesim: cannot start the container: {e}\n"));
                return (127, false);
            }
        };
        let group = child.id().map(|pid| Group::register(pid, &self.root));
        let pump = |reader: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| {
            let sink = sink.clone();
            tokio::spawn(async move {
                let Some(mut reader) = reader else { return };
                let mut buf = vec![0u8; 8192];
                while let Ok(n) = reader.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    sink(&String::from_utf8_lossy(&buf[..n]));
                }
            })
        };
        let out = pump(child.stdout.take().map(|s| Box::new(s) as _));
        let err = pump(child.stderr.take().map(|s| Box::new(s) as _));
        let (code, killed) = tokio::select! {
            status = child.wait() => (status.ok().and_then(|s| s.code()).unwrap_or(137), false),
            stop = kill => {
                // Like the kubelet: SIGTERM, then SIGKILL after the grace period (none for a
                // lost machine's processes; a dropped sender stops gracefully).
                let grace = if stop == Ok(Stop::Now) {
                    std::time::Duration::ZERO
                } else {
                    if let Some(g) = &group {
                        signal_group(g.0, "-TERM");
                    }
                    self.grace
                };
                let code = match tokio::time::timeout(grace, child.wait()).await {
                    Ok(status) => status.ok().and_then(|s| s.code()).unwrap_or(143),
                    Err(_) => {
                        // Killing an already-exited child fails harmlessly.
                        let _ = child.kill().await;
                        137
                    }
                };
                (code, true)
            }
        };
        // What the container left running ends with it.
        drop(group);
        let _ = tokio::join!(out, err);
        (code, killed)
    }
}

/// Process groups of containers running now in this process, with their pod's folder.
static RUNNING: Mutex<BTreeMap<u32, PathBuf>> = Mutex::new(BTreeMap::new());

/// A running container's process group; dropping it kills what is left of the group.
struct Group(u32);

impl Group {
    fn register(pgid: u32, root: &Path) -> Group {
        RUNNING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pgid, root.to_path_buf());
        Group(pgid)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.0);
        signal_group(self.0, "-KILL");
    }
}

/// Sends `signal` (`-TERM`, `-KILL`) to every process of group `pgid` (no error if it is gone).
fn signal_group(pgid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .arg(signal)
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Kills every container process started for pods under `exec_dir` (one simulator's execution
/// folder) that still runs, and everything they started, also in sessions of their own (the
/// runner starts the entrypoint in one): a stack that stops leaves nothing behind. SIGTERM first
/// (the runner forwards it to the entrypoint), SIGKILL to whatever is left after up to 3 s.
/// Returns how many containers it ended.
pub fn kill_all(exec_dir: &Path) -> usize {
    let groups: Vec<u32> = {
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        let mine: Vec<u32> = running
            .iter()
            .filter(|(_, root)| root.starts_with(exec_dir))
            .map(|(g, _)| *g)
            .collect();
        for g in &mine {
            running.remove(g);
        }
        mine
    };
    if groups.is_empty() {
        return 0;
    }
    // Found before anything dies: orphans are adopted by init and no longer lead back here.
    let pids = descendants(&groups);
    for g in &groups {
        signal_group(*g, "-TERM");
    }
    for _ in 0..30 {
        if pids.iter().all(|p| !running(*p)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for g in &groups {
        signal_group(*g, "-KILL");
    }
    for p in pids.iter().filter(|p| running(**p)) {
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .arg(p.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    groups.len()
}

/// `(state, parent pid)` of process `pid` from `/proc` (Linux).
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// `roots` and every process descended from them.
fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut children: std::collections::HashMap<u32, Vec<u32>> = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((_, parent)) = stat(pid) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut out: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = children.get(&out[i]) {
            out.extend(kids.iter().copied().filter(|k| !roots.contains(k)));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_rewritten_only_at_path_boundaries() {
        let mounts = vec![("/work".to_string(), PathBuf::from("/data/p/volumes/work"))];
        assert_eq!(
            rewrite("cd /work/x && ls /workshop", &mounts),
            "cd /data/p/volumes/work/x && ls /workshop"
        );
        assert_eq!(rewrite("DIR=/work", &mounts), "DIR=/data/p/volumes/work");
        let root = Path::new("/data/p");
        assert_eq!(
            map_path("/work/a", &mounts, root),
            PathBuf::from("/data/p/volumes/work/a")
        );
        assert_eq!(
            map_path("/opt", &mounts, root),
            PathBuf::from("/data/p/rootfs/opt")
        );
    }
}
