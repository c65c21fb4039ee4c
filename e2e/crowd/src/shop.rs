//! The rest of the shop during the sale: one client sending a shop GET through the gateway every
//! 10 ms for the whole run (on a thread and runtime of its own, so the crowd's load does not
//! delay its clock), and that traffic's latency and errors before the window opens, during the
//! tokens and the burst, and after. The seeds' first constraint ("不能影响商城的其他功能"): a shop
//! request's p99 during the burst should stay within 3x its p99 before, with no errors.
//!
//! Beside it, when given, a second client sends the same GET straight to the shop (no gateway)
//! at the same pace: the floor of the same run. Both wait for the machine's cores during the
//! burst (the crowd, the stack and the gateway share them here); what the gateway adds is the
//! difference.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// One shop request: when it was sent, how long it took, whether it was answered 200.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When it was sent.
    pub at: Instant,
    /// Until the whole answer was read (or the error).
    pub took: Duration,
    /// A 200 with its body read.
    pub ok: bool,
}

/// The client sending shop GETs until [`Probe::stop`] (or its time bound).
pub struct Probe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Probe {
    /// Starts sending `GET url` every `every`, one at a time, for at most `bound`.
    pub fn start(url: String, every: Duration, bound: Duration) -> anyhow::Result<Probe> {
        crate::load::require_loopback(&url)?;
        let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("shop-probe".into()).spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            rt.block_on(async move {
                let mut samples = Vec::new();
                let end = Instant::now() + bound;
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                    tick.tick().await;
                    let at = Instant::now();
                    let ok = match client.get(&url).send().await {
                        Ok(r) if r.status() == reqwest::StatusCode::OK => r.bytes().await.is_ok(),
                        _ => false,
                    };
                    samples.push(Sample { at, took: at.elapsed(), ok });
                }
                samples
            })
        })?;
        Ok(Probe { stop, thread })
    }

    /// Stops the client and returns what it measured.
    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Shop requests of one phase of the run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Phase {
    /// Requests sent.
    pub requests: u64,
    /// Requests not answered 200 (errors, timeouts, other codes).
    pub errors: u64,
    /// Latency percentiles and maximum, milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The shop's traffic, before the window opens, from the opening through the tokens and the
/// burst, and after the burst.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Shop {
    pub before: Phase,
    pub during: Phase,
    pub after: Phase,
    /// The same GETs straight to the shop, without the gateway, when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<Box<Shop>>,
}

impl Shop {
    /// Splits `samples` at `opened` (the window's opening; `None`: it was open before the run,
    /// so nothing is "before") and `burst_end`.
    pub fn of(samples: &[Sample], opened: Option<Instant>, burst_end: Instant) -> Shop {
        let phase = |keep: &dyn Fn(Instant) -> bool| {
            let mut h = Histogram::<u64>::new(3).expect("a histogram");
            let mut p = Phase::default();
            for s in samples.iter().filter(|s| keep(s.at)) {
                p.requests += 1;
                p.errors += u64::from(!s.ok);
                let _ = h.record(s.took.as_micros() as u64);
            }
            if p.requests > 0 {
                p.p50_ms = h.value_at_quantile(0.5) as f64 / 1000.0;
                p.p99_ms = h.value_at_quantile(0.99) as f64 / 1000.0;
                p.max_ms = h.max() as f64 / 1000.0;
            }
            p
        };
        let opened_at = |at: Instant| opened.is_none_or(|o| at >= o);
        Shop {
            before: phase(&|at| !opened_at(at)),
            during: phase(&|at| opened_at(at) && at <= burst_end),
            after: phase(&|at| at > burst_end),
            direct: None,
        }
    }

    /// With `direct`, the same phases of the GETs sent straight to the shop.
    pub fn with_direct(mut self, direct: Shop) -> Shop {
        self.direct = Some(Box::new(direct));
        self
    }

    /// Whether the shop stayed alive: no errors, and the p99 during the burst within 3x the p99
    /// before (checked only when both phases have requests).
    pub fn alive(&self) -> bool {
        let errors = self.before.errors + self.during.errors + self.after.errors;
        let slowed = self.before.requests > 0
            && self.during.requests > 0
            && self.during.p99_ms > 3.0 * self.before.p99_ms;
        errors == 0 && !slowed
    }

    /// One line per phase: requests, errors, p50, p99, max.
    fn phase_rows(&self) -> String {
        [
            ("before the window opens", &self.before),
            ("tokens and burst", &self.during),
            ("after the burst", &self.after),
        ]
        .iter()
        .map(|(name, p)| {
            format!(
                "  {name:<50} {:>8} {:>7} {:>7.2} {:>7.2} {:>7.2}\n",
                p.requests, p.errors, p.p50_ms, p.p99_ms, p.max_ms
            )
        })
        .collect()
    }

    /// The report's lines.
    pub fn render(&self) -> String {
        let mut s = String::from("shop GETs through the gateway, one every 10 ms (ms):  requests  errors     p50     p99     max\n");
        s += &self.phase_rows();
        if let Some(d) = &self.direct {
            s += "  the same GETs straight to the shop, no gateway (the floor of this run):\n";
            s += &d.phase_rows();
            s += &format!(
                "  p99 during the burst: {:.2} ms through the gateway, {:.2} ms straight to the shop\n",
                self.during.p99_ms, d.during.p99_ms
            );
        }
        let ratio = if self.before.p99_ms > 0.0 { self.during.p99_ms / self.before.p99_ms } else { 0.0 };
        s += &format!(
            "  the shop during the burst: p99 {ratio:.2}x before (target <= 3), errors {}: {}\n",
            self.before.errors + self.during.errors + self.after.errors,
            if self.alive() { "ok" } else { "MISSED" }
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64, took_ms: u64, ok: bool) -> Sample {
        Sample { at: t0 + Duration::from_millis(ms), took: Duration::from_millis(took_ms), ok }
    }

    #[test]
    fn samples_split_at_the_opening_and_the_burst_end() {
        let t0 = Instant::now();
        let samples: Vec<Sample> = (0..10)
            .map(|i| at(t0, i, 2, true))
            .chain((10..20).map(|i| at(t0, i, 20, i != 15)))
            .chain((20..30).map(|i| at(t0, i, 3, true)))
            .collect();
        let shop = Shop::of(&samples, Some(t0 + Duration::from_millis(10)), t0 + Duration::from_millis(19));
        assert_eq!((shop.before.requests, shop.during.requests, shop.after.requests), (10, 10, 10));
        assert_eq!((shop.before.errors, shop.during.errors, shop.after.errors), (0, 1, 0));
        assert!((shop.during.p99_ms - 20.0).abs() < 0.1, "{shop:?}");
        assert!(!shop.alive(), "an error and a 10x p99");
        let direct = Shop::of(&samples, Some(t0 + Duration::from_millis(10)), t0 + Duration::from_millis(19));
        let both = shop.clone().with_direct(direct);
        assert!(both.render().contains("straight to the shop"), "{}", both.render());
        assert_eq!(both.direct.as_ref().map(|d| d.during.requests), Some(10));
        let fine: Vec<Sample> =
            samples.iter().map(|s| Sample { ok: true, took: Duration::from_millis(5), ..*s }).collect();
        assert!(Shop::of(&fine, Some(t0 + Duration::from_millis(10)), t0 + Duration::from_millis(19)).alive());
    }

    #[test]
    fn a_window_open_before_the_run_has_no_before() {
        let t0 = Instant::now();
        let samples = [at(t0, 0, 50, true), at(t0, 5, 1, true)];
        let shop = Shop::of(&samples, None, t0 + Duration::from_millis(1));
        assert_eq!((shop.before.requests, shop.during.requests, shop.after.requests), (0, 1, 1));
        assert!(shop.alive(), "no before: nothing to compare");
    }
}
