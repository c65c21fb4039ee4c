//! `/metrics` of both binaries after a small sale on the stack (Redis, Kafka, PostgreSQL, the
//! real order writer): the counts are the sale's (the gateway's QUEUED answers are the orders the
//! writer wrote), every metric the Grafana dashboard reads is exported, and the request id of
//! each QUEUED access line is the `request_id` of an order row.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use crate::sale::{Sale, PARTITIONS};
use crate::support::*;

const STOCK: i64 = 20;
const BUYERS: usize = 30;

/// Every `seckill_…` name the dashboard's queries read.
fn dashboard_metrics() -> BTreeSet<String> {
    let path = fixtures::stack::workspace_root().join("conf/grafana-dashboard.json");
    let text = std::fs::read_to_string(&path).expect("the dashboard ships in conf/");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        exprs.push(var["definition"].as_str().unwrap().to_string());
    }
    let mut names = BTreeSet::new();
    for expr in exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("seckill_") {
            let tail = &rest[at..];
            let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
            names.insert(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_after_a_small_sale_are_the_sales_counts_and_feed_the_dashboard() {
    let sale = Sale::new(STOCK).await;
    let writer_admin = free_port();
    let writer = sale.start_writer_with(Duration::from_secs(600), Some(writer_admin)).await;
    let gw_admin = free_port();
    let mut conf = sale.gateway_conf(&fixtures::stack::kafka_broker(), "");
    conf.sold_out_ttl_ms = 60_000;
    // A second campaign with a waiting room, so that the room's families are exported too (a
    // campaign without a room has none).
    let room = format!("{}r", sale.campaign);
    conf.campaigns.push((room.clone(), campaign_toml(&room, "[waiting_room]\nadmit_per_sec = 10")));
    conf.tables = format!(
        "[admin]\nlisten = \"127.0.0.1:{gw_admin}\"\n\n[access_log]\noutput = \"access.log\"\nformat = \"json\"\n"
    );
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();

    // One request per buyer, one after the other: the first STOCK are QUEUED, the rest SOLD_OUT.
    let mut queued = HashSet::new();
    for i in 0..BUYERS {
        let (status, body) = order(&http, &gw, &sale.campaign, &format!("buyer-{i}")).await;
        let expected = if i < STOCK as usize { (202, "QUEUED") } else { (410, "SOLD_OUT") };
        assert_eq!((status, body["code"].as_str().unwrap()), expected, "{body}");
        if status == 202 {
            queued.insert(body["request_id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(sale.wait_orders(&queued).await, queued, "every QUEUED answer is an order");

    // The writer's counts settle once its offsets are stored; the gateway's produce acks too.
    let writer_url = format!("http://127.0.0.1:{writer_admin}/metrics");
    let gw_url = format!("http://127.0.0.1:{gw_admin}/metrics");
    let settled = eventually(Duration::from_secs(30), || {
        let (http, writer_url, gw_url) = (http.clone(), writer_url.clone(), gw_url.clone());
        async move {
            let (w, g) = (scrape(&http, &writer_url).await, scrape(&http, &gw_url).await);
            sample(&w, "seckill_writer_records_committed_total", &[]) == STOCK as f64
                && sample(&w, "seckill_writer_lag", &[]) == 0.0
                && sample(&g, "seckill_gateway_kafka_produced_total", &[]) == STOCK as f64
        }
    })
    .await;
    let (w, g) = (scrape(&http, &writer_url).await, scrape(&http, &gw_url).await);
    assert!(settled, "writer:\n{w:#?}\ngateway:\n{g:#?}");

    // The gateway: the answers of the sale.
    let c = sale.campaign.as_str();
    let answers =
        |code: &str| sample(&g, "seckill_gateway_order_answers_total", &[("campaign", c), ("code", code)]);
    assert_eq!((answers("QUEUED"), answers("SOLD_OUT")), (STOCK as f64, (BUYERS as i64 - STOCK) as f64));
    assert_eq!(sample(&g, "seckill_gateway_sold_out", &[("campaign", c)]), 1.0, "the flag is set");
    assert!(sample(&g, "seckill_gateway_kafka_batches_total", &[]) >= 1.0);
    assert_eq!(sample(&g, "seckill_gateway_kafka_dropped_total", &[]), 0.0);
    assert_eq!(sample(&g, "seckill_gateway_kafka_queue_depth", &[]), 0.0);
    assert_eq!(sample(&g, "seckill_gateway_redis_errors_total", &[]), 0.0);
    assert_eq!(
        sample(&g, "seckill_gateway_reserve_duration_seconds_count", &[]),
        (STOCK + 1) as f64,
        "one Redis call per reservation, and the one that found the stock gone (then the flag)"
    );

    // The writer: the same orders.
    let queued_n = answers("QUEUED");
    assert_eq!(sample(&w, "seckill_writer_orders", &[("status", "PENDING_PAYMENT")]), queued_n);
    assert_eq!(sample(&w, "seckill_writer_orders_inserted_total", &[]), queued_n);
    assert_eq!(sample(&w, "seckill_writer_records_consumed_total", &[]), queued_n);
    assert_eq!(
        sample(&w, "seckill_writer_batch_size_sum", &[]),
        queued_n,
        "every record in a committed batch"
    );
    assert!(sample(&w, "seckill_writer_transaction_seconds_count", &[]) >= 1.0);
    assert_eq!(sample(&w, "seckill_writer_refusals_total", &[]), 0.0);
    assert_eq!(sample(&w, "seckill_writer_dead_letters_total", &[]), 0.0);
    assert_eq!(sample(&w, "seckill_writer_partition_up", &[]), PARTITIONS as f64);
    assert_eq!(sample(&w, "seckill_writer_scrape_db_up", &[]), 1.0);
    for url in
        [format!("http://127.0.0.1:{writer_admin}/readyz"), format!("http://127.0.0.1:{gw_admin}/readyz")]
    {
        assert_eq!(http.get(&url).send().await.unwrap().status().as_u16(), 200, "{url}");
    }

    // Every metric the dashboard reads is exported by one of the two.
    let exported: HashSet<&str> = g.iter().chain(&w).map(|s| s.name.as_str()).collect();
    let missing: Vec<String> =
        dashboard_metrics().into_iter().filter(|n| !exported.contains(n.as_str())).collect();
    assert!(missing.is_empty(), "the dashboard reads metrics nobody exports: {missing:?}");
    assert!(dashboard_metrics().len() > 25, "the dashboard reads both binaries' metrics");

    // The request id, from the access line to the order row. The access log is written in the
    // background (its queue is flushed every 100 ms): wait, bounded, for the last lines.
    let orders = sale.orders().await;
    let logged = || {
        let lines = std::fs::read_to_string(gw.dir.join("access.log")).unwrap_or_default();
        lines
            .lines()
            .filter(|l| l.ends_with('}'))
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
            .filter(|v| v["code"] == "QUEUED")
            .map(|v| v["request_id"].as_str().unwrap().to_string())
            .collect::<HashSet<String>>()
    };
    let want = orders.len();
    eventually(Duration::from_secs(10), || {
        let n = logged().len();
        async move { n >= want }
    })
    .await;
    assert_eq!(logged(), orders, "each QUEUED access line's id is an order's request_id");
    writer.stop().await;
}
