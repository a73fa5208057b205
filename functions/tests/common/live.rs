//! `GET /v1/jobs/{id}/logs/live` and its marks of interest, with a stand-in for the reconciler
//! that ships when asked: a one-off read of a running job marks it wanted and waits for the
//! shipment that answers it; `wait=false` and `follow=true` answer at once; `tail` sends each
//! container's last lines.

use std::time::Duration;

use serde_json::Value;
use tuneplane_core::live::readers::READER_FOLLOW_MS;
use tuneplane_core::live::{FOLLOW_TTL_MS, Manifest, Segment, manifest_key, segment_key};

use super::Harness;

/// Ships `text` of pod `p` container `job` as one segment after `list`'s, answering `answered`.
async fn ship(h: &Harness, list: &mut Manifest, text: &str, answered: Option<i64>) {
    let offset = list.shipped("p", "job");
    let seg = Segment {
        seq: list.last_seq() + 1,
        pod: "p".into(),
        container: "job".into(),
        offset,
        bytes: text.len() as u64,
        key: segment_key(&list.job_id, "p", "job", offset),
        main: true,
        at_ms: 0,
    };
    h.blobs()
        .put(&seg.key, text.as_bytes().to_vec())
        .await
        .expect("segment");
    list.segments.push(seg);
    list.answered_ms = answered.or(list.answered_ms);
    h.blobs()
        .put(
            &manifest_key(&list.job_id),
            serde_json::to_vec(&*list).expect("json"),
        )
        .await
        .expect("list");
}

/// The text of every segment of a live answer, joined.
fn text_of(page: &Value) -> String {
    page["segments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["text"].as_str())
        .collect()
}

pub async fn a_one_off_read_of_a_running_job_waits_for_the_shipment_that_answers_it(h: &Harness) {
    let job = h.running_job().await;
    let mut list = Manifest::empty(job.id.clone());
    ship(h, &mut list, "tick 1\n", None).await;
    // The stand-in reconciler: once a reader's want is on the record, it ships what is new and
    // answers it (the real one does so at its next pass).
    let jobs = h.jobs().clone();
    let id = job.id.clone();
    let shipper = tokio::spawn(async move {
        for _ in 0..200 {
            let record = jobs.get_job(&id).await.expect("get").expect("job");
            if let Some(want) = record.logs_wanted_at_ms {
                return Some((record, want));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    });
    let path = format!("/v1/jobs/{}/logs/live", job.id);
    let read = h.get(&path);
    let (reply, shipped) = tokio::join!(read, async {
        let (record, want) = shipper.await.expect("join").expect("no want was marked");
        ship(h, &mut list, "tick 2\n", Some(want)).await;
        record
    });
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.json["up_to_date"], true, "{}", reply.json);
    assert_eq!(text_of(&reply.json), "tick 1\ntick 2\n", "{}", reply.json);
    assert_eq!(reply.json["last_seq"], 2);
    // The want came with a short follow mark.
    let want = shipped.logs_wanted_at_ms.unwrap_or_default();
    assert_eq!(
        shipped.logs_followed_until_ms,
        Some(want + READER_FOLLOW_MS),
        "{shipped:?}"
    );
}

pub async fn a_read_without_wait_or_of_a_follower_answers_at_once(h: &Harness) {
    let job = h.running_job().await;
    let mut list = Manifest::empty(job.id.clone());
    ship(h, &mut list, "a\nb\n", None).await;
    // wait=false: what was shipped, and no mark.
    let reply = h
        .get(&format!("/v1/jobs/{}/logs/live?wait=false", job.id))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.json["up_to_date"], false);
    assert_eq!(text_of(&reply.json), "a\nb\n");
    let record = h.jobs().get_job(&job.id).await.expect("get").expect("job");
    assert_eq!(
        (record.logs_wanted_at_ms, record.logs_followed_until_ms),
        (None, None)
    );
    // follow=true: marked followed for a minute, no want.
    let reply = h
        .get(&format!(
            "/v1/jobs/{}/logs/live?follow=true&after=1",
            job.id
        ))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(text_of(&reply.json), "");
    let record = h.jobs().get_job(&job.id).await.expect("get").expect("job");
    assert_eq!(record.logs_wanted_at_ms, None);
    let until = record.logs_followed_until_ms.unwrap_or_default();
    let left = until - tuneplane_core::clock::now_ms();
    assert!(
        left > FOLLOW_TTL_MS - 10_000 && left <= FOLLOW_TTL_MS,
        "{record:?}"
    );
}

pub async fn a_one_off_read_nobody_answers_gets_what_was_shipped(h: &Harness) {
    let job = h.running_job().await;
    let mut list = Manifest::empty(job.id.clone());
    ship(h, &mut list, "old\n", None).await;
    let reply = h.get(&format!("/v1/jobs/{}/logs/live", job.id)).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.json["up_to_date"], false, "{}", reply.json);
    assert_eq!(text_of(&reply.json), "old\n");
    let record = h.jobs().get_job(&job.id).await.expect("get").expect("job");
    assert!(record.logs_wanted_at_ms.is_some(), "{record:?}");
}

pub async fn tail_sends_each_containers_last_lines_with_their_offset(h: &Harness) {
    let job = h.running_job().await;
    let mut list = Manifest::empty(job.id.clone());
    ship(h, &mut list, "one\ntwo\n", None).await;
    ship(h, &mut list, "three\nfour\n", None).await;
    ship(h, &mut list, "five\n", None).await;
    let reply = h
        .get(&format!("/v1/jobs/{}/logs/live?wait=false&tail=3", job.id))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    let segments = reply.json["segments"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(segments.len(), 1, "{}", reply.json);
    assert_eq!(segments[0]["text"], "three\nfour\nfive\n");
    // "one\ntwo\n" is 8 bytes: the lines begin there.
    assert_eq!(segments[0]["offset"], 8);
    assert_eq!(segments[0]["seq"], 3);
    assert_eq!(reply.json["last_seq"], 3);
    assert_eq!(reply.json["more"], false);
    // More lines asked than there are: all of them, from byte 0.
    let all = h
        .get(&format!("/v1/jobs/{}/logs/live?wait=false&tail=50", job.id))
        .await;
    assert_eq!(text_of(&all.json), "one\ntwo\nthree\nfour\nfive\n");
    assert_eq!(all.json["segments"][0]["offset"], 0);
}
