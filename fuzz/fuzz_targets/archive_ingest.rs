//! Feeds arbitrary bytes to the archive ingester as tar, tar.gz and zip: it must never panic, never
//! write outside its staging folder and only ever fail with a user error.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use tuneplane_core::capsule::{ArchiveKind, Limits, stage_archive};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else { return };
    let kind = match selector % 3 {
        0 => ArchiveKind::Tar,
        1 => ArchiveKind::TarGz,
        _ => ArchiveKind::Zip,
    };
    let root = std::env::temp_dir().join(format!("tuneplane-fuzz-{}", std::process::id()));
    let stage = root.join("stage");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&stage).expect("scratch folder");
    let limits = Limits { max_entries: 64, max_total_bytes: 1 << 20, ..Limits::default() };
    if let Err(e) = stage_archive(Cursor::new(bytes), kind, &stage, &limits) {
        assert!(e.is_user_error(), "internal error on hostile input: {e}");
    }
    let outside = std::fs::read_dir(&root).expect("scratch folder").count();
    assert_eq!(outside, 1, "something was written beside the staging folder");
    let _ = std::fs::remove_dir_all(&root);
});
