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
use tuneplane_core::store::{JobStore, ScheduleRecord};
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
    /// Record a schedule that reruns an existing job's spec and capsule (the EventBridge
    /// Scheduler entry that fires it is created separately; see the printed command).
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
pub struct CreateScheduleArgs {
    /// Schedule id (lower-case letters, digits and '-').
    #[arg(long)]
    pub id: String,
    /// Job whose authoritative spec and capsule each run reuses.
    #[arg(long)]
    pub from_job: String,
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

/// Stores a schedule that reruns job `from_job`; returns the stored record.
pub async fn schedule_from_job(
    store: &dyn JobStore,
    id: &str,
    from_job: &str,
    expression: &str,
) -> anyhow::Result<ScheduleRecord> {
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
    let job = store
        .get_job(from_job)
        .await?
        .with_context(|| format!("job {from_job} not found"))?;
    let version = store.get_schedule(id).await?.map_or(0, |s| s.version);
    let record = ScheduleRecord {
        id: id.to_owned(),
        tenant: job.tenant,
        expression: expression.to_owned(),
        spec: job.spec,
        capsule_sha256: job.capsule_sha256,
        enabled: true,
        created_at_ms: now_ms(),
        version,
    };
    Ok(store.put_schedule(&record).await?)
}

fn create_schedule(args: &CreateScheduleArgs) -> anyhow::Result<ExitCode> {
    with_store(&args.store, async |store, location| {
        let record = schedule_from_job(store, &args.id, &args.from_job, &args.expression)
            .await
            .with_context(|| format!("creating the schedule in the {location}"))?;
        eprintln!(
            "schedule {} of tenant {} stored in the {location}; create its trigger with:",
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
        let job = JobRecord::new_queued("j-1", "acme".parse().unwrap(), spec, "ab".repeat(32), 1);
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
}
