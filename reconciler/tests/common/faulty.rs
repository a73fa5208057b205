//! Fault-injecting decorators over real stores: [`FaultyJobStore`] and [`FaultyBlobStore`] pass
//! every call to the wrapped store, except that a seeded, reproducible sequence of draws fails some
//! of them, either *before* the real call (nothing is written) or *after* it succeeded (the write
//! happened but the caller sees an error, like a response lost on the way back). An outage switch
//! fails every call before it reaches the store. Injected faults and all calls are counted per
//! method, so a test can prove both kinds happened and bound the calls made during an outage.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tuneplane_core::callback::{CallbackSecret, OutboxEntry, Subscription};

use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::store::{
    ApiKeyChange, ApiKeyRecord, AuditRecords, BlobMeta, BlobStore, CreateOutcome, EventQuery,
    JobQuery, JobRecords, JobStore, KeyRecords, NewJob, OutboxRecords, Page, PlaygroundRecord,
    PlaygroundRecords, PutOutcome, QuotaRecords, Result, ScheduleRecord, ScheduleRecords,
    SignRequest, StoreError, SubscriptionRecords,
};

/// Where an injected fault struck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// Failed before the real call: nothing was written.
    Before,
    /// Failed after the real call succeeded: the write happened, the caller sees an error.
    After,
    /// Failed because of the outage switch (before the real call).
    Outage,
}

/// A scripted fault: the `nth` call (from 1) of `method` whose key contains `key` fails as `kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Method name as counted (`update_job`, `blob put`, ...).
    pub method: &'static str,
    /// A substring of the call's key (job id, blob key).
    pub key: String,
    /// Which matching call, counting from 1.
    pub nth: u64,
    /// How it fails.
    pub kind: FaultKind,
}

/// The fault plan shared by a job store and a blob store decorator, and its counters.
#[derive(Debug)]
pub struct Faults {
    /// The seed of the draws.
    pub seed: u64,
    before: f64,
    after: f64,
    rng: Mutex<tuneplane_kubesim::SplitMix64>,
    enabled: AtomicBool,
    outage: AtomicBool,
    injected: Mutex<BTreeMap<(FaultKind, &'static str), u64>>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
    /// Scripted rules not fired yet, with the matching calls seen so far.
    rules: Mutex<Vec<(Rule, u64)>>,
}

impl Faults {
    /// Fails a fraction `before` of calls before the real call and `after` after it, drawn from `seed`.
    pub fn new(seed: u64, before: f64, after: f64) -> Arc<Faults> {
        Arc::new(Faults {
            seed,
            before,
            after,
            rng: Mutex::new(tuneplane_kubesim::SplitMix64::new(seed)),
            enabled: AtomicBool::new(true),
            outage: AtomicBool::new(false),
            injected: Mutex::default(),
            calls: Mutex::default(),
            rules: Mutex::default(),
        })
    }

    /// No random faults, only `rules`, each of which fires once.
    pub fn scripted(rules: Vec<Rule>) -> Arc<Faults> {
        let faults = Faults::new(0, 0.0, 0.0);
        if let Ok(mut r) = faults.rules.lock() {
            *r = rules.into_iter().map(|rule| (rule, 0)).collect();
        }
        faults
    }

    /// Scripted rules that have not fired.
    pub fn unfired(&self) -> Vec<Rule> {
        self.rules
            .lock()
            .map(|r| r.iter().map(|(rule, _)| rule.clone()).collect())
            .unwrap_or_default()
    }

    /// Turns the random faults on or off (the outage switch is separate).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Starts or ends a full outage: every call fails before reaching the store.
    pub fn set_outage(&self, on: bool) {
        self.outage.store(on, Ordering::SeqCst);
    }

    /// Injected faults by kind and method.
    pub fn injected(&self) -> BTreeMap<(FaultKind, &'static str), u64> {
        self.injected.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Injected faults of one kind, over all methods.
    pub fn injected_of(&self, kind: FaultKind) -> u64 {
        self.injected()
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    /// Calls received (failed or not) by method.
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Calls received so far, over all methods.
    pub fn total_calls(&self) -> u64 {
        self.calls().values().sum()
    }

    fn count(&self, kind: FaultKind, method: &'static str) {
        if let Ok(mut m) = self.injected.lock() {
            *m.entry((kind, method)).or_default() += 1;
        }
    }

    /// Fires the first scripted rule that matches this call, if any.
    fn scripted_fault(&self, method: &'static str, key: &str) -> Option<FaultKind> {
        let mut rules = self.rules.lock().ok()?;
        let mut fired = None;
        for (i, (rule, seen)) in rules.iter_mut().enumerate() {
            if rule.method == method && key.contains(rule.key.as_str()) {
                *seen += 1;
                if *seen == rule.nth && fired.is_none() {
                    fired = Some(i);
                }
            }
        }
        fired.map(|i| rules.remove(i).0.kind)
    }

    /// Decides the fate of one call: `Some(kind)` to fail it.
    fn draw(&self, method: &'static str, key: &str) -> Option<FaultKind> {
        if let Ok(mut m) = self.calls.lock() {
            *m.entry(method).or_default() += 1;
        }
        if self.outage.load(Ordering::SeqCst) {
            return Some(FaultKind::Outage);
        }
        if let Some(kind) = self.scripted_fault(method, key) {
            return Some(kind);
        }
        if !self.enabled.load(Ordering::SeqCst) {
            return None;
        }
        let u = self.rng.lock().map(|mut r| r.unit()).unwrap_or(1.0);
        if u < self.before {
            Some(FaultKind::Before)
        } else if u < self.before + self.after {
            Some(FaultKind::After)
        } else {
            None
        }
    }

    fn error(kind: FaultKind, method: &'static str, key: &str) -> StoreError {
        StoreError::Backend {
            op: method,
            table: "faulty".into(),
            key: key.to_owned(),
            source: Box::new(std::io::Error::other(format!("injected {kind:?} fault"))),
        }
    }

    /// Runs `call` unless the draw fails it before; fails it after when the draw says so.
    async fn run<T, F>(&self, method: &'static str, key: &str, call: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        match self.draw(method, key) {
            Some(kind @ (FaultKind::Before | FaultKind::Outage)) => {
                self.count(kind, method);
                Err(Faults::error(kind, method, key))
            }
            Some(FaultKind::After) => {
                let outcome = call.await;
                // Only a call that really succeeded can lose its response; a real error stands.
                if outcome.is_ok() {
                    self.count(FaultKind::After, method);
                    Err(Faults::error(FaultKind::After, method, key))
                } else {
                    outcome
                }
            }
            None => call.await,
        }
    }
}

/// A [`JobStore`] that injects [`Faults`] in front of a real one.
pub struct FaultyJobStore {
    inner: Arc<dyn JobStore>,
    faults: Arc<Faults>,
}

impl FaultyJobStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn JobStore>, faults: Arc<Faults>) -> Arc<FaultyJobStore> {
        Arc::new(FaultyJobStore { inner, faults })
    }
}

#[async_trait::async_trait]
impl JobRecords for FaultyJobStore {
    async fn create(&self, new: NewJob<'_>) -> Result<CreateOutcome> {
        // One atomic call on the real store (job, idempotency record and first events).
        let call = self.inner.create(new);
        self.faults.run("create_job", &new.job.id, call).await
    }

    async fn create_all(&self, jobs: &[NewJob<'_>]) -> Result<Vec<JobRecord>> {
        // One atomic call on the real store, faulted as one create.
        let first = jobs
            .first()
            .map(|n| n.job.id.to_string())
            .unwrap_or_default();
        let call = self.inner.create_all(jobs);
        self.faults.run("create_job", &first, call).await
    }

    async fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        self.faults.run("get_job", id, self.inner.get_job(id)).await
    }

    async fn update_job(&self, job: &JobRecord) -> Result<JobRecord> {
        let call = self.inner.update_job(job);
        self.faults.run("update_job", &job.id, call).await
    }

    async fn update_job_with_events(
        &self,
        job: &JobRecord,
        events: &[JobEvent],
    ) -> Result<JobRecord> {
        // One atomic call on the real store, faulted as a job write (before: nothing lands;
        // after: record and events both landed).
        let call = self.inner.update_job_with_events(job, events);
        self.faults.run("update_job", &job.id, call).await
    }

    async fn list_jobs(
        &self,
        tenant: &tuneplane_core::ids::TenantId,
        query: &JobQuery,
    ) -> Result<Page<JobRecord>> {
        let call = self.inner.list_jobs(tenant, query);
        self.faults.run("list_jobs", tenant, call).await
    }

    async fn list_active(&self) -> Result<Vec<JobRecord>> {
        let call = self.inner.list_active();
        self.faults.run("list_active", "", call).await
    }

    async fn append_events(&self, job_id: &str, events: &[JobEvent]) -> Result<()> {
        let call = self.inner.append_events(job_id, events);
        self.faults.run("append_events", job_id, call).await
    }

    async fn list_events(&self, job_id: &str, query: &EventQuery) -> Result<Page<JobEvent>> {
        let call = self.inner.list_events(job_id, query);
        self.faults.run("list_events", job_id, call).await
    }

    async fn put_capacity(&self, snapshot: &serde_json::Value) -> Result<()> {
        let call = self.inner.put_capacity(snapshot);
        self.faults.run("put_capacity", "", call).await
    }

    async fn get_capacity(&self) -> Result<Option<serde_json::Value>> {
        let call = self.inner.get_capacity();
        self.faults.run("get_capacity", "", call).await
    }
}

#[async_trait::async_trait]
impl KeyRecords for FaultyJobStore {
    async fn put_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let call = self.inner.put_api_key(key);
        self.faults.run("put_api_key", "", call).await
    }

    async fn get_api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyRecord>> {
        let call = self.inner.get_api_key(key_sha256);
        self.faults.run("get_api_key", "", call).await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let call = self.inner.list_api_keys();
        self.faults.run("list_api_keys", "", call).await
    }

    async fn update_api_key(
        &self,
        key_sha256: &str,
        change: ApiKeyChange,
    ) -> Result<Option<ApiKeyRecord>> {
        let call = self.inner.update_api_key(key_sha256, change);
        self.faults.run("update_api_key", "", call).await
    }
}

#[async_trait::async_trait]
impl ScheduleRecords for FaultyJobStore {
    async fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<ScheduleRecord> {
        let call = self.inner.put_schedule(schedule);
        self.faults.run("put_schedule", "", call).await
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        let call = self.inner.get_schedule(id);
        self.faults.run("get_schedule", id, call).await
    }

    async fn delete_schedule(&self, id: &str) -> Result<()> {
        let call = self.inner.delete_schedule(id);
        self.faults.run("delete_schedule", id, call).await
    }
}

#[async_trait::async_trait]
impl PlaygroundRecords for FaultyJobStore {
    async fn put_playground(&self, playground: &PlaygroundRecord) -> Result<PlaygroundRecord> {
        let call = self.inner.put_playground(playground);
        self.faults
            .run("put_playground", &playground.id, call)
            .await
    }

    async fn create_playground(
        &self,
        playground: &PlaygroundRecord,
        limit: u32,
        now_ms: i64,
    ) -> Result<tuneplane_core::store::PlaygroundCreate> {
        let call = self.inner.create_playground(playground, limit, now_ms);
        self.faults
            .run("create_playground", &playground.id, call)
            .await
    }

    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>> {
        let call = self.inner.get_playground(id);
        self.faults.run("get_playground", id, call).await
    }

    async fn list_playgrounds(&self) -> Result<Vec<PlaygroundRecord>> {
        let call = self.inner.list_playgrounds();
        self.faults.run("list_playgrounds", "", call).await
    }

    async fn delete_playground(&self, id: &str) -> Result<()> {
        let call = self.inner.delete_playground(id);
        self.faults.run("delete_playground", id, call).await
    }

    async fn retire_playground(&self, pg: &PlaygroundRecord) -> Result<()> {
        self.inner.retire_playground(pg).await
    }

    async fn list_retired_playgrounds(
        &self,
        tenant: &tuneplane_core::ids::TenantId,
    ) -> Result<Vec<PlaygroundRecord>> {
        self.inner.list_retired_playgrounds(tenant).await
    }
}

#[async_trait::async_trait]
impl QuotaRecords for FaultyJobStore {
    async fn put_quota(&self, quota: &tuneplane_core::quota::TenantQuota) -> Result<()> {
        let call = self.inner.put_quota(quota);
        self.faults.run("put_quota", &quota.tenant, call).await
    }

    async fn get_quota(
        &self,
        tenant: &tuneplane_core::ids::TenantId,
    ) -> Result<Option<tuneplane_core::quota::TenantQuota>> {
        let call = self.inner.get_quota(tenant);
        self.faults.run("get_quota", tenant, call).await
    }

    async fn list_quotas(&self) -> Result<Vec<tuneplane_core::quota::TenantQuota>> {
        self.faults
            .run("list_quotas", "", self.inner.list_quotas())
            .await
    }

    async fn delete_quota(&self, tenant: &tuneplane_core::ids::TenantId) -> Result<()> {
        let call = self.inner.delete_quota(tenant);
        self.faults.run("delete_quota", tenant, call).await
    }
}

#[async_trait::async_trait]
impl AuditRecords for FaultyJobStore {
    async fn append_audit(&self, entry: &tuneplane_core::audit::AuditEntry) -> Result<()> {
        let call = self.inner.append_audit(entry);
        self.faults.run("append_audit", &entry.id, call).await
    }

    async fn list_audit(
        &self,
        query: &tuneplane_core::audit::AuditQuery,
    ) -> Result<Vec<tuneplane_core::audit::AuditEntry>> {
        self.inner.list_audit(query).await
    }
}

#[async_trait::async_trait]
impl OutboxRecords for FaultyJobStore {
    async fn list_outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>> {
        self.inner.list_outbox(limit).await
    }

    async fn update_outbox(&self, entry: &OutboxEntry) -> Result<OutboxEntry> {
        self.inner.update_outbox(entry).await
    }

    async fn delete_outbox(&self, entry: &OutboxEntry) -> Result<()> {
        self.inner.delete_outbox(entry).await
    }

    async fn discard_outbox(&self, entries: &[OutboxEntry]) -> Result<()> {
        self.inner.discard_outbox(entries).await
    }
}

#[async_trait::async_trait]
impl SubscriptionRecords for FaultyJobStore {
    async fn put_subscription(&self, sub: &Subscription) -> Result<()> {
        self.inner.put_subscription(sub).await
    }

    async fn list_subscriptions(
        &self,
        tenant: &tuneplane_core::ids::TenantId,
    ) -> Result<Vec<Subscription>> {
        self.inner.list_subscriptions(tenant).await
    }

    async fn delete_subscription(
        &self,
        tenant: &tuneplane_core::ids::TenantId,
        id: &str,
    ) -> Result<bool> {
        self.inner.delete_subscription(tenant, id).await
    }

    async fn get_callback_secret(
        &self,
        tenant: &tuneplane_core::ids::TenantId,
    ) -> Result<Option<CallbackSecret>> {
        self.inner.get_callback_secret(tenant).await
    }

    async fn put_callback_secret(
        &self,
        secret: &CallbackSecret,
        replace: bool,
    ) -> Result<CallbackSecret> {
        self.inner.put_callback_secret(secret, replace).await
    }
}

/// A [`BlobStore`] that injects [`Faults`] in front of a real one.
pub struct FaultyBlobStore {
    inner: Arc<dyn BlobStore>,
    faults: Arc<Faults>,
}

impl FaultyBlobStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BlobStore>, faults: Arc<Faults>) -> Arc<FaultyBlobStore> {
        Arc::new(FaultyBlobStore { inner, faults })
    }
}

#[async_trait::async_trait]
impl BlobStore for FaultyBlobStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome> {
        let call = self.inner.put_if_absent(key, bytes);
        self.faults.run("blob put_if_absent", key, call).await
    }
    async fn put_file_if_absent(&self, key: &str, path: &Path) -> Result<PutOutcome> {
        let call = self.inner.put_file_if_absent(key, path);
        self.faults.run("blob put_file_if_absent", key, call).await
    }
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let call = self.inner.put(key, bytes);
        self.faults.run("blob put", key, call).await
    }
    async fn put_file(&self, key: &str, path: &Path) -> Result<()> {
        let call = self.inner.put_file(key, path);
        self.faults.run("blob put_file", key, call).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.faults.run("blob get", key, self.inner.get(key)).await
    }
    async fn get_to_file(&self, key: &str, path: &Path) -> Result<BlobMeta> {
        let call = self.inner.get_to_file(key, path);
        self.faults.run("blob get_to_file", key, call).await
    }
    async fn head(&self, key: &str) -> Result<Option<BlobMeta>> {
        self.faults
            .run("blob head", key, self.inner.head(key))
            .await
    }
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(String, u64)>> {
        self.faults
            .run("blob list", prefix, self.inner.list(prefix, limit))
            .await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        self.faults
            .run("blob delete", key, self.inner.delete(key))
            .await
    }
    async fn sign(&self, request: &SignRequest<'_>) -> Result<(String, Vec<(String, String)>)> {
        let call = self.inner.sign(request);
        self.faults.run("blob presign", request.key, call).await
    }
}
