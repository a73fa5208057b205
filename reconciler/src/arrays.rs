//! Array parents (docs/design.md §8, step 3c): each pass creates the next children of every
//! array (a chunk at a time, idempotent), passes a stop of the parent on to its children, and
//! writes the parent's counts and state when they changed. The children themselves are jobs like
//! any other; [`tuneplane_core::array::held_back`] keeps those beyond `array.parallelism` out of
//! the plan.

use std::collections::{HashMap, HashSet};

use tuneplane_core::array::{self, ArrayCounts, ArrayRole};
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::store::{NewJob, StoreError};

use crate::Ctx;
use crate::admit::{a_few_at_a_time, note};
use crate::ctx::PassReport;
use crate::error::Result;
use crate::sync::platform_event;

/// Children created per array per pass: a 10,000-child array is created over 20 passes, and a
/// pass with one new array is not a queue of thousands of writes.
pub const CHILDREN_PER_PASS: u32 = 500;

/// The array step over `parents` (the active array parents) and `active` (the other active
/// jobs, among them the children that have not ended).
pub async fn phase(
    ctx: &Ctx,
    parents: &[JobRecord],
    active: &[JobRecord],
    now: i64,
    report: &mut PassReport,
) {
    if parents.is_empty() {
        return;
    }
    let live = array::live_counts(active);
    let none = (ArrayCounts::default(), HashSet::new());
    for parent in parents {
        let (counts, ids) = live.get(parent.id.as_str()).unwrap_or(&none);
        let children: Vec<&JobRecord> = active
            .iter()
            .filter(|j| ids.contains(j.id.as_str()))
            .collect();
        let outcome = one(ctx, parent, counts, &children, now).await;
        note(ctx, report, "array", &parent.id, outcome);
    }
    // Forget parents that ended.
    let keep: HashSet<&str> = parents.iter().map(|p| p.id.as_str()).collect();
    ctx.array_ended
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|id, _| keep.contains(id.as_str()));
}

async fn one(
    ctx: &Ctx,
    parent: &JobRecord,
    live: &ArrayCounts,
    children: &[&JobRecord],
    now: i64,
) -> Result<()> {
    let (Some(book), Some(size)) = (parent.array_parent(), parent.array_size()) else {
        return Ok(());
    };
    let mut book = book.clone();
    // Read before this pass creates more: a child created now is not in `children` yet.
    let ended = ended_children(ctx, parent, &book, children).await?;
    if parent.stop_requested {
        stop_children(ctx, children, now).await;
        if book.created < size {
            book.skipped = size - book.created;
            book.created = size;
        }
    }
    let range = array::to_create(parent, CHILDREN_PER_PASS);
    if !range.is_empty() {
        book.created = create_children(ctx, parent, range, now).await?;
    }
    let mut ended_counts = ArrayCounts {
        stopped: book.skipped,
        ..ArrayCounts::default()
    };
    for state in ended.values() {
        ended_counts.add(*state);
    }
    book.counts = ended_counts.with_live(live, size);
    let (state, failure) = array::parent_state(&book.counts, size, parent.stop_requested);
    let mut next = parent.clone();
    next.array = Some(ArrayRole::Parent(book));
    next.state = state;
    next.failure = failure;
    let mut events = Vec::new();
    if state != parent.state {
        if state == JobState::Running && next.running_at_ms.is_none() {
            next.running_at_ms = Some(now);
        }
        if state.is_terminal() {
            next.finished_at_ms = Some(now);
            next.pending = None;
        }
        let counts = next.array_parent().map(|b| b.counts).unwrap_or_default();
        let kind = if state == JobState::Failed {
            "Warning"
        } else {
            "Normal"
        };
        events.push(platform_event(
            now,
            format!("array-{}", state.as_str().to_ascii_lowercase()),
            kind,
            &format!("Array{}", camel(state)),
            counts.summary(size),
        ));
    }
    if next != *parent {
        ctx.jobs.update_job_with_events(&next, &events).await?;
    }
    Ok(())
}

/// `Running`, `Succeeded`, ... for event reasons.
fn camel(state: JobState) -> String {
    let s = state.as_str().to_ascii_lowercase();
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// Asks every child of a stopped array that has not ended to stop (the reconciler stops each at
/// its next sync); a child that changed meanwhile is asked again at the next pass.
async fn stop_children(ctx: &Ctx, children: &[&JobRecord], now: i64) {
    let stops: Vec<_> = children
        .iter()
        .filter(|c| !c.stop_requested && !c.is_terminal())
        .map(|c| async move {
            let mut next = (*c).clone();
            next.stop_requested = true;
            let event = platform_event(
                now,
                "array-stop".into(),
                "Normal",
                "StopRequested",
                "its array was stopped".into(),
            );
            let _ = ctx.jobs.update_job_with_events(&next, &[event]).await;
        })
        .collect();
    a_few_at_a_time(stops).await;
}

/// Creates child `index` of `parent` (one that exists already counts as created).
async fn create_child(ctx: &Ctx, parent: &JobRecord, index: u32, now: i64) -> (u32, Result<()>) {
    let (child, event) = match array::child_record(parent, index, now) {
        Ok(made) => made,
        Err(e) => return (index, Err(e.into())),
    };
    let new = NewJob {
        job: &child,
        idem: None,
        events: std::slice::from_ref(&event),
        audit: None,
    };
    match ctx.jobs.create(new).await {
        Ok(_) | Err(StoreError::AlreadyExists { .. }) => (index, Ok(())),
        Err(e) => (index, Err(e.into())),
    }
}

/// Creates children `range` of `parent` (a child that already exists is left alone) and returns
/// how many children exist from index 0 without a gap.
async fn create_children(
    ctx: &Ctx,
    parent: &JobRecord,
    range: std::ops::Range<u32>,
    now: i64,
) -> Result<u32> {
    let start = range.start;
    // Each create boxed when it starts: the futures are built up front (up to an array's size)
    // and only `PASS_CONCURRENCY` run at a time, so the unstarted ones hold only their index.
    let creates: Vec<_> = range
        .map(|index| async move { Box::pin(create_child(ctx, parent, index, now)).await })
        .collect();
    let mut outcomes = a_few_at_a_time(creates).await;
    outcomes.sort_unstable_by_key(|(index, _)| *index);
    let mut created = start;
    for (index, outcome) in outcomes {
        match outcome {
            Ok(()) if index == created => created += 1,
            Ok(()) => {}
            Err(e) if created == start => return Err(e),
            Err(_) => break,
        }
    }
    Ok(created)
}

/// The ended children of `parent` with their states: those this process already read, and each
/// created child that is neither live nor read yet, read now (once per child; after a restart,
/// every ended child once).
async fn ended_children(
    ctx: &Ctx,
    parent: &JobRecord,
    book: &array::ArrayParent,
    live: &[&JobRecord],
) -> Result<HashMap<String, JobState>> {
    let mut known = ctx
        .array_ended
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(parent.id.as_str())
        .cloned()
        .unwrap_or_default();
    let created = book.created.saturating_sub(book.skipped);
    let expected = (created as usize).saturating_sub(live.len());
    if known.len() < expected {
        let live_ids: HashSet<&str> = live.iter().map(|c| c.id.as_str()).collect();
        let unread: Vec<String> = (0..created)
            .map(|i| array::child_id(&parent.id, i))
            .filter(|id| !live_ids.contains(id.as_str()) && !known.contains_key(id))
            .collect();
        let reads: Vec<_> = unread
            .iter()
            .map(|id| async move { (id.clone(), ctx.jobs.get_job(id).await) })
            .collect();
        for (id, read) in a_few_at_a_time(reads).await {
            // A child created in this pass is not in the active list yet: it is not ended.
            if let Some(job) = read?
                && job.is_terminal()
            {
                known.insert(id, job.state);
            }
        }
        ctx.array_ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(String::from(&parent.id), known.clone());
    }
    Ok(known)
}
