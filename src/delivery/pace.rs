//! A sink's `rateLimit`: a token bucket the driver asks before each send call; start at
//! [`TokenBucket`]. Pure arithmetic on the instants it is given, so it is tested without waiting.
//!
//! The driver paces itself rather than waiting for the receiver's 429s: a burst of changes leaves
//! the journal at the configured rate, and what is not sent yet waits in the journal (durable),
//! not in a retry loop. Every request counts, retries, probes and replays included, as the
//! receiver counts them.

use std::time::Duration;

use herald_sink_core::config::RateLimit;
use tokio::time::Instant;

/// `burst` tokens, refilled at `per_second`; one token per request.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket: a sink starting (or restarting) may send `burst` requests at once.
    pub fn new(limit: RateLimit, now: Instant) -> Self {
        let burst = f64::from(limit.burst.max(1));
        Self {
            per_second: limit.per_second,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = now;
    }

    /// Whole requests that may go now.
    pub fn available(&mut self, now: Instant) -> usize {
        self.refill(now);
        // At most `burst` (a u32), never negative: the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = self.tokens.max(0.0).floor() as usize;
        whole
    }

    /// `n` requests went now.
    pub fn take(&mut self, n: usize, now: Instant) {
        self.refill(now);
        #[allow(clippy::cast_precision_loss)]
        let n = n as f64;
        self.tokens -= n;
    }

    /// When the next whole request may go (now, if one may).
    pub fn ready_at(&self, now: Instant) -> Instant {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        let tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        if tokens >= 1.0 {
            return now;
        }
        let wait = (1.0 - tokens) / self.per_second;
        now + Duration::try_from_secs_f64(wait).unwrap_or(Duration::from_secs(3600))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(per_second: f64, burst: u32) -> RateLimit {
        RateLimit { per_second, burst }
    }

    #[test]
    fn a_full_bucket_lets_a_burst_go_then_the_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(limit(10.0, 5), t0);
        assert_eq!(bucket.available(t0), 5);
        bucket.take(5, t0);
        assert_eq!(bucket.available(t0), 0);
        assert_eq!(bucket.ready_at(t0), t0 + Duration::from_millis(100));
        let later = t0 + Duration::from_millis(350);
        assert_eq!(bucket.available(later), 3);
        // Never more than the burst, however long it stayed quiet.
        assert_eq!(bucket.available(t0 + Duration::from_secs(60)), 5);
    }

    /// The bound a receiver sees: over any stretch of `t` seconds, at most `burst + rate * t`.
    #[test]
    fn requests_over_any_stretch_stay_within_burst_plus_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(limit(4.0, 2), t0);
        let mut sent = Vec::new();
        let mut now = t0;
        while now < t0 + Duration::from_secs(10) {
            let n = bucket.available(now);
            if n > 0 {
                bucket.take(n, now);
                sent.extend(std::iter::repeat_n(now, n));
            }
            now += Duration::from_millis(7);
        }
        assert!(
            sent.len() >= 40 - 1 && sent.len() <= 2 + 40,
            "{}",
            sent.len()
        );
        for (i, start) in sent.iter().enumerate() {
            let within = sent[i..]
                .iter()
                .take_while(|t| t.duration_since(*start) < Duration::from_secs(1))
                .count();
            assert!(within <= 2 + 4, "{within} requests within a second");
        }
    }

    #[test]
    fn fractional_rates_wait_seconds() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(limit(0.5, 1), t0);
        bucket.take(1, t0);
        assert_eq!(bucket.ready_at(t0), t0 + Duration::from_secs(2));
        assert_eq!(bucket.available(t0 + Duration::from_millis(1999)), 0);
        assert_eq!(bucket.available(t0 + Duration::from_secs(2)), 1);
    }
}
