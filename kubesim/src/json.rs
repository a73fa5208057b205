//! Small helpers over `serde_json::Value` objects and time stamps.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

/// The value at a JSON pointer, like `Value::pointer` but without allocating per token when the
/// pointer has no `~` escapes (the controllers read a few fields of every pod on every pass).
pub fn at<'a>(v: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() || pointer.contains('~') {
        return v.pointer(pointer);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(v, |cur, token| match cur {
        Value::Object(m) => m.get(token),
        Value::Array(a) => token.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// The string at a JSON pointer, if any.
pub fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    at(v, pointer).and_then(Value::as_str)
}

/// The strings of the JSON array `v`, other items skipped; none when `v` is absent or not an
/// array (finalizers, `command`, the values of a selector requirement).
pub fn strs(v: Option<&Value>) -> impl Iterator<Item = &str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The string field `key` of the object `v`, owned; empty when missing or not a string (a
/// container's `name`, a selector requirement's `operator`).
pub fn string(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The integer at a JSON pointer, if any.
pub fn i64_at(v: &Value, pointer: &str) -> Option<i64> {
    at(v, pointer).and_then(Value::as_i64)
}

/// The object's `metadata.name` (empty when missing).
pub fn name(v: &Value) -> &str {
    str_at(v, "/metadata/name").unwrap_or_default()
}

/// The object's `metadata.namespace` (empty when missing).
pub fn namespace(v: &Value) -> &str {
    str_at(v, "/metadata/namespace").unwrap_or_default()
}

/// The object's `metadata.uid` (empty when missing).
pub fn uid(v: &Value) -> &str {
    str_at(v, "/metadata/uid").unwrap_or_default()
}

/// A label value of the object.
pub fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// An annotation value of the object.
pub fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// A mutable object at `key` of `v`, created (and replacing a non-object) when needed.
pub fn obj_mut<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Value::Object(map) = v else {
        unreachable!("just made an object")
    };
    let entry = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// The current time as RFC 3339 with second precision, as Kubernetes writes it.
pub fn now_rfc3339() -> String {
    rfc3339(jiff::Timestamp::now())
}

/// A timestamp as RFC 3339 with second precision.
pub fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The current time as RFC 3339 with microseconds (`MicroTime`, used by Leases and events.k8s.io).
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Parses an RFC 3339 time stamp.
pub fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

/// Seconds elapsed since an RFC 3339 time stamp (0 when unparsable or in the future).
pub fn seconds_since(s: &str) -> f64 {
    parse_time(s)
        .map(|t| (jiff::Timestamp::now().as_millisecond() - t.as_millisecond()) as f64 / 1000.0)
        .unwrap_or(0.0)
        .max(0.0)
}

/// A kubectl-style age (`5s`, `3m`, `2h`, `4d`).
pub fn age(s: &str) -> String {
    let secs = seconds_since(s) as u64;
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        7200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

static SUFFIX_COUNTER: AtomicU64 = AtomicU64::new(0x9e37_79b9);

/// A pseudo-random lower-case alphanumeric suffix of `len` characters (for generateName and
/// controller-made names). Unique within a process; not cryptographic.
pub fn random_suffix(len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let seed = SUFFIX_COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    let nanos = (tuneplane_core::clock::now_nanos() % 1_000_000_000) as u64;
    let mut x = seed ^ nanos.rotate_left(17);
    (0..len)
        .map(|_| {
            // xorshift64*: enough spread for names.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            ALPHABET[(r >> 32) as usize % ALPHABET.len()] as char
        })
        .collect()
}

/// Whether `s` is a DNS-1123 subdomain (object names of most kinds).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// Whether `s` is a DNS-1035 label (RayJob and RayCluster names, services).
pub fn is_dns1035_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0].is_ascii_lowercase()
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_like_the_api_server() {
        assert!(is_dns_subdomain("a.b-c"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(is_dns1035_label("tp-abc"));
        assert!(!is_dns1035_label("1abc"));
    }

    #[test]
    fn suffixes_differ_and_have_the_asked_length() {
        let a = random_suffix(5);
        let b = random_suffix(5);
        assert_eq!(a.len(), 5);
        assert_ne!(a, b);
    }

    #[test]
    fn lookups_match_json_pointer() {
        let v = serde_json::json!({"a": {"b": [1, {"c": "x"}], "d~e": 2, "f/g": 3}});
        for p in [
            "/a/b/1/c", "/a/b/0", "/a/d~0e", "/a/f~1g", "/a/b/9", "/x", "",
        ] {
            assert_eq!(at(&v, p), v.pointer(p), "{p}");
        }
    }

    #[test]
    fn time_round_trips() {
        let now = now_rfc3339();
        assert!(parse_time(&now).is_some());
        assert!(seconds_since(&now) < 5.0);
    }
}
