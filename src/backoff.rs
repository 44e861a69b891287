//! Backoff: the one retry-delay policy of herald, shared by the watcher, delivery and the dead-letter
//! forwarder; start at [`Policy`].
//!
//! Each user waits a delay drawn at random under an exponential cap: the cap starts at the policy's
//! minimum and doubles per consecutive failure up to its maximum (backon's exponential schedule),
//! and the random draw keeps many retries from firing together. The values of each user are named
//! here, in one place: [`WATCH`], [`DELIVERY`] (the default of delivery's `min_backoff` and
//! `max_backoff`) and [`FORWARD`]. Why backon and not the `backoff` crate:
//! docs/adr/0004-backoff-and-sled.md.
//!
//! The users differ on purpose in two ways:
//! - **Jitter.** Delivery and forwarding draw with full jitter (anywhere under the cap): thousands
//!   of events retrying against one sink spread out the most. A watcher draws with equal jitter
//!   (at least half the cap): there is one per resource, and a broken API server should never see
//!   an immediate retry.
//! - **Reset.** A watcher resets only after a watch that lasted (never after a successful list: a
//!   server that lists fine but breaks every watch would be relisted in a hot loop); the forwarder
//!   after a round that forwarded every letter; delivery counts failures per event (its attempts)
//!   and per paused sink (its probes), so a fresh event starts at the minimum again.

use std::time::Duration;

use backon::BackoffBuilder as _;
use rand::Rng;

/// How the wait is drawn under the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in `[0, cap]` ("full jitter").
    Full,
    /// Uniform in `[cap / 2, cap]` ("equal jitter"): never less than half the cap.
    Equal,
}

/// An exponential backoff: bounds and jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The cap after the first failure.
    pub min: Duration,
    /// The cap never grows past this.
    pub max: Duration,
    /// How the wait is drawn under the cap.
    pub jitter: Jitter,
}

/// The watcher's retries of discovery, lists and watches that failed or ended at once: 800 ms
/// doubling to 30 s (kube-runtime's default shape), equal jitter.
pub const WATCH: Policy = Policy {
    min: Duration::from_millis(800),
    max: Duration::from_secs(30),
    jitter: Jitter::Equal,
};

/// Delivery's retries and a paused sink's probes: 100 ms doubling to 30 s, full jitter. A sink's
/// `min_backoff`/`max_backoff` settings start from these bounds.
pub const DELIVERY: Policy = Policy {
    min: Duration::from_millis(100),
    max: Duration::from_secs(30),
    jitter: Jitter::Full,
};

/// The dead-letter forwarder, after a round in which the `deadLetterSink` did not take every
/// letter: 400 ms doubling to 30 s, full jitter.
pub const FORWARD: Policy = Policy {
    min: Duration::from_millis(400),
    max: Duration::from_secs(30),
    jitter: Jitter::Full,
};

impl Policy {
    /// The same policy between other bounds (delivery's per-sink settings).
    #[must_use]
    pub const fn between(self, min: Duration, max: Duration) -> Self {
        Self { min, max, ..self }
    }

    /// The cap of the wait after `failures` earlier consecutive failures: `min · 2^failures`, at
    /// most `max`.
    #[must_use]
    pub fn cap(&self, failures: u32) -> Duration {
        // The cap is reached long before 64 doublings (any minimum above 1 ns), and iterating the
        // schedule further would only repeat it.
        let steps = usize::try_from(failures.min(64)).unwrap_or(64);
        backon::ExponentialBuilder::default()
            .with_min_delay(self.min)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times()
            .build()
            .nth(steps)
            .unwrap_or(self.max)
    }

    /// A wait after `failures` earlier consecutive failures, drawn under [`Policy::cap`].
    #[must_use]
    pub fn delay(&self, failures: u32) -> Duration {
        self.draw(self.cap(failures), &mut rand::rng())
    }

    /// A wait under `cap`, with this policy's jitter, to the millisecond.
    fn draw(&self, cap: Duration, rng: &mut impl Rng) -> Duration {
        let ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
        let floor = match self.jitter {
            Jitter::Full => 0,
            Jitter::Equal => ms / 2,
        };
        Duration::from_millis(rng.random_range(floor..=ms))
    }
}

/// A [`Policy`] with its count of consecutive failures, for a loop that retries one thing.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: Policy,
    failures: u32,
}

impl Backoff {
    /// No failures yet.
    #[must_use]
    pub const fn new(policy: Policy) -> Self {
        Self {
            policy,
            failures: 0,
        }
    }

    /// Counts a failure and returns how long to wait before the next try.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.policy.delay(self.failures);
        self.note_failure();
        delay
    }

    /// Counts a failure whose wait the caller chose itself (a watcher polling for a CRD at its own
    /// interval): the next error still backs off from where the failures left it.
    pub fn note_failure(&mut self) {
        self.failures = self.failures.saturating_add(1);
    }

    /// Consecutive failures so far.
    #[must_use]
    pub const fn failures(&self) -> u32 {
        self.failures
    }

    /// Success: the next failure waits from the minimum again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn caps_ms(policy: Policy, n: u32) -> Vec<u128> {
        (0..n).map(|i| policy.cap(i).as_millis()).collect()
    }

    #[test]
    fn caps_double_from_the_minimum_to_the_maximum() {
        assert_eq!(
            caps_ms(WATCH, 9),
            [
                800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000, 30_000
            ]
        );
        assert_eq!(
            caps_ms(DELIVERY, 11),
            [
                100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000
            ]
        );
        assert_eq!(
            caps_ms(FORWARD, 9),
            [
                400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000
            ]
        );
        assert_eq!(WATCH.cap(u32::MAX), WATCH.max);
        let tight = DELIVERY.between(Duration::from_millis(1), Duration::from_millis(20));
        assert_eq!(caps_ms(tight, 7), [1, 2, 4, 8, 16, 20, 20]);
    }

    /// The three loops this policy replaced computed their caps by hand; the shared schedule gives
    /// each the same caps, to the millisecond.
    #[test]
    fn caps_are_those_of_the_loops_it_replaced() {
        for n in 0..80u32 {
            // The watcher's own `Backoff`: 800 ms << min(attempts, 6), at most 30 s.
            let watch = Duration::from_millis(800)
                .saturating_mul(1 << n.min(6))
                .min(Duration::from_secs(30));
            assert_eq!(WATCH.cap(n).as_millis(), watch.as_millis(), "watch {n}");
            // The forwarder's: 200 ms << min(failures, 16) with failures counted from 1, at most
            // 30 s.
            let failures = n + 1;
            let forward = Duration::from_millis(200)
                .saturating_mul(2u32.saturating_pow(failures.min(16)))
                .min(Duration::from_secs(30));
            assert_eq!(
                FORWARD.cap(n).as_millis(),
                forward.as_millis(),
                "forward {n}"
            );
        }
    }

    #[test]
    fn jitter_stays_under_the_cap_and_spreads() {
        let mut rng = StdRng::seed_from_u64(13);
        let cap = Duration::from_millis(1_000);
        let full: Vec<Duration> = (0..2_000).map(|_| DELIVERY.draw(cap, &mut rng)).collect();
        assert!(full.iter().all(|d| *d <= cap));
        assert!(full.iter().any(|d| *d < Duration::from_millis(100)));
        assert!(full.iter().any(|d| *d > Duration::from_millis(900)));
        let equal: Vec<Duration> = (0..2_000).map(|_| WATCH.draw(cap, &mut rng)).collect();
        assert!(equal.iter().all(|d| *d >= cap / 2 && *d <= cap));
        assert!(equal.iter().any(|d| *d < Duration::from_millis(550)));
        assert!(equal.iter().any(|d| *d > Duration::from_millis(950)));
    }

    #[test]
    fn a_backoff_counts_failures_and_resets() {
        let mut b = Backoff::new(FORWARD);
        assert_eq!(b.failures(), 0);
        assert!(b.next_delay() <= FORWARD.cap(0));
        b.note_failure();
        assert_eq!(b.failures(), 2);
        assert!(b.next_delay() <= FORWARD.cap(2));
        b.reset();
        assert_eq!(b.failures(), 0);
        assert!(b.next_delay() <= FORWARD.min);
        assert_eq!(b.failures(), 1);
    }
}
