//! Timing of webhook signature rejection: a forged signature that is wrong in its first hex digit
//! and one that is wrong only in its last digit must take the same time to refuse, or an attacker
//! could learn a valid signature digit by digit. Prints the median time of each over many
//! interleaved rounds and their difference; asserts nothing (a measurement, not a test).
//!
//! Run with `cargo bench -p tuneplane-functions --bench signature_timing`.

use std::hint::black_box;
use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tuneplane_functions::webhooks::{SignatureScheme, TUNEPLANE_SIGNATURE_HEADER, verify};

const ROUNDS: usize = 200_000;
const SECRET: &str = "whsec-bench-0123456789";
const NOW: i64 = 1_800_000_000;

fn signature(body: &[u8]) -> String {
    let Ok(mut m) = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()) else {
        unreachable!("HMAC takes keys of any length")
    };
    m.update(format!("{NOW}.").as_bytes());
    m.update(body);
    hex::encode(m.finalize().into_bytes())
}

fn headers(sig: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("t={NOW},v1={sig}")) {
        h.insert(TUNEPLANE_SIGNATURE_HEADER, v);
    }
    h
}

fn flip(sig: &str, at: usize) -> String {
    sig.char_indices()
        .map(|(i, c)| match (i == at, c) {
            (true, '0') => '1',
            (true, _) => '0',
            (false, c) => c,
        })
        .collect()
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let body = br#"{"template":"nightly","overrides":{"priority":5}}"#;
    let good = signature(body);
    let cases = [
        ("valid", headers(&good)),
        ("wrong first digit", headers(&flip(&good, 0))),
        ("wrong last digit", headers(&flip(&good, good.len() - 1))),
    ];
    let mut samples: Vec<Vec<u64>> = vec![Vec::with_capacity(ROUNDS); cases.len()];
    for round in 0..ROUNDS {
        // Interleave the cases so drift in machine load hits each equally.
        for k in 0..cases.len() {
            let i = (round + k) % cases.len();
            let start = Instant::now();
            let outcome = verify(
                SignatureScheme::TunePlane,
                SECRET.as_bytes(),
                black_box(&cases[i].1),
                black_box(body),
                NOW,
            );
            let took = start.elapsed();
            black_box(outcome.is_ok());
            samples[i].push(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
        }
    }
    println!("webhook signature verification, {ROUNDS} interleaved rounds per case");
    let medians: Vec<u64> = samples.into_iter().map(median).collect();
    for (case, m) in cases.iter().zip(&medians) {
        println!("  {:<18} median {:>6} ns", case.0, m);
    }
    let diff = medians[1].abs_diff(medians[2]);
    println!("  first vs last digit: {diff} ns difference in medians");
}
