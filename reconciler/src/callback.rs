//! The callback sender: drains the job store's outbox (docs/design.md §6, "Callbacks").
//!
//! Each tick lists the outbox, fans new entries out to their targets (the job's `notify` list and
//! its tenant's subscriptions, under the tenant's cap of outstanding deliveries), then sends every
//! due delivery (core's `outbox::due`: per job and target, oldest first) and records each
//! outcome on its entry with a revision-guarded write; an entry whose deliveries all ended is
//! deleted. It runs beside the passes on the leader only. A sender killed between a receiver's
//! answer and the write sends that delivery again on its next tick, with the same event id.
//!
//! Each delivery checks its URL, resolves the host, refuses the delivery if any address is not
//! public (loopback allowed only when configured, for dev), and connects to exactly the checked
//! addresses: no proxy, no redirects, a short timeout, and at most [`MAX_RESPONSE_BYTES`] of
//! the answer read.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tuneplane_core::callback::outbox::{self, TargetRef};
use tuneplane_core::callback::payload::{EVENT_HEADER, EVENT_ID_HEADER};
use tuneplane_core::callback::{
    CallbackSecret, DeliveryEnd, OutboxEntry, SIGNATURE_HEADER, Subscription, check_ip, check_url,
};
use tuneplane_core::control::subscriptions::redacted;
use tuneplane_core::ids::TenantId;
use tuneplane_core::job::JobEvent;
use tuneplane_core::store::{JobStore, StoreError};

use crate::leader::Leadership;
use crate::now_ms;

/// Outbox entries read per tick.
pub const LIST_LIMIT: usize = 2_000;
/// Deliveries in flight at once.
pub const CONCURRENCY: usize = 16;
/// Most bytes of a receiver's answer read (the rest is dropped unread).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Longest wait for a host's addresses.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// The sender's settings (from the reconciler's configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackSettings {
    /// Deliveries may go to loopback receivers, over http too (`tuneplane dev` only).
    pub allow_loopback: bool,
    /// The API's public base URL, for the links in deliveries (none: no links).
    pub public_url: Option<String>,
    /// Most undelivered deliveries per tenant; beyond it new ones are given up at once.
    pub max_outstanding: usize,
    /// Time between ticks when nothing is due sooner.
    pub interval: Duration,
    /// One delivery's whole budget: connect, send, answer.
    pub timeout: Duration,
}

impl Default for CallbackSettings {
    fn default() -> Self {
        CallbackSettings {
            allow_loopback: false,
            public_url: None,
            max_outstanding: tuneplane_core::callback::subscription::DEFAULT_MAX_OUTSTANDING,
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs(5),
        }
    }
}

/// Turns a host name into addresses (the system's resolver; tests give a fixed table).
#[async_trait::async_trait]
pub trait Resolve: Send + Sync {
    /// The addresses of `host` at `port`.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The operating system's resolver.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl Resolve for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

pub use crate::metrics::CallbackMetrics;

/// The result of one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The receiver answered 2xx with this status.
    Delivered(u16),
    /// It failed; `permanent` failures are not retried.
    Failed {
        /// What happened.
        error: String,
        /// A refused URL or address, or 410 Gone.
        permanent: bool,
    },
}

/// What one tick did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Entries read.
    pub entries: usize,
    /// Delivery attempts made.
    pub attempts: usize,
    /// Entries deleted (every delivery ended).
    pub finished: usize,
}

/// The outbox sender.
pub struct Sender {
    jobs: Arc<dyn JobStore>,
    settings: CallbackSettings,
    resolver: Arc<dyn Resolve>,
    metrics: Arc<CallbackMetrics>,
}

impl Sender {
    /// A sender over `jobs` with the system resolver.
    pub fn new(
        jobs: Arc<dyn JobStore>,
        settings: CallbackSettings,
        metrics: Arc<CallbackMetrics>,
    ) -> Sender {
        Sender::with_resolver(jobs, settings, metrics, Arc::new(SystemResolver))
    }

    /// A sender that resolves hosts with `resolver`.
    pub fn with_resolver(
        jobs: Arc<dyn JobStore>,
        settings: CallbackSettings,
        metrics: Arc<CallbackMetrics>,
        resolver: Arc<dyn Resolve>,
    ) -> Sender {
        Sender {
            jobs,
            settings,
            resolver,
            metrics,
        }
    }

    /// Ticks forever while `leadership` says this replica leads (always without one).
    pub async fn run(&self, leadership: Option<Arc<Leadership>>) {
        loop {
            if leadership.as_ref().is_none_or(|l| l.is_leader())
                && let Err(e) = self.tick().await
            {
                tracing::warn!(error = %e, "callback tick failed; the next one retries");
            }
            tokio::time::sleep(self.settings.interval).await;
        }
    }

    /// One tick: fan out new entries, send what is due, record the outcomes.
    pub async fn tick(&self) -> Result<Tick, StoreError> {
        let mut entries = self.jobs.list_outbox(LIST_LIMIT).await?;
        let mut tick = Tick {
            entries: entries.len(),
            ..Tick::default()
        };
        let now = now_ms();
        let mut outstanding: HashMap<TenantId, usize> = HashMap::new();
        for e in &entries {
            *outstanding.entry(e.event.tenant.clone()).or_default() += e.outstanding();
        }
        let mut subscriptions: HashMap<TenantId, Vec<Subscription>> = HashMap::new();
        let mut keep = Vec::with_capacity(entries.len());
        // Entries no target wants (most state changes): deleted together at the end.
        let mut unwanted = Vec::new();
        for mut entry in entries.drain(..) {
            if entry.deliveries.is_none() {
                let tenant = entry.event.tenant.clone();
                if !subscriptions.contains_key(&tenant) {
                    let subs = self.jobs.list_subscriptions(&tenant).await?;
                    subscriptions.insert(tenant.clone(), subs);
                }
                let held = outstanding.get(&tenant).copied().unwrap_or(0);
                let subs = subscriptions.get(&tenant).map_or(&[][..], Vec::as_slice);
                outbox::fan_out(&mut entry, subs, held, self.settings.max_outstanding, now);
                if entry.deliveries.as_ref().is_some_and(Vec::is_empty) {
                    unwanted.push(entry);
                    continue;
                }
                *outstanding.entry(tenant).or_default() += entry.outstanding();
                self.note_given_up(&entry, None).await;
                match self.save(entry).await? {
                    Some(stored) => keep.push(stored),
                    None => tick.finished += 1,
                }
            } else {
                keep.push(entry);
            }
        }
        tick.finished += unwanted.len();
        self.jobs.discard_outbox(&unwanted).await?;
        let entries = keep;
        self.metrics
            .outstanding
            .set(entries.iter().map(|e| e.outstanding() as i64).sum());
        let due = outbox::due(&entries, now);
        tick.attempts = due.len();
        if due.is_empty() {
            return Ok(tick);
        }
        let mut secrets: HashMap<TenantId, CallbackSecret> = HashMap::new();
        for (i, _) in &due {
            let tenant = &entries[*i].event.tenant;
            if !secrets.contains_key(tenant) {
                let secret = self.secret_of(tenant).await?;
                secrets.insert(tenant.clone(), secret);
            }
        }
        let (entries_ref, secrets_ref) = (&entries, &secrets);
        let sends: Vec<_> = due
            .iter()
            .copied()
            .map(|(i, j)| async move {
                let entry = &entries_ref[i];
                let target = entry
                    .deliveries
                    .as_ref()
                    .and_then(|d| d.get(j))
                    .map(|d| d.target.clone());
                let secret = secrets_ref
                    .get(&entry.event.tenant)
                    .map(|s| s.secret.clone())
                    .unwrap_or_default();
                let outcome = match target {
                    Some(target) => self.deliver(entry, &target, &secret).await,
                    None => Attempt::Failed {
                        error: "no such delivery".into(),
                        permanent: true,
                    },
                };
                (i, j, outcome)
            })
            .collect();
        let outcomes: Vec<(usize, usize, Attempt)> = futures_util::stream::iter(sends)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut by_entry: HashMap<usize, Vec<(usize, Attempt)>> = HashMap::new();
        for (i, j, outcome) in outcomes {
            by_entry.entry(i).or_default().push((j, outcome));
        }
        let now = now_ms();
        let mut entries: Vec<Option<OutboxEntry>> = entries.into_iter().map(Some).collect();
        for (i, results) in by_entry {
            let Some(mut entry) = entries.get_mut(i).and_then(Option::take) else {
                continue;
            };
            let before: Vec<bool> = entry
                .deliveries
                .iter()
                .flatten()
                .map(|d| d.ended())
                .collect();
            let created = entry.created_ms;
            if let Some(deliveries) = entry.deliveries.as_mut() {
                for (j, outcome) in results {
                    let Some(d) = deliveries.get_mut(j) else {
                        continue;
                    };
                    match outcome {
                        Attempt::Delivered(status) => {
                            self.metrics.delivered.inc();
                            outbox::delivered(d, status, now);
                        }
                        Attempt::Failed { error, permanent } => {
                            self.metrics.failed.inc();
                            tracing::info!(
                                event_id = %entry.id, job_id = %entry.event.job_id,
                                url = %redacted(&d.target.url), attempt = d.attempts + 1, error = %error,
                                "callback delivery failed"
                            );
                            outbox::failed(d, error, permanent, created, now);
                        }
                    }
                }
            }
            self.note_given_up(&entry, Some(&before)).await;
            if self.save(entry).await?.is_none() {
                tick.finished += 1;
            }
        }
        Ok(tick)
    }

    /// Writes `entry` (deleted when finished); `None` when it is gone.
    async fn save(&self, entry: OutboxEntry) -> Result<Option<OutboxEntry>, StoreError> {
        if entry.finished() {
            self.jobs.delete_outbox(&entry).await?;
            return Ok(None);
        }
        self.jobs.update_outbox(&entry).await.map(Some)
    }

    /// Counts deliveries of `entry` given up since `before` (which of them had ended; `None`:
    /// none had) and tells the job's owner through a platform event on the job.
    async fn note_given_up(&self, entry: &OutboxEntry, before: Option<&[bool]>) {
        let Some(deliveries) = &entry.deliveries else {
            return;
        };
        for (j, d) in deliveries.iter().enumerate() {
            let was_ended = before.and_then(|b| b.get(j)).copied().unwrap_or(false);
            let Some(DeliveryEnd::GaveUp { at_ms, reason }) = &d.end else {
                continue;
            };
            if was_ended {
                continue;
            }
            self.metrics.given_up.inc();
            tracing::warn!(
                event_id = %entry.id, job_id = %entry.event.job_id, url = %redacted(&d.target.url),
                reason = %reason, "callback delivery given up"
            );
            let event = JobEvent::platform(
                *at_ms,
                format!("callback-{}-{j}", entry.id),
                "Warning",
                "CallbackGivenUp",
                format!(
                    "the {} callback to {} was not delivered: {reason}",
                    entry.event.kind,
                    redacted(&d.target.url)
                ),
            );
            if let Err(e) = self.jobs.append_events(&entry.event.job_id, &[event]).await {
                tracing::warn!(error = %e, job_id = %entry.event.job_id, "could not note a given-up callback");
            }
        }
    }

    /// The tenant's signing secret, made on first use.
    async fn secret_of(&self, tenant: &TenantId) -> Result<CallbackSecret, StoreError> {
        if let Some(secret) = self.jobs.get_callback_secret(tenant).await? {
            return Ok(secret);
        }
        let mut random = [0u8; 32];
        getrandom::fill(&mut random).map_err(|e| {
            StoreError::backend(
                "random",
                "callback secret",
                tenant,
                std::io::Error::other(e.to_string()),
            )
        })?;
        let fresh = CallbackSecret::from_random(tenant, random, now_ms());
        self.jobs.put_callback_secret(&fresh, false).await
    }

    /// One attempt of `entry`'s delivery to `target`, signed with `secret`.
    pub async fn deliver(&self, entry: &OutboxEntry, target: &TargetRef, secret: &str) -> Attempt {
        let refuse = |error: String| Attempt::Failed {
            error,
            permanent: true,
        };
        let url = match check_url(&target.url, self.settings.allow_loopback) {
            Ok(u) => u,
            Err(why) => return refuse(format!("{}: {why}", redacted(&target.url))),
        };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return refuse(format!("{} names no host", redacted(&target.url)));
        };
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok();
        let addrs = match literal {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => {
                match tokio::time::timeout(RESOLVE_TIMEOUT, self.resolver.resolve(host, port)).await
                {
                    Ok(Ok(addrs)) if !addrs.is_empty() => addrs,
                    Ok(Ok(_)) => {
                        return Attempt::Failed {
                            error: format!("{host} resolved to no address"),
                            permanent: false,
                        };
                    }
                    Ok(Err(e)) => {
                        return Attempt::Failed {
                            error: format!("could not resolve {host}: {e}"),
                            permanent: false,
                        };
                    }
                    Err(_) => {
                        return Attempt::Failed {
                            error: format!("resolving {host} took over {RESOLVE_TIMEOUT:?}"),
                            permanent: false,
                        };
                    }
                }
            }
        };
        for addr in &addrs {
            if let Err(why) = check_ip(addr.ip(), self.settings.allow_loopback) {
                return refuse(format!("{host} resolved to {}: {why}", addr.ip()));
            }
        }
        let mut client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.settings.timeout)
            .connect_timeout(self.settings.timeout.min(Duration::from_secs(3)));
        if literal.is_none() {
            // Connect to exactly the addresses just checked: no second lookup.
            client = client.resolve_to_addrs(host, &addrs);
        }
        let client = match client.build() {
            Ok(c) => c,
            Err(e) => {
                return Attempt::Failed {
                    error: format!("HTTP client: {e}"),
                    permanent: false,
                };
            }
        };
        let body = tuneplane_core::callback::body(
            entry,
            target.format,
            self.settings.public_url.as_deref(),
        );
        let t = now_ms() / 1000;
        let signature = tuneplane_core::callback::signature_header(secret, t, &body);
        let sent = client
            .post(url)
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("TunePlane-Callbacks/", env!("CARGO_PKG_VERSION")),
            )
            .header(SIGNATURE_HEADER, signature)
            .header(EVENT_ID_HEADER, &entry.id)
            .header(EVENT_HEADER, format!("job.{}", entry.event.kind))
            .body(body)
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => {
                let what = if e.is_timeout() {
                    "timed out".to_owned()
                } else if e.is_connect() {
                    "could not connect".to_owned()
                } else {
                    "request failed".to_owned()
                };
                // reqwest's message names the URL, query and all; the error goes to logs and to
                // the job's events.
                return Attempt::Failed {
                    error: format!("{what}: {}", e.without_url()),
                    permanent: false,
                };
            }
        };
        let status = response.status();
        // Read a little of the answer so the connection ends cleanly, never more.
        let mut read = 0usize;
        while read < MAX_RESPONSE_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        if status.is_success() {
            Attempt::Delivered(status.as_u16())
        } else {
            Attempt::Failed {
                error: format!("the receiver answered HTTP {}", status.as_u16()),
                permanent: status == reqwest::StatusCode::GONE,
            }
        }
    }
}
