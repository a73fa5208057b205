//! Hostile specs and archives: every one refused with a clear error, nothing panics, nothing escapes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

mod hostile;

use std::io::Cursor;
use std::path::Path;

use hostile::{TarEntry, tar_archive};
use proptest::prelude::*;
use tuneplane_core::capsule::{ArchiveKind, Limits, stage_archive};
use tuneplane_core::spec::{Defaults, validate};

fn refused(text: &str) -> String {
    validate(text, None, &Defaults::default())
        .expect_err("hostile spec accepted")
        .to_string()
}

#[test]
fn yaml_alias_bomb_is_refused_quickly() {
    let mut lines =
        vec![r#"a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]"#.to_string()];
    for i in 1..10 {
        lines.push(format!(
            "a{i}: &a{i} [{}]",
            vec![format!("*a{}", i - 1); 9].join(",")
        ));
    }
    lines.push("name: *a9".into());
    assert!(refused(&lines.join("\n")).contains("not valid YAML"));
}

#[test]
fn deeply_nested_yaml_and_json_are_refused() {
    let deep = format!("name: {}{}", "[".repeat(5000), "]".repeat(5000));
    assert!(refused(&deep).contains("recursion limit"));
    let deep = format!("{{\"name\": {}{}}}", "[".repeat(5000), "]".repeat(5000));
    assert!(refused(&deep).contains("recursion limit"));
}

#[test]
fn huge_documents_are_refused_before_parsing() {
    let huge = format!("{{\"name\": \"{}\"}}", "x".repeat(10 << 20));
    assert!(refused(&huge).contains("limit"));
}

#[test]
fn wrong_types_negative_and_huge_numbers_are_named() {
    let text = "name: [x]\nimage: {a: 1}\nentrypoint: 7\npriority: 9999999999\npools: [{name: m, series: h200, nodes: -1, gpus_per_node: 1e300}]\ndeadlines: {run_seconds: -3}\n";
    let e = refused(text);
    for needle in [
        "name: must be a string",
        "image: must be a string",
        "entrypoint: must be a string",
        "priority",
        "pools[0].nodes",
        "pools[0].gpus_per_node",
        "deadlines.run_seconds",
    ] {
        assert!(e.contains(needle), "{needle} missing from {e}");
    }
    // Beyond 64 bits the parser itself refuses, naming the field and line.
    let e = refused("name: x\npriority: 99999999999999999999\n");
    assert!(e.contains("priority") && e.contains("line 2"), "{e}");
}

/// Every file under `root` (recursively), relative.
fn staged(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            assert!(!ft.is_symlink(), "a symlink was created");
            if ft.is_dir() {
                stack.push(e.path());
            } else {
                out.push(
                    e.path()
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out
}

fn name_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-z]{1,3}",
            Just("..".to_string()),
            Just(".".to_string()),
            Just("".to_string()),
            Just(".tuneplane".to_string()),
            "[A-Z]{1,2}"
        ],
        1..5,
    )
    .prop_map(|parts| parts.join("/"))
    .prop_map(|p| if p.len() % 3 == 0 { format!("/{p}") } else { p })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn validation_never_panics_on_arbitrary_text(text in "(?s).{0,400}") {
        let _ = validate(&text, None, &Defaults::default());
    }

    #[test]
    fn validation_never_panics_on_arbitrary_yaml_shapes(
        nodes in any::<i64>(), gpus in any::<i64>(), cpus in any::<f64>(), name in "[ -~]{0,50}", prio in any::<i64>()
    ) {
        let text = format!("name: {name:?}\nimage: img\nentrypoint: e\npriority: {prio}\npools: [{{name: m, nodes: {nodes}, gpus_per_node: {gpus}, cpus: {cpus}, memory_gb: 1}}]\n");
        if let Ok(v) = validate(&text, None, &Defaults::default()) {
            let p = &v.spec.pools[0];
            prop_assert!(p.nodes >= 1 && p.gpus_per_node <= 16 && p.cpus > 0.0);
            prop_assert!(v.spec.priority.abs() <= 1000);
        }
    }

    #[test]
    fn accepted_specs_round_trip_through_canonical_json(nodes in 1u32..8, gpus in 1u32..9, prio in -1000i32..1000) {
        let text = format!("name: j\nimage: img\nentrypoint: e\npriority: {prio}\npools: [{{name: m, series: h200, nodes: {nodes}, gpus_per_node: {gpus}}}]\n");
        let spec = validate(&text, None, &Defaults::default()).unwrap().spec;
        let json = spec.canonical_json();
        let back: tuneplane_core::spec::JobSpec = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back.canonical_json(), json);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_ingester(bytes in prop::collection::vec(any::<u8>(), 0..2048), kind in 0u8..3) {
        let kind = [ArchiveKind::Tar, ArchiveKind::TarGz, ArchiveKind::Zip][kind as usize];
        let t = tempfile::tempdir().unwrap();
        if let Err(e) = stage_archive(Cursor::new(bytes), kind, t.path(), &Limits::default()) {
            prop_assert!(e.is_user_error(), "{}", e);
        }
    }

    #[test]
    fn whatever_tar_names_arrive_nothing_lands_outside_the_staging_folder(names in prop::collection::vec(name_strategy(), 1..6)) {
        let entries: Vec<TarEntry> = names.iter().map(|n| TarEntry::file(n, b"x")).collect();
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("stage");
        std::fs::create_dir_all(&dest).unwrap();
        let result = stage_archive(Cursor::new(tar_archive(&entries)), ArchiveKind::Tar, &dest, &Limits::default());
        // Only the staging folder may have been written to.
        let outside: Vec<_> = std::fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        prop_assert_eq!(outside.len(), 1);
        if result.is_ok() {
            for f in staged(&dest) {
                prop_assert!(!f.split('/').any(|c| c == "..") && !f.starts_with(".tuneplane"), "{}", f);
            }
        }
    }
}
