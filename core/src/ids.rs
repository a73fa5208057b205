//! Names and ids that come from outside, each rule spelled once: DNS labels, tenant names and
//! the ids the API hands out (jobs, playgrounds, keys). Every entry (API, console, triggers,
//! webhooks, the admin CLI, quotas) checks through here, so a name one door accepts is never
//! refused by another.

/// Most characters of a tenant name (namespaces, labels and keys are built from it).
pub const TENANT_MAX: usize = 40;
/// Most characters of an id the API hands out (jobs, playgrounds, schedules, templates).
pub const ID_MAX: usize = 64;
/// The tenant rule in words, for error messages.
pub const TENANT_RULE: &str = "1-40 lower-case letters, digits and '-'";
/// The id rule in words, for error messages.
pub const ID_RULE: &str = "1-64 lower-case letters, digits and '-'";

fn slug(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// True for tenant names: [`TENANT_RULE`]. Every door that takes a tenant (keys, quotas,
/// webhook sources, event senders, the inbox, namespaces, the admin commands) checks this one.
pub fn valid_tenant(t: &str) -> bool {
    slug(t, TENANT_MAX)
}

/// True for ids the API hands out: [`ID_RULE`] (safe in keys and paths).
pub fn valid_id(id: &str) -> bool {
    slug(id, ID_MAX)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_are_forty_characters_at_most_and_ids_sixty_four() {
        let (t40, t41) = ("a".repeat(40), "a".repeat(41));
        assert!(valid_tenant(&t40) && !valid_tenant(&t41));
        assert!(valid_id(&t41) && valid_id(&"a".repeat(64)) && !valid_id(&"a".repeat(65)));
        for bad in ["", "Acme", "a b", "a_b", "a/b", "ä"] {
            assert!(!valid_tenant(bad) && !valid_id(bad), "{bad:?}");
        }
        assert!(TENANT_RULE.starts_with(&format!("1-{TENANT_MAX} ")));
        assert!(ID_RULE.starts_with(&format!("1-{ID_MAX} ")));
    }
}
