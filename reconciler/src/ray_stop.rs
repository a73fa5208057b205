//! Stopping a RayJob's Ray job through its head before the RayJob is deleted, so that the driver
//! saves and says so within its grace and what it prints reaches the attempt's archive.
//!
//! Deleting a RayJob takes its Ray cluster down with the driver in it: KubeRay removes its
//! finalizer without waiting for the stop it asks of Ray, and the head's processes end with the
//! pod. So when a running Ray attempt is stopped or preempted, the reconciler first asks Ray to
//! stop the job, through the API server's proxy to the head pod's gate (`ray_gate.py` forwards
//! the stop of its own job with the token): Ray signals the driver and gives it
//! `RAY_JOB_STOP_WAIT_TIME_S` (the job's grace) before it kills it. The reconciler waits for
//! the job to end, at most that long and a margin, then for KubeRay's submitter to end by itself
//! (it follows the driver's log a few seconds behind, until the job ended and no line is left),
//! and only then deletes the RayJob. The archive follows the submitter's log, so the grace-time
//! lines are in it.
//!
//! Where the head cannot be asked (a simulated cluster serves no pod ports; a head not running
//! yet), the RayJob is deleted as before: what the driver prints then is what its pod's
//! termination leaves it time for.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use tokio::time::Instant;
use tuneplane_core::render::rayjob::GATE_PORT;

use crate::cluster::SUBMITTER_LABEL;
use crate::kube_io::Kube;

/// Label KubeRay puts on a Ray pod: `head` or `worker`.
pub const NODE_TYPE_LABEL: &str = "ray.io/node-type";

/// Longest one request to the head may take: a head that does not answer within it is not
/// waited for (its RayJob's deletion ends the job).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the job's status is read while it stops.
const POLL: Duration = Duration::from_secs(1);

/// Longest the submitter is waited for after the job ended (its log runs a few seconds behind).
const SUBMITTER_WAIT: Duration = Duration::from_secs(20);

/// Ray's statuses of a job that has ended.
const ENDED: [&str; 3] = ["STOPPED", "SUCCEEDED", "FAILED"];

/// What came of asking the head to stop the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Ray reports the job ended, with this status (`STOPPED` after a stop).
    Ended(String),
    /// The job was still running when the wait ran out (Ray kills the driver at its grace).
    StillRunning,
    /// The head went (or Ray forgot the job) while the stop was waited for (the answer).
    HeadGone(String),
    /// The head was not asked or did not answer (why): the RayJob's deletion ends the job.
    NotAsked(String),
}

/// The API server's proxy path to `head`'s gate for `rest` (`/api/jobs/...`).
fn gate_path(namespace: &str, head: &str, rest: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{head}:{GATE_PORT}/proxy{rest}")
}

/// Asks the gate of `head` (a running head pod in `namespace`) to stop Ray job `submission`
/// and waits, at most `within`, for Ray to report it ended.
pub async fn stop(
    kube: &Kube,
    namespace: &str,
    head: &str,
    submission: &str,
    within: Duration,
) -> Outcome {
    let object = format!("pod {namespace}/{head}");
    let deadline = Instant::now() + within;
    let stop = http::Request::post(gate_path(
        namespace,
        head,
        &format!("/api/jobs/{submission}/stop"),
    ))
    .body(Vec::new());
    let Ok(stop) = stop else {
        return Outcome::NotAsked(format!("no request can be made for pod {head}"));
    };
    if let Err(e) = kube
        .once(
            "stop ray job",
            &object,
            timed(kube.client.request_text(stop)),
        )
        .await
    {
        return Outcome::NotAsked(e.to_string());
    }
    // Stopped or not (`stopped: false` is Ray's answer for a job that had already ended), the
    // job's status says when it is over.
    loop {
        match status(kube, namespace, head, submission, &object).await {
            Read::Status(s) if ENDED.contains(&s.as_str()) => {
                submitter_done(kube, namespace, submission, SUBMITTER_WAIT).await;
                return Outcome::Ended(s);
            }
            Read::Gone(why) => return Outcome::HeadGone(why),
            _ if Instant::now() >= deadline => return Outcome::StillRunning,
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// Waits, at most `within`, for the submitter of `workload` (KubeRay's Job of that name) to
/// end by itself: it follows the driver's log until the job ended and no line is left, a few
/// seconds behind the driver; deleting the RayJob earlier would cut its last lines off. Any
/// answer but "still running" ends the wait (no submitter, a listing that fails).
async fn submitter_done(kube: &Kube, namespace: &str, workload: &str, within: Duration) {
    let deadline = Instant::now() + within;
    let api: kube::Api<Pod> = kube::Api::namespaced(kube.client.clone(), namespace);
    let params = kube::api::ListParams::default().labels(&format!("{SUBMITTER_LABEL}={workload}"));
    let object = format!("submitter {namespace}/{workload}");
    while Instant::now() < deadline {
        let Ok(pods) = kube
            .once("list submitter pods", &object, api.list(&params))
            .await
        else {
            return;
        };
        let running = pods.items.iter().any(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Running" || phase == "Pending")
        });
        if !running {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `call` bounded by [`REQUEST_TIMEOUT`] (a timeout reads as a transport error).
async fn timed<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(kube::Error::Service(
                format!("no answer within {} s", REQUEST_TIMEOUT.as_secs()).into(),
            ))
        })
}

/// One reading of the job's status.
enum Read {
    /// Ray's status of the job.
    Status(String),
    /// The head or the job is no longer there to ask (a 4xx: the pod is gone or has no address
    /// any more, Ray no longer knows the job).
    Gone(String),
    /// No answer this time (the API server or the head did not answer).
    Unknown,
}

/// Ray's status of `submission` as the gate answers it.
async fn status(kube: &Kube, namespace: &str, head: &str, submission: &str, object: &str) -> Read {
    let path = gate_path(namespace, head, &format!("/api/jobs/{submission}"));
    let Ok(request) = http::Request::get(path).body(Vec::new()) else {
        return Read::Unknown;
    };
    let text = match kube
        .once(
            "read ray job status",
            object,
            kube.client.request_text(request),
        )
        .await
    {
        Ok(text) => text,
        Err(crate::Error::Kube {
            source: kube::Error::Api(status),
            ..
        }) if (400..500).contains(&status.code) => {
            return Read::Gone(format!("{} {}", status.code, status.message.trim_end()));
        }
        Err(_) => return Read::Unknown,
    };
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|info| info.get("status")?.as_str().map(str::to_owned))
        .map_or(Read::Unknown, Read::Status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_path_names_the_head_pod_and_its_gate_port() {
        assert_eq!(
            gate_path("tuneplane-jobs", "tp-j-1-head-x", "/api/jobs/tp-j-1/stop"),
            format!(
                "/api/v1/namespaces/tuneplane-jobs/pods/tp-j-1-head-x:{GATE_PORT}/proxy/api/jobs/tp-j-1/stop"
            )
        );
    }
}
