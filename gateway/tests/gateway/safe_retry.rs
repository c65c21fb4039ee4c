//! A safe retry answered QUEUED makes the reservation stand, end to end, with two gateway
//! processes on one Redis. Gateway 1 reaches Redis through a relay the test controls: its
//! reservation runs in Redis but the answer is held (Redis stalled, as far as gateway 1 can
//! tell), so it times out and sends its undo, which the relay holds too. The buyer sends the same
//! signed request to gateway 2 and is answered QUEUED with the first request id, from the nonce.
//! Only then does the relay let the undo reach Redis: it must leave the reservation, which the
//! order writer turns into an order. With the undo held past its bound, the answer is
//! `SERVICE_DEGRADED` "may hold a reservation", and what it gives is enough to poll the outcome.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use protocol::keys::CampaignKeys;
use redis_protocol::resp2::decode::decode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::sale::Sale;
use crate::support::*;

/// What the relay does with the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Both ways, as they come.
    Pass,
    /// Commands go on to Redis until the first `reserve.lua` call has gone; every command after
    /// it is held. Every reply is held.
    Armed,
    /// Whatever was held goes on, in order, and everything after it.
    Released,
}

/// What the relay has carried and held, for the test to wait on.
#[derive(Debug, Default)]
struct Seen {
    /// Per connection: (commands forwarded to Redis, replies forwarded to the gateway).
    conns: Vec<(usize, usize)>,
    /// The first `reserve.lua` call has gone to Redis while armed.
    reserve_forwarded: bool,
    /// Commands held, and of those, forwarded since.
    held: usize,
    flushed: usize,
}

/// A loopback TCP relay in front of one Redis, counting whole RESP frames each way.
struct Relay {
    url: String,
    mode: watch::Sender<Mode>,
    seen: Arc<Mutex<Seen>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// A relay to the Redis at `redis_url` (which has no other path than `host:port`), in
    /// [`Mode::Pass`]; `reserve_sha` names the reservation script's calls.
    async fn start(redis_url: &str, reserve_sha: &str) -> Relay {
        let target = redis_url.strip_prefix("redis://").expect("a redis:// URL").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let (mode, _) = watch::channel(Mode::Pass);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (modes, counts, sha) = (mode.clone(), seen.clone(), reserve_sha.as_bytes().to_vec());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(&target).await else { return };
                let conn = {
                    let mut seen = counts.lock().unwrap();
                    seen.conns.push((0, 0));
                    seen.conns.len() - 1
                };
                let ((from_gw, to_gw), (from_redis, to_redis)) =
                    (inbound.into_split(), outbound.into_split());
                let link = Link { conn, mode: modes.clone(), seen: counts.clone() };
                tokio::spawn(link.clone().commands(from_gw, to_redis, sha.clone()));
                tokio::spawn(link.replies(from_redis, to_gw));
            }
        });
        Relay { url, mode, seen, accept }
    }

    fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Commands held so far.
    fn held(&self) -> usize {
        self.seen.lock().unwrap().held
    }

    /// Nothing waits in the relay, and every command forwarded has had its reply forwarded
    /// (a pub/sub connection may have more replies than commands).
    fn quiet(&self) -> bool {
        let seen = self.seen.lock().unwrap();
        seen.flushed == seen.held && seen.conns.iter().all(|(sent, answered)| answered >= sent)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One relayed connection.
#[derive(Clone)]
struct Link {
    conn: usize,
    mode: watch::Sender<Mode>,
    seen: Arc<Mutex<Seen>>,
}

impl Link {
    /// Waits until the relay is released; false when the relay is gone.
    async fn released(&self) -> bool {
        self.mode.subscribe().wait_for(|m| *m == Mode::Released).await.is_ok()
    }

    /// Gateway → Redis, one whole command at a time.
    async fn commands(self, mut from: OwnedReadHalf, mut to: OwnedWriteHalf, reserve_sha: Vec<u8>) {
        let (mut pending, mut chunk) = (Vec::new(), vec![0u8; 64 * 1024]);
        while let Ok(n @ 1..) = from.read(&mut chunk).await {
            pending.extend_from_slice(&chunk[..n]);
            while let Some((_, len)) = decode(&pending).expect("RESP2 commands from the gateway") {
                let command: Vec<u8> = pending.drain(..len).collect();
                let hold = {
                    let mut seen = self.seen.lock().unwrap();
                    let armed = *self.mode.borrow() == Mode::Armed;
                    let hold = armed && seen.reserve_forwarded;
                    if hold {
                        seen.held += 1;
                    } else if armed && command.windows(reserve_sha.len()).any(|w| w == reserve_sha) {
                        seen.reserve_forwarded = true;
                    }
                    hold
                };
                if hold && !self.released().await {
                    return;
                }
                if to.write_all(&command).await.is_err() {
                    return;
                }
                let mut seen = self.seen.lock().unwrap();
                seen.conns[self.conn].0 += 1;
                seen.flushed += usize::from(hold);
            }
        }
        let _ = to.shutdown().await;
    }

    /// Redis → gateway, held while armed.
    async fn replies(self, mut from: OwnedReadHalf, mut to: OwnedWriteHalf) {
        let (mut pending, mut chunk) = (Vec::new(), vec![0u8; 64 * 1024]);
        while let Ok(n @ 1..) = from.read(&mut chunk).await {
            let armed = *self.mode.borrow() == Mode::Armed;
            if armed && !self.released().await {
                return;
            }
            if to.write_all(&chunk[..n]).await.is_err() {
                return;
            }
            pending.extend_from_slice(&chunk[..n]);
            let mut answered = 0;
            while let Some((_, len)) = decode(&pending).expect("RESP2 replies from Redis") {
                pending.drain(..len);
                answered += 1;
            }
            self.seen.lock().unwrap().conns[self.conn].1 += answered;
        }
        let _ = to.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_safe_retry_answered_queued_on_another_gateway_survives_the_late_gateways_undo() {
    let sale = Sale::new(5).await;
    let keys = CampaignKeys::new(&sale.campaign);
    let relay = Relay::start(&sale.redis_url, scripts().reserve_sha()).await;
    let broker = fixtures::stack::kafka_broker();
    // Gateway 1 gives up on a reservation after 100 ms (its undo after 500 ms more).
    let mut conf1 = sale.gateway_conf(&broker, "");
    conf1.redis_url = relay.url.clone();
    conf1.redis_timeout_ms = 100;
    let gw1 = Gateway::start(&conf1).await;
    let gw2 = Gateway::start(&sale.gateway_conf(&broker, "")).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let buyer = ticket(&http, &gw2, &sale.campaign, "buyer").await.unwrap();
    let signed = buyer.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());

    // Gateway 1 is up and idle: every command it sent through the relay was answered.
    let idle = eventually(Duration::from_secs(10), || async { relay.quiet() }).await;
    assert!(idle, "gateway 1 settled on its Redis connections: {:?}", relay.seen.lock().unwrap());
    relay.set(Mode::Armed);
    let first = tokio::spawn({
        let (http, buyer, signed, base) = (http.clone(), buyer.clone(), signed.clone(), gw1.url(""));
        async move { buyer.send(&http, &base, &signed).await }
    });
    // Its reservation ran in Redis, the answer did not come back, and its undo waits in the relay.
    let undo_held = eventually(Duration::from_secs(10), || async { relay.held() >= 1 }).await;
    assert!(undo_held, "gateway 1 sent its undo:\n{}", gw1.log());
    let outbox = sale.outbox().await;
    assert_eq!(outbox.len(), 1, "gateway 1's reservation ran in Redis");
    let first_id = outbox.into_iter().next().unwrap();

    // The buyer sends the same signed request to gateway 2: a safe retry, QUEUED with the first id.
    let retry = buyer.send(&http, &gw2.url(""), &signed).await;
    assert_eq!((retry.0, retry.1["code"].as_str()), (202, Some("QUEUED")), "{}", retry.1);
    assert_eq!(retry.1["request_id"].as_str(), Some(first_id.as_str()), "{}", retry.1);

    // Only now does gateway 1's undo reach Redis; wait until Redis has answered it.
    relay.set(Mode::Released);
    let answered = eventually(Duration::from_secs(10), || async { relay.quiet() }).await;
    assert!(answered, "the undo reached Redis and was answered: {:?}", relay.seen.lock().unwrap());

    let (status, body) = first.await.unwrap();
    println!("gateway 1 answered {status} {body}");

    // The reservation stands: nothing released, the unit still held, the record in the outbox.
    let released: bool = sale.redis.hexists(&keys.released, &first_id).await.unwrap();
    assert!(!released, "the undo released a reservation the buyer was told is QUEUED");
    let stock: i64 = sale.redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 4, "one unit reserved, none returned");
    let held: Option<i64> = sale.redis.hget(&keys.bought, "buyer").await.unwrap();
    assert_eq!(held, Some(1));
    let expected = HashSet::from([first_id.clone()]);
    assert_eq!(sale.outbox().await, expected, "the record waits in the outbox");

    // Gateway 1's own answer names the same reservation, never a second one: QUEUED when the
    // undo's answer (claimed) came back within its bound, else "may hold a reservation".
    assert_eq!(body["request_id"].as_str(), Some(first_id.as_str()), "{body}");
    match (status, body["code"].as_str()) {
        (202, Some("QUEUED")) => {}
        (503, Some("SERVICE_DEGRADED")) => {
            let message = body["message"].as_str().unwrap_or_default();
            assert!(message.contains("may hold a reservation"), "{body}");
        }
        other => panic!("gateway 1 answered {other:?}: {body}"),
    }

    // The order writer's sweeper produces it (gateway 1 never did): it becomes the one order.
    let writer = sale.start_writer_with(Duration::from_secs(1), None).await;
    assert_eq!(sale.wait_orders(&expected).await, expected, "the QUEUED request became an order");
    writer.stop().await;
    let released: bool = sale.redis.hexists(&keys.released, &first_id).await.unwrap();
    let stock: i64 = sale.redis.get(&keys.stock).await.unwrap();
    assert_eq!((released, stock), (false, 4), "the order holds the unit");
}

/// The answer that says a request may hold a reservation (its call and its undo both went
/// unanswered) gives the buyer what to learn the outcome with: polling its `poll_url` with its
/// `result_token` reaches the order writer and tells the real outcome, here the order the
/// sweeper made of the reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_may_hold_answer_lets_its_buyer_poll_the_outcome() {
    let sale = Sale::new(5).await;
    let relay = Relay::start(&sale.redis_url, scripts().reserve_sha()).await;
    let writer_port = free_port();
    let mut conf = sale.gateway_conf(&fixtures::stack::kafka_broker(), "");
    (conf.redis_url, conf.redis_timeout_ms) = (relay.url.clone(), 100);
    conf.order_writer = vec![format!("127.0.0.1:{writer_port}")];
    let gw = Gateway::start(&conf).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let buyer = ticket(&http, &gw, &sale.campaign, "buyer").await.unwrap();
    let signed = buyer.sign(1, chrono::Utc::now().timestamp(), &fixtures::client::nonce());
    let idle = eventually(Duration::from_secs(10), || async { relay.quiet() }).await;
    assert!(idle, "the gateway settled on its Redis connections: {:?}", relay.seen.lock().unwrap());

    // The reservation runs in Redis; neither its answer nor the undo's comes back in time.
    relay.set(Mode::Armed);
    let (status, body) = buyer.send(&http, &gw.url(""), &signed).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_DEGRADED")), "{body}");
    assert!(body["message"].as_str().unwrap_or_default().contains("may hold a reservation"), "{body}");
    let id = body["request_id"].as_str().expect("the answer names its request").to_string();
    assert_eq!(sale.outbox().await, HashSet::from([id.clone()]), "the reservation ran in Redis");

    // The order writer's sweeper claims it and makes the order.
    let writer = sale.start_writer_at(Duration::from_secs(1), None, writer_port).await;
    let expected = HashSet::from([id.clone()]);
    assert_eq!(sale.wait_orders(&expected).await, expected, "the reservation became an order");

    // The buyer polls with what the answer gave (its poll URL, else the one its message names),
    // and learns it.
    let message = body["message"].as_str().unwrap_or_default();
    let named = message.split_whitespace().find(|w| w.starts_with("/seckill/"));
    let path = body["poll_url"].as_str().or(named).expect("the answer says where to poll");
    let (url, token) = (gw.url(path), body["result_token"].as_str().unwrap_or_default());
    let mut polled = (0, serde_json::Value::Null);
    for _ in 0..50 {
        let resp = http.get(&url).header("x-result-token", token).send().await.unwrap();
        polled = (resp.status().as_u16(), resp.json().await.unwrap_or_default());
        if polled.1["code"] == "SUCCESS" || polled.1["code"] == "BAD_RESULT_TOKEN" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, result) = polled;
    assert_eq!(
        (status, result["code"].as_str()),
        (200, Some("SUCCESS")),
        "poll {url}: {result}\nanswer: {body}"
    );
    assert_eq!(result["request_id"].as_str(), Some(id.as_str()), "{result}");

    // The undo, let through now, finds the reservation claimed and leaves it.
    relay.set(Mode::Released);
    let answered = eventually(Duration::from_secs(10), || async { relay.quiet() }).await;
    assert!(answered, "the undo reached Redis and was answered: {:?}", relay.seen.lock().unwrap());
    writer.stop().await;
    let keys = CampaignKeys::new(&sale.campaign);
    // An undo that finds the outbox entry gone (the order made) releases nothing: the ledger
    // holds the request as finished with 0 units, or nothing; the stock stays sold.
    let released: Option<i64> = sale.redis.hget(&keys.released, &id).await.unwrap();
    assert_eq!(released.unwrap_or(0), 0, "the undo released a reservation that is an order");
    let stock: i64 = sale.redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 4, "the order's unit stays sold");
}
