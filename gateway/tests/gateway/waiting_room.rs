//! The waiting room on the real stack: gateway processes over the stack's Redis, a campaign with
//! `[waiting_room]` on. Positions strictly increase and are shared by two gateways; a ticket is
//! refused for another user, device or campaign, forged or expired; `max_active` holds; the ETA
//! of each answer is the schedule's, and the actual admission is measured against it; the
//! pre-queue is shuffled at the start; the start draw shuffles the first moments' arrivals after
//! the pre-queue, across two gateways on the Redis Cluster, and asks the drawn back one by one
//! before any drawn turn; a turn under 100 ms away is waited for in place; a request is drawn
//! by when it reached the gateway, however late `room.lua` is asked, and the script clamps a
//! claimed arrival to Redis's clock. No timed assertions: what is asserted is computed from the answers' own data
//! (positions, serving line, ETA), the timings are printed.

use std::time::{Duration, Instant};

use fred::prelude::*;
use plugins::room::{Lotteries, Schedule, Ticket, TICKET_HEADER};
use protocol::keys::CampaignKeys;
use protocol::scripts::RoomPlace;
use serde_json::{json, Value};

use crate::support::*;

/// A campaign open since `since` (negative: starts in the future), with `room` as its
/// `[waiting_room]` table's lines.
fn campaign(id: &str, start: chrono::DateTime<chrono::Utc>, room: &str) -> String {
    let end = start + chrono::Duration::hours(2);
    format!(
        "id = \"{id}\"\nsku = \"SKU\"\nstock = 100\nper_user_limit = 1\nprice_cents = 999\n\
         starts_at = \"{}\"\nends_at = \"{}\"\n\n[defense]\npow_bits = 4\n\n[waiting_room]\n{room}\n",
        start.to_rfc3339(),
        end.to_rfc3339()
    )
}

/// Gateways (`n`) over the stack's Redis selling `campaigns` (id, text).
async fn gateways(n: usize, campaigns: &[(&str, String)]) -> (Vec<Gateway>, Client, reqwest::Client) {
    gateways_on(&fixtures::stack::redis_url(), n, campaigns).await
}

/// Gateways (`n`) over the Redis at `url` (a single one or a cluster) selling `campaigns`.
async fn gateways_on(
    url: &str,
    n: usize,
    campaigns: &[(&str, String)],
) -> (Vec<Gateway>, Client, reqwest::Client) {
    let redis = client(url).await.unwrap();
    let nowhere = format!("127.0.0.1:{}", free_port());
    let mut conf = GatewayConf::new(url, &nowhere, campaigns[0].0, "");
    conf.campaigns = campaigns.iter().map(|(id, text)| (id.to_string(), text.clone())).collect();
    let mut gws = Vec::new();
    for _ in 0..n {
        gws.push(Gateway::start(&conf).await);
    }
    (gws, redis, reqwest::Client::new())
}

async fn cleanup(redis: &Client, campaign: &str) {
    let k = CampaignKeys::new(campaign);
    let _: i64 = redis.del(vec![k.room(), k.room_users(), k.room_admitted()]).await.unwrap();
}

/// A token request of `user` from `device` on `gw`, with `ticket` if any, body `body`.
async fn ask(
    http: &reqwest::Client,
    gw: &Gateway,
    campaign: &str,
    user: &str,
    device: &str,
    ticket: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let login = auth().login(user, json!({}));
    let mut r = http
        .post(gw.url(&format!("/seckill/{campaign}/token")))
        .bearer_auth(login)
        .header("x-device-id", device)
        .json(&body);
    if let Some(t) = ticket {
        r = r.header(TICKET_HEADER, t);
    }
    let r = r.send().await.unwrap();
    let retry_after = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    let (status, body) = (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null));
    if body["code"] == "WAITING" {
        // The header says when to come back, as the body does.
        let said = body["retry_after"].as_u64().map(|s| s.to_string());
        assert_eq!(retry_after, said, "Retry-After of a WAITING answer: {body}");
    }
    (status, body)
}

/// The first request of `user` (device `dev-{user}`): its `WAITING` answer.
async fn enter(http: &reqwest::Client, gw: &Gateway, campaign: &str, user: &str) -> Value {
    let (status, body) = ask(http, gw, campaign, user, &format!("dev-{user}"), None, json!({})).await;
    assert_eq!((status, body["code"].as_str()), (200, Some("WAITING")), "{body}");
    body
}

fn code(reply: &(u16, Value)) -> (u16, &str) {
    (reply.0, reply.1["code"].as_str().unwrap_or("?"))
}

fn position(body: &Value) -> u64 {
    body["position"].as_u64().unwrap_or_else(|| panic!("no position in {body}"))
}

/// The place a WAITING answer's ticket holds, read from the signed ticket itself.
fn ticket_place(body: &Value, campaign: &str, user: &str) -> RoomPlace {
    let keys = plugins::issue::EdgeKeys::derive(KEY.as_bytes()).unwrap();
    let t = body["ticket"].as_str().unwrap_or_else(|| panic!("no ticket in {body}"));
    let now = chrono::Utc::now().timestamp();
    Ticket::verify(keys.room_key(), t.as_bytes(), campaign, user, &format!("dev-{user}"), now)
        .unwrap_or_else(|e| panic!("{e:?}: {body}"))
        .place
}

#[tokio::test]
async fn positions_strictly_increase_and_two_gateways_share_one_queue() {
    let c = fixtures::cleanup::Campaign::new("wr");
    // One a second: everyone arriving now waits (for a second or more: a slow machine may see
    // the first ones admitted before the last arrive, so the asserts read the tickets' places,
    // never when an answer came).
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let schedule = Schedule { rate: 1, max_active: None, session_ms: 120_000 };
    let (gws, redis, http) = gateways(2, &[(&c, campaign(&c, start, "admit_per_sec = 1"))]).await;
    let (mut positions, mut tickets) = (Vec::new(), Vec::new());
    for i in 0..10 {
        let user = format!("u{i}");
        let body = enter(&http, &gws[i % 2], &c, &user).await;
        let (p, serving, ahead) =
            (position(&body), body["serving"].as_u64().unwrap(), body["ahead"].as_u64().unwrap());
        assert_eq!(ahead, p - serving - 1, "{body}");
        assert!(p > serving, "a new arrival is never admitted in a burst of unused capacity: {body}");
        assert_eq!(ticket_place(&body, &c, &user), RoomPlace::Position(p), "the ticket holds the place told");
        assert_eq!(body["retry_after"].as_u64().map(|s| (1..=30).contains(&s)), Some(true), "{body}");
        positions.push(p);
        tickets.push(body["ticket"].as_str().unwrap().to_string());
    }
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing across both gateways: {positions:?}"
    );
    // The same buyer asking again, on the other gateway, keeps their place: told again while
    // it waits, or let through to the captcha once served (refused here: no answer sent), and
    // in Redis the one place either way.
    let k = CampaignKeys::new(&c);
    let stored = |p: u64| format!("p{p}");
    let served =
        |p: u64| chrono::Utc::now().timestamp_millis() - start.timestamp_millis() >= schedule.served_at(p);
    let asked = chrono::Utc::now().timestamp_millis() - start.timestamp_millis();
    let (status, again) = ask(&http, &gws[1], &c, "u0", "dev-u0", None, json!({})).await;
    match (status, again["code"].as_str()) {
        (200, Some("WAITING")) => {
            assert_eq!(position(&again), positions[0], "{again}");
            assert_eq!(ticket_place(&again, &c, "u0"), RoomPlace::Position(positions[0]));
            assert!(asked < schedule.served_at(positions[0]), "waiting only before its turn: {again}");
        }
        (403, Some("CAPTCHA_FAILED")) => assert!(served(positions[0]), "admitted only at its turn"),
        other => panic!("{other:?}: {again}"),
    }
    let place: Option<String> = redis.hget(k.room_users(), "u0").await.unwrap();
    assert_eq!(place, Some(stored(positions[0])), "one place per account, on any gateway");
    // A ticket from one gateway is read by the other, which computes the turn of the same
    // place: the last arrival's (u9, given by the second gateway), presented to the first.
    let (last, t) = (positions[9], &tickets[9]);
    let asked = chrono::Utc::now().timestamp_millis() - start.timestamp_millis();
    let (status, on_first) = ask(&http, &gws[0], &c, "u9", "dev-u9", Some(t), json!({})).await;
    match (status, on_first["code"].as_str()) {
        (200, Some("WAITING")) => {
            assert_eq!(position(&on_first), last, "{on_first}");
            assert_eq!(ticket_place(&on_first, &c, "u9"), RoomPlace::Position(last));
            assert!(asked < schedule.served_at(last), "waiting only before its turn: {on_first}");
        }
        (403, Some("CAPTCHA_FAILED")) => assert!(served(last), "admitted only at its turn"),
        other => panic!("{other:?}: {on_first}"),
    }
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn a_ticket_for_another_user_device_or_campaign_forged_or_expired_is_refused() {
    let (c, other) = (fixtures::cleanup::Campaign::new("wr"), fixtures::cleanup::Campaign::new("wr"));
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let room = "admit_per_sec = 1";
    let (gws, redis, http) =
        gateways(1, &[(&c, campaign(&c, start, room)), (&other, campaign(&other, start, room))]).await;
    let gw = &gws[0];
    let body = enter(&http, gw, &c, "alice").await;
    let t = body["ticket"].as_str().unwrap().to_string();
    assert_eq!(code(&ask(&http, gw, &c, "alice", "dev-alice", Some(&t), json!({})).await), (200, "WAITING"));

    let refused = [
        ("another user", ask(&http, gw, &c, "bob", "dev-alice", Some(&t), json!({})).await),
        ("another device", ask(&http, gw, &c, "alice", "dev-other", Some(&t), json!({})).await),
        ("another campaign", ask(&http, gw, &other, "alice", "dev-alice", Some(&t), json!({})).await),
        (
            "place forged",
            ask(&http, gw, &c, "alice", "dev-alice", Some(&t.replacen('p', "p1", 1)), json!({})).await,
        ),
        ("garbage", ask(&http, gw, &c, "alice", "dev-alice", Some("p1.2.3"), json!({})).await),
    ];
    for (why, reply) in &refused {
        assert_eq!(code(reply), (403, "BAD_TICKET"), "{why}: {}", reply.1);
    }
    // Expired: a genuine ticket (signed with the gateways' room key) past its life.
    let keys = plugins::issue::EdgeKeys::derive(KEY.as_bytes()).unwrap();
    let now = chrono::Utc::now().timestamp();
    let expired = Ticket {
        campaign: c.clone(),
        user: "alice".into(),
        device: "dev-alice".into(),
        place: RoomPlace::Position(1),
        issued_at: now - 700,
        expires_at: now - 100,
        promised_ms: None,
    }
    .sign(keys.room_key());
    let reply = ask(&http, gw, &c, "alice", "dev-alice", Some(&expired), json!({})).await;
    assert_eq!(code(&reply), (403, "BAD_TICKET"), "{}", reply.1);
    assert!(reply.1["message"].as_str().unwrap().contains("expired"), "{}", reply.1);
    // Alive, the same signed place is honoured: position 1 was served a minute ago and its
    // session (120 s) lasts, so it is let through to the captcha (refused: no answer sent).
    let alive = Ticket {
        issued_at: now,
        expires_at: now + 100,
        ..Ticket::verify(keys.room_key(), expired.as_bytes(), &c, "alice", "dev-alice", now - 200).unwrap()
    }
    .sign(keys.room_key());
    let reply = ask(&http, gw, &c, "alice", "dev-alice", Some(&alive), json!({})).await;
    assert_eq!(code(&reply), (403, "CAPTCHA_FAILED"), "{}", reply.1);
    cleanup(&redis, &c).await;
    cleanup(&redis, &other).await;
}

/// Presents `ticket` of `user` without a captcha: `true` when admitted (the room let it through
/// to the captcha check, which refuses the empty body), `false` while `WAITING`.
async fn admitted(http: &reqwest::Client, gw: &Gateway, c: &str, user: &str, ticket: &str) -> bool {
    let reply = ask(http, gw, c, user, &format!("dev-{user}"), Some(ticket), json!({})).await;
    match code(&reply) {
        (200, "WAITING") => false,
        (403, "CAPTCHA_FAILED") => true,
        other => panic!("{other:?}: {}", reply.1),
    }
}

#[tokio::test]
async fn max_active_holds_and_an_admitted_ticket_gets_its_token() {
    let c = fixtures::cleanup::Campaign::new("wr");
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let room = "admit_per_sec = 1000\nmax_active = 3\nsession_secs = 10";
    let (gws, redis, http) = gateways(1, &[(&c, campaign(&c, start, room))]).await;
    let gw = &gws[0];
    let users: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
    let mut tickets = Vec::new();
    for u in &users {
        tickets.push(enter(&http, gw, &c, u).await["ticket"].as_str().unwrap().to_string());
    }
    // Rounds until some are admitted (bounded: the next session window is at most 10 s away).
    let (mut most, began) = (0, Instant::now());
    let mut first_round = Vec::new();
    while began.elapsed() < Duration::from_secs(15) {
        let mut round = Vec::new();
        for (u, t) in users.iter().zip(&tickets) {
            round.push(admitted(&http, gw, &c, u, t).await);
        }
        let n = round.iter().filter(|a| **a).count();
        most = most.max(n);
        if n > 0 && first_round.is_empty() {
            first_round = round;
        }
        if most == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(most, 3, "exactly max_active admitted at once, never more");
    assert!(!first_round.is_empty());
    // An admitted buyer gets their token as without a room, plus the ticket for the session.
    let i = first_round.iter().position(|a| *a).unwrap();
    let device = format!("dev-{}", users[i]);
    let ch = http
        .post(gw.url(&format!("/seckill/{c}/captcha")))
        .header("x-device-id", &device)
        .send()
        .await
        .unwrap();
    let ch: Value = ch.json().await.unwrap();
    let challenge = ch["challenge"].as_str().unwrap();
    let answer = protocol::pow::solve(challenge, ch["bits"].as_u64().unwrap() as u32, 1 << 24).unwrap();
    let reply = ask(
        &http,
        gw,
        &c,
        &users[i],
        &device,
        Some(&tickets[i]),
        json!({"challenge": challenge, "answer": answer}),
    )
    .await;
    assert_eq!(code(&reply), (200, "TOKEN_ISSUED"), "{}", reply.1);
    assert!(reply.1["token"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(reply.1["ticket"].as_str().is_some_and(|t| !t.is_empty()), "{}", reply.1);
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn the_eta_is_the_schedules_and_measured_against_the_actual_admission() {
    let c = fixtures::cleanup::Campaign::new("wr");
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let (rate, n) = (4u64, 8usize);
    let (gws, redis, http) =
        gateways(1, &[(&c, campaign(&c, start, &format!("admit_per_sec = {rate}")))]).await;
    let gw = &gws[0];
    let schedule = Schedule { rate, max_active: None, session_ms: 120_000 };
    let start_ms = start.timestamp_millis();
    let mut waiting = Vec::new();
    for i in 0..n {
        let user = format!("e{i}");
        let asked = Instant::now();
        let body = enter(&http, gw, &c, &user).await;
        let p = position(&body);
        // The promise is the schedule's, to the ms: served at start + served_at(p); or, for a
        // turn nearer than MIN_PROMISE_MS, that far (the ticket keeps it).
        let (eta_at, turn_at) = (body["eta_at_ms"].as_i64().unwrap(), start_ms + schedule.served_at(p));
        if body["eta_ms"].as_i64() == Some(plugins::room::MIN_PROMISE_MS) {
            assert!(eta_at >= turn_at, "{body}");
        } else {
            assert_eq!(eta_at, turn_at, "{body}");
        }
        let eta = Duration::from_millis(body["eta_ms"].as_u64().unwrap());
        waiting.push((user, body["ticket"].as_str().unwrap().to_string(), asked, eta, None::<Duration>));
    }
    // Present every ticket every 50 ms until admitted (bounded).
    let began = Instant::now();
    while waiting.iter().any(|w| w.4.is_none()) && began.elapsed() < Duration::from_secs(10) {
        for w in waiting.iter_mut().filter(|w| w.4.is_none()) {
            if admitted(&http, gw, &c, &w.0, &w.1).await {
                w.4 = Some(w.2.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(waiting.iter().all(|w| w.4.is_some()), "every buyer of a steady queue got in");
    let mut worst: f64 = 0.0;
    for (user, _, _, eta, actual) in &waiting {
        let actual = actual.unwrap();
        let error = (actual.as_secs_f64() - eta.as_secs_f64()).abs() / eta.as_secs_f64().max(0.25);
        worst = worst.max(error);
        eprintln!(
            "eta {user}: promised {:>5} ms, admitted after {:>5} ms",
            eta.as_millis(),
            actual.as_millis()
        );
    }
    eprintln!(
        "eta: worst error {:.1}% of the wait ({n} buyers at {rate}/s, polled every 50 ms)",
        worst * 100.0
    );
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn the_pre_queue_is_shuffled_at_the_start_and_later_arrivals_come_after_it() {
    let c = fixtures::cleanup::Campaign::new("wr");
    // Starts in 12 s (two gateways start first); the pre-queue is open from a minute before. No
    // start draw: right after the start, first come first served (the draw has its own test).
    let start = chrono::Utc::now() + chrono::Duration::seconds(12);
    let room = "admit_per_sec = 1\npre_queue_secs = 60\nstart_draw_ms = 0";
    let (gws, redis, http) = gateways(2, &[(&c, campaign(&c, start, room))]).await;
    let n = 6;
    let mut tickets = Vec::new();
    for i in 0..n {
        let user = format!("q{i}");
        let body = enter(&http, &gws[i % 2], &c, &user).await;
        if chrono::Utc::now() >= start {
            eprintln!("pre-queue: the machine was too slow to arrive before the start; nothing checked");
            cleanup(&redis, &c).await;
            return;
        }
        assert_eq!(body["pre_queue"], true, "{body}");
        assert!(body["position"].is_null(), "no position before the draw: {body}");
        tickets.push((user, body["ticket"].as_str().unwrap().to_string()));
    }
    // The start (bounded wait).
    while chrono::Utc::now() < start + chrono::Duration::milliseconds(50) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut positions = Vec::new();
    for (i, (user, t)) in tickets.iter().enumerate() {
        let reply = ask(&http, &gws[(i + 1) % 2], &c, user, &format!("dev-{user}"), Some(t), json!({})).await;
        let p = match code(&reply) {
            (200, "WAITING") => position(&reply.1),
            other => panic!("{other:?} {}", reply.1),
        };
        positions.push(p);
    }
    let mut sorted = positions.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=n as u64).collect::<Vec<_>>(), "the pre-queue's places are 1..={n}, each once");
    eprintln!("pre-queue: arrival order -> positions {positions:?}");
    // After the start, first come first served, after the whole pre-queue.
    let late = enter(&http, &gws[0], &c, "late").await;
    assert!(position(&late) > n as u64, "{late}");
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn a_pre_queue_place_whose_session_is_over_joins_again_at_the_back() {
    let c = fixtures::cleanup::Campaign::new("wr");
    // Starts in 5 s (the gateway starts first), a pre-queue from a minute before, no start draw,
    // 10 a second, sessions of 10 s (the shortest a conf may have).
    let start = chrono::Utc::now() + chrono::Duration::seconds(5);
    let room = "admit_per_sec = 10\npre_queue_secs = 60\nstart_draw_ms = 0\nsession_secs = 10";
    let (gws, redis, http) = gateways(1, &[(&c, campaign(&c, start, room))]).await;
    let gw = &gws[0];
    let schedule = Schedule { rate: 10, max_active: None, session_ms: 10_000 };
    let start_ms = start.timestamp_millis();
    let now_ms = || chrono::Utc::now().timestamp_millis();
    // Two in the pre-queue: Redis keeps their places as arrivals ("a1", "a2").
    let mut pre = Vec::new();
    for (i, user) in ["pa", "pb"].into_iter().enumerate() {
        let body = enter(&http, gw, &c, user).await;
        assert_eq!(ticket_place(&body, &c, user), RoomPlace::PreQueue(i as u64 + 1), "{body}");
        pre.push(body["ticket"].as_str().unwrap().to_string());
    }
    assert!(now_ms() < start_ms, "the machine was too slow to queue before the start (raise the 5 s)");
    // Both served once the pre-queue is drawn (positions 1 and 2 at 10 a second).
    while now_ms() < start_ms + schedule.served_at(2) + 20 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // pa is admitted on its pre-queue ticket (let through to the captcha, refused there: no
    // answer sent); pb gets its token, and with it the ticket of its position ("p<n>").
    assert!(admitted(&http, gw, &c, "pa", &pre[0]).await, "pa is admitted at its turn");
    let work = solved(&http, gw, &c, "pb").await;
    let token = ask(&http, gw, &c, "pb", "dev-pb", Some(&pre[1]), work).await;
    assert_eq!(code(&token), (200, "TOKEN_ISSUED"), "{}", token.1);
    let RoomPlace::Position(pb_first) = ticket_place(&token.1, &c, "pb") else { panic!("{}", token.1) };
    let pb_ticket = token.1["ticket"].as_str().unwrap().to_string();
    // Both sessions over (bounded: 10 s after the last turn).
    while now_ms() < start_ms + schedule.served_at(2) + schedule.session_ms + 50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let k = CampaignKeys::new(&c);
    let stored = |user: &'static str| {
        let redis = redis.clone();
        let key = k.room_users();
        async move { redis.hget::<Option<String>, _, _>(key, user).await.unwrap() }
    };
    assert_eq!(stored("pa").await.as_deref(), Some("a1"), "Redis keeps the pre-queue's form");
    // pa presents its pre-queue ticket again: a new ticket, at the back (above the serving line).
    let serving = schedule.serving(now_ms() - start_ms);
    let again = ask(&http, gw, &c, "pa", "dev-pa", Some(&pre[0]), json!({})).await;
    assert_eq!(code(&again), (200, "WAITING"), "{}", again.1);
    assert!(again.1["ticket"].is_string(), "a new ticket, not another 'your turn has passed': {}", again.1);
    let pa_new = position(&again.1);
    assert!(pa_new > serving.max(2), "at the back: {}", again.1);
    assert_eq!(ticket_place(&again.1, &c, "pa"), RoomPlace::Position(pa_new), "{}", again.1);
    assert_eq!(stored("pa").await, Some(format!("p{pa_new}")), "Redis holds the new place");
    // Asked again without the ticket: the same new place (one place per account).
    // With no one else queued, the back is a turn or two past the serving line (10 a second): a
    // machine slow between two asks may see that turn come, and then the answer is the
    // admission (to the captcha), only once the schedule serves the place.
    let turn_came = |answer: &(u16, Value), place: u64| {
        let serving = schedule.serving(now_ms() - start_ms);
        assert_eq!(code(answer), (403, "CAPTCHA_FAILED"), "{}", answer.1);
        assert!(serving >= place, "admitted at its turn only ({place}, serving {serving}): {}", answer.1);
    };
    let same = ask(&http, gw, &c, "pa", "dev-pa", None, json!({})).await;
    match code(&same) {
        (200, "WAITING") => assert_eq!(position(&same.1), pa_new, "{}", same.1),
        _ => turn_came(&same, pa_new),
    }
    // pb presents the ticket of its position, which Redis keeps as the pre-queue's "a2": at the
    // back too, after pa.
    assert_eq!(stored("pb").await.as_deref(), Some("a2"));
    let pb = ask(&http, gw, &c, "pb", "dev-pb", Some(&pb_ticket), json!({})).await;
    let kept = stored("pb").await.unwrap_or_default();
    let pb_new: u64 = kept.strip_prefix('p').and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{kept}"));
    assert!(pb_new > pa_new, "pb (first at {pb_first}) joins after pa: {kept}, {}", pb.1);
    match code(&pb) {
        (200, "WAITING") => {
            assert!(pb.1["ticket"].is_string(), "a new ticket: {}", pb.1);
            assert_eq!(position(&pb.1), pb_new, "{}", pb.1);
        }
        _ => turn_came(&pb, pb_new),
    }
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn the_buyers_client_waits_its_turn_and_gets_its_token() {
    let c = fixtures::cleanup::Campaign::new("wr");
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let (gws, redis, http) = gateways(1, &[(&c, campaign(&c, start, "admit_per_sec = 4"))]).await;
    let base = gws[0].url("");
    // Bounded: five buyers at 4/s are all in within two seconds; the patience is far above.
    let patience = fixtures::client::Patience { presentations: 50, total: Duration::from_secs(30) };
    let buyers = (0..5).map(|i| {
        let (http, base, c) = (http.clone(), base.clone(), c.clone());
        async move {
            let login = auth().login(&format!("w{i}"), json!({}));
            fixtures::client::get_ticket_within(&http, &base, &c, &login, &format!("dev-w{i}"), &patience)
                .await
        }
    });
    let got = futures::future::join_all(buyers).await;
    for t in &got {
        let t = t.as_ref().unwrap_or_else(|e| panic!("refused: {e:?}"));
        assert!(!t.token.is_empty() && !t.path.is_empty() && !t.signing_key.is_empty(), "{t:?}");
        // Every one of them waited: told to, or held by the gateway until a turn under 100 ms
        // away (admitted in place); a new arrival is never admitted at once.
        assert!(t.room.waiting >= 1 || t.room.held_ms.is_some(), "{t:?}");
        eprintln!("room: {} WAITING answers, waited {} ms", t.room.waiting, t.room.waited.as_millis());
    }
    // And the token is a campaign token: an order signed with it is taken.
    let first = got[0].as_ref().unwrap();
    let (status, body) = first.order(&http, &base, 1).await;
    assert_ne!(body["code"], "BAD_TOKEN", "{status} {body}");
    assert_ne!(body["code"], "BAD_SIGNATURE", "{status} {body}");
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn the_buyers_client_room_first_asks_no_work_before_its_turn_and_gets_its_token() {
    let c = fixtures::cleanup::Campaign::new("wr");
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let (gws, redis, http) = gateways(1, &[(&c, campaign(&c, start, "admit_per_sec = 4"))]).await;
    let base = gws[0].url("");
    // As the page: the first token request carries no work and is told to wait (a new arrival
    // is never admitted at once, and without the work it is not held); the work comes later.
    let buyers = (0..3).map(|i| {
        let (http, base, c) = (http.clone(), base.clone(), c.clone());
        async move {
            let login = auth().login(&format!("f{i}"), json!({}));
            fixtures::client::get_ticket_room_first(&http, &base, &c, &login, &format!("dev-f{i}")).await
        }
    });
    for t in futures::future::join_all(buyers).await {
        let t = t.unwrap_or_else(|e| panic!("refused: {e:?}"));
        assert!(!t.token.is_empty() && !t.signing_key.is_empty(), "{t:?}");
        assert!(t.room.waiting >= 1, "its first request was told to wait: {t:?}");
    }
    cleanup(&redis, &c).await;
}

/// `POST /seckill/{c}/captcha` from device `dev-x`: status and body.
async fn challenge(http: &reqwest::Client, gw: &Gateway, c: &str) -> (u16, Value) {
    let r = http
        .post(gw.url(&format!("/seckill/{c}/captcha")))
        .header("x-device-id", "dev-x")
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_challenge_is_given_in_the_pre_queue_window_only_with_the_room_on() {
    let (pre, off, early) = (
        fixtures::cleanup::Campaign::new("wr"),
        fixtures::cleanup::Campaign::new("wr"),
        fixtures::cleanup::Campaign::new("wr"),
    );
    // All three start in an hour; the first two have a pre-queue of two hours (open now), the
    // second with its room off; the third's pre-queue of ten minutes is not open yet.
    let start = chrono::Utc::now() + chrono::Duration::hours(1);
    let (gws, redis, http) = gateways(
        1,
        &[
            (&pre, campaign(&pre, start, "admit_per_sec = 1\npre_queue_secs = 7200")),
            (&off, campaign(&off, start, "enabled = false\nadmit_per_sec = 1\npre_queue_secs = 7200")),
            (&early, campaign(&early, start, "admit_per_sec = 1\npre_queue_secs = 600")),
        ],
    )
    .await;
    let gw = &gws[0];
    let (status, body) = challenge(&http, gw, &pre).await;
    assert_eq!((status, body["code"].as_str()), (200, Some("CHALLENGE")), "in the pre-queue: {body}");
    let bits = body["bits"].as_u64().unwrap() as u32;
    let c = body["challenge"].as_str().unwrap();
    let answer = protocol::pow::solve(c, bits, 1 << 24).unwrap();
    // Its answer goes with the pre-queue's token request, which is told to wait for the draw.
    let reply =
        ask(&http, gw, &pre, "early-bird", "dev-x", None, json!({"challenge": c, "answer": answer})).await;
    assert_eq!(code(&reply), (200, "WAITING"), "{}", reply.1);
    assert_eq!(reply.1["pre_queue"], true, "{}", reply.1);
    // /info tells the page whether the room is on (it then asks its token without work first).
    let info = |c: &str| {
        let url = gw.url(&format!("/seckill/{c}/info"));
        let http = http.clone();
        async move { http.get(url).send().await.unwrap().json::<Value>().await.unwrap() }
    };
    assert_eq!(info(&pre).await["waiting_room"], json!({"pre_queue_secs": 7200}));
    assert_eq!(info(&off).await["waiting_room"], Value::Null, "the room off");
    for (c, why) in [(&off, "the room off"), (&early, "before the pre-queue opens")] {
        let (status, body) = challenge(&http, gw, c).await;
        assert_eq!((status, body["code"].as_str()), (425, Some("NOT_STARTED")), "{why}: {body}");
    }
    for c in [&pre, &off, &early] {
        cleanup(&redis, c).await;
    }
}

#[tokio::test]
async fn the_rooms_metrics_after_a_small_queued_sale() {
    let (c, hard) = (fixtures::cleanup::Campaign::new("wr"), fixtures::cleanup::Campaign::new("wr"));
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let rate = 4;
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let nowhere = format!("127.0.0.1:{}", free_port());
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), &nowhere, &c, "");
    // The second campaign's work hardens from one arrival a second: 4 bits, then 6.
    let levels = "\n[[pow_level]]\narrivals_per_sec = 1\nbits = 6\n";
    conf.campaigns = vec![
        (c.clone(), campaign(&c, start, &format!("admit_per_sec = {rate}"))),
        (hard.clone(), format!("{}{levels}", campaign(&hard, start, "enabled = false\nadmit_per_sec = 1"))),
    ];
    let admin = free_port();
    conf.tables = format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\n");
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let metrics = format!("http://127.0.0.1:{admin}/metrics");
    let schedule = Schedule { rate, max_active: None, session_ms: 120_000 };
    let elapsed = || chrono::Utc::now().timestamp_millis() - start.timestamp_millis();

    // Three buyers queue: the queue's length is the last place given minus the serving line
    // at the scrape (read between two clock readings: no timing assumed).
    let mut last = 0;
    for i in 0..3 {
        last = position(&enter(&http, &gw, &c, &format!("q{i}")).await);
    }
    let before = schedule.serving(elapsed());
    let m = scrape(&http, &metrics).await;
    let after = schedule.serving(elapsed());
    let length = sample(&m, "seckill_gateway_room_queue_length", &[("campaign", &c)]);
    assert!(
        (last.saturating_sub(after) as f64..=last.saturating_sub(before) as f64).contains(&length),
        "queue length {length}: last place {last}, serving {before}..{after}"
    );
    assert_eq!(sample(&m, "seckill_gateway_room_admitted_total", &[("campaign", &c)]), 0.0);
    assert!(m.iter().any(|s| s.name == "seckill_gateway_room_admitted_total"), "the series exists at 0");
    assert_eq!(sample(&m, "seckill_gateway_room_pow_bits", &[("campaign", &c)]), 4.0, "no levels: pow_bits");
    assert!(
        !m.iter()
            .any(|s| s.name == "seckill_gateway_room_queue_length" && s.labels.iter().any(|l| l.1 == *hard)),
        "no queue for a campaign whose room is off"
    );

    // Five buyers get their tokens through the room (the e2e client: back at the ETA, the work
    // once due): five admissions, five ETA errors observed.
    let patience = fixtures::client::Patience { presentations: 50, total: Duration::from_secs(60) };
    let base = gw.url("");
    let buyers = (0..5).map(|i| {
        let (http, base, c) = (http.clone(), base.clone(), c.clone());
        async move {
            let login = auth().login(&format!("a{i}"), json!({}));
            fixtures::client::get_ticket_within(&http, &base, &c, &login, &format!("dev-a{i}"), &patience)
                .await
        }
    });
    for t in futures::future::join_all(buyers).await {
        let t = t.unwrap_or_else(|e| panic!("refused: {e:?}"));
        assert!(t.room.waiting >= 1 || t.room.held_ms.is_some(), "waited, told to or held: {t:?}");
    }
    let m = scrape(&http, &metrics).await;
    assert_eq!(sample(&m, "seckill_gateway_room_admitted_total", &[("campaign", &c)]), 5.0);
    let count = sample(&m, "seckill_gateway_room_eta_error_seconds_count", &[("campaign", &c)]);
    assert_eq!(count, 5.0, "one ETA error per admission");
    let sum = sample(&m, "seckill_gateway_room_eta_error_seconds_sum", &[("campaign", &c)]);
    assert!(sum >= 0.0);
    eprintln!("room metrics: mean ETA error {:.0} ms over 5 admissions at {rate}/s", sum / count * 1000.0);
    // Scraped again: each error is observed once, the count stays.
    let scraped_again = scrape(&http, &metrics).await;
    assert_eq!(sample(&scraped_again, "seckill_gateway_room_admitted_total", &[("campaign", &c)]), 5.0);
    assert_eq!(
        sample(&scraped_again, "seckill_gateway_room_eta_error_seconds_count", &[("campaign", &c)]),
        5.0,
        "errors are observed once, not again at every scrape"
    );

    // The bits in force follow the arrivals: a token request counts one, and the bits can only
    // fade (never rise) while nobody arrives, so the gauge lies between the challenges' bits
    // asked right before and right after the scrape.
    let _ = ask(&http, &gw, &hard, "h0", "dev-h0", None, json!({})).await;
    let bits = |body: (u16, Value)| body.1["bits"].as_u64().unwrap_or_else(|| panic!("{:?}", body.1)) as f64;
    let high = bits(challenge(&http, &gw, &hard).await);
    let m = scrape(&http, &metrics).await;
    let low = bits(challenge(&http, &gw, &hard).await);
    let gauge = sample(&m, "seckill_gateway_room_pow_bits", &[("campaign", &hard)]);
    assert!((low..=high).contains(&gauge), "bits {gauge}, challenges {high} then {low}");
    assert!([4.0, 6.0].contains(&gauge));
    eprintln!("room metrics: bits in force {gauge} after one arrival (levels: 1/s -> 6)");
    cleanup(&redis, &c).await;
    cleanup(&redis, &hard).await;
}

/// A solved challenge of `c` for device `dev-{user}` on `gw`: the token request's body.
async fn solved(http: &reqwest::Client, gw: &Gateway, c: &str, user: &str) -> Value {
    let r = http
        .post(gw.url(&format!("/seckill/{c}/captcha")))
        .header("x-device-id", format!("dev-{user}"))
        .send()
        .await
        .unwrap();
    let ch: Value = r.json().await.unwrap();
    let challenge = ch["challenge"].as_str().unwrap_or_else(|| panic!("no challenge: {ch}"));
    let answer = protocol::pow::solve(challenge, ch["bits"].as_u64().unwrap() as u32, 1 << 24).unwrap();
    json!({"challenge": challenge, "answer": answer})
}

#[tokio::test]
async fn the_start_draw_shuffles_the_first_arrivals_after_the_pre_queue_across_gateways() {
    let c = fixtures::cleanup::Campaign::new("wr");
    // Starts in 12 s (three gateways start first), a pre-queue from a minute before, a start
    // draw of 4 s (long enough for a slow machine to send its arrivals in it; the asserts read
    // which place each answer gave, never when it came). On the Redis Cluster when it is up.
    let start = chrono::Utc::now() + chrono::Duration::seconds(12);
    let draw_ms = 4000;
    let room = format!("admit_per_sec = 1\npre_queue_secs = 60\nstart_draw_ms = {draw_ms}");
    let url = fixtures::stack::cluster_or_single_redis_url();
    let (gws, redis, http) = gateways_on(&url, 3, &[(&c, campaign(&c, start, &room))]).await;
    let schedule = Schedule { rate: 1, max_active: None, session_ms: 120_000 };
    let (start_ms, draw_end_ms) = (start.timestamp_millis(), start.timestamp_millis() + draw_ms);
    let lotteries = Lotteries::new(start_ms, draw_end_ms, 10);
    let now_ms = || chrono::Utc::now().timestamp_millis();
    // Two in the pre-queue.
    let mut pre = Vec::new();
    for i in 0..2 {
        let user = format!("q{i}");
        let body = enter(&http, &gws[i % 2], &c, &user).await;
        assert_eq!(ticket_place(&body, &c, &user), RoomPlace::PreQueue(i as u64 + 1), "{body}");
        pre.push((user, body["ticket"].as_str().unwrap().to_string()));
    }
    assert!(now_ms() < start_ms, "the machine was too slow to queue before the start (raise the 12 s)");
    while now_ms() < start_ms + 20 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Twenty arrive one after another in the draw's window, on the first two gateways in turn
    // (the first ones are the scripts that fire at T+0): each is told its place is drawn when
    // the draw closes, its arrival number in its ticket.
    let n = 20usize;
    let mut drawn = Vec::new();
    for i in 0..n {
        let user = format!("d{i}");
        let body = enter(&http, &gws[i % 2], &c, &user).await;
        assert!(
            now_ms() < draw_end_ms,
            "the machine was too slow to arrive in the draw (raise start_draw_ms)"
        );
        assert_eq!(
            (body["start_draw"].as_bool(), body["pre_queue"].as_bool()),
            (Some(true), Some(false)),
            "{body}"
        );
        assert!(body["position"].is_null(), "no position before the draw: {body}");
        // Asked back one by one from the draw's close (its end plus the 4 s an arrival may be
        // claimed before Redis's clock), at 10 a second (10 × admit_per_sec) in the order of
        // arrival: the gateways tell the drawn their places at that pace.
        let back_at = lotteries.draw_return_at_ms(i as u64 + 1);
        let close = draw_end_ms + protocol::timing::ARRIVAL_CLAIM_MAX_MS;
        assert_eq!(back_at, close + 100 * i as i64);
        assert_eq!(body["drawn_at_ms"].as_i64(), Some(back_at), "{body}");
        assert_eq!(body["eta_at_ms"].as_i64(), Some(back_at), "{body}");
        assert_eq!(ticket_place(&body, &c, &user), RoomPlace::Draw(i as u64 + 1), "arrival {i}: {body}");
        drawn.push((user, body["ticket"].as_str().unwrap().to_string(), back_at));
    }
    // The pre-queue's places are drawn already: 1 and 2, each once, told on any gateway.
    let mut pre_places = Vec::new();
    for (user, t) in &pre {
        let reply = ask(&http, &gws[1], &c, user, &format!("dev-{user}"), Some(t), json!({})).await;
        assert_eq!(code(&reply), (200, "WAITING"), "{}", reply.1);
        pre_places.push(position(&reply.1));
    }
    pre_places.sort_unstable();
    assert_eq!(pre_places, vec![1, 2]);
    // Presented before its time to come back, a drawn ticket is told that time again, with no
    // call to Redis.
    let (user, t, back_at) = &drawn[n - 1];
    if now_ms() < back_at - 300 {
        let early = ask(&http, &gws[0], &c, user, &format!("dev-{user}"), Some(t), json!({})).await;
        assert!(early.1["position"].is_null(), "{}", early.1);
        assert_eq!(early.1["drawn_at_ms"].as_i64(), Some(*back_at), "{}", early.1);
    }
    while now_ms() < lotteries.draw_return_at_ms(n as u64) + 20 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // After the close: each drawn ticket presented to another gateway than the one it came from,
    // the first time to the third one, which saw nothing of the draw (as a gateway restarted
    // would): all read the same draw from Redis.
    let (mut positions, mut closed_by) = (Vec::new(), 0);
    for (i, (user, t, back_at)) in drawn.iter().enumerate() {
        let gw = &gws[if i == 0 { 2 } else { (i + 1) % 2 }];
        let reply = ask(&http, gw, &c, user, &format!("dev-{user}"), Some(t), json!({})).await;
        assert_eq!(code(&reply), (200, "WAITING"), "at 1/s the drawn places wait: {}", reply.1);
        let p = position(&reply.1);
        // The ETA is the schedule's, to the ms, and told from its place in the ticket; and no
        // drawn place's turn comes before its buyer was asked back to learn it.
        assert_eq!(reply.1["eta_at_ms"].as_i64(), Some(start_ms + schedule.served_at(p)), "{}", reply.1);
        assert!(start_ms + schedule.served_at(p) >= *back_at, "place {p}: {}", reply.1);
        assert_eq!(ticket_place(&reply.1, &c, user), RoomPlace::Position(p));
        // Asked again on the third gateway: the same place.
        let again = ask(&http, &gws[2], &c, user, &format!("dev-{user}"), Some(t), json!({})).await;
        assert_eq!(position(&again.1), p, "{}", again.1);
        if i == 0 {
            closed_by = now_ms();
        }
        positions.push(p);
    }
    let (lo, hi) = (*positions.iter().min().unwrap(), *positions.iter().max().unwrap());
    let base = lo - 1;
    let mut sorted = positions.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (lo..=hi).collect::<Vec<_>>(),
        "the drawn places are one run, each once: {positions:?}"
    );
    assert_eq!(hi - lo + 1, n as u64);
    // The draw's base: the pre-queue's size, or the serving line at the close plus the
    // positions served while the 20 drawn are asked back (20 at 10/s: 2 s, 2 positions at 1/s)
    // if higher (so no drawn turn has passed when its buyer learns it, and the drawn places are
    // served at the rate, not in a burst); the close came between its time and the first
    // answer after it.
    let told = 2;
    let (at_end, at_first) =
        (schedule.serving(lotteries.draw_close_ms - start_ms), schedule.serving(closed_by - start_ms));
    assert!(
        (2.max(at_end + told)..=2.max(at_first + told)).contains(&base),
        "base {base}: the serving line was {at_end} at the draw's end, {at_first} at the first answer"
    );
    // Not first come first served: the five who fired first are not the five first places.
    // (A fair draw gives them all five first places once in C(20, 5) = 15,504.)
    assert!(
        positions[..5].iter().any(|p| *p >= lo + 5),
        "the first arrivals took the first places: {positions:?}"
    );
    eprintln!("start draw: base {base}, arrival order -> places {positions:?}");
    // After the draw, first come first served, after every drawn place.
    let late = enter(&http, &gws[0], &c, "late").await;
    assert!(position(&late) > hi, "{late}");
    let later = enter(&http, &gws[1], &c, "later").await;
    assert!(position(&later) > position(&late), "{later}");
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn a_turn_under_100_ms_away_is_waited_for_in_place_when_the_work_comes_with_it() {
    let (c, slow) = (fixtures::cleanup::Campaign::new("wr"), fixtures::cleanup::Campaign::new("wr"));
    // 20 a second: a new arrival's turn is at most 50 ms away (the next position after the
    // serving line), under the 100 ms a request is held for.
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let (gws, redis, http) = gateways(
        1,
        &[
            (&c, campaign(&c, start, "admit_per_sec = 20")),
            (&slow, campaign(&slow, start, "admit_per_sec = 1")),
        ],
    )
    .await;
    let gw = &gws[0];
    let schedule = Schedule { rate: 20, max_active: None, session_ms: 120_000 };
    let start_ms = start.timestamp_millis();
    // With its work: held until its turn, then its token, the ticket of its position.
    let body = solved(&http, gw, &c, "h0").await;
    let asked = chrono::Utc::now().timestamp_millis() - start_ms;
    let reply = ask(&http, gw, &c, "h0", "dev-h0", None, body).await;
    assert_eq!(code(&reply), (200, "TOKEN_ISSUED"), "{}", reply.1);
    let held = reply.1["held_ms"].as_i64().unwrap_or_else(|| panic!("not held: {}", reply.1));
    assert!(held >= 0, "{}", reply.1);
    let keys = plugins::issue::EdgeKeys::derive(KEY.as_bytes()).unwrap();
    let t = reply.1["ticket"].as_str().unwrap();
    let now = chrono::Utc::now().timestamp();
    let p = match Ticket::verify(keys.room_key(), t.as_bytes(), &c, "h0", "dev-h0", now).unwrap().place {
        RoomPlace::Position(p) => p,
        other => panic!("{other:?}"),
    };
    // Its position was not served when it asked (a new arrival is never admitted at once): the
    // gateway waited for its turn instead of promising a wait of a few ms.
    assert!(p > schedule.serving(asked), "position {p}, serving {} when asked", schedule.serving(asked));
    eprintln!("admitted in place: held {held} ms for position {p} at 20/s");
    // Without the work: told to wait (its token would be refused at the captcha), its turn
    // under 100 ms away but the wait promised MIN_PROMISE_MS, the time to come back with the
    // work; the ticket keeps the promise.
    let reply = ask(&http, gw, &c, "h1", "dev-h1", None, json!({})).await;
    assert_eq!(code(&reply), (200, "WAITING"), "{}", reply.1);
    assert_eq!(reply.1["eta_ms"].as_i64(), Some(plugins::room::MIN_PROMISE_MS), "{}", reply.1);
    let eta_at = reply.1["eta_at_ms"].as_i64().unwrap();
    let ticket = reply.1["ticket"].as_str().unwrap().to_string();
    let now = chrono::Utc::now().timestamp();
    let kept = Ticket::verify(keys.room_key(), ticket.as_bytes(), &c, "h1", "dev-h1", now).unwrap();
    assert_eq!(kept.promised_ms, Some(eta_at), "{}", reply.1);
    let RoomPlace::Position(p1) = kept.place else { panic!("{kept:?}") };
    assert!(start_ms + schedule.served_at(p1) < eta_at, "its turn comes before the promise");
    // Back at once without the work, its turn now come: still waiting for the promise, which
    // the renewed ticket keeps.
    let again = ask(&http, gw, &c, "h1", "dev-h1", Some(&ticket), json!({})).await;
    if chrono::Utc::now().timestamp_millis() < eta_at - 20 {
        assert_eq!(code(&again), (200, "WAITING"), "{}", again.1);
        assert_eq!(again.1["eta_at_ms"].as_i64(), Some(eta_at), "{}", again.1);
        assert_eq!(again.1["ahead"].as_i64(), Some(0), "{}", again.1);
    }
    // Back 50 ms before the promise with the work (as the page and the e2e client come): held
    // until the promise, not let in at once though its turn has passed.
    let body = solved(&http, gw, &c, "h1").await;
    let wait = (eta_at - 50 - chrono::Utc::now().timestamp_millis()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let reply = ask(&http, gw, &c, "h1", "dev-h1", Some(&ticket), body).await;
    let answered = chrono::Utc::now().timestamp_millis();
    assert_eq!(code(&reply), (200, "TOKEN_ISSUED"), "{}", reply.1);
    assert!(answered >= eta_at, "let in {} ms before its promise: {}", eta_at - answered, reply.1);
    eprintln!("promised {} ms, admitted {} ms past it", plugins::room::MIN_PROMISE_MS, answered - eta_at);
    // Farther: on a campaign at 1/s, the buyer right behind another is a second behind it, so
    // its turn is more than 100 ms away (unless the two requests, one round trip apart, were
    // 900 ms apart): told to wait, work or not.
    let body = solved(&http, gw, &slow, "s1").await;
    let first = enter(&http, gw, &slow, "s0").await;
    let reply = ask(&http, gw, &slow, "s1", "dev-s1", None, body).await;
    assert_eq!(code(&reply), (200, "WAITING"), "{}", reply.1);
    assert_eq!(position(&reply.1), position(&first) + 1, "{}", reply.1);
    assert!(reply.1["eta_ms"].as_i64().unwrap() > 100, "{}", reply.1);
    assert!(reply.1.get("held_ms").is_none());
    cleanup(&redis, &slow).await;
    cleanup(&redis, &c).await;
}

/// A token request of `user` whose head is sent now and whose body (`{}`) only once the clock
/// reaches `body_at_ms`: the gateway reads the head (the request has arrived), then waits for
/// the body before it asks `room.lua` for a place (as an overloaded gateway would be late to).
/// Its status and JSON answer, and when the head was sent (unix ms).
async fn held_body_request(gw: &Gateway, campaign: &str, user: &str, body_at_ms: i64) -> (u16, Value, i64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let login = auth().login(user, json!({}));
    let head = format!(
        "POST /seckill/{campaign}/token HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {login}\r\n\
         X-Device-Id: dev-{user}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\
         Connection: close\r\n\r\n"
    );
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let sent = chrono::Utc::now().timestamp_millis();
    let wait = (body_at_ms - chrono::Utc::now().timestamp_millis()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    s.write_all(b"{}").await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw)).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&raw);
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null), sent)
}

#[tokio::test]
async fn a_request_that_arrived_in_the_start_draw_is_drawn_however_late_room_lua_is_asked() {
    let c = fixtures::cleanup::Campaign::new("wr");
    // Starts in 3 s (the gateway starts first), a start draw of 1.5 s at 1/s.
    let start = chrono::Utc::now() + chrono::Duration::seconds(3);
    let draw_ms = 1500;
    let room = format!("admit_per_sec = 1\nstart_draw_ms = {draw_ms}");
    let (gws, redis, http) = gateways(1, &[(&c, campaign(&c, start, &room))]).await;
    let gw = &gws[0];
    let (start_ms, draw_end_ms) = (start.timestamp_millis(), start.timestamp_millis() + draw_ms);
    let lotteries = Lotteries::new(start_ms, draw_end_ms, 10);
    let now_ms = || chrono::Utc::now().timestamp_millis();
    while now_ms() < start_ms + 50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its head reaches the gateway in the draw's window; its body (and so its call to room.lua)
    // only 300 ms after the window closed. It is drawn: judged by when it arrived.
    let (status, body, sent) = held_body_request(gw, &c, "slow", draw_end_ms + 300).await;
    assert!(
        sent < draw_end_ms,
        "the machine was too slow to send the head in the draw (raise start_draw_ms)"
    );
    assert_eq!((status, body["code"].as_str()), (200, Some("WAITING")), "{body}");
    assert_eq!(body["start_draw"].as_bool(), Some(true), "judged by its arrival: {body}");
    assert_eq!(ticket_place(&body, &c, "slow"), RoomPlace::Draw(1), "{body}");
    let ticket = body["ticket"].as_str().unwrap().to_string();
    // No place before the draw closes, its end plus the 4 s an arrival may be claimed before
    // Redis's clock: asked back then.
    assert!(body["position"].is_null(), "{body}");
    assert_eq!(body["drawn_at_ms"].as_i64(), Some(lotteries.draw_return_at_ms(1)), "{body}");
    // The next arrival, after the window, before the close: right after the drawn places.
    let next = enter(&http, gw, &c, "next").await;
    let flags = (next["start_draw"].as_bool(), next["after_draw"].as_bool());
    assert_eq!(flags, (Some(false), Some(true)), "{next}");
    assert_eq!(ticket_place(&next, &c, "next"), RoomPlace::Late(1), "{next}");
    let next_ticket = next["ticket"].as_str().unwrap().to_string();
    while now_ms() < lotteries.draw_return_at_ms(1) + 20 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The late one's place is the draw's one place, the next one's right after it, and their
    // ETAs the schedule's, after their return.
    let reply = ask(&http, gw, &c, "slow", "dev-slow", Some(&ticket), json!({})).await;
    assert_eq!(code(&reply), (200, "WAITING"), "{}", reply.1);
    let p = position(&reply.1);
    let after = ask(&http, gw, &c, "next", "dev-next", Some(&next_ticket), json!({})).await;
    assert_eq!(position(&after.1), p + 1, "the first after the draw comes right after it: {}", after.1);
    let schedule = Schedule { rate: 1, max_active: None, session_ms: 120_000 };
    assert_eq!(reply.1["eta_at_ms"].as_i64(), Some(start_ms + schedule.served_at(p)), "{}", reply.1);
    assert!(start_ms + schedule.served_at(p) >= lotteries.draw_return_at_ms(1));
    eprintln!("held body: head sent {} ms after the start, drawn; place {p}", sent - start_ms);
    cleanup(&redis, &c).await;
}

/// One `room.lua` call on the stack's Redis for `user` of a campaign starting at `start_ms` with
/// a start draw to `draw_end_ms`, claiming it arrived at `arrived_ms`.
async fn room_call(
    redis: &Client,
    campaign: &str,
    user: &str,
    arrived_ms: i64,
    windows: (i64, i64),
) -> protocol::scripts::RoomAnswer {
    let entry = room_entry(campaign, user, arrived_ms, windows);
    protocol::scripts::Scripts::builtin().room_enter(redis, &entry).await.unwrap()
}

/// The `room.lua` call of [`room_call`]: serving line 0, nothing to renew.
fn room_entry<'a>(
    campaign: &'a str,
    user: &'a str,
    arrived_ms: i64,
    (start_ms, draw_end_ms): (i64, i64),
) -> protocol::scripts::RoomEntry<'a> {
    protocol::scripts::RoomEntry {
        campaign,
        user,
        arrived_ms,
        starts_at_ms: start_ms,
        serving: 0,
        renew: None,
        expire_at_ms: chrono::Utc::now().timestamp_millis() + 60_000,
        draw_ends_at_ms: draw_end_ms,
        rates: (1, 10),
    }
}

#[tokio::test]
async fn room_lua_replaces_a_place_named_as_it_keeps_it_a_lotterys_too() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let scripts = protocol::scripts::Scripts::builtin();
    let c = fixtures::cleanup::Campaign::new("wr");
    let now = chrono::Utc::now().timestamp_millis();
    // Started a second ago, no start draw: an arrival claimed before the start joins the
    // pre-queue, the next call (an arrival now) closes it.
    let windows = (now - 1000, now - 1000);
    let out = room_call(&redis, &c, "early", now - 2000, windows).await;
    assert_eq!(out.place, RoomPlace::PreQueue(1), "{out:?}");
    let out = room_call(&redis, &c, "next", now, windows).await;
    assert_eq!((out.place, out.size), (RoomPlace::Position(2), Some(1)), "{out:?}");
    // The pre-queue of one: "early" is at position 1, kept as "a1". Its session over, the
    // gateway names the place to replace as the script keeps it; a name of another form (the
    // position) or of another place replaces nothing.
    let renewing = |renew| protocol::scripts::RoomEntry {
        serving: 40,
        renew: Some(renew),
        ..room_entry(&c, "early", now, windows)
    };
    for other in [RoomPlace::Position(1), RoomPlace::PreQueue(2), RoomPlace::Draw(1)] {
        let out = scripts.room_enter(&redis, &renewing(other)).await.unwrap();
        assert_eq!(out.place, RoomPlace::PreQueue(1), "{other:?} replaces nothing: {out:?}");
    }
    let out = scripts.room_enter(&redis, &renewing(RoomPlace::PreQueue(1))).await.unwrap();
    assert_eq!(out.place, RoomPlace::Position(41), "at the back, above the serving line: {out:?}");
    // Named again (a stale ticket): the new place stays.
    let out = scripts.room_enter(&redis, &renewing(RoomPlace::PreQueue(1))).await.unwrap();
    assert_eq!(out.place, RoomPlace::Position(41), "{out:?}");
    let k = CampaignKeys::new(&c);
    let kept: Option<String> = redis.hget(k.room_users(), "early").await.unwrap();
    assert_eq!(kept.as_deref(), Some("p41"));
    cleanup(&redis, &c).await;
}

#[tokio::test]
async fn room_lua_judges_the_arrival_clamped_to_redis_time() {
    let bound = protocol::timing::ARRIVAL_CLAIM_MAX_MS;
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    // A draw whose window ended a second ago: an arrival claimed in it, within the bound, is
    // drawn though the call comes after the window; the draw is not closed until no call can
    // claim an arrival in it, and an arrival after it meanwhile comes right after the drawn.
    let late = fixtures::cleanup::Campaign::new("wr");
    let windows = (now - 3000, now - 1000);
    let out = room_call(&redis, &late, "u1", now - 2000, windows).await;
    assert_eq!((out.place, out.draw), (RoomPlace::Draw(1), None), "{out:?}");
    let out = room_call(&redis, &late, "u2", now, windows).await;
    assert_eq!((out.place, out.draw), (RoomPlace::Late(1), None), "{out:?}");
    // A draw whose window ended more than the bound ago: an arrival claimed in it is clamped to
    // TIME - bound, after the window: not drawn, and the call closes the draw, empty. So do
    // claims that are no instant at all.
    let old = fixtures::cleanup::Campaign::new("wr");
    let windows = (now - bound - 3000, now - bound - 1000);
    let out = room_call(&redis, &old, "cheat", now - bound - 2000, windows).await;
    assert!(matches!(out.place, RoomPlace::Position(_)), "clamped out of the draw: {out:?}");
    assert_eq!(out.draw.map(|d| d.size), Some(0), "{out:?}");
    let junk = fixtures::cleanup::Campaign::new("wr");
    let windows = (now - bound - 3000, now - bound - 1000);
    for (i, claim) in [i64::MIN, 0, -1].into_iter().enumerate() {
        let out = room_call(&redis, &junk, &format!("j{i}"), claim, windows).await;
        assert!(matches!(out.place, RoomPlace::Position(_)), "{claim}: {out:?}");
    }
    let keys = CampaignKeys::new(&junk);
    let script = include_str!("../../../lua/room.lua");
    for (i, claim) in ["nan", "-inf", "soon", ""].into_iter().enumerate() {
        let argv = vec![
            format!("x{i}"),
            claim.to_string(),
            windows.0.to_string(),
            "0".into(),
            String::new(),
            (now + 60_000).to_string(),
            windows.1.to_string(),
            "1".into(),
            "10".into(),
        ];
        let out: Vec<fred::types::Value> =
            redis.eval(script, vec![keys.room(), keys.room_users()], argv).await.unwrap();
        let place = out[0].as_string().unwrap_or_default();
        assert!(place.starts_with('p'), "{claim:?}: {place}");
    }
    // A claim in the future is clamped to TIME: it cannot close a draw still open.
    let open = fixtures::cleanup::Campaign::new("wr");
    let now = chrono::Utc::now().timestamp_millis();
    let windows = (now - 1000, now + 5000);
    let out = room_call(&redis, &open, "ahead", now + 60_000, windows).await;
    assert_eq!((out.place, out.draw), (RoomPlace::Draw(1), None), "{out:?}");
    let out = room_call(&redis, &open, "honest", chrono::Utc::now().timestamp_millis(), windows).await;
    assert_eq!((out.place, out.draw), (RoomPlace::Draw(2), None), "{out:?}");
    for c in [&late, &old, &junk, &open] {
        cleanup(&redis, c.id()).await;
    }
}

/// A gateway that answers late lets the presentations whose turns passed through at the rate, not
/// all at once: eight buyers whose turns passed more than a second ago present their tickets
/// together; at most `admit_per_sec` of them are admitted in each second, the others told to
/// present the same ticket again in the next second, and all are admitted in the end.
#[tokio::test]
async fn late_presentations_are_admitted_at_the_rate_not_all_at_once() {
    late_presentations_paced(1).await;
}

#[tokio::test]
async fn late_presentations_on_two_gateways_are_admitted_at_the_rate_of_both_together() {
    // Per process, each of the two would admit 2 a second (4 together): admit.lua counts the
    // second's admissions across both.
    late_presentations_paced(2).await;
}

/// Eight buyers at 2 a second whose turns passed more than a second ago present their tickets
/// together, in turn to `n` gateways: at most 2 a second are admitted, the others told to come
/// back in the next second with the same ticket, and every one is admitted in the end.
async fn late_presentations_paced(n: usize) {
    let c = fixtures::cleanup::Campaign::new("wp");
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let room = "admit_per_sec = 2\nsession_secs = 60";
    let (gws, redis, http) = gateways(n, &[(&c, campaign(&c, start, room))]).await;
    let users: Vec<String> = (0..8).map(|i| format!("late{i}")).collect();
    let gw_of = |i: usize| &gws[i % gws.len()];
    let mut tickets = Vec::new();
    let mut last_eta_at = 0;
    for u in &users {
        let body = enter(&http, &gws[0], &c, u).await;
        last_eta_at = last_eta_at.max(body["eta_at_ms"].as_i64().unwrap());
        tickets.push(body["ticket"].as_str().unwrap().to_string());
    }
    // Every turn passed by more than a second (the last one at most 4 s away at 2 a second),
    // and the presentations start just after a second begins, so that they fit in one.
    let wait = last_eta_at + 1_500 - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(wait.clamp(0, 6_000) as u64)).await;
    let into_second = chrono::Utc::now().timestamp_millis().rem_euclid(1000);
    tokio::time::sleep(Duration::from_millis((1020 - into_second) as u64)).await;

    let first_second = chrono::Utc::now().timestamp();
    let mut waiting = Vec::new();
    let mut admitted_now = 0;
    for (i, (u, t)) in users.iter().zip(&tickets).enumerate() {
        let reply = ask(&http, gw_of(i), &c, u, &format!("dev-{u}"), Some(t), json!({})).await;
        match code(&reply) {
            (403, "CAPTCHA_FAILED") => admitted_now += 1,
            (200, "WAITING") => {
                assert_eq!(
                    reply.1["ticket"].as_str(),
                    Some(t.as_str()),
                    "the same ticket again: {}",
                    reply.1
                );
                assert_eq!(reply.1["retry_after"].as_u64(), Some(1), "{}", reply.1);
                waiting.push((i, u, t));
            }
            other => panic!("{other:?}: {}", reply.1),
        }
    }
    let seconds = (chrono::Utc::now().timestamp() - first_second + 1) as usize;
    assert!(admitted_now >= 1, "some are admitted at once");
    assert!(admitted_now <= 2 * seconds, "{admitted_now} admitted in {seconds} s at 2 a second");
    assert!(!waiting.is_empty(), "the others wait");

    // The rest come back a second later, until every one is admitted (bounded).
    let began = Instant::now();
    while !waiting.is_empty() && began.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let mut still = Vec::new();
        for (i, u, t) in waiting {
            if !admitted(&http, gw_of(i), &c, u, t).await {
                still.push((i, u, t));
            }
        }
        waiting = still;
    }
    assert!(waiting.is_empty(), "every late buyer is admitted in the end: {waiting:?}");
    cleanup(&redis, &c).await;
}

/// Sleeps until 20 ms into the next second (by the clock the gateways share): a few requests
/// sent then fit in one second of `admit.lua`'s count.
async fn next_second() {
    let into = chrono::Utc::now().timestamp_millis().rem_euclid(1000);
    tokio::time::sleep(Duration::from_millis((1020 - into) as u64)).await;
}

/// Whether the room let a token request without a captcha through (`CAPTCHA_FAILED`), or told it
/// `WAITING`.
fn let_through(reply: &(u16, Value)) -> bool {
    match code(reply) {
        (403, "CAPTCHA_FAILED") => true,
        (200, "WAITING") => false,
        other => panic!("{other:?}: {}", reply.1),
    }
}

/// The late pace counts a place's first admission once, and no request goes around it: at 2 a
/// second on two gateways, three buyers whose turns passed more than a second ago ask in one
/// second. The first presents its waiting ticket (admitted, counted), then the same ticket to the
/// other gateway (admitted again, not counted again), and once more without it (the same); the
/// second is then admitted with its ticket (counted: the second's two admissions); the third,
/// asking without its ticket, is told to wait for the next second as its ticket would be, and
/// given a waiting ticket, whose presentation is paced.
#[tokio::test]
async fn a_first_admission_is_counted_once_and_paced_with_or_without_its_ticket_on_two_gateways() {
    let c = fixtures::cleanup::Campaign::new("wp");
    let start = chrono::Utc::now() - chrono::Duration::minutes(1);
    let room = "admit_per_sec = 2\nsession_secs = 60";
    let (gws, redis, http) = gateways(2, &[(&c, campaign(&c, start, room))]).await;
    let schedule = Schedule { rate: 2, max_active: None, session_ms: 60_000 };
    // Three rounds of three buyers, in case a round is cut by a second's end on a slow machine.
    let mut rounds = Vec::new();
    let mut last_eta_at = 0;
    for r in 0..3 {
        let mut round = Vec::new();
        for who in ["a", "b", "c"] {
            let user = format!("{who}{r}");
            let body = enter(&http, &gws[0], &c, &user).await;
            last_eta_at = last_eta_at.max(body["eta_at_ms"].as_i64().unwrap());
            round.push((user, body["ticket"].as_str().unwrap().to_string()));
        }
        rounds.push(round);
    }
    // Every turn passed by more than a second (the last at most 4.5 s away at 2 a second).
    let wait = last_eta_at + 1_500 - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(wait.clamp(0, 7_000) as u64)).await;
    let mut checked = None;
    for round in &rounds {
        next_second().await;
        let second = chrono::Utc::now().timestamp();
        let [(a, a_ticket), (b, b_ticket), (c_user, _)] = round.as_slice() else { unreachable!() };
        let (dev_a, dev_b, dev_c) = (format!("dev-{a}"), format!("dev-{b}"), format!("dev-{c_user}"));
        let replies = [
            ask(&http, &gws[0], &c, a, &dev_a, Some(a_ticket), json!({})).await,
            ask(&http, &gws[1], &c, a, &dev_a, Some(a_ticket), json!({})).await,
            ask(&http, &gws[0], &c, a, &dev_a, None, json!({})).await,
            ask(&http, &gws[1], &c, b, &dev_b, Some(b_ticket), json!({})).await,
            ask(&http, &gws[0], &c, c_user, &dev_c, None, json!({})).await,
        ];
        if chrono::Utc::now().timestamp() != second {
            eprintln!("a round was cut by the second's end; the next one");
            continue;
        }
        let through: Vec<bool> = replies.iter().map(let_through).collect();
        assert_eq!(
            through,
            [true, true, true, true, false],
            "a, a again on the other gateway, a without its ticket, b, c without its ticket: {:?}",
            replies.iter().map(|r| &r.1).collect::<Vec<_>>()
        );
        checked = Some((c_user.clone(), replies[4].1.clone()));
        break;
    }
    let (c_user, told) = checked.expect("every round was cut by a second's end: the machine is too slow");
    // The third was told to come back in the next second, with a waiting ticket for its place:
    // dated before its position's promise, so that presenting it is a first admission, paced.
    assert_eq!(told["retry_after"].as_u64(), Some(1), "{told}");
    let RoomPlace::Position(p) = ticket_place(&told, &c, &c_user) else { panic!("{told}") };
    assert_eq!(position(&told), p, "{told}");
    let keys = plugins::issue::EdgeKeys::derive(KEY.as_bytes()).unwrap();
    let now = chrono::Utc::now().timestamp();
    let t = told["ticket"].as_str().unwrap();
    let issued = Ticket::verify(keys.room_key(), t.as_bytes(), &c, &c_user, &format!("dev-{c_user}"), now)
        .unwrap()
        .issued_at;
    let promised = start.timestamp_millis() + schedule.served_at(p);
    assert!(issued * 1000 < promised, "a waiting ticket: issued {issued} s, promised {promised} ms");
    // Presented in a later second, it is admitted (bounded).
    let began = Instant::now();
    while !admitted(&http, &gws[1], &c, &c_user, t).await {
        assert!(began.elapsed() < Duration::from_secs(10), "the waiting ticket is admitted in the end");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cleanup(&redis, &c).await;
}

/// `admit.lua`'s contract, called directly: a place's first admission is counted in its second;
/// the same place again is let through and not counted (however late, whatever the count); a late
/// first admission waits once the second's are full, counted nowhere; an on-time one always goes
/// and is counted; another place of the same buyer (joined again at the back) is a first admission.
#[tokio::test]
async fn admit_lua_counts_a_places_first_admission_once() {
    use protocol::scripts::{Admit, Admitted};
    let c = fixtures::cleanup::Campaign::new("wa");
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let second = chrono::Utc::now().timestamp() + 1_000;
    let expire_at_ms = (second + 60) * 1000;
    let id: &str = &c;
    let admit = |user: &'static str, position: u64, late: bool| Admit {
        campaign: id,
        second,
        late,
        admit_per_sec: 2,
        user,
        position,
        expire_at_ms,
    };
    let s = scripts();
    let mut answers = Vec::new();
    for (user, position, late) in [
        ("a", 1, true),
        ("a", 1, true),
        ("b", 2, true),
        ("a", 1, true),
        ("c", 3, true),
        ("c", 3, false),
        ("c", 3, true),
        ("a", 9, true),
    ] {
        answers.push(s.admit(&redis, &admit(user, position, late)).await.unwrap());
    }
    use Admitted::*;
    assert_eq!(answers, [First, Again, First, Again, Wait, First, Again, Wait]);
    let k = CampaignKeys::new(&c);
    let counted: Option<i64> = redis.get(k.admitted(second)).await.unwrap();
    assert_eq!(counted, Some(3), "a, b and c's on-time admission");
    let places: std::collections::HashMap<String, String> = redis.hgetall(k.room_admitted()).await.unwrap();
    let want = [("a", "p1"), ("b", "p2"), ("c", "p3")].map(|(u, p)| (u.to_string(), p.to_string()));
    assert_eq!(places, want.into_iter().collect());
    let ttl: i64 = redis.pttl(k.room_admitted()).await.unwrap();
    assert!(ttl > 0, "the record of admitted places expires: {ttl}");
    cleanup(&redis, &c).await;
}
