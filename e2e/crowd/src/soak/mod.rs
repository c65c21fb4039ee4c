//! The soak's judge (`e2e/soak.sh`, `soak-watch`): what the long-lived processes, Redis and
//! PostgreSQL hold, sampled every few seconds for as long as the soak runs, and whether any of it
//! grows. Growth is judged on the quiet samples only (between two sales, after the first one:
//! the warm-up), by a least-squares line through them: its rise over the quiet span must stay
//! within the series' [`Bound`]: a floor (what allocators, pools and timers wander by) plus a
//! rate per hour. A leak of one descriptor or connection per sale passes a 3-minute run and
//! fails the hour. A series that counts a bounded pool's connections (`soak-watch --pool`)
//! passes while every quiet sample is within the pool's size: a pool that fills to its size
//! after a fault (PostgreSQL stalled, every waiting task opening a connection) and keeps its
//! connections open is what a pool does, and a leak through a pool cannot pass its size.

pub mod html;
pub mod procfs;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One sample: seconds from the soak's start, whether it was taken between two sales after
/// the warm-up, and each series (`<who>/<kind>`, e.g. `gateway/rss_mib`, `gateway/conns:redis`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Seconds from the soak's start.
    pub t: f64,
    /// Between two sales, after the first one ended.
    pub quiet: bool,
    /// The figures, by series.
    pub series: BTreeMap<String, f64>,
}

/// How much a kind of series may rise over the soak: `floor + per_hour x hours`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Bound {
    /// The kind (the part of a series' name after `/`, up to a `:`).
    pub kind: &'static str,
    /// What it may wander by in any run.
    pub floor: f64,
    /// And what it may grow by per hour on top.
    pub per_hour: f64,
    /// Its unit, for the report.
    pub unit: &'static str,
}

/// The bounds, one per kind of series: the one place they are stated (docs/testing.md quotes
/// them).
pub const BOUNDS: [Bound; 7] = [
    Bound { kind: "rss_mib", floor: 32.0, per_hour: 16.0, unit: "MiB" },
    Bound { kind: "fds", floor: 12.0, per_hour: 4.0, unit: "descriptors" },
    Bound { kind: "threads", floor: 8.0, per_hour: 2.0, unit: "threads" },
    Bound { kind: "conns", floor: 8.0, per_hour: 4.0, unit: "connections" },
    Bound { kind: "used_mib", floor: 16.0, per_hour: 8.0, unit: "MiB" },
    Bound { kind: "keys", floor: 500.0, per_hour: 200.0, unit: "keys" },
    Bound { kind: "connections", floor: 8.0, per_hour: 4.0, unit: "connections" },
];

/// The bound of series `name` (`<who>/<kind>[:<peer>]`), if its kind has one.
pub fn bound_of(name: &str) -> Option<&'static Bound> {
    let kind = name.split_once('/')?.1;
    let kind = kind.split_once(':').map_or(kind, |(k, _)| k);
    BOUNDS.iter().find(|b| b.kind == kind)
}

/// One series judged.
#[derive(Debug, Clone, Serialize)]
pub struct Growth {
    /// The series.
    pub series: String,
    /// Quiet samples the line was fitted through.
    pub points: usize,
    /// The line's slope, per hour.
    pub per_hour: f64,
    /// The line's rise over the quiet span (slope x span).
    pub rise: f64,
    /// What the bound allows over that span.
    pub allowed: f64,
    /// The series' first and last quiet values.
    pub first: f64,
    /// See `first`.
    pub last: f64,
    /// The size of the pool whose connections the series counts, if it does.
    pub pool: Option<f64>,
    /// Within its bound (or its pool's size), with at least [`MIN_POINTS`] quiet samples.
    pub ok: bool,
}

/// Fewer quiet samples than this judge nothing: the series fails (a soak too short to say).
pub const MIN_POINTS: usize = 3;

/// The least-squares line through `points` (t, value): (slope per second, intercept).
pub fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    if points.is_empty() {
        return (0.0, 0.0);
    }
    let (mt, mv) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let var: f64 = points.iter().map(|p| (p.0 - mt).powi(2)).sum();
    if var == 0.0 {
        return (0.0, mv);
    }
    let slope = points.iter().map(|p| (p.0 - mt) * (p.1 - mv)).sum::<f64>() / var;
    (slope, mv - slope * mt)
}

/// Every bounded series of `samples` judged on its quiet samples; those named in `pools` count a
/// pool's connections, and pass within its size.
pub fn judge(samples: &[Sample], pools: &BTreeMap<String, f64>) -> Vec<Growth> {
    let mut by_series: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.quiet) {
        for (name, v) in &s.series {
            by_series.entry(name).or_default().push((s.t, *v));
        }
    }
    by_series
        .into_iter()
        .filter_map(|(name, points)| Some((name, points, bound_of(name)?)))
        .map(|(name, points, bound)| {
            let (slope, _) = fit(&points);
            let span = points.last().map_or(0.0, |l| l.0) - points.first().map_or(0.0, |f| f.0);
            let rise = slope * span;
            let allowed = bound.floor + bound.per_hour * span / 3600.0;
            let pool = pools.get(name).copied();
            let within_pool = pool.is_some_and(|size| points.iter().all(|p| p.1 <= size));
            Growth {
                series: name.to_string(),
                points: points.len(),
                per_hour: slope * 3600.0,
                rise,
                allowed,
                first: points.first().map_or(0.0, |p| p.1),
                last: points.last().map_or(0.0, |p| p.1),
                pool,
                ok: points.len() >= MIN_POINTS && (rise <= allowed || within_pool),
            }
        })
        .collect()
}

/// The rest of the shop during the soak: its GETs through the gateway, how many failed (not a
/// 200 with its body), and their latencies.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ShopFigures {
    /// GETs sent.
    pub requests: u64,
    /// Of them not answered 200 with a body.
    pub errors: u64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// The slowest, ms.
    pub max_ms: f64,
}

/// What the soak says: its samples, each series judged, the shop, and the sales' verdict lines
/// (`e2e/soak.sh` writes one per sale, `PASS ...` or `FAIL ...`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seconds the soak ran.
    pub secs: f64,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Every bounded series, judged.
    pub growth: Vec<Growth>,
    /// The shop's traffic.
    pub shop: ShopFigures,
    /// One line per sale.
    pub sales: Vec<String>,
}

impl Report {
    /// Judges `samples` (`pools`: [`judge`]'s).
    pub fn new(
        secs: f64,
        samples: Vec<Sample>,
        pools: &BTreeMap<String, f64>,
        shop: ShopFigures,
        sales: Vec<String>,
    ) -> Self {
        let growth = judge(&samples, pools);
        Self { secs, samples, growth, shop, sales }
    }

    /// No series grew past its bound (and at least one was judged), the shop answered every
    /// request, and there was a sale and every sale passed.
    pub fn passed(&self) -> bool {
        !self.growth.is_empty()
            && self.growth.iter().all(|g| g.ok)
            && self.shop.requests > 0
            && self.shop.errors == 0
            && !self.sales.is_empty()
            && self.sales.iter().all(|s| s.starts_with("PASS"))
    }

    /// The text verdict: a line per series that failed (or all, with `all`), the shop, the sales.
    pub fn text(&self, all: bool) -> String {
        let mut out = format!(
            "soak: {:.0} s, {} samples ({} quiet), {} sales, shop {} GETs {} errors p99 {:.1} ms\n",
            self.secs,
            self.samples.len(),
            self.samples.iter().filter(|s| s.quiet).count(),
            self.sales.len(),
            self.shop.requests,
            self.shop.errors,
            self.shop.p99_ms
        );
        for g in self.growth.iter().filter(|g| all || !g.ok) {
            out += &format!(
                "  {:<28} {} {:>9.1} -> {:>9.1}  rise {:>8.1} (allowed {:.1}{}, {} points, {:+.1}/h)\n",
                g.series,
                if g.ok { "ok  " } else { "GREW" },
                g.first,
                g.last,
                g.rise,
                g.allowed,
                g.pool.map(|size| format!(", or within its pool of {size:.0}")).unwrap_or_default(),
                g.points,
                g.per_hour
            );
        }
        for s in &self.sales {
            out += &format!("  {s}\n");
        }
        out += &format!("soak: {}\n", if self.passed() { "PASS" } else { "FAIL" });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(kind: &str, values: &[(f64, f64, bool)]) -> Vec<Sample> {
        values
            .iter()
            .map(|&(t, v, quiet)| Sample {
                t,
                quiet,
                series: BTreeMap::from([(format!("gateway/{kind}"), v)]),
            })
            .collect()
    }

    #[test]
    fn the_fitted_line_of_points_on_a_line_is_that_line() {
        let (slope, intercept) = fit(&[(0.0, 1.0), (10.0, 21.0), (20.0, 41.0)]);
        assert!((slope - 2.0).abs() < 1e-9 && (intercept - 1.0).abs() < 1e-9);
        assert_eq!(fit(&[(5.0, 3.0), (5.0, 5.0)]), (0.0, 4.0));
        assert_eq!(fit(&[]), (0.0, 0.0));
    }

    #[test]
    fn flat_memory_with_bursts_between_sales_passes() {
        // The bursts (not quiet) reach 300 MiB; between sales it stays near 60.
        let g = judge(
            &samples(
                "rss_mib",
                &[
                    (0.0, 40.0, false),
                    (60.0, 300.0, false),
                    (120.0, 61.0, true),
                    (180.0, 290.0, false),
                    (240.0, 59.0, true),
                    (300.0, 310.0, false),
                    (360.0, 62.0, true),
                ],
            ),
            &BTreeMap::new(),
        );
        assert_eq!(g.len(), 1);
        assert!(g[0].ok, "{g:?}");
        assert_eq!((g[0].points, g[0].first, g[0].last), (3, 61.0, 62.0));
    }

    #[test]
    fn a_descriptor_leaked_per_sale_fails_an_hour_and_passes_three_minutes() {
        // One more descriptor every 3 minutes (a sale) for an hour: 20 more, over 12 + 4.
        let hour: Vec<_> = (0..=20).map(|i| (i as f64 * 180.0, 100.0 + i as f64, true)).collect();
        let g = judge(&samples("fds", &hour), &BTreeMap::new());
        assert!(!g[0].ok && (g[0].rise - 20.0).abs() < 1e-6, "{g:?}");
        // Three sales, three minutes: 2 more, within the floor.
        let g = judge(&samples("fds", &hour[..3]), &BTreeMap::new());
        assert!(g[0].ok, "{g:?}");
    }

    #[test]
    fn connections_piling_up_fail_at_once_and_too_few_quiet_samples_judge_nothing() {
        let g = judge(
            &samples("conns:redis", &[(0.0, 4.0, true), (60.0, 20.0, true), (120.0, 40.0, true)]),
            &BTreeMap::new(),
        );
        assert!(!g[0].ok, "{g:?}");
        let g = judge(&samples("threads", &[(0.0, 4.0, true), (60.0, 4.0, true)]), &BTreeMap::new());
        assert!(!g[0].ok, "two points say nothing: {g:?}");
    }

    #[test]
    fn a_pool_filled_to_its_size_after_a_fault_passes_and_past_it_fails() {
        // The order writer's PostgreSQL pool: 13 before a PostgreSQL timeout, 24 (its size) after.
        let quiet = [(60.0, 13.0, true), (80.0, 13.0, true), (140.0, 24.0, true), (160.0, 24.0, true)];
        let pools = BTreeMap::from([("gateway/conns:pg".to_string(), 24.0)]);
        assert!(!judge(&samples("conns:pg", &quiet), &BTreeMap::new())[0].ok, "without its size: grew");
        let g = judge(&samples("conns:pg", &quiet), &pools);
        assert!(g[0].ok && g[0].rise > g[0].allowed, "within its pool of 24: {g:?}");
        // One connection past the pool's size is not the pool's.
        let past = [(60.0, 13.0, true), (80.0, 13.0, true), (140.0, 25.0, true)];
        assert!(!judge(&samples("conns:pg", &past), &pools)[0].ok);
    }

    #[test]
    fn every_kind_of_series_has_its_bound_and_others_none() {
        assert_eq!(bound_of("gateway/conns:shop").map(|b| b.kind), Some("conns"));
        assert_eq!(bound_of("redis/keys").map(|b| b.kind), Some("keys"));
        assert_eq!(bound_of("pg/connections").map(|b| b.kind), Some("connections"));
        assert!(bound_of("gateway/cpu_secs").is_none() && bound_of("nokind").is_none());
    }
}
