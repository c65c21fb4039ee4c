//! The live view of a campaign on the order writer's admin listener: `GET /view/ID` (a page that
//! asks every second) and `GET /api/campaigns/ID` (the JSON behind it), both behind `[admin]
//! token`. One snapshot reads PostgreSQL (the orders by status), Redis (the control hash, stock
//! left and outbox per bucket), every gateway of `[fleet]` (`/campaigns` and `/metrics`: state,
//! version, file digest, sold-out flag, in flight, answers by code, the room's queue) and this
//! writer's own metrics (lag); the rates are the differences between two snapshots.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use fred::prelude::Client as RedisClient;
use serde_json::{json, Value};
use sqlx::PgPool;

use super::fleet::{Gateways, Seen};
use crate::conf::FleetConf;

/// The page (its script asks `/api/campaigns/ID` every second with the token of the URL's
/// fragment, which never reaches a server or a log).
pub const PAGE: &str = include_str!("live.html");

/// Counters seen by the last snapshot, for the rates: (series) → (value, when).
#[derive(Debug, Default)]
pub struct Rates(Mutex<HashMap<String, (f64, Instant)>>);

impl Rates {
    /// The rate per second of `series` since it was last seen (`None` the first time), and
    /// remembers `value`.
    pub fn per_sec(&self, series: &str, value: f64) -> Option<f64> {
        let now = Instant::now();
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let before = seen.insert(series.to_string(), (value, now));
        let (v, at) = before?;
        let secs = now.duration_since(at).as_secs_f64();
        (secs > 0.05).then(|| ((value - v) / secs).max(0.0))
    }
}

/// What a snapshot reads.
pub struct Sources<'a> {
    /// PostgreSQL.
    pub pool: &'a PgPool,
    /// Redis.
    pub redis: &'a RedisClient,
    /// The gateways.
    pub fleet: &'a FleetConf,
    /// This writer's lag, summed over its partitions.
    pub lag: i64,
    /// The rates' memory.
    pub rates: &'a Rates,
    /// The audit's thresholds.
    pub thresholds: &'a super::audit::Thresholds,
}

/// The value of each sample of `name` in Prometheus text `text` whose labels include `labels`,
/// with the value of label `by` (e.g. each `code`).
pub fn samples(text: &str, name: &str, labels: &[(&str, &str)], by: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let Some((inside, value)) = rest.strip_prefix('{').and_then(|r| r.split_once("} ")) else { continue };
        let pairs: HashMap<&str, &str> = inside
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
            .collect();
        if labels.iter().all(|(k, v)| pairs.get(k) == Some(v)) {
            let key = pairs.get(by).copied().unwrap_or("").to_string();
            out.push((key, value.trim().parse().unwrap_or(0.0)));
        }
    }
    out
}

/// One snapshot of campaign `id`; `None` when no such campaign is in PostgreSQL.
pub async fn snapshot(src: &Sources<'_>, id: &str) -> anyhow::Result<Option<Value>> {
    let Ok(row) = super::operate::published(src.pool, id).await else { return Ok(None) };
    let control = super::operate::read_control(src.redis, id).await?;
    let by_status: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT status, count(*), count(*) FILTER (WHERE redis_released) FROM orders WHERE campaign_id = $1 GROUP BY status",
    )
    .bind(id)
    .fetch_all(src.pool)
    .await?;
    let count = |s: &str| by_status.iter().find(|r| r.0 == s).map_or(0, |r| r.1);
    let released = by_status.iter().map(|r| r.2).sum::<i64>();
    let orders = count("PENDING_PAYMENT") + count("PAID") + count("CLOSED");
    let buckets = stock_left(src.redis, id, row.buckets).await?;
    let left: i64 = buckets.iter().map(|b| b["left"].as_i64().unwrap_or(0)).sum();
    let (gateways, answers) = gateways(src, id).await;
    let ends_at = control.ends_at_after(row.ends_at);
    let audit = winners_audit(src, id).await?;
    Ok(Some(json!({
        "id": id,
        "at": chrono::Utc::now().to_rfc3339(),
        "state": control.state.as_str(),
        "version": control.version,
        "published_state": row.state,
        "ends_at": ends_at.to_rfc3339(),
        "stock": {"total": row.total_stock, "added": row.stock_added, "sold": row.sold, "left": left, "buckets": buckets},
        "orders": {"total": orders, "pending": count("PENDING_PAYMENT"), "paid": count("PAID"), "closed": count("CLOSED"), "released": released},
        "answers": answers,
        "gateways": gateways,
        "writer": {"lag": src.lag, "orders_per_sec": src.rates.per_sec(&format!("orders/{id}"), orders as f64)},
        "audit": audit,
    })))
}

/// The audit of the winners so far (`campaign audit` without access logs: no attempts, so no
/// success rates), its flagged groups.
async fn winners_audit(src: &Sources<'_>, id: &str) -> anyhow::Result<Value> {
    let a = super::audit::source::audit_of(src.pool, id, &[], src.thresholds).await?;
    let flagged: Vec<Value> = a
        .flagged()
        .map(|g| json!({"kind": g.kind, "key": g.key, "winners": g.winners, "units": g.units, "flags": g.flags}))
        .collect();
    Ok(json!({"winners": a.crowd.winners, "groups": a.groups.len(), "flagged": flagged}))
}

/// Each bucket's stock left and outbox.
async fn stock_left(redis: &RedisClient, id: &str, buckets: i32) -> anyhow::Result<Vec<Value>> {
    let now = super::operate::buckets_now(redis, id, buckets).await?;
    Ok(now
        .iter()
        .map(|b| json!({"index": b.index, "left": b.stock.unwrap_or(0), "outbox": b.outbox}))
        .collect())
}

/// Each gateway's view and metrics, and the answers by code summed over the gateways (totals
/// and per second).
async fn gateways(src: &Sources<'_>, id: &str) -> (Vec<Value>, Value) {
    if src.fleet.gateways.is_empty() {
        return (Vec::new(), json!({}));
    }
    let Ok(fleet) = Gateways::new(src.fleet) else { return (Vec::new(), json!({})) };
    let (seen, scraped) = tokio::join!(fleet.serving(), fleet.metrics());
    let mut totals: HashMap<String, (f64, f64)> = HashMap::new();
    let mut out = Vec::new();
    for (s, (gateway, text)) in seen.iter().zip(scraped) {
        let text = text.unwrap_or_default();
        for (code, v) in samples(&text, "seckill_gateway_order_answers_total", &[("campaign", id)], "code") {
            let rate = src.rates.per_sec(&format!("{gateway}/{id}/{code}"), v).unwrap_or(0.0);
            let t = totals.entry(code).or_default();
            *t = (t.0 + v, t.1 + rate);
        }
        out.push(gateway_view(s, id, &text, src.rates));
    }
    let mut codes: Vec<_> = totals.into_iter().filter(|(_, (total, _))| *total > 0.0).collect();
    codes.sort_by(|a, b| a.0.cmp(&b.0));
    let answers =
        codes.into_iter().map(|(c, (total, rate))| (c, json!({"total": total, "per_sec": rate}))).collect();
    (out, Value::Object(answers))
}

fn gateway_view(s: &Seen, id: &str, metrics: &str, rates: &Rates) -> Value {
    let one = |name: &str| samples(metrics, name, &[("campaign", id)], "campaign").first().map(|(_, v)| *v);
    let admitted = one("seckill_gateway_room_admitted_total");
    let admit_rate = admitted.and_then(|v| rates.per_sec(&format!("{}/{id}/admitted", s.gateway), v));
    match (&s.answer, s.campaign(id)) {
        (Err(e), _) => json!({"gateway": s.gateway, "error": e}),
        (Ok(_), None) => json!({"gateway": s.gateway, "error": format!("does not serve campaign {id}")}),
        (Ok(_), Some(c)) => json!({
            "gateway": s.gateway, "state": c.state, "version": c.version, "digest": c.digest,
            "sold_out": c.sold_out, "selling": c.selling, "disagreements": c.disagreements,
            "in_flight": c.in_flight, "room_queue": one("seckill_gateway_room_queue_length"),
            "admit_per_sec": admit_rate, "eta_error_s": one("seckill_gateway_room_eta_error_seconds"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_by_their_labels() {
        let text = "# HELP x\nseckill_gateway_order_answers_total{campaign=\"a\",code=\"QUEUED\"} 5\n\
                    seckill_gateway_order_answers_total{campaign=\"a\",code=\"SOLD_OUT\"} 7\n\
                    seckill_gateway_order_answers_total{campaign=\"b\",code=\"QUEUED\"} 1\n";
        let got = samples(text, "seckill_gateway_order_answers_total", &[("campaign", "a")], "code");
        assert_eq!(got, vec![("QUEUED".to_string(), 5.0), ("SOLD_OUT".to_string(), 7.0)]);
        assert!(samples(text, "seckill_gateway_order_answers_total", &[("campaign", "c")], "code").is_empty());
    }

    #[test]
    fn a_rate_needs_two_readings() {
        let r = Rates::default();
        assert_eq!(r.per_sec("s", 10.0), None);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let rate = r.per_sec("s", 20.0).unwrap();
        assert!(rate > 10.0 && rate < 110.0, "{rate}");
    }
}
