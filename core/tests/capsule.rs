//! Capsule builder: determinism, layout, the runner, and every rejection rule with real hostile
//! archives built here byte by byte.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

mod hostile;

use std::fs;
use std::io::{Cursor, Read, Write};
use std::path::Path;

use hostile::{TarEntry, tar_archive};
use tuneplane_core::capsule::{
    self, ArchiveKind, CapsuleError, Limits, build_from_source, inspect, stage_archive,
};
use tuneplane_core::spec::{Defaults, JobSpec, validate};

fn spec() -> JobSpec {
    let text = "name: t\nimage: python:3.12\nentrypoint: python main.py\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\n";
    validate(text, None, &Defaults::default()).unwrap().spec
}

/// Deterministic pseudo-random bytes (incompressible).
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn write_tree(root: &Path) {
    fs::create_dir_all(root.join("pkg/sub")).unwrap();
    fs::write(
        root.join("main.py"),
        "from pkg import helper\nprint(helper.VALUE)\n",
    )
    .unwrap();
    fs::write(root.join("pkg/__init__.py"), "").unwrap();
    fs::write(root.join("pkg/helper.py"), "VALUE = 42\n").unwrap();
    fs::write(root.join("pkg/sub/data.bin"), noise(7, 3 << 20)).unwrap();
    let text: String = (0..60_000)
        .map(|i| format!("line {i} of a compressible text file\n"))
        .collect();
    fs::write(root.join("pkg/sub/big.txt"), text).unwrap();
    let script = root.join("run.sh");
    fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o775)).unwrap();
}

fn build(source: &Path, scratch: &Path) -> Result<(Vec<u8>, capsule::Built), CapsuleError> {
    build_from_source(source, &spec(), &Limits::default(), scratch, Vec::new())
}

fn sha_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn same_source_twice_on_different_paths_and_times_gives_identical_capsules() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_tree(&a.path().join("one"));
    write_tree(&b.path().join("elsewhere/two"));
    // Different modification times must not matter.
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(b.path().join("elsewhere/two/main.py"))
        .unwrap()
        .set_modified(old)
        .unwrap();

    let (x, bx) = build(&a.path().join("one"), a.path()).unwrap();
    let (y, by) = build(&b.path().join("elsewhere/two"), b.path()).unwrap();
    assert_eq!(x, y);
    assert_eq!(bx.sha256, by.sha256);
    assert_eq!(
        bx.sha256,
        sha_hex(&x),
        "the reported digest is the digest of the bytes"
    );
}

#[test]
fn directory_tar_targz_and_zip_of_the_same_files_give_the_same_capsule() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("code");
    fs::create_dir_all(dir.join("pkg")).unwrap();
    fs::write(dir.join("main.py"), "print('x')\n").unwrap();
    fs::write(dir.join("pkg/m.py"), "Y = 1\n").unwrap();
    let (from_dir, _) = build(&dir, t.path()).unwrap();

    let entries = [
        TarEntry::dir("pkg/"),
        TarEntry::file("pkg/m.py", b"Y = 1\n"),
        TarEntry::file("./main.py", b"print('x')\n"),
    ];
    let tar = tar_archive(&entries);
    fs::write(t.path().join("code.tar"), &tar).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    fs::write(t.path().join("code.tgz"), gz.finish().unwrap()).unwrap();
    let mut zw = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    zw.start_file("main.py", opts).unwrap();
    zw.write_all(b"print('x')\n").unwrap();
    zw.start_file("pkg/m.py", opts).unwrap();
    zw.write_all(b"Y = 1\n").unwrap();
    fs::write(t.path().join("code.zip"), zw.finish().unwrap().into_inner()).unwrap();

    for name in ["code.tar", "code.tgz", "code.zip"] {
        let (bytes, _) = build(&t.path().join(name), t.path()).unwrap();
        assert_eq!(bytes, from_dir, "{name}");
    }
    // Staging folders are cleaned up.
    let left: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.iter().all(|n| !n.to_string_lossy().contains("stage")),
        "{left:?}"
    );
}

#[test]
fn user_files_sit_at_the_root_and_platform_files_under_tuneplane() {
    let t = tempfile::tempdir().unwrap();
    write_tree(&t.path().join("c"));
    let (bytes, built) = build(&t.path().join("c"), t.path()).unwrap();
    let mut zip = zip::ZipArchive::new(Cursor::new(&bytes)).unwrap();
    let names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
    let mut listed = Vec::new();
    for i in 0..zip.len() {
        let f = zip.by_index(i).unwrap();
        let dt = f.last_modified().unwrap();
        assert_eq!((dt.year(), dt.month(), dt.day()), (1980, 1, 1));
        listed.push((
            String::from_utf8_lossy(f.name_raw()).into_owned(),
            f.unix_mode().unwrap() & 0o777,
        ));
    }
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "central directory is in path order");
    for p in [
        ".tuneplane/jobspec.json",
        ".tuneplane/manifest.json",
        ".tuneplane/runner.pex",
        "main.py",
        "pkg/helper.py",
        "pkg/sub/data.bin",
    ] {
        assert!(names.iter().any(|n| n == p), "{p} missing from {names:?}");
    }
    assert!(
        listed.contains(&("run.sh".to_string(), 0o755)),
        "executables keep 0755"
    );
    assert!(listed.contains(&("main.py".to_string(), 0o644)));
    assert_eq!(built.manifest.user_files().count(), 6);
    let ins = inspect(Cursor::new(&bytes)).unwrap();
    assert_eq!(ins.sha256, built.sha256);
    assert_eq!(ins.spec, spec());
    // Incompressible data is stored, text is deflated.
    let data = zip.by_name("pkg/sub/data.bin").unwrap().compression();
    let text = zip.by_name("pkg/sub/big.txt").unwrap().compression();
    assert_eq!(data, zip::CompressionMethod::Stored);
    assert_eq!(text, zip::CompressionMethod::Deflated);
}

#[test]
fn multi_chunk_files_round_trip_exactly() {
    let t = tempfile::tempdir().unwrap();
    write_tree(&t.path().join("c"));
    let (bytes, _) = build(&t.path().join("c"), t.path()).unwrap();
    let mut zip = zip::ZipArchive::new(Cursor::new(&bytes)).unwrap();
    for name in [
        "pkg/sub/data.bin",
        "pkg/sub/big.txt",
        "main.py",
        "pkg/__init__.py",
    ] {
        let mut got = Vec::new();
        zip.by_name(name).unwrap().read_to_end(&mut got).unwrap();
        assert_eq!(
            got,
            fs::read(t.path().join("c").join(name)).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn capsule_bytes_match_the_recorded_golden_digest() {
    // Guards determinism across machines and dependency updates: if this changes, every capsule
    // identity changes. Update the digest only on purpose (with a changelog note).
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("g");
    fs::create_dir_all(&dir).unwrap();
    let text: String = (0..3000).map(|i| format!("{i} golden\n")).collect();
    fs::write(dir.join("main.py"), text).unwrap();
    let mut spec = spec();
    spec.platform_version = "golden".into();
    let (bytes, built) =
        build_from_source(&dir, &spec, &Limits::default(), t.path(), Vec::new()).unwrap();
    assert_eq!(built.sha256, sha_hex(&bytes));
    assert_eq!(built.sha256, GOLDEN, "capsule format drifted");
}

// Changed on purpose when the runner gained its manifest check (every capsule's runner.pex changed),
// and again when it gained outputs, checkpoints and resume and the authoritative spec gained
// `retries`, `checkpoints` and `deadlines.grace_seconds` (issue 28), and when the runner began to
// name each upload's size (issue 44: upload URLs are signed for one length), and when it began to
// download the outputs of the jobs a job depends on (issue 48: `TUNEPLANE_INPUTS_DIR`).
const GOLDEN: &str = "d40b9469075c12e8e62d8b72a91d767b3ae9fb5fa3444b3c91c6b510203056c7";

#[test]
fn tampered_capsule_fails_inspection() {
    let t = tempfile::tempdir().unwrap();
    write_tree(&t.path().join("c"));
    let (mut bytes, _) = build(&t.path().join("c"), t.path()).unwrap();
    // data.bin is stored: flip a byte in the middle of its data.
    let needle = noise(7, 3 << 20)[1000..1016].to_vec();
    let pos = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .unwrap();
    bytes[pos] ^= 0xff;
    assert!(inspect(Cursor::new(&bytes)).is_err());
}

fn reject(kind: ArchiveKind, bytes: &[u8], limits: &Limits) -> String {
    let t = tempfile::tempdir().unwrap();
    let dest = t.path().join("stage");
    fs::create_dir_all(&dest).unwrap();
    let err = stage_archive(Cursor::new(bytes), kind, &dest, limits)
        .expect_err("hostile archive was accepted");
    assert!(err.is_user_error(), "{err}");
    err.to_string()
}

fn contains_all(msg: &str, needles: &[&str]) {
    assert!(
        needles.iter().all(|n| msg.contains(n)),
        "{msg:?} lacks {needles:?}"
    );
}

#[test]
fn tar_path_traversal_is_rejected_naming_the_entry() {
    let msg = reject(
        ArchiveKind::Tar,
        &tar_archive(&[
            TarEntry::file("ok.py", b"x"),
            TarEntry::file("../../etc/cron.d/x", b"evil"),
        ]),
        &Limits::default(),
    );
    contains_all(&msg, &["\"../../etc/cron.d/x\"", "escapes"]);
}

#[test]
fn tar_absolute_path_is_rejected() {
    let msg = reject(
        ArchiveKind::Tar,
        &tar_archive(&[TarEntry::file("/etc/passwd", b"evil")]),
        &Limits::default(),
    );
    contains_all(&msg, &["\"/etc/passwd\"", "absolute"]);
}

#[test]
fn tar_symlink_hard_link_device_and_fifo_are_rejected() {
    for (entry, needle) in [
        (
            TarEntry::link(tar::EntryType::Symlink, "data", "/etc"),
            "symbolic links",
        ),
        (
            TarEntry::link(tar::EntryType::Link, "hl", "/etc/shadow"),
            "hard links",
        ),
        (TarEntry::special(tar::EntryType::Char, "null"), "device"),
        (TarEntry::special(tar::EntryType::Block, "sda"), "device"),
        (TarEntry::special(tar::EntryType::Fifo, "pipe"), "FIFO"),
    ] {
        let name = entry.name.clone();
        let msg = reject(
            ArchiveKind::Tar,
            &tar_archive(&[TarEntry::file("a.py", b"x"), entry]),
            &Limits::default(),
        );
        contains_all(
            &msg,
            &[&format!("{:?}", String::from_utf8_lossy(&name)), needle],
        );
    }
}

#[test]
fn duplicate_and_case_colliding_entries_are_rejected() {
    let dup = tar_archive(&[TarEntry::file("a.py", b"1"), TarEntry::file("./a.py", b"2")]);
    contains_all(
        &reject(ArchiveKind::Tar, &dup, &Limits::default()),
        &["\"./a.py\"", "duplicate"],
    );
    let case = tar_archive(&[
        TarEntry::file("Model.py", b"1"),
        TarEntry::file("model.py", b"2"),
    ]);
    contains_all(
        &reject(ArchiveKind::Tar, &case, &Limits::default()),
        &["\"model.py\"", "case-insensitive"],
    );
    contains_all(
        &reject(
            ArchiveKind::Zip,
            &hostile::zip_raw(&[("a.py", b"1"), ("a.py", b"2")]),
            &Limits::default(),
        ),
        &["\"a.py\"", "duplicate"],
    );
}

#[test]
fn non_utf8_names_and_the_reserved_folder_are_rejected() {
    let bad = tar_archive(&[TarEntry {
        name: b"caf\xe9.py".to_vec(),
        ..TarEntry::file("", b"x")
    }]);
    contains_all(
        &reject(ArchiveKind::Tar, &bad, &Limits::default()),
        &["UTF-8"],
    );
    let reserved = tar_archive(&[
        TarEntry::file("a.py", b"x"),
        TarEntry::file(".tuneplane/jobspec.json", b"{}"),
    ]);
    contains_all(
        &reject(ArchiveKind::Tar, &reserved, &Limits::default()),
        &["\".tuneplane/jobspec.json\"", "reserved"],
    );
    let reserved = hostile::zip_raw(&[(".tuneplane/runner.pex", b"x")]);
    contains_all(
        &reject(ArchiveKind::Zip, &reserved, &Limits::default()),
        &["reserved"],
    );
}

#[test]
fn zip_traversal_absolute_and_symlink_entries_are_rejected() {
    contains_all(
        &reject(
            ArchiveKind::Zip,
            &hostile::zip_raw(&[("../evil.py", b"x")]),
            &Limits::default(),
        ),
        &["\"../evil.py\"", "escapes"],
    );
    contains_all(
        &reject(
            ArchiveKind::Zip,
            &hostile::zip_raw(&[("/abs.py", b"x")]),
            &Limits::default(),
        ),
        &["\"/abs.py\"", "absolute"],
    );
    let mut zw = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zw.add_symlink(
        "link",
        "/etc/passwd",
        zip::write::SimpleFileOptions::default(),
    )
    .unwrap();
    let bytes = zw.finish().unwrap().into_inner();
    contains_all(
        &reject(ArchiveKind::Zip, &bytes, &Limits::default()),
        &["\"link\"", "symbolic links"],
    );
}

#[test]
fn oversize_code_is_rejected() {
    let limits = Limits {
        max_total_bytes: 1000,
        ..Limits::default()
    };
    let big = tar_archive(&[
        TarEntry::file("a.bin", &[1u8; 600]),
        TarEntry::file("b.bin", &[2u8; 600]),
    ]);
    contains_all(
        &reject(ArchiveKind::Tar, &big, &limits),
        &["more than 1000 bytes"],
    );
}

#[test]
fn too_many_entries_is_rejected() {
    let limits = Limits {
        max_entries: 10,
        ..Limits::default()
    };
    let many: Vec<TarEntry> = (0..11)
        .map(|i| TarEntry::file(&format!("f{i}.py"), b"x"))
        .collect();
    contains_all(
        &reject(ArchiveKind::Tar, &tar_archive(&many), &limits),
        &["more than 10 entries"],
    );
    let files: Vec<(String, Vec<u8>)> = (0..11).map(|i| (format!("f{i}"), vec![])).collect();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    contains_all(
        &reject(ArchiveKind::Zip, &hostile::zip_raw(&refs), &limits),
        &["11 entries"],
    );
}

#[test]
fn compression_bombs_are_rejected_by_ratio() {
    let zeros = vec![0u8; 16 << 20];
    let tar = tar_archive(&[TarEntry::file("zeros.bin", &zeros)]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar).unwrap();
    contains_all(
        &reject(
            ArchiveKind::TarGz,
            &gz.finish().unwrap(),
            &Limits::default(),
        ),
        &["\"zeros.bin\"", "compression ratio"],
    );
    let mut zw = zip::ZipWriter::new(Cursor::new(Vec::new()));
    zw.start_file("zeros.bin", zip::write::SimpleFileOptions::default())
        .unwrap();
    zw.write_all(&zeros).unwrap();
    let bytes = zw.finish().unwrap().into_inner();
    contains_all(
        &reject(ArchiveKind::Zip, &bytes, &Limits::default()),
        &["\"zeros.bin\"", "compression ratio"],
    );
}

#[test]
fn truncated_corrupt_and_empty_archives_are_rejected() {
    let tar = tar_archive(&[TarEntry::file("a.py", &[b'a'; 4000])]);
    contains_all(
        &reject(ArchiveKind::Tar, &tar[..1500], &Limits::default()),
        &["a.py"],
    );
    contains_all(
        &reject(ArchiveKind::Zip, b"PK\x03\x04garbage", &Limits::default()),
        &["corrupt"],
    );
    contains_all(
        &reject(ArchiveKind::Tar, &tar_archive(&[]), &Limits::default()),
        &["no files"],
    );
    let t = tempfile::tempdir().unwrap();
    fs::write(t.path().join("notes.txt"), "just text").unwrap();
    let err = build(&t.path().join("notes.txt"), t.path()).unwrap_err();
    assert!(
        err.to_string()
            .contains("not a directory, tar, tar.gz or zip"),
        "{err}"
    );
}

#[test]
fn directory_with_symlink_or_reserved_folder_or_fifo_is_rejected() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("c");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("a.py"), "x").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", d.join("pw")).unwrap();
    contains_all(
        &build(&d, t.path()).unwrap_err().to_string(),
        &["\"pw\"", "symbolic links"],
    );
    fs::remove_file(d.join("pw")).unwrap();
    fs::create_dir_all(d.join(".tuneplane")).unwrap();
    contains_all(
        &build(&d, t.path()).unwrap_err().to_string(),
        &["\".tuneplane\"", "reserved"],
    );
    fs::remove_dir(d.join(".tuneplane")).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(d.join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    contains_all(
        &build(&d, t.path()).unwrap_err().to_string(),
        &["\"fifo\"", "FIFOs"],
    );
}

#[test]
fn storage_key_puts_the_hash_in_the_path_and_ends_in_zip() {
    assert_eq!(
        capsule::storage_key("ab12"),
        "capsules/sha256/ab12/capsule.zip"
    );
}
