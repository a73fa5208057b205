//! Pod networking of the real execution mode: every pod is a network namespace of its own with a
//! veth pair whose host end sits on one bridge, and the pod IP on its end.
//!
//! - The bridge [`BRIDGE`] holds the host's address [`GATEWAY`] on the pod network [`POD_NET`]
//!   (`/16`); the API server reaches pod IPs through it (its service proxy, the operator's
//!   dashboard calls). The host does not forward packets, so a pod reaches nothing but other pods
//!   and the host itself: a pod's default route via the bridge only lets Ray find its own address
//!   (it asks the kernel which source address would route outwards; no packet is sent).
//! - Pods reach the host's loopback services (the dev blob server, the API, moto) on their own
//!   `127.0.0.1:PORT`: the agent listens inside the pod's namespace on the ports the pod needs
//!   ([`super::relay`]: those its spec names, never the control plane's, its own or Ray's) that
//!   the host listens on at 127.0.0.1 when the pod starts, and relays each connection to the
//!   host's `127.0.0.1:PORT`. No address outside loopback and the pods is ever dialled.
//! - Link-local addresses (`169.254.0.0/16`, the metadata service's among them) are on the link,
//!   as RFC 3927 has them: a pod asks the bridge for them directly, so a test can stand the
//!   metadata address up in a namespace of its own and show a NetworkPolicy keeps pods from it.
//! - Everything is made with `ip` (iproute2) and needs root.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use tokio::task::JoinHandle;

/// The bridge that connects the pods to each other and to the host.
pub const BRIDGE: &str = "tp-pods0";
/// The host's address on the bridge.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The pod network (a `/16`).
pub const POD_NET: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 0);
/// Prefix of the network namespaces the agent makes (one per pod).
pub const NETNS_PREFIX: &str = "tp-";

/// Ports Ray (and TunePlane's dashboard gate, 8270) listen on at fixed numbers inside a pod:
/// never relayed to the host.
const RAY_PORTS: [u16; 7] = [6379, 8000, 8080, 8265, 8270, 10001, 52365];

/// Runs `ip` with `args`; an error carries its stderr.
async fn ip(args: &[&str]) -> Result<(), String> {
    let out = tokio::process::Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The network namespace of the pod with `uid` (`tp-` and the uid's first 12 letters and
/// digits): a test enters it with `ip netns exec` to act as the pod.
pub fn netns_of(uid: &str) -> String {
    let short: String = uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(12)
        .collect();
    format!("{NETNS_PREFIX}{short}")
}

/// Whether the process runs as root (the real execution mode needs it for namespaces and mounts).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The pod network of one agent: the bridge and the addresses handed out.
pub struct Network {
    used: Mutex<BTreeSet<u32>>,
}

/// One pod's network: its namespace, address and relays.
pub struct PodNet {
    /// The namespace's name (under `/var/run/netns`).
    pub netns: String,
    /// The pod IP.
    pub ip: Ipv4Addr,
    relays: Vec<JoinHandle<()>>,
}

impl Network {
    /// Sets up the bridge (made if missing) and removes the namespaces a previous agent left.
    pub async fn setup() -> Result<Self, String> {
        if !is_root() {
            return Err("the node agent's real execution mode needs root (network namespaces, veth pairs and mounts); run it as root or pass --simulate".into());
        }
        let exists = tokio::process::Command::new("ip")
            .args(["link", "show", BRIDGE])
            .output()
            .await
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !exists {
            ip(&["link", "add", BRIDGE, "type", "bridge"]).await?;
            ip(&["addr", "add", &format!("{GATEWAY}/16"), "dev", BRIDGE]).await?;
        }
        ip(&["link", "set", BRIDGE, "up"]).await?;
        for ns in stale_namespaces() {
            remove_namespace(&ns).await;
        }
        Ok(Self {
            used: Mutex::new(BTreeSet::new()),
        })
    }

    fn allocate(&self) -> Result<Ipv4Addr, String> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        // 10.244.1.0 .. 10.244.255.254: the first /24 is the host's.
        let base = u32::from(POD_NET);
        let free = (256..65_534)
            .find(|n| n % 256 != 0 && n % 256 != 255 && !used.contains(n))
            .ok_or("the pod network 10.244.0.0/16 is full")?;
        used.insert(free);
        Ok(Ipv4Addr::from(base + free))
    }

    fn release(&self, addr: Ipv4Addr) {
        let n = u32::from(addr) - u32::from(POD_NET);
        self.used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&n);
    }

    /// Makes the namespace of pod `uid`, with its address, routes and relays to the host's
    /// loopback services on `relayed` (those the host listens on).
    pub async fn create(&self, uid: &str, relayed: &BTreeSet<u16>) -> Result<PodNet, String> {
        let netns = netns_of(uid);
        let short = &netns[NETNS_PREFIX.len()..];
        let (host_end, pod_end) = (format!("tpv{short}"), format!("tpp{short}"));
        let addr = self.allocate()?;
        let made = async {
            remove_namespace(&netns).await;
            ip(&["netns", "add", &netns]).await?;
            ip(&[
                "link", "add", &host_end, "type", "veth", "peer", "name", &pod_end,
            ])
            .await?;
            ip(&["link", "set", &pod_end, "netns", &netns]).await?;
            ip(&["link", "set", &host_end, "master", BRIDGE]).await?;
            ip(&["link", "set", &host_end, "up"]).await?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &netns, "ip"];
                all.extend_from_slice(args);
                all.into_iter().map(str::to_string).collect::<Vec<_>>()
            };
            for args in [
                inside(&["link", "set", &pod_end, "name", "eth0"]),
                inside(&["addr", "add", &format!("{addr}/16"), "dev", "eth0"]),
                inside(&["link", "set", "eth0", "up"]),
                inside(&["link", "set", "lo", "up"]),
                inside(&["route", "add", "default", "via", &GATEWAY.to_string()]),
                inside(&[
                    "route",
                    "add",
                    "169.254.0.0/16",
                    "dev",
                    "eth0",
                    "scope",
                    "link",
                ]),
            ] {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                ip(&args).await?;
            }
            Ok::<(), String>(())
        }
        .await;
        if let Err(e) = made {
            remove_namespace(&netns).await;
            self.release(addr);
            return Err(e);
        }
        let relays = match relay_host_ports(&netns, relayed) {
            Ok(r) => r,
            Err(e) => {
                remove_namespace(&netns).await;
                self.release(addr);
                return Err(e);
            }
        };
        Ok(PodNet {
            netns,
            ip: addr,
            relays,
        })
    }

    /// Removes a pod's namespace (its veth pair goes with it) after killing what still runs in it.
    pub async fn remove(&self, pod: PodNet) {
        for r in &pod.relays {
            r.abort();
        }
        remove_namespace(&pod.netns).await;
        self.release(pod.ip);
    }
}

/// Kills every process left in namespace `netns`, then deletes it (no error if it is gone).
async fn remove_namespace(netns: &str) {
    for signal in ["-TERM", "-KILL"] {
        let pids = tokio::process::Command::new("ip")
            .args(["netns", "pids", netns])
            .output()
            .await
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let pids: Vec<&str> = pids.split_whitespace().collect();
        if pids.is_empty() {
            break;
        }
        let _ = tokio::process::Command::new("kill")
            .arg(signal)
            .args(&pids)
            .output()
            .await;
        if signal == "-TERM" {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    let _ = ip(&["netns", "del", netns]).await;
}

/// The namespaces a previous agent left behind.
fn stale_namespaces() -> Vec<String> {
    std::fs::read_dir("/var/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with(NETNS_PREFIX))
        .collect()
}

/// TCP ports the host listens on at 127.0.0.1 or any address (from `/proc/net/tcp`).
pub fn host_loopback_ports() -> BTreeSet<u16> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    listening_ports(&text)
}

fn listening_ports(proc_net_tcp: &str) -> BTreeSet<u16> {
    proc_net_tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let local = f.nth(1)?;
            let state = f.nth(1)?;
            let (addr, port) = local.split_once(':')?;
            (state == "0A" && matches!(addr, "0100007F" | "00000000"))
                .then(|| u16::from_str_radix(port, 16).ok())
                .flatten()
        })
        .collect()
}

/// Listens inside `netns` on 127.0.0.1 for each of `relayed` the host listens on (but Ray's
/// fixed ports) and relays connections to the host's port.
fn relay_host_ports(netns: &str, relayed: &BTreeSet<u16>) -> Result<Vec<JoinHandle<()>>, String> {
    let ports: Vec<u16> = host_loopback_ports()
        .into_iter()
        .filter(|p| relayed.contains(p) && !RAY_PORTS.contains(p))
        .collect();
    let listeners = bind_inside(netns, &ports)?;
    let mut tasks = Vec::new();
    for (port, listener) in listeners {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("relay for port {port}: {e}"))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| format!("relay for port {port}: {e}"))?;
        tasks.push(tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
    }
    Ok(tasks)
}

/// Binds 127.0.0.1:`port` inside `netns` for each port (a port taken there is skipped): a thread
/// of its own enters the namespace, so the agent's other threads stay in the host's.
fn bind_inside(netns: &str, ports: &[u16]) -> Result<Vec<(u16, std::net::TcpListener)>, String> {
    let file = std::fs::File::open(format!("/var/run/netns/{netns}"))
        .map_err(|e| format!("cannot open network namespace {netns}: {e}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // Only this thread enters the namespace; it ends right after binding.
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("cannot enter network namespace {netns}: {e}"))?;
            Ok(ports
                .iter()
                .filter_map(|p| {
                    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, *p))
                        .ok()
                        .map(|l| (*p, l))
                })
                .collect())
        })
        .join()
        .map_err(|_| format!("entering network namespace {netns} panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_loopback_and_wildcard_ports_are_read_from_proc() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n\
   2: 0100007F:1F91 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n\
   3: 0200000A:1F92 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1\n";
        assert_eq!(listening_ports(text), BTreeSet::from([8080, 80]));
    }
}
