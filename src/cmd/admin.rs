//! `tuneplane admin`: operator commands that act on the job store directly, not through the API.
//!
//! `admin create-key --tenant T` makes an API key: the secret is printed once (stdout) and only
//! its SHA-256 is stored, with the tenant and scopes; `admin keys list|revoke|rotate` manages
//! keys afterwards (see [`keys`](super::keys)). `admin quota set|list|unset` manages
//! tenants' quotas and fair-share weights (see [`quota`](super::quota)). The store is the dev
//! stack's embedded store (`--data-dir`, default `.tuneplane-dev`) or DynamoDB (`--table`, with
//! the usual AWS environment for region, credentials and `AWS_ENDPOINT_URL`).

use std::process::ExitCode;

use anyhow::{Context, bail};
use tuneplane_core::ids::{Id, TenantId};
use tuneplane_core::job::JobRecord;
use tuneplane_core::store::{JobStore, ScheduleRecord, ScheduleStep};
use tuneplane_core::submit::pipeline::MAX_STEPS;
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE};
use tuneplane_functions::runtime::now_ms;

use super::store_access::{StoreArgs, issue_key, with_store};

/// Subcommands of `admin`.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Create an API key for a tenant and print its secret (shown once, stored hashed).
    CreateKey(CreateKeyArgs),
    /// List, revoke and rotate API keys.
    #[command(subcommand)]
    Keys(super::keys::Command),
    /// Record a schedule that reruns an existing job's spec and capsule, or a pipeline of jobs
    /// (the EventBridge Scheduler entry that fires it is created separately; see the printed
    /// command).
    CreateSchedule(CreateScheduleArgs),
    /// Set, list and remove tenants' quotas (GPUs per series, CPU-only limits, borrowing) and
    /// fair-share weights.
    #[command(subcommand)]
    Quota(super::quota::AdminCommand),
    /// Show the audit trail: every change made through the API, the console, triggers and
    /// these admin commands, by whom, when and through which door.
    Audit(super::audit::AuditArgs),
    /// GPU-hours, CPU- and memory-hours per tenant and series, day or job (every attempt from
    /// admission to its end; optional prices give a cost column).
    Usage(super::usage::AdminUsageArgs),
}

/// Arguments of `admin create-schedule`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("rerun").required(true).args(["from_job", "from_pipeline"])))]
pub struct CreateScheduleArgs {
    /// Schedule id (lower-case letters, digits and '-').
    #[arg(long)]
    pub id: String,
    /// Job whose authoritative spec and capsule each run reuses.
    #[arg(long, value_name = "JOB")]
    pub from_job: Option<String>,
    /// Job that each run reruns as a pipeline: it and every job it waits for (depends_on,
    /// transitively) become the steps, each named after its job's spec and waiting for the
    /// steps of its dependencies, each reusing its job's spec and capsule.
    #[arg(long, value_name = "JOB")]
    pub from_pipeline: Option<String>,
    /// EventBridge Scheduler expression, e.g. `cron(0 2 * * ? *)` or `rate(1 day)`.
    #[arg(long)]
    pub expression: String,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Arguments of `admin create-key`.
#[derive(clap::Args, Debug)]
pub struct CreateKeyArgs {
    /// Tenant the key acts for (lower-case letters, digits and '-').
    #[arg(long)]
    pub tenant: TenantId,
    /// Scopes to grant (repeatable): jobs:read, jobs:write, admin.
    #[arg(long = "scope", default_values = [SCOPE_JOBS_READ, SCOPE_JOBS_WRITE])]
    pub scopes: Vec<String>,
    /// A label for the key (shown in logs, never the secret).
    #[arg(long, default_value = "cli")]
    pub name: String,
    /// Where the job store is.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs an `admin` subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::CreateKey(args) => create_key(&args),
        Command::Keys(c) => super::keys::run(c),
        Command::CreateSchedule(args) => create_schedule(&args),
        Command::Quota(c) => super::quota::run_admin(c),
        Command::Audit(args) => super::audit::run(&args),
        Command::Usage(args) => super::usage::admin_usage(&args),
    }
}

/// Refuses a schedule id or expression EventBridge Scheduler would not take.
fn check_schedule(id: &str, expression: &str) -> anyhow::Result<()> {
    if let Err(e) = Id::parse(id) {
        bail!("schedule id {e}");
    }
    if !(expression.starts_with("cron(")
        || expression.starts_with("rate(")
        || expression.starts_with("at("))
    {
        bail!(
            "expression {expression:?}: use cron(...), rate(...) or at(...) as EventBridge Scheduler does"
        );
    }
    Ok(())
}

/// Stores `record` (replacing the schedule of its id, if any); returns what was stored.
async fn put_schedule(
    store: &dyn JobStore,
    mut record: ScheduleRecord,
) -> anyhow::Result<ScheduleRecord> {
    record.version = store
        .get_schedule(&record.id)
        .await?
        .map_or(0, |s| s.version);
    Ok(store.put_schedule(&record).await?)
}

/// Stores a schedule that reruns job `from_job`; returns the stored record.
pub async fn schedule_from_job(
    store: &dyn JobStore,
    id: &str,
    from_job: &str,
    expression: &str,
) -> anyhow::Result<ScheduleRecord> {
    check_schedule(id, expression)?;
    let job = store
        .get_job(from_job)
        .await?
        .with_context(|| format!("job {from_job} not found"))?;
    let record = ScheduleRecord {
        id: id.to_owned(),
        tenant: job.tenant,
        expression: expression.to_owned(),
        spec: job.spec,
        capsule_sha256: job.capsule_sha256,
        enabled: true,
        created_at_ms: now_ms(),
        version: 0,
        steps: Vec::new(),
    };
    put_schedule(store, record).await
}

/// Stores a schedule that reruns job `last` and every job it waits for (transitively) as one
/// pipeline: a step per job, named after its spec, waiting for the steps of its `depends_on`.
/// Two jobs of one name, `n_to_n` dependencies and more steps than a pipeline holds are refused,
/// naming the jobs.
pub async fn schedule_from_pipeline(
    store: &dyn JobStore,
    id: &str,
    last: &str,
    expression: &str,
) -> anyhow::Result<ScheduleRecord> {
    check_schedule(id, expression)?;
    // Breadth-first from the job named, each job read once.
    let mut jobs: Vec<JobRecord> = Vec::new();
    let mut queue = std::collections::VecDeque::from([(last.to_owned(), None::<String>)]);
    while let Some((job_id, wanted_by)) = queue.pop_front() {
        if jobs.iter().any(|j| j.id == job_id) {
            continue;
        }
        let job = store
            .get_job(&job_id)
            .await?
            .with_context(|| match &wanted_by {
                Some(by) => format!("job {job_id} (a dependency of job {by}) not found"),
                None => format!("job {job_id} not found"),
            })?;
        for (i, d) in job.spec.depends_on.iter().enumerate() {
            if d.n_to_n {
                bail!(
                    "job {} ({}) waits for job {} child by child (depends_on[{i}].n_to_n): a pipeline schedule's steps wait for whole jobs; schedule the job with --from-job instead",
                    job.id,
                    job.spec.name,
                    d.job
                );
            }
            queue.push_back((d.job.clone(), Some(String::from(&job.id))));
        }
        if let Some(other) = jobs.iter().find(|j| j.spec.name == job.spec.name) {
            bail!(
                "jobs {} and {} are both named {:?}: a pipeline's steps are named after their jobs, so each job must have its own name",
                other.id,
                job.id,
                job.spec.name
            );
        }
        if let Some(tenant) = jobs.first().map(|j| &j.tenant)
            && *tenant != job.tenant
        {
            bail!(
                "job {} belongs to tenant {}, not {tenant}",
                job.id,
                job.tenant
            );
        }
        jobs.push(job);
    }
    if jobs.len() > MAX_STEPS {
        bail!(
            "job {last} waits for {} jobs in all: a pipeline has at most {MAX_STEPS} steps",
            jobs.len() - 1
        );
    }
    let name_of = |job_id: &str| {
        jobs.iter()
            .find(|j| j.id == job_id)
            .map(|j| j.spec.name.clone())
            .unwrap_or_default()
    };
    // The reverse of the walk, so the job named comes last (a pipeline takes steps in any order).
    let steps = jobs
        .iter()
        .rev()
        .map(|j| ScheduleStep {
            name: j.spec.name.clone(),
            spec: j.spec.clone(),
            capsule_sha256: j.capsule_sha256.clone(),
            after: j.spec.depends_on.iter().map(|d| name_of(&d.job)).collect(),
        })
        .collect();
    let Some(final_job) = jobs.first() else {
        bail!("job {last} not found");
    };
    let record = ScheduleRecord {
        id: id.to_owned(),
        tenant: final_job.tenant.clone(),
        expression: expression.to_owned(),
        spec: final_job.spec.clone(),
        capsule_sha256: final_job.capsule_sha256.clone(),
        enabled: true,
        created_at_ms: now_ms(),
        version: 0,
        steps,
    };
    put_schedule(store, record).await
}

fn create_schedule(args: &CreateScheduleArgs) -> anyhow::Result<ExitCode> {
    with_store(&args.store, async |store, location| {
        let made = match (&args.from_pipeline, &args.from_job) {
            (Some(job), _) => schedule_from_pipeline(store, &args.id, job, &args.expression).await,
            (None, Some(job)) => schedule_from_job(store, &args.id, job, &args.expression).await,
            (None, None) => Err(anyhow::anyhow!(
                "name the job to rerun: --from-job JOB or --from-pipeline JOB"
            )),
        };
        let record = made.with_context(|| format!("creating the schedule in the {location}"))?;
        let what = if record.steps.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = record.steps.iter().map(|s| s.name.as_str()).collect();
            format!(" (pipeline {}: {})", record.spec.name, names.join(", "))
        };
        eprintln!(
            "schedule {}{what} of tenant {} stored in the {location}; create its trigger with:",
            record.id, record.tenant
        );
        // EventBridge Scheduler fills in <aws.scheduler.scheduled-time> at each firing.
        let input = serde_json::json!({
            "schedule_id": record.id,
            "scheduled_time": "<aws.scheduler.scheduled-time>",
        });
        let target = serde_json::json!({
            "Arn": "<ScheduledFunctionArn output>",
            "RoleArn": "<SchedulerRoleArn output>",
            "Input": input.to_string(),
        });
        println!(
            "aws scheduler create-schedule --name {} --group-name <ScheduleGroupName output> \\\n  --schedule-expression '{}' --flexible-time-window Mode=OFF \\\n  --target '{}'",
            record.id, record.expression, target
        );
        Ok(ExitCode::SUCCESS)
    })
}

fn create_key(args: &CreateKeyArgs) -> anyhow::Result<ExitCode> {
    with_store(&args.store, async |store, location| {
        let secret = issue_key(store, &args.tenant, &args.scopes, &args.name)
            .await
            .with_context(|| format!("creating the key in the {location}"))?;
        eprintln!(
            "created key {:?} for tenant {} with scopes {} in the {location}; the secret is shown only now:",
            args.name,
            args.tenant,
            args.scopes.join(", ")
        );
        println!("{secret}");
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use tuneplane_core::submit::authenticate;

    use super::*;
    use tuneplane_core::store::prelude::*;

    #[tokio::test]
    async fn created_key_authenticates_as_its_tenant_with_its_scopes() {
        let dir = tempfile::tempdir().unwrap();
        let store = tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap();
        let scopes = vec![SCOPE_JOBS_READ.to_owned()];
        let secret = issue_key(&store, &"acme".parse().unwrap(), &scopes, "ci")
            .await
            .unwrap();
        let header = format!("Bearer {secret}");
        let principal = authenticate(&store, Some(&header)).await.unwrap();
        assert_eq!(principal.tenant, "acme");
        assert_eq!(principal.scopes, scopes);
        assert!(principal.require(SCOPE_JOBS_WRITE).is_err());
    }

    #[tokio::test]
    async fn bad_tenant_or_scope_is_refused_before_anything_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap();
        let ok = vec![SCOPE_JOBS_READ.to_owned()];
        // A tenant is checked where it is read (the --tenant flag parses a TenantId).
        let err = "Acme Corp"
            .parse::<tuneplane_core::ids::TenantId>()
            .unwrap_err();
        assert!(err.to_string().contains("1-40 lower-case"), "{err}");
        let bad = vec!["root".to_owned()];
        assert!(
            issue_key(&store, &"acme".parse().unwrap(), &bad, "x")
                .await
                .is_err()
        );
        assert!(store.list_api_keys().await.unwrap().is_empty());
        assert!(
            issue_key(&store, &"acme".parse().unwrap(), &ok, "x")
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn schedule_copies_the_jobs_spec_capsule_and_tenant() {
        use tuneplane_core::job::JobRecord;
        let dir = tempfile::tempdir().unwrap();
        let store = tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap();
        let spec = tuneplane_core::spec::validate(
            "name: t\nimage: i\nentrypoint: 'true'\npools: [{name: main, series: h200, nodes: 1, gpus_per_node: 1}]\n",
            None,
            &Default::default(),
        )
        .unwrap()
        .spec;
        let job = JobRecord::new_queued(
            "j-1".parse().unwrap(),
            "acme".parse().unwrap(),
            spec,
            "ab".repeat(32),
            1,
        );
        assert!(store.create_job(&job, None).await.is_ok());
        let made = schedule_from_job(&store, "nightly", "j-1", "cron(0 2 * * ? *)")
            .await
            .unwrap();
        assert_eq!(
            (made.tenant.as_str(), made.capsule_sha256.len()),
            ("acme", 64)
        );
        // Recreating it updates the same record.
        let again = schedule_from_job(&store, "nightly", "j-1", "rate(1 day)").await;
        assert_eq!(
            again.map(|s| s.expression).ok().as_deref(),
            Some("rate(1 day)")
        );
        assert!(
            schedule_from_job(&store, "x", "missing", "rate(1 day)")
                .await
                .is_err()
        );
        assert!(
            schedule_from_job(&store, "x", "j-1", "every day")
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_pipeline_schedule_has_a_step_per_job_waited_for_and_refuses_two_of_one_name() {
        use tuneplane_core::spec::{Dependency, DependencyWhen};
        let dir = tempfile::tempdir().unwrap();
        let store = tuneplane_stores::EmbeddedJobStore::open(dir.path()).unwrap();
        let spec = |name: &str, deps: &[&str]| {
            let mut spec = tuneplane_core::spec::validate(
                "name: t\nimage: i\nentrypoint: 'true'\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\n",
                None,
                &Default::default(),
            )
            .unwrap()
            .spec;
            spec.name = name.into();
            spec.depends_on = deps
                .iter()
                .map(|d| Dependency {
                    job: (*d).into(),
                    when: DependencyWhen::Ended,
                    n_to_n: false,
                })
                .collect();
            spec
        };
        for (id, name, deps) in [
            ("j-p", "prepare", &[][..]),
            ("j-t", "train", &["j-p"][..]),
            ("j-e", "evaluate", &["j-t", "j-p"][..]),
            ("j-x", "train", &["j-p"][..]),
            ("j-y", "report", &["j-e", "j-x"][..]),
        ] {
            let job = JobRecord::new_queued(
                id.parse().unwrap(),
                "acme".parse().unwrap(),
                spec(name, deps),
                "ab".repeat(32),
                1,
            );
            assert!(store.create_job(&job, None).await.is_ok());
        }
        let made = schedule_from_pipeline(&store, "nightly", "j-e", "rate(1 day)")
            .await
            .unwrap();
        let steps: Vec<(&str, Vec<&str>)> = made
            .steps
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.after.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            steps,
            [
                ("prepare", vec![]),
                ("train", vec!["prepare"]),
                ("evaluate", vec!["train", "prepare"]),
            ]
        );
        assert_eq!(made.spec.name, "evaluate");
        // `when` is kept: the firing points each entry at its step's new job.
        assert_eq!(made.steps[2].spec.depends_on[0].when, DependencyWhen::Ended);
        let twice = schedule_from_pipeline(&store, "x", "j-y", "rate(1 day)")
            .await
            .unwrap_err();
        let text = format!("{twice:#}");
        assert!(
            text.contains("j-t") && text.contains("j-x") && text.contains("\"train\""),
            "{text}"
        );
        let mut pairs = spec("pairs", &["j-p"]);
        pairs.depends_on[0].n_to_n = true;
        let job = JobRecord::new_queued(
            "j-n".parse().unwrap(),
            "acme".parse().unwrap(),
            pairs,
            "ab".repeat(32),
            1,
        );
        assert!(store.create_job(&job, None).await.is_ok());
        let n_to_n = schedule_from_pipeline(&store, "x", "j-n", "rate(1 day)")
            .await
            .unwrap_err();
        let text = format!("{n_to_n:#}");
        assert!(
            text.contains("j-n") && text.contains("depends_on[0].n_to_n"),
            "{text}"
        );
        let missing = schedule_from_pipeline(&store, "x", "j-gone", "rate(1 day)").await;
        assert!(missing.is_err());
        assert!(store.get_schedule("x").await.unwrap().is_none());
    }
}
