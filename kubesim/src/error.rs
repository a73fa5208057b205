//! Errors: [`StatusError`] is what the simulated API server answers with (a Kubernetes `Status` body),
//! [`Error`] is what starting the simulator can fail with.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Errors starting or running the simulator outside a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The fleet file could not be read.
    #[error("cannot read fleet file {path}: {source}")]
    ReadFleet {
        /// Path of the fleet file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The fleet file is not valid.
    #[error(transparent)]
    Fleet(#[from] tuneplane_core::fleet::FleetError),
    /// Writing a file (kubeconfig, data directory) failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or directory that could not be written.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The simulator refused an object it creates itself (a bug in the fleet or the simulator).
    #[error("simulator could not create {what}: {source}")]
    Seed {
        /// What was being created.
        what: String,
        /// The API error.
        source: StatusError,
    },
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A refusal of the simulated API server, answered as a `meta/v1 Status` object with the matching HTTP code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct StatusError {
    /// HTTP status code.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...).
    pub reason: &'static str,
    /// Human-readable message, in the API server's wording.
    pub message: String,
    /// Optional `details` object (name, group, kind, causes).
    pub details: Option<Value>,
}

impl StatusError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// `404 NotFound` for `<plural>[.<group>] "<name>" not found`.
    pub fn not_found(plural: &str, group: &str, name: &str) -> Self {
        let what = qualified(plural, group);
        let mut e = Self::new(404, "NotFound", format!("{what} \"{name}\" not found"));
        e.details = Some(json!({"name": name, "group": group, "kind": plural}));
        e
    }

    /// `404 NotFound` for a path the server does not serve.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// `409 AlreadyExists`.
    pub fn already_exists(plural: &str, group: &str, name: &str) -> Self {
        let what = qualified(plural, group);
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{what} \"{name}\" already exists"),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": plural}));
        e
    }

    /// `409 Conflict` for a delete whose precondition (`what`: `UID` or `ResourceVersion`) does
    /// not hold, in the API server's words; `details.kind` is the kind, not the plural.
    pub fn precondition_failed(kind: &str, name: &str, what: &str, want: &str, have: &str) -> Self {
        let hint = if what == "UID" {
            "deleted and then recreated"
        } else {
            "modified"
        };
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {kind} \"{name}\": the {what} in the precondition ({want}) does not match the {what} in record ({have}). The object might have been {hint}"
            ),
        );
        e.details = Some(json!({"name": name, "kind": kind}));
        e
    }

    /// `409 Conflict` for a stale resourceVersion or UID precondition.
    pub fn conflict(plural: &str, group: &str, name: &str) -> Self {
        let what = qualified(plural, group);
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {what} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        );
        e.details = Some(json!({"name": name, "group": group, "kind": plural}));
        e
    }

    /// `422 Invalid` with one cause per offending field, each `(field, message)` with the message
    /// in the API server's form (`Required value`, `Invalid value: "x": ...`); the cause's reason
    /// follows from it. Several causes are listed in brackets, as the API server aggregates them.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[(String, String)]) -> Self {
        let text: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let what = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let list = match text.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{what} \"{name}\" is invalid: {list}"),
        );
        let reason = |m: &str| {
            [
                ("Required value", "FieldValueRequired"),
                ("Unsupported value", "FieldValueNotSupported"),
                ("Forbidden", "FieldValueForbidden"),
                ("Duplicate value", "FieldValueDuplicate"),
                ("Too long", "FieldValueTooLong"),
            ]
            .iter()
            .find(|(prefix, _)| m.starts_with(prefix))
            .map_or("FieldValueInvalid", |(_, r)| r)
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|(f, m)| json!({"reason": reason(m), "message": m, "field": f}))
            .collect();
        e.details = Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}));
        e
    }

    /// `400 BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// `405 MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// `415 UnsupportedMediaType`.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {content_type:?}"
            ),
        )
    }

    /// `410 Gone` (`Expired`) for a watch from a compacted resourceVersion.
    pub fn gone(rv: u64) -> Self {
        Self::new(410, "Expired", format!("too old resource version: {rv}"))
    }

    /// `500 InternalError`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            status["details"] = d.clone();
        }
        status
    }
}

fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl IntoResponse for StatusError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        (code, [("content-type", "application/json")], body).into_response()
    }
}
