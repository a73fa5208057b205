//! The cluster's names for the real execution mode: one hosts file, mounted as every container's
//! `/etc/hosts`, that maps each Service (`<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc` and
//! `<svc>.<ns>.svc.cluster.local`) to the pod IPs of its EndpointSlices, as a headless Service
//! resolves. ClusterIPs are never handed out: nothing routes to them. The file is rewritten in
//! place (same inode), so containers that already mounted it see the change.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

/// The label of an EndpointSlice naming its Service.
const SERVICE_LABEL: &str = "kubernetes.io/service-name";

/// The hosts file and what it is made of.
pub struct HostsFile {
    path: PathBuf,
    /// Slice (namespace/name) → (service, namespace, addresses).
    slices: BTreeMap<String, (String, String, Vec<String>)>,
}

impl HostsFile {
    /// A hosts file at `path`, written at once with only `localhost`.
    pub fn create(path: &Path) -> Result<Self, String> {
        let file = Self {
            path: path.to_path_buf(),
            slices: BTreeMap::new(),
        };
        file.write()?;
        Ok(file)
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (svc, ns, addrs) in self.slices.values() {
            by_name
                .entry(format!("{svc}.{ns}"))
                .or_default()
                .extend(addrs.iter().cloned());
        }
        let mut out = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n");
        for (name, mut addrs) in by_name {
            addrs.sort();
            addrs.dedup();
            let svc = name.split('.').next().unwrap_or_default();
            for a in addrs {
                out.push_str(&format!(
                    "{a}\t{name}.svc.cluster.local {name}.svc {name} {svc}\n"
                ));
            }
        }
        out
    }

    fn write(&self) -> Result<(), String> {
        // Truncate and write the same file: a bind mount of it follows the inode.
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&self.path)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        f.write_all(self.render().as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    fn apply(&mut self, slice: &EndpointSlice) {
        let key = format!(
            "{}/{}",
            slice.metadata.namespace.as_deref().unwrap_or_default(),
            slice.metadata.name.as_deref().unwrap_or_default()
        );
        let Some(svc) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_LABEL))
        else {
            self.slices.remove(&key);
            return;
        };
        let addrs: Vec<String> = slice
            .endpoints
            .iter()
            .flatten()
            .flat_map(|e| e.addresses.iter().cloned())
            .collect();
        let ns = slice.metadata.namespace.clone().unwrap_or_default();
        self.slices.insert(key, (svc.clone(), ns, addrs));
    }

    fn remove(&mut self, slice: &EndpointSlice) {
        let key = format!(
            "{}/{}",
            slice.metadata.namespace.as_deref().unwrap_or_default(),
            slice.metadata.name.as_deref().unwrap_or_default()
        );
        self.slices.remove(&key);
    }

    /// Follows every EndpointSlice of the cluster and rewrites the file on each change, until
    /// `stop` turns true.
    pub async fn follow(mut self, client: kube::Client, mut stop: watch::Receiver<bool>) {
        let api: Api<EndpointSlice> = Api::all(client);
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        // While the watcher relists, the file waits for the whole list.
        let mut relisting = false;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                event = stream.next() => {
                    let changed = match event {
                        Some(Ok(watcher::Event::Init)) => {
                            self.slices.clear();
                            relisting = true;
                            false
                        }
                        Some(Ok(watcher::Event::InitApply(s))) => {
                            self.apply(&s);
                            false
                        }
                        Some(Ok(watcher::Event::InitDone)) => {
                            relisting = false;
                            true
                        }
                        Some(Ok(watcher::Event::Apply(s))) => {
                            self.apply(&s);
                            !relisting
                        }
                        Some(Ok(watcher::Event::Delete(s))) => {
                            self.remove(&s);
                            !relisting
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "endpointslice watch failed; retrying");
                            false
                        }
                        None => return,
                    };
                    if changed && let Err(e) = self.write() {
                        tracing::warn!(error = %e, "hosts file not written");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(ns: &str, name: &str, svc: &str, ips: &[&str]) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {SERVICE_LABEL: svc}},
            "addressType": "IPv4",
            "endpoints": ips.iter().map(|ip| serde_json::json!({"addresses": [ip]})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn services_resolve_to_their_pod_ips_under_every_name_form() {
        let dir = tempfile::tempdir().unwrap();
        let mut hosts = HostsFile::create(&dir.path().join("hosts")).unwrap();
        hosts.apply(&slice("jobs", "head-svc-abc", "head-svc", &["10.244.1.5"]));
        let text = hosts.render();
        assert!(
            text.contains("10.244.1.5\thead-svc.jobs.svc.cluster.local head-svc.jobs.svc head-svc.jobs head-svc\n"),
            "{text}"
        );
        hosts.remove(&slice("jobs", "head-svc-abc", "head-svc", &[]));
        assert!(!hosts.render().contains("head-svc"));
        hosts.write().unwrap();
        assert!(
            std::fs::read_to_string(dir.path().join("hosts"))
                .unwrap()
                .starts_with("127.0.0.1\tlocalhost")
        );
    }
}
