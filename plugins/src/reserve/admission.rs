//! How many orders of one bucket may be at the script step at once: an adaptive concurrency
//! limit (AIMD on the Redis step's own time), so that an overload of Redis is answered
//! `TRY_LATER` at once instead of by a timeout, and `SERVICE_DEGRADED` keeps meaning that Redis
//! is down or stalled.
//!
//! The pure decision only: [`Aimd`] is told each order's time at the Redis step and decides the
//! limit; [`crate::reserve::batch`] counts the orders at the step and asks it. The time it is told is the
//! Redis step's own: from the order's entry to its call's answer as the I/O thread reads it (the
//! wait in its bucket's lane and the call's round trip), never the time the order's request then
//! waits for a busy proxy thread to resume it. So a gateway late on its own threads (what `[sale]
//! shed_at_lag_ms` measures) does not read as Redis overload. Nor does the I/O thread's own
//! lateness: the batcher probes that thread and takes twice its smoothed lag off each wait
//! ([`redis_share`]), since on cores too short for the whole machine the thread that writes
//! the batches and reads their answers is late too, and that is not Redis behind.
//!
//! - An answer within the target (half the reservation timeout) raises the limit: by 1 while it
//!   is below its ceiling (the limit comes back, doubling per round, to where Redis last kept
//!   up), by 1/limit above it (one more order per limit's worth of answers: additive increase).
//! - An answer past the target cuts the limit by [`CUT`]; near its ceiling (within a cut of it,
//!   or above) it cuts the ceiling with it (Redis did not keep up there). A call without an answer halves the limit and
//!   leaves the ceiling (a stall says nothing of how much Redis serves once it answers). At most
//!   one cut per target's span, so that one backlog's slow answers cut once.
//! - The limit stays within [`MIN_LIMIT`] and [`MAX_LIMIT`]; it starts at [`INITIAL_LIMIT`], its
//!   ceiling too.
//!
//! So after a stall the limit is back at its ceiling within about log2(ceiling / floor) rounds
//! of answers (a round: the limit's worth of orders), not after the ceiling's square of answers.

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

/// The share of an order's `waited` at the step that is Redis's, when the thread that writes the
/// batches and reads their answers runs `io_lag` late (its smoothed lag, [`crate::checks::pressure`]):
/// that lateness is in the wait twice, before the batch is written (the send waits for the
/// thread) and before its answer is read. A machine whose cores are short runs the I/O thread
/// late; that is not Redis being behind, and refusing orders for it only brings them back
/// (each resent `TRY_LATER` costs the busy cores a request more).
pub fn redis_share(waited: Duration, io_lag: Duration) -> Duration {
    waited.saturating_sub(io_lag * 2)
}

/// One bucket's adaptive limit.
#[derive(Debug, Clone)]
pub struct Aimd {
    limit: f64,
    /// Where Redis last kept up: below it the limit comes back fast.
    ceiling: f64,
    target: Duration,
    last_cut: Option<Instant>,
}

impl Aimd {
    /// A limit aiming at answers within `target`.
    pub fn new(target: Duration) -> Self {
        Self { limit: INITIAL_LIMIT, ceiling: INITIAL_LIMIT, target, last_cut: None }
    }

    /// Orders allowed in flight now.
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// Whether one more order may enter with `in_flight` already there.
    pub fn admits(&self, in_flight: usize) -> bool {
        in_flight < self.limit()
    }

    /// An order's call was answered `waited` after the order entered the step (as the I/O
    /// thread read the answer), at `now`.
    pub fn answered(&mut self, waited: Duration, now: Instant) {
        if waited > self.target {
            let near_ceiling = self.limit >= self.ceiling * CUT;
            if self.cut(CUT, now) && near_ceiling {
                self.ceiling = self.limit;
            }
            return;
        }
        let step = if self.limit < self.ceiling { 1.0 } else { 1.0 / self.limit };
        self.limit = (self.limit + step).min(MAX_LIMIT);
    }

    /// An order's call gave no answer by its deadline (or failed), at `now`.
    pub fn unanswered(&mut self, now: Instant) {
        self.cut(0.5, now);
    }

    /// Cuts the limit by `factor` unless it was cut within the target's span; whether it did.
    fn cut(&mut self, factor: f64, now: Instant) -> bool {
        if self.last_cut.is_some_and(|at| now.duration_since(at) < self.target) {
            return false;
        }
        self.last_cut = Some(now);
        self.limit = (self.limit * factor).max(MIN_LIMIT);
        true
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
    fn after_a_stall_the_limit_is_back_at_its_ceiling_within_a_round_of_answers() {
        let (mut a, now) = (Aimd::new(T), Instant::now());
        for k in 0..20 {
            a.unanswered(now + T * k);
        }
        assert_eq!(a.limit(), MIN_LIMIT as usize, "a stall: down to the floor");
        // The stall's backlog comes back late once: one more cut, not a lower ceiling.
        a.answered(Duration::from_millis(400), now + T * 21);
        let after = now + T * 22;
        let answers = (0..).take_while(|_| {
            a.answered(Duration::from_millis(2), after);
            a.limit() < INITIAL_LIMIT as usize
        });
        let n = answers.count() + 1;
        assert!(n <= INITIAL_LIMIT as usize, "back to 4096 within {n} answers, one per order in flight");
        // Above its ceiling the limit grows by one per limit's worth of answers again.
        for _ in 0..4100 {
            a.answered(Duration::from_millis(2), after);
        }
        assert_eq!(a.limit(), INITIAL_LIMIT as usize + 1);
    }

    #[test]
    fn redis_behind_at_the_ceiling_lowers_it() {
        let (mut a, now) = (Aimd::new(T), Instant::now());
        for k in 0..10 {
            a.answered(Duration::from_millis(40), now + T * k);
        }
        let cut = a.limit();
        assert_eq!(cut, 1428, "ten cuts of 0.9 from 4096");
        // On time again: only additive increase from there (Redis did not keep up above it).
        for _ in 0..1428 {
            a.answered(Duration::from_millis(2), now + T * 11);
        }
        assert_eq!(a.limit(), cut + 1);
    }

    #[test]
    fn a_late_io_thread_is_not_redis_behind() {
        let (mut a, now) = (Aimd::new(T), Instant::now());
        // 40 ms at the step, 10 ms of it twice the I/O thread's lateness: 20 ms is Redis's.
        let waited = Duration::from_millis(40);
        a.answered(redis_share(waited, Duration::from_millis(10)), now);
        assert_eq!(a.limit(), INITIAL_LIMIT as usize, "not cut: within the 25 ms target");
        // The same wait with the thread on time is Redis's own: cut.
        a.answered(redis_share(waited, Duration::ZERO), now);
        assert_eq!(a.limit(), 3686);
        assert_eq!(redis_share(Duration::from_millis(5), Duration::from_millis(10)), Duration::ZERO);
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
