//! What one tenant may read about another: nothing that names its jobs.
//!
//! Admission writes why a job waits, and the reason may name the jobs that hold the nodes it
//! needs ("held by j-… (8 GPUs)", "waiting behind job j-…"). Those texts are built once per pass
//! and shared by every waiting job, so the names are taken out per reader when a job's pending
//! reason is written: a job of the reader's own tenant keeps its id, any other (or one no longer
//! known) becomes "another tenant's job".

use std::borrow::Cow;

/// What a job id of another tenant reads as.
pub const OTHER_TENANT_JOB: &str = "another tenant's job";
/// What a playground id of another tenant reads as (playgrounds are admitted like jobs, so
/// reasons may name them).
pub const OTHER_TENANT_PLAYGROUND: &str = "another tenant's playground";

/// Length of the hex part of a job id (`j-` + 20 hex, as the functions mint them).
const ID_HEX: usize = 20;

/// `message` for a job of tenant `reader`: job ids of other tenants (`tenant_of` gives a job's
/// tenant; `None` for jobs it does not know) replaced by [`OTHER_TENANT_JOB`], "job <id>" included;
/// playground ids (`pg-` + 20 hex) likewise by [`OTHER_TENANT_PLAYGROUND`].
pub fn redact_job_ids<'a, 'm>(
    message: &'m str,
    reader: &str,
    tenant_of: impl Fn(&str) -> Option<&'a str>,
) -> Cow<'m, str> {
    let bytes = message.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut i = 0;
    while let Some((at, prefix)) = next_id_prefix(message, i) {
        let end = at + prefix.len() + ID_HEX;
        let is_id = end <= bytes.len()
            && bytes[at + prefix.len()..end]
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
            && (at == 0 || !is_word(bytes[at - 1]))
            && (end == bytes.len() || !is_word(bytes[end]));
        if !is_id {
            i = at + prefix.len();
            continue;
        }
        let id = &message[at..end];
        if tenant_of(id) != Some(reader) {
            let (noun, other) = if prefix == "pg-" {
                ("playground ", OTHER_TENANT_PLAYGROUND)
            } else {
                ("job ", OTHER_TENANT_JOB)
            };
            // "job j-…" reads "another tenant's job", not "job another tenant's job".
            let start = if message[..at].ends_with(noun) {
                at - noun.len()
            } else {
                at
            };
            out.push_str(&message[copied..start]);
            out.push_str(other);
            copied = end;
        }
        i = end;
    }
    if copied == 0 {
        return Cow::Borrowed(message);
    }
    out.push_str(&message[copied..]);
    Cow::Owned(out)
}

/// The next `j-` or `pg-` at or after byte `from`, with which it is.
fn next_id_prefix(message: &str, from: usize) -> Option<(usize, &'static str)> {
    let job = message[from..].find("j-").map(|p| (p + from, "j-"));
    let playground = message[from..].find("pg-").map(|p| (p + from, "pg-"));
    match (job, playground) {
        (Some(j), Some(p)) => Some(if p.0 < j.0 { p } else { j }),
        (j, p) => j.or(p),
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINE: &str = "j-0123456789abcdef0123";
    const THEIRS: &str = "j-fedcba9876543210fedc";
    const GONE: &str = "j-aaaaaaaaaaaaaaaaaaaa";

    fn tenant(id: &str) -> Option<&'static str> {
        match id {
            MINE => Some("acme"),
            THEIRS => Some("globex"),
            _ => None,
        }
    }

    #[test]
    fn other_tenants_and_unknown_jobs_lose_their_ids_own_jobs_keep_them() {
        let held = format!(
            "pool main: needs 2 nodes with 8 free h200 GPUs, 1 available; h200 GPUs held by {MINE} (8 GPUs), {THEIRS} (16 GPUs), {GONE} (8 GPUs)"
        );
        assert_eq!(
            redact_job_ids(&held, "acme", tenant),
            format!(
                "pool main: needs 2 nodes with 8 free h200 GPUs, 1 available; h200 GPUs held by {MINE} (8 GPUs), another tenant's job (16 GPUs), another tenant's job (8 GPUs)"
            )
        );
        let behind = format!("waiting behind job {THEIRS} (served first by priority)");
        assert_eq!(
            redact_job_ids(&behind, "acme", tenant),
            "waiting behind another tenant's job (served first by priority)"
        );
        assert_eq!(
            redact_job_ids(&behind, "globex", tenant),
            behind,
            "the holder's own tenant sees its id"
        );
    }

    #[test]
    fn other_tenants_playgrounds_lose_their_ids_too() {
        let pg = "pg-0123456789abcdef0123";
        let mine = |id: &str| (id == pg).then_some("acme");
        let held = format!("h200 GPUs held by {pg} (8 GPUs); waiting behind playground {pg}");
        assert_eq!(
            redact_job_ids(&held, "globex", mine),
            "h200 GPUs held by another tenant's playground (8 GPUs); waiting behind another tenant's playground"
        );
        assert_eq!(redact_job_ids(&held, "acme", mine), held);
    }

    #[test]
    fn text_without_ids_is_borrowed_unchanged() {
        for text in [
            "waiting behind earlier jobs",
            "pool j-main: no node",
            "j-0123 is short",
            "xj-0123456789abcdef0123 is inside a word",
            "pg-0123 is short, xpg-0123456789abcdef0123 inside a word",
        ] {
            assert!(matches!(
                redact_job_ids(text, "acme", tenant),
                Cow::Borrowed(t) if t == text
            ));
        }
    }
}
