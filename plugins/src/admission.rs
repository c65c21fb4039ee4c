//! How many orders of one bucket may be at the script step at once: an adaptive concurrency
//! limit (AIMD on the observed wait), so that an overload is answered `TRY_LATER` at once
//! instead of by a timeout, and `SERVICE_DEGRADED` keeps meaning that Redis is down or stalled.
//!
//! The pure decision only: [`Aimd`] is told each order's time from the step's entry to its answer
//! and decides the limit; [`crate::batch`] counts the orders in flight and asks it.
//!
//! - An answer within the target (half the reservation timeout) raises the
//!   limit by 1/limit (one more order per limit's worth of answers: additive increase).
//! - An answer past the target cuts the limit by [`CUT`], and a call without an answer by half;
//!   at most one cut per target's span, so that one backlog's slow answers cut once.
//! - The limit stays within [`MIN_LIMIT`] and [`MAX_LIMIT`]; it starts at [`INITIAL_LIMIT`].

use std::time::{Duration, Instant};

/// The limit a bucket starts with.
pub const INITIAL_LIMIT: f64 = 4096.0;
/// The lowest limit (a stalled Redis still gets this many orders to answer `SERVICE_DEGRADED`).
pub const MIN_LIMIT: f64 = 16.0;
/// The highest limit.
pub const MAX_LIMIT: f64 = 8192.0;
/// The factor of a cut for a slow answer.
pub const CUT: f64 = 0.9;

/// The target wait for a reservation bounded by `timeout`: half of it.
pub fn target(timeout: Duration) -> Duration {
    timeout / 2
}

/// One bucket's adaptive limit.
#[derive(Debug, Clone)]
pub struct Aimd {
    limit: f64,
    target: Duration,
    last_cut: Option<Instant>,
}

impl Aimd {
    /// A limit aiming at answers within `target`.
    pub fn new(target: Duration) -> Self {
        Self { limit: INITIAL_LIMIT, target, last_cut: None }
    }

    /// Orders allowed in flight now.
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// Whether one more order may enter with `in_flight` already there.
    pub fn admits(&self, in_flight: usize) -> bool {
        in_flight < self.limit()
    }

    /// An order was answered `waited` after it entered, at `now`.
    pub fn answered(&mut self, waited: Duration, now: Instant) {
        if waited <= self.target {
            self.limit = (self.limit + 1.0 / self.limit).min(MAX_LIMIT);
        } else {
            self.cut(CUT, now);
        }
    }

    /// An order's call gave no answer by its deadline (or failed), at `now`.
    pub fn unanswered(&mut self, now: Instant) {
        self.cut(0.5, now);
    }

    fn cut(&mut self, factor: f64, now: Instant) {
        if self.last_cut.is_some_and(|at| now.duration_since(at) < self.target) {
            return;
        }
        self.last_cut = Some(now);
        self.limit = (self.limit * factor).max(MIN_LIMIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(25);

    #[test]
    fn answers_within_the_target_raise_the_limit_slowly() {
        let (mut a, now) = (Aimd::new(T), Instant::now());
        assert!(a.admits(4095) && !a.admits(4096));
        for _ in 0..4100 {
            a.answered(Duration::from_millis(3), now);
        }
        assert_eq!(a.limit(), 4097, "one more per limit's worth of answers");
    }

    #[test]
    fn slow_answers_cut_once_per_target_span() {
        let (mut a, now) = (Aimd::new(T), Instant::now());
        for _ in 0..100 {
            a.answered(Duration::from_millis(40), now);
        }
        assert_eq!(a.limit(), 3686, "one cut for one backlog");
        a.answered(Duration::from_millis(40), now + T);
        assert_eq!(a.limit(), 3317);
        a.unanswered(now + T * 2);
        assert_eq!(a.limit(), 1658);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let (mut a, now) = (Aimd::new(T), Instant::now());
        for k in 0..100 {
            a.unanswered(now + T * k);
        }
        assert_eq!(a.limit(), MIN_LIMIT as usize);
        for _ in 0..2_000_000 {
            a.answered(Duration::ZERO, now);
        }
        assert!(a.limit() <= MAX_LIMIT as usize);
        assert!(a.limit() > 1000);
    }
}
