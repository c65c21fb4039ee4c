//! Reservations answered by the gateway alone: QUEUED with the record in the outbox, Redis down
//! or late. (Exact stock under concurrency, with the records followed to orders: `sale.rs`.)

use std::time::Duration;

use fred::prelude::*;
use protocol::keys::CampaignKeys;
use protocol::scripts::PublishOutcome;
use wiremock::MockServer;

use crate::support::*;

/// An order writer's address where nothing listens: orders never go there.
fn nowhere() -> String {
    format!("127.0.0.1:{}", free_port())
}

#[tokio::test]
async fn a_reservation_is_answered_queued_by_the_gateway_and_its_record_waits_in_the_outbox() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    publish(&redis, &campaign, 10, 1).await;
    let http = reqwest::Client::new();
    let outbox = CampaignKeys::new(&campaign).outbox;

    // No order writer and no Kafka (a closed port each): the answer does not wait on them.
    let gw =
        Gateway::start(&GatewayConf::new(&fixtures::stack::redis_url(), &nowhere(), &campaign, "")).await;
    for user in ["down-1", "down-2", "down-3"] {
        let (status, body) = order(&http, &gw, &campaign, user).await;
        assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
        let id = body["request_id"].as_str().unwrap();
        assert_eq!(body["poll_url"], format!("/seckill/{campaign}/result/{id}"));
        let record: Option<String> = redis.hget(&outbox, id).await.unwrap();
        assert!(record.unwrap().contains(&format!("\"{user}\"")), "the record stays in the outbox");
    }
    let stock: i64 = redis.get(CampaignKeys::new(&campaign).stock).await.unwrap();
    assert_eq!(stock, 7, "three reservations, each counted once");
    let (status, body) = order(&http, &gw, &campaign, "down-1").await;
    assert_eq!((status, body["code"].as_str()), (409, Some("LIMIT_REACHED")), "{body}");
}

/// A gateway over a private redis-server, a campaign of 10 (limit 1) published there, and one
/// order by `first_user` that went through: where the Redis failure tests start.
async fn over_private_redis(
    first_user: &str,
) -> (PrivateRedis, Client, String, MockServer, Gateway, reqwest::Client) {
    let private = PrivateRedis::start(&[]).await;
    let redis = client(&private.url()).await.unwrap();
    let campaign = fixtures::stack::unique("gw");
    publish(&redis, &campaign, 10, 1).await;
    let upstream = MockServer::start().await;
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
    assert!(upstream.received_requests().await.unwrap().is_empty(), "orders never go to the order writer");

    // A gateway started while Redis is down starts anyway and answers the same.
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let gw2 =
        Gateway::start(&GatewayConf::new(&nowhere, &upstream.address().to_string(), &campaign, "")).await;
    let (status, body) = order(&http, &gw2, &campaign, "u").await;
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_DEGRADED")), "{body}");
}

#[tokio::test]
async fn publish_twice_is_harmless_and_a_live_campaign_is_never_reset() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    let stock_key = CampaignKeys::new(&campaign).stock;
    assert_eq!(publish(&redis, &campaign, 10, 1).await, PublishOutcome::Published);
    assert_eq!(publish(&redis, &campaign, 10, 1).await, PublishOutcome::Unchanged);
    let stock: i64 = redis.get(&stock_key).await.unwrap();
    assert_eq!(stock, 10);

    let gw =
        Gateway::start(&GatewayConf::new(&fixtures::stack::redis_url(), &nowhere(), &campaign, "")).await;
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
    // The order goes out only once Redis is busy.
    let late = ticket(&http, &gw, &campaign, "late").await.unwrap();
    let stall = stall_redis(&private.url(), 800).await;
    let (status, body) = late.order(&http, &gw.url(""), 1).await;
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
    let (status, body) = late.order(&http, &gw.url(""), 1).await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
}
