//! Attempt grants: what lets one attempt of a job write its outputs and checkpoints, and nothing
//! else (docs/design.md §4, "Outputs and checkpoints").
//!
//! Pods get no cloud credentials. The reconciler hands each attempt a token, `tpg1.<attempt>.<mac>`
//! where the MAC is HMAC-SHA256 under the installation's grant key (`TUNEPLANE_GRANT_KEY`, shared
//! by the reconciler and the API) over the job id and the attempt. The runner shows it to the API,
//! which checks it against the job in the request's path and the job's record, then presigns
//! requests only under that job's own prefixes ([`outputs_prefix`], [`checkpoints_prefix`]). The
//! token carries no expiry of its own: the record decides, so a grant dies with its attempt (its
//! end plus the grace to save and upload, [`crate::job::JobRecord::grant_valid_until_ms`]) and a
//! token of another job or attempt is refused. Deterministic, so a reconciler that restarts
//! mid-creation hands out the same token again.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Version prefix of grant tokens.
pub const TOKEN_PREFIX: &str = "tpg1";
/// Fewest bytes of key material a grant key must have.
pub const MIN_KEY_BYTES: usize = 32;

/// The installation's grant key (its bytes, and the MAC keyed with them).
#[derive(Clone)]
pub struct GrantKey {
    bytes: Vec<u8>,
    mac: Hmac<Sha256>,
}

impl PartialEq for GrantKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl std::fmt::Debug for GrantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantKey(..)")
    }
}

impl GrantKey {
    /// A key from its hex text (`openssl rand -hex 32`); at least [`MIN_KEY_BYTES`] bytes.
    pub fn parse(hex_text: &str) -> Result<GrantKey, String> {
        let bytes = hex::decode(hex_text.trim())
            .map_err(|_| "must be hex digits (e.g. openssl rand -hex 32)".to_owned())?;
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!(
                "is {} bytes; use at least {MIN_KEY_BYTES} (openssl rand -hex 32)",
                bytes.len()
            ));
        }
        GrantKey::from_bytes(bytes)
    }

    /// A key from raw bytes (tests and `tuneplane dev`, which draws one from the OS).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GrantKey, String> {
        // HMAC takes keys of any length; the error arm exists only in the type.
        let mac = Hmac::<Sha256>::new_from_slice(&bytes).map_err(|e| e.to_string())?;
        Ok(GrantKey { bytes, mac })
    }

    /// The key as hex text (what [`GrantKey::parse`] reads).
    pub fn to_hex(&self) -> String {
        hex::encode(&self.bytes)
    }

    fn mac(&self, job_id: &str, attempt: u32) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        mac.update(b"tuneplane-grant-v1\n");
        mac.update(job_id.as_bytes());
        mac.update(b"\n");
        mac.update(attempt.to_string().as_bytes());
        mac
    }

    /// The token of `attempt` of job `job_id`.
    pub fn token(&self, job_id: &str, attempt: u32) -> String {
        let tag = self.mac(job_id, attempt).finalize().into_bytes();
        format!("{TOKEN_PREFIX}.{attempt}.{}", hex::encode(tag))
    }

    /// The attempt `token` was minted for, if it is a token of job `job_id` under this key
    /// (compared in constant time).
    pub fn verify(&self, job_id: &str, token: &str) -> Option<u32> {
        let mut parts = token.trim().split('.');
        let (Some(TOKEN_PREFIX), Some(attempt), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let attempt: u32 = attempt.parse().ok().filter(|a| *a >= 1)?;
        let tag = hex::decode(tag).ok()?;
        self.mac(job_id, attempt)
            .verify_slice(&tag)
            .ok()
            .map(|()| attempt)
    }
}

/// A tenant's seal key in one namespace: what a CPU job's Pod needs, besides the sealed token in
/// its own spec, to recover its grant. Derived from the grant key (a reconciler that restarts, and
/// cannot read Secrets, derives the same one), one Secret per tenant and namespace instead of one
/// per attempt.
///
/// Why sealed and not a plain environment value: a pod spec is readable by whoever may read pods
/// (schedulers, operators, monitoring), a Secret only by whoever may read Secrets. The sealed
/// token alone opens nothing; the seal key alone mints nothing (the grant key stays with the
/// reconciler and the API), and it opens only tokens of its own tenant's jobs in its namespace.
/// Pods have no ServiceAccount token, so a job's pod cannot read another pod's spec.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey([u8; 32]);

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// The label every sealing input starts with (the runner's bootstrap spells it too).
pub const SEAL_LABEL: &str = "tuneplane-grant-seal-v1";

impl GrantKey {
    /// The seal key of `tenant`'s jobs in `namespace`.
    pub fn seal_key(&self, namespace: &str, tenant: &str) -> SealKey {
        let mut mac = self.mac.clone();
        mac.update(SEAL_LABEL.as_bytes());
        mac.update(b"\nkey\n");
        mac.update(namespace.as_bytes());
        mac.update(b"\n");
        mac.update(tenant.as_bytes());
        SealKey(mac.finalize().into_bytes().into())
    }
}

impl SealKey {
    /// The key as hex text (the Secret's value; the bootstrap reads it so).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Name of the Secret that holds this key for `tenant`: the tenant, then eight hex digits
    /// that change with the key, so that a new grant key gets a new Secret rather than meet the
    /// old one's "already exists".
    pub fn secret_name(&self, tenant: &str) -> String {
        let tag = self.block(b"secret-name");
        format!("tp-grant-seal-{tenant}-{}", hex::encode(&tag[..4]))
    }

    fn block(&self, input: &[u8]) -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).unwrap_or_else(|_| {
            // HMAC takes keys of any length; this arm exists only in the type.
            unreachable!("HMAC-SHA256 accepts a 32-byte key")
        });
        mac.update(input);
        mac.finalize().into_bytes().into()
    }

    /// `len` bytes of key stream for `attempt` of job `job_id`: HMAC-SHA256 blocks over
    /// "tuneplane-grant-seal-v1\n<job>\n<attempt>\n<block number>".
    fn stream(&self, job_id: &str, attempt: u32, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 32);
        let mut block = 0_u32;
        while out.len() < len {
            let input = format!("{SEAL_LABEL}\n{job_id}\n{attempt}\n{block}");
            out.extend_from_slice(&self.block(input.as_bytes()));
            block += 1;
        }
        out.truncate(len);
        out
    }

    /// `token` sealed for `attempt` of job `job_id`, as hex: the token XOR its key stream (one
    /// stream per job and attempt, and only that attempt's token is ever sealed with it).
    pub fn seal(&self, job_id: &str, attempt: u32, token: &str) -> String {
        let stream = self.stream(job_id, attempt, token.len());
        let sealed: Vec<u8> = token.bytes().zip(stream).map(|(a, b)| a ^ b).collect();
        hex::encode(sealed)
    }

    /// The token [`SealKey::seal`] sealed, if `sealed` is hex of ASCII under this key.
    pub fn unseal(&self, job_id: &str, attempt: u32, sealed: &str) -> Option<String> {
        let bytes = hex::decode(sealed).ok()?;
        let stream = self.stream(job_id, attempt, bytes.len());
        let token: Vec<u8> = bytes.iter().zip(stream).map(|(a, b)| a ^ b).collect();
        String::from_utf8(token).ok().filter(|t| t.is_ascii())
    }
}

/// Where job `job_id` of `tenant` keeps its outputs: `outputs/<tenant>/<job>/`.
pub fn outputs_prefix(tenant: &str, job_id: &str) -> String {
    format!("outputs/{tenant}/{job_id}/")
}

/// Where job `job_id` of `tenant` keeps its checkpoints: `checkpoints/<tenant>/<job>/`, one
/// folder per checkpoint.
pub fn checkpoints_prefix(tenant: &str, job_id: &str) -> String {
    format!("checkpoints/{tenant}/{job_id}/")
}

/// The folders of everything `tenant`'s jobs write through their grants: `outputs/<tenant>/` and
/// `checkpoints/<tenant>/`: what its storage quota counts.
pub fn tenant_prefixes(tenant: &str) -> [String; 2] {
    [
        format!("outputs/{tenant}/"),
        format!("checkpoints/{tenant}/"),
    ]
}

/// Name of the marker that makes a checkpoint complete (in the job's folder and in the store).
pub const COMPLETE_MARKER: &str = ".complete";

/// Checks a path a job names inside its outputs or a checkpoint: relative, `/`-separated, no
/// empty, `.` or `..` segment, a valid blob key once prefixed. The error says what to change.
pub fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("is empty".into());
    }
    if path.starts_with('/') {
        return Err(format!(
            "{path:?} is absolute; name it relative to the folder"
        ));
    }
    if path
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(format!(
            "{path:?} has an empty, '.' or '..' segment; paths stay inside the job's own folder"
        ));
    }
    crate::store::validate_blob_key(&format!("outputs/t/j/{path}"))
        .map_err(|e| format!("{path:?} cannot be stored: {e}"))
}

/// Checks a checkpoint's name: one path segment ([`check_relative_path`] without `/`).
pub fn check_checkpoint_name(name: &str) -> Result<(), String> {
    if name.contains('/') {
        return Err(format!("{name:?} must be one folder name, without '/'"));
    }
    check_relative_path(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> GrantKey {
        GrantKey::parse(&"ab".repeat(32)).expect("key")
    }

    #[test]
    fn a_token_opens_only_its_own_job_and_names_its_attempt() {
        let t = key().token("job-1", 2);
        assert!(t.starts_with("tpg1.2."));
        assert_eq!(key().verify("job-1", &t), Some(2));
        assert_eq!(key().verify("job-2", &t), None);
        // Another attempt number with the same MAC is refused.
        assert_eq!(key().verify("job-1", &t.replacen(".2.", ".3.", 1)), None);
        let other = GrantKey::parse(&"cd".repeat(32)).expect("key");
        assert_eq!(other.verify("job-1", &t), None);
        assert_eq!(key().verify("job-1", "Bearer x"), None);
        assert_eq!(key().verify("job-1", "tpg1.0.00"), None);
    }

    #[test]
    fn a_sealed_token_opens_only_with_its_tenants_key_for_its_own_job_and_attempt() {
        let k = key();
        let token = k.token("job-1", 2);
        let seal = k.seal_key("jobs", "acme");
        let sealed = seal.seal("job-1", 2, &token);
        assert!(!sealed.contains(&token) && sealed.len() == 2 * token.len());
        assert_eq!(
            seal.unseal("job-1", 2, &sealed).as_deref(),
            Some(token.as_str())
        );
        // Another job, attempt, tenant, namespace or grant key recovers nothing usable.
        let wrong = [
            seal.unseal("job-2", 2, &sealed),
            seal.unseal("job-1", 3, &sealed),
            k.seal_key("jobs", "globex").unseal("job-1", 2, &sealed),
            k.seal_key("other", "acme").unseal("job-1", 2, &sealed),
            GrantKey::parse(&"cd".repeat(32))
                .expect("key")
                .seal_key("jobs", "acme")
                .unseal("job-1", 2, &sealed),
        ];
        for got in wrong {
            assert!(got.is_none_or(|t| k.verify("job-1", &t).is_none()));
        }
        // Deterministic (a restarted reconciler renders the same), a new grant key a new Secret.
        assert_eq!(k.seal_key("jobs", "acme"), seal);
        assert_eq!(seal.to_hex().len(), 64);
        let name = seal.secret_name("acme");
        assert!(
            name.starts_with("tp-grant-seal-acme-")
                && name.len() == "tp-grant-seal-acme-".len() + 8
        );
        let rotated = GrantKey::parse(&"cd".repeat(32))
            .expect("key")
            .seal_key("jobs", "acme");
        assert_ne!(rotated.secret_name("acme"), name);
        assert!(crate::ids::is_dns_label(
            &k.seal_key("jobs", "a-").secret_name("a-"),
            63
        ));
    }

    #[test]
    fn keys_must_be_long_hex() {
        assert!(GrantKey::parse("abcd").unwrap_err().contains("at least 32"));
        assert!(
            GrantKey::parse(&"zz".repeat(32))
                .unwrap_err()
                .contains("hex")
        );
        assert_eq!(key().to_hex(), "ab".repeat(32));
    }

    #[test]
    fn paths_stay_inside_the_folder() {
        assert!(check_relative_path("model/weights.bin").is_ok());
        for bad in ["", "/etc/passwd", "../other/x", "a/../../b", "a//b", "./a"] {
            assert!(check_relative_path(bad).is_err(), "{bad}");
        }
        assert!(check_checkpoint_name("step-10").is_ok());
        assert!(check_checkpoint_name("a/b").is_err());
    }
}
