//! The pod networks the API may forward playground requests to, and the HTTP client it forwards
//! with (the route is [`crate::routes::playground_proxy`]).

use std::net::IpAddr;
use std::time::Duration;

/// Longest a proxied request may take (a long completion included).
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);

/// One IPv4 or IPv6 network (`10.244.0.0/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `v6/n`; networks wider than /8 (IPv4) or /16 (IPv6) are refused: a
    /// pod network is never the whole internet.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, prefix) = text
            .trim()
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a network: write it as 10.244.0.0/16"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|e| format!("{text:?}: {addr:?} is not an IP address ({e})"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{text:?}: {prefix:?} is not a prefix length"))?;
        let (min, max) = if addr.is_ipv4() { (8, 32) } else { (16, 128) };
        if !(min..=max).contains(&prefix) {
            return Err(format!(
                "{text:?}: give a prefix length from {min} to {max} (the pod network only)"
            ));
        }
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` lies in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> (u128, u32) {
            match ip {
                IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
                IpAddr::V6(v6) => (u128::from(v6), 128),
            }
        };
        let ((net, width), (candidate, other)) = (bits(self.addr), bits(ip));
        if width != other {
            return false;
        }
        let host_bits = width - u32::from(self.prefix);
        let mask = if host_bits >= 128 {
            0
        } else {
            !0u128 << host_bits
        };
        net & mask == candidate & mask
    }
}

/// Parses a comma-separated list of networks; empty: the proxy is off.
pub fn parse_networks(text: &str) -> Result<Vec<Cidr>, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(Cidr::parse)
        .collect()
}

/// What the proxy needs: the networks it may dial and its HTTP client.
#[derive(Debug, Clone, Default)]
pub struct PlaygroundProxy {
    /// Pod networks the API may forward to; empty turns the proxy off (503).
    pub networks: Vec<Cidr>,
    pub(crate) client: reqwest::Client,
}

impl PlaygroundProxy {
    /// A proxy to pods in `networks`.
    pub fn new(networks: Vec<Cidr>) -> PlaygroundProxy {
        let client = reqwest::Client::builder()
            .timeout(UPSTREAM_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            // A pod answering with a redirect is not followed anywhere.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .unwrap_or_default();
        PlaygroundProxy { networks, client }
    }
}
