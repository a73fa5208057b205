//! Log archives written beside the passes: a pass starts a job's archive and goes on (admitting,
//! syncing other jobs); a later pass picks up its outcome and ends the job (terminal record, then
//! the workload's deletion). A long archive (large logs, a slow kubelet) so never holds up the
//! admission of other jobs.
//!
//! At most [`MAX_WRITING`] archives are written at once (others wait for a turn), and every one
//! still running is aborted when the reconciler stops ([`Archives::abort_all`]): a stopped
//! replica writes nothing more, and the next leader archives again (a replace).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, Semaphore};
use tokio::task::AbortHandle;

use crate::error::Result;

/// Most archives written at the same time (as many as jobs a pass syncs at once).
pub const MAX_WRITING: usize = crate::config::PASS_CONCURRENCY;

/// Most archives of stopped attempts following their pods' logs through their grace at the same
/// time. They mostly wait (for the pods to end), so they do not take the turns of
/// [`MAX_WRITING`]: a preemption of a hundred jobs ends all their pods at once, not a few at a time.
pub const MAX_FOLLOWING: usize = 512;

enum Slot {
    Running(AbortHandle),
    Done(Result<String>),
}

/// Where a job's archive stands.
#[derive(Debug)]
pub enum Progress {
    /// Not started (or its outcome was already taken).
    None,
    /// Being written.
    Running,
    /// Written (its key) or failed; taking it clears it.
    Done(Result<String>),
}

/// The archives being written and the outcomes not yet picked up, by job id.
pub struct Archives {
    slots: Arc<Mutex<HashMap<String, Slot>>>,
    turns: Arc<Semaphore>,
    /// Turns of the archives that follow their pods through their grace.
    following: Arc<Semaphore>,
    /// Woken when an archive ends, so the pass that ends its job comes at once.
    wake: Arc<Notify>,
}

impl Archives {
    /// No archives; `wake` is notified whenever one ends.
    pub fn new(wake: Arc<Notify>) -> Archives {
        Archives {
            slots: Arc::new(Mutex::new(HashMap::new())),
            turns: Arc::new(Semaphore::new(MAX_WRITING)),
            following: Arc::new(Semaphore::new(MAX_FOLLOWING)),
            wake,
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where `job_id`'s archive stands; a finished one's outcome is handed over (and forgotten).
    pub fn take(&self, job_id: &str) -> Progress {
        let mut slots = self.slots();
        match slots.get(job_id) {
            None => Progress::None,
            Some(Slot::Running(_)) => Progress::Running,
            Some(Slot::Done(_)) => match slots.remove(job_id) {
                Some(Slot::Done(outcome)) => Progress::Done(outcome),
                _ => Progress::None,
            },
        }
    }

    /// Whether `job_id` has an archive here: being written, or its outcome not yet taken.
    pub fn has(&self, job_id: &str) -> bool {
        self.slots().contains_key(job_id)
    }

    /// Whether `job_id`'s archive is being written (or waits for its turn).
    pub fn is_running(&self, job_id: &str) -> bool {
        matches!(self.slots().get(job_id), Some(Slot::Running(_)))
    }

    /// Archives being written (or waiting for their turn).
    pub fn running(&self) -> usize {
        self.slots()
            .values()
            .filter(|s| matches!(s, Slot::Running(_)))
            .count()
    }

    /// Starts writing `job_id`'s archive with `write` (unless one is already running or done);
    /// `following`: it follows a stopped attempt's pods through their grace first
    /// ([`MAX_FOLLOWING`] turns rather than [`MAX_WRITING`]).
    pub fn start<F>(&self, job_id: &str, following: bool, write: F)
    where
        F: Future<Output = Result<String>> + Send + 'static,
    {
        let mut slots = self.slots();
        if slots.contains_key(job_id) {
            return;
        }
        let (all, turns, wake, id) = (
            self.slots.clone(),
            if following {
                self.following.clone()
            } else {
                self.turns.clone()
            },
            self.wake.clone(),
            job_id.to_owned(),
        );
        let task = tokio::spawn(async move {
            // The semaphore is never closed; without a permit the archive still runs.
            let _turn = turns.acquire_owned().await.ok();
            let outcome = write.await;
            all.lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, Slot::Done(outcome));
            wake.notify_one();
        });
        slots.insert(job_id.to_owned(), Slot::Running(task.abort_handle()));
    }

    /// Aborts every archive still running and forgets all outcomes (the reconciler stops).
    pub fn abort_all(&self) {
        for (_, slot) in self.slots().drain() {
            if let Slot::Running(task) = slot {
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_archive_runs_beside_the_caller_and_its_outcome_is_taken_once() {
        let wake = Arc::new(Notify::new());
        let archives = Archives::new(wake.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        archives.start("j", false, async move {
            let _ = rx.await;
            Ok("logs/j/logs.tar.gz".to_owned())
        });
        assert!(matches!(archives.take("j"), Progress::Running));
        assert!(archives.is_running("j") && archives.running() == 1);
        // A second start while it runs changes nothing.
        archives.start("j", false, async { Ok("other".to_owned()) });
        let _ = tx.send(());
        tokio::time::timeout(Duration::from_secs(5), wake.notified())
            .await
            .unwrap();
        assert!(
            matches!(archives.take("j"), Progress::Done(Ok(ref k)) if k == "logs/j/logs.tar.gz")
        );
        assert!(matches!(archives.take("j"), Progress::None));
        assert_eq!(archives.running(), 0);
    }

    #[tokio::test]
    async fn stopping_aborts_what_still_runs() {
        let archives = Archives::new(Arc::new(Notify::new()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        archives.start("j", false, async move {
            let _ = rx.await;
            Ok(String::new())
        });
        archives.abort_all();
        assert!(matches!(archives.take("j"), Progress::None));
        // The aborted task dropped its end of the channel.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(tx.is_closed());
    }
}
