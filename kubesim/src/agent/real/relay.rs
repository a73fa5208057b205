//! Which of the host's loopback ports a pod gets relayed into its own `127.0.0.1` (see
//! [`super::net`]): only the ports the pod needs, never the control plane's.
//!
//! A pod needs what its spec names: the capsule's URL (a CPU job's bootstrap, a Ray pod's init
//! container, the submitter's runtime environment), the API's URL (the runner's grant calls).
//! A Ray head or worker downloads its job's `working_dir` itself, from a URL only its RayJob
//! names, so a Ray pod's RayJob is read too. Whatever a spec names, a port held by the control
//! plane (etcd, the API server, the controller manager, the scheduler, the KubeRay operator) is
//! never relayed: a tenant can write any URL into its job's environment, and etcd's plain HTTP
//! holds every Secret.

use std::collections::BTreeSet;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

/// Process names (`/proc/PID/comm`, at most 15 characters) whose listening ports are never
/// relayed into a pod.
pub const CONTROL_PLANE: [&str; 6] = [
    "etcd",
    "kube-apiserver",
    "kube-controller",
    "kube-scheduler",
    "kuberay-operato",
    "kueue-manager",
];

/// Ports named as `127.0.0.1:PORT` or `localhost:PORT` anywhere in `value`'s strings.
pub fn loopback_ports_named(value: &Value) -> BTreeSet<u16> {
    let mut out = BTreeSet::new();
    collect(value, &mut out);
    out
}

fn collect(value: &Value, out: &mut BTreeSet<u16>) {
    match value {
        Value::String(s) => scan(s, out),
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect(v, out)),
        _ => {}
    }
}

fn scan(text: &str, out: &mut BTreeSet<u16>) {
    for host in ["127.0.0.1:", "localhost:"] {
        let mut rest = text;
        while let Some(at) = rest.find(host) {
            rest = &rest[at + host.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(port) = digits.parse::<u16>()
                && port > 0
            {
                out.insert(port);
            }
        }
    }
}

/// TCP ports the control plane's processes listen on, read from `/proc`: each process named in
/// [`CONTROL_PLANE`], its sockets' inodes, and the listening entries of `/proc/net/tcp{,6}`
/// with those inodes.
pub fn control_plane_ports() -> BTreeSet<u16> {
    let mut inodes = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let path = entry.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !CONTROL_PLANE.contains(&comm.trim()) {
            continue;
        }
        for fd in std::fs::read_dir(path.join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(target) = std::fs::read_link(fd.path())
                && let Some(inode) = target
                    .to_str()
                    .and_then(|t| t.strip_prefix("socket:["))
                    .and_then(|t| t.strip_suffix(']'))
                    .and_then(|t| t.parse::<u64>().ok())
            {
                inodes.insert(inode);
            }
        }
    }
    let mut ports = BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        ports.extend(listening_ports_of(&text, &inodes));
    }
    ports
}

/// Ports of listening entries of a `/proc/net/tcp` table whose socket inode is in `inodes`.
fn listening_ports_of(text: &str, inodes: &BTreeSet<u64>) -> BTreeSet<u16> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            let inode: u64 = inode.parse().ok()?;
            let port = u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()?;
            (*state == "0A" && inodes.contains(&inode)).then_some(port)
        })
        .collect()
}

/// The ports to relay into a pod: those it names, minus its own container ports and the
/// control plane's.
pub fn to_relay(
    named: &BTreeSet<u16>,
    own: &[u16],
    control_plane: &BTreeSet<u16>,
) -> BTreeSet<u16> {
    named
        .iter()
        .copied()
        .filter(|p| !own.contains(p) && !control_plane.contains(p))
        .collect()
}

/// The ports `pod` names, and for a Ray pod (label `ray.io/cluster`) those its RayCluster's
/// owning RayJob names too (read from the API server; a read that fails only leaves them out).
pub async fn named_by_pod(client: &kube::Client, pod: &Value) -> BTreeSet<u16> {
    let mut named = loopback_ports_named(pod);
    let ns = crate::json::namespace(pod).to_string();
    let Some(cluster) = crate::json::str_at(pod, "/metadata/labels/ray.io~1cluster") else {
        return named;
    };
    let resource = |kind: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("ray.io", "v1", kind),
            &format!("{}s", kind.to_ascii_lowercase()),
        )
    };
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &resource("RayCluster"));
    let Ok(Some(rc)) = clusters.get_opt(cluster).await else {
        return named;
    };
    let owner = rc
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .find(|o| o.kind == "RayJob");
    if let Some(owner) = owner {
        let jobs: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &resource("RayJob"));
        if let Ok(Some(job)) = jobs.get_opt(&owner.name).await {
            named.extend(loopback_ports_named(&job.data));
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn loopback_urls_anywhere_in_a_spec_name_their_ports() {
        let pod = json!({"spec": {"containers": [{
            "args": ["curl http://127.0.0.1:41234/capsules/x.zip"],
            "env": [{"name": "TUNEPLANE_API_URL", "value": "http://localhost:8080/v1"}],
        }], "other": "working_dir: http://127.0.0.1:5000/b/k.zip?X=1 and 127.0.0.1:0 and 127.0.0.1:99999"}});
        assert_eq!(
            loopback_ports_named(&pod),
            BTreeSet::from([5000, 8080, 41234])
        );
        assert!(loopback_ports_named(&json!({"a": "http://10.0.0.1:80"})).is_empty());
    }

    #[test]
    fn the_control_plane_and_the_pods_own_ports_are_never_relayed() {
        let named = BTreeSet::from([2379, 6443, 8000, 41234]);
        let control = BTreeSet::from([2379, 2380, 6443]);
        assert_eq!(to_relay(&named, &[8000], &control), BTreeSet::from([41234]));
    }

    #[test]
    fn listening_sockets_are_matched_by_inode() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:094B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n\
   1: 0100007F:094C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1\n\
   2: 0100007F:094B 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 111 1\n";
        assert_eq!(
            listening_ports_of(text, &BTreeSet::from([111])),
            BTreeSet::from([2379])
        );
    }

    #[test]
    fn this_process_is_not_taken_for_the_control_plane() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(!control_plane_ports().contains(&port));
    }
}
