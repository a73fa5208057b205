//! Readers of a running job's output and the interest they mark on its record (docs/design.md
//! §8, "Live logs").
//!
//! A follower (`logs -f`, `submit --wait`, the console's job page) marks the job followed for
//! [`FOLLOW_TTL_MS`](super::FOLLOW_TTL_MS) and polls. A one-off reader (a plain `tuneplane logs`,
//! `tuneplane status`, `GET .../logs/live` without `follow`) wants the output up to now: it
//! marks the job followed for [`READER_FOLLOW_MS`] and *wanted* at its request time
//! (`logs_wanted_at_ms`), and waits up to [`READER_WAIT_MS`] for the reconciler's read that
//! answers it. The reconciler reads a job with an unanswered want at its next pass, ahead of
//! every other (within the read budget), and writes the want it answered in the segment list
//! ([`Manifest::answered_ms`](super::Manifest::answered_ms)), even when the read found nothing
//! new. The answer compares only times the API wrote, so the API's and the reconciler's clocks
//! need not agree for it; the reconciler's own clock only ends a want's [`READER_FOLLOW_MS`].

use super::FOLLOW_TTL_MS;

/// How long a one-off reader's mark of interest lasts (ms): the job is read at once, then as a
/// followed job until it passes, so a reader who looks again soon finds recent output.
pub const READER_FOLLOW_MS: i64 = 10_000;

/// Longest the API waits for the read that answers a one-off reader (ms); then it answers with
/// what was shipped so far and says so.
pub const READER_WAIT_MS: i64 = 8_000;

/// A want at most this old (ms) serves a new reader too: one read answers readers who came
/// within a second of each other, and the record is written once for them.
pub const READER_COALESCE_MS: i64 = 1_000;

/// The interest marks of a job record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// `logs_followed_until_ms`: the job is followed until then.
    pub followed_until_ms: Option<i64>,
    /// `logs_wanted_at_ms`: a reader waits for the output written up to then.
    pub wanted_at_ms: Option<i64>,
}

/// Who reads a running job's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// Polls for new output for as long as it runs.
    Follower,
    /// Looks once and waits for the output up to now.
    OneOff,
}

/// The marks to store when `reader` comes at `now_ms` to a job whose record holds `stored`, or
/// `None` when the stored ones already serve it (nothing to write).
pub fn mark(stored: Marks, reader: Reader, now_ms: i64) -> Option<Marks> {
    let until_left = stored.followed_until_ms.map_or(0, |u| u - now_ms);
    match reader {
        // A mark with more than half its time left is not written again.
        Reader::Follower => (until_left <= FOLLOW_TTL_MS / 2).then_some(Marks {
            followed_until_ms: Some(now_ms + FOLLOW_TTL_MS),
            ..stored
        }),
        Reader::OneOff => {
            let recent_want = stored
                .wanted_at_ms
                .is_some_and(|w| w <= now_ms && now_ms - w <= READER_COALESCE_MS);
            if recent_want && until_left >= READER_FOLLOW_MS - READER_COALESCE_MS {
                return None;
            }
            Some(Marks {
                // Never shortens a follower's longer mark.
                followed_until_ms: Some(
                    stored
                        .followed_until_ms
                        .unwrap_or(0)
                        .max(now_ms + READER_FOLLOW_MS),
                ),
                wanted_at_ms: if recent_want {
                    stored.wanted_at_ms
                } else {
                    Some(now_ms)
                },
            })
        }
    }
}

/// The want the reconciler owes a read at `now_ms`: `wanted_at_ms` when no read answered it yet
/// (`answered_ms` is the latest answered) and its reader's interest still lasts (a reader whose
/// want could not be answered in time has its answer already, and is not read for forever).
pub fn owed(wanted_at_ms: Option<i64>, answered_ms: Option<i64>, now_ms: i64) -> Option<i64> {
    let wanted = wanted_at_ms?;
    let unanswered = answered_ms.is_none_or(|a| a < wanted);
    (unanswered && now_ms - wanted < READER_FOLLOW_MS).then_some(wanted)
}

/// Whether a shipment answering `answered_ms` holds the output up to `wanted_at_ms`.
pub fn answers(answered_ms: Option<i64>, wanted_at_ms: i64) -> bool {
    answered_ms.is_some_and(|a| a >= wanted_at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    #[test]
    fn a_one_off_reader_marks_a_short_follow_and_its_want() {
        let m = mark(Marks::default(), Reader::OneOff, NOW);
        assert_eq!(
            m,
            Some(Marks {
                followed_until_ms: Some(NOW + READER_FOLLOW_MS),
                wanted_at_ms: Some(NOW),
            })
        );
    }

    #[test]
    fn a_one_off_reader_never_shortens_a_followers_mark() {
        let stored = Marks {
            followed_until_ms: Some(NOW + 50_000),
            wanted_at_ms: None,
        };
        let m = mark(stored, Reader::OneOff, NOW);
        assert_eq!(
            m,
            Some(Marks {
                followed_until_ms: Some(NOW + 50_000),
                wanted_at_ms: Some(NOW),
            })
        );
    }

    #[test]
    fn readers_within_a_second_share_one_want_and_one_write() {
        let first = mark(Marks::default(), Reader::OneOff, NOW).unwrap_or_default();
        assert_eq!(mark(first, Reader::OneOff, NOW + 400), None);
        // Later than that: a new want, the same short follow lengthened.
        let later = mark(first, Reader::OneOff, NOW + READER_COALESCE_MS + 1);
        assert_eq!(
            later.and_then(|m| m.wanted_at_ms),
            Some(NOW + READER_COALESCE_MS + 1)
        );
        // A want "from the future" (another writer's clock) is not shared.
        let ahead = Marks {
            followed_until_ms: Some(NOW + READER_FOLLOW_MS),
            wanted_at_ms: Some(NOW + 5_000),
        };
        assert_eq!(
            mark(ahead, Reader::OneOff, NOW).and_then(|m| m.wanted_at_ms),
            Some(NOW)
        );
    }

    #[test]
    fn a_follower_writes_its_mark_only_past_half_its_time() {
        let fresh = mark(Marks::default(), Reader::Follower, NOW).unwrap_or_default();
        assert_eq!(fresh.followed_until_ms, Some(NOW + FOLLOW_TTL_MS));
        assert_eq!(fresh.wanted_at_ms, None);
        assert_eq!(mark(fresh, Reader::Follower, NOW + 1_000), None);
        assert!(mark(fresh, Reader::Follower, NOW + FOLLOW_TTL_MS / 2).is_some());
    }

    #[test]
    fn a_want_is_owed_until_answered_or_its_interest_passed() {
        assert_eq!(owed(Some(NOW), None, NOW + 100), Some(NOW));
        assert_eq!(owed(Some(NOW), Some(NOW - 1), NOW + 100), Some(NOW));
        assert_eq!(owed(Some(NOW), Some(NOW), NOW + 100), None);
        assert_eq!(owed(Some(NOW), None, NOW + READER_FOLLOW_MS), None);
        assert_eq!(owed(None, None, NOW), None);
        assert!(answers(Some(NOW), NOW));
        assert!(!answers(Some(NOW - 1), NOW));
        assert!(!answers(None, NOW));
    }
}
