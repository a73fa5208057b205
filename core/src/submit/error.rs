//! The error of the submission service: what went wrong, and whether the caller is at fault.

use crate::capsule::CapsuleError;
use crate::spec::SpecErrors;
use crate::store::StoreError;

/// Why a submission (or its authentication) failed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// No credentials, or credentials that match no key.
    #[error("missing or invalid API key: send `Authorization: Bearer <api key>`")]
    Unauthenticated,
    /// The key is valid but lacks a scope.
    #[error("the API key lacks the {scope:?} scope")]
    Forbidden {
        /// The missing scope.
        scope: String,
    },
    /// The JobSpec breaks rules; every problem is listed.
    #[error(transparent)]
    InvalidSpec(#[from] SpecErrors),
    /// The code was refused (a hostile or oversized archive); nothing was stored.
    #[error("{0}")]
    InvalidCode(CapsuleError),
    /// The request itself is malformed (bad idempotency key, missing `tuneplane.yaml`, ...).
    #[error("{0}")]
    InvalidRequest(String),
    /// The job alone is above a limit of its tenant's quota that does not borrow, so it could
    /// never be admitted; the message says which limit, what the job needs and what to do.
    #[error("{0}")]
    QuotaExceeded(String),
    /// Something the request refers to does not exist (an upload, a capsule, a template).
    #[error("not found: {0}")]
    NotFound(String),
    /// The idempotency key was used before with a different request.
    #[error(
        "Idempotency-Key {key:?} was already used for a different request (job {job_id}); use a new key"
    )]
    IdempotencyConflict {
        /// The Idempotency-Key as the client sent it.
        key: String,
        /// The job of the first request.
        job_id: crate::ids::JobId,
    },
    /// Storage failed.
    #[error("storage failed: {0}")]
    Store(#[source] StoreError),
    /// Building the capsule failed for a reason that is not the user's (I/O).
    #[error("capsule build failed: {0}")]
    Build(#[source] CapsuleError),
}

impl SubmitError {
    /// True when the caller's input is at fault (a 4xx), false for internal failures.
    pub fn is_client_error(&self) -> bool {
        !matches!(self, SubmitError::Store(_) | SubmitError::Build(_))
    }
}

impl From<StoreError> for SubmitError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::IdempotencyMismatch { key, job_id, .. } => {
                SubmitError::IdempotencyConflict { key, job_id }
            }
            other => SubmitError::Store(other),
        }
    }
}

impl From<CapsuleError> for SubmitError {
    fn from(e: CapsuleError) -> Self {
        if e.is_user_error() {
            SubmitError::InvalidCode(e)
        } else {
            SubmitError::Build(e)
        }
    }
}
