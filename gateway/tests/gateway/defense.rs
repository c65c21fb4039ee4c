//! The edge defenses, one refusal at a time, each asserting its code; replay and safe retry
//! across two gateway processes on one Redis; refused requests never touch the stock; the
//! proof of work judged at the level in force when it is presented.

use std::process::Command;

use fred::prelude::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use protocol::keys::CampaignKeys;
use serde_json::{json, Value};

use crate::support::*;

type Reply = fixtures::client::Reply;

/// A gateway over the stack's Redis with `campaigns` (id, extra campaign lines), each published
/// with `stock` units and a limit of 1; no order writer, no Kafka (the outbox keeps records).
async fn gateway(campaigns: &[(&str, &str)], stock: i64) -> (Gateway, Client, reqwest::Client) {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let nowhere = format!("127.0.0.1:{}", free_port());
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), &nowhere, campaigns[0].0, campaigns[0].1);
    conf.campaigns = campaigns.iter().map(|(id, extra)| (id.to_string(), campaign_toml(id, extra))).collect();
    for (id, _) in campaigns {
        publish(&redis, id, stock, 1).await;
    }
    (Gateway::start(&conf).await, redis, reqwest::Client::new())
}

fn code(reply: &(u16, Value)) -> (u16, &str) {
    (reply.0, reply.1["code"].as_str().unwrap_or("?"))
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[tokio::test]
async fn every_order_refusal_has_its_code_and_touches_no_stock() {
    let (c, other) = (fixtures::cleanup::Campaign::new("df"), fixtures::cleanup::Campaign::new("df"));
    let (gw, redis, http) = gateway(&[(&c, ""), (&other, "")], 10).await;
    let base = gw.url("");
    let t = ticket(&http, &gw, &c, "alice").await.unwrap();
    let bob = ticket(&http, &gw, &c, "bob").await.unwrap();
    let elsewhere = ticket(&http, &gw, &other, "alice").await.unwrap();
    let fresh = || t.sign(1, now(), &fixtures::client::nonce());

    let mut cases: Vec<(&str, Reply, (u16, &str))> = Vec::new();
    let mut tampered = fresh();
    tampered.query = "qty=2".into();
    cases.push(("tampered query", t.send(&http, &base, &tampered).await, (401, "BAD_SIGNATURE")));
    let mut tampered = fresh();
    tampered.body = b"{\"qty\":2}".to_vec();
    cases.push(("tampered body", t.send(&http, &base, &tampered).await, (401, "BAD_SIGNATURE")));
    let mut forged = fresh();
    forged.signature = "0".repeat(64);
    cases.push(("forged signature", t.send(&http, &base, &forged).await, (401, "BAD_SIGNATURE")));
    let mut unsigned = fresh();
    unsigned.signature = String::new();
    cases.push(("no signature", t.send(&http, &base, &unsigned).await, (401, "BAD_SIGNATURE")));
    let old = t.sign(1, now() - 120, &fixtures::client::nonce());
    cases.push(("timestamp behind", t.send(&http, &base, &old).await, (401, "STALE_TIMESTAMP")));
    let ahead = t.sign(1, now() + 120, &fixtures::client::nonce());
    cases.push(("timestamp ahead", t.send(&http, &base, &ahead).await, (401, "STALE_TIMESTAMP")));
    let mut wrong_path = fresh();
    wrong_path.path = format!("/seckill/{c}/0123456789abcdef/order");
    cases.push(("wrong path", t.send(&http, &base, &wrong_path).await, (404, "BAD_PATH")));
    let mut no_path = fresh();
    no_path.path = format!("/seckill/{c}/order");
    cases.push(("no path", t.send(&http, &base, &no_path).await, (404, "BAD_PATH")));
    // Alice's token on Bob's path: the path belongs to another user.
    let mut bobs_path = fresh();
    bobs_path.path = format!("/seckill/{c}/{}/order", bob.path);
    cases.push(("another user's path", t.send(&http, &base, &bobs_path).await, (404, "BAD_PATH")));
    // Alice's token of the other campaign, sent to this one.
    let mut foreign = elsewhere.sign(1, now(), &fixtures::client::nonce());
    foreign.path = format!("/seckill/{c}/{}/order", elsewhere.path);
    cases.push((
        "another campaign's token",
        elsewhere.send(&http, &base, &foreign).await,
        (401, "BAD_TOKEN"),
    ));
    // Another device.
    let stolen = fixtures::client::Ticket { device: "dev-mallory".into(), ..t.clone() };
    cases.push(("another device", stolen.send(&http, &base, &fresh()).await, (401, "BAD_TOKEN")));
    let forged_token = fixtures::client::Ticket { token: format!("{}x", t.token), ..t.clone() };
    cases.push(("forged token", forged_token.send(&http, &base, &fresh()).await, (401, "BAD_TOKEN")));
    // An expired token, as a gateway with the same master key would have issued it.
    let keys = plugins::issue::EdgeKeys::derive(KEY.as_bytes()).unwrap();
    let login = plugins::issue::Login { user: "alice".into(), ..Default::default() };
    let expired = keys.issue(&login, &c, "dev-alice", 10, now() - 100).unwrap();
    let late = fixtures::client::Ticket {
        token: expired.token,
        path: expired.path,
        signing_key: hex::decode(expired.signing_key).unwrap(),
        ..t.clone()
    };
    cases.push(("expired token", late.order(&http, &base, 1).await, (401, "TOKEN_EXPIRED")));

    for (what, reply, expected) in &cases {
        assert_eq!(code(reply), *expected, "{what}: {}", reply.1);
    }
    let keys = CampaignKeys::new(&c);
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    let bought: u64 = redis.hlen(&keys.bought).await.unwrap();
    assert_eq!((stock, bought), (10, 0), "refused requests never touch stock nor the per-user counters");

    // The genuine order still goes through, once.
    let signed = fresh();
    let first = t.send(&http, &base, &signed).await;
    assert_eq!(code(&first), (202, "QUEUED"), "{}", first.1);
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 9);
}

#[tokio::test]
async fn a_replayed_nonce_is_refused_on_any_gateway_and_a_safe_retry_learns_the_first_answer() {
    let c = fixtures::cleanup::Campaign::new("df");
    let (gw, redis, http) = gateway(&[(&c, "")], 10).await;
    let mut conf2 = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &c, "");
    conf2.campaigns = vec![(c.clone(), campaign_toml(&c, ""))];
    let gw2 = Gateway::start(&conf2).await;
    let t = ticket(&http, &gw, &c, "carol").await.unwrap();

    let signed = t.sign(1, now(), "nonce-retry-1");
    let first = t.send(&http, &gw.url(""), &signed).await;
    assert_eq!(code(&first), (202, "QUEUED"), "{}", first.1);
    // The same signed request again, on either process: the first answer, same request id.
    for base in [gw.url(""), gw2.url("")] {
        let again = t.send(&http, &base, &signed).await;
        assert_eq!(code(&again), (202, "QUEUED"), "{}", again.1);
        assert_eq!(again.1["request_id"], first.1["request_id"]);
        assert_eq!(again.1["poll_url"], first.1["poll_url"]);
        // With the result token of the first request, for its buyer.
        let keys = plugins::issue::EdgeKeys::derive(KEY.as_bytes()).unwrap();
        let token = again.1["result_token"].as_str().expect("a safe retry's answer carries a result token");
        let id = first.1["request_id"].as_str().unwrap();
        assert_eq!(keys.check_result_token(Some(token.as_bytes()), &c, id, now()).unwrap(), "carol");
    }
    // Another request with that nonce: a replay, on either process.
    let other = t.sign(2, now(), "nonce-retry-1");
    for base in [gw.url(""), gw2.url("")] {
        let replay = t.send(&http, &base, &other).await;
        assert_eq!(code(&replay), (409, "REPLAY"), "{}", replay.1);
    }
    let keys = CampaignKeys::new(&c);
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 9, "reserved once");
    let ttl: i64 = redis.ttl(keys.nonce(&t_jti(&t), "nonce-retry-1")).await.unwrap();
    assert!((30..=90).contains(&ttl), "the nonce lives at least the timestamp window: {ttl}");

    // A refused request's nonce is spent too, and its retry gets the same refusal.
    let refused = t.sign(1, now(), "nonce-retry-2");
    let answer = t.send(&http, &gw2.url(""), &refused).await;
    assert_eq!(code(&answer), (409, "LIMIT_REACHED"), "{}", answer.1);
    assert_eq!(code(&t.send(&http, &gw.url(""), &refused).await), (409, "LIMIT_REACHED"));
    let other = t.sign(3, now(), "nonce-retry-2");
    assert_eq!(code(&t.send(&http, &gw.url(""), &other).await), (409, "REPLAY"));
}

/// The `jti` of a ticket's token (its payload, unverified: the test only reads it).
fn t_jti(t: &fixtures::client::Ticket) -> String {
    let payload = t.token.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(&b64url(payload)).unwrap();
    claims["jti"].as_str().unwrap().to_string()
}

fn b64url(s: &str) -> Vec<u8> {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let vals: Vec<u32> = s.bytes().map(|b| T.iter().position(|&t| t == b).unwrap() as u32).collect();
    let mut out = Vec::new();
    for chunk in vals.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, v)| n | v << (18 - 6 * i));
        out.extend(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[tokio::test]
async fn token_endpoint_refusals_captcha_reuse_and_eligibility() {
    let c = fixtures::cleanup::Campaign::new("df");
    let dir = std::env::temp_dir().join(fixtures::stack::unique("df-lists-"));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("blacklist.txt");
    std::fs::write(&list, "bot-0\n").unwrap();
    let extra = format!(
        "[eligibility]\nblacklist_file = \"{}\"\nmin_level = 2\nregions = [\"CN-SH\"]\n",
        list.display()
    );
    let (gw, _redis, http) = gateway(&[(&c, &extra)], 10).await;
    std::fs::write(&list, "bot-0\nbot-1\n").unwrap();
    gw.hup();
    let base = gw.url("");
    let ok = json!({"level": 3, "region": "CN-SH"});
    let ready = eventually(std::time::Duration::from_secs(5), || {
        let (http, base, c) = (http.clone(), base.clone(), c.clone());
        let login = auth().login("bot-1", json!({"level": 3, "region": "CN-SH"}));
        async move {
            let r = fixtures::client::get_ticket(&http, &base, &c, &login, "dev-b").await;
            matches!(r, Err((403, ref b)) if b["code"] == "NOT_ELIGIBLE")
        }
    })
    .await;
    assert!(ready, "the blacklist is loaded on reload: {}", gw.log());

    let try_login = |user: &str, claims: Value| {
        let login = auth().login(user, claims);
        let (http, base, c, device) = (http.clone(), base.clone(), c.clone(), format!("dev-{user}"));
        async move { fixtures::client::get_ticket(&http, &base, &c, &login, &device).await.map(|_| ()) }
    };
    assert!(try_login("dave", ok.clone()).await.is_ok());
    for (what, user, claims) in [
        ("level", "low", json!({"level": 1, "region": "CN-SH"})),
        ("region", "far", json!({"level": 3, "region": "US"})),
        ("no claims", "bare", json!({})),
    ] {
        let err = try_login(user, claims).await.unwrap_err();
        assert_eq!(code(&err), (403, "NOT_ELIGIBLE"), "{what}: {}", err.1);
    }

    // Login JWTs the shop did not issue, or not for us.
    let hs = |claims: Value, key: &[u8]| {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(key).unwrap()).unwrap()
    };
    let claims = |f: &dyn Fn(&mut Value)| {
        let mut c = json!({"sub": "erin", "iss": fixtures::client::ISSUER, "aud": fixtures::client::AUDIENCE,
                           "exp": now() + 60, "level": 3, "region": "CN-SH"});
        f(&mut c);
        c
    };
    let none = format!(
        "{}.{}.",
        b64url_enc(br#"{"alg":"none"}"#),
        b64url_enc(&serde_json::to_vec(&claims(&|_| ())).unwrap())
    );
    for (what, jwt) in [
        ("expired", hs(claims(&|c| c["exp"] = (now() - 600).into()), LOGIN_KEY.as_bytes())),
        ("issuer", hs(claims(&|c| c["iss"] = "evil".into()), LOGIN_KEY.as_bytes())),
        ("audience", hs(claims(&|c| c["aud"] = "other".into()), LOGIN_KEY.as_bytes())),
        ("key", hs(claims(&|_| ()), b"not-the-shop-key-0123")),
        ("alg none", none),
    ] {
        let err = fixtures::client::get_ticket(&http, &base, &c, &jwt, "dev-erin").await.unwrap_err();
        assert_eq!(code(&err), (401, "BAD_LOGIN"), "{what}: {}", err.1);
    }

    // A challenge is single use; a wrong answer fails.
    let ask = || async {
        let r = http.post(format!("{base}/seckill/{c}/captcha")).send().await.unwrap();
        r.json::<Value>().await.unwrap()
    };
    let token = |body: Value, user: &str| {
        let login = auth().login(user, ok.clone());
        http.post(format!("{base}/seckill/{c}/token"))
            .bearer_auth(login)
            .header("x-device-id", format!("dev-{user}"))
            .json(&body)
            .send()
    };
    let ch = ask().await;
    let (challenge, bits) =
        (ch["challenge"].as_str().unwrap().to_string(), ch["bits"].as_u64().unwrap() as u32);
    let answer = protocol::pow::solve(&challenge, bits, 1 << 24).unwrap();
    let body = json!({"challenge": challenge, "answer": answer});
    assert_eq!(token(body.clone(), "fay").await.unwrap().status(), 200);
    let reused = token(body, "gus").await.unwrap();
    assert_eq!(reused.status(), 403);
    assert_eq!(reused.json::<Value>().await.unwrap()["code"], "CAPTCHA_FAILED");
    let ch = ask().await;
    let challenge = ch["challenge"].as_str().unwrap().to_string();
    let wrong =
        (0..1000).map(|n| n.to_string()).find(|a| !protocol::pow::solves(&challenge, a, bits)).unwrap();
    let r = token(json!({"challenge": challenge, "answer": wrong}), "hal").await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "CAPTCHA_FAILED");
    let r = token(json!({"nonsense": 1}), "hal").await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "BAD_REQUEST");
    remove_unless_failed(&dir);
}

fn b64url_enc(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `openssl` makes a key pair in `dir`: (private PEM, public PEM).
fn key_pair(dir: &std::path::Path, kind: &str) -> (Vec<u8>, String) {
    std::fs::create_dir_all(dir).unwrap();
    let (private, public) = (dir.join(format!("{kind}.key")), dir.join(format!("{kind}.pub")));
    let gen = match kind {
        "rsa" => vec!["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out"],
        _ => vec!["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"],
    };
    let quiet =
        |c: &mut Command| c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status();
    assert!(quiet(Command::new("openssl").args(&gen).arg(&private)).unwrap().success());
    assert!(quiet(
        Command::new("openssl").args(["pkey", "-pubout", "-in"]).arg(&private).arg("-out").arg(&public)
    )
    .unwrap()
    .success());
    (std::fs::read(private).unwrap(), std::fs::read_to_string(public).unwrap())
}

#[tokio::test]
async fn rs256_login_refuses_algorithm_confusion_and_a_provider_token_is_single_use() {
    let dir = std::env::temp_dir().join(fixtures::stack::unique("df-keys-"));
    let (rsa_private, rsa_public) = key_pair(&dir, "rsa");
    let (ec_private, ec_public) = key_pair(&dir, "ec");
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let c = fixtures::cleanup::Campaign::new("df");
    publish(&redis, &c, 10, 1).await;
    let mut conf = GatewayConf::new(
        &fixtures::stack::redis_url(),
        "127.0.0.1:1",
        &c,
        "[defense]\ncaptcha = \"provider\"",
    );
    conf.login = ("RS256".into(), rsa_public.clone());
    let provider_file = gw_file(&ec_public);
    conf.defense_extra = format!(
        "captcha_provider_alg = \"ES256\"\ncaptcha_provider_key = \"file:{}\"\n\
         captcha_provider_issuer = \"captcha.example\"\ncaptcha_provider_audience = \"shop-site\"",
        provider_file.display()
    );
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let claims = json!({"sub": "ivy", "iss": fixtures::client::ISSUER, "aud": fixtures::client::AUDIENCE, "exp": now() + 60});
    let rs =
        encode(&Header::new(Algorithm::RS256), &claims, &EncodingKey::from_rsa_pem(&rsa_private).unwrap())
            .unwrap();
    // HS256 with the public key as the secret: the classic confusion.
    let confused = encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(rsa_public.as_bytes()).unwrap(),
    )
    .unwrap();
    let provider_token = |jti: &str| {
        let c = json!({"jti": jti, "iss": "captcha.example", "aud": "shop-site", "exp": now() + 60});
        encode(&Header::new(Algorithm::ES256), &c, &EncodingKey::from_ec_pem(&ec_private).unwrap()).unwrap()
    };
    let ask = |login: String, body: Value| {
        http.post(gw.url(&format!("/seckill/{c}/token")))
            .bearer_auth(login)
            .header("x-device-id", "dev-ivy")
            .json(&body)
            .send()
    };
    let pass = ask(rs.clone(), json!({"captcha_token": provider_token("p-1")})).await.unwrap();
    let body: Value = pass.json().await.unwrap();
    assert_eq!(body["code"], "TOKEN_ISSUED", "{body}");
    let again = ask(rs.clone(), json!({"captcha_token": provider_token("p-1")})).await.unwrap();
    assert_eq!(
        again.json::<Value>().await.unwrap()["code"],
        "CAPTCHA_FAILED",
        "a provider token is single use"
    );
    let confused = ask(confused, json!({"captcha_token": provider_token("p-2")})).await.unwrap();
    assert_eq!(
        (confused.status().as_u16(), confused.json::<Value>().await.unwrap()["code"].clone()),
        (401, json!("BAD_LOGIN"))
    );
    // A provider token signed by someone else.
    let (other_private, _) = key_pair(&dir, "ec2");
    let c2 = json!({"jti": "p-3", "iss": "captcha.example", "aud": "shop-site", "exp": now() + 60});
    let fake =
        encode(&Header::new(Algorithm::ES256), &c2, &EncodingKey::from_ec_pem(&other_private).unwrap())
            .unwrap();
    let r = ask(rs, json!({"captcha_token": fake})).await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "CAPTCHA_FAILED");
    remove_unless_failed(&dir);
    remove_unless_failed(&provider_file);
}

/// Writes `text` to a fresh file and returns its absolute path.
fn gw_file(text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(fixtures::stack::unique("df-pub-"));
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn each_limit_dimension_refuses_with_rate_limited() {
    let c = fixtures::cleanup::Campaign::new("df");
    let (gw, redis, http) = gateway(&[(&c, "")], 100).await;
    let base = gw.url("");
    let mut tickets = Vec::new();
    for i in 0..4 {
        tickets.push(ticket(&http, &gw, &c, &format!("lim-{i}")).await.unwrap());
    }
    let stock_before: i64 = redis.get(CampaignKeys::new(&c).stock).await.unwrap();
    for (limit, what) in [
        ("device_per_sec = 1", "device"),
        ("ip_per_sec = 1", "ip"),
        ("campaign_per_sec = 1", "campaign"),
        ("user_per_sec = 1", "account"),
    ] {
        gw.write_campaign(&c, &campaign_toml(&c, &format!("[limits]\n{limit}")));
        gw.hup();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        // Several requests at once in one second: some are limited. Each is signed, but they
        // are refused before the signature matters; the account one reuses a ticket.
        let mut limited = 0;
        for i in 0..6 {
            let t = if what == "account" { &tickets[0] } else { &tickets[i % 4] };
            let mut signed = t.sign(1, now(), &fixtures::client::nonce());
            signed.signature = "0".repeat(64);
            let reply = if what == "device" {
                // No device header at all: one shared "no device" bucket, never a bypass.
                let r = http.post(format!("{base}{}?{}", signed.path, signed.query)).send().await.unwrap();
                (r.status().as_u16(), r.json::<Value>().await.unwrap())
            } else {
                t.send(&http, &base, &signed).await
            };
            if code(&reply) == (429, "RATE_LIMITED") {
                limited += 1;
            }
        }
        assert!(limited >= 1, "{what}: some requests were rate limited");
    }
    let stock: i64 = redis.get(CampaignKeys::new(&c).stock).await.unwrap();
    assert_eq!(stock, stock_before, "nothing was reserved");
}

/// A solved challenge of `campaign` asked now by `device`: the token request's body, solved at
/// the challenge's own bits and short of `short_of` (the work of a level that rose since).
async fn cheap_work(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    device: &str,
    short_of: u32,
) -> Value {
    let ch: Value = http
        .post(format!("{base}/seckill/{campaign}/captcha"))
        .header("x-device-id", device)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (challenge, bits) = (ch["challenge"].as_str().unwrap(), ch["bits"].as_u64().unwrap() as u32);
    assert!(bits < short_of, "asked before the crowd: {ch}");
    let answer = (0..1_000_000u32)
        .map(|n| n.to_string())
        .find(|a| (bits..short_of).contains(&protocol::pow::leading_zero_bits(challenge, a)))
        .unwrap();
    json!({"challenge": challenge, "answer": answer})
}

/// The level of the proof of work is judged when the work is presented, not when its challenge
/// was asked: a script that asked its challenges before the crowd (cheap, 4 bits) and presents
/// them once the level rose (12 bits) is refused `CAPTCHA_FAILED`, with a fresh challenge at the
/// level in force; solving that one gets its token. A buyer who asked just before the level rose
/// and presents at once (within the grace) gets its token with the work it did.
#[tokio::test]
async fn work_is_judged_at_the_level_in_force_when_it_is_presented() {
    let c = fixtures::cleanup::Campaign::new("df");
    let levels = "[defense]\npow_bits = 4\n\n[[pow_level]]\narrivals_per_sec = 3\nbits = 12\n";
    let (gw, _redis, http) = gateway(&[(&c, levels)], 10).await;
    let base = gw.url("");
    let token = |body: Value, user: &str| {
        let login = auth().login(user, json!({}));
        let r = http
            .post(format!("{base}/seckill/{c}/token"))
            .bearer_auth(login)
            .header("x-device-id", format!("dev-{user}"))
            .json(&body)
            .send();
        async move {
            let r = r.await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or_default())
        }
    };
    // The crowd: token requests (each one arrival, whatever its body) in one second.
    let crowd = || futures::future::join_all((0..4).map(|i| token(json!({}), &format!("crowd-{i}"))));

    let stale = cheap_work(&http, &base, &c, "dev-script", 12).await;
    tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    let fresh = cheap_work(&http, &base, &c, "dev-buyer", 12).await;
    crowd().await;
    let (_, ch) = token(json!({}), "probe").await;
    let now: Value =
        http.post(format!("{base}/seckill/{c}/captcha")).send().await.unwrap().json().await.unwrap();
    assert_eq!(now["bits"], 12, "the level rose with the crowd: {now} {ch}");

    let bought = token(fresh, "buyer").await;
    assert_eq!(code(&bought), (200, "TOKEN_ISSUED"), "the buyer's work, just done: {}", bought.1);

    crowd().await;
    let refused = token(stale, "script").await;
    assert_eq!(
        code(&refused),
        (403, "CAPTCHA_FAILED"),
        "a cheap challenge of before the crowd: {}",
        refused.1
    );
    let (challenge, bits) = (refused.1["challenge"].as_str(), refused.1["bits"].as_u64());
    assert_eq!(bits, Some(12), "a fresh challenge at the level in force: {}", refused.1);
    let challenge = challenge.unwrap();
    let answer = protocol::pow::solve(challenge, 12, 1 << 24).unwrap();
    crowd().await;
    let again = token(json!({"challenge": challenge, "answer": answer}), "script").await;
    assert_eq!(code(&again), (200, "TOKEN_ISSUED"), "the fresh challenge, solved: {}", again.1);
}

/// A JWK set of HS256 `keys` (kid, secret).
fn jwk_set(keys: &[(&str, &[u8])]) -> String {
    use base64::Engine as _;
    let b64 = |k: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k);
    let keys: Vec<Value> =
        keys.iter().map(|(kid, k)| json!({"kty": "oct", "kid": kid, "k": b64(k)})).collect();
    json!({ "keys": keys }).to_string()
}

/// The shop's auth service rotates its signing key with the gateway's `login_keys` (a JWK set):
/// the new key is added and the gateway reloaded before any token is signed with it, the old
/// key dropped once its tokens expired; at no step is a token of a listed key refused.
#[tokio::test]
async fn the_login_key_rotates_through_a_jwk_set_without_a_refusal() {
    const OLD: &[u8] = b"login-key-2026-11-0123456789";
    const NEW: &[u8] = b"login-key-2026-12-0123456789";
    let c = fixtures::cleanup::Campaign::new("kid");
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    publish(&redis, &c, 100, 1).await;
    let mut conf =
        GatewayConf::new(&fixtures::stack::redis_url(), &format!("127.0.0.1:{}", free_port()), &c, "");
    conf.login_keys = Some(jwk_set(&[("2026-11", OLD)]));
    let gw = Gateway::start(&conf).await;
    let (http, base) = (reqwest::Client::new(), gw.url(""));
    let try_login = |n: u32, kid: &'static str, key: &'static [u8]| {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(kid.to_string());
        let user = format!("{kid}-{n}");
        let claims = json!({"sub": user, "iss": fixtures::client::ISSUER, "aud": fixtures::client::AUDIENCE, "exp": now() + 600});
        let login = encode(&header, &claims, &EncodingKey::from_secret(key).unwrap()).unwrap();
        let (http, base, c) = (http.clone(), base.clone(), c.to_string());
        async move {
            match fixtures::client::get_ticket(&http, &base, &c, &login, &format!("dev-{user}")).await {
                Ok(_) => Ok(()),
                Err((status, body)) => Err(format!("{status} {body}")),
            }
        }
    };
    try_login(0, "2026-11", OLD).await.unwrap();
    let refused = try_login(1, "2026-12", NEW).await.unwrap_err();
    assert!(refused.contains("BAD_LOGIN") && refused.contains("kid"), "{refused}");

    // Step 1: both keys listed, reloaded; the old key's tokens still pass, the new one's now do.
    std::fs::write(gw.dir.join("login_keys.json"), jwk_set(&[("2026-11", OLD), ("2026-12", NEW)])).unwrap();
    gw.hup();
    let mut n = 2;
    let took = eventually(std::time::Duration::from_secs(5), || {
        n += 1;
        let attempt = try_login(n, "2026-12", NEW);
        async move { attempt.await.is_ok() }
    })
    .await;
    assert!(took, "the new key is taken on reload: {}", gw.log());
    try_login(100, "2026-11", OLD).await.unwrap();

    // Step 2: the old key dropped; its tokens are refused, the new one's pass.
    std::fs::write(gw.dir.join("login_keys.json"), jwk_set(&[("2026-12", NEW)])).unwrap();
    gw.hup();
    let mut n = 200;
    let dropped = eventually(std::time::Duration::from_secs(5), || {
        n += 1;
        let attempt = try_login(n, "2026-11", OLD);
        async move { attempt.await.is_err() }
    })
    .await;
    assert!(dropped, "the old key is dropped on reload: {}", gw.log());
    try_login(300, "2026-12", NEW).await.unwrap();
}
