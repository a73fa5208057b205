//! The one boundary where failures become HTTP responses: `{"error": {"code", "message",
//! "details", "request_id"}}` with the right status. Client errors say what to fix; internal
//! errors are logged once here, with the request id, and answered with a 500 that carries it.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tuneplane_core::capsule::CapsuleError;
use tuneplane_core::control::ControlError;
use tuneplane_core::control::subscriptions::SubscriptionError;
use tuneplane_core::spec::FieldError;
use tuneplane_core::store::StoreError;
use tuneplane_core::submit::SubmitError;

tokio::task_local! {
    /// The id of the request being served (set by the request-id middleware).
    pub static REQUEST_ID: String;
}

/// The current request id, or `-` outside a request.
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| "-".into())
}

/// Every failure of an API request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A failure of the submission service (auth, spec, code, idempotency, storage).
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// A request whose fields break rules; every problem is listed (like an invalid JobSpec).
    #[error("{}", describe_fields(subject, fields))]
    InvalidFields {
        /// The body's `error.code` (`invalid_request`); 400 with the fields in `details`.
        code: &'static str,
        /// What was checked (`playground request`).
        subject: &'static str,
        /// Every problem, with its field.
        fields: Vec<FieldError>,
    },
    /// A malformed request.
    #[error("{message}")]
    BadRequest {
        /// The body's `error.code` (`invalid_query`, `invalid_body`, ...); 400.
        code: &'static str,
        /// What to fix.
        message: String,
    },
    /// Unknown (or another tenant's) resource.
    #[error("{0}")]
    NotFound(String),
    /// The resource is not in a state that allows the request.
    #[error("{message}")]
    Conflict {
        /// The body's `error.code` (`logs_not_archived`, `busy`); 409.
        code: &'static str,
        /// What the resource's state is and what to do instead.
        message: String,
    },
    /// A webhook delivery that fails verification.
    #[error("{0}")]
    BadSignature(String),
    /// The body is over the limit.
    #[error("{0}")]
    TooLarge(String),
    /// The body is not in a media type the route accepts (JSON).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// Storage failed outside the submission service.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Over a rate limit of the key or the source address (`crate::rate`); 429.
    #[error("{0}")]
    RateLimited(String),
    /// A job's grant token that is not valid for the job, or whose attempt is over; 401.
    #[error("{0}")]
    InvalidGrant(String),
    /// A feature the installation has not configured; 503 with what to set.
    #[error("{message}")]
    Unavailable {
        /// The body's `error.code` (`grants_unavailable`).
        code: &'static str,
        /// What is missing.
        message: String,
    },
    /// A server the API forwards to (a playground's) is unreachable or answered badly.
    #[error("{message}")]
    Upstream {
        /// 502 or 503.
        status: StatusCode,
        /// The body's `error.code` (`proxy_unavailable`, `upstream_failed`).
        code: &'static str,
        /// What happened and what to do.
        message: String,
    },
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        match e {
            ControlError::NotFound(message) => ApiError::NotFound(message),
            ControlError::Busy(message) => ApiError::Conflict {
                code: "busy",
                message,
            },
            ControlError::InvalidPlayground(fields) => ApiError::InvalidFields {
                code: "invalid_request",
                subject: "playground request",
                fields,
            },
            e @ ControlError::PlaygroundLimit { .. } => ApiError::Conflict {
                code: "playground_limit",
                message: e.to_string(),
            },
            ControlError::Store(e) => ApiError::Store(e),
        }
    }
}

impl From<SubscriptionError> for ApiError {
    fn from(e: SubscriptionError) -> Self {
        match e {
            SubscriptionError::Invalid(fields) => ApiError::InvalidFields {
                code: "invalid_request",
                subject: "subscription",
                fields,
            },
            e @ SubscriptionError::Limit { .. } => ApiError::Conflict {
                code: "subscription_limit",
                message: e.to_string(),
            },
            e @ SubscriptionError::NotFound(_) => ApiError::NotFound(e.to_string()),
            SubscriptionError::Store(e) => ApiError::Store(e),
        }
    }
}

impl ApiError {
    /// A 400 with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    /// Status, code and details of this error.
    fn parts(&self) -> (StatusCode, &'static str, Value) {
        use SubmitError as S;
        match self {
            ApiError::Submit(e) => match e {
                S::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated", Value::Null),
                S::Forbidden { scope } => {
                    (StatusCode::FORBIDDEN, "forbidden", json!({"scope": scope}))
                }
                S::InvalidSpec(errors) => (
                    StatusCode::BAD_REQUEST,
                    "invalid_spec",
                    json!({"fields": errors.0}),
                ),
                S::InvalidCode(CapsuleError::Rejected { entry, reason }) => (
                    StatusCode::BAD_REQUEST,
                    "invalid_code",
                    json!({"entry": entry, "reason": reason}),
                ),
                S::InvalidCode(_) => (StatusCode::BAD_REQUEST, "invalid_code", Value::Null),
                S::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request", Value::Null),
                S::QuotaExceeded(_) => (StatusCode::BAD_REQUEST, "quota_exceeded", Value::Null),
                S::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", Value::Null),
                S::IdempotencyConflict { job_id, .. } => (
                    StatusCode::CONFLICT,
                    "idempotency_conflict",
                    json!({"job_id": job_id}),
                ),
                S::Store(StoreError::InvalidCursor { .. }) => {
                    (StatusCode::BAD_REQUEST, "invalid_cursor", Value::Null)
                }
                S::Store(_) | S::Build(_) => internal(),
            },
            ApiError::InvalidFields { code, fields, .. } => {
                (StatusCode::BAD_REQUEST, code, json!({"fields": fields}))
            }
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code, Value::Null),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found", Value::Null),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code, Value::Null),
            ApiError::BadSignature(_) => (StatusCode::UNAUTHORIZED, "bad_signature", Value::Null),
            ApiError::InvalidGrant(_) => (StatusCode::UNAUTHORIZED, "invalid_grant", Value::Null),
            ApiError::Unavailable { code, .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, code, Value::Null)
            }
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large", Value::Null),
            ApiError::UnsupportedMediaType(_) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                Value::Null,
            ),
            ApiError::Store(StoreError::InvalidCursor { .. }) => {
                (StatusCode::BAD_REQUEST, "invalid_cursor", Value::Null)
            }
            ApiError::Store(_) => internal(),
            ApiError::Upstream { status, code, .. } => (*status, code, Value::Null),
            ApiError::RateLimited(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limited", Value::Null)
            }
        }
    }
}

/// `the <subject> has N problem(s):` and one indented `field: message` line per problem, the
/// way an invalid JobSpec is described.
fn describe_fields(subject: &str, fields: &[FieldError]) -> String {
    let n = fields.len();
    let mut out = format!(
        "the {subject} has {n} problem{}:",
        if n == 1 { "" } else { "s" }
    );
    for f in fields {
        out.push_str(&format!("\n  {f}"));
    }
    out
}

fn internal() -> (StatusCode, &'static str, Value) {
    (StatusCode::INTERNAL_SERVER_ERROR, "internal", Value::Null)
}

impl ApiError {
    /// Status and JSON body (`{"error": {...}}`); internal details never reach the body.
    pub fn to_body(&self, request_id: &str) -> (StatusCode, Value) {
        let (status, code, details) = self.parts();
        // A 5xx hides its details, except an upstream's: what the API could not reach is the
        // caller's to know (its message names no internals).
        let message = if status.is_server_error()
            && !matches!(
                self,
                ApiError::Upstream { .. } | ApiError::Unavailable { .. }
            ) {
            format!("internal error; quote request id {request_id} when reporting it")
        } else {
            self.to_string()
        };
        let body = json!({"error": {
            "code": code,
            "message": message,
            "details": details,
            "request_id": request_id,
        }});
        (status, body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let request_id = current_request_id();
        let (status, body) = self.to_body(&request_id);
        if status.is_server_error() {
            // Logged once, here, with the full chain; the client gets only the request id.
            tracing::error!(request_id = %request_id, error = ?self, "internal error");
        } else {
            tracing::info!(request_id = %request_id, status = status.as_u16(), error = %self, "request refused");
        }
        (status, Json(body)).into_response()
    }
}
