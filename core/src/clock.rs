//! The wall clock, read in one place: every crate stamps records and checks expiries with these.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 before it, `i64::MAX` past the far future).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Nanoseconds since the Unix epoch (0 before it): a seed for names that must not repeat
/// (scratch folders, write tokens, simulated uids), never compared as time.
pub fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Seconds since the Unix epoch (0 before it).
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_milliseconds_read_the_same_clock() {
        let ms = now_ms();
        let s = now_secs();
        // After 2020 and consistent with each other (s read after ms, so never behind it).
        assert!(ms > 1_577_836_800_000);
        assert!(s >= ms / 1000 && s - ms / 1000 <= 1);
    }
}
