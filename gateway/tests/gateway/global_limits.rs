//! A campaign's `[[global_limit]]` rules, counted in Redis: they hold across two gateway
//! processes, a refused request counts nowhere and reserves nothing, and when Redis is slow an
//! `open` rule lets the order on while a `closed` one refuses it.

use fred::prelude::*;
use protocol::keys::CampaignKeys;
use serde_json::Value;

use crate::support::*;

fn code(reply: &(u16, Value)) -> (u16, &str) {
    (reply.0, reply.1["code"].as_str().unwrap_or("?"))
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

const USER_RULE: &str = "[[global_limit]]\nby = \"user\"\nmax = 2\nwindow_secs = 60\non_error = \"closed\"\n";

#[tokio::test]
async fn a_user_rule_holds_across_two_gateways_on_one_redis() {
    let c = fixtures::cleanup::Campaign::new("gl");
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    publish(&redis, &c, 10, 1).await;
    let nowhere = format!("127.0.0.1:{}", free_port());
    let conf = GatewayConf::new(&fixtures::stack::redis_url(), &nowhere, &c, USER_RULE);
    let (one, two) = (Gateway::start(&conf).await, Gateway::start(&conf).await);
    let http = reqwest::Client::new();

    // Alice: reserved on one; her second order (on two) passes the rule (2 of 2) and meets the
    // per-user limit in the script; her third (on one again) is over the rule, which counted
    // both gateways' orders.
    assert_eq!(code(&order(&http, &one, &c, "alice").await), (202, "QUEUED"));
    assert_eq!(code(&order(&http, &two, &c, "alice").await), (409, "LIMIT_REACHED"));
    let third = order(&http, &one, &c, "alice").await;
    assert_eq!(code(&third), (429, "RATE_LIMITED"), "{third:?}");
    assert!(third.1["message"].as_str().unwrap_or("").contains("user"), "{third:?}");
    // Another user has an allowance of their own.
    assert_eq!(code(&order(&http, &two, &c, "bob").await), (202, "QUEUED"));

    // The refused request reserved nothing and counted nowhere: 2 sold, alice holds 1, and her
    // counter is at the rule's max (a refused request is not counted).
    let keys = CampaignKeys::new(&c);
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 8);
    let held: i64 = redis.hget(&keys.bought, "alice").await.unwrap();
    assert_eq!(held, 1);
    let window = (chrono::Utc::now().timestamp_millis() as u64) / 60_000;
    let counted: Option<i64> = redis.get(keys.global_limit("user", "alice", window)).await.unwrap();
    let before: Option<i64> =
        redis.get(keys.global_limit("user", "alice", window.saturating_sub(1))).await.unwrap();
    assert_eq!(counted.unwrap_or(0) + before.unwrap_or(0), 2, "two orders counted, the refused one not");
}

#[tokio::test]
async fn slow_redis_lets_an_open_rule_on_and_refuses_a_closed_one() {
    let private = PrivateRedis::start(&[]).await;
    let redis = client(&private.url()).await.unwrap();
    let (open, closed) = ("open", "closed");
    let rule = |on_error: &str| {
        format!(
            "[limits]\nglobal_timeout_ms = 20\n\n[[global_limit]]\nby = \"campaign\"\nmax = 1000\n\
             window_secs = 10\non_error = \"{on_error}\"\n"
        )
    };
    let nowhere = format!("127.0.0.1:{}", free_port());
    let mut conf = GatewayConf::new(&private.url(), &nowhere, open, "");
    conf.campaigns = vec![
        (open.into(), campaign_toml(open, &rule("open"))),
        (closed.into(), campaign_toml(closed, &rule("closed"))),
    ];
    // The reservation may wait out the stall below; the global limits may not.
    conf.redis_timeout_ms = 1000;
    for c in [open, closed] {
        publish(&redis, c, 10, 1).await;
    }
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let base = gw.url("");

    // Tokens first (the token endpoint spends its challenge in Redis), then Redis is made busy.
    let a = ticket(&http, &gw, open, "alice").await.unwrap();
    let b = ticket(&http, &gw, closed, "bob").await.unwrap();
    let (to_open, to_closed) =
        (a.sign(1, now(), &fixtures::client::nonce()), b.sign(1, now(), &fixtures::client::nonce()));
    let stall = stall_redis(&private.url(), 300).await;
    let (let_on, refused) = tokio::join!(a.send(&http, &base, &to_open), b.send(&http, &base, &to_closed));
    stall.await.unwrap().unwrap();

    assert_eq!(code(&let_on), (202, "QUEUED"), "open: the order went on to the reservation: {let_on:?}");
    assert_eq!(code(&refused), (503, "SERVICE_DEGRADED"), "{refused:?}");
    assert!(refused.1["message"].as_str().unwrap_or("").contains("global limits"), "{refused:?}");
    let stock = |c: &str| {
        let (redis, key) = (redis.clone(), CampaignKeys::new(c).stock);
        async move { redis.get::<i64, _>(key).await.unwrap() }
    };
    assert_eq!(stock(open).await, 9);
    assert_eq!(stock(closed).await, 10, "the refused order reserved nothing");

    // Redis answering again: the closed campaign sells.
    assert_eq!(code(&order(&http, &gw, closed, "carol").await), (202, "QUEUED"));
}

#[tokio::test]
async fn the_rules_are_counted_in_the_reservation_call_not_one_of_their_own() {
    let private = PrivateRedis::start(&[]).await;
    let redis = client(&private.url()).await.unwrap();
    let c = "onecall";
    publish(&redis, c, 10, 1).await;
    let nowhere = format!("127.0.0.1:{}", free_port());
    let mut conf = GatewayConf::new(&private.url(), &nowhere, c, "");
    conf.campaigns = vec![(c.into(), campaign_toml(c, USER_RULE))];
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let base = gw.url("");
    // Tokens first (their endpoint has Redis calls of its own), then only orders.
    let (alice, bob) =
        (ticket(&http, &gw, c, "alice").await.unwrap(), ticket(&http, &gw, c, "bob").await.unwrap());
    let before = evalsha_calls(&redis).await;
    let mut answers = Vec::new();
    for t in [&alice, &alice, &alice, &bob] {
        let signed = t.sign(1, now(), &fixtures::client::nonce());
        answers.push(t.send(&http, &base, &signed).await);
    }
    let codes: Vec<_> = answers.iter().map(code).collect();
    assert_eq!(codes, [(202, "QUEUED"), (409, "LIMIT_REACHED"), (429, "RATE_LIMITED"), (202, "QUEUED")]);
    // One script call per order, sent alone (nothing else in flight): the rules rode in it.
    assert_eq!(evalsha_calls(&redis).await - before, 4, "one call per order, none for the limits");
}

/// An order under a `closed` rule gives up after `global_timeout_ms` and is undone ("nothing was
/// reserved"), while its reservation call is still waiting in Redis. When that call then comes
/// back `NOSCRIPT` (Redis lost its script cache: a restart, `SCRIPT FLUSH`) the client loads the
/// script and sends the call again, after the undo: that late run must reserve nothing, or the
/// buyer told "nothing was reserved" holds a unit (a phantom reservation the sweeper would turn
/// into an order). Forced here: the scripts flushed but the undo's own, Redis stalled past the
/// orders' 20 ms and within the reservation's bound, four orders at once so that some ride in a
/// batch (a call sent alone is bounded by its order's own deadline; a batch by the bound), so
/// the undos run between the two sends.
#[tokio::test]
async fn a_reservation_sent_again_after_noscript_cannot_reserve_an_order_already_undone() {
    let private = PrivateRedis::start(&[]).await;
    let redis = client(&private.url()).await.unwrap();
    let c = "phantom";
    publish(&redis, c, 10, 1).await;
    let rule = "[limits]\nglobal_timeout_ms = 20\n\n[[global_limit]]\nby = \"campaign\"\nmax = 1000\n\
                window_secs = 10\non_error = \"closed\"\n";
    let nowhere = format!("127.0.0.1:{}", free_port());
    let mut conf = GatewayConf::new(&private.url(), &nowhere, c, "");
    conf.campaigns = vec![(c.into(), campaign_toml(c, rule))];
    conf.redis_timeout_ms = 1000;
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let base = gw.url("");
    assert_eq!(code(&order(&http, &gw, c, "carol").await), (202, "QUEUED"));

    let buyers = ["late-1", "late-2", "late-3", "late-4"];
    let mut signed = Vec::new();
    for b in buyers {
        let t = ticket(&http, &gw, c, b).await.unwrap();
        let s = t.sign(1, now(), &fixtures::client::nonce());
        signed.push((t, s));
    }
    // Redis forgets every script; the undo's (release.lua) is loaded again, the reservation's not.
    let _: () = redis.script_flush(false).await.unwrap();
    let release = std::fs::read_to_string(protocol::scripts::default_dir().join("release.lua")).unwrap();
    let _: String = redis.script_load(release).await.unwrap();
    let stall = stall_redis(&private.url(), 300).await;
    let sends = signed.iter().map(|(t, s)| t.send(&http, &base, s));
    let answers = futures::future::join_all(sends).await;
    stall.await.unwrap().unwrap();
    // Given up and undone (or, queued behind a call in flight, never sent: TRY_LATER): either
    // way told nothing was reserved.
    let undone = |a: &(u16, serde_json::Value)| {
        code(a) == (503, "SERVICE_DEGRADED")
            && a.1["message"].as_str().unwrap_or("").contains("nothing was reserved")
    };
    assert!(answers.iter().all(|a| undone(a) || code(a) == (429, "TRY_LATER")), "{answers:?}");
    assert!(answers.iter().any(undone), "some calls were sent and undone: {answers:?}");

    // The reservations' calls, loaded and sent again, have had their time (the bound is 1 s).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let keys = CampaignKeys::new(c);
    for b in buyers {
        let held: Option<i64> = redis.hget(&keys.bought, b).await.unwrap();
        assert_eq!(held, None, "{b}, told nothing was reserved, holds nothing");
    }
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 9, "only carol's reservation holds a unit");
    let outbox: Vec<String> = redis.hkeys(&keys.outbox).await.unwrap();
    assert_eq!(outbox.len(), 1, "only carol's reservation waits for an order: {outbox:?}");
    // A buyer's own resend of the same signed order is a new attempt, and it sells.
    let (t, s) = &signed[0];
    assert_eq!(code(&t.send(&http, &base, s).await), (202, "QUEUED"));
}
