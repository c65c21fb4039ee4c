//! What the servers said while the sale ran, for the report's timelines: every
//! [`Sampler::EVERY`], the stock left in Redis and a few series of every `/metrics` endpoint
//! (reservation calls to Redis, the Kafka backlog, orders written, the shop route's latency),
//! summed over the processes. [`pick`] reads a scrape (pure); [`Sampler`] takes them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fred::prelude::*;
use protocol::keys::Bucket;
use serde::Serialize;

/// The series a sample keeps, by the name the report uses: (metric, label filter, name).
const SERIES: [(&str, &str, &str); 6] = [
    // One reservation script call to Redis per order that passed the edge's checks.
    ("seckill_gateway_reserve_duration_seconds_count", "", "reserve_calls"),
    // Records the gateway holds for Kafka, and records on the topic not yet consumed.
    ("seckill_gateway_kafka_queue_depth", "", "gateway_queue"),
    ("seckill_writer_lag", "", "writer_lag"),
    ("seckill_writer_orders_inserted_total", "", "orders_written"),
    ("seckill_gateway_request_duration_seconds_count", "route=\"shop\"", "shop_count"),
    ("seckill_gateway_request_duration_seconds_sum", "route=\"shop\"", "shop_sum"),
];

/// One sample.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// When it was taken.
    #[serde(skip)]
    pub at: Option<Instant>,
    /// Seconds from the window's opening (negative before), set by the report.
    pub t: f64,
    /// Units left in Redis (every bucket), when it answered.
    pub stock_left: Option<i64>,
    /// `EVALSHA` calls so far on that Redis (`INFO commandstats`), when the [`Cadence`] reads
    /// them and it answered (the flood's figures; not in the report).
    #[serde(skip)]
    pub evalsha: Option<u64>,
    /// The series of `SERIES`, summed over every `/metrics` endpoint that answered.
    pub series: BTreeMap<String, f64>,
}

/// The `SERIES` of one Prometheus text scrape, each summed over its label sets.
pub fn pick(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (head, value) = match line.rsplit_once(' ') {
            Some(p) => p,
            None => continue,
        };
        let (name, labels) = head.split_once('{').unwrap_or((head, ""));
        let Ok(value) = value.parse::<f64>() else { continue };
        for (metric, filter, key) in SERIES {
            if name == metric && labels.contains(filter) {
                *out.entry(key.to_string()).or_insert(0.0) += value;
            }
        }
    }
    out
}

/// Samples in the background until [`Sampler::stop`].
pub struct Sampler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<Sample>>,
}

/// The Redis stock keys of `campaign`, one per hot-stock bucket (its bucket count read from the
/// order writer's database at `pg_url`; 1 when not published there).
pub async fn stock_keys(campaign: &str, pg_url: &str) -> anyhow::Result<Vec<String>> {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(pg_url).await?;
    let buckets: i32 = sqlx::query_scalar("SELECT buckets FROM campaigns WHERE id = $1")
        .bind(campaign)
        .fetch_optional(&pool)
        .await?
        .unwrap_or(1);
    pool.close().await;
    Ok(Bucket::all(campaign, buckets.max(1) as u32).into_iter().map(|b| b.keys.stock.clone()).collect())
}

/// The stock left over `stocks` (the buckets' keys), or `None` when Redis did not answer
/// within `bound` (a Redis killed by a fault test leaves a gap, never a stuck sampler).
pub async fn stock_left(redis: &Client, stocks: &[String], bound: Duration) -> Option<i64> {
    tokio::time::timeout(bound, async {
        let mut left = 0;
        for key in stocks {
            left += redis.get::<Option<i64>, _>(key).await.ok()?.unwrap_or(0);
        }
        Some(left)
    })
    .await
    .ok()
    .flatten()
}

/// How a [`Sampler`] samples.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    /// How often.
    pub every: Duration,
    /// At most this many samples (a bound on a run's memory).
    pub max: usize,
    /// How long each `/metrics` scrape may take.
    pub scrape_timeout: Duration,
    /// Whether each sample reads `INFO commandstats` too (its `EVALSHA` calls: only on a single
    /// Redis, a cluster's is per node).
    pub evalsha: bool,
}

impl Cadence {
    /// The report's timelines: every 250 ms, an hour at most.
    pub const REPORT: Cadence = Cadence {
        every: Duration::from_millis(250),
        max: 14_400,
        scrape_timeout: Duration::from_secs(1),
        evalsha: false,
    };
}

impl Sampler {
    /// How often, for the report.
    pub const EVERY: Duration = Cadence::REPORT.every;

    /// Starts sampling campaign `campaign` (its stock buckets read from `pg_url`) on
    /// `redis_url` and the `/metrics` URLs, at the report's [`Cadence::REPORT`].
    pub async fn start(
        campaign: &str,
        pg_url: &str,
        redis_url: &str,
        metrics: Vec<String>,
    ) -> anyhow::Result<Self> {
        Self::start_with(campaign, pg_url, redis_url, metrics, Cadence::REPORT).await
    }

    /// [`Sampler::start`] at `cadence`.
    pub async fn start_with(
        campaign: &str,
        pg_url: &str,
        redis_url: &str,
        metrics: Vec<String>,
        cadence: Cadence,
    ) -> anyhow::Result<Self> {
        let stocks = stock_keys(campaign, pg_url).await?;
        let redis = Client::new(Config::from_url(redis_url)?, None, None, None);
        redis.init().await?;
        let evalsha = cadence.evalsha && !redis_url.starts_with("redis-cluster");
        let http = reqwest::Client::builder().timeout(cadence.scrape_timeout).build()?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(cadence.every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            // Bounded by the cadence's `max`.
            while samples.len() < cadence.max && !*stopped.borrow() {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => break,
                }
                let at = Instant::now();
                let bound = Duration::from_millis(500);
                let evalsha = if evalsha {
                    let info = redis.custom::<String, _>(fred::cmd!("INFO"), vec!["commandstats"]);
                    tokio::time::timeout(bound, info)
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .and_then(|i| evalsha_calls(&i))
                } else {
                    None
                };
                let stock_left = stock_left(&redis, &stocks, bound).await;
                let mut series = BTreeMap::new();
                for url in &metrics {
                    let Ok(r) = http.get(url).send().await else { continue };
                    for (k, v) in pick(&r.text().await.unwrap_or_default()) {
                        *series.entry(k).or_insert(0.0) += v;
                    }
                }
                samples.push(Sample { at: Some(at), t: 0.0, stock_left, evalsha, series });
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), redis.quit()).await;
            samples
        });
        Ok(Self { stop, task })
    }

    /// Stops and returns the samples (none when the task does not end within 5 s).
    pub async fn stop(self) -> Vec<Sample> {
        let _ = self.stop.send(true);
        let abort = self.task.abort_handle();
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(samples) => samples.unwrap_or_default(),
            Err(_) => {
                abort.abort();
                Vec::new()
            }
        }
    }
}

/// The `calls` of `cmdstat_evalsha` in an `INFO commandstats` answer (every script's: Redis does
/// not count calls per script).
pub fn evalsha_calls(info: &str) -> Option<u64> {
    let line = info.lines().find_map(|l| l.trim().strip_prefix("cmdstat_evalsha:"))?;
    line.split(',').find_map(|kv| kv.strip_prefix("calls=")).and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evalsha_calls_are_read_from_commandstats_and_nothing_else() {
        let info = "# Commandstats\r\ncmdstat_get:calls=9,usec=1\r\ncmdstat_evalsha:calls=66,usec=13238,usec_per_call=200.58,rejected_calls=0,failed_calls=3\r\ncmdstat_eval:calls=5\r\n";
        assert_eq!(evalsha_calls(info), Some(66));
        assert_eq!(evalsha_calls("# Commandstats\r\ncmdstat_eval:calls=5\r\n"), None, "EVAL is not EVALSHA");
        assert_eq!(evalsha_calls("cmdstat_evalsha:usec=3"), None);
    }

    #[test]
    fn pick_sums_each_series_over_its_labels_and_filters_the_shop_route() {
        let text = "# HELP x\n\
            seckill_gateway_reserve_duration_seconds_count{campaign=\"a\"} 10\n\
            seckill_gateway_reserve_duration_seconds_count{campaign=\"b\"} 5\n\
            seckill_gateway_reserve_duration_seconds_sum{campaign=\"a\"} 0.5\n\
            seckill_writer_lag{partition=\"0\"} 3\n\
            seckill_writer_lag{partition=\"1\"} 4\n\
            seckill_writer_orders_inserted_total 7\n\
            seckill_gateway_request_duration_seconds_count{route=\"shop\"} 2\n\
            seckill_gateway_request_duration_seconds_count{route=\"order\"} 900\n\
            seckill_gateway_request_duration_seconds_sum{route=\"shop\"} 0.25\n\
            not a metric line\n";
        let p = pick(text);
        assert_eq!(p["reserve_calls"], 15.0);
        assert_eq!(p["writer_lag"], 7.0);
        assert_eq!(p["orders_written"], 7.0);
        assert_eq!(p["shop_count"], 2.0);
        assert_eq!(p["shop_sum"], 0.25);
        assert!(!p.contains_key("gateway_queue"));
    }
}
