//! The rest of the shop goes first (seed 003: 不能影响商城的其他功能): how late the proxy's
//! runtimes run their timers, and the sale's costly endpoints shed while they run late.
//!
//! A proxy thread that also serves the shop's routes answers a shop request only after the work
//! ready before it. When the sale's crowd keeps a thread busy (tokens, challenges, orders: JWTs,
//! HMACs, a Redis round trip each), a shop request waits for it, and so does a timer. So each
//! thread that handles a sale request runs one [`probe`] task, started on its first sale request
//! ([`Pressure::watch_this_thread`]): it sleeps [`TICK`] and records how late it woke,
//! smoothed. While any thread's lag is past the conf's `[sale] shed_at_lag_ms`, the challenge,
//! token and order endpoints answer `TRY_LATER` (`Retry-After: 1`) before any costly check
//! ([`Pressure::check`]); the page, `/info`, result queries and the sold-out answer are not shed
//! (they cost no more than a shop request). The decision is the pure [`over`]; the probe is its
//! only I/O.
//!
//! The lag is the thread's and the machine's: a thread the operating system does not run (the
//! cores busy with other processes) is late too, and that is the wait a shop request sees.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use protocol::codes::Code;

use crate::denial::Denial;

/// How often a probe wakes.
pub const TICK: Duration = Duration::from_millis(5);

/// Most threads watched in one process (more threads share the last slot).
const SLOTS: usize = 64;

/// The lags of the threads that serve the sale, microseconds, each smoothed.
#[derive(Debug)]
pub struct Pressure {
    lags_us: [AtomicU32; SLOTS],
    watched: AtomicUsize,
    /// The largest smoothed lag of any thread since [`Pressure::take_peak`] last read it.
    peak_us: AtomicU32,
}

impl Default for Pressure {
    fn default() -> Self {
        Self {
            lags_us: std::array::from_fn(|_| AtomicU32::new(0)),
            watched: AtomicUsize::new(0),
            peak_us: AtomicU32::new(0),
        }
    }
}

thread_local! {
    /// The [`Pressure`] this thread runs a probe for (its address; 0: none yet).
    static WATCHED: Cell<usize> = const { Cell::new(0) };
}

impl Pressure {
    /// Starts a probe on the current tokio runtime the first time this thread asks (one cheap
    /// thread-local read after that). Outside a runtime it does nothing.
    pub fn watch_this_thread(self: &Arc<Self>) {
        let me = Arc::as_ptr(self) as usize;
        if WATCHED.with(Cell::get) == me {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        WATCHED.with(|w| w.set(me));
        self.watch_runtime(&runtime);
    }

    /// Starts a probe on `runtime` (one of its threads: a runtime of one thread, like the sale's
    /// I/O runtime, is watched whole), in a slot of its own.
    pub fn watch_runtime(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        let slot = self.watched.fetch_add(1, Ordering::Relaxed).min(SLOTS - 1);
        runtime.spawn(probe(Arc::downgrade(self), slot));
    }

    /// The largest smoothed lag of the watched threads.
    pub fn lag(&self) -> Duration {
        let n = self.watched.load(Ordering::Relaxed).min(SLOTS);
        let max = self.lags_us[..n].iter().map(|l| l.load(Ordering::Relaxed)).max().unwrap_or(0);
        Duration::from_micros(u64::from(max))
    }

    /// The largest smoothed lag since the last call (a scrape's view: a lag between two scrapes
    /// is not missed), and starts over.
    pub fn take_peak(&self) -> Duration {
        Duration::from_micros(u64::from(self.peak_us.swap(0, Ordering::Relaxed)))
    }

    /// `TRY_LATER` while the lag is past `shed_at` (`None`: never).
    pub fn check(&self, shed_at: Option<Duration>) -> Result<(), Denial> {
        match shed_at {
            Some(at) if over(self.lag(), at) => Err(Denial::new(
                Code::TryLater,
                "the shop is busy: the sale's requests wait so that the rest of the shop stays fast; try again",
            )
            .retry_after(1)),
            _ => Ok(()),
        }
    }
}

/// Whether a smoothed `lag` sheds at threshold `at`.
pub fn over(lag: Duration, at: Duration) -> bool {
    lag > at
}

/// The next smoothed lag from the last one and a wake-up `late` by this much: an exponential
/// average with weight 1/4 on the new sample, so that one late wake-up (a page fault, a log
/// flush) does not shed and a thread late for a few ticks running does.
pub fn smooth(last: Duration, late: Duration) -> Duration {
    (last * 3 + late) / 4
}

/// Wakes every [`TICK`] and records how late in `slot`, until the sale is dropped.
async fn probe(pressure: Weak<Pressure>, slot: usize) {
    let mut lag = Duration::ZERO;
    loop {
        let asked = Instant::now();
        tokio::time::sleep(TICK).await;
        // The timer wheel's millisecond granularity makes up to 1 ms late the normal.
        let late = asked.elapsed().saturating_sub(TICK + Duration::from_millis(1));
        lag = smooth(lag, late);
        let Some(p) = pressure.upgrade() else { return };
        let us = u32::try_from(lag.as_micros()).unwrap_or(u32::MAX);
        p.lags_us[slot].store(us, Ordering::Relaxed);
        p.peak_us.fetch_max(us, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_late_wake_up_does_not_shed_a_few_do() {
        let at = Duration::from_millis(5);
        let mut lag = Duration::ZERO;
        lag = smooth(lag, Duration::from_millis(12));
        assert!(!over(lag, at), "one wake-up 12 ms late: {lag:?}");
        for _ in 0..3 {
            lag = smooth(lag, Duration::from_millis(12));
        }
        assert!(over(lag, at), "four in a row: {lag:?}");
        for _ in 0..6 {
            lag = smooth(lag, Duration::ZERO);
        }
        assert!(!over(lag, at), "on time again: {lag:?}");
    }

    #[test]
    fn the_largest_lag_decides_and_off_never_sheds() {
        let p = Pressure::default();
        p.watched.store(2, Ordering::Relaxed);
        p.lags_us[0].store(1_000, Ordering::Relaxed);
        p.lags_us[1].store(9_000, Ordering::Relaxed);
        assert_eq!(p.lag(), Duration::from_millis(9));
        let shed = p.check(Some(Duration::from_millis(5))).expect_err("9 ms late, shed at 5");
        assert_eq!((shed.code, shed.retry_after_secs), (Code::TryLater, Some(1)));
        assert!(p.check(Some(Duration::from_millis(10))).is_ok());
        assert!(p.check(None).is_ok());
        p.peak_us.store(9_000, Ordering::Relaxed);
        assert_eq!(p.take_peak(), Duration::from_millis(9), "the peak since the last read");
        assert_eq!(p.take_peak(), Duration::ZERO, "and it starts over");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_probe_runs_once_per_thread_and_ends_with_the_sale() {
        let p = Arc::new(Pressure::default());
        p.watch_this_thread();
        p.watch_this_thread();
        assert_eq!(p.watched.load(Ordering::Relaxed), 1);
        tokio::time::sleep(TICK * 4).await;
        assert_eq!(p.lag(), Duration::ZERO, "a paused clock is never late");
        let weak = Arc::downgrade(&p);
        drop(p);
        tokio::time::sleep(TICK * 2).await;
        assert!(weak.upgrade().is_none());
    }
}
