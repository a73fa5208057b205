//! Names and ids that come from outside, each rule spelled once: DNS labels, tenant names and
//! the ids the API hands out (jobs, playgrounds, keys). Every entry (API, console, triggers,
//! webhooks, the admin CLI, quotas) checks through here, so a name one door accepts is never
//! refused by another.

/// True if `s` is a lower-case RFC 1123 DNS label of at most `max` characters that starts with a letter.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}
