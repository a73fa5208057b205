//! Archives and specs for the tests: a good tar.gz, a hostile tar, an inbox zip.

use std::io::Write;

use base64::Engine;
use serde_json::{Value, json};

/// A valid GPU job spec (YAML).
pub const SPEC: &str = "name: sft\nimage: ghcr.io/acme/train:1.2\nentrypoint: python train.py\npools:\n  - {name: main, series: h200, nodes: 1, gpus_per_node: 8}\n";

/// A spec with three independent problems.
pub const BAD_SPEC: &str = "name: Not_A_Label\nimage: ''\nentrypoint: python train.py\npools:\n  - {name: main, series: h200, nodes: 0, gpus_per_node: 8}\nbogus: 1\n";

/// A gzipped tar of `files`.
pub fn tar_gz(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        builder
            .append_data(&mut header, path, content.as_bytes())
            .expect("tar");
    }
    let tar = builder.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).expect("gz");
    gz.finish().expect("gz")
}

/// A tar whose second entry escapes with `../` (written into the raw header, as attackers do).
pub fn hostile_tar() -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let good = b"print('hi')\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(good.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder
        .append_data(&mut header, "train.py", &good[..])
        .expect("tar");
    let evil = b"owned\n";
    let mut header = tar::Header::new_gnu();
    let name = b"../../evil.sh";
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    header.set_size(evil.len() as u64);
    header.set_mode(0o755);
    header.set_cksum();
    builder.append(&header, &evil[..]).expect("tar");
    builder.into_inner().expect("tar")
}

/// A zip of `files` (for inbox drops).
pub fn zip(files: &[(&str, &str)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, content) in files {
        w.start_file(*path, zip::write::SimpleFileOptions::default())
            .expect("zip");
        w.write_all(content.as_bytes()).expect("zip");
    }
    w.finish().expect("zip").into_inner()
}

/// The default code: a training script.
pub fn code() -> Vec<u8> {
    tar_gz(&[("train.py", "print('training')\n")])
}

/// A `POST /v1/jobs` body with inline code.
pub fn body(spec: &str, archive: &[u8]) -> Value {
    json!({
        "spec": spec,
        "code": {"inline": base64::engine::general_purpose::STANDARD.encode(archive)},
    })
}
