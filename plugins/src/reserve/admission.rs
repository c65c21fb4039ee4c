//! How many orders of one bucket may be at the script step at once: as many as the bucket's calls
//! answer within the reservation's timeout at their recent round trip (Little's law), so that an
//! order Redis could not answer in time is told `TRY_LATER` at once instead of after waiting out
//! its timeout, and `SERVICE_DEGRADED` keeps meaning that Redis is down or stalled.
//!
//! The pure decision only: [`Limit`] is told each call's round trip and decides the limit;
//! [`crate::reserve::batch`] counts the orders at the step and asks it.
//!
//! - The bucket's calls carry at most a round's worth of orders per round trip (two calls in
//!   flight of up to `batch_max` orders each). An order that finds `n` orders ahead of it at the
//!   step waits about `n / round × round trip`; the limit is the `n` for which that is the
//!   timeout: `round × timeout / round trip`. Past it, an order would wait unsent in its lane
//!   until its deadline and be told `TRY_LATER` then ([`crate::reserve::Attempt::Behind`]);
//!   the limit tells it at once. It never refuses an order the step would have answered in time,
//!   so it cannot make a sale longer: a crowd the calls keep up with is never refused.
//! - The round trip is the call's own, from its write to its answer as the I/O thread reads it:
//!   the one the quickest quarter of the last [`WINDOW`] calls beat ([`QUANTILE`]). On a machine
//!   short of cores most calls wait for a core at one end or the other, and a limit that follows
//!   them refuses orders the next calls answer in time (each refusal comes back as a request
//!   more on the same cores); while a quarter of the calls still come back quickly, Redis is not
//!   behind. A Redis busy with work of its own, behind its crowd, or stalled delays them all.
//!   Not the time an order waited in its lane (that
//!   is the queue the limit bounds, not Redis), and not twice the I/O thread's lateness
//!   ([`redis_share`]): a gateway whose threads are late reads as Redis behind to nobody.
//! - A call without an answer counts as a round trip of the whole timeout: a stall brings the
//!   limit down to a round's worth of orders within three quarters of a window of calls (not
//!   below [`MIN_LIMIT`]), and a quarter of a window answered after it (one more) brings it back.
//! - Before any call came back the limit is [`INITIAL_LIMIT`]; it stays within [`MIN_LIMIT`] and
//!   [`MAX_LIMIT`].

use std::time::Duration;

/// The limit before the bucket's first answer.
pub const INITIAL_LIMIT: f64 = 4096.0;
/// The lowest limit (a stalled Redis still gets this many orders to answer `SERVICE_DEGRADED`).
pub const MIN_LIMIT: f64 = 16.0;
/// The highest limit.
pub const MAX_LIMIT: f64 = 8192.0;
/// The calls whose round trips count.
pub const WINDOW: usize = 16;
/// The share of the window's calls quicker than the round trip the limit follows.
pub const QUANTILE: f64 = 0.25;
/// The shortest round trip the limit believes (a call cannot come back faster; a shorter one is
/// the I/O thread's lateness taken off a call that waited for it).
pub const MIN_ROUND_TRIP: Duration = Duration::from_micros(100);

/// The share of a call's `round_trip` that is Redis's, when the thread that writes the batches
/// and reads their answers runs `io_lag` late (its smoothed lag, [`crate::checks::pressure`]):
/// that lateness is in the round trip twice, before the call is written (the send waits for the
/// thread) and before its answer is read. A machine whose cores are short runs the I/O thread
/// late; that is not Redis being behind, and refusing orders for it only brings them back
/// (each resent `TRY_LATER` costs the busy cores a request more).
pub fn redis_share(round_trip: Duration, io_lag: Duration) -> Duration {
    round_trip.saturating_sub(io_lag * 2)
}

/// One bucket's limit.
#[derive(Debug, Clone)]
pub struct Limit {
    /// The reservation's timeout: how long an order may wait at the step.
    timeout: Duration,
    /// The last calls' round trips (seconds), oldest overwritten first.
    recent: [f64; WINDOW],
    /// How many of `recent` are calls' (fewer than the window at first), and where the next goes.
    seen: usize,
    /// Orders one round of the bucket's calls carries.
    round: f64,
    /// The limit the last round trips give.
    limit: usize,
}

impl Limit {
    /// The limit of a bucket whose orders wait at most `timeout` and whose calls carry `round`
    /// orders per round trip at most.
    pub fn new(timeout: Duration, round: usize) -> Self {
        let round = round.max(1) as f64;
        Self { timeout, recent: [0.0; WINDOW], seen: 0, round, limit: INITIAL_LIMIT as usize }
    }

    /// Orders allowed at the step now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether one more order may enter with `at_step` already there.
    pub fn admits(&self, at_step: usize) -> bool {
        at_step < self.limit()
    }

    /// A call came back after `round_trip` (Redis's share of it, [`redis_share`]).
    pub fn answered(&mut self, round_trip: Duration) {
        self.sample(round_trip.max(MIN_ROUND_TRIP).as_secs_f64());
    }

    /// A call gave no answer by its deadline (or failed).
    pub fn unanswered(&mut self) {
        self.sample(self.timeout.as_secs_f64());
    }

    /// The orders one round carries from now on (the path of one call per order: those at the
    /// step, each its own call).
    pub fn set_round(&mut self, round: usize) {
        self.round = round.max(1) as f64;
        self.update();
    }

    fn sample(&mut self, secs: f64) {
        self.recent[self.seen % WINDOW] = secs;
        self.seen += 1;
        if self.seen == 2 * WINDOW {
            self.seen = WINDOW; // keeps the count bounded, the slot order the same
        }
        self.update();
    }

    fn update(&mut self) {
        let n = self.seen.min(WINDOW);
        if n == 0 {
            return;
        }
        let mut recent = self.recent;
        let at = (n as f64 * QUANTILE) as usize;
        let (_, rtt, _) = recent[..n].select_nth_unstable_by(at, f64::total_cmp);
        let limit = self.round * self.timeout.as_secs_f64() / *rtt;
        self.limit = limit.clamp(MIN_LIMIT, MAX_LIMIT) as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(100);
    const ROUND: usize = 64;
    const MS: Duration = Duration::from_millis(1);

    /// `n` calls answered after `rtt`.
    fn answers(l: &mut Limit, rtt: Duration, n: usize) {
        for _ in 0..n {
            l.answered(rtt);
        }
    }

    #[test]
    fn before_any_answer_the_limit_is_the_initial_one() {
        let l = Limit::new(TIMEOUT, ROUND);
        assert!(l.admits(4095) && !l.admits(4096));
    }

    #[test]
    fn the_limit_is_what_the_calls_answer_within_the_timeout() {
        let mut l = Limit::new(TIMEOUT, ROUND);
        answers(&mut l, 2 * MS, 1);
        assert_eq!(l.limit(), 3200, "64 orders per 2 ms: 3,200 in 100 ms");
        // Calls of 20 ms (a machine short of cores): 64 per 20 ms answer 320 within the timeout.
        answers(&mut l, 20 * MS, WINDOW);
        assert_eq!(l.limit(), 320);
        // An order more than those would wait past its timeout unsent: it is refused at once.
        assert!(l.admits(319) && !l.admits(320));
    }

    #[test]
    fn a_crowd_the_calls_keep_up_with_is_never_refused() {
        // 500 orders at the step, calls of 10 ms: 64 per 10 ms answer 640 within the timeout.
        let mut l = Limit::new(TIMEOUT, ROUND);
        answers(&mut l, 10 * MS, 100);
        assert!(l.admits(500), "limit {}", l.limit());
        // Slow calls among them (a machine short of cores: most wait for a core) refuse nobody
        // the calls still answer in time while more than a quarter come back quickly.
        answers(&mut l, 80 * MS, WINDOW * 3 / 4 - 1);
        assert!(l.admits(500), "limit {}", l.limit());
        // Once nearly all calls are that slow (Redis behind), 64 per 80 ms answer 80 within the
        // timeout.
        answers(&mut l, 80 * MS, 1);
        assert_eq!(l.limit(), 80);
    }

    #[test]
    fn a_stall_brings_the_limit_down_and_answers_bring_it_back_within_a_few_calls() {
        let mut l = Limit::new(TIMEOUT, ROUND);
        answers(&mut l, MS, 50);
        let down = (1..=100)
            .find(|_| {
                l.unanswered();
                l.limit() == ROUND
            })
            .expect("down within 100 calls");
        assert_eq!(down, WINDOW * 3 / 4, "a round's worth of orders: calls of the whole timeout");
        let calls = (1..=100)
            .find(|_| {
                l.answered(2 * MS);
                l.limit() >= 1000
            })
            .expect("back within 100 calls");
        assert_eq!(calls, WINDOW / 4 + 1, "back above 1,000 once a quarter of the calls are quick again");
    }

    #[test]
    fn a_late_io_thread_is_not_redis_behind() {
        // A 40 ms round trip, 15 ms of it twice the I/O thread's lateness: 10 ms is Redis's.
        let rtt = 40 * MS;
        assert_eq!(redis_share(rtt, 15 * MS), 10 * MS);
        let (mut late, mut own) = (Limit::new(TIMEOUT, ROUND), Limit::new(TIMEOUT, ROUND));
        late.answered(redis_share(rtt, 15 * MS));
        own.answered(redis_share(rtt, Duration::ZERO));
        assert_eq!((late.limit(), own.limit()), (640, 160));
        assert_eq!(redis_share(5 * MS, 10 * MS), Duration::ZERO);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut l = Limit::new(Duration::from_millis(300), 8);
        answers(&mut l, Duration::from_millis(300), 10);
        assert_eq!(l.limit(), MIN_LIMIT as usize, "8 orders per 300 ms: the floor");
        answers(&mut l, Duration::ZERO, WINDOW);
        assert_eq!(l.limit(), MAX_LIMIT as usize);
    }

    #[test]
    fn one_call_per_order_counts_the_orders_at_the_step_as_the_round() {
        let mut l = Limit::new(TIMEOUT, 1);
        answers(&mut l, MS, 1);
        assert_eq!(l.limit(), 100);
        l.set_round(50);
        assert_eq!(l.limit(), 5000);
    }
}
