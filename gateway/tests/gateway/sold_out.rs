//! The local sold-out flag: after sold out, Redis is not called; a replenish message clears the
//! flag in every gateway process. Runs against a private Redis so that `INFO commandstats`
//! counts only this test's calls.

use std::time::Duration;

use fred::prelude::*;
use protocol::keys::REPLENISH_CHANNEL;
use protocol::scripts::ReleaseOutcome;
use wiremock::MockServer;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_sold_out_redis_is_not_called_until_a_replenish_message() {
    let private = PrivateRedis::start(&[]).await;
    let redis = client(&private.url()).await.unwrap();
    let campaign = fixtures::stack::unique("gw");
    publish(&redis, &campaign, 3, 1).await;
    let upstream = MockServer::start().await;

    // Two gateway processes; flags live a minute, so only the message can clear them.
    let mut conf = GatewayConf::new(&private.url(), &upstream.address().to_string(), &campaign, "");
    conf.sold_out_ttl_ms = 60_000;
    let (a, b) = (Gateway::start(&conf).await, Gateway::start(&conf).await);
    let subscribed = eventually(Duration::from_secs(10), || async {
        let n: Vec<(String, i64)> = redis.pubsub_numsub(REPLENISH_CHANNEL).await.unwrap_or_default();
        n.first().is_some_and(|(_, n)| *n >= 2)
    })
    .await;
    assert!(subscribed, "both gateways subscribe to the replenish channel");

    let http = reqwest::Client::new();
    let mut bought = Vec::new();
    for user in ["buyer-1", "buyer-2", "buyer-3"] {
        let (status, body) = order(&http, &a, &campaign, user).await;
        assert_eq!(status, 202, "{body}");
        bought.push((user, body["request_id"].as_str().unwrap().to_string()));
    }
    // Each gateway learns "sold out" from Redis once...
    for gw in [&a, &b] {
        let (status, body) = order(&http, gw, &campaign, "late-0").await;
        assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "{body}");
    }
    // ...and then answers without it.
    let before = evalsha_calls(&redis).await;
    for i in 0..25 {
        for gw in [&a, &b] {
            let (status, body) = order(&http, gw, &campaign, &format!("late-{i}")).await;
            assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "{body}");
        }
    }
    assert_eq!(evalsha_calls(&redis).await - before, 0, "sold-out requests never reach Redis");

    // Two units come back (unpaid orders closed), and the order writer announces it.
    for (user, id) in &bought[..2] {
        let released =
            scripts().release(&redis, &protocol::keys::Bucket::single(&campaign), id, user, 1).await.unwrap();
        assert!(matches!(released, ReleaseOutcome::Released { .. }));
    }
    let receivers: i64 = redis.publish(REPLENISH_CHANNEL, campaign.as_str()).await.unwrap();
    assert_eq!(receivers, 2);

    // Each gateway's flag is cleared: each sells one of the two units. While a flag is still
    // set (the message is in flight) the answer is SOLD_OUT and nothing is reserved.
    for (name, gw) in [("a", &a), ("b", &b)] {
        let user = format!("after-replenish-{name}");
        let sold = eventually(Duration::from_secs(5), || {
            let (http, user, campaign) = (http.clone(), user.clone(), campaign.clone());
            async move { order(&http, gw, &campaign, &user).await.0 == 202 }
        })
        .await;
        assert!(sold, "gateway {name} reserved again after the replenish message");
    }
    let (status, _) = order(&http, &a, &campaign, "one-too-many").await;
    assert_eq!(status, 410);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_answered_again_from_the_nonce_never_sets_the_sold_out_flag() {
    let private = PrivateRedis::start(&[]).await;
    let redis = client(&private.url()).await.unwrap();
    let campaign = fixtures::stack::unique("gw");
    publish(&redis, &campaign, 1, 1).await;
    let upstream = MockServer::start().await;
    // The flag lives a minute: only a live sold-out answer may set it, only the message clears it.
    let mut conf = GatewayConf::new(&private.url(), &upstream.address().to_string(), &campaign, "");
    conf.sold_out_ttl_ms = 60_000;
    let gw = Gateway::start(&conf).await;
    let subscribed = eventually(Duration::from_secs(10), || async {
        let n: Vec<(String, i64)> = redis.pubsub_numsub(REPLENISH_CHANNEL).await.unwrap_or_default();
        n.first().is_some_and(|(_, n)| *n >= 1)
    })
    .await;
    assert!(subscribed, "the gateway subscribes to the replenish channel");
    let http = reqwest::Client::new();

    // A buys the one unit; B's signed request is refused SOLD_OUT, and B keeps it.
    let (status, body) = order(&http, &gw, &campaign, "buyer-a").await;
    assert_eq!(status, 202, "{body}");
    let a_id = body["request_id"].as_str().unwrap().to_string();
    let b = ticket(&http, &gw, &campaign, "buyer-b").await.unwrap();
    let kept = b.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
    let refused = b.send(&http, &gw.url(""), &kept).await;
    assert_eq!((refused.0, refused.1["code"].as_str()), (410, Some("SOLD_OUT")), "{}", refused.1);

    // A's unit comes back (release.lua sends the replenish message itself).
    let released = scripts()
        .release(&redis, &protocol::keys::Bucket::single(&campaign), &a_id, "buyer-a", 1)
        .await
        .unwrap();
    assert!(matches!(released, ReleaseOutcome::Released { .. }));

    // B resends the kept request until it reaches Redis again (the flag is cleared once the
    // message arrived): the first answer, SOLD_OUT, is replayed from the nonce.
    let reached = eventually(Duration::from_secs(10), || {
        let (http, b, kept, redis, base) = (http.clone(), b.clone(), kept.clone(), redis.clone(), gw.url(""));
        async move {
            let before = evalsha_calls(&redis).await;
            let again = b.send(&http, &base, &kept).await;
            assert_eq!((again.0, again.1["code"].as_str()), (410, Some("SOLD_OUT")), "{}", again.1);
            evalsha_calls(&redis).await > before
        }
    })
    .await;
    assert!(reached, "the resent request reached Redis once the replenish message arrived");

    // C's new order on the same gateway is asked of Redis and reserves the unit that came back.
    let before = evalsha_calls(&redis).await;
    let (status, body) = order(&http, &gw, &campaign, "buyer-c").await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");
    assert!(evalsha_calls(&redis).await > before, "C's order was asked of Redis");
}
