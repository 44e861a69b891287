//! One candidate's view of the Lease: client-go's `tryAcquireOrRenew` and `release`, on a
//! `coordination.k8s.io/v1` Lease, with optimistic concurrency on its resourceVersion.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

/// What a try at the Lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// This candidate holds the Lease (acquired or renewed).
    Held,
    /// Another candidate holds it (`holder`), or won the race for it.
    Other(Option<String>),
}

/// Why a try failed: the API server could not be asked, or refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct LeaseError(#[from] kube::Error);

/// The record as last read, and when this candidate saw it change: a Lease held by another is
/// respected for its `leaseDurationSeconds` after that moment, on this candidate's own clock
/// (client-go's `observedTime`: clocks of different nodes are never compared).
pub(super) struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    observed: Option<LeaseSpec>,
    observed_at: Instant,
}

impl Elector {
    pub(super) fn new(
        api: Api<Lease>,
        name: String,
        identity: String,
        lease_duration: Duration,
    ) -> Self {
        Self {
            api,
            name,
            identity,
            lease_duration,
            observed: None,
            observed_at: Instant::now(),
        }
    }

    /// The holder as last read.
    pub(super) fn holder(&self) -> Option<String> {
        self.observed
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .filter(|h| !h.is_empty())
    }

    /// The Lease's `leaseTransitions` as last read.
    pub(super) fn transitions(&self) -> i32 {
        self.observed
            .as_ref()
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0)
    }

    /// Acquires the Lease when it is free or expired, renews it when held: client-go's
    /// `tryAcquireOrRenew`. A conflict (another candidate wrote first) is `Other`, not an error.
    pub(super) async fn try_acquire_or_renew(&mut self) -> Result<Outcome, LeaseError> {
        let now = MicroTime(jiff::Timestamp::now());
        let seconds = i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let spec = LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec.clone()),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.observe(spec);
                    Ok(Outcome::Held)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Outcome::Other(None)),
                Err(e) => Err(e.into()),
            };
        };
        let current = lease.spec.clone().unwrap_or_default();
        if self.observed.as_ref() != Some(&current) {
            self.observe(current.clone());
        }
        let holder = current.holder_identity.clone().unwrap_or_default();
        let held_for = current
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.lease_duration, Duration::from_secs);
        if !holder.is_empty()
            && holder != self.identity
            && self.observed_at + held_for > Instant::now()
        {
            return Ok(Outcome::Other(Some(holder)));
        }
        let ours = holder == self.identity;
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: if ours {
                current.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours {
                current.lease_transitions.unwrap_or(0)
            } else {
                current.lease_transitions.unwrap_or(0).saturating_add(1)
            }),
            ..current
        };
        lease.spec = Some(spec.clone());
        // The replace carries the resourceVersion read above: a write by anyone since is a 409.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observe(spec);
                Ok(Outcome::Held)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Outcome::Other(Some(holder))),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives the Lease up (client-go's `release`): no holder, a one-second duration, so a standby
    /// takes over at its next try instead of after `leaseDuration`. Only while this candidate
    /// still holds it.
    pub(super) async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let current = lease.spec.clone().unwrap_or_default();
        if current.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(jiff::Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..current
        });
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    fn observe(&mut self, spec: LeaseSpec) {
        self.observed = Some(spec);
        self.observed_at = Instant::now();
    }
}
