//! Leader election on a `coordination.k8s.io/v1` Lease: one replica acts, the others wait.
//!
//! Every write carries the Lease's resourceVersion, so two replicas racing for it get one success
//! and one 409. The holder renews every third of the lease duration; a replica takes over only when
//! the holder's `renewTime + leaseDurationSeconds` has passed. Leadership is held locally until
//! `renewed_at + duration - margin`, so a replica that cannot renew stops acting before another can
//! take over. Every Lease call goes through [`Kube::call`]: rate-limited, bounded in time, retried.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::error::{Error, Result};
use crate::kube_io::{Kube, is_conflict, is_not_found};

/// Local view of leadership, shared with the pass loop.
#[derive(Debug, Default)]
pub struct Leadership {
    valid_until_ms: AtomicI64,
}

impl Leadership {
    /// True while the last successful renewal is fresh.
    pub fn is_leader(&self) -> bool {
        tuneplane_core::clock::now_ms() < self.valid_until_ms.load(SeqCst)
    }

    /// Leads until `ms` (Unix milliseconds): the elector after a won round, or a test that runs
    /// passes by hand.
    pub fn hold_until(&self, ms: i64) {
        self.valid_until_ms.store(ms, SeqCst);
    }

    /// Gives leadership up locally.
    pub fn drop_leadership(&self) {
        self.valid_until_ms.store(0, SeqCst);
    }
}

/// Contends for one Lease.
pub struct Elector {
    kube: Kube,
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// Shared leadership state.
    pub state: Arc<Leadership>,
}

fn micro(ms: i64) -> Option<MicroTime> {
    Timestamp::from_millisecond(ms).ok().map(MicroTime)
}

impl Elector {
    /// An elector for Lease `namespace/name` as `identity`.
    pub fn new(
        kube: Kube,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Elector {
        Elector {
            api: Api::namespaced(kube.client.clone(), namespace),
            kube,
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration,
            state: Arc::new(Leadership::default()),
        }
    }

    fn duration_ms(&self) -> i64 {
        i64::try_from(self.duration.as_millis()).unwrap_or(i64::MAX)
    }

    fn spec(&self, now: i64, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: acquired.or_else(|| micro(now)),
            renew_time: micro(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One round: acquire, renew or observe. Returns whether this replica leads now.
    pub async fn try_lead(&self) -> Result<bool> {
        let now = tuneplane_core::clock::now_ms();
        let current = match self
            .kube
            .call("get lease", &self.name, || self.api.get_opt(&self.name))
            .await?
        {
            Some(lease) => lease,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(now, None, 0)),
                };
                let params = PostParams::default();
                let created = self
                    .kube
                    .call("create lease", &self.name, || {
                        self.api.create(&params, &lease)
                    })
                    .await;
                if let Err(Error::Kube { source: e, .. }) = &created
                    && is_not_found(e)
                {
                    // Creating in a namespace that does not exist answers 404: say so, since no
                    // replica can ever lead until the namespace is there.
                    tracing::warn!(
                        lease = %self.name,
                        error = %e,
                        "cannot create the lease: does its namespace exist? (TUNEPLANE_NAMESPACE)"
                    );
                }
                return self.settle(now, created);
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let renewed = spec.renew_time.as_ref().map_or(0, |t| t.0.as_millisecond());
        // The holder's own duration counts, not ours: replicas may be configured differently.
        let held_ms = spec
            .lease_duration_seconds
            .map_or(self.duration_ms(), |s| i64::from(s) * 1000);
        let expired = spec.holder_identity.is_none() || now > renewed + held_ms;
        if !mine && !expired {
            self.state.drop_leadership();
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let acquired = if mine {
            spec.acquire_time.clone()
        } else {
            None
        };
        let mut next = current.clone();
        next.spec = Some(self.spec(now, acquired, transitions));
        let replaced = self.replace("update lease", &next).await;
        if !mine {
            tracing::info!(identity = %self.identity, lease = %self.name, "taking over the lease");
        }
        self.settle(now, replaced)
    }

    /// Replaces the Lease with `lease` (carrying the resourceVersion it was read at, so a racing
    /// write makes this one a 409); `op` names the call in logs and errors.
    async fn replace(&self, op: &'static str, lease: &Lease) -> Result<Lease> {
        let params = PostParams::default();
        self.kube
            .call(op, &self.name, || {
                self.api.replace(&self.name, &params, lease)
            })
            .await
    }

    fn settle(&self, now: i64, outcome: Result<Lease>) -> Result<bool> {
        match outcome {
            Ok(_) => {
                // Stop acting a little before the lease could be taken by another replica.
                let margin = self.duration_ms() / 5;
                self.state.hold_until(now + self.duration_ms() - margin);
                Ok(true)
            }
            Err(Error::Kube { source, .. }) if is_conflict(&source) || is_not_found(&source) => {
                self.state.drop_leadership();
                Ok(false)
            }
            // A failed write (5xx, timeout, after retries) says nothing about who holds the
            // Lease: leadership won last time still runs until its local deadline, which ends
            // before anyone else may take over, so keep it and let the next round renew.
            Err(e) => Err(e),
        }
    }

    /// Contends forever: renews every third of the duration while leading, polls as often
    /// otherwise. Winning leadership notifies `won` (the pass loop, which acts at once rather than
    /// at its next interval: the passes before did nothing as a standby).
    pub async fn run(&self, metrics: &crate::metrics::Metrics, won: &tokio::sync::Notify) {
        let period = (self.duration / 3).max(Duration::from_millis(20));
        let mut led = false;
        loop {
            let leading = match self.try_lead().await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "lease round failed");
                    false
                }
            };
            metrics.set_leader(leading);
            if leading && !led {
                won.notify_one();
            }
            led = leading;
            tokio::time::sleep(period).await;
        }
    }

    /// Releases the lease if held (on graceful shutdown), so a standby takes over at once.
    pub async fn release(&self) {
        self.state.drop_leadership();
        let current = self
            .kube
            .call("get lease", &self.name, || self.api.get_opt(&self.name))
            .await;
        if let Ok(Some(mut lease)) = current
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.identity.as_str())
        {
            spec.holder_identity = None;
            let released = self.replace("release lease", &lease).await;
            if let Err(e) = released {
                tracing::warn!(error = %e, "releasing the lease failed; a standby takes over when it expires");
            }
        }
    }
}
