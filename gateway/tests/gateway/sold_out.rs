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
    let private = RedisServer::start().await;
    let redis = client(&private.url()).await.unwrap();
    let campaign = e2e::stack::unique("gw");
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
