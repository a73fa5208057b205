//! Where a callback may go. A delivery leaves the platform for a URL a tenant chose, so the URL
//! is checked twice: its text when it is given (a job's spec, a subscription), and every address
//! its host resolves to right before each delivery, which then connects to exactly the address
//! that was checked (no second lookup a DNS answer could change in between).
//!
//! Allowed: `https://` to public addresses. Refused: other schemes, user names or passwords in
//! the URL, and addresses of the platform's own networks: loopback, private ranges, link-local
//! (the cloud metadata services live there), carrier-grade NAT, multicast, reserved and
//! documentation ranges, and their IPv6 counterparts (IPv4-mapped addresses are judged as the
//! IPv4 address they carry). Tunnels and translators whose far end the platform's own routers may
//! pick are refused whole: 6to4 (`2002::/16`), Teredo (`2001::/32`), NAT64 local use
//! (`64:ff9b:1::/48`), and deprecated site-local addresses (`fec0::/10`). In dev (`allow_loopback`), `http://` and `https://` to loopback
//! are allowed too, so a receiver on the same machine can be tried.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

use super::MAX_URL_BYTES;

/// Host names that are the machine itself.
fn is_loopback_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// Host names of cloud metadata services.
fn is_metadata_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    matches!(
        host.as_str(),
        "metadata" | "metadata.google.internal" | "instance-data" | "instance-data.ec2.internal"
    )
}

/// Checks a callback URL's text: scheme, credentials and a host that is not a refused literal
/// address or name. The message says what is wrong and what is accepted.
pub fn check_url(text: &str, allow_loopback: bool) -> Result<Url, String> {
    if text.len() > MAX_URL_BYTES {
        return Err(format!("longer than {MAX_URL_BYTES} bytes"));
    }
    let url = Url::parse(text).map_err(|e| {
        format!("{text:?} is not a URL ({e}); give an https:// URL, e.g. https://hooks.example.com/tuneplane")
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "must not carry a user name or password (they would be logged); put a token in the path or query instead"
                .into(),
        );
    }
    if url.fragment().is_some() {
        return Err("must not have a #fragment (it is never sent)".into());
    }
    let host = url
        .host()
        .ok_or_else(|| format!("{text:?} names no host"))?;
    let loopback_host = match &host {
        Host::Domain(name) => {
            if is_metadata_name(name) {
                return Err(format!(
                    "{name:?} is a cloud metadata service; callbacks go only to public addresses"
                ));
            }
            is_loopback_name(name)
        }
        Host::Ipv4(ip) => {
            check_ip(IpAddr::V4(*ip), allow_loopback)?;
            ip.is_loopback()
        }
        Host::Ipv6(ip) => {
            check_ip(IpAddr::V6(*ip), allow_loopback)?;
            ip.is_loopback()
        }
    };
    if loopback_host && !allow_loopback {
        return Err(refusal(
            "is this machine (loopback)",
            "callbacks go only to public addresses (loopback is allowed only in dev)",
        ));
    }
    match url.scheme() {
        "https" => Ok(url),
        "http" if allow_loopback && loopback_host => Ok(url),
        "http" => Err(if allow_loopback {
            "http:// is allowed only for loopback receivers in dev; use https://".into()
        } else {
            "must be https:// (deliveries carry job details and a signature)".into()
        }),
        other => Err(format!("scheme {other:?} is not allowed; use https://")),
    }
}

fn refusal(what: &str, rule: &str) -> String {
    format!("{what}; {rule}")
}

/// Checks one address a callback host resolved to.
pub fn check_ip(ip: IpAddr, allow_loopback: bool) -> Result<(), String> {
    match ip {
        IpAddr::V4(v4) => check_v4(v4, allow_loopback),
        IpAddr::V6(v6) => check_v6(v6, allow_loopback),
    }
}

fn check_v4(ip: Ipv4Addr, allow_loopback: bool) -> Result<(), String> {
    let o = ip.octets();
    let public = "callbacks go only to public addresses";
    let refuse = |what: &str| Err(refusal(&format!("{ip} is {what}"), public));
    if ip.is_loopback() {
        if allow_loopback {
            return Ok(());
        }
        return Err(refusal(
            &format!("{ip} is this machine (loopback, 127.0.0.0/8)"),
            "callbacks go only to public addresses (loopback is allowed only in dev)",
        ));
    }
    if o == [169, 254, 169, 254] {
        return refuse("the cloud metadata service (169.254.169.254)");
    }
    match o {
        [0, ..] => refuse("in \"this network\" (0.0.0.0/8)"),
        [10, ..] => refuse("private (10.0.0.0/8)"),
        [100, b, ..] if (64..128).contains(&b) => refuse("carrier-grade NAT (100.64.0.0/10)"),
        [169, 254, ..] => refuse("link-local (169.254.0.0/16)"),
        [172, b, ..] if (16..32).contains(&b) => refuse("private (172.16.0.0/12)"),
        [192, 0, 0, _] => refuse("IETF protocol assignments (192.0.0.0/24)"),
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => refuse("a documentation range"),
        [192, 168, ..] => refuse("private (192.168.0.0/16)"),
        [198, b, ..] if b == 18 || b == 19 => refuse("a benchmarking range (198.18.0.0/15)"),
        [a, ..] if a >= 224 => refuse("multicast or reserved (224.0.0.0/3)"),
        _ => Ok(()),
    }
}

fn check_v6(ip: Ipv6Addr, allow_loopback: bool) -> Result<(), String> {
    let public = "callbacks go only to public addresses";
    let refuse = |what: &str| Err(refusal(&format!("{ip} is {what}"), public));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return check_v4(v4, allow_loopback);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) reaches the IPv4 address in its last 32 bits.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        return check_v4(v4, allow_loopback);
    }
    if ip.is_loopback() {
        if allow_loopback {
            return Ok(());
        }
        return Err(refusal(
            &format!("{ip} is this machine (loopback)"),
            "callbacks go only to public addresses (loopback is allowed only in dev)",
        ));
    }
    if ip.is_unspecified() {
        return refuse("unspecified (::)");
    }
    match s[0] {
        x if x & 0xfe00 == 0xfc00 => refuse("a unique local address (fc00::/7)"),
        x if x & 0xffc0 == 0xfe80 => refuse("link-local (fe80::/10)"),
        x if x & 0xffc0 == 0xfec0 => refuse("site-local (fec0::/10, deprecated)"),
        x if x & 0xff00 == 0xff00 => refuse("multicast (ff00::/8)"),
        0x2001 if s[1] == 0x0db8 => refuse("a documentation range (2001:db8::/32)"),
        // Tunnels to IPv4 addresses their relays choose, inside the platform's networks too.
        0x2001 if s[1] == 0 => refuse("Teredo (2001::/32)"),
        0x2002 => refuse("6to4 (2002::/16)"),
        // Translation to IPv4 by the network's own translator, to any address it serves.
        0x64 if s[1] == 0xff9b && s[2] == 1 => refuse("NAT64 local use (64:ff9b:1::/48)"),
        // Other IPv4-compatible forms (::a.b.c.d, deprecated) are refused outright.
        0 => refuse("a reserved IPv6 range (::/8)"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_err(text: &str, dev: bool) -> String {
        check_url(text, dev).expect_err(text)
    }

    #[test]
    fn https_to_a_public_name_or_address_is_accepted() {
        for ok in [
            "https://hooks.example.com/tuneplane?token=abc",
            "https://hooks.slack.com/services/T0/B0/x",
            "https://93.184.216.34:8443/hook",
            "https://[2606:4700::1111]/hook",
        ] {
            assert!(check_url(ok, false).is_ok(), "{ok}");
        }
    }

    #[test]
    fn the_metadata_service_private_ranges_and_loopback_are_refused_with_their_names() {
        let cases = [
            (
                "https://169.254.169.254/latest/meta-data/",
                "metadata service",
            ),
            ("https://10.1.2.3/hook", "private (10.0.0.0/8)"),
            ("https://172.20.0.1/hook", "private (172.16.0.0/12)"),
            ("https://192.168.1.1/hook", "private (192.168.0.0/16)"),
            ("https://127.0.0.1:9000/hook", "loopback"),
            ("https://localhost:9000/hook", "loopback"),
            ("https://[::1]/hook", "loopback"),
            ("https://[::ffff:10.0.0.1]/hook", "private (10.0.0.0/8)"),
            ("https://[fd00:ec2::254]/hook", "unique local"),
            ("https://[fe80::1]/hook", "link-local"),
            ("https://100.100.100.200/hook", "carrier-grade NAT"),
            ("https://metadata.google.internal/hook", "metadata service"),
            ("https://0.0.0.0/hook", "this network"),
        ];
        for (url, words) in cases {
            let err = url_err(url, false);
            assert!(err.contains(words), "{url}: {err}");
            assert!(err.contains("public addresses"), "{url}: {err}");
        }
    }

    #[test]
    fn dev_allows_loopback_over_http_and_nothing_else_more() {
        assert!(check_url("http://127.0.0.1:9000/hook", true).is_ok());
        assert!(check_url("http://localhost:9000/hook", true).is_ok());
        assert!(check_url("https://127.0.0.1:9000/hook", true).is_ok());
        assert!(url_err("http://hooks.example.com/x", true).contains("only for loopback"));
        assert!(url_err("https://10.0.0.1/x", true).contains("private"));
        assert!(url_err("https://169.254.169.254/x", true).contains("metadata"));
    }

    #[test]
    fn other_schemes_credentials_and_fragments_are_refused() {
        assert!(url_err("http://hooks.example.com/x", false).contains("must be https://"));
        assert!(url_err("ftp://hooks.example.com/x", false).contains("\"ftp\""));
        assert!(url_err("https://user:pw@hooks.example.com/x", false).contains("password"));
        assert!(url_err("https://hooks.example.com/x#frag", false).contains("fragment"));
        assert!(url_err("not a url", false).contains("not a URL"));
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(url_err(&long, false).contains("longer than"));
    }

    /// Each of `addrs` is refused, as a resolved address and as a URL's literal, in dev too,
    /// with `words` naming the range.
    fn assert_refused(addrs: &[&str], words: &str) {
        for addr in addrs {
            let ip: IpAddr = addr.parse().unwrap();
            let err = check_ip(ip, false).expect_err(addr);
            assert!(err.contains(words), "{addr}: {err}");
            assert!(err.contains("public addresses"), "{addr}: {err}");
            assert!(check_ip(ip, true).is_err(), "{addr} in dev");
            let url = format!("https://[{addr}]/hook");
            assert!(url_err(&url, false).contains(words), "{url}");
        }
    }

    #[test]
    fn six_to_four_addresses_are_refused() {
        // 6to4 of 10.0.0.1 and of a public address alike: the relay is not ours to judge.
        assert_refused(&["2002:a00:1::1", "2002:5db8:d822::1"], "6to4 (2002::/16)");
    }

    #[test]
    fn teredo_addresses_are_refused() {
        assert_refused(
            &["2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::1"],
            "Teredo (2001::/32)",
        );
    }

    #[test]
    fn nat64_local_use_addresses_are_refused() {
        assert_refused(
            &["64:ff9b:1::a00:1", "64:ff9b:1:ffff::1"],
            "NAT64 local use (64:ff9b:1::/48)",
        );
    }

    #[test]
    fn site_local_addresses_are_refused() {
        assert_refused(&["fec0::1", "feff:ffff::1"], "site-local (fec0::/10");
    }

    #[test]
    fn public_ipv6_beside_the_refused_ranges_is_allowed() {
        for ok in ["2606:4700::1111", "2001:4860:4860::8888", "2003::1"] {
            let ip: IpAddr = ok.parse().unwrap();
            assert!(check_ip(ip, false).is_ok(), "{ok}");
            assert!(
                check_url(&format!("https://[{ok}]/hook"), false).is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn resolved_addresses_are_judged_like_literals() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(check_ip(ip("93.184.216.34"), false).is_ok());
        assert!(check_ip(ip("127.0.0.1"), true).is_ok());
        assert!(check_ip(ip("127.0.0.1"), false).is_err());
        assert!(check_ip(ip("10.255.0.1"), true).is_err());
        assert!(
            check_ip(ip("64:ff9b::a9fe:a9fe"), false)
                .unwrap_err()
                .contains("metadata")
        );
        assert!(check_ip(ip("::a00:1"), false).is_err());
        assert!(check_ip(ip("2001:db8::1"), false).is_err());
        assert!(check_ip(ip("2606:4700::1111"), false).is_ok());
    }
}
