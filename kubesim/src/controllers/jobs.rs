//! A minimal batch/v1 Job controller: one pod at a time from the template, retries up to
//! `backoffLimit`, `Complete`/`Failed` conditions, `activeDeadlineSeconds` and
//! `ttlSecondsAfterFinished`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::json::{self, str_at};
use crate::resources::{JOBS, PODS};
use crate::store::{DeleteOptions, Store};

/// Label on a Job's pods naming the Job.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

fn finished(job: &Value) -> Option<&str> {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter().find_map(|c| {
                let ty = c.get("type").and_then(Value::as_str)?;
                (matches!(ty, "Complete" | "Failed")
                    && c.get("status").and_then(Value::as_str) == Some("True"))
                .then_some(ty)
            })
        })
}

fn owner_ref(job: &Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "name": json::name(job), "uid": json::uid(job), "controller": true, "blockOwnerDeletion": true})
}

/// One pass over every Job.
pub fn step(store: &Arc<Store>) {
    let pods = store.all(&PODS);
    for job in store.all(&JOBS) {
        if job.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        if let Err(e) = reconcile(store, &job, &pods) {
            tracing::debug!(error = %e, job = json::name(&job), "job step skipped");
        }
    }
}

fn reconcile(store: &Store, job: &Value, pods: &[Arc<Value>]) -> Result<(), crate::StatusError> {
    let (ns, name) = (json::namespace(job), json::name(job));
    if let Some(done_at) = str_at(job, "/status/completionTime")
        .or_else(|| finished(job).and(str_at(job, "/status/startTime")))
    {
        if let Some(ttl) = job
            .pointer("/spec/ttlSecondsAfterFinished")
            .and_then(Value::as_f64)
            && json::seconds_since(done_at) >= ttl
        {
            store.delete(&JOBS, ns, name, &DeleteOptions::default())?;
        }
        return Ok(());
    }
    let uid = json::uid(job);
    let mine: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| json::label(p, "controller-uid") == Some(uid))
        .collect();
    let phase = |p: &Value| str_at(p, "/status/phase").unwrap_or_default().to_string();
    let succeeded = mine.iter().filter(|p| phase(p) == "Succeeded").count();
    let failed = mine.iter().filter(|p| phase(p) == "Failed").count();
    let active = mine.len() - succeeded - failed;
    let backoff = job
        .pointer("/spec/backoffLimit")
        .and_then(Value::as_u64)
        .unwrap_or(6) as usize;
    let now = json::now_rfc3339();
    let started = str_at(job, "/status/startTime")
        .map(str::to_string)
        .unwrap_or_else(|| now.clone());
    let deadline_hit = job
        .pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_f64)
        .is_some_and(|d| json::seconds_since(&started) >= d);
    let outcome = if succeeded > 0 {
        Some((
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        ))
    } else if failed > backoff {
        Some((
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ))
    } else if deadline_hit {
        Some((
            "Failed",
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ))
    } else {
        None
    };
    if outcome.is_none() && active == 0 {
        create_pod(store, job)?;
    }
    store.update_all(&JOBS, ns, name, |cur| {
        let mut j = cur.clone();
        let status = json::obj_mut(&mut j, "status");
        status.insert("startTime".into(), json!(started));
        status.insert("active".into(), json!(if outcome.is_some() { 0 } else { active.max(1) }));
        status.insert("succeeded".into(), json!(succeeded));
        status.insert("failed".into(), json!(failed));
        if let Some((ty, reason, message)) = outcome {
            let cond = |t: &str| json!({"type": t, "status": "True", "reason": reason, "message": message, "lastProbeTime": now, "lastTransitionTime": now});
            let conds = if ty == "Complete" { vec![cond("SuccessCriteriaMet"), cond("Complete")] } else { vec![cond("FailureTarget"), cond("Failed")] };
            status.insert("conditions".into(), json!(conds));
            if ty == "Complete" {
                status.insert("completionTime".into(), json!(now));
            }
        }
        Ok(j)
    })?;
    Ok(())
}

fn create_pod(store: &Store, job: &Value) -> Result<(), crate::StatusError> {
    let (ns, name, uid) = (json::namespace(job), json::name(job), json::uid(job));
    let template = job.pointer("/spec/template").cloned().unwrap_or_default();
    let mut pod = json!({"metadata": template.get("metadata").cloned().unwrap_or(json!({})), "spec": template.get("spec").cloned().unwrap_or(json!({}))});
    let meta = json::obj_mut(&mut pod, "metadata");
    // The Job controller generates its pods' names.
    meta.remove("name");
    meta.insert("generateName".into(), json!(format!("{name}-")));
    meta.insert("ownerReferences".into(), json!([owner_ref(job)]));
    let labels = json::obj_mut(&mut pod["metadata"], "labels");
    for (k, v) in [
        ("job-name", name),
        (JOB_NAME_LABEL, name),
        ("controller-uid", uid),
        ("batch.kubernetes.io/controller-uid", uid),
    ] {
        labels.insert(k.into(), json!(v));
    }
    store.create(&PODS, ns, pod)?;
    Ok(())
}
