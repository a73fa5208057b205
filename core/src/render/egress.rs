//! Where the pods TunePlane renders may connect to (docs/design.md §5, README "Security"): their
//! own job's pods, the cluster's DNS, the TunePlane API and the object store, and what the
//! operator adds; nothing else. The metadata address and the cluster's internal ranges are carved
//! out of the platform's destinations, so a pod never reaches the node's IAM role, the API
//! server's anonymous endpoints, the operator's or the reconciler's metrics, or a playground.
//!
//! A NetworkPolicy cannot name a host, only addresses: on AWS the API (API Gateway) and S3 are
//! public endpoints whose addresses change, so the default platform destination is public HTTPS
//! (`0.0.0.0/0` on port 443 with the internal ranges carved out). An operator with VPC endpoints
//! narrows it to their addresses (`TUNEPLANE_EGRESS_PLATFORM`) and adds anything else jobs need,
//! such as an internal package mirror (`TUNEPLANE_EGRESS_ALLOW`).

use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Ranges no pod reaches unless the operator allows them by name: the private ranges (the pod,
/// service and node networks of every common CNI), CGNAT (EKS custom networking), link-local
/// (the metadata service at 169.254.169.254) and the `0.0.0.0/8` "this network" block.
pub const DEFAULT_DENY: [&str; 6] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
];

/// An IPv4 network and, optionally, the one TCP port allowed to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    /// First address of the network.
    pub addr: Ipv4Addr,
    /// Prefix length, 0 to 32.
    pub prefix: u8,
    /// The TCP port allowed, or every port and protocol when `None`.
    pub port: Option<u16>,
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

impl Destination {
    /// Parses `a.b.c.d/n` or `a.b.c.d/n:PORT`; the address must be the network's first.
    pub fn parse(text: &str) -> Result<Destination, String> {
        let text = text.trim();
        let (cidr, port) = match text.rsplit_once(':') {
            Some((cidr, port)) => {
                let port = port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    format!("{text:?}: port {port:?} is not a number from 1 to 65535")
                })?;
                (cidr, Some(port))
            }
            None => (text, None),
        };
        let (addr, prefix) = cidr.split_once('/').ok_or_else(|| {
            format!(
                "{text:?} is not an IPv4 CIDR: write it as 203.0.113.0/24 or 203.0.113.0/24:443"
            )
        })?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{text:?}: {addr:?} is not an IPv4 address"))?;
        let prefix = prefix
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| {
                format!("{text:?}: prefix length {prefix:?} is not a number from 0 to 32")
            })?;
        if u32::from(addr) & !mask(prefix) != 0 {
            return Err(format!(
                "{text:?}: {addr} is not the first address of a /{prefix} (write {}/{prefix})",
                Ipv4Addr::from(u32::from(addr) & mask(prefix))
            ));
        }
        Ok(Destination { addr, prefix, port })
    }

    /// Parses a comma-separated list (empty entries skipped).
    pub fn parse_list(text: &str) -> Result<Vec<Destination>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(Destination::parse)
            .collect()
    }

    /// The network without its port (`a.b.c.d/n`).
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.addr, self.prefix)
    }

    /// Whether `other`'s network lies inside this one and is smaller (a valid `except`).
    fn strictly_contains(&self, other: &Destination) -> bool {
        other.prefix > self.prefix
            && u32::from(other.addr) & mask(self.prefix) == u32::from(self.addr)
    }

    /// Whether the networks share an address.
    fn overlaps(&self, other: &Destination) -> bool {
        let prefix = self.prefix.min(other.prefix);
        u32::from(self.addr) & mask(prefix) == u32::from(other.addr) & mask(prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

/// The cluster's DNS servers as a NetworkPolicy peer: pods labelled `label` in `namespace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsPeer {
    /// Namespace of the DNS pods (`kube-system`).
    pub namespace: String,
    /// Label key of the DNS pods (`k8s-app`).
    pub label: String,
    /// Label value of the DNS pods (`kube-dns`, which CoreDNS keeps on EKS, kubeadm and kind).
    pub value: String,
}

impl DnsPeer {
    /// Parses `namespace/key=value`.
    pub fn parse(text: &str) -> Result<DnsPeer, String> {
        let text = text.trim();
        let (namespace, selector) = text.split_once('/').ok_or_else(|| {
            format!("{text:?}: write the DNS pods as namespace/label=value, e.g. kube-system/k8s-app=kube-dns")
        })?;
        let (label, value) = selector.split_once('=').ok_or_else(|| {
            format!("{text:?}: the DNS pods' label is missing its value (k8s-app=kube-dns)")
        })?;
        if !crate::spec::is_dns_label(namespace, 63) {
            return Err(format!("{text:?}: {namespace:?} is not a namespace name"));
        }
        if label.is_empty() || value.is_empty() || label.contains(char::is_whitespace) {
            return Err(format!(
                "{text:?}: label key and value must be non-empty, without spaces"
            ));
        }
        Ok(DnsPeer {
            namespace: namespace.to_owned(),
            label: label.to_owned(),
            value: value.to_owned(),
        })
    }
}

/// Where pods may connect to besides their own job's pods (installation-wide).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressSettings {
    /// The cluster's DNS (`TUNEPLANE_EGRESS_DNS`), on port 53 UDP and TCP; `None`: no DNS.
    pub dns: Option<DnsPeer>,
    /// Where the TunePlane API and the object store are (`TUNEPLANE_EGRESS_PLATFORM`), with
    /// [`EgressSettings::deny`] carved out of each.
    pub platform: Vec<Destination>,
    /// Ranges carved out of the platform's destinations (`TUNEPLANE_EGRESS_DENY_CIDRS`).
    pub deny: Vec<Destination>,
    /// Destinations the operator adds, allowed as written (`TUNEPLANE_EGRESS_ALLOW`).
    pub allow: Vec<Destination>,
}

impl Default for EgressSettings {
    fn default() -> Self {
        EgressSettings {
            dns: Some(DnsPeer {
                namespace: "kube-system".to_owned(),
                label: "k8s-app".to_owned(),
                value: "kube-dns".to_owned(),
            }),
            platform: vec![Destination {
                addr: Ipv4Addr::UNSPECIFIED,
                prefix: 0,
                port: Some(443),
            }],
            deny: DEFAULT_DENY
                .iter()
                .filter_map(|c| Destination::parse(c).ok())
                .collect(),
            allow: Vec::new(),
        }
    }
}

/// One egress rule to `dest`, its port if it names one.
fn ip_rule(dest: &Destination, except: &[&Destination]) -> Value {
    let mut block = json!({"cidr": dest.cidr()});
    if !except.is_empty() {
        block["except"] = json!(except.iter().map(|d| d.cidr()).collect::<Vec<_>>());
    }
    let mut rule = json!({"to": [{"ipBlock": block}]});
    if let Some(port) = dest.port {
        rule["ports"] = json!([{"protocol": "TCP", "port": port}]);
    }
    rule
}

/// The egress rules every pod in a jobs namespace gets: DNS, the platform's destinations with
/// the denied ranges carved out, and the operator's additions. A platform destination that lies
/// wholly inside a denied range is left out (nothing of it would remain).
pub fn baseline_rules(settings: &EgressSettings) -> Vec<Value> {
    let mut rules = Vec::new();
    if let Some(dns) = &settings.dns {
        rules.push(json!({
            "to": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": dns.namespace}},
                "podSelector": {"matchLabels": { dns.label.as_str(): dns.value }},
            }],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        }));
    }
    for dest in &settings.platform {
        if settings
            .deny
            .iter()
            .any(|d| d.overlaps(dest) && !dest.strictly_contains(d))
        {
            continue;
        }
        let except: Vec<&Destination> = settings
            .deny
            .iter()
            .filter(|d| dest.strictly_contains(d))
            .collect();
        rules.push(ip_rule(dest, &except));
    }
    rules.extend(settings.allow.iter().map(|d| ip_rule(d, &[])));
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_with_and_without_a_port_and_bad_ones_say_why() {
        let d = Destination::parse(" 203.0.113.0/24:443 ").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((d.cidr(), d.port), ("203.0.113.0/24".to_owned(), Some(443)));
        assert_eq!(d.to_string(), "203.0.113.0/24:443");
        let all = Destination::parse("0.0.0.0/0").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((all.prefix, all.port), (0, None));
        for (bad, says) in [
            ("203.0.113.0", "write it as"),
            ("203.0.113.5/24", "first address"),
            ("203.0.113.0/33", "prefix length"),
            ("mirror/24", "not an IPv4 address"),
            ("203.0.113.0/24:0", "port"),
            ("203.0.113.0/24:https", "port"),
        ] {
            let e = Destination::parse(bad).err().unwrap_or_default();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(Destination::parse_list(" , ").map(|v| v.len()), Ok(0));
    }

    #[test]
    fn the_dns_peer_is_namespace_slash_label() {
        let dns = DnsPeer::parse("kube-system/k8s-app=kube-dns").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (dns.namespace.as_str(), dns.value.as_str()),
            ("kube-system", "kube-dns")
        );
        for bad in [
            "kube-dns",
            "kube-system/k8s-app",
            "Kube_System/a=b",
            "ns/=b",
        ] {
            assert!(DnsPeer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_allows_public_https_with_every_internal_range_and_the_metadata_address_carved_out()
     {
        let rules = baseline_rules(&EgressSettings::default());
        assert_eq!(rules.len(), 2, "{rules:?}");
        let https = &rules[1];
        assert_eq!(https["to"][0]["ipBlock"]["cidr"], "0.0.0.0/0");
        let except: Vec<&str> = https["to"][0]["ipBlock"]["except"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for range in [
            "10.0.0.0/8",
            "169.254.0.0/16",
            "172.16.0.0/12",
            "192.168.0.0/16",
        ] {
            assert!(
                except.contains(&range),
                "{range} not carved out: {except:?}"
            );
        }
        assert_eq!(https["ports"][0]["port"], 443);
    }

    #[test]
    fn a_platform_destination_inside_a_denied_range_is_dropped_and_the_operators_own_are_kept_as_written()
     {
        let settings = EgressSettings {
            platform: Destination::parse_list("10.1.0.0/16:443, 52.216.0.0/15:443")
                .unwrap_or_default(),
            allow: Destination::parse_list("10.20.30.40/32:3128").unwrap_or_default(),
            dns: None,
            ..EgressSettings::default()
        };
        let rules = baseline_rules(&settings);
        let cidrs: Vec<&str> = rules
            .iter()
            .filter_map(|r| r["to"][0]["ipBlock"]["cidr"].as_str())
            .collect();
        assert_eq!(cidrs, ["52.216.0.0/15", "10.20.30.40/32"]);
        assert!(rules[0]["to"][0]["ipBlock"].get("except").is_none());
    }
}
