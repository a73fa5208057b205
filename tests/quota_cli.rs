//! Quotas on the command line, as an operator and a user run them: `tuneplane admin quota
//! set|list|unset` on an embedded store in a temporary folder, and `tuneplane quota` against the
//! API (the functions router served on a loopback port over embedded stores).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

mod cli_support;

use cli_support::{admin, ok, text};
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use serde_json::Value;
use tuneplane_core::capacity::{CapacitySnapshot, NodeCapacity};
use tuneplane_core::quota::{CpuLimit, Demand, SeriesLimit, TenantQuota, TenantUsage};
use tuneplane_core::store::JobStore;
use tuneplane_core::submit::{SCOPE_JOBS_READ, new_api_key};
use tuneplane_functions::config::{Backend, Config};

/// `tuneplane admin quota ARGS --data-dir DIR`.
fn quota_admin(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["quota"];
    all.extend_from_slice(args);
    admin(dir, &all)
}

fn listed(dir: &Path) -> Vec<TenantQuota> {
    serde_json::from_str(&ok(&quota_admin(dir, &["list", "-o", "json"]))).unwrap()
}

#[test]
fn admin_quota_sets_merges_lists_and_unsets_on_the_embedded_store() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    assert!(ok(&quota_admin(dir, &["list"])).starts_with("no quotas"));

    ok(&quota_admin(
        dir,
        &[
            "set", "--tenant", "team-a", "--series", "h200", "--gpus", "16",
        ],
    ));
    // A second set merges: another series with borrowing, a CPU limit, a weight.
    ok(&quota_admin(
        dir,
        &[
            "set", "--tenant", "team-a", "--series", "l40s", "--gpus", "8", "--borrow", "true",
        ],
    ));
    ok(&quota_admin(
        dir,
        &[
            "set",
            "--tenant",
            "team-a",
            "--cpus",
            "64",
            "--memory-gb",
            "256",
            "--weight",
            "2",
        ],
    ));
    ok(&quota_admin(
        dir,
        &["set", "--tenant", "team-b", "--weight", "0.5"],
    ));
    let all = listed(dir);
    assert_eq!(all.len(), 2, "{all:?}");
    let a = &all[0];
    assert_eq!(a.tenant, "team-a");
    assert_eq!(
        a.series["h200"],
        SeriesLimit {
            gpus: 16,
            borrow: false
        }
    );
    assert_eq!(
        a.series["l40s"],
        SeriesLimit {
            gpus: 8,
            borrow: true
        }
    );
    assert_eq!(
        a.cpu,
        Some(CpuLimit {
            cpus: Some(64.0),
            memory_gb: Some(256.0),
            borrow: false
        })
    );
    assert_eq!(a.weight, 2.0);
    assert!(a.updated_at_ms > 0);
    assert_eq!((all[1].tenant.as_str(), all[1].weight), ("team-b", 0.5));

    // The table: one row per tenant with its limits, "(borrow)" where borrowing is allowed.
    let table = ok(&quota_admin(dir, &["list"]));
    let header = table.lines().next().unwrap();
    for column in ["TENANT", "WEIGHT", "GPU LIMITS", "CPU-ONLY LIMITS"] {
        assert!(header.contains(column), "{table}");
    }
    let row = table.lines().find(|l| l.starts_with("team-a")).unwrap();
    assert!(row.contains("h200=16, l40s=8 (borrow)"), "{table}");
    assert!(row.contains("64 CPUs, 256 GiB"), "{table}");

    // Setting a series again replaces its limit; --borrow alone flips an existing one.
    ok(&quota_admin(
        dir,
        &[
            "set", "--tenant", "team-a", "--series", "l40s", "--gpus", "4",
        ],
    ));
    ok(&quota_admin(
        dir,
        &[
            "set", "--tenant", "team-a", "--series", "h200", "--borrow", "true",
        ],
    ));
    let a = listed(dir).remove(0);
    assert_eq!((a.series["l40s"].gpus, a.series["l40s"].borrow), (4, false));
    assert_eq!((a.series["h200"].gpus, a.series["h200"].borrow), (16, true));

    // Unset one series, then the CPU limit; the record stays for what is left.
    ok(&quota_admin(
        dir,
        &["unset", "--tenant", "team-a", "--series", "l40s"],
    ));
    ok(&quota_admin(dir, &["unset", "--tenant", "team-a", "--cpu"]));
    let a = listed(dir).remove(0);
    assert_eq!(a.series.keys().collect::<Vec<_>>(), ["h200"]);
    assert_eq!(a.cpu, None);
    // Removing a limit it does not have names the series and the ones it has.
    let missing = quota_admin(dir, &["unset", "--tenant", "team-a", "--series", "h100"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = text(&missing.stderr);
    assert!(
        err.contains("tenant team-a has no limit for series \"h100\"; its series limits: h200"),
        "{err}"
    );
    // --all removes the record.
    let gone = ok(&quota_admin(dir, &["unset", "--tenant", "team-a", "--all"]));
    assert!(gone.contains("team-a has no quota now"), "{gone}");
    let left = listed(dir);
    assert_eq!(
        left.iter().map(|q| q.tenant.as_str()).collect::<Vec<_>>(),
        ["team-b"]
    );
}

#[test]
fn admin_quota_set_refuses_bad_values_naming_each_field_and_stores_nothing() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    // The tenant is checked where it is read, by the flag (a usage error, exit 2).
    let bad_tenant = quota_admin(
        dir,
        &[
            "set", "--tenant", "Team_A", "--series", "h200", "--gpus", "8",
        ],
    );
    assert_eq!(bad_tenant.status.code(), Some(2), "{bad_tenant:?}");
    let err = text(&bad_tenant.stderr);
    assert!(
        err.contains("--tenant") && err.contains("\"Team_A\" is not a valid tenant name: use 1-40"),
        "{err}"
    );
    let bad = quota_admin(
        dir,
        &[
            "set", "--tenant", "team-a", "--series", "H 200", "--gpus", "8", "--cpus", "-1",
            "--weight", "0",
        ],
    );
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let err = text(&bad.stderr);
    for needle in [
        "the quota of tenant \"team-a\" is invalid:",
        "weight: 0 is out of range; use a number from 0.01 to 1000",
        "series: \"H 200\" is not a series name",
        "cpus: -1 is out of range",
        "nothing was stored",
    ] {
        assert!(err.contains(needle), "{needle} missing from {err}");
    }
    assert!(bad.stdout.is_empty());

    for (args, expected) in [
        (&["--gpus", "16"][..], "--gpus needs --series"),
        (&["--series", "h200"], "--series h200 needs --gpus N"),
        (&[], "nothing to set"),
    ] {
        let refused = quota_admin(dir, &[&["set", "--tenant", "team-a"], args].concat());
        assert_eq!(refused.status.code(), Some(1));
        let err = text(&refused.stderr);
        assert!(err.contains(expected), "{err}");
    }
    assert!(ok(&quota_admin(dir, &["list"])).starts_with("no quotas"));
}

/// The API on a loopback port over embedded stores in `dir`; returns its URL and a jobs:read key
/// of tenant `team-a`, and the store.
async fn serve_api(dir: &Path) -> (String, String, Arc<dyn JobStore>) {
    let submit = tuneplane_core::submit::SubmitConfig {
        scratch_dir: dir.join("scratch"),
        ..Default::default()
    };
    std::fs::create_dir_all(&submit.scratch_dir).unwrap();
    let config = Config {
        backend: Backend::Local {
            dir: dir.to_path_buf(),
            blob_secret: "test-secret".into(),
            blob_url: "http://127.0.0.1:9/blobs".into(),
        },
        submit,
        webhooks: Default::default(),
        event_senders: Default::default(),
        json_logs: false,
        listen: None,
        playground_pod_networks: Vec::new(),
        rate_per_key: None,
        rate_per_source: None,
        grant_key: None,
        console_secret: None,
    };
    let (jobs, blobs) = tuneplane_functions::runtime::stores(&config).await.unwrap();
    let (secret, record) = new_api_key(
        tuneplane_functions::runtime::random_bytes(),
        &"team-a".parse().unwrap(),
        vec![SCOPE_JOBS_READ.to_owned()],
        "test",
        0,
    );
    jobs.put_api_key(&record).await.unwrap();
    let state = tuneplane_functions::runtime::state_with(&config, jobs.clone(), blobs);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, tuneplane_functions::router(state))
            .await
            .unwrap();
    });
    (url, secret, jobs)
}

async fn quota_cli(url: &str, key: &str, args: &[&str]) -> Output {
    cli_support::client(url, key, "quota", args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_shows_the_callers_limits_usage_and_queued_demand_per_series() {
    let t = tempfile::tempdir().unwrap();
    let (url, key, jobs) = serve_api(t.path()).await;

    // No quota, no snapshot: says so.
    let before = quota_cli(&url, &key, &[]).await;
    let out = ok(&before);
    assert!(
        out.starts_with("tenant team-a: 0 admitted jobs, 0 queued"),
        "{out}"
    );
    assert!(out.contains("note: no capacity snapshot yet"), "{out}");

    let mut quota = TenantQuota::unlimited(&"team-a".parse().unwrap());
    quota.set_gpu_limit("h200", 16, false);
    quota.cpu = Some(CpuLimit {
        cpus: Some(32.0),
        memory_gb: None,
        borrow: true,
    });
    jobs.put_quota(&quota).await.unwrap();
    let node = |name: &str, series: &str, used: u32| {
        NodeCapacity::ready(name, Some(series), 8, 64.0, 512.0).with_gpus_used(used)
    };
    let mut snap = CapacitySnapshot::from_nodes(
        1_000,
        vec![
            node("h-0", "h200", 8),
            node("h-1", "h200", 4),
            node("l-0", "l40s", 0),
        ],
    );
    snap.tenants.insert(
        "team-a".into(),
        TenantUsage {
            admitted: Demand {
                gpus: [("h200".to_owned(), 12)].into(),
                cpus: 4.0,
                memory_gb: 16.0,
            },
            admitted_jobs: 3,
            queued: Demand {
                gpus: [("h200".to_owned(), 8)].into(),
                ..Demand::default()
            },
            queued_jobs: 1,
        },
    );
    snap.tenants.insert(
        "team-b".into(),
        TenantUsage {
            admitted: Demand {
                gpus: [("a100".to_owned(), 40)].into(),
                ..Demand::default()
            },
            admitted_jobs: 5,
            ..TenantUsage::default()
        },
    );
    jobs.put_capacity(&serde_json::to_value(&snap).unwrap())
        .await
        .unwrap();

    let out = ok(&quota_cli(&url, &key, &[]).await);
    assert!(
        out.starts_with("tenant team-a: 3 admitted jobs, 1 queued; usage as of"),
        "{out}"
    );
    let header = out.lines().nth(1).unwrap();
    for column in [
        "SERIES",
        "LIMIT (GPUS)",
        "BORROW",
        "ADMITTED",
        "QUEUED",
        "FLEET FREE/TOTAL",
    ] {
        assert!(header.contains(column), "{out}");
    }
    let row = |series: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("no {series} row in {out}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(row("h200"), ["h200", "16", "no", "12", "8", "4/16"]);
    assert_eq!(row("l40s"), ["l40s", "unlimited", "-", "0", "0", "8/8"]);
    assert!(
        out.contains("CPU-only jobs: 4 CPUs / 16 GiB admitted of 32 CPUs / unlimited GiB (may borrow); 0 CPUs / 0 GiB queued"),
        "{out}"
    );
    // Another tenant's series never appears.
    assert!(!out.contains("a100") && !out.contains("team-b"), "{out}");

    // -o json prints the API's body.
    let json = ok(&quota_cli(&url, &key, &["-o", "json"]).await);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["tenant"], "team-a");
    assert_eq!(v["series"][0]["series"], "h200");
    assert_eq!(v["series"][0]["gpus_limit"], 16);
    assert_eq!(v["series"][0]["queued_gpus"], 8);
    assert_eq!(v["cpu"]["cpus_limit"], 32.0);

    // A wrong key is an error with a non-zero exit.
    let refused = quota_cli(&url, "tp_wrong", &[]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("did not accept the API key"),
        "{refused:?}"
    );
}
