//! Signature verification: both schemes, the window, the limits and hostile headers.

use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::signature::{MAX_SIGNATURES, parse_tuneplane, within_window};
use super::*;

const SECRET: &[u8] = b"whsec-test-0123456789";
const BODY: &[u8] = br#"{"ref":"refs/heads/main"}"#;
const NOW: i64 = 1_800_000_000;
const TP: SignatureScheme = SignatureScheme::TunePlane;
const HUB: SignatureScheme = SignatureScheme::Hub;

fn hmac_hex(parts: &[&[u8]]) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
    for p in parts {
        m.update(p);
    }
    hex::encode(m.finalize().into_bytes())
}

fn sign(t: i64, body: &[u8]) -> String {
    hmac_hex(&[format!("{t}.").as_bytes(), body])
}

fn hub(body: &[u8]) -> String {
    format!("sha256={}", hmac_hex(&[body]))
}

fn headers(name: &'static str, value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(name, HeaderValue::from_str(value).unwrap());
    h
}

/// Flips one hex digit of a signature at `at` (so it stays well-formed hex).
fn flip(sig: &str, at: usize) -> String {
    let mut bytes = sig.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    String::from_utf8(bytes).unwrap_or_default()
}

fn malformed(result: Result<String, SignatureError>) -> bool {
    matches!(result, Err(SignatureError::Malformed { .. }))
}

#[test]
fn timestamped_signature_is_accepted_inside_the_window_only() {
    let sig = sign(NOW, BODY);
    let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={sig}"));
    assert_eq!(verify(TP, SECRET, &h, BODY, NOW), Ok(sig.clone()));
    assert_eq!(
        verify(TP, SECRET, &h, BODY, NOW + WINDOW_SECONDS),
        Ok(sig.clone())
    );
    assert_eq!(
        verify(TP, SECRET, &h, BODY, NOW + WINDOW_SECONDS + 1),
        Err(SignatureError::Stale)
    );
    // A timestamp from the future is as stale as one from the past.
    assert_eq!(
        verify(TP, SECRET, &h, BODY, NOW - WINDOW_SECONDS - 1),
        Err(SignatureError::Stale)
    );
}

#[test]
fn a_signature_wrong_in_its_first_or_last_digit_or_for_another_body_is_refused() {
    let sig = sign(NOW, BODY);
    for bad in [flip(&sig, 0), flip(&sig, sig.len() - 1)] {
        let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={bad}"));
        assert_eq!(
            verify(TP, SECRET, &h, BODY, NOW),
            Err(SignatureError::Mismatch)
        );
    }
    let h = headers(TUNEPLANE_SIGNATURE_HEADER, &format!("t={NOW},v1={sig}"));
    assert_eq!(
        verify(TP, SECRET, &h, b"{\"ref\":\"refs/heads/evil\"}", NOW),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verify(TP, b"another-secret-0123", &h, BODY, NOW),
        Err(SignatureError::Mismatch)
    );
    // Moving the timestamp (to replay an old delivery inside a new window) breaks the MAC.
    let moved = headers(
        TUNEPLANE_SIGNATURE_HEADER,
        &format!("t={},v1={sig}", NOW + 10),
    );
    assert_eq!(
        verify(TP, SECRET, &moved, BODY, NOW),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn a_truncated_signature_is_malformed_not_compared_as_a_prefix() {
    let sig = sign(NOW, BODY);
    for cut in [2, 32, sig.len() - 2] {
        let h = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t={NOW},v1={}", &sig[..cut]),
        );
        assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)), "cut {cut}");
    }
    let full = hub(BODY);
    let h = headers(HUB_SIGNATURE_HEADER, &full[..full.len() - 2]);
    assert!(malformed(verify(HUB, SECRET, &h, BODY, NOW)));
}

#[test]
fn rotation_accepts_any_valid_v1_and_reports_the_one_that_matched() {
    let sig = sign(NOW, BODY);
    let old = flip(&sig, 10);
    let h = headers(
        TUNEPLANE_SIGNATURE_HEADER,
        &format!("t={NOW},v0=legacy,v1={old},v1={}", sig.to_uppercase()),
    );
    assert_eq!(verify(TP, SECRET, &h, BODY, NOW), Ok(sig));
}

#[test]
fn hub_signatures_verify_and_malformed_headers_are_named() {
    let h = headers(HUB_SIGNATURE_HEADER, &hub(BODY));
    assert!(verify(HUB, SECRET, &h, BODY, NOW).is_ok());
    for (scheme, name, value) in [
        (HUB, HUB_SIGNATURE_HEADER, "md5=abcd"),
        (HUB, HUB_SIGNATURE_HEADER, "sha256=not-hex"),
        (TP, TUNEPLANE_SIGNATURE_HEADER, "v1=abcd"),
        (TP, TUNEPLANE_SIGNATURE_HEADER, "t=yesterday,v1=abcd"),
        (TP, TUNEPLANE_SIGNATURE_HEADER, "t=1,t=2,v1=ab"),
        (TP, TUNEPLANE_SIGNATURE_HEADER, "t=1800000000"),
        (TP, TUNEPLANE_SIGNATURE_HEADER, "garbage"),
    ] {
        let result = verify(scheme, SECRET, &headers(name, value), BODY, NOW);
        assert!(malformed(result.clone()), "{name}: {value}: {result:?}");
        let message = result.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains(name), "{message}");
    }
    assert_eq!(
        verify(TP, SECRET, &HeaderMap::new(), BODY, NOW),
        Err(SignatureError::Missing {
            header: TUNEPLANE_SIGNATURE_HEADER
        })
    );
}

#[test]
fn a_source_refuses_a_correct_signature_in_the_other_scheme() {
    // Same secret, both signatures correct: each source hears only its own scheme.
    let as_hub = headers(HUB_SIGNATURE_HEADER, &hub(BODY));
    assert_eq!(
        verify(TP, SECRET, &as_hub, BODY, NOW),
        Err(SignatureError::WrongScheme {
            expected: TUNEPLANE_SIGNATURE_HEADER,
            got: HUB_SIGNATURE_HEADER
        })
    );
    let as_tp = headers(
        TUNEPLANE_SIGNATURE_HEADER,
        &format!("t={NOW},v1={}", sign(NOW, BODY)),
    );
    assert!(matches!(
        verify(HUB, SECRET, &as_tp, BODY, NOW),
        Err(SignatureError::WrongScheme { .. })
    ));
}

#[test]
fn ten_thousand_v1_values_are_refused_by_the_parser_before_any_hmac() {
    let sig = sign(NOW, BODY);
    let many = format!("t={NOW}{}", format!(",v1={sig}").repeat(10_000));
    // Over the length limit: refused on the length alone.
    assert!(matches!(
        parse_tuneplane(&many),
        Err(SignatureError::Malformed { reason, .. }) if reason.contains("512 bytes")
    ));
    // Within the length limit, the count limit holds on its own: 5 short values.
    let five = format!("t={NOW}") + &format!(",v1={}", "0".repeat(64)).repeat(MAX_SIGNATURES + 1);
    assert!(five.len() <= signature::MAX_HEADER_BYTES);
    assert!(matches!(
        parse_tuneplane(&five),
        Err(SignatureError::Malformed { reason, .. }) if reason.contains("more than 4")
    ));
    // Even with the right signature among them, the header is refused, not searched.
    let h = HeaderMap::from_iter([(
        axum::http::HeaderName::from_static(TUNEPLANE_SIGNATURE_HEADER),
        HeaderValue::from_str(&many).unwrap(),
    )]);
    assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)));
}

#[test]
fn extreme_timestamps_are_stale_or_malformed_never_an_overflow() {
    for t in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX] {
        assert!(!within_window(t, NOW), "{t}");
        assert!(!within_window(NOW, t) || t == NOW, "{t}");
    }
    assert!(within_window(NOW - WINDOW_SECONDS, NOW));
    for t in [i64::MIN.to_string(), i64::MAX.to_string(), "-5".into()] {
        let h = headers(
            TUNEPLANE_SIGNATURE_HEADER,
            &format!("t={t},v1={}", sign(NOW, BODY)),
        );
        assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)), "{t}");
    }
    // A clock at the far end of the range does not overflow either.
    let h = headers(
        TUNEPLANE_SIGNATURE_HEADER,
        &format!("t=999999999999,v1={}", sign(999_999_999_999, BODY)),
    );
    assert_eq!(
        verify(TP, SECRET, &h, BODY, i64::MIN),
        Err(SignatureError::Stale)
    );
}

#[test]
fn a_repeated_signature_header_is_malformed() {
    let value = format!("t={NOW},v1={}", sign(NOW, BODY));
    let mut h = headers(TUNEPLANE_SIGNATURE_HEADER, &value);
    h.append(
        TUNEPLANE_SIGNATURE_HEADER,
        HeaderValue::from_str(&value).unwrap(),
    );
    assert!(malformed(verify(TP, SECRET, &h, BODY, NOW)));
}
