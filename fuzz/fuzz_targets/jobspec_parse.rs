//! Feeds arbitrary text to JobSpec validation: it must never panic, and whatever it accepts must
//! survive a canonical JSON round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tuneplane_core::spec::{Defaults, JobSpec, validate};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(v) = validate(text, None, &Defaults::default()) {
        let json = v.spec.canonical_json();
        let back: JobSpec = serde_json::from_str(&json).expect("canonical JSON parses");
        assert_eq!(back.canonical_json(), json);
    }
});
