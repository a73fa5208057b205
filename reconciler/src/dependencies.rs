//! Dependencies (docs/design.md §8, step 4b): which queued jobs still wait for the jobs they
//! depend on (they stay out of the plan, holding nothing), and which can no longer run because a
//! dependency ended otherwise: those end `FAILED` (`DependencyFailed`) in this pass, and so do
//! their own dependants, in the same pass.
//!
//! A dependency's state comes from the active list when it has not ended; an ended one is read
//! once and remembered (an end is final), so a pass where nothing ended reads nothing.

use std::collections::{HashMap, HashSet};

use tuneplane_core::depends::{self, Verdict};
use tuneplane_core::job::{Failure, FailureReason, JobRecord, JobState};

use crate::Ctx;
use crate::admit::{a_few_at_a_time, note};
use crate::ctx::PassReport;
use crate::error::Result;
use crate::sync::platform_event;

/// What the step found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Jobs that wait, with what for.
    pub waiting: HashMap<String, String>,
    /// Jobs ended `DependencyFailed` in this pass.
    pub failed: HashSet<String>,
}

/// The dependency step over the active jobs (`parents`: the array parents, which other jobs may
/// name; `active`: the rest).
pub async fn phase(
    ctx: &Ctx,
    parents: &[JobRecord],
    active: &[JobRecord],
    now: i64,
    report: &mut PassReport,
) -> Outcome {
    let mut out = Outcome::default();
    let dependants: Vec<&JobRecord> = active
        .iter()
        .filter(|j| tuneplane_core::admission::order::in_queue(j) && !j.spec.depends_on.is_empty())
        .collect();
    if dependants.is_empty() {
        return out;
    }
    let states: HashMap<&str, JobState> = parents
        .iter()
        .chain(active)
        .map(|j| (j.id.as_str(), j.state))
        .collect();
    // Dependencies not active: ended (or gone). Read the ones this process has not seen end.
    let unknown: HashSet<String> = dependants
        .iter()
        .flat_map(|j| depends::targets(j))
        .map(|(id, _)| id)
        .filter(|id| !states.contains_key(id.as_str()))
        .collect();
    let ended = match ended_states(ctx, unknown).await {
        Ok(ended) => ended,
        Err(e) => {
            // Without them nothing is decided: every dependant waits one more pass.
            note(ctx, report, "dependency read", "", Err(e));
            for j in dependants {
                out.waiting
                    .insert(String::from(&j.id), "waits for its dependencies".into());
            }
            return out;
        }
    };
    // Failures cascade within the pass: a job failed here is a failed dependency of the next.
    let mut failed_now: HashMap<String, JobState> = HashMap::new();
    let mut undecided = dependants;
    loop {
        let mut progressed = false;
        let mut still = Vec::new();
        for job in undecided {
            let state_of = |id: &str| {
                failed_now
                    .get(id)
                    .copied()
                    .or_else(|| states.get(id).copied())
                    .or_else(|| ended.get(id).copied().flatten())
            };
            match depends::verdict(job, state_of) {
                Verdict::Met => {}
                Verdict::Failed(why) => {
                    let outcome = fail(ctx, job, &why, now).await;
                    if outcome.is_ok() {
                        failed_now.insert(String::from(&job.id), JobState::Failed);
                        out.failed.insert(String::from(&job.id));
                        progressed = true;
                    } else {
                        out.waiting.insert(String::from(&job.id), why);
                    }
                    note(ctx, report, "dependency failed", &job.id, outcome);
                }
                Verdict::Waiting(why) => still.push((job, why)),
            }
        }
        if !progressed || still.is_empty() {
            for (job, why) in still {
                out.waiting.insert(String::from(&job.id), why);
            }
            break;
        }
        undecided = still.into_iter().map(|(j, _)| j).collect();
    }
    out
}

/// The states of jobs `ids` that are not active: ended (`Some`), or gone (`None`); each read
/// once per process and remembered.
async fn ended_states(
    ctx: &Ctx,
    ids: HashSet<String>,
) -> Result<HashMap<String, Option<JobState>>> {
    let mut known: HashMap<String, Option<JobState>> = HashMap::new();
    let mut unread = Vec::new();
    {
        let seen = ctx
            .dependency_ends
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for id in ids {
            match seen.get(&id) {
                Some(state) => {
                    known.insert(id, Some(*state));
                }
                None => unread.push(id),
            }
        }
    }
    let reads: Vec<_> = unread
        .into_iter()
        .map(|id| async move {
            let read = ctx.jobs.get_job(&id).await;
            (id, read)
        })
        .collect();
    for (id, read) in a_few_at_a_time(reads).await {
        match read? {
            Some(job) if job.is_terminal() => {
                ctx.dependency_ends
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.clone(), job.state);
                known.insert(id, Some(job.state));
            }
            // Active after all (created or requeued since the list was read): not ended.
            Some(job) => {
                known.insert(id, Some(job.state));
            }
            None => {
                known.insert(id, None);
            }
        }
    }
    Ok(known)
}

/// Ends queued `job` `FAILED` with `DependencyFailed`.
async fn fail(ctx: &Ctx, job: &JobRecord, why: &str, now: i64) -> Result<()> {
    let mut next = job.clone();
    next.transition(JobState::Failed, now)?;
    next.pending = None;
    next.failure = Some(Failure::new(
        FailureReason::DependencyFailed,
        format!("{why}: it never ran"),
    ));
    let event = platform_event(
        now,
        "dependency-failed".into(),
        "Warning",
        "DependencyFailed",
        why.to_owned(),
    );
    ctx.jobs.update_job_with_events(&next, &[event]).await?;
    ctx.metrics.inc_terminal(JobState::Failed);
    Ok(())
}
