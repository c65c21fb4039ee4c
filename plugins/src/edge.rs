//! The chain of the sale's checks and its reservation, step by step, as
//! [`crate::FlashSale`] runs them for each endpoint (a proxy calls `FlashSale`, not this):
//!
//! ```text
//! let admitted = edge.admit(&conf, &campaign, &head, hidden_path)?;   // the request line and headers
//! let body = /* at most a few KB */;
//! let order = edge.verify(&conf, &campaign, admitted, &head, &body).await?;  // signature, eligibility, global limits
//! let permit = edge.hold(&campaign, &order)?;                                 // a place in the budget, until answered
//! let queued = edge.reserve(&conf, &campaign, &order, request_id).await?;    // reserve.lua, then Kafka
//! let result_token = edge.result_token(&conf, &campaign, &order, answered_id);  // with the QUEUED answer
//! ```
//!
//! A result query passes [`Edge::check_result`] (the result token of that request, one HMAC, no
//! lookup) before it goes to the order writer. Before an order, [`Edge::challenge`] and
//! [`Edge::token`] answer the captcha and token endpoints ([`crate::edge::issue`]).
//!
//! Every step answers `Ok` or a [`Denial`]. Nothing here knows Pingora: a request is its `http`
//! parts ([`Head`]). What the steps need comes in three parts: the process's own state
//! ([`Edge`]: rate estimators, the Redis scripts, the Kafka queue), the settings a reload may
//! change ([`Conf`]: keys, the login verifier, the record signer) and one campaign with its
//! process state ([`CampaignRef`]: its file, sold-out flag, budget, eligibility lists).

mod issue;

pub use issue::Issued;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fred::clients::Pool;
use http::{HeaderMap, Method, Uri};
use protocol::campaign::Campaign;
use protocol::codes::Code;
use protocol::keys::Bucket;
use protocol::scripts::{Nonce, Scripts};
use protocol::signing::{Signer, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};

use crate::checks::budget::{Budget, Holder, Permit};
#[cfg(doc)]
use crate::checks::client_ip;
use crate::checks::control::LiveControl;
use crate::checks::eligibility::Eligibility;
use crate::checks::global_limit::{GlobalCheck, Subject};
use crate::checks::input::{self, DEVICE_HEADER};
use crate::checks::pressure::Pressure;
use crate::checks::rate_limit::RateLimiter;
use crate::checks::signature::{self, Request};
use crate::checks::sold_out::{now_ms, SoldOutFlag};
use crate::checks::{switches, window};
use crate::denial::Denial;
use crate::issue::auth::{JwtCheck, LoginVerifier};
use crate::issue::captcha::SpentChallenges;
use crate::issue::token::{CampaignClaims, EdgeKeys, RESULT_TOKEN_GRACE_SECS, RESULT_TOKEN_HEADER};
use crate::queue::ReservationQueue;
use crate::reserve::sale::{Effects, Queued, Seller};
use crate::reserve::Order;
use crate::reserve::Reserver;
use crate::room::WaitingRoom;
use crate::setup::conf::RedisConf;
use protocol::record::Origin;

/// The request line and headers of a request, as any proxy has them.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI as sent (path and query).
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The client's address, decided once for the request by the proxy: the socket's peer, or
    /// what a trusted proxy says in `X-Forwarded-For` ([`client_ip::client_ip`]); `None` on a
    /// Unix socket.
    pub client: Option<IpAddr>,
    /// When the request reached the proxy (its head read), decided once for the request by the
    /// proxy and carried in its per-request context: the waiting room's pre-queue and start draw
    /// judge a buyer by it, not by when an overloaded process got round to the buyer.
    pub arrived: DateTime<Utc>,
}

impl<'a> Head<'a> {
    /// A header's raw bytes.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers.get(name).map(|v| v.as_bytes())
    }
}

/// The server-wide settings a request runs under (a reload may change them).
#[derive(Debug, Clone, Copy)]
pub struct Conf<'a> {
    /// The keys derived from the master key (tokens, hidden paths, signing keys, challenges).
    pub keys: &'a EdgeKeys,
    /// The shop's login JWT verifier.
    pub login: &'a LoginVerifier,
    /// The captcha provider's token check, when one is configured.
    pub provider: Option<&'a JwtCheck>,
    /// Signs the reserved records for Kafka (the order writer's gateway key).
    pub signer: &'a Signer,
    /// How long a sold-out flag lives without a replenish message.
    pub sold_out_ttl: Duration,
    /// Past this lag the costly endpoints are shed ([`crate::checks::pressure`]); `None`: never.
    pub shed_at_lag: Option<Duration>,
}

/// One campaign and its process state.
#[derive(Debug, Clone, Copy)]
pub struct CampaignRef<'a> {
    /// The campaign file.
    pub campaign: &'a Campaign,
    /// Its local sold-out flag.
    pub sold_out: &'a SoldOutFlag,
    /// Its concurrency budget in this process.
    pub budget: &'a Arc<Budget>,
    /// Who may buy, its lists loaded.
    pub eligibility: &'a Eligibility,
    /// Its operated state (`order-writer campaign pause`, ...), read from Redis.
    pub control: &'a LiveControl,
}

/// An order whose request line and headers passed every check ([`Edge::admit`]).
#[derive(Debug)]
pub struct Admitted {
    /// The verified campaign token.
    pub claims: CampaignClaims,
    /// The client's address.
    pub ip: Option<IpAddr>,
    /// The quantity asked.
    pub qty: i64,
    timestamp: String,
    nonce: String,
    signature: String,
}

/// An order that passed every check ([`Edge::verify`]): ready for [`Edge::reserve`].
#[derive(Debug)]
pub struct Verified {
    /// The verified campaign token.
    pub claims: CampaignClaims,
    /// The client's address.
    pub ip: Option<IpAddr>,
    /// The quantity asked.
    pub qty: i64,
    nonce: String,
    signature: String,
    /// The buyer's home bucket ([`Bucket::of_user`]).
    pub home: Bucket,
    /// The campaign's global limits for this order, counted in its reservation call.
    pub global: GlobalCheck,
}

/// The process's own state of the edge: rate estimators, Redis scripts, the Kafka queue.
#[derive(Debug)]
pub struct Edge {
    limiter: RateLimiter,
    seller: Seller,
    spent: SpentChallenges,
    room: WaitingRoom,
    pressure: Arc<Pressure>,
}

impl Edge {
    /// The edge over a Redis `pool` (`scripts` loaded; a reservation bounded by `redis.timeout`
    /// and collected per bucket as `redis.batch` says, spending a challenge, one SET off the
    /// order path, as long as an undo may wait) and a started Kafka `queue`; the batches are
    /// sent on `io`, the runtime of the pool's connections.
    pub(crate) fn new(
        pool: Pool,
        scripts: Scripts,
        queue: ReservationQueue,
        redis: &RedisConf,
        io: tokio::runtime::Handle,
    ) -> Self {
        let (reserve_timeout, spend_timeout) = (redis.timeout, protocol::timing::undo_timeout(redis.timeout));
        Self {
            limiter: RateLimiter::new(),
            spent: SpentChallenges::new(pool.clone(), spend_timeout),
            room: WaitingRoom::new(pool.clone(), scripts.clone(), spend_timeout),
            pressure: Arc::default(),
            seller: Seller::new(
                Reserver::new(pool, scripts, reserve_timeout).with_batch(redis.batch).with_io(io),
                queue,
            ),
        }
    }

    /// The waiting room (its stats and arrival rates, for metrics).
    pub fn room(&self) -> &WaitingRoom {
        &self.room
    }

    /// The per-process rate estimators (the proxy's own limits, such as result polling, use
    /// them too).
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// The lag of the threads that serve the sale, which sheds the costly endpoints.
    pub fn pressure(&self) -> &Arc<Pressure> {
        &self.pressure
    }

    /// Every check of an order's request line and headers, cheapest first (after the method:
    /// steps 1 to 10 of the list in `crate::checks`, whose test holds it against this code). No
    /// place of the campaign's budget is taken yet: the body may be slow to come ([`Edge::hold`]).
    pub fn admit(
        &self,
        conf: &Conf<'_>,
        c: &CampaignRef<'_>,
        head: &Head<'_>,
        path: &str,
    ) -> Result<Admitted, Denial> {
        if *head.method != Method::POST {
            return Err(Denial::new(Code::BadRequest, "an order is a POST"));
        }
        let campaign = c.campaign;
        let id = campaign.id.as_str();
        let now = Utc::now();
        window::check(campaign, now, c.control.ends_at_ms())?;
        switches::check(&campaign.switches, c.control)?;
        c.sold_out.check(now_ms())?;
        self.pressure.check(conf.shed_at_lag)?;

        let device = input::device_id(head.header(DEVICE_HEADER))?;
        let qty = input::qty(head.uri.query())?;
        let ip = head.client;
        self.limiter.check_request(id, &campaign.limits, ip, device)?;
        let claims = conf.keys.verify(head.header(http::header::AUTHORIZATION.as_str()), id, device)?;
        self.limiter.check_account(id, &campaign.limits, &claims.sub)?;
        conf.keys.check_path(&claims, path)?;
        let signed = signature::parse(
            head.header(TIMESTAMP_HEADER),
            head.header(NONCE_HEADER),
            head.header(SIGNATURE_HEADER),
        )?;
        signature::check_timestamp(&signed, now.timestamp(), campaign.defense.timestamp_window_secs)?;
        Ok(Admitted {
            qty,
            ip,
            timestamp: signed.timestamp.to_string(),
            nonce: signed.nonce.to_string(),
            signature: signed.signature.to_ascii_lowercase(),
            claims,
        })
    }

    /// The rest of an order's checks, with its `body`: the request signature (under the
    /// token's signing key, constant time) → eligibility; the campaign's global limits decided
    /// for the order (its rules' counters, counted in its reservation call: no call here).
    pub async fn verify(
        &self,
        conf: &Conf<'_>,
        c: &CampaignRef<'_>,
        admitted: Admitted,
        head: &Head<'_>,
        body: &[u8],
    ) -> Result<Verified, Denial> {
        let request = Request {
            method: head.method.as_str(),
            path: head.uri.path(),
            query: head.uri.query().unwrap_or(""),
            body,
        };
        let signed = signature::Signed {
            timestamp: &admitted.timestamp,
            unix_secs: 0,
            nonce: &admitted.nonce,
            signature: &admitted.signature,
        };
        signature::verify(&conf.keys.signing_key(&admitted.claims.jti), &request, &signed)?;
        c.eligibility.check(&admitted.claims.login(), Utc::now().timestamp())?;
        let Admitted { claims, ip, qty, nonce, signature, .. } = admitted;
        let who = Subject { ip, device: Some(&claims.dev), user: &claims.sub };
        let home = Bucket::of_user(&c.campaign.id, &claims.sub, c.campaign.buckets);
        let global = GlobalCheck::new(c.campaign, &home, who, now_ms());
        Ok(Verified { claims, ip, qty, nonce, signature, home, global })
    }

    /// The place of a verified `order` in the campaign's concurrency budget, held until its answer
    /// is written: taken only now, its body read and checked, so that orders whose bodies are
    /// slow to come hold none; at most `max_inflight_per_buyer` per account and per device and
    /// `max_inflight_per_ip` per address. Past any, `TRY_LATER`.
    pub fn hold(&self, c: &CampaignRef<'_>, order: &Verified) -> Result<Permit, Denial> {
        c.budget.try_acquire(Holder { user: &order.claims.sub, device: &order.claims.dev, ip: order.ip })
    }

    /// The reservation of a verified order: one bounded `reserve.lua` call, which also counts
    /// the global limits and spends the nonce, then the record handed to Kafka without waiting. `Ok` is `202 QUEUED`: now
    /// ([`Queued::New`], under `request_id`) or, for a safe retry, before.
    pub async fn reserve(
        &self,
        conf: &Conf<'_>,
        c: &CampaignRef<'_>,
        order: &Verified,
        request_id: &str,
    ) -> Result<Queued, Denial> {
        let campaign = c.campaign.id.as_str();
        let home = &order.home;
        let nonce = Nonce {
            key: home.keys.nonce(&order.claims.jti, &order.nonce),
            ttl_secs: c.campaign.defense.nonce_ttl_secs(),
            fingerprint: order.signature.clone(),
        };
        let origin = Origin {
            client_ip: order.ip.map(|ip| ip.to_string()),
            device: Some(order.claims.dev.clone()),
            registered_at: order.claims.reg,
        }
        .fragment();
        let reservation = Order {
            origin: &origin,
            campaign,
            home,
            bucket_tries: c.campaign.bucket_tries,
            request_id,
            user: &order.claims.sub,
            qty: order.qty,
            nonce: Some(&nonce),
            limits: Some(&order.global),
        };
        let effects = Effects { sold_out: c.sold_out, sold_out_ttl: conf.sold_out_ttl, signer: conf.signer };
        self.seller.sell(reservation, effects).await
    }

    /// The result token that goes with a QUEUED answer of `order` under `request_id` (the
    /// request's own, or the first one's for a safe retry): bound to the campaign, the buyer
    /// and the request, valid for the campaign's pay window and a day more.
    pub fn result_token(
        &self,
        conf: &Conf<'_>,
        c: &CampaignRef<'_>,
        order: &Verified,
        request_id: &str,
    ) -> String {
        let expires_at = Utc::now()
            .timestamp()
            .saturating_add(c.campaign.pay_window_secs)
            .saturating_add(RESULT_TOKEN_GRACE_SECS);
        conf.keys.result_token(&c.campaign.id, &order.claims.sub, request_id, expires_at)
    }

    /// Whether a result query for `request_id` on `campaign` carries that request's result
    /// token; returns the buyer. `BAD_RESULT_TOKEN` otherwise, the same whether the request
    /// exists or not (nothing is looked up).
    pub fn check_result(
        &self,
        conf: &Conf<'_>,
        campaign: &str,
        head: &Head<'_>,
        request_id: &str,
    ) -> Result<String, Denial> {
        let token = head.header(RESULT_TOKEN_HEADER);
        conf.keys.check_result_token(token, campaign, request_id, Utc::now().timestamp())
    }
}
