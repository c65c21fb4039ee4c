//! A buyer's side of the edge protocol, and the shop's auth service played with a test key:
//! what the gateway tests, the load tool and the demo speak.
//!
//! 1. [`Auth::login`]: a login JWT (HS256 under the test key the gateway's `[defense]
//!    login_key` names), as the shop's auth service would issue it;
//! 2. [`get_ticket`]: `POST /seckill/{c}/captcha` → solve the proof of work →
//!    `POST /seckill/{c}/token` → the campaign token, its hidden path and its signing key;
//!    through the campaign's waiting room when it is on: each `WAITING` answer's ticket is
//!    presented again (`X-Queue-Ticket`) after its `retry_after` ([`next_presentation`],
//!    bounded by [`Patience`]), with a solved challenge once the ETA is near (a place in a
//!    lottery not drawn yet, the pre-queue's or the start draw's, comes back at the draw
//!    without it); the first token request brings its solved challenge, so a turn near enough
//!    is waited for by the gateway itself (`held_ms` in the token's answer);
//! 3. [`Ticket::order`]: a signed order request (`X-Timestamp`, `X-Nonce`, `X-Signature`);
//! 4. [`poll`]: its result, `GET /seckill/{c}/result/{request_id}` with the result token the
//!    QUEUED answer gave (`X-Result-Token`), which only its buyer holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use plugins::issue::RESULT_TOKEN_HEADER;
use plugins::room::TICKET_HEADER;
use protocol::signing::{order_canonical, DEVICE_HEADER, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use ring::hmac;
use serde_json::{json, Value};

/// The issuer the tests and the demo configure (`defense.login_issuer`).
pub const ISSUER: &str = "shop-auth";
/// The audience the tests and the demo configure (`defense.login_audience`).
pub const AUDIENCE: &str = "seckill";

/// The shop's auth service, played with an HS256 key.
#[derive(Clone)]
pub struct Auth {
    key: EncodingKey,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(..)")
    }
}

impl Auth {
    /// Signs login JWTs with `secret` (HS256).
    pub fn hs256(secret: &[u8]) -> anyhow::Result<Self> {
        Ok(Self { key: EncodingKey::from_secret(secret)? })
    }

    /// A login JWT for `user`, valid for ten minutes, with extra claims (`level`, `region`,
    /// `registered_at`) merged in.
    pub fn login(&self, user: &str, extra: Value) -> String {
        let now = chrono::Utc::now().timestamp();
        let mut claims = json!({"sub": user, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600});
        if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.key).unwrap_or_default()
    }
}

/// A campaign token with what comes with it.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// The campaign.
    pub campaign: String,
    /// The device it is bound to.
    pub device: String,
    /// The campaign token (JWT).
    pub token: String,
    /// The hidden path segment.
    pub path: String,
    /// The signing key.
    pub signing_key: Vec<u8>,
    /// What the waiting room cost to get it (nothing when the room is off).
    pub room: RoomWait,
}

/// What a waiting room cost one token: its `WAITING` answers and the time slept between them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoomWait {
    /// `WAITING` answers received.
    pub waiting: u32,
    /// Time spent waiting for the next presentation.
    pub waited: Duration,
    /// The first ETA with a drawn place (a pre-queue answer's ETA is only the start): the
    /// answer's `eta_ms` (the promised wait) and `eta_at_ms` (server clock, unix ms).
    pub promised: Option<Promised>,
    /// When the answer that let the buyer through came, after a wait (unix ms, this machine's
    /// clock).
    pub admitted_at_ms: Option<i64>,
    /// How long the gateway held the request that let the buyer through until its turn (a
    /// turn under 100 ms away, admitted in place), if it did.
    pub held_ms: Option<i64>,
}

/// An ETA a `WAITING` answer promised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promised {
    /// The wait promised, ms.
    pub eta_ms: i64,
    /// When, unix ms by the gateway's clock.
    pub eta_at_ms: i64,
}

/// Whether a `WAITING` answer's place is a lottery's not drawn yet (the pre-queue's, the start
/// draw's, or one after the draw's window before its close): its ETA is when to learn the
/// place, not a turn.
pub fn undrawn(body: &Value) -> bool {
    body["pre_queue"] == true || body["start_draw"] == true || body["after_draw"] == true
}

impl Promised {
    /// The promise of a `WAITING` answer's `body`, if its place is drawn (not a lottery's yet).
    pub fn of(body: &Value) -> Option<Self> {
        if body["code"] != "WAITING" || undrawn(body) || body["position"].is_null() {
            return None;
        }
        Some(Self { eta_ms: body["eta_ms"].as_i64()?, eta_at_ms: body["eta_at_ms"].as_i64()? })
    }
}

/// How long a buyer stays in a waiting room before giving up (the last `WAITING` answer is then
/// the refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    /// Presentations of the ticket at most, after the first request.
    pub presentations: u32,
    /// Time spent waiting at most.
    pub total: Duration,
}

impl Default for Patience {
    /// 200 presentations and ten minutes: a wait the seed calls acceptable, bounded.
    fn default() -> Self {
        Self { presentations: 200, total: Duration::from_secs(600) }
    }
}

/// The shortest pause before presenting a ticket again, doubled each time the buyer came back
/// at its ETA and still waited (clocks of N gateways may differ), up to [`MAX_FLOOR`].
const FLOOR: Duration = Duration::from_millis(50);
const MAX_FLOOR: Duration = Duration::from_secs(5);
/// Past a lottery's draw by this much when coming back at it.
const PAST_ETA: Duration = Duration::from_millis(20);
/// Before a turn's ETA by this much when coming back at it, with the work: the gateway holds a
/// request whose turn is under 100 ms away (`plugins::room::ADMIT_IN_PLACE_MS`) and
/// lets it through at its turn, so the buyer gets in at its ETA, not a round trip after it.
const BEFORE_ETA: Duration = Duration::from_millis(50);

/// What to do after a `WAITING` answer (pure: [`next_presentation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Sleep `pause`, then present the ticket again; with a solved challenge when `solve` (the
    /// turn is expected by then).
    Present {
        /// How long to wait.
        pause: Duration,
        /// Whether the turn is due by then: bring the captcha's answer.
        solve: bool,
    },
    /// Out of patience.
    GiveUp,
}

/// After the `WAITING` answer `body`, the `so_far`-th of this buyer, `waited` into the wait, of
/// which `late` came at or past their ETA: come back a little before the ETA with the work (the
/// gateway holds it until the turn), or just after a lottery's draw without it, never later
/// than `retry_after` and never sooner than a floor that doubles with `late`; give up when the
/// next presentation would pass `patience`.
pub fn next_presentation(
    body: &Value,
    so_far: u32,
    late: u32,
    waited: Duration,
    patience: &Patience,
) -> Next {
    let retry = Duration::from_secs(body["retry_after"].as_u64().unwrap_or(1).clamp(1, 30));
    let eta = Duration::from_millis(body["eta_ms"].as_u64().unwrap_or(retry.as_millis() as u64));
    let floor = FLOOR.saturating_mul(1 << late.min(16)).min(MAX_FLOOR);
    let undrawn = undrawn(body);
    let at = if undrawn { eta + PAST_ETA } else { eta.saturating_sub(BEFORE_ETA) };
    let pause = at.max(floor).min(retry);
    if so_far > patience.presentations || waited + pause > patience.total {
        return Next::GiveUp;
    }
    Next::Present { pause, solve: !undrawn && pause + BEFORE_ETA >= eta }
}

/// Most times a challenge or token request answered `TRY_LATER` is sent again.
pub const TRY_LATER_TRIES: u32 = 5;

/// How long to wait before sending again a request answered `TRY_LATER`, as a buyer's page does:
/// 1 s (the gateway's `Retry-After` for it), or the body's `retry_after` (1 to 30 s) if any; `None` for any other answer or after
/// [`TRY_LATER_TRIES`] (`tries` counts them).
pub fn shed_pause(answer: &Reply, tries: &mut u32) -> Option<Duration> {
    if answer.0 != 429 || answer.1["code"] != "TRY_LATER" || *tries >= TRY_LATER_TRIES {
        return None;
    }
    *tries += 1;
    Some(Duration::from_secs(answer.1["retry_after"].as_u64().unwrap_or(1).clamp(1, 30)))
}

/// A solved challenge, good until `until`.
struct Solved {
    body: Value,
    until: Instant,
}

impl Solved {
    fn fresh(&self) -> bool {
        Instant::now() + Duration::from_secs(1) < self.until
    }

    /// The challenge of an answer (`challenge`, `bits`, `expires_in`) asked at `asked`, solved;
    /// `None` when the answer brings none.
    fn of(challenge: &Value, asked: Instant) -> Option<Self> {
        let c = challenge["challenge"].as_str()?.to_string();
        let bits = challenge["bits"].as_u64().unwrap_or(0) as u32;
        let answer = protocol::pow::solve(&c, bits, 1 << 32).unwrap_or_default();
        let until = asked + Duration::from_secs(challenge["expires_in"].as_u64().unwrap_or(0));
        Some(Solved { body: json!({"challenge": c, "answer": answer}), until })
    }
}

/// Fresh challenges a token request refused `CAPTCHA_FAILED` (the work's level rose while it was
/// solved) is solved on and sent again, at most.
pub const FRESH_WORK_TRIES: usize = 2;

/// An answer: status and JSON body (`Null` when the body is not JSON).
pub type Reply = (u16, Value);

/// What a QUEUED answer gives to poll its result with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The request id (the first request's, for a safe retry).
    pub request_id: String,
    /// The result token: the result is told only to whoever sends it.
    pub result_token: String,
}

impl Queued {
    /// From a QUEUED answer's body; `None` for any other answer.
    pub fn of(body: &Value) -> Option<Self> {
        if body["code"] != "QUEUED" {
            return None;
        }
        Some(Self {
            request_id: body["request_id"].as_str()?.to_string(),
            result_token: body["result_token"].as_str()?.to_string(),
        })
    }
}

/// Asks for the result of `queued` on `campaign` at `base` (a gateway), with its result token.
pub async fn poll(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    queued: &Queued,
) -> reqwest::Result<reqwest::Response> {
    http.get(format!("{base}/seckill/{campaign}/result/{}", queued.request_id))
        .header(RESULT_TOKEN_HEADER, &queued.result_token)
        .send()
        .await
}

async fn reply(r: reqwest::Response) -> Reply {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Asks for a challenge, solves it and asks for a token. `Err` carries the refusal (or a
/// transport error as status 0).
pub async fn get_ticket(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    login_jwt: &str,
    device: &str,
) -> Result<Ticket, Reply> {
    get_ticket_with(http, base, campaign, login_jwt, device, &[]).await
}

/// [`get_ticket`] with `headers` added to every request (an `X-Forwarded-For`, say).
pub async fn get_ticket_with(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    login_jwt: &str,
    device: &str,
    headers: &[(&str, &str)],
) -> Result<Ticket, Reply> {
    Buyer { http, base, campaign, login_jwt, device, headers }.ticket(&Patience::default()).await
}

/// [`get_ticket`], but as the buyer's page does when it knows the room is on: the first token
/// request without the work (no challenge asked before it), the challenge only once the turn is
/// near; without a room (any first answer but `WAITING`), the captcha then the token as
/// [`get_ticket`].
pub async fn get_ticket_room_first(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    login_jwt: &str,
    device: &str,
) -> Result<Ticket, Reply> {
    let buyer = Buyer { http, base, campaign, login_jwt, device, headers: &[] };
    let first = buyer.token(&json!({}), None).await?;
    buyer.ticket_after(&Patience::default(), (first.1["code"] == "WAITING").then_some(first)).await
}

/// [`get_ticket`] staying in a waiting room at most as `patience` allows.
pub async fn get_ticket_within(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    login_jwt: &str,
    device: &str,
    patience: &Patience,
) -> Result<Ticket, Reply> {
    Buyer { http, base, campaign, login_jwt, device, headers: &[] }.ticket(patience).await
}

/// One buyer asking for a token.
struct Buyer<'a> {
    http: &'a reqwest::Client,
    base: &'a str,
    campaign: &'a str,
    login_jwt: &'a str,
    device: &'a str,
    headers: &'a [(&'a str, &'a str)],
}

fn transport(e: reqwest::Error) -> Reply {
    (0, json!({"code": "ERROR", "message": e.to_string()}))
}

impl Buyer<'_> {
    fn with(&self, mut r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        for (k, v) in self.headers {
            r = r.header(*k, *v);
        }
        r.header(DEVICE_HEADER, self.device)
    }

    /// A challenge, solved.
    async fn solve(&self) -> Result<Solved, Reply> {
        let url = format!("{}/seckill/{}/captcha", self.base, self.campaign);
        let mut asked = Instant::now();
        let mut tries = 0;
        let (status, challenge) = loop {
            let answer = reply(self.with(self.http.post(&url)).send().await.map_err(transport)?).await;
            match shed_pause(&answer, &mut tries) {
                Some(pause) => tokio::time::sleep(pause).await,
                None => break answer,
            }
            asked = Instant::now();
        };
        if status != 200 {
            return Err((status, challenge));
        }
        Solved::of(&challenge, asked).ok_or((status, challenge))
    }

    /// The token asked with `body`; work refused `CAPTCHA_FAILED` with a fresh challenge (judged
    /// at the level in force when presented) is done again on it, [`FRESH_WORK_TRIES`] at most.
    async fn token(&self, body: &Value, ticket: Option<&str>) -> Result<Reply, Reply> {
        let mut answer = self.token_once(body, ticket).await?;
        for _ in 0..FRESH_WORK_TRIES {
            if answer.1["code"] != "CAPTCHA_FAILED" || body.get("answer").is_none() {
                break;
            }
            let Some(fresh) = Solved::of(&answer.1, Instant::now()) else { break };
            answer = self.token_once(&fresh.body, ticket).await?;
        }
        Ok(answer)
    }

    async fn token_once(&self, body: &Value, ticket: Option<&str>) -> Result<Reply, Reply> {
        let url = format!("{}/seckill/{}/token", self.base, self.campaign);
        let mut r = self.with(self.http.post(url)).bearer_auth(self.login_jwt).json(body);
        if let Some(t) = ticket {
            r = r.header(TICKET_HEADER, t);
        }
        let mut tries = 0;
        loop {
            let again = r.try_clone();
            let answer = reply(r.send().await.map_err(transport)?).await;
            match (shed_pause(&answer, &mut tries), again) {
                (Some(pause), Some(again)) => {
                    tokio::time::sleep(pause).await;
                    r = again;
                }
                _ => return Ok(answer),
            }
        }
    }

    /// The captcha, then the token; through the waiting room when the token request answers
    /// `WAITING`. A challenge refused before the start (`NOT_STARTED`) may still let the buyer
    /// into a room's pre-queue: the token request is tried without an answer.
    async fn ticket(&self, patience: &Patience) -> Result<Ticket, Reply> {
        self.ticket_after(patience, None).await
    }

    /// [`Buyer::ticket`], or its wait in the room from `waiting` when a first token request
    /// (without the work) was answered `WAITING` already.
    async fn ticket_after(&self, patience: &Patience, waiting: Option<Reply>) -> Result<Ticket, Reply> {
        let (mut solved, mut answer) = match waiting {
            Some(w) => (None, w),
            None => {
                let solved = match self.solve().await {
                    Ok(s) => Some(s),
                    Err(refused) if refused.1["code"] == "NOT_STARTED" => {
                        let answer = self.token(&json!({}), None).await?;
                        if answer.1["code"] != "WAITING" {
                            return Err(refused);
                        }
                        None
                    }
                    Err(refused) => return Err(refused),
                };
                let answer = match &solved {
                    Some(s) => self.token(&s.body, None).await?,
                    None => self.token(&json!({}), None).await?,
                };
                (solved, answer)
            }
        };
        let (mut room, mut late) = (RoomWait::default(), 0);
        while answer.0 == 200 && answer.1["code"] == "WAITING" {
            room.waiting += 1;
            if room.promised.is_none() {
                room.promised = Promised::of(&answer.1);
            }
            let (pause, solve) = match next_presentation(&answer.1, room.waiting, late, room.waited, patience)
            {
                Next::Present { pause, solve } => (pause, solve),
                Next::GiveUp => return Err(answer),
            };
            let eta = answer.1["eta_ms"].as_u64().map(Duration::from_millis);
            let ticket = answer.1["ticket"].as_str().map(str::to_string);
            tokio::time::sleep(pause).await;
            room.waited += pause;
            if eta.is_some_and(|eta| pause >= eta) {
                late += 1;
            }
            if solve && !solved.as_ref().is_some_and(Solved::fresh) {
                solved = Some(self.solve().await?);
            }
            answer = match (&solved, solve) {
                (Some(s), true) => self.token(&s.body, ticket.as_deref()).await?,
                _ => {
                    let a = self.token(&json!({}), ticket.as_deref()).await?;
                    if a.1["code"] == "CAPTCHA_FAILED" && ticket.is_some() {
                        // Let in sooner than its ETA said (another gateway's clock): the
                        // room passed it on to the captcha; now with the answer.
                        let s = self.solve().await?;
                        let a = self.token(&s.body, ticket.as_deref()).await?;
                        solved = Some(s);
                        a
                    } else {
                        a
                    }
                }
            };
        }
        let (status, body) = answer;
        if status != 200 {
            return Err((status, body));
        }
        room.held_ms = body["held_ms"].as_i64();
        if room.waiting > 0 || room.held_ms.is_some() {
            room.admitted_at_ms = Some(chrono::Utc::now().timestamp_millis());
        }
        Ok(Ticket {
            campaign: self.campaign.to_string(),
            device: self.device.to_string(),
            token: body["token"].as_str().unwrap_or_default().to_string(),
            path: body["path"].as_str().unwrap_or_default().to_string(),
            signing_key: hex::decode(body["signing_key"].as_str().unwrap_or_default()).unwrap_or_default(),
            room,
        })
    }
}

/// A fresh nonce: this process's id, a counter and the time, 8 to 64 of `A-Z a-z 0-9 _ -`.
pub fn nonce() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
    format!("n{}-{}-{t}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The parts of one signed order, to send or to tamper with.
#[derive(Debug, Clone)]
pub struct SignedOrder {
    /// Path (with the hidden segment).
    pub path: String,
    /// Query, without `?`.
    pub query: String,
    /// Body.
    pub body: Vec<u8>,
    /// `X-Timestamp`.
    pub timestamp: String,
    /// `X-Nonce`.
    pub nonce: String,
    /// `X-Signature`.
    pub signature: String,
}

impl Ticket {
    /// A signed order for `qty` at `timestamp` (unix seconds) with `nonce`.
    pub fn sign(&self, qty: i64, timestamp: i64, nonce: &str) -> SignedOrder {
        let path = format!("/seckill/{}/{}/order", self.campaign, self.path);
        let query = format!("qty={qty}");
        let ts = timestamp.to_string();
        let canonical = order_canonical("POST", &path, &query, &ts, nonce, b"");
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.signing_key);
        let signature = hex::encode(hmac::sign(&key, canonical.as_bytes()).as_ref());
        SignedOrder { path, query, body: Vec::new(), timestamp: ts, nonce: nonce.to_string(), signature }
    }

    /// Sends `order` as it is to `base`.
    pub async fn send(&self, http: &reqwest::Client, base: &str, order: &SignedOrder) -> Reply {
        self.send_with(http, base, order, &[]).await
    }

    /// [`Self::send`] with `headers` added.
    pub async fn send_with(
        &self,
        http: &reqwest::Client,
        base: &str,
        order: &SignedOrder,
        headers: &[(&str, &str)],
    ) -> Reply {
        self.send_answer(http, base, order, headers).await.0
    }

    /// [`Self::send_with`], with the answer's `Retry-After` in seconds (if any).
    pub async fn send_answer(
        &self,
        http: &reqwest::Client,
        base: &str,
        order: &SignedOrder,
        headers: &[(&str, &str)],
    ) -> (Reply, Option<u64>) {
        let url = format!("{base}{}?{}", order.path, order.query);
        let mut req = http.post(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let sent = req
            .bearer_auth(&self.token)
            .header(DEVICE_HEADER, &self.device)
            .header(TIMESTAMP_HEADER, &order.timestamp)
            .header(NONCE_HEADER, &order.nonce)
            .header(SIGNATURE_HEADER, &order.signature)
            .body(order.body.clone())
            .send()
            .await;
        match sent {
            Ok(r) => {
                let retry_after = r.headers().get(reqwest::header::RETRY_AFTER);
                let retry_after = retry_after.and_then(|v| v.to_str().ok()?.trim().parse().ok());
                (reply(r).await, retry_after)
            }
            Err(e) => ((0, json!({"code": "ERROR", "message": e.to_string()})), None),
        }
    }

    /// Signs and sends one order of `qty`, now, with a fresh nonce.
    pub async fn order(&self, http: &reqwest::Client, base: &str, qty: i64) -> Reply {
        let signed = self.sign(qty, chrono::Utc::now().timestamp(), &nonce());
        self.send(http, base, &signed).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shed_request_is_sent_again_a_bounded_number_of_times() {
        let shed: Reply = (429, json!({"code": "TRY_LATER", "message": "busy"}));
        let mut tries = 0;
        for _ in 0..TRY_LATER_TRIES {
            assert_eq!(shed_pause(&shed, &mut tries), Some(Duration::from_secs(1)));
        }
        assert_eq!(shed_pause(&shed, &mut tries), None, "then the refusal is the answer");
        let other: Reply = (429, json!({"code": "RATE_LIMITED"}));
        assert_eq!(shed_pause(&other, &mut 0), None, "only TRY_LATER is retried");
    }

    fn waiting(eta_ms: u64, retry_after: u64) -> Value {
        json!({"code": "WAITING", "eta_ms": eta_ms, "retry_after": retry_after, "pre_queue": false,
               "start_draw": false, "position": 9})
    }

    #[test]
    fn a_buyer_comes_back_at_the_eta_within_retry_after_and_solves_only_then() {
        let p = Patience::default();
        // Far: back after retry_after, without the work.
        let far = next_presentation(&waiting(45_000, 30), 1, 0, Duration::ZERO, &p);
        assert_eq!(far, Next::Present { pause: Duration::from_secs(30), solve: false });
        // Near: back just before the ETA, with the answer (held by the gateway until the turn).
        let near = next_presentation(&waiting(700, 1), 2, 0, Duration::ZERO, &p);
        assert_eq!(near, Next::Present { pause: Duration::from_millis(650), solve: true });
        // Not near yet by the next presentation (retry_after first): no work.
        let later = next_presentation(&waiting(1_500, 1), 2, 0, Duration::ZERO, &p);
        assert_eq!(later, Next::Present { pause: Duration::from_secs(1), solve: false });
        // Came back at the ETA and still waiting: a floor that doubles, capped.
        let again = next_presentation(&waiting(0, 1), 3, 3, Duration::ZERO, &p);
        assert_eq!(again, Next::Present { pause: Duration::from_millis(400), solve: true });
        let capped = next_presentation(&waiting(0, 1), 3, 40, Duration::ZERO, &p);
        assert_eq!(capped, Next::Present { pause: Duration::from_secs(1), solve: true });
        // The pre-queue: no work before the draw.
        let pre = json!({"code": "WAITING", "eta_ms": 500, "retry_after": 1, "pre_queue": true});
        assert_eq!(
            next_presentation(&pre, 1, 0, Duration::ZERO, &p),
            Next::Present { pause: Duration::from_millis(520), solve: false }
        );
        // The start draw: no work before its draw either.
        let draw = json!({"code": "WAITING", "eta_ms": 500, "retry_after": 1, "pre_queue": false,
                          "start_draw": true, "position": null});
        assert_eq!(
            next_presentation(&draw, 1, 0, Duration::ZERO, &p),
            Next::Present { pause: Duration::from_millis(520), solve: false }
        );
        // After the draw's window, before its close: no work before the place is known either.
        let late = json!({"code": "WAITING", "eta_ms": 500, "retry_after": 1, "pre_queue": false,
                          "start_draw": false, "after_draw": true, "position": null});
        assert_eq!(
            next_presentation(&late, 1, 0, Duration::ZERO, &p),
            Next::Present { pause: Duration::from_millis(520), solve: false }
        );
        assert_eq!(Promised::of(&late), None);
    }

    #[test]
    fn a_promise_is_the_first_eta_with_a_drawn_place() {
        let drawn = json!({"code": "WAITING", "pre_queue": false, "start_draw": false, "position": 12,
                           "eta_ms": 1200, "eta_at_ms": 5_000});
        assert_eq!(Promised::of(&drawn), Some(Promised { eta_ms: 1200, eta_at_ms: 5_000 }));
        let pre = json!({"code": "WAITING", "pre_queue": true, "eta_ms": 900, "eta_at_ms": 4_000});
        assert_eq!(Promised::of(&pre), None, "the pre-queue's ETA is only the start");
        let draw = json!({"code": "WAITING", "pre_queue": false, "start_draw": true, "position": null,
                          "eta_ms": 900, "eta_at_ms": 4_000});
        assert_eq!(Promised::of(&draw), None, "the start draw's ETA is only its close");
        assert_eq!(Promised::of(&json!({"code": "TOKEN_ISSUED"})), None);
    }

    #[test]
    fn patience_bounds_the_count_and_the_time() {
        let p = Patience { presentations: 3, total: Duration::from_secs(10) };
        assert_eq!(next_presentation(&waiting(5_000, 5), 4, 0, Duration::ZERO, &p), Next::GiveUp);
        assert_eq!(next_presentation(&waiting(5_000, 5), 2, 0, Duration::from_secs(6), &p), Next::GiveUp);
        assert!(matches!(
            next_presentation(&waiting(5_000, 5), 2, 0, Duration::from_secs(4), &p),
            Next::Present { .. }
        ));
    }
}
