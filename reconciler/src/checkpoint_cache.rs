//! The newest complete checkpoints of running jobs as preemption last looked them up
//! ([`crate::preempt`]), kept between passes in [`crate::Ctx`].

use std::collections::HashMap;
use std::sync::Mutex;

use tuneplane_core::admission::CheckpointSeen;

/// How long a looked-up checkpoint is trusted when choosing victims: a checkpoint completed
/// since makes a victim look costlier than it is for at most this long.
const CHECKPOINT_TTL_MS: i64 = 15_000;
/// Most checkpoint lookups one pass makes; the candidates not looked up count as having no
/// checkpoint (the costliest victims) until a later pass looks them up.
pub const LOOKUPS_PER_PASS: usize = 256;
/// Lookups in flight at once.
pub const LOOKUP_CONCURRENCY: usize = 16;

/// Newest complete checkpoints of running jobs, as last looked up (job id → when, and what).
#[derive(Debug, Default)]
pub struct CheckpointCache {
    seen: Mutex<HashMap<String, (i64, Option<CheckpointSeen>)>>,
}

impl CheckpointCache {
    /// What was found for `job_id` if it was looked up less than the TTL before `now`.
    pub fn fresh(&self, job_id: &str, now: i64) -> Option<Option<CheckpointSeen>> {
        self.fresh_within(job_id, now, CHECKPOINT_TTL_MS)
    }

    /// What was found for `job_id` if it was looked up less than `ttl_ms` before `now`.
    pub fn fresh_within(
        &self,
        job_id: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Option<Option<CheckpointSeen>> {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(job_id)
            .filter(|(at, _)| now - at < ttl_ms)
            .map(|(_, c)| c.clone())
    }

    /// Remembers what a lookup for `job_id` found at `now`.
    pub fn put(&self, job_id: &str, now: i64, found: Option<CheckpointSeen>) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        // Entries of jobs long gone are dropped now and then rather than tracked.
        if seen.len() > 4 * LOOKUPS_PER_PASS * 16 {
            seen.retain(|_, (at, _)| now - *at < CHECKPOINT_TTL_MS);
        }
        seen.insert(job_id.to_owned(), (now, found));
    }
}
