//! What preemption writes on job records, and the texts tenants read about it (docs/design.md
//! §8, "Preemption"). Which jobs are preempted is decided by
//! [`crate::admission::plan_preemptions`]; this module holds what the decision leaves behind:
//!
//! - on each victim, a [`PreemptNotice`]: the reconciler ends the victim's attempt with
//!   [`crate::job::FailureReason::Preempted`] (its pods get the spec's grace to save a
//!   checkpoint), requeues it in place and counts nothing against `retries.infrastructure`;
//! - on the waiting job, which is admitted onto the victims' nodes at once, a [`Preempting`]:
//!   while the victims' pods still stop, its pending reason says so (`Preempting`).
//!
//! Texts name the rule, never another tenant's job or name.

use serde::{Deserialize, Serialize};

/// Why a job was preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptionRule {
    /// A tenant within its quota of a series (its guarantee) needed GPUs that another tenant
    /// held above its own quota (borrowed).
    Reclaim,
    /// A higher-priority job of the same tenant needed the tenant's quota or the nodes.
    Priority,
}

impl PreemptionRule {
    /// The metric label and wire name (`reclaim`, `priority`).
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionRule::Reclaim => "reclaim",
            PreemptionRule::Priority => "priority",
        }
    }

    /// What a victim's tenant reads: "preempted by quota reclaim", "preempted by a
    /// higher-priority job of its own tenant".
    pub fn victim_words(self) -> &'static str {
        match self {
            PreemptionRule::Reclaim => "preempted by quota reclaim",
            PreemptionRule::Priority => "preempted by a higher-priority job of its own tenant",
        }
    }
}

impl std::fmt::Display for PreemptionRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// On a victim: the platform decided to stop its current attempt for another job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreemptNotice {
    /// Why.
    pub rule: PreemptionRule,
    /// When it was decided (Unix ms); the attempt's pods get their grace from about then.
    pub at_ms: i64,
    /// The attempt it stops (a notice on a later attempt is stale and ignored).
    pub attempt: u32,
    /// Seconds of this attempt's work since its newest complete checkpoint (since it started
    /// running when it has none) at the decision: what it loses at most, unless it saves within
    /// its grace.
    pub lost_seconds: u64,
    /// GPUs of the attempt (a CPU-only machine counts as one): `lost_seconds` times this is the
    /// cost the victim choice minimised.
    pub gpus: u32,
    /// The newest complete checkpoint at the decision, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// The series the GPUs were taken back on (`h200`); `None` for CPU-only work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
}

impl PreemptNotice {
    /// The text of the victim's `Preempted` event and of its attempt's failure: the rule in
    /// words, what happens now, and what may be lost.
    pub fn message(&self, grace_seconds: u64) -> String {
        let why = match (self.rule, self.series.as_deref()) {
            (PreemptionRule::Reclaim, Some(series)) => format!(
                "{}: a tenant within its guaranteed {series} quota needs GPUs this job held above its own tenant's quota",
                self.rule.victim_words()
            ),
            (PreemptionRule::Reclaim, None) => format!(
                "{}: a tenant within its guaranteed quota needs what this job held above its own tenant's quota",
                self.rule.victim_words()
            ),
            (PreemptionRule::Priority, _) => self.rule.victim_words().to_owned(),
        };
        let saved = match &self.checkpoint {
            Some(c) => format!(
                "it resumes from checkpoint {c}: {}s of work since then are lost unless it saves within its grace",
                self.lost_seconds
            ),
            None => format!(
                "it has no complete checkpoint: {}s of work since it started are lost unless it saves one",
                self.lost_seconds
            ),
        };
        format!(
            "{why}; attempt {} has {grace_seconds}s to save a checkpoint and stop, and is queued again at its original place to resume from its newest complete checkpoint; {saved}",
            self.attempt
        )
    }
}

/// On a job admitted onto the nodes of preempted jobs: what it waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preempting {
    /// Why the victims were chosen.
    pub rule: PreemptionRule,
    /// The victims (internal: never shown to this job's tenant, who may not own them).
    pub victims: Vec<VictimRef>,
    /// When the victims were told (Unix ms): a checkpoint they complete since lets their pods
    /// go before their grace ends.
    pub at_ms: i64,
    /// By when every victim's pods are gone at the latest (their grace from the decision).
    pub until_ms: i64,
}

/// A victim as the job it was preempted for finds it: its id and the namespace its pods run in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VictimRef {
    /// The victim's job id.
    pub job_id: crate::ids::JobId,
    /// Its tenant (where its checkpoints are).
    pub tenant: crate::ids::TenantId,
    /// Its pods' namespace.
    pub namespace: String,
    /// Its attempt that was told to stop.
    pub attempt: u32,
}

impl Preempting {
    /// The pending message while `stopping` of the victims still stop at `now_ms`:
    /// `1 job of a borrowing tenant is saving and stopping, at most 50 s`.
    pub fn message(&self, stopping: usize, now_ms: i64) -> String {
        let jobs = if stopping == 1 { "job" } else { "jobs" };
        let whose = match self.rule {
            PreemptionRule::Reclaim => "of a borrowing tenant",
            PreemptionRule::Priority => "of lower priority of this tenant",
        };
        let verb = if stopping == 1 { "is" } else { "are" };
        let left = ((self.until_ms - now_ms).max(0) + 999) / 1000;
        format!("{stopping} {jobs} {whose} {verb} saving and stopping, at most {left} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waiting_jobs_message_counts_victims_and_time_left_and_names_no_job() {
        let p = Preempting {
            rule: PreemptionRule::Reclaim,
            victims: vec![VictimRef {
                job_id: "job-of-team-b".parse().unwrap(),
                tenant: "team-b".parse().unwrap(),
                namespace: "ns".into(),
                attempt: 1,
            }],
            at_ms: 10_000,
            until_ms: 60_000,
        };
        let m = p.message(1, 10_000);
        assert_eq!(
            m,
            "1 job of a borrowing tenant is saving and stopping, at most 50 s"
        );
        assert!(!m.contains("team-b"));
        let p = Preempting {
            rule: PreemptionRule::Priority,
            ..p
        };
        assert_eq!(
            p.message(2, 59_500),
            "2 jobs of lower priority of this tenant are saving and stopping, at most 1 s"
        );
        assert!(p.message(1, 90_000).ends_with("at most 0 s"));
    }

    #[test]
    fn the_victims_message_says_the_rule_the_grace_and_what_may_be_lost() {
        let n = PreemptNotice {
            rule: PreemptionRule::Reclaim,
            at_ms: 0,
            attempt: 1,
            lost_seconds: 4,
            gpus: 8,
            checkpoint: Some("step-10".into()),
            series: Some("h200".into()),
        };
        let m = n.message(120);
        assert!(
            m.starts_with("preempted by quota reclaim: a tenant within its guaranteed h200 quota"),
            "{m}"
        );
        assert!(m.contains("attempt 1 has 120s to save"), "{m}");
        assert!(
            m.contains("resumes from checkpoint step-10: 4s of work"),
            "{m}"
        );
        let n = PreemptNotice {
            rule: PreemptionRule::Priority,
            checkpoint: None,
            ..n
        };
        let m = n.message(30);
        assert!(
            m.starts_with("preempted by a higher-priority job of its own tenant;"),
            "{m}"
        );
        assert!(m.contains("no complete checkpoint: 4s of work"), "{m}");
    }
}
