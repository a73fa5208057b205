//! Ids and secrets from the operating system's randomness: job and request ids, playground
//! server keys, signing secrets and console session keys.

/// `<prefix>-<20 lower-case hex>` from 80 random bits.
pub fn random_id(prefix: &str) -> String {
    format!("{prefix}-{}", hex::encode(random_bytes::<10>()))
}

/// A new job id (`j-` + 20 hex).
pub fn new_job_id() -> String {
    random_id("j")
}

/// Random bytes from the operating system, or a hard error: ids and secrets (API keys, console
/// sessions) are never made from anything guessable. Without the OS's randomness nothing can be
/// minted safely, so this panics (the request fails; a Lambda invocation reports the error)
/// rather than fall back to time or process ids.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if let Err(e) = getrandom::fill(&mut out) {
        panic!("no randomness from the operating system ({e}): refusing to mint ids or secrets");
    }
    out
}

/// A new playground server key: 32 random bytes as hex.
pub fn new_server_key() -> String {
    hex::encode(random_bytes::<32>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuneplane_core::control::valid_id;

    #[test]
    fn random_ids_are_valid_and_distinct() {
        let a = new_job_id();
        let b = new_job_id();
        assert!(valid_id(&a) && valid_id(&b));
        assert_ne!(a, b);
        assert_eq!(a.len(), 22);
    }

    #[test]
    fn ids_with_path_characters_are_invalid() {
        for bad in ["", "../x", "A", "j/1", "j#1", &"a".repeat(65)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }
}
