//! `GET /v1/audit`: the caller's tenant's audit trail (every change made to its jobs,
//! playgrounds, quota and keys, by whom and through which door), oldest first.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use tuneplane_core::audit::{AUDIT_LIST_LIMIT, AuditQuery};
use tuneplane_core::submit::SCOPE_JOBS_READ;

use crate::error::ApiError;
use crate::state::{AppState, Auth};

/// Query of `GET /v1/audit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditParams {
    /// Entries made at or after this time: a duration back from now (`30m`, `12h`, `7d`), an
    /// RFC 3339 time or epoch milliseconds. Default: the last 7 days.
    pub since: Option<String>,
    /// Entries made before this time (same forms). Default: now.
    pub until: Option<String>,
    /// At most this many, the newest kept (1..=1000, default 1000).
    pub limit: Option<usize>,
}

/// The default window of a listing without `since`.
pub const DEFAULT_SINCE: &str = "7d";

/// `GET /v1/audit?since&until&limit`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Query(params): Query<AuditParams>,
) -> Result<Json<Value>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let (since, until) = window(
        ("since", params.since.as_deref().unwrap_or(DEFAULT_SINCE)),
        ("until", params.until.as_deref()),
        (state.clock)(),
    )?;
    let limit = match params.limit {
        None => AUDIT_LIST_LIMIT,
        Some(n) if (1..=AUDIT_LIST_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("limit: {n} is out of range; give 1 to {AUDIT_LIST_LIMIT}"),
            ));
        }
    };
    let query = AuditQuery {
        tenant: Some(principal.tenant.clone()),
        since_ms: Some(since),
        until_ms: until,
        limit,
    };
    let entries = state.submit.jobs().list_audit(&query).await?;
    Ok(Json(json!({
        "tenant": principal.tenant,
        "since_ms": since,
        "until_ms": until,
        "entries": entries,
    })))
}

/// A query's window: its start (`name`, text) and its optional end, parsed with [`parse_time`]
/// against `now_ms`; an error names the parameter, and an end not after the start is refused.
pub fn window(
    (start_name, start): (&str, &str),
    (end_name, end): (&str, Option<&str>),
    now_ms: i64,
) -> Result<(i64, Option<i64>), ApiError> {
    let bound = |field: &str, text: &str| {
        parse_time(text, now_ms)
            .map_err(|e| ApiError::bad_request("invalid_query", format!("{field}: {e}")))
    };
    let from = bound(start_name, start)?;
    let to = end.map(|t| bound(end_name, t)).transpose()?;
    if to.is_some_and(|to| to <= from) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("{end_name}: the window's end must be after its start ({start_name})"),
        ));
    }
    Ok((from, to))
}

/// A time bound from outside: a duration back from `now_ms` (`90s`, `30m`, `12h`, `7d`), an
/// RFC 3339 time (`2026-12-01T00:00:00Z`) or epoch milliseconds. The error says which forms work.
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64, String> {
    let t = text.trim();
    let forms = "give a duration back from now (30m, 12h, 7d), an RFC 3339 time (2026-12-01T00:00:00Z) or epoch milliseconds";
    if t.is_empty() {
        return Err(format!("empty; {forms}"));
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .map_err(|_| format!("{t:?} is too large; {forms}"));
    }
    if let Some(unit) = t.chars().last().filter(|c| "smhdw".contains(*c)) {
        let number = &t[..t.len() - 1];
        if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
            let n: i64 = number
                .parse()
                .map_err(|_| format!("{t:?} is too long; {forms}"))?;
            let unit_ms: i64 = match unit {
                's' => 1_000,
                'm' => 60_000,
                'h' => 3_600_000,
                'd' => 86_400_000,
                _ => 7 * 86_400_000,
            };
            return Ok(now_ms.saturating_sub(n.saturating_mul(unit_ms)));
        }
    }
    t.parse::<jiff::Timestamp>()
        .map(|ts| ts.as_millisecond())
        .map_err(|_| format!("{t:?} is not a time; {forms}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_durations_times_and_milliseconds_and_name_the_forms_otherwise() {
        let now = 1_000_000_000_000;
        assert_eq!(parse_time("7d", now), Ok(now - 7 * 86_400_000));
        assert_eq!(parse_time("30m", now), Ok(now - 1_800_000));
        assert_eq!(parse_time("1w", now), Ok(now - 7 * 86_400_000));
        assert_eq!(parse_time("1234", now), Ok(1234));
        assert_eq!(
            parse_time("2026-12-01T00:00:00Z", now),
            Ok(1_796_083_200_000)
        );
        for bad in ["", "yesterday", "7x", "d", "-5d"] {
            let e = parse_time(bad, now).unwrap_err();
            assert!(e.contains("RFC 3339"), "{bad:?}: {e}");
        }
    }
}
