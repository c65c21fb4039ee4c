//! What the report reads: PostgreSQL, Redis, the reconciliation, the audit, the gateways'
//! metrics.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use fred::prelude::*;
use protocol::keys::Bucket;
use sqlx::PgPool;

use super::{Args, Campaign, Orders, Sale, Second, Stock, Verdict};
use crate::campaign::audit;
use crate::workers::reconcile;

/// The campaign's row; an error naming it when it does not exist.
pub async fn campaign(pg: &PgPool, id: &str) -> anyhow::Result<Campaign> {
    type Row = (String, String, i64, i64, i64, i64, String, String, i64, i32);
    let row: Option<Row> = sqlx::query_as(
        "SELECT sku, state, total_stock, sold, per_user_limit, price_cents,
                to_char(starts_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                to_char(ends_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                extract(epoch FROM starts_at)::int8, buckets
           FROM campaigns WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pg)
    .await
    .context("reading the campaign")?;
    let Some((
        sku,
        state,
        total_stock,
        sold,
        per_user_limit,
        price_cents,
        starts_at,
        ends_at,
        start,
        buckets,
    )) = row
    else {
        anyhow::bail!("no campaign {id:?} in the database");
    };
    Ok(Campaign {
        id: id.to_string(),
        sku,
        state,
        total_stock,
        sold,
        per_user_limit,
        price_cents,
        starts_at,
        ends_at,
        starts_at_unix: start,
        buckets: buckets.max(1) as u32,
    })
}

/// The orders by status, payments, refusals and events of campaign `id`.
pub async fn orders(pg: &PgPool, id: &str) -> anyhow::Result<Orders> {
    let mut o = Orders::default();
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT status, count(*), COALESCE(sum(qty), 0)::int8, COALESCE(sum(amount_cents), 0)::int8,
                count(*) FILTER (WHERE redis_released)
           FROM orders WHERE campaign_id = $1 GROUP BY status",
    )
    .bind(id)
    .fetch_all(pg)
    .await
    .context("reading the orders")?;
    for (status, n, units, cents, released) in rows {
        o.orders += n;
        o.units += units;
        match status.as_str() {
            "PAID" => (o.paid, o.paid_cents) = ((n, units), cents),
            "CLOSED" => (o.closed, o.closed_released) = ((n, units), released),
            _ => o.pending = (n, units),
        }
    }
    o.buyers = sqlx::query_scalar("SELECT count(DISTINCT user_id) FROM orders WHERE campaign_id = $1")
        .bind(id)
        .fetch_one(pg)
        .await?;
    let pay: (Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM paid_at - created_at))::float8,
                percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM paid_at - created_at))::float8
           FROM orders WHERE campaign_id = $1 AND paid_at IS NOT NULL",
    )
    .bind(id)
    .fetch_one(pg)
    .await?;
    o.pay_secs_p50_p90 = pay.0.zip(pay.1);
    o.refused = sqlx::query_as::<_, (String, i64)>(
        "SELECT status, count(*) FROM reservation_results WHERE campaign_id = $1 GROUP BY status",
    )
    .bind(id)
    .fetch_all(pg)
    .await?
    .into_iter()
    .collect();
    o.events = events(pg, id).await?;
    Ok(o)
}

/// The order events of campaign `id` by kind: (produced, waiting). Produced rows are deleted
/// after a day (`sql/0006_order_events.sql`): an old sale shows fewer.
async fn events(pg: &PgPool, id: &str) -> anyhow::Result<BTreeMap<String, (i64, i64)>> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT e.kind, count(*) FILTER (WHERE e.produced_at IS NOT NULL),
                count(*) FILTER (WHERE e.produced_at IS NULL)
           FROM order_events e JOIN orders o ON o.id = e.order_id
          WHERE o.campaign_id = $1 GROUP BY e.kind",
    )
    .bind(id)
    .fetch_all(pg)
    .await
    .context("reading the order events")?;
    Ok(rows.into_iter().map(|(k, p, w)| (k, (p, w))).collect())
}

/// Orders reserved, paid and closed per second, from the window's start `start` (unix seconds).
pub async fn timeline(pg: &PgPool, id: &str, start: i64) -> anyhow::Result<Vec<Second>> {
    let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT t, count(*) FILTER (WHERE what = 'o'), count(*) FILTER (WHERE what = 'p'),
                count(*) FILTER (WHERE what = 'c')
           FROM (SELECT floor(extract(epoch FROM at))::int8 - $2 AS t, what
                   FROM orders, LATERAL (VALUES (reserved_at, 'o'), (paid_at, 'p'), (closed_at, 'c')) v(at, what)
                  WHERE campaign_id = $1 AND at IS NOT NULL) s
          GROUP BY t ORDER BY t",
    )
    .bind(id)
    .bind(start)
    .fetch_all(pg)
    .await
    .context("reading the timeline")?;
    Ok(rows.into_iter().map(|(t, ordered, paid, closed)| Second { t, ordered, paid, closed }).collect())
}

/// Each bucket's stock left, the stats hashes summed, the outbox's size and the units held.
pub async fn stock(redis: &Client, id: &str, buckets: u32) -> anyhow::Result<Stock> {
    let mut s = Stock::default();
    for b in Bucket::all(id, buckets) {
        let left: Option<i64> = redis.get(&b.keys.stock).await?;
        s.left.push(left.unwrap_or(0));
        let stats: HashMap<String, String> = redis.hgetall(&b.keys.stats).await?;
        for (k, v) in stats {
            *s.stats.entry(k).or_default() += v.parse::<i64>().unwrap_or(0);
        }
        let outbox: i64 = redis.hlen(&b.keys.outbox).await?;
        s.outbox += outbox;
        let bought: HashMap<String, i64> = redis.hgetall(&b.keys.bought).await?;
        s.held += bought.values().sum::<i64>();
    }
    Ok(s)
}

/// The reconciliation without repair (its equation, [`reconcile::reconcile`]).
pub async fn verdict(
    conns: &crate::app::Connections<'_>,
    pg: &PgPool,
    redis: &Client,
    id: &str,
) -> anyhow::Result<Verdict> {
    let scripts = conns.scripts()?;
    let stores = reconcile::Stores {
        pool: pg,
        redis,
        scripts: &scripts,
        topic: None,
        sweep_age: conns.conf().sweep_age,
        between_reads: None,
    };
    let rep = reconcile::reconcile(stores, id, false).await.context("reconciliation")?;
    let mut differences = BTreeMap::new();
    for d in &rep.differences {
        *differences.entry(d.kind.as_str().to_string()).or_default() += 1;
    }
    Ok(Verdict {
        redis: rep.redis_balanced,
        postgres: rep.pg_balanced,
        across: rep.across_balanced,
        differences,
        text: rep.text,
    })
}

/// The answers of campaign `id` by code in a Prometheus text exposition: the samples of
/// `seckill_gateway_order_answers_total{campaign="<id>",code="<code>"}`.
pub fn answers_in(text: &str, id: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("seckill_gateway_order_answers_total{")) {
        let Some((labels, value)) = line.split_once('}') else { continue };
        let label = |name: &str| {
            let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
            labels[start..].split('"').next()
        };
        if label("campaign") != Some(id) {
            continue;
        }
        let (Some(code), Ok(n)) = (label("code"), value.trim().parse::<f64>()) else { continue };
        *out.entry(code.to_string()).or_default() += n as u64;
    }
    out
}

/// The answers by code summed over the gateways' `/metrics` at `urls`.
pub async fn answers(urls: &[String], id: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10)).build()?;
    let mut out = BTreeMap::new();
    for url in urls {
        let text = http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("reading {url}"))?
            .text()
            .await?;
        for (code, n) in answers_in(&text, id) {
            *out.entry(code).or_default() += n;
        }
    }
    Ok(out)
}

/// Everything the report shows of campaign `id`.
pub async fn sale(
    conns: &crate::app::Connections<'_>,
    id: &str,
    conf: &std::path::Path,
    args: &Args,
) -> anyhow::Result<Sale> {
    let thresholds = args.audit.thresholds(audit::source::conf_thresholds(conf)?)?;
    let pg = conns.postgres(crate::app::COMMAND_POOL).await?;
    let campaign = campaign(&pg, id).await?;
    let redis = conns.redis().await?;
    let answers = match args.gateway_metrics.is_empty() {
        true => None,
        false => Some(answers(&args.gateway_metrics, id).await?),
    };
    Ok(Sale {
        orders: orders(&pg, id).await?,
        timeline: timeline(&pg, id, campaign.starts_at_unix).await?,
        stock: stock(&redis, id, campaign.buckets).await?,
        reconcile: verdict(conns, &pg, &redis, id).await?,
        answers,
        audit: audit::source::audit_of(&pg, id, &args.audit.access_logs, &thresholds).await?,
        made_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        campaign,
    })
}

#[cfg(test)]
mod tests {
    use super::answers_in;

    #[test]
    fn answers_are_read_from_the_metrics_of_the_campaign_only() {
        let text = "# HELP seckill_gateway_order_answers_total Order requests answered\n\
            seckill_gateway_order_answers_total{campaign=\"s1\",code=\"QUEUED\"} 12\n\
            seckill_gateway_order_answers_total{campaign=\"s1\",code=\"SOLD_OUT\"} 30\n\
            seckill_gateway_order_answers_total{campaign=\"s2\",code=\"QUEUED\"} 99\n\
            seckill_gateway_request_duration_seconds_count{route=\"order\"} 42\n";
        let a = answers_in(text, "s1");
        assert_eq!(a.into_iter().collect::<Vec<_>>(), [("QUEUED".into(), 12), ("SOLD_OUT".into(), 30)]);
        assert!(answers_in(text, "s3").is_empty());
    }
}
