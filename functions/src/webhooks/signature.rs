//! Verification of a delivery's signature under its source's one scheme, with hard limits.
//!
//! The header is parsed completely before any HMAC work: at most [`MAX_HEADER_BYTES`] bytes, at
//! most [`MAX_SIGNATURES`] `v1=` values, each exactly 64 hex digits, one `t=` of at most 12
//! digits. The body is then hashed once, whatever the number of candidates, and each candidate
//! is compared in constant time. A hostile header therefore costs one bounded parse and at most
//! one HMAC over the body.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::sources::SignatureScheme;

/// Accepted clock difference for timestamped signatures, seconds.
pub const WINDOW_SECONDS: i64 = 300;
/// Longest signature header accepted, bytes.
pub const MAX_HEADER_BYTES: usize = 512;
/// Most `v1=` values in one `X-TunePlane-Signature` (senders rotating secrets send two).
pub const MAX_SIGNATURES: usize = 4;
/// Longest `t=` value, digits (Unix seconds until the year 33658).
const MAX_TIMESTAMP_DIGITS: usize = 12;
/// Length of a hex HMAC-SHA256.
const SIGNATURE_HEX_LEN: usize = 64;

/// Why a delivery's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The source's header is absent.
    #[error("missing signature: this source signs with the {header} header")]
    Missing {
        /// The header the source's scheme uses.
        header: &'static str,
    },
    /// Only the other scheme's header is present.
    #[error(
        "this source accepts only {expected} signatures, not {got}: sign the delivery with its configured scheme"
    )]
    WrongScheme {
        /// The header the source's scheme uses.
        expected: &'static str,
        /// The header that was sent.
        got: &'static str,
    },
    /// The header breaks its format or a limit.
    #[error("malformed {header}: {reason}")]
    Malformed {
        /// Name of the malformed header.
        header: &'static str,
        /// What is wrong, and the expected format.
        reason: &'static str,
    },
    /// The timestamp is outside the window.
    #[error(
        "signature timestamp is outside the {WINDOW_SECONDS}-second window: sign with the current time"
    )]
    Stale,
    /// The HMAC does not match.
    #[error("signature does not match the body")]
    Mismatch,
}

/// The header value of `name`; several copies of it are malformed (which one would count?).
fn single<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<Option<&'a str>, SignatureError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    let malformed = |reason| SignatureError::Malformed {
        header: name,
        reason,
    };
    if values.next().is_some() {
        return Err(malformed("send the header once"));
    }
    if first.len() > MAX_HEADER_BYTES {
        return Err(malformed("longer than 512 bytes"));
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| malformed("not visible ASCII"))
}

fn decode_signature(hex_sig: &str) -> Option<[u8; 32]> {
    let mut raw = [0u8; 32];
    (hex_sig.len() == SIGNATURE_HEX_LEN && hex::decode_to_slice(hex_sig, &mut raw).is_ok())
        .then_some(raw)
}

/// A parsed `X-TunePlane-Signature`: the timestamp and up to [`MAX_SIGNATURES`] candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunePlaneHeader {
    /// `t=`, Unix seconds.
    pub t: i64,
    /// Decoded `v1=` values.
    pub candidates: Vec<[u8; 32]>,
}

/// Parses `t=<unix>,v1=<hex>[,v1=<hex>...]` within the limits; unknown keys (other schemes'
/// versions) are skipped, but count toward the length limit.
pub fn parse_tuneplane(value: &str) -> Result<TunePlaneHeader, SignatureError> {
    let malformed = |reason| SignatureError::Malformed {
        header: super::TUNEPLANE_SIGNATURE_HEADER,
        reason,
    };
    if value.len() > MAX_HEADER_BYTES {
        return Err(malformed("longer than 512 bytes"));
    }
    let mut t = None;
    let mut candidates = Vec::with_capacity(MAX_SIGNATURES);
    for part in value.split(',') {
        let (key, v) = part
            .trim()
            .split_once('=')
            .ok_or(malformed("expected t=<unix seconds>,v1=<64 hex digits>"))?;
        match key {
            "t" => {
                if t.is_some() {
                    return Err(malformed("t= appears twice"));
                }
                if v.is_empty()
                    || v.len() > MAX_TIMESTAMP_DIGITS
                    || !v.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(malformed("t= must be Unix seconds (1-12 digits)"));
                }
                t = Some(
                    v.parse::<i64>()
                        .map_err(|_| malformed("t= is not a number"))?,
                );
            }
            "v1" => {
                if candidates.len() == MAX_SIGNATURES {
                    return Err(malformed("more than 4 v1= values"));
                }
                let raw = decode_signature(v)
                    .ok_or(malformed("v1= must be 64 hex digits (HMAC-SHA256)"))?;
                candidates.push(raw);
            }
            _ => {}
        }
    }
    let t = t.ok_or(malformed("t= is missing"))?;
    if candidates.is_empty() {
        return Err(malformed("v1= is missing"));
    }
    Ok(TunePlaneHeader { t, candidates })
}

/// True when `t` is within [`WINDOW_SECONDS`] of `now_secs`, with checked arithmetic: any `t` a
/// request can carry gives an answer, never an overflow.
pub fn within_window(t: i64, now_secs: i64) -> bool {
    now_secs
        .checked_sub(t)
        .is_some_and(|d| d.unsigned_abs() <= WINDOW_SECONDS.unsigned_abs())
}

fn mac(secret: &[u8]) -> Result<Hmac<Sha256>, SignatureError> {
    // HMAC accepts keys of any length; the error arm exists only in the type.
    Hmac::<Sha256>::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)
}

/// Index of the first candidate equal to the finished `mac`, compared in constant time each.
fn matching(mac: Hmac<Sha256>, candidates: &[[u8; 32]]) -> Option<usize> {
    candidates
        .iter()
        .position(|c| mac.clone().verify_slice(c).is_ok())
}

/// Verifies a delivery under `scheme`; returns the verified signature (lower-case hex), which
/// identifies the signed message for replay tracking and idempotency.
pub fn verify(
    scheme: SignatureScheme,
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now_secs: i64,
) -> Result<String, SignatureError> {
    let other = match scheme {
        SignatureScheme::TunePlane => SignatureScheme::Hub,
        SignatureScheme::Hub => SignatureScheme::TunePlane,
    };
    let Some(value) = single(headers, scheme.header())? else {
        if headers.contains_key(other.header()) {
            return Err(SignatureError::WrongScheme {
                expected: scheme.header(),
                got: other.header(),
            });
        }
        return Err(SignatureError::Missing {
            header: scheme.header(),
        });
    };
    match scheme {
        SignatureScheme::TunePlane => {
            let parsed = parse_tuneplane(value)?;
            if !within_window(parsed.t, now_secs) {
                return Err(SignatureError::Stale);
            }
            let mut m = mac(secret)?;
            m.update(parsed.t.to_string().as_bytes());
            m.update(b".");
            m.update(body);
            let at = matching(m, &parsed.candidates).ok_or(SignatureError::Mismatch)?;
            Ok(hex::encode(parsed.candidates[at]))
        }
        SignatureScheme::Hub => {
            let raw = value
                .strip_prefix("sha256=")
                .and_then(decode_signature)
                .ok_or(SignatureError::Malformed {
                    header: super::HUB_SIGNATURE_HEADER,
                    reason: "expected sha256=<64 hex digits>",
                })?;
            let mut m = mac(secret)?;
            m.update(body);
            matching(m, &[raw]).ok_or(SignatureError::Mismatch)?;
            Ok(hex::encode(raw))
        }
    }
}
