//! Before an order: the captcha challenge and the campaign token, answered by the gateway.
//!
//! Both count against the campaign's `[limits]` per IP, device and account, apart from its
//! orders (a buyer's captcha and token requests never use up its order allowance).
//!
//! `POST /seckill/{c}/captcha`: the campaign exists → window open → switches → rate limits per
//! IP and device → a proof-of-work challenge (`CHALLENGE`: `challenge`, `bits`, `expires_in`),
//! or, for a campaign whose captcha is a provider's, where to get one.
//!
//! `POST /seckill/{c}/token` with `Authorization: Bearer <login JWT>`, `X-Device-Id` and a JSON
//! body `{"challenge", "answer"}` or `{"captcha_token"}`: the campaign exists → window open (a
//! token cannot be issued before it) → switches → sold-out flag → device → rate limits per IP,
//! device and campaign → the login JWT → the account's rate → the body → the captcha →
//! eligibility → the captcha spent (single use, Redis `SET NX`) → `TOKEN_ISSUED` with the
//! campaign token, its hidden order path and URL, its signing key and expiry.

use chrono::Utc;
use http::Method;
use pingora_core::Result;
use pingora_proxy::Session;
use plugins::captcha::{self, Solution};
use plugins::input::{self, DEVICE_HEADER};
use plugins::sold_out::now_ms;
use plugins::{client_ip, switches, window, Denial};
use protocol::codes::Code;
use protocol::defense::CaptchaKind;
use serde_json::{json, Value};

use crate::proxy::{deny, peer_ip, read_body, respond, unknown_campaign, Ctx, Gateway};
use crate::reload::Active;

/// Writes `answer`: 200 with its JSON (plus `request_id`), or the denial.
pub async fn answer(
    session: &mut Session,
    ctx: &mut Ctx,
    answer: std::result::Result<Value, Denial>,
) -> Result<bool> {
    match answer {
        Ok(mut body) => {
            body["request_id"] = ctx.request_id.as_str().into();
            respond(session, 200, serde_json::to_vec(&body).unwrap_or_default(), None, "no-store").await
        }
        Err(d) => deny(session, ctx, &d).await,
    }
}

/// The rate limits' key of a campaign's captcha or token requests: the campaign's `[limits]`
/// apply to each endpoint as well, counted apart from its orders.
fn limit_key(endpoint: &str, campaign: &str) -> String {
    format!("{endpoint}:{campaign}")
}

impl Gateway {
    /// `POST /seckill/{c}/captcha`.
    pub(crate) fn captcha(
        &self,
        session: &Session,
        active: &Active,
        campaign: &str,
    ) -> std::result::Result<Value, Denial> {
        let req = session.req_header();
        let entry = active.campaigns.get(campaign).ok_or_else(unknown_campaign)?;
        if req.method != Method::POST {
            return Err(Denial::new(Code::BadRequest, "ask for a challenge with a POST"));
        }
        let c = &entry.campaign;
        let now = Utc::now();
        window::check(c, now)?;
        switches::check(&c.switches)?;
        let header = |name: &str| req.headers.get(name).map(|v| v.as_bytes());
        let device = input::device_id(header(DEVICE_HEADER))?;
        let ip =
            client_ip::client_ip(peer_ip(session), header("x-forwarded-for"), &active.server.trusted_proxies);
        self.limiter.check_request(&limit_key("captcha", campaign), &c.limits, ip, device)?;
        let d = &c.defense;
        Ok(match d.captcha {
            CaptchaKind::Pow => json!({
                "code": Code::Challenge,
                "message": "find an answer whose SHA-256(challenge \":\" answer) has `bits` leading zero bits",
                "captcha": "pow",
                "challenge": captcha::challenge(active.server.defense.keys.challenge_key(), campaign, d.challenge_ttl_secs, now.timestamp())?,
                "bits": d.pow_bits,
                "expires_in": d.challenge_ttl_secs,
            }),
            CaptchaKind::Provider => json!({
                "code": Code::Challenge,
                "message": "solve the captcha provider's challenge and bring its token as captcha_token",
                "captcha": "provider",
            }),
        })
    }

    /// `POST /seckill/{c}/token`.
    pub(crate) async fn token(
        &self,
        session: &mut Session,
        active: &Active,
        campaign: &str,
    ) -> std::result::Result<Value, Denial> {
        let (login, device) = {
            let req = session.req_header();
            let entry = active.campaigns.get(campaign).ok_or_else(unknown_campaign)?;
            if req.method != Method::POST {
                return Err(Denial::new(Code::BadRequest, "ask for a token with a POST"));
            }
            let c = &entry.campaign;
            window::check(c, Utc::now())?;
            switches::check(&c.switches)?;
            entry.sold_out.check(now_ms())?;
            let header = |name: &str| req.headers.get(name).map(|v| v.as_bytes());
            let device = input::device_id(header(DEVICE_HEADER))?.ok_or_else(|| {
                Denial::new(Code::BadRequest, "header x-device-id is required: the token is bound to it")
            })?;
            let ip = client_ip::client_ip(
                peer_ip(session),
                header("x-forwarded-for"),
                &active.server.trusted_proxies,
            );
            self.limiter.check_request(&limit_key("token", campaign), &c.limits, ip, Some(device))?;
            let login = active.server.defense.login.verify(header(http::header::AUTHORIZATION.as_str()))?;
            self.limiter.check_account(&limit_key("token", campaign), &c.limits, &login.user)?;
            (login, device.to_string())
        };
        let body = read_body(session).await?;
        let entry = active.campaigns.get(campaign).ok_or_else(unknown_campaign)?;
        let d = &entry.campaign.defense;
        let now = Utc::now().timestamp();
        let defense = &active.server.defense;
        let solution = Solution::parse(&body)?;
        let id = captcha::check(
            defense.keys.challenge_key(),
            defense.provider.as_ref(),
            campaign,
            d,
            &solution,
            now,
        )?;
        entry.eligibility.check(&login, now)?;
        self.spent.spend(campaign, &id, d.challenge_ttl_secs.max(d.token_ttl_secs) * 2).await?;
        let issued = defense.keys.issue(&login, campaign, &device, d.token_ttl_secs, now)?;
        Ok(json!({
            "code": Code::TokenIssued,
            "message": "sign each order with signing_key and send it to order_url before expires_at",
            "token": issued.token,
            "path": issued.path,
            "order_url": format!("/seckill/{campaign}/{}/order", issued.path),
            "signing_key": issued.signing_key,
            "expires_at": issued.expires_at,
            "expires_in": d.token_ttl_secs,
        }))
    }
}
