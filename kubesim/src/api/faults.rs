//! API fault injection: the next N resource requests fail with a chosen status (429 with
//! `Retry-After`, 500, 503, 504), so clients' retry and backoff paths can be tested.

use std::sync::Mutex;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Pending injected failures.
#[derive(Debug, Default)]
pub struct Faults {
    next: Mutex<Option<(u32, u16)>>,
}

impl Faults {
    /// Makes the next `count` resource requests fail with `code`.
    pub fn fail_next(&self, count: u32, code: u16) {
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) = (count > 0).then_some((count, code));
    }

    /// The failure to answer this request with, if one is pending.
    pub fn take(&self) -> Option<Response> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let (left, code) = (*next)?;
        *next = (left > 1).then_some((left - 1, code));
        let (reason, message) = match code {
            429 => (
                "TooManyRequests",
                "too many requests, please try again later",
            ),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => (
                "Timeout",
                "the server was unable to return a response in the time allotted",
            ),
            _ => (
                "InternalError",
                "an error on the server (injected by kubesim) has prevented the request from succeeding",
            ),
        };
        let mut err = ApiError::internal(message);
        err.code = code;
        err.reason = reason;
        let mut resp = err.into_response();
        if code == 429 {
            resp.headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
        }
        if StatusCode::from_u16(code).is_err() {
            *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        }
        Some(resp)
    }
}
