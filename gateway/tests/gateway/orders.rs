//! Reservations: exact stock under concurrency, forwarding, the upstream's failures, Redis down.

use std::collections::HashSet;
use std::time::Duration;

use fred::prelude::*;
use protocol::keys::CampaignKeys;
use protocol::scripts::PublishOutcome;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

async fn intake() -> MockServer {
    let upstream = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/internal/reservations"))
        .respond_with(Intake)
        .mount(&upstream)
        .await;
    upstream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_requests_from_500_users_sell_exactly_the_stock() {
    let redis = client(&e2e::stack::redis_url()).await.expect("the stack's Redis is up (e2e/stack.sh up)");
    let campaign = e2e::stack::unique("gw");
    assert_eq!(publish(&redis, &campaign, 100, 1).await, PublishOutcome::Published);
    let upstream = intake().await;
    let gw = Gateway::on_stack(&upstream, &campaign, "[limits]\nmax_inflight = 5000").await;

    let http = reqwest::Client::builder().pool_max_idle_per_host(2000).build().unwrap();
    let requests = (0..2000).map(|i| {
        let (http, gw, campaign) = (&http, &gw, &campaign);
        async move {
            let user = format!("user-{}", i % 500);
            let (status, body) = order(http, gw, campaign, &user).await;
            (user, status, body)
        }
    });
    let answers = futures::future::join_all(requests).await;

    let mut queued = Vec::new();
    for (user, status, body) in &answers {
        match body["code"].as_str() {
            Some("QUEUED") => {
                assert_eq!(*status, 202);
                assert_eq!(body["via"], "order-writer", "the happy path answer is the upstream's");
                queued.push((user.clone(), body["request_id"].as_str().unwrap().to_string()));
            }
            Some("SOLD_OUT") => assert_eq!(*status, 410),
            Some("LIMIT_REACHED") => assert_eq!(*status, 409),
            other => panic!("unexpected answer {status} {other:?}: {body}"),
        }
    }
    assert_eq!(queued.len(), 100, "exactly the stock is sold");
    let users: HashSet<_> = queued.iter().map(|(u, _)| u.clone()).collect();
    assert_eq!(users.len(), 100, "no user bought twice");

    let keys = CampaignKeys::new(&campaign);
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 0);
    let outbox: Vec<String> = redis.hkeys(&keys.outbox).await.unwrap();
    let outbox: HashSet<_> = outbox.into_iter().collect();
    let queued_ids: HashSet<_> = queued.iter().map(|(_, id)| id.clone()).collect();
    assert_eq!(outbox, queued_ids, "the outbox holds exactly the 100");

    let received = upstream.received_requests().await.unwrap();
    assert_eq!(received.len(), 100, "the upstream saw exactly the 100");
    let forwarded: HashSet<_> =
        received.iter().map(|r| opened(r).expect("signature verifies").request_id).collect();
    assert_eq!(forwarded, queued_ids);
}

#[tokio::test]
async fn upstream_down_slow_or_failing_still_answers_queued_and_keeps_the_record() {
    let redis = client(&e2e::stack::redis_url()).await.unwrap();
    let campaign = e2e::stack::unique("gw");
    publish(&redis, &campaign, 10, 1).await;
    let http = reqwest::Client::new();
    let outbox = CampaignKeys::new(&campaign).outbox;

    // Down: nothing listens on the order writer's port.
    let closed = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start(&GatewayConf::new(&e2e::stack::redis_url(), &closed, &campaign, "")).await;
    let (status, body) = order(&http, &gw, &campaign, "down-1").await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
    let id = body["request_id"].as_str().unwrap();
    assert_eq!(body["poll_url"], format!("/seckill/{campaign}/result/{id}"));
    let record: Option<String> = redis.hget(&outbox, id).await.unwrap();
    assert!(record.unwrap().contains("\"down-1\""), "the record stays in the outbox");
    drop(gw);

    // Failing (500) and slow (past read_timeout_ms): same answer, one upstream call each.
    for (user, template) in [
        ("fail-1", ResponseTemplate::new(500)),
        ("slow-1", ResponseTemplate::new(202).set_delay(Duration::from_secs(3))),
    ] {
        let upstream = MockServer::start().await;
        Mock::given(method("POST")).respond_with(template).mount(&upstream).await;
        let gw = Gateway::on_stack(&upstream, &campaign, "").await;
        let (status, body) = order(&http, &gw, &campaign, user).await;
        assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{user}: {body}");
        let id = body["request_id"].as_str().unwrap();
        let record: Option<String> = redis.hget(&outbox, id).await.unwrap();
        assert!(record.is_some(), "{user}: the record stays in the outbox");
        assert_eq!(
            upstream.received_requests().await.unwrap().len(),
            1,
            "{user}: forwarded once, never retried"
        );
    }
    let stock: i64 = redis.get(CampaignKeys::new(&campaign).stock).await.unwrap();
    assert_eq!(stock, 7, "three reservations, each counted once");
}

/// A gateway over a private redis-server, a campaign of 10 (limit 1) published there, and one
/// order by `first_user` that went through: where the Redis failure tests start.
async fn over_private_redis(
    first_user: &str,
) -> (RedisServer, Client, String, MockServer, Gateway, reqwest::Client) {
    let private = RedisServer::start().await;
    let redis = client(&private.url()).await.unwrap();
    let campaign = e2e::stack::unique("gw");
    publish(&redis, &campaign, 10, 1).await;
    let upstream = intake().await;
    let gw =
        Gateway::start(&GatewayConf::new(&private.url(), &upstream.address().to_string(), &campaign, ""))
            .await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let (status, body) = order(&http, &gw, &campaign, first_user).await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
    (private, redis, campaign, upstream, gw, http)
}

#[tokio::test]
async fn redis_down_answers_service_degraded() {
    let (mut private, _redis, campaign, upstream, gw, http) = over_private_redis("before").await;

    private.kill();
    for user in ["after-1", "after-2"] {
        let (status, body) = order(&http, &gw, &campaign, user).await;
        assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_DEGRADED")), "{body}");
    }
    assert_eq!(
        upstream.received_requests().await.unwrap().len(),
        1,
        "nothing forwarded without a reservation"
    );

    // A gateway started while Redis is down starts anyway and answers the same.
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let gw2 =
        Gateway::start(&GatewayConf::new(&nowhere, &upstream.address().to_string(), &campaign, "")).await;
    let (status, body) = order(&http, &gw2, &campaign, "u").await;
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_DEGRADED")), "{body}");
}

#[tokio::test]
async fn publish_twice_is_harmless_and_a_live_campaign_is_never_reset() {
    let redis = client(&e2e::stack::redis_url()).await.unwrap();
    let campaign = e2e::stack::unique("gw");
    let stock_key = CampaignKeys::new(&campaign).stock;
    assert_eq!(publish(&redis, &campaign, 10, 1).await, PublishOutcome::Published);
    assert_eq!(publish(&redis, &campaign, 10, 1).await, PublishOutcome::Unchanged);
    let stock: i64 = redis.get(&stock_key).await.unwrap();
    assert_eq!(stock, 10);

    let upstream = intake().await;
    let gw = Gateway::on_stack(&upstream, &campaign, "").await;
    let (status, _) = order(&reqwest::Client::new(), &gw, &campaign, "first").await;
    assert_eq!(status, 202);

    let again = publish(&redis, &campaign, 500, 1).await;
    assert!(matches!(again, PublishOutcome::RefusedLive { ref state, .. } if state == "LIVE"), "{again:?}");
    let stock: i64 = redis.get(&stock_key).await.unwrap();
    assert_eq!(stock, 9, "a LIVE campaign keeps its stock");
}

/// Redis stalls past the timeout while a reservation call is on its way: the call still runs
/// when Redis comes back, and the gateway's undo, sent after it on the same connection, gives
/// the unit back. The client is told "nothing was reserved", and that is true.
#[tokio::test]
async fn a_reservation_whose_answer_is_late_is_undone() {
    let (private, redis, campaign, _upstream, gw, http) = over_private_redis("on-time").await;

    // A script that keeps Redis busy for 800 ms (the gateway's bound is 200 ms, its undo's 1 s).
    let staller = client(&private.url()).await.unwrap();
    let probe = client(&private.url()).await.unwrap();
    let stall = tokio::spawn(async move {
        let busy = "local t = redis.call('TIME') local t0 = t[1] * 1000000 + t[2] \
                    repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - t0 > 800000 return 1";
        staller.eval::<i64, _, _, _>(busy, Vec::<String>::new(), Vec::<String>::new()).await
    });
    // The order goes out only once Redis is busy: a PING no longer answers within 50 ms.
    let busy =
        eventually(Duration::from_secs(5), || {
            let probe = probe.clone();
            async move {
                tokio::time::timeout(Duration::from_millis(50), probe.ping::<String>(None)).await.is_err()
            }
        })
        .await;
    assert!(busy, "the stalling script did not start");
    let (status, body) = order(&http, &gw, &campaign, "late").await;
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_DEGRADED")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("nothing was reserved"), "{body}");
    assert_eq!(stall.await.unwrap().unwrap(), 1);

    let keys = CampaignKeys::new(&campaign);
    let late_id = body["request_id"].as_str().unwrap();
    let released: bool = redis.hexists(&keys.released, late_id).await.unwrap();
    assert!(released, "the late call did reserve once Redis was back, and was undone");
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 9, "only the on-time reservation holds a unit");
    let outbox: Vec<String> = redis.hkeys(&keys.outbox).await.unwrap();
    assert_eq!(outbox.len(), 1, "only the on-time reservation waits for an order");
    let held: Option<i64> = redis.hget(&keys.bought, "late").await.unwrap();
    assert_eq!(held, None, "the late user holds nothing and may try again");
    let (status, body) = order(&http, &gw, &campaign, "late").await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
}
