//! Leader election (ADR 0013): several replicas watch and journal; the one holding a
//! `coordination.k8s.io/v1` Lease delivers. Entry point: [`start`].
//!
//! - The election follows client-go's `leaderelection`: a candidate takes a Lease that is free or
//!   whose holder has not renewed it for `leaseDuration` (on the candidate's own clock), the holder
//!   renews it every `retryPeriod`, every write carries the resourceVersion it read (a 409 loses).
//! - The [`Gate`] is the one hook into delivery: each sink's driver runs only while it is open
//!   ([`gated`]). A leader that has not renewed for `renewDeadline` (less than `leaseDuration`)
//!   closes it, which drops the drivers and with them the sends in flight, before any standby
//!   may take the Lease.
//! - The leader publishes what it finished ([`positions`]) every `publishInterval` on the
//!   ConfigMap `<leaseName>-positions`; standbys apply it to their own journals, and apply it
//!   once more when they take over, before their gate opens.

pub mod lease;
pub mod positions;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::LeaderElectionConfig;
use crate::journal::Journal;
use crate::route::Router;
use lease::{Elector, Outcome};
use positions::Positions;

/// The webhook header that names the sending replica.
pub const INSTANCE_HEADER: &str = "herald-instance";

/// Open (`Some(deadline)`) while this replica leads: deliveries run only then, and only until
/// the renew deadline it carries, which each renewal moves on. The deadline closes the gate on
/// the deliveries' own timers, whatever the election task is doing.
pub type Gate = watch::Receiver<Option<tokio::time::Instant>>;

static INSTANCE: OnceLock<String> = OnceLock::new();

/// This replica's identity when leader election is on, for the `herald-instance` header.
pub fn instance() -> Option<&'static str> {
    INSTANCE.get().map(String::as_str)
}

/// This replica's identity: `leaderElection.identity`, else `POD_NAME`, else the host name.
pub fn identity(cfg: &LeaderElectionConfig) -> String {
    if let Some(id) = &cfg.identity {
        return id.clone();
    }
    if let Ok(name) = std::env::var("POD_NAME")
        && !name.is_empty()
    {
        return name;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| format!("herald-{}", std::process::id()))
}

/// The Lease's namespace: `leaderElection.namespace`, else `POD_NAMESPACE`, else the service
/// account's, else `default`.
pub fn namespace(cfg: &LeaderElectionConfig) -> String {
    cfg.namespace
        .clone()
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
        })
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| "default".to_owned())
}

/// The role and the holder, for `/status` and `/metrics`.
#[derive(Debug)]
pub struct Leadership {
    /// This replica's identity.
    pub identity: String,
    /// The Lease's name.
    pub lease: String,
    /// The Lease's namespace.
    pub namespace: String,
    role: watch::Sender<Option<tokio::time::Instant>>,
    holder: Mutex<Option<String>>,
    transitions: AtomicU64,
    published: Mutex<Option<String>>,
    stalled: AtomicU64,
    /// Serialises the standby's writes to the cursors with the gate's opening: a driver never
    /// starts while positions are being applied.
    ack_lock: tokio::sync::Mutex<()>,
}

impl Leadership {
    /// A standby that has not read the Lease yet.
    pub fn new(identity: String, lease: String, namespace: String) -> Self {
        Self {
            identity,
            lease,
            namespace,
            role: watch::Sender::new(None),
            holder: Mutex::new(None),
            transitions: AtomicU64::new(0),
            published: Mutex::new(None),
            stalled: AtomicU64::new(0),
            ack_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether this replica leads (delivers).
    pub fn is_leader(&self) -> bool {
        self.role
            .borrow()
            .is_some_and(|deadline| tokio::time::Instant::now() < deadline)
    }

    /// `leader` or `standby`.
    pub fn role(&self) -> &'static str {
        if self.is_leader() {
            "leader"
        } else {
            "standby"
        }
    }

    /// The Lease's holder as last read (`None`: free, or not read yet).
    pub fn holder(&self) -> Option<String> {
        lock(&self.holder).clone()
    }

    /// The Lease's `leaseTransitions` as last read.
    pub fn transitions(&self) -> u64 {
        self.transitions.load(Ordering::Relaxed)
    }

    /// When positions were last published (leader) or applied (standby), RFC 3339.
    pub fn positions_at(&self) -> Option<String> {
        lock(&self.published).clone()
    }

    /// On a standby, the sinks whose cursor the published positions have not moved for
    /// [`positions::STALLED_AFTER`] passes while events wait above it (0 on the leader).
    pub fn stalled_sinks(&self) -> u64 {
        self.stalled.load(Ordering::Relaxed)
    }

    /// Tests: leads (for an hour) or stands by, `holder` holding the Lease.
    #[cfg(test)]
    pub(crate) fn role_for_test(&self, leads: bool, holder: &str) {
        self.set_holder(Some(holder.to_owned()), 1);
        self.role
            .send_replace(leads.then(|| tokio::time::Instant::now() + Duration::from_secs(3600)));
    }

    /// The gate deliveries wait on.
    pub fn gate(&self) -> Gate {
        self.role.subscribe()
    }

    fn set_holder(&self, holder: Option<String>, transitions: i32) {
        *lock(&self.holder) = holder;
        self.transitions
            .store(u64::try_from(transitions).unwrap_or(0), Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain values written in one step.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `make`'s future (a sink's delivery driver) while the gate is open; drops it, and with it
/// every send in flight, when the gate closes, then awaits `abandon`'s future (the sink drops
/// what its client still queues for those sends), and starts a new driver when the gate opens
/// again (from the cursor as it then stands). Returns when the driver returns (its stop
/// drained) or `stop` fires while closed.
pub async fn gated<F, A>(mut gate: Gate, stop: CancellationToken, sink: String, make: F, abandon: A)
where
    F: Fn() -> futures::future::BoxFuture<'static, ()>,
    A: Fn() -> futures::future::BoxFuture<'static, ()>,
{
    loop {
        loop {
            let open = *gate.borrow_and_update();
            if open.is_some_and(|deadline| tokio::time::Instant::now() < deadline) {
                break;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                changed = gate.changed() => if changed.is_err() { return },
            }
        }
        tracing::info!(message = "Leading: delivery starts.", sink = %sink);
        let mut run = make();
        loop {
            let Some(deadline) = *gate.borrow_and_update() else {
                break;
            };
            // Biased: past the deadline the driver is not polled again.
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(deadline) => break,
                changed = gate.changed() => if changed.is_err() { break },
                () = &mut run => return,
            }
        }
        drop(run);
        tracing::warn!(message = "Leadership lost: delivery stopped, sends in flight aborted.", sink = %sink);
        abandon().await;
    }
}

/// The settings of the election, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This replica's identity (the Lease's `holderIdentity`).
    pub identity: String,
    /// The Lease's name.
    pub lease: String,
    /// The namespace.
    pub namespace: String,
    /// `leaseDuration`.
    pub lease_duration: Duration,
    /// `renewDeadline`.
    pub renew_deadline: Duration,
    /// `retryPeriod`.
    pub retry_period: Duration,
    /// `publishInterval`.
    pub publish_interval: Duration,
}

impl Settings {
    /// From the configuration, identity and namespace defaulted from the environment.
    pub fn from_config(cfg: &LeaderElectionConfig) -> Self {
        Self {
            identity: identity(cfg),
            lease: cfg.lease_name.clone(),
            namespace: namespace(cfg),
            lease_duration: cfg.lease_duration,
            renew_deadline: cfg.renew_deadline,
            retry_period: cfg.retry_period,
            publish_interval: cfg.publish_interval,
        }
    }
}

/// A running election: stop it after the deliveries have stopped (a leader releases the Lease).
#[derive(Debug)]
pub struct Running {
    /// The shared state.
    pub leadership: Arc<Leadership>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Stops the election; a leader releases the Lease so a standby takes over at its next try.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Prepares the shared state (standby until elected) and marks the journal a standby's; call
/// [`run`] once the deliveries wait on [`Leadership::gate`].
pub fn prepare(settings: &Settings, journal: &Journal) -> Arc<Leadership> {
    let _ = INSTANCE.set(settings.identity.clone());
    journal.set_standby(true);
    Arc::new(Leadership::new(
        settings.identity.clone(),
        settings.lease.clone(),
        settings.namespace.clone(),
    ))
}

/// Starts the election and the positions loop.
pub fn start(
    settings: Settings,
    client: kube::Client,
    journal: Journal,
    router: Arc<Router>,
    leadership: Arc<Leadership>,
) -> Running {
    let stop = CancellationToken::new();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let maps: Api<ConfigMap> = Api::namespaced(client, &settings.namespace);
    let elector = Elector::new(
        leases,
        settings.lease.clone(),
        settings.identity.clone(),
        settings.lease_duration,
    );
    let positions = Positions::new(
        journal.clone(),
        router,
        maps,
        format!("{}-positions", settings.lease),
        settings.publish_interval,
    );
    let task = tokio::spawn(run(
        settings,
        elector,
        positions,
        journal,
        leadership.clone(),
        stop.clone(),
    ));
    Running {
        leadership,
        stop,
        task,
    }
}

/// A delay of `d` plus up to 20 %, so candidates spread out (client-go's jitter factor 1.2 adds
/// up to 120 %; the smaller spread keeps takeovers quicker).
fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + rand::random::<f64>() * 0.2)
}

async fn run(
    settings: Settings,
    mut elector: Elector,
    mut positions: Positions,
    journal: Journal,
    shared: Arc<Leadership>,
    stop: CancellationToken,
) {
    // However this task ends (a panic included), the gate closes.
    let _closes = ClosesGate(shared.clone());
    let try_for = settings.retry_period;
    let mut next_positions = tokio::time::Instant::now();
    let mut last_error: Option<String> = None;
    loop {
        // Candidate (standby). The renew deadline counts from before the acquiring write was
        // sent: a standby may have seen it any time after.
        let sent = tokio::time::Instant::now();
        let tried = tokio::time::timeout(try_for, elector.try_acquire_or_renew()).await;
        shared.set_holder(elector.holder(), elector.transitions());
        match tried {
            Ok(Ok(Outcome::Held)) => {
                lead(
                    sent,
                    &settings,
                    &mut elector,
                    &mut positions,
                    &journal,
                    &shared,
                    &stop,
                )
                .await;
                if stop.is_cancelled() {
                    return;
                }
                continue;
            }
            Ok(Ok(Outcome::Other(_))) => last_error = None,
            Ok(Err(e)) => note_error(&mut last_error, e.to_string()),
            Err(_) => note_error(
                &mut last_error,
                "the API server did not answer in time".into(),
            ),
        }
        let wake = tokio::time::Instant::now() + jittered(settings.retry_period);
        while tokio::time::Instant::now() < wake {
            if tokio::time::Instant::now() >= next_positions {
                follow_once(&mut positions, &shared, try_for).await;
                next_positions = tokio::time::Instant::now() + settings.publish_interval;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(wake.min(next_positions)) => {}
            }
        }
    }
}

/// Runs a pass over the journal (up to a few scans of `MAX_SCAN` entries per sink) so that it
/// holds up no other task of this worker thread. It cannot hold the deliveries past the renew
/// deadline either way: the gate carries the deadline and closes on their own timers.
fn blocking<T>(pass: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(pass),
        _ => pass(),
    }
}

/// Closes the gate when dropped: deliveries never outlive the election task.
struct ClosesGate(Arc<Leadership>);

impl Drop for ClosesGate {
    fn drop(&mut self) {
        self.0.role.send_replace(None);
    }
}

fn note_error(last: &mut Option<String>, error: String) {
    if last.as_deref() != Some(error.as_str()) {
        tracing::warn!(message = "Cannot read or write the leader election Lease.", %error);
    }
    *last = Some(error);
}

/// A standby's pass: read the published positions and apply them.
async fn follow_once(positions: &mut Positions, shared: &Leadership, try_for: Duration) {
    let _guard = shared.ack_lock.lock().await;
    match tokio::time::timeout(try_for, positions.fetch()).await {
        Ok(Ok(Some(_))) => match blocking(|| positions.apply()) {
            Ok(passed) => {
                shared
                    .stalled
                    .store(positions.stalled_sinks(), Ordering::Relaxed);
                *lock(&shared.published) = Some(jiff::Timestamp::now().to_string());
                if passed > 0 {
                    tracing::debug!(message = "Applied the leader's positions.", passed);
                }
            }
            Err(error) => {
                tracing::warn!(message = "Cannot apply the leader's positions.", %error);
            }
        },
        Ok(Ok(None)) => {}
        Ok(Err(error)) => {
            tracing::warn!(message = "Cannot read the leader's positions.", %error);
        }
        Err(_) => tracing::warn!(message = "Cannot read the leader's positions: timed out."),
    }
}

/// Leads until the Lease is lost, cannot be renewed by the renew deadline (counted from
/// `acquired`, when the acquiring write was sent), or `stop` fires.
async fn lead(
    acquired: tokio::time::Instant,
    settings: &Settings,
    elector: &mut Elector,
    positions: &mut Positions,
    journal: &Journal,
    shared: &Leadership,
    stop: &CancellationToken,
) {
    let mut last_renew = acquired;
    {
        // The last positions the old leader published, applied before any send.
        follow_once(positions, shared, settings.retry_period).await;
        let _guard = shared.ack_lock.lock().await;
        positions.lead();
        shared.stalled.store(0, Ordering::Relaxed);
        journal.set_standby(false);
        shared
            .role
            .send_replace(Some(last_renew + settings.renew_deadline));
    }
    tracing::info!(
        message = "Leader election won: this replica delivers.",
        identity = %settings.identity,
        lease = %settings.lease,
        transitions = elector.transitions(),
    );
    let mut next_publish = tokio::time::Instant::now();
    let mut next_renew = tokio::time::Instant::now() + settings.retry_period;
    let why = loop {
        let deadline = last_renew + settings.renew_deadline;
        if next_publish <= tokio::time::Instant::now() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            publish_once(positions, shared, left.min(settings.retry_period)).await;
            next_publish = tokio::time::Instant::now() + settings.publish_interval;
        }
        // Biased: when the deadline and a timer are both due, the deadline wins; an unbiased
        // select could pick the timer, renew late and keep delivering past the deadline.
        tokio::select! {
            biased;
            () = stop.cancelled() => break None,
            () = tokio::time::sleep_until(deadline) => {
                break Some("the Lease could not be renewed before the renew deadline");
            }
            () = tokio::time::sleep_until(next_publish.min(next_renew)) => {}
        }
        if tokio::time::Instant::now() < next_renew {
            continue;
        }
        next_renew = tokio::time::Instant::now() + settings.retry_period;
        // The deadline counts from when the renewal was sent: the API server may have written it
        // any time after, and standbys count the Lease's duration from when they saw it.
        let started = tokio::time::Instant::now();
        let left = deadline.saturating_duration_since(started);
        if left.is_zero() {
            break Some("the Lease could not be renewed before the renew deadline");
        }
        match tokio::time::timeout(
            left.min(settings.retry_period),
            elector.try_acquire_or_renew(),
        )
        .await
        {
            Ok(Ok(Outcome::Held)) => {
                last_renew = started;
                shared
                    .role
                    .send_replace(Some(last_renew + settings.renew_deadline));
            }
            Ok(Ok(Outcome::Other(holder))) => {
                shared.set_holder(holder, elector.transitions());
                break Some("another replica holds the Lease");
            }
            Ok(Err(error)) => {
                tracing::warn!(message = "Cannot renew the Lease.", %error);
            }
            Err(_) => tracing::warn!(
                message = "Cannot renew the Lease: the API server did not answer in time."
            ),
        }
        shared.set_holder(elector.holder(), elector.transitions());
    };
    if let Some(reason) = why {
        shared.role.send_replace(None);
        journal.set_standby(true);
        positions.follow();
        tracing::error!(message = "Leadership lost: delivery stopped.", reason);
        return;
    }
    // Stopping: the deliveries have drained; a last publish, then the Lease goes.
    publish_once(positions, shared, settings.retry_period).await;
    match tokio::time::timeout(settings.retry_period, elector.release()).await {
        Ok(Ok(())) => tracing::info!(message = "Lease released."),
        Ok(Err(error)) => tracing::warn!(message = "Cannot release the Lease.", %error),
        Err(_) => tracing::warn!(message = "Cannot release the Lease: timed out."),
    }
}

async fn publish_once(positions: &mut Positions, shared: &Leadership, within: Duration) {
    if let Err(error) = blocking(|| positions.collect()) {
        tracing::warn!(message = "Cannot read the acknowledged positions.", %error);
        return;
    }
    match tokio::time::timeout(within, positions.publish(&shared.identity)).await {
        Ok(Ok(bytes)) => {
            *lock(&shared.published) = Some(jiff::Timestamp::now().to_string());
            tracing::debug!(message = "Positions published.", bytes);
        }
        Ok(Err(error)) => tracing::warn!(message = "Cannot publish the positions.", %error),
        Err(_) => tracing::warn!(message = "Cannot publish the positions: timed out."),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// Sets its flag when dropped: tells when `gated` dropped the driver.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// The election task stalls (a long journal pass, a panic): nothing renews and nothing
    /// closes the gate. The deliveries stop at the renew deadline all the same, on their own
    /// timer, and start again when a renewal moves the deadline on; the election task's end
    /// closes the gate whatever the deadline says.
    #[tokio::test]
    async fn the_gate_closes_at_its_deadline_and_when_the_election_ends() {
        let shared = Arc::new(Leadership::new(
            "a".into(),
            "herald".into(),
            "default".into(),
        ));
        let soon = tokio::time::Instant::now() + Duration::from_millis(300);
        shared.role.send_replace(Some(soon));
        let (started, dropped, abandoned) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let make = {
            let (started, dropped) = (started.clone(), dropped.clone());
            move || -> futures::future::BoxFuture<'static, ()> {
                started.fetch_add(1, Ordering::SeqCst);
                dropped.store(false, Ordering::SeqCst);
                let guard = Dropped(dropped.clone());
                Box::pin(async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                })
            }
        };
        let abandon = {
            let abandoned = abandoned.clone();
            move || -> futures::future::BoxFuture<'static, ()> {
                abandoned.fetch_add(1, Ordering::SeqCst);
                Box::pin(async {})
            }
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(gated(
            shared.gate(),
            stop.clone(),
            "out".into(),
            make,
            abandon,
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(started.load(Ordering::SeqCst), 1);
        assert!(!dropped.load(Ordering::SeqCst));
        assert!(shared.is_leader());

        tokio::time::sleep_until(soon + Duration::from_millis(200)).await;
        assert!(
            dropped.load(Ordering::SeqCst),
            "the deadline stopped the driver"
        );
        assert_eq!(abandoned.load(Ordering::SeqCst), 1);
        assert!(!shared.is_leader());

        // A renewal moves the deadline on: delivery starts again.
        shared
            .role
            .send_replace(Some(tokio::time::Instant::now() + Duration::from_secs(60)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(started.load(Ordering::SeqCst), 2);
        assert!(!dropped.load(Ordering::SeqCst));

        // The election task ends (here: its guard is dropped), long before that deadline.
        drop(ClosesGate(shared.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            dropped.load(Ordering::SeqCst),
            "the election's end stopped the driver"
        );
        assert_eq!(abandoned.load(Ordering::SeqCst), 2);
        stop.cancel();
        task.await.unwrap();
    }
}
