//! A buyer's side of the edge protocol, and the shop's auth service played with a test key:
//! what the gateway tests, the load tool and the demo speak.
//!
//! 1. [`Auth::login`]: a login JWT (HS256 under the test key the gateway's `[defense]
//!    login_key` names), as the shop's auth service would issue it;
//! 2. [`get_ticket`]: `POST /seckill/{c}/captcha` → solve the proof of work →
//!    `POST /seckill/{c}/token` → the campaign token, its hidden path and its signing key;
//! 3. [`Ticket::order`]: a signed order request (`X-Timestamp`, `X-Nonce`, `X-Signature`);
//! 4. [`poll`]: its result, `GET /seckill/{c}/result/{request_id}` with the result token the
//!    QUEUED answer gave (`X-Result-Token`), which only its buyer holds.

use std::sync::atomic::{AtomicU64, Ordering};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use plugins::token::RESULT_TOKEN_HEADER;
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
}

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

/// [`get_ticket`] with `headers` added to both requests (an `X-Forwarded-For`, say).
pub async fn get_ticket_with(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    login_jwt: &str,
    device: &str,
    headers: &[(&str, &str)],
) -> Result<Ticket, Reply> {
    let with = |mut r: reqwest::RequestBuilder| {
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r
    };
    let transport = |e: reqwest::Error| (0, json!({"code": "ERROR", "message": e.to_string()}));
    let url = format!("{base}/seckill/{campaign}/captcha");
    let (status, challenge) =
        reply(with(http.post(url)).header(DEVICE_HEADER, device).send().await.map_err(transport)?).await;
    if status != 200 {
        return Err((status, challenge));
    }
    let c = challenge["challenge"].as_str().unwrap_or_default().to_string();
    let bits = challenge["bits"].as_u64().unwrap_or(0) as u32;
    let answer = protocol::pow::solve(&c, bits, 1 << 32).unwrap_or_default();
    let (status, body) = reply(
        with(http.post(format!("{base}/seckill/{campaign}/token")))
            .bearer_auth(login_jwt)
            .header(DEVICE_HEADER, device)
            .json(&json!({"challenge": c, "answer": answer}))
            .send()
            .await
            .map_err(transport)?,
    )
    .await;
    if status != 200 {
        return Err((status, body));
    }
    Ok(Ticket {
        campaign: campaign.to_string(),
        device: device.to_string(),
        token: body["token"].as_str().unwrap_or_default().to_string(),
        path: body["path"].as_str().unwrap_or_default().to_string(),
        signing_key: hex::decode(body["signing_key"].as_str().unwrap_or_default()).unwrap_or_default(),
    })
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
            Ok(r) => reply(r).await,
            Err(e) => (0, json!({"code": "ERROR", "message": e.to_string()})),
        }
    }

    /// Signs and sends one order of `qty`, now, with a fresh nonce.
    pub async fn order(&self, http: &reqwest::Client, base: &str, qty: i64) -> Reply {
        let signed = self.sign(qty, chrono::Utc::now().timestamp(), &nonce());
        self.send(http, base, &signed).await
    }
}
