use super::*;

/// Every kind of limit, with whole and fractional numbers, for either claimant, reads as it
/// did when the message was one `format!` of `plain`s.
#[test]
fn over_messages_read_as_before() {
    let reference = |over: &Over, tenant: &str, claimant: Claimant| {
        let (_, series, [used, limit, need]) = over.parts();
        let what = match over {
            Over::Gpus { .. } => format!("{series} GPUs"),
            Over::Cpus { .. } => "CPUs for CPU-only jobs".to_owned(),
            Over::Memory { .. } => "GiB of memory for CPU-only jobs".to_owned(),
        };
        format!(
            "tenant {tenant} uses {} of {} {what}; this {} needs {}",
            plain(used),
            plain(limit),
            claimant.noun(),
            plain(need)
        )
    };
    let overs = [
        Over::Gpus {
            series: "h200",
            used: 12,
            limit: 16,
            need: 8,
        },
        Over::Gpus {
            series: "",
            used: 0,
            limit: u32::MAX,
            need: 0,
        },
        Over::Cpus {
            used: 60.25,
            limit: 64.0,
            need: 0.5,
        },
        Over::Memory {
            used: 1023.96,
            limit: -0.0,
            need: 1e300,
        },
    ];
    for over in &overs {
        for claimant in [Claimant::Job, Claimant::Playground] {
            for tenant in ["team-a", ""] {
                assert_eq!(
                    over.message(tenant, claimant),
                    reference(over, tenant, claimant)
                );
            }
        }
    }
}

#[test]
fn a_default_quota_applies_to_tenants_without_their_own() {
    let d = DefaultQuota::parse(r#"{"series": {"h200": {"gpus": 8, "borrow": false}}}"#).unwrap();
    let own = TenantQuota::unlimited(&"rich".parse().unwrap());
    let q = d.effective(&"new".parse().unwrap(), None).unwrap();
    assert_eq!((q.tenant.as_str(), q.series["h200"].gpus), ("new", 8));
    assert_eq!(
        d.effective(&"rich".parse().unwrap(), Some(own.clone())),
        Some(own.clone())
    );
    let ids: Vec<crate::ids::TenantId> = ["new", "rich", "new"].map(|t| t.parse().unwrap()).into();
    let all = d.complete(vec![own], &ids);
    let names: Vec<&str> = all.iter().map(|q| q.tenant.as_str()).collect();
    assert_eq!(names, ["rich", "new"]);
    assert_eq!(
        DefaultQuota::default().effective(&"new".parse().unwrap(), None),
        None
    );
    for (bad, needle) in [
        (r#"{"tenant": "x"}"#, "leave out"),
        (r#"{"weight": 0}"#, "weight"),
        ("[1]", "JSON object"),
        ("nope", "expected a quota"),
    ] {
        let err = DefaultQuota::parse(bad).unwrap_err();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}

fn quota() -> TenantQuota {
    let mut q = TenantQuota::unlimited(&"team-a".parse().unwrap());
    q.set_gpu_limit("h200", 16, false);
    q
}

fn demand(series: &str, gpus: u32) -> Demand {
    Demand {
        gpus: [(series.to_owned(), gpus)].into(),
        ..Demand::default()
    }
}

#[test]
fn a_job_within_the_limit_passes_and_one_above_it_names_usage_limit_and_need() {
    let q = quota();
    assert_eq!(
        check(&q, &demand("h200", 8), &demand("h200", 8)),
        QuotaCheck::Within
    );
    assert_eq!(
        check(&q, &demand("h200", 12), &demand("h200", 8)),
        QuotaCheck::Exceeded("tenant team-a uses 12 of 16 h200 GPUs; this job needs 8".into())
    );
    // Another series is unlimited.
    assert_eq!(
        check(&q, &demand("h200", 16), &demand("l40s", 4)),
        QuotaCheck::Within
    );
}

#[test]
fn a_borrowing_limit_says_borrow_and_a_hard_limit_wins_over_it() {
    let mut q = quota();
    q.series.get_mut("h200").unwrap().borrow = true;
    assert!(matches!(
        check(&q, &demand("h200", 16), &demand("h200", 8)),
        QuotaCheck::Borrow(_)
    ));
    q.set_gpu_limit("l40s", 4, false);
    let mut both = demand("h200", 8);
    both.gpus.insert("l40s".into(), 8);
    assert!(matches!(
        check(&q, &demand("h200", 16), &both),
        QuotaCheck::Exceeded(m) if m.contains("l40s")
    ));
}

#[test]
fn cpu_limits_count_cpu_only_jobs() {
    let mut q = TenantQuota::unlimited(&"t".parse().unwrap());
    q.cpu = Some(CpuLimit {
        cpus: Some(64.0),
        memory_gb: Some(256.0),
        borrow: false,
    });
    let held = Demand {
        cpus: 60.0,
        memory_gb: 100.0,
        ..Demand::default()
    };
    let job = Demand {
        cpus: 8.0,
        memory_gb: 32.0,
        ..Demand::default()
    };
    assert_eq!(
        check(&q, &held, &job),
        QuotaCheck::Exceeded(
            "tenant t uses 60 of 64 CPUs for CPU-only jobs; this job needs 8".into()
        )
    );
    // A GPU job is not counted against the CPU limit.
    assert_eq!(check(&q, &held, &demand("h200", 8)), QuotaCheck::Within);
}

#[test]
fn a_job_larger_than_a_hard_limit_never_fits_but_a_borrowing_one_may() {
    let mut q = quota();
    let m = never_within(&q, &demand("h200", 24), Claimant::Job).unwrap();
    assert!(
        m.starts_with("tenant team-a's quota is 16 h200 GPUs; this job needs 24"),
        "{m}"
    );
    assert_eq!(never_within(&q, &demand("h200", 16), Claimant::Job), None);
    q.series.get_mut("h200").unwrap().borrow = true;
    assert_eq!(never_within(&q, &demand("h200", 24), Claimant::Job), None);
}

#[test]
fn validation_names_every_bad_field() {
    let mut q = TenantQuota::unlimited(&"team-a".parse().unwrap());
    q.weight = 0.0;
    q.set_gpu_limit("H 200", MAX_GPUS + 1, false);
    q.cpu = Some(CpuLimit {
        cpus: Some(f64::NAN),
        memory_gb: Some(-1.0),
        borrow: false,
    });
    let e = q.validate().unwrap_err();
    let text = e.to_string();
    for field in ["weight:", "series:", "gpus", "cpus:", "memory_gb:"] {
        assert!(text.contains(field), "{field} missing from {text}");
    }
    assert_eq!(e.problems.len(), 5, "{text}");
    // A stored quota's tenant is checked as it is read: the error names the value and rule.
    let stored = serde_json::json!({"tenant": "Team A", "updated_at_ms": 1});
    let err = serde_json::from_value::<TenantQuota>(stored)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"Team A\" is not a valid tenant name"),
        "{err}"
    );
    assert!(quota().validate().is_ok());
}

#[test]
fn records_decode_with_defaults_and_round_trip() {
    let q: TenantQuota = serde_json::from_str(r#"{"tenant":"a"}"#).unwrap();
    assert_eq!(q, TenantQuota::unlimited(&"a".parse().unwrap()));
    assert!(q.is_default());
    let mut full = quota();
    full.weight = 2.0;
    let back: TenantQuota = serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
    assert_eq!(back, full);
}

#[test]
fn usage_counts_admitted_and_queued_jobs_per_tenant() {
    let pool = |series: Option<&str>, nodes: u32, gpus: u32| {
        serde_json::json!({"name": "main", "series": series, "nodes": nodes,
            "gpus_per_node": gpus, "cpus": 4.0, "memory_gb": 16.0})
    };
    let job = |id: &str, tenant: &str, state: JobState, pools: Vec<serde_json::Value>| {
        let spec: JobSpec = serde_json::from_value(serde_json::json!({
            "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
            "env": {}, "pools": pools,
            "deadlines": {"pre_running_seconds": 60, "run_seconds": 600},
            "priority": 0, "labels": {}, "namespace": "ns", "platform_version": "0"
        }))
        .expect("spec");
        let mut j =
            JobRecord::new_queued(id.parse().unwrap(), tenant.parse().unwrap(), spec, "ab", 1);
        j.state = state;
        j
    };
    let jobs = vec![
        job("a1", "a", JobState::Running, vec![pool(Some("h200"), 2, 8)]),
        job("a2", "a", JobState::Admitted, vec![pool(None, 2, 0)]),
        job("a3", "a", JobState::Queued, vec![pool(Some("h200"), 1, 8)]),
        job(
            "a4",
            "a",
            JobState::Succeeded,
            vec![pool(Some("h200"), 1, 8)],
        ),
        job("b1", "b", JobState::Queued, vec![pool(Some("l40s"), 1, 4)]),
    ];
    let u = tenant_usage(&jobs);
    // Adding a spec sums as adding its demand does, bit for bit.
    let cpu = |cpus: f64, nodes: u32| {
        serde_json::json!({"name": "c", "nodes": nodes, "gpus_per_node": 0,
            "cpus": cpus, "memory_gb": cpus * 3.3})
    };
    let mixed = job(
        "m",
        "a",
        JobState::Running,
        vec![
            pool(Some("h200"), 2, 8),
            cpu(0.1, 3),
            pool(Some("l40s"), 0, 4),
            pool(Some("h200"), u32::MAX, 2),
            cpu(0.7, 7),
        ],
    );
    let mut by_demand = Demand::default();
    let mut by_spec = Demand::default();
    for j in [&jobs[0], &mixed, &jobs[1], &mixed] {
        by_demand.add(&Demand::of(&j.spec));
        by_spec.add_spec(&j.spec);
        assert_eq!(by_spec.gpus, by_demand.gpus);
        assert_eq!(by_spec.cpus.to_bits(), by_demand.cpus.to_bits());
        assert_eq!(by_spec.memory_gb.to_bits(), by_demand.memory_gb.to_bits());
    }
    assert_eq!(u["a"].admitted.gpus["h200"], 16);
    assert_eq!(u["a"].admitted.cpus, 8.0);
    assert_eq!(u["a"].admitted_jobs, 2);
    assert_eq!(u["a"].queued.gpus["h200"], 8);
    assert_eq!(u["a"].queued_jobs, 1);
    assert_eq!(u["b"].admitted_jobs, 0);
    assert_eq!(u["b"].queued.gpus["l40s"], 4);
}
