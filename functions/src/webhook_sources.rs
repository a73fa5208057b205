//! Webhook sources as configured in `TUNEPLANE_WEBHOOKS`: `{"<source>": {"secret", "tenant",
//! "scheme", "template"?}}`.
//!
//! Each source declares the one signature scheme its sender uses; a delivery signed the other way
//! is refused, so one secret never verifies two message formats. The JSON is checked by hand
//! rather than by serde's derive: serde's messages quote the offending value (`invalid type:
//! string "whsec-…"`), and the value may be a secret. Every message here names the source and
//! the field, never a value.

use std::collections::BTreeMap;

use serde_json::Value;

use tuneplane_core::ids::{Id, TenantId};

use crate::secret::Secret;

/// Git hosting signature header.
pub const HUB_SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// TunePlane signature header (timestamped).
pub const TUNEPLANE_SIGNATURE_HEADER: &str = "x-tuneplane-signature";

/// True for source names usable in paths and keys.
pub fn valid_source_name(name: &str) -> bool {
    tuneplane_core::spec::is_dns_label(name, 40)
}

/// Shortest accepted webhook secret, bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// How a source signs its deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureScheme {
    /// `X-TunePlane-Signature: t=<unix>,v1=<hex>` over `<t>.<body>`, inside a five-minute window.
    TunePlane,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body (GitHub, Gitea, GitLab-compatible
    /// senders); no timestamp, so only the replay marker stops a replay.
    Hub,
}

impl SignatureScheme {
    /// The name used in `TUNEPLANE_WEBHOOKS` (`tuneplane`, `hub`).
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureScheme::TunePlane => "tuneplane",
            SignatureScheme::Hub => "hub",
        }
    }

    /// The header carrying this scheme's signature.
    pub fn header(self) -> &'static str {
        match self {
            SignatureScheme::TunePlane => TUNEPLANE_SIGNATURE_HEADER,
            SignatureScheme::Hub => HUB_SIGNATURE_HEADER,
        }
    }
}

/// One webhook source, an entry of `TUNEPLANE_WEBHOOKS` by name: who may post to
/// `/v1/webhooks/{source}`, how the body is signed, and which tenant the jobs go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSource {
    /// HMAC-SHA256 secret shared with the sender (redacted in `Debug`).
    pub secret: Secret,
    /// Tenant the jobs belong to.
    pub tenant: TenantId,
    /// Template run when the payload names neither a spec nor a template (e.g. Git push events).
    pub template: Option<Id>,
    /// The only signature scheme accepted from this source.
    pub scheme: SignatureScheme,
}

const FIELDS: &str = "\"secret\", \"tenant\", \"scheme\" and optionally \"template\"";

/// Parses the value of `TUNEPLANE_WEBHOOKS`; the error names the source and field to fix and
/// never quotes a value.
pub fn parse_sources(json: &str) -> Result<BTreeMap<String, WebhookSource>, String> {
    // A syntax error is reported by position only: serde_json's message may quote input.
    let value: Value = serde_json::from_str(json).map_err(|e| {
        format!(
            "not valid JSON (line {}, column {}); expected {{\"<source>\": {{{FIELDS}}}}}",
            e.line(),
            e.column()
        )
    })?;
    let Value::Object(map) = value else {
        return Err(format!(
            "expected a JSON object {{\"<source>\": {{{FIELDS}}}}}"
        ));
    };
    let mut out = BTreeMap::new();
    for (name, entry) in map {
        if !valid_source_name(&name) {
            return Err(format!(
                "source {name:?}: use 1-40 lower-case letters, digits and '-' as its name"
            ));
        }
        let source = parse_source(&entry).map_err(|m| format!("source {name:?}: {m}"))?;
        out.insert(name, source);
    }
    Ok(out)
}

fn parse_source(entry: &Value) -> Result<WebhookSource, String> {
    let Value::Object(fields) = entry else {
        return Err(format!("expected an object with {FIELDS}"));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "secret" | "tenant" | "scheme" | "template"))
    {
        return Err(format!("unknown field {unknown:?}; known: {FIELDS}"));
    }
    let text = |field: &str| -> Result<Option<&str>, String> {
        match fields.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(format!("\"{field}\" must be a string")),
        }
    };
    let secret = text("secret")?.ok_or("add \"secret\" (the HMAC key shared with the sender)")?;
    if secret.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "\"secret\" must be at least {MIN_SECRET_BYTES} characters (it has {})",
            secret.len()
        ));
    }
    let tenant = text("tenant")?.ok_or("add \"tenant\" (the tenant its jobs belong to)")?;
    // The error never quotes the value (a secret pasted in the wrong field stays unprinted).
    let tenant = TenantId::parse(tenant).map_err(|e| format!("\"tenant\" must be {}", e.rule))?;
    let scheme = match text("scheme")? {
        Some("tuneplane") => SignatureScheme::TunePlane,
        Some("hub") => SignatureScheme::Hub,
        Some(_) => {
            return Err("\"scheme\" must be \"tuneplane\" or \"hub\"".into());
        }
        None => {
            return Err(
                "add \"scheme\": \"tuneplane\" (X-TunePlane-Signature, timestamped) or \"hub\" \
                 (X-Hub-Signature-256, Git hosts)"
                    .into(),
            );
        }
    };
    let template = text("template")?
        .map(|t| Id::parse(t).map_err(|e| format!("\"template\" must be {}", e.rule)))
        .transpose()?;
    Ok(WebhookSource {
        secret: Secret::new(secret),
        tenant,
        template,
        scheme,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "WHSEC_0123456789_never_print";

    #[test]
    fn a_source_parses_with_its_scheme() {
        let json = format!(
            r#"{{"github": {{"secret": "{SECRET}", "tenant": "acme", "scheme": "hub", "template": "nightly"}}}}"#
        );
        let map = parse_sources(&json).unwrap();
        let github = &map["github"];
        assert_eq!(github.scheme, SignatureScheme::Hub);
        assert_eq!(github.secret.expose(), SECRET);
        assert_eq!(github.template.as_deref(), Some("nightly"));
    }

    #[test]
    fn every_misshaped_entry_is_named_without_quoting_the_secret() {
        let cases = [
            (format!(r#"{{"github": "{SECRET}"}}"#), "expected an object"),
            (format!(r#""{SECRET}""#), "expected a JSON object"),
            (
                format!(r#"{{"github": {{"secret": "{SECRET}", "tenant": "acme"}}}}"#),
                "add \"scheme\"",
            ),
            (
                format!(
                    r#"{{"github": {{"secret": "{SECRET}", "tenant": "acme", "scheme": "{SECRET}"}}}}"#
                ),
                "\"scheme\" must be",
            ),
            (
                format!(
                    r#"{{"github": {{"secret": "{SECRET}", "tenant": "{SECRET}", "scheme": "hub"}}}}"#
                ),
                "\"tenant\" must be",
            ),
            (
                format!(
                    r#"{{"github": {{"secret": ["{SECRET}"], "tenant": "acme", "scheme": "hub"}}}}"#
                ),
                "\"secret\" must be a string",
            ),
            (
                format!(
                    r#"{{"github": {{"secret": "{SECRET}", "tenant": "acme", "scheme": "hub", "extra": 1}}}}"#
                ),
                "unknown field \"extra\"",
            ),
            (
                format!(r#"{{"github": {{"secret": "{SECRET}""#),
                "not valid JSON",
            ),
            (
                r#"{"github": {"secret": "short", "tenant": "acme", "scheme": "hub"}}"#.to_owned(),
                "at least 16",
            ),
        ];
        for (json, expected) in cases {
            let err = parse_sources(&json).err().unwrap_or_default();
            assert!(err.contains(expected), "{json}: {err}");
            assert!(!err.contains("WHSEC"), "the secret leaked: {err}");
        }
    }
}
