//! Captcha before a token: the built-in proof of work, or a third-party provider's token.
//!
//! - **Proof of work** ([`CaptchaKind::Pow`]): `POST /seckill/{c}/captcha` hands out a
//!   challenge `{campaign}.{expires}.{id}.{bits}.{mac}`, authenticated by an HMAC under a key
//!   derived from the server's master key, so it needs no storage until it is spent. The answer
//!   is judged when it is presented: it must give the challenge the bits in force then (they grow
//!   with the crowd, `[[pow_level]]`: [`crate::room`]), and never fewer than the
//!   campaign's `pow_bits`, leading zero bits ([`protocol::pow`]). So a challenge fetched cheap
//!   before the crowd is worth nothing once the crowd is there. Only within [`POW_GRACE_SECS`]
//!   of its handing out is the work judged at the bits the challenge carries, when those are
//!   fewer: a buyer who solved it as the level rose is not sent back (and one who is, past the
//!   grace, is answered with a fresh challenge at the level in force: `crate::edge::Edge::token`).
//! - **Provider** ([`CaptchaKind::Provider`]): the client solved a third-party captcha and
//!   brings its signed token (a JWT checked with the provider's public key, with `jti`).
//!
//! Either is single use: its id is spent in Redis with one `SET NX` ([`SpentChallenges`]) when
//! a token is issued, so a second use fails on every gateway process.

use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::KeysInterface;
use fred::types::{Expiration, SetOptions};
use protocol::codes::Code;
use protocol::defense::{CaptchaKind, Defense};
use protocol::keys::CampaignKeys;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;

use crate::denial::Denial;
use crate::issue::auth::JwtCheck;

fn failed(message: &'static str) -> Denial {
    Denial::new(Code::CaptchaFailed, message)
}

/// Hex characters of a challenge's MAC.
const MAC_HEX: usize = 32;

/// Seconds after a challenge was handed out during which its work is judged at the bits it
/// carries when the level rose since (a buyer's solving time at the highest levels); past it,
/// at the level in force.
pub const POW_GRACE_SECS: i64 = 10;

/// A fresh proof-of-work challenge for `campaign` asking `bits`, valid `ttl_secs` from `now`.
pub fn challenge(
    key: &hmac::Key,
    campaign: &str,
    ttl_secs: u32,
    bits: u32,
    now: i64,
) -> Result<String, Denial> {
    let mut id = [0u8; 12];
    SystemRandom::new().fill(&mut id).map_err(|_| Denial::new(Code::Internal, "no randomness"))?;
    let body = format!("{campaign}.{}.{}.{bits}", now + i64::from(ttl_secs), hex::encode(id));
    let mac = hmac::sign(key, body.as_bytes());
    Ok(format!("{body}.{}", &hex::encode(mac.as_ref())[..MAC_HEX]))
}

/// What the token endpoint's body brings as its captcha.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Solution {
    /// The proof-of-work challenge, as handed out.
    #[serde(default)]
    pub challenge: Option<String>,
    /// Its answer.
    #[serde(default)]
    pub answer: Option<String>,
    /// A captcha provider's token.
    #[serde(default)]
    pub captcha_token: Option<String>,
}

impl Solution {
    /// Whether it brings an answer at all: a challenge and its answer, or a provider's token.
    pub fn brings_work(&self) -> bool {
        (self.challenge.is_some() && self.answer.is_some()) || self.captcha_token.is_some()
    }

    /// Parses the token endpoint's JSON body; `BAD_REQUEST` when it is not one.
    pub fn parse(body: &[u8]) -> Result<Self, Denial> {
        serde_json::from_slice(body).map_err(|_| {
            Denial::new(
                Code::BadRequest,
                "the body must be JSON {\"challenge\": ..., \"answer\": ...} or {\"captcha_token\": ...}",
            )
        })
    }
}

#[derive(Debug, Deserialize)]
struct ProviderClaims {
    jti: String,
}

/// Checks a solution for `campaign` under its `defense` at `now`, a proof of work at the
/// `level` in force (the bits a challenge handed out now asks); returns the id to spend (single
/// use) or `CAPTCHA_FAILED`.
pub fn check(
    key: &hmac::Key,
    provider: Option<&JwtCheck>,
    campaign: &str,
    defense: &Defense,
    solution: &Solution,
    (now, level): (i64, u32),
) -> Result<String, Denial> {
    match defense.captcha {
        CaptchaKind::Pow => {
            let (Some(challenge), Some(answer)) = (&solution.challenge, &solution.answer) else {
                return Err(failed("this campaign takes a proof of work: challenge and answer"));
            };
            let (id, expires, carried) = check_challenge(key, campaign, challenge, now)?;
            let handed_out = expires - i64::from(defense.challenge_ttl_secs);
            let judged = match now - handed_out <= POW_GRACE_SECS {
                true => carried.unwrap_or(0).min(level),
                false => level,
            };
            if answer.len() > 32 || !protocol::pow::solves(challenge, answer, judged.max(defense.pow_bits)) {
                return Err(failed("the answer does not solve the challenge at the level in force"));
            }
            Ok(id.to_string())
        }
        CaptchaKind::Provider => {
            let token = solution
                .captcha_token
                .as_deref()
                .ok_or_else(|| failed("this campaign takes a captcha_token"))?;
            let provider = provider.ok_or_else(|| failed("no captcha provider is configured"))?;
            let claims: ProviderClaims =
                provider.decode(token).map_err(|_| failed("the captcha token is not valid"))?;
            if claims.jti.is_empty()
                || claims.jti.len() > 128
                || !claims.jti.bytes().all(crate::issue::auth::id_byte)
            {
                return Err(failed("the captcha token's jti is not valid"));
            }
            Ok(format!("p-{}", claims.jti))
        }
    }
}

/// The id of a genuine, unexpired challenge of `campaign`, its expiry and the bits it asks
/// (`None` for a challenge of the format before the bits were carried).
fn check_challenge<'a>(
    key: &hmac::Key,
    campaign: &str,
    challenge: &'a str,
    now: i64,
) -> Result<(&'a str, i64, Option<u32>), Denial> {
    let bad = || failed("the challenge is not one of ours");
    let (body, mac) = challenge.rsplit_once('.').ok_or_else(bad)?;
    let expected = hmac::sign(key, body.as_bytes());
    let expected = &hex::encode(expected.as_ref())[..MAC_HEX];
    if !crate::issue::token::constant_eq(expected.as_bytes(), mac.as_bytes()) {
        return Err(bad());
    }
    let mut parts = body.split('.');
    let (c, expires, id, bits) = (parts.next(), parts.next(), parts.next(), parts.next());
    if c != Some(campaign) {
        return Err(failed("the challenge is for another campaign"));
    }
    let expires = expires.and_then(|e| e.parse::<i64>().ok()).filter(|e| *e >= now);
    let expires = expires.ok_or_else(|| failed("the challenge has expired: ask for a new one"))?;
    let bits = match bits {
        None => None,
        Some(b) => Some(b.parse::<u32>().map_err(|_| bad())?),
    };
    Ok((id.ok_or_else(bad)?, expires, bits))
}

/// Spent challenges, in Redis, shared by every gateway process.
#[derive(Clone)]
pub struct SpentChallenges {
    pool: Pool,
    timeout: Duration,
}

impl std::fmt::Debug for SpentChallenges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpentChallenges").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl SpentChallenges {
    /// Over `pool`, each call bounded by `timeout`.
    pub fn new(pool: Pool, timeout: Duration) -> Self {
        Self { pool, timeout }
    }

    /// Spends `id` of `campaign` for `ttl_secs` (one `SET NX EX`): `CAPTCHA_FAILED` when it
    /// was spent before, `SERVICE_DEGRADED` when Redis does not answer in time.
    pub async fn spend(&self, campaign: &str, id: &str, ttl_secs: u32) -> Result<(), Denial> {
        let key = CampaignKeys::new(campaign).challenge(id);
        // On a Redis Cluster a SET refused with MOVED or ASK did not run: sent again, briefly.
        let set = protocol::cluster::retry_tryagain(|| {
            let expire = Some(Expiration::EX(i64::from(ttl_secs)));
            self.pool.next_connected().set::<Option<String>, _, _>(
                &key,
                1,
                expire,
                Some(SetOptions::NX),
                false,
            )
        });
        match tokio::time::timeout(self.timeout, set).await {
            Ok(Ok(Some(_))) => Ok(()),
            Ok(Ok(None)) => Err(failed("this challenge was used already: ask for a new one")),
            _ => Err(Denial::new(Code::ServiceDegraded, "cannot check the challenge now; try again")
                .retry_after(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, b"challenge-key-0123456789")
    }

    fn pow(bits: u32) -> Defense {
        Defense { pow_bits: bits, ..Defense::default() }
    }

    fn solved(challenge: &str, bits: u32) -> Solution {
        let answer = protocol::pow::solve(challenge, bits, 1 << 24).unwrap();
        Solution { challenge: Some(challenge.into()), answer: Some(answer), captcha_token: None }
    }

    #[test]
    fn a_solved_challenge_passes_and_names_its_id() {
        let now = 1_700_000_000;
        let c = challenge(&key(), "c1", 60, 8, now).unwrap();
        let id = check(&key(), None, "c1", &pow(8), &solved(&c, 8), (now + 59, 8)).unwrap();
        assert_eq!(id.len(), 24);
        assert!(c.contains(&id));
    }

    /// An answer to `challenge` with between `min` and `max` (excluded) leading zero bits.
    fn with_zeros(challenge: &str, min: u32, max: u32) -> Solution {
        let answer = (0..1_000_000u32)
            .map(|n| n.to_string())
            .find(|a| (min..max).contains(&protocol::pow::leading_zero_bits(challenge, a)))
            .unwrap();
        Solution { challenge: Some(challenge.into()), answer: Some(answer), captcha_token: None }
    }

    #[test]
    fn work_is_judged_at_the_level_in_force_when_it_is_presented() {
        let now = 1_700_000_000;
        let check = |d: &Defense, s: &Solution, at: i64, level: u32| {
            check(&key(), None, "c1", d, s, (at, level)).map_err(|d| d.code)
        };
        // Handed out cheap (4 bits), solved at 4: good while the level is 4, and within the grace
        // after the level rose to 12 (solved as it rose); past the grace, only at 12.
        let cheap = challenge(&key(), "c1", 60, 4, now).unwrap();
        let weak = with_zeros(&cheap, 4, 12);
        assert!(check(&pow(4), &weak, now + 30, 4).is_ok());
        assert!(check(&pow(4), &weak, now + POW_GRACE_SECS, 12).is_ok(), "within the grace");
        assert_eq!(check(&pow(4), &weak, now + POW_GRACE_SECS + 1, 12), Err(Code::CaptchaFailed));
        assert!(check(&pow(4), &solved(&cheap, 12), now + 30, 12).is_ok(), "the work of the level in force");
        // Handed out at 12 bits (a crowd): fewer do not pass while the crowd is there, and do once
        // it has gone (the level fell back to the base).
        let hard = challenge(&key(), "c1", 60, 12, now).unwrap();
        let weak = with_zeros(&hard, 4, 12);
        assert_eq!(check(&pow(4), &weak, now, 12), Err(Code::CaptchaFailed));
        assert!(check(&pow(4), &weak, now + 30, 4).is_ok());
        assert!(check(&pow(4), &solved(&hard, 12), now, 12).is_ok());
        // The bits are signed: lowering them in the challenge breaks its MAC.
        let (body, mac) = hard.rsplit_once('.').unwrap();
        let lowered = format!("{}.4.{mac}", body.rsplit_once('.').unwrap().0);
        let s = Solution { challenge: Some(lowered.clone()), ..solved(&hard, 12) };
        assert_eq!(check(&pow(4), &s, now, 4), Err(Code::CaptchaFailed));
        // Never fewer than the campaign's bits (the base was raised since).
        let easy = challenge(&key(), "c1", 60, 2, now).unwrap();
        assert_eq!(check(&pow(8), &with_zeros(&easy, 2, 3), now, 2), Err(Code::CaptchaFailed));
    }

    #[test]
    fn wrong_answers_and_foreign_expired_or_forged_challenges_fail() {
        let now = 1_700_000_000;
        let c = challenge(&key(), "c1", 60, 8, now).unwrap();
        let fails = |s: &Solution, campaign: &str, at: i64| {
            check(&key(), None, campaign, &pow(8), s, (at, 8)).map_err(|d| d.code)
        };
        let good = solved(&c, 8);
        assert_eq!(fails(&good, "c2", now), Err(Code::CaptchaFailed), "another campaign");
        assert_eq!(fails(&good, "c1", now + 61), Err(Code::CaptchaFailed), "expired");
        let mut wrong = good.clone();
        // A wrong answer: find one that does not solve it.
        wrong.answer = (0..100).map(|n| format!("x{n}")).find(|a| !protocol::pow::solves(&c, a, 8));
        assert_eq!(fails(&wrong, "c1", now), Err(Code::CaptchaFailed));
        let mut forged = good.clone();
        forged.challenge = Some(c.replace("c1.", "c1.9").to_string());
        assert_eq!(fails(&forged, "c1", now), Err(Code::CaptchaFailed), "edited expiry");
        assert_eq!(fails(&Solution::default(), "c1", now), Err(Code::CaptchaFailed));
        let provider = Defense { captcha: CaptchaKind::Provider, ..Defense::default() };
        assert_eq!(
            check(&key(), None, "c1", &provider, &good, (now, 8)).unwrap_err().code,
            Code::CaptchaFailed
        );
    }

    #[test]
    fn bodies_parse_or_are_bad_requests() {
        assert_eq!(Solution::parse(br#"{"captcha_token":"t"}"#).unwrap().captcha_token.as_deref(), Some("t"));
        for body in [&b""[..], b"{\"other\":1}", b"\xff"] {
            assert_eq!(Solution::parse(body).unwrap_err().code, Code::BadRequest);
        }
    }
}
