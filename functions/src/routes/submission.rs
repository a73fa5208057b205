//! The JSON body of a submission (`POST /v1/jobs`, webhooks, EventBridge events) and its
//! translation into a core [`SubmitRequest`].

use base64::Engine;
use serde::Deserialize;
use serde_json::Value;
use tuneplane_core::audit::Actor;
use tuneplane_core::submit::{Code, Origin, SpecInput, SubmitRequest};

use crate::config::MAX_INLINE_CODE_BYTES;
use crate::error::ApiError;

/// A submission body: the spec and where the code is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmissionBody {
    /// The JobSpec: YAML/JSON text, or a JSON object.
    pub spec: Value,
    /// The code: an inline archive or the id of an earlier upload.
    pub code: CodeBody,
}

/// Where the code is: exactly one field.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeBody {
    /// A tar, tar.gz or zip archive, base64, at most 4 MiB decoded.
    #[serde(default)]
    pub inline: Option<String>,
    /// An upload made through `POST /v1/uploads`.
    #[serde(default)]
    pub upload_id: Option<String>,
}

/// Blob key of an upload of `tenant` (tenant-scoped, so one tenant cannot use another's upload).
pub fn upload_key(tenant: &str, upload_id: &str) -> String {
    format!("uploads/{tenant}/{upload_id}/code")
}

/// Parses a submission body (a parse error is a 400 that says what is expected).
pub fn parse_body(bytes: &[u8]) -> Result<SubmissionBody, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!(
                "expected JSON {{\"spec\": <YAML text or object>, \"code\": {{\"inline\": <base64 archive>}} or {{\"upload_id\": ...}}}}: {e}"
            ),
        )
    })
}

/// Spec text from a body's `spec` field (objects are re-serialised as JSON).
pub fn spec_text(spec: &Value) -> Result<String, ApiError> {
    match spec {
        Value::String(text) => Ok(text.clone()),
        Value::Object(_) => Ok(spec.to_string()),
        _ => Err(ApiError::bad_request(
            "invalid_body",
            "spec must be YAML/JSON text or a JSON object",
        )),
    }
}

impl SubmissionBody {
    /// The core request for `tenant`.
    pub fn into_request(
        self,
        tenant: &tuneplane_core::ids::TenantId,
        idempotency_key: Option<String>,
        origin: Origin,
        actor: Actor,
    ) -> Result<SubmitRequest, ApiError> {
        let spec = SpecInput::Text(spec_text(&self.spec)?);
        let code = code_of(self.code, tenant)?;
        Ok(SubmitRequest {
            tenant: tenant.clone(),
            spec,
            code,
            idempotency_key,
            origin,
            actor,
        })
    }
}

/// The core code source of a body's `code` field for `tenant` (exactly one of `inline` or
/// `upload_id`; inline code within its size limit).
pub fn code_of(code: CodeBody, tenant: &str) -> Result<Code, ApiError> {
    match (code.inline, code.upload_id) {
        (Some(b64), None) => {
            // Base64 is 4/3 of the data: refuse before decoding anything too large.
            if b64.len() > MAX_INLINE_CODE_BYTES / 3 * 4 + 4 {
                return Err(too_large());
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| {
                    ApiError::bad_request("invalid_body", format!("code.inline is not base64: {e}"))
                })?;
            if bytes.len() > MAX_INLINE_CODE_BYTES {
                return Err(too_large());
            }
            Ok(Code::Archive(bytes))
        }
        (None, Some(id)) => {
            if tuneplane_core::ids::Id::parse(id.as_str()).is_err() {
                return Err(ApiError::bad_request(
                    "invalid_body",
                    "code.upload_id is not an upload id from POST /v1/uploads",
                ));
            }
            Ok(Code::Blob {
                key: upload_key(tenant, &id),
            })
        }
        _ => Err(ApiError::bad_request(
            "invalid_body",
            "code needs exactly one of \"inline\" (base64 archive) or \"upload_id\"",
        )),
    }
}

fn too_large() -> ApiError {
    ApiError::TooLarge(format!(
        "inline code is limited to {} MiB; upload larger code with POST /v1/uploads and submit with code.upload_id",
        MAX_INLINE_CODE_BYTES >> 20
    ))
}
