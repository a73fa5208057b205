use super::*;

/// A [`Kept`] log of `data` through a ring of `capacity`, written in chunks of `chunk`.
async fn kept(data: &[u8], capacity: u64, chunk: usize) -> Kept {
    let mut tail = Tail::new(tempfile::tempfile().unwrap(), capacity);
    for piece in data.chunks(chunk.max(1)) {
        tail.write(piece).await.unwrap();
    }
    tail.finish().await.unwrap()
}

fn read_all(kept: &Kept, from: u64) -> Vec<u8> {
    let mut out = Vec::new();
    kept.reader(from).read_to_end(&mut out).unwrap();
    out
}

fn untar(path: &Path) -> Vec<(String, Vec<u8>)> {
    let file = File::open(path).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        let name = entry.path().unwrap().display().to_string();
        out.push((name, data));
    }
    out
}

fn head(max_bytes: u64) -> Index {
    Index {
        job_id: JobId::parse("j").unwrap(),
        workload: "tp-j".into(),
        archived_at_ms: 1,
        max_bytes,
        entries: vec![],
    }
}

fn container(pod: &str, name: &str, init: bool) -> Container {
    Container {
        pod: pod.into(),
        name: name.into(),
        init,
    }
}

#[test]
fn long_logs_share_the_cap_equally_and_short_ones_leave_the_rest_to_later_ones() {
    // Four long logs: a quarter each, whatever the order.
    let mut b = Budget::new(1000, 4);
    for _ in 0..4 {
        assert_eq!(b.share(), 250);
        b.spend(250);
    }
    // A short init log read first leaves its unused share to the three others.
    let mut b = Budget::new(1000, 4);
    assert_eq!(b.share(), 250);
    b.spend(100);
    assert_eq!(b.share(), 300);
    b.spend(300);
    assert_eq!(b.share(), 300);
    b.spend(300);
    assert_eq!(b.share(), 300);
    b.spend(300);
    // A failed read takes nothing; the total never exceeds the cap.
    let mut b = Budget::new(10, 3);
    b.spend(0);
    assert_eq!(b.share(), 5);
    b.spend(5);
    assert_eq!(b.share(), 5);
    // No containers, or more than bytes: nothing is divided by zero, shares may be 0.
    assert_eq!(Budget::new(10, 0).share(), 10);
    assert_eq!(Budget::new(3, 7).share(), 0);
}

#[tokio::test]
async fn a_ring_keeps_the_last_bytes_whatever_the_chunks() {
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    for (capacity, chunk) in [
        (1000, 7),
        (1000, 1000),
        (1000, 4096),
        (999, 333),
        (4096, 64),
    ] {
        let kept = kept(&data, capacity, chunk).await;
        assert_eq!(kept.written(), 10_000);
        let from = 10_000 - capacity;
        assert_eq!(
            read_all(&kept, from),
            data[from as usize..],
            "{capacity}/{chunk}"
        );
    }
    // A log shorter than the ring is kept whole, and nothing is cut.
    let kept = kept(&data[..500], 1000, 64).await;
    assert_eq!(read_all(&kept, 0), data[..500]);
    assert_eq!(kept.cut(1000).unwrap(), (0, None));
    // A ring of nothing keeps nothing but counts what streamed through.
    let kept = self::kept(&data, 0, 100).await;
    assert_eq!(kept.written(), 10_000);
    assert_eq!(read_all(&kept, 10_000), b"");
}

#[tokio::test]
async fn a_cut_log_keeps_its_end_after_a_marker_within_its_share_and_whole_characters() {
    // 20 lines of 50 bytes; a share of 300 bytes keeps the end (the last line is the error).
    let mut log = String::new();
    for i in 0..20 {
        log.push_str(&format!("{:<49}\n", format!("line {i}")));
    }
    log.push_str("Traceback: ValueError: the error is at the end\n");
    let kept = kept(log.as_bytes(), 300, 64).await;
    let (from, marker) = kept.cut(300).unwrap();
    let marker = marker.unwrap();
    let stored = [marker.as_bytes(), &read_all(&kept, from)].concat();
    assert!(stored.len() <= 300, "{} bytes stored", stored.len());
    assert_eq!(
        stored.len() as u64,
        marker.len() as u64 + log.len() as u64 - from
    );
    assert!(log.as_bytes().ends_with(&stored[marker.len()..]));
    assert!(String::from_utf8_lossy(&stored).ends_with("the error is at the end\n"));
    assert_eq!(marker, marker_line(from, log.len() as u64, 300));
    assert!(marker.contains(&format!(
        "the first {from} of this log's {} bytes",
        log.len()
    )));
    assert_eq!(marker.matches('\n').count(), 1);
    assert!(marker.ends_with('\n'));

    // A cut inside a character moves to the next one: the kept part is valid UTF-8.
    let text = "é".repeat(500);
    for capacity in 200..204 {
        let kept = self::kept(text.as_bytes(), capacity, 33).await;
        let (from, _) = kept.cut(10).unwrap();
        let rest = read_all(&kept, from);
        assert!(std::str::from_utf8(&rest).is_ok(), "capacity {capacity}");
        assert!(!rest.is_empty());
    }
}

#[tokio::test]
async fn the_archive_holds_the_index_first_then_every_log_and_says_what_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let long: Vec<u8> = (0..5000)
        .flat_map(|i| format!("{i:09}\n").into_bytes())
        .collect();
    let logs = vec![
        (
            container("p", "fetch", true),
            Collected::Read(kept(b"fetched\n", 1000, 8).await),
        ),
        (
            container("p", "main", false),
            Collected::Read(kept(&long, 1000, 512).await),
        ),
        (
            container("q", "main", false),
            Collected::Failed("the API server answered 400 BadRequest: waiting".into()),
        ),
    ];
    let path = dir.path().join("logs.tar.gz");
    let index = write_tar_gz(&path, head(3000), &logs).unwrap();
    let files = untar(&path);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["index.json", "p/fetch.log", "p/main.log"]);
    let json: serde_json::Value = serde_json::from_slice(&files[0].1).unwrap();
    assert_eq!(json["max_bytes"], 3000);
    let entries = json["entries"].as_array().unwrap();
    assert_eq!(entries[0]["truncated_bytes"], 0);
    assert_eq!(entries[0]["original_bytes"], 8);
    assert_eq!(files[1].1, b"fetched\n");
    // The long log: its last bytes after the marker; the index says how many were left out.
    let cut = entries[1]["truncated_bytes"].as_u64().unwrap();
    assert_eq!(entries[1]["original_bytes"], long.len() as u64);
    assert!(cut >= long.len() as u64 - 1000, "{cut}");
    assert_eq!(entries[1]["bytes"], files[2].1.len() as u64);
    let text = String::from_utf8(files[2].1.clone()).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    assert!(
        first.starts_with(&format!("[tuneplane: the first {cut} of")),
        "{first}"
    );
    assert_eq!(rest.as_bytes(), &long[cut as usize..]);
    assert!(rest.ends_with("000004999\n"));
    // The unreadable log: its reason, no file.
    assert!(entries[2]["path"].is_null());
    assert_eq!(
        entries[2]["error"],
        "the API server answered 400 BadRequest: waiting"
    );
    assert_eq!(index.entries.len(), 3);
    assert_eq!(logs_key("j-1"), "logs/j-1/logs.tar.gz");
}
