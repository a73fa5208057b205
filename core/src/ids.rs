//! Names and ids that come from outside, each rule spelled once: DNS labels, tenant names and
//! the ids the API hands out (jobs, playgrounds, keys). Every entry (API, console, triggers,
//! webhooks, the admin CLI, quotas) checks through here, so a name one door accepts is never
//! refused by another.
//!
//! [`TenantId`] and [`Id`] (alias [`JobId`]) are the checked forms: the only way to make one is
//! [`TenantId::parse`] / [`Id::parse`] (or deserializing, which checks the same), so a value of
//! either type has passed its rule. Every stored record's tenant is a [`TenantId`] and the
//! stores' tenant lookups take one, so a tenant is checked once, where it comes in. [`valid_tenant`] and [`valid_id`] ask the same question
//! without keeping the value.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

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

/// A name or id that broke its rule: what it was meant to be, the value, and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a valid {what}: use {rule}")]
pub struct IdError {
    /// `tenant name` or `id`.
    pub what: &'static str,
    /// The value given.
    pub value: String,
    /// The rule in words ([`TENANT_RULE`] or [`ID_RULE`]).
    pub rule: &'static str,
}

/// Defines a string newtype that can only hold values passing `check`.
macro_rules! checked_name {
    ($(#[$doc:meta])* $name:ident, $check:ident, $what:literal, $rule:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        /// Shown as the quoted text, like the `String` it replaces in messages.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $name {
            /// Checks `value` against the rule; the error names the value and the rule.
            pub fn parse(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                if $check(&value) {
                    Ok(Self(value))
                } else {
                    Err(IdError {
                        what: $what,
                        value,
                        rule: $rule,
                    })
                }
            }

            /// The checked text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The checked text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::parse(s)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        /// Hashes and orders as its text, so a map keyed by it can be read with a `&str`.
        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl From<&$name> for String {
            fn from(v: &$name) -> String {
                v.0.clone()
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Self::parse(String::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

checked_name!(
    /// A tenant name that passed [`TENANT_RULE`]: what keys, quotas, webhook sources, triggers,
    /// namespaces and the admin commands take.
    TenantId,
    valid_tenant,
    "tenant name",
    TENANT_RULE
);

checked_name!(
    /// An id that passed [`ID_RULE`]: job ids, and the same rule for playgrounds, schedules,
    /// templates and uploads.
    Id,
    valid_id,
    "id",
    ID_RULE
);

/// A job id ([`Id`]).
pub type JobId = Id;

/// Most characters an array child's index adds to its parent's id (`-9999`: sizes are at most
/// [`crate::spec::MAX_ARRAY_SIZE`]).
pub const CHILD_SUFFIX_MAX: usize = 5;

impl Id {
    /// The id of child `index` of the array whose parent is `self`: `<parent>-<index>`. Only
    /// digits and `-` are added, so this fails only when the result is longer than [`ID_MAX`]:
    /// never for a parent of at most `ID_MAX - CHILD_SUFFIX_MAX` characters and an index below
    /// [`crate::spec::MAX_ARRAY_SIZE`] (the API's ids are 22).
    pub fn child(&self, index: u32) -> Result<Id, IdError> {
        Id::parse(format!("{}-{index}", self.0))
    }
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

    #[test]
    fn the_checked_types_hold_only_what_their_rule_allows_however_they_are_made() {
        let t40 = "a".repeat(40);
        assert_eq!(
            TenantId::parse(t40.clone()).map(String::from),
            Ok(t40.clone())
        );
        let err = TenantId::parse("a".repeat(41)).expect_err("41 characters");
        assert_eq!(err.rule, TENANT_RULE);
        assert!(
            err.to_string()
                .contains("is not a valid tenant name: use 1-40"),
            "{err}"
        );
        assert!("Acme".parse::<TenantId>().is_err() && "acme".parse::<TenantId>().is_ok());
        // Deserializing checks the same rule; serializing writes the plain string.
        let ok: Result<TenantId, _> = serde_json::from_str("\"acme\"");
        assert_eq!(ok.as_deref().ok(), Some("acme"));
        let bad: Result<JobId, _> = serde_json::from_str("\"../etc\"");
        assert!(bad.is_err_and(|e| e.to_string().contains("is not a valid id: use 1-64")));
        let id = JobId::parse("j-0123").expect("id");
        assert_eq!(
            serde_json::to_string(&id).ok().as_deref(),
            Some("\"j-0123\"")
        );
        assert!(JobId::parse("a".repeat(64)).is_ok() && JobId::parse("a".repeat(65)).is_err());
    }

    #[test]
    fn child_ids_are_checked_and_fit_any_parent_the_api_hands_out() {
        let parent = JobId::parse("j-0123").expect("id");
        assert_eq!(parent.child(7).map(String::from), Ok("j-0123-7".to_owned()));
        let longest = JobId::parse("a".repeat(ID_MAX - CHILD_SUFFIX_MAX)).expect("id");
        let last = crate::spec::MAX_ARRAY_SIZE - 1;
        assert!(longest.child(last).is_ok_and(|c| c.len() == ID_MAX));
        let too_long = JobId::parse("a".repeat(ID_MAX - 1)).expect("id");
        assert!(too_long.child(10).is_err());
        // Maps keyed by ids are read with a &str; ids compare with strings both ways.
        let map = std::collections::HashMap::from([(parent.clone(), 1)]);
        assert_eq!(map.get("j-0123"), Some(&1));
        let (text, owned) = ("j-0123", String::from("j-0123"));
        assert_eq!(parent, text);
        assert_eq!(text, parent);
        assert_eq!(parent, owned);
        assert_eq!(owned, parent);
    }
}
