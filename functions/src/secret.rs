//! [`Secret`]: a configured secret (webhook HMAC keys, the blob URL-signing key) that never
//! shows in `Debug` output, log fields or error messages. Code that needs the bytes asks for
//! them explicitly with [`Secret::expose`], so every use is easy to find.

/// A secret string whose `Debug` prints `[redacted]`; it has no `Display` on purpose.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`; from here on only [`Secret::expose`] gives it back.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for HMAC keys and the like; never log or format it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Length in bytes (config checks report it without the value).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for an empty secret.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_of_a_secret_and_of_structs_holding_it_is_redacted() {
        let s = Secret::new("whsec-do-not-print-me");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(&s)), "Some([redacted])");
        assert_eq!(s.expose(), "whsec-do-not-print-me");
    }
}
