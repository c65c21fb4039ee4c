//! Before an order: the captcha challenge and the campaign token.
//!
//! Both count against the campaign's `[limits]` per IP, device and account, apart from its
//! orders (a buyer's captcha and token requests never use up its order allowance).
//!
//! [`Edge::challenge`] (`POST /seckill/{c}/captcha`): window open (or a waiting room's
//! pre-queue, as for the token) → switches → rate limits per
//! IP and device → a proof-of-work challenge (`CHALLENGE`: `challenge`, `bits`, `expires_in`; the
//! bits grow with the campaign's arrivals per second, `[[pow_level]]`), or,
//! for a campaign whose captcha is a provider's, where to get one.
//!
//! [`Edge::token`] (`POST /seckill/{c}/token` with `Authorization: Bearer <login JWT>`,
//! `X-Device-Id` and a JSON body `{"challenge", "answer"}` or `{"captcha_token"}`), in two steps
//! around the body's read: [`Edge::admit_token`] (window open: a token cannot be issued before
//! it, but a waiting room's pre-queue opens earlier → switches → sold-out flag → device → rate
//! limits per IP, device and campaign → the login JWT → the account's rate), then
//! [`Edge::token`] (the campaign's waiting room, when on: `WAITING` with a queue ticket until
//! the buyer's turn, or held until it when it is under 100 ms away and the body brings the
//! captcha's answer, [`crate::room`] → the body → the captcha (a proof of work judged at
//! the bits in force now, [`crate::issue::captcha`]; refused `CAPTCHA_FAILED` with a fresh challenge at
//! those bits, so the buyer solves that one and asks again) →
//! eligibility → the captcha spent: single use, Redis `SET NX` → `TOKEN_ISSUED` with the
//! campaign token, its hidden order path and URL, its signing key and expiry).

use chrono::Utc;
use http::Method;
use protocol::campaign::Campaign;
use protocol::codes::Code;
use protocol::defense::CaptchaKind;
use serde_json::{json, Value};

use super::{CampaignRef, Conf, Edge, Head};
use crate::checks::input::{self, DEVICE_HEADER};
use crate::checks::sold_out::now_ms;
use crate::checks::switches;
use crate::denial::Denial;
use crate::issue::auth::Login;
use crate::issue::captcha::{self, Solution};
use crate::room::{self, Asker, Pass, TICKET_HEADER};

/// The rate limits' key of a campaign's captcha or token requests: the campaign's `[limits]`
/// apply to each endpoint as well, counted apart from its orders.
fn limit_key(endpoint: &str, campaign: &str) -> String {
    format!("{endpoint}:{campaign}")
}

/// An answer of the captcha or token endpoint: its code (`CHALLENGE`, `TOKEN_ISSUED`,
/// `WAITING`, or `CAPTCHA_FAILED` with a fresh challenge) and its JSON body; a `WAITING` one says
/// when to come back.
#[derive(Debug, Clone, PartialEq)]
pub struct Issued {
    /// The answer code (also in the body).
    pub code: Code,
    /// The JSON body.
    pub body: Value,
    /// Seconds for a `Retry-After` header (a `WAITING` answer's `retry_after`).
    pub retry_after_secs: Option<u32>,
}

impl Issued {
    /// An answer with no `Retry-After`.
    fn new(code: Code, body: Value) -> Self {
        Self { code, body, retry_after_secs: None }
    }

    /// A place in the waiting room: come back after its `retry_after`.
    fn waiting(body: Value) -> Self {
        let retry_after_secs = body["retry_after"].as_u64().map(|s| s.min(u64::from(u32::MAX)) as u32);
        Self { code: Code::Waiting, body, retry_after_secs }
    }
}

/// A token request whose headers passed every check ([`Edge::admit_token`]).
#[derive(Debug)]
pub struct TokenAsked {
    login: Login,
    device: String,
    ticket: Option<Vec<u8>>,
    /// When the request reached the proxy ([`Head::arrived`]), for the waiting room.
    arrived: chrono::DateTime<Utc>,
}

impl Edge {
    /// `POST /seckill/{c}/captcha`: the challenge's JSON answer.
    pub fn challenge(&self, conf: &Conf<'_>, c: &CampaignRef<'_>, head: &Head<'_>) -> Result<Issued, Denial> {
        if *head.method != Method::POST {
            return Err(Denial::new(Code::BadRequest, "ask for a challenge with a POST"));
        }
        let campaign = c.campaign;
        let now = Utc::now();
        // A waiting room's pre-queue opens the challenge with the token endpoint: a buyer who
        // arrives early may solve its work before its turn, as after the start.
        room::check_window(campaign, now, c.control.ends_at_ms())?;
        switches::check(&campaign.switches, c.control)?;
        self.pressure.check(conf.shed_at_lag)?;
        let device = input::device_id(head.header(DEVICE_HEADER))?;
        let ip = head.client;
        self.limiter.check_request(&limit_key("captcha", &campaign.id), &campaign.limits, ip, device)?;
        Ok(Issued::new(
            Code::Challenge,
            match campaign.defense.captcha {
                CaptchaKind::Pow => {
                    let message =
                        "find an answer whose SHA-256(challenge \":\" answer) has `bits` leading zero bits";
                    self.pow_challenge(conf, campaign, Code::Challenge, message, now.timestamp())?
                }
                CaptchaKind::Provider => json!({
                    "code": Code::Challenge,
                    "message": "solve the captcha provider's challenge and bring its token as captcha_token",
                    "captcha": "provider",
                }),
            },
        ))
    }

    /// The id to spend of the captcha `solution` brings for `campaign`, judged at `now` (a proof
    /// of work at the bits in force then). A proof of work that fails (short of those bits,
    /// wrong, expired) is answered `CAPTCHA_FAILED` with a fresh challenge at the bits in force
    /// (`Ok(Err(answer))`), so that the buyer's next try is the right work, not a guess.
    fn judge(
        &self,
        conf: &Conf<'_>,
        campaign: &Campaign,
        solution: &Solution,
        now: i64,
    ) -> Result<Result<String, Issued>, Denial> {
        let (d, key) = (&campaign.defense, conf.keys.challenge_key());
        let level = self.room.rates().bits(campaign, now);
        match captcha::check(key, conf.provider, &campaign.id, d, solution, (now, level)) {
            Ok(id) => Ok(Ok(id)),
            Err(f) if f.code == Code::CaptchaFailed && d.captcha == CaptchaKind::Pow => {
                let message = format!("{}: solve this fresh challenge and ask again", f.message);
                let answer = self.pow_challenge(conf, campaign, Code::CaptchaFailed, &message, now)?;
                Ok(Err(Issued::new(Code::CaptchaFailed, answer)))
            }
            Err(f) => Err(f),
        }
    }

    /// A fresh proof-of-work challenge of `campaign` at the bits in force at `now`, answered as
    /// `code` with `message`: `captcha`, `challenge`, `bits`, `expires_in`.
    fn pow_challenge(
        &self,
        conf: &Conf<'_>,
        campaign: &Campaign,
        code: Code,
        message: &str,
        now: i64,
    ) -> Result<serde_json::Value, Denial> {
        let ttl = campaign.defense.challenge_ttl_secs;
        let bits = self.room.rates().bits(campaign, now);
        Ok(json!({
            "code": code,
            "message": message,
            "captcha": "pow",
            "challenge": captcha::challenge(conf.keys.challenge_key(), &campaign.id, ttl, bits, now)?,
            "bits": bits,
            "expires_in": ttl,
        }))
    }

    /// Every check of a token request's line and headers, before its body is read.
    pub fn admit_token(
        &self,
        conf: &Conf<'_>,
        c: &CampaignRef<'_>,
        head: &Head<'_>,
    ) -> Result<TokenAsked, Denial> {
        if *head.method != Method::POST {
            return Err(Denial::new(Code::BadRequest, "ask for a token with a POST"));
        }
        let campaign = c.campaign;
        room::check_window(campaign, Utc::now(), c.control.ends_at_ms())?;
        switches::check(&campaign.switches, c.control)?;
        c.sold_out.check(now_ms())?;
        self.pressure.check(conf.shed_at_lag)?;
        let device = input::device_id(head.header(DEVICE_HEADER))?.ok_or_else(|| {
            Denial::new(Code::BadRequest, "header x-device-id is required: the token is bound to it")
        })?;
        let ip = head.client;
        let key = limit_key("token", &campaign.id);
        self.limiter.check_request(&key, &campaign.limits, ip, Some(device))?;
        let login = conf.login.verify(head.header(http::header::AUTHORIZATION.as_str()))?;
        self.limiter.check_account(&key, &campaign.limits, &login.user)?;
        let ticket = head.header(TICKET_HEADER).map(<[u8]>::to_vec);
        Ok(TokenAsked { login, device: device.to_string(), ticket, arrived: head.arrived })
    }

    /// The token request's `body` (the captcha's answer): the token's JSON answer.
    pub async fn token(
        &self,
        conf: &Conf<'_>,
        c: &CampaignRef<'_>,
        asked: TokenAsked,
        body: &[u8],
    ) -> Result<Issued, Denial> {
        let campaign = c.campaign.id.as_str();
        let d = &c.campaign.defense;
        let at = Utc::now();
        self.room.arrive(c.campaign, at).await;
        // The body, parsed once: only a request that brings its captcha's answer is held until a
        // near turn (admitted in place); a bad body is refused after the room, as before.
        let solution = Solution::parse(body);
        let brings_work = solution.as_ref().is_ok_and(Solution::brings_work);
        let who = Asker {
            user: &asked.login.user,
            device: &asked.device,
            ticket: asked.ticket.as_deref(),
            brings_work,
            arrived: asked.arrived,
        };
        let admitted = match self.room.pass(conf.keys.room_key(), c.campaign, who, at).await? {
            Pass::Open => None,
            Pass::Waiting(answer) => return Ok(Issued::waiting(answer)),
            Pass::Admitted { ticket, session_left_secs, first, held_ms } => {
                Some((ticket, session_left_secs, first, held_ms))
            }
        };
        let now = at.timestamp();
        let solution = solution?;
        let id = match self.judge(conf, c.campaign, &solution, now)? {
            Ok(id) => id,
            Err(fresh) => return Ok(fresh),
        };
        c.eligibility.check(&asked.login, now)?;
        self.spent.spend(campaign, &id, d.challenge_ttl_secs.max(d.token_ttl_secs) * 2).await?;
        let issued = conf.keys.issue(&asked.login, campaign, &asked.device, d.token_ttl_secs, now)?;
        let mut answer = json!({
            "code": Code::TokenIssued,
            "message": "sign each order with signing_key and send it to order_url before expires_at",
            "token": issued.token,
            "path": issued.path,
            "order_url": format!("/seckill/{campaign}/{}/order", issued.path),
            "signing_key": issued.signing_key,
            "expires_at": issued.expires_at,
            "expires_in": d.token_ttl_secs,
        });
        if let Some((ticket, left, first, held_ms)) = admitted {
            answer["ticket"] = ticket.into();
            answer["session_left_secs"] = left.into();
            if let Some(held) = held_ms {
                answer["held_ms"] = held.into();
            }
            if let Some(first) = first {
                self.room.stats().admitted(campaign, first, Utc::now().timestamp_millis());
            }
        }
        Ok(Issued::new(Code::TokenIssued, answer))
    }
}
