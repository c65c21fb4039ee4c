//! A campaign's edge defenses: its `[defense]` table (captcha, token, timestamp window) and its
//! `[eligibility]` table (who may buy). Read by the gateway; validated with the campaign file
//! (see [`crate::campaign`]), every error naming file:line:column:field.

use serde::Deserialize;
use toml::Spanned;

use crate::conf::{Checker, ConfError};

/// Which captcha the token endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptchaKind {
    /// The built-in proof of work: the client finds an answer whose SHA-256 with the challenge
    /// has `pow_bits` leading zero bits ([`crate::pow`]). Needs no human, costs a bot CPU.
    Pow,
    /// A third-party captcha provider's signed token (the server file's `[defense]`
    /// `captcha_provider_*` keys), for production.
    Provider,
}

/// The `[defense]` table of a campaign file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defense {
    /// Which captcha the token endpoint takes.
    pub captcha: CaptchaKind,
    /// Leading zero bits a proof-of-work answer needs (0..=28). Each bit doubles the client's
    /// expected work: about 2^bits SHA-256 hashes (2^16 ≈ 65,000 hashes ≈ 20–60 ms of one core).
    pub pow_bits: u32,
    /// Seconds a challenge stays valid (10..=600). A challenge is single use.
    pub challenge_ttl_secs: u32,
    /// Seconds a campaign token (and its hidden path and signing key) lives (10..=600).
    pub token_ttl_secs: u32,
    /// An order's `X-Timestamp` may differ from server time by at most this (1..=300 s).
    pub timestamp_window_secs: u32,
}

impl Default for Defense {
    fn default() -> Self {
        Self {
            captcha: CaptchaKind::Pow,
            pow_bits: 16,
            challenge_ttl_secs: 60,
            token_ttl_secs: 60,
            timestamp_window_secs: 30,
        }
    }
}

impl Defense {
    /// Seconds a nonce is remembered in Redis: the token's life plus the timestamp window, so a
    /// nonce outlives every request that may still carry it (≥ the timestamp window).
    pub fn nonce_ttl_secs(&self) -> u32 {
        self.token_ttl_secs + self.timestamp_window_secs
    }
}

/// The `[eligibility]` table of a campaign file: who may buy. Lists are files of one user id a
/// line (`#` comments), relative to the campaign file, loaded before the sale (at start and on
/// reload). Rules read the login JWT's claims (`level`, `region`, `registered_at`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Eligibility {
    /// Users refused whatever else holds.
    pub blacklist_file: Option<String>,
    /// When set, only these users may buy.
    pub eligible_file: Option<String>,
    /// Accounts younger than this many days are refused (0: no rule).
    pub min_account_age_days: u32,
    /// Accounts below this level are refused (0: no rule).
    pub min_level: u32,
    /// When not empty, only accounts of these regions may buy.
    pub regions: Vec<String>,
}

impl Eligibility {
    /// Whether any rule or list is set (otherwise every logged-in user is eligible).
    pub fn is_open(&self) -> bool {
        *self == Self::default()
    }
}

/// `[defense]` as written (spans kept for errors).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefense {
    #[serde(default)]
    captcha: Option<CaptchaKind>,
    #[serde(default)]
    pow_bits: Option<Spanned<i64>>,
    #[serde(default)]
    challenge_ttl_secs: Option<Spanned<i64>>,
    #[serde(default)]
    token_ttl_secs: Option<Spanned<i64>>,
    #[serde(default)]
    timestamp_window_secs: Option<Spanned<i64>>,
}

/// `[eligibility]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEligibility {
    #[serde(default)]
    blacklist_file: Option<Spanned<String>>,
    #[serde(default)]
    eligible_file: Option<Spanned<String>>,
    #[serde(default)]
    min_account_age_days: Option<Spanned<i64>>,
    #[serde(default)]
    min_level: Option<Spanned<i64>>,
    #[serde(default)]
    regions: Vec<String>,
}

/// An optional number within `min..=max`, `default` when absent.
fn bounded_or(
    c: &Checker<'_>,
    v: &Option<Spanned<i64>>,
    field: &str,
    min: i64,
    max: i64,
    default: u32,
) -> Result<u32, ConfError> {
    v.as_ref().map_or(Ok(default), |v| c.bounded(v, field, min, max))
}

impl RawDefense {
    pub(crate) fn check(&self, c: &Checker<'_>) -> Result<Defense, ConfError> {
        let d = Defense::default();
        Ok(Defense {
            captcha: self.captcha.unwrap_or(d.captcha),
            pow_bits: bounded_or(c, &self.pow_bits, "defense.pow_bits", 0, 28, d.pow_bits)?,
            challenge_ttl_secs: bounded_or(
                c,
                &self.challenge_ttl_secs,
                "defense.challenge_ttl_secs",
                10,
                600,
                d.challenge_ttl_secs,
            )?,
            token_ttl_secs: bounded_or(
                c,
                &self.token_ttl_secs,
                "defense.token_ttl_secs",
                10,
                600,
                d.token_ttl_secs,
            )?,
            timestamp_window_secs: bounded_or(
                c,
                &self.timestamp_window_secs,
                "defense.timestamp_window_secs",
                1,
                300,
                d.timestamp_window_secs,
            )?,
        })
    }
}

impl RawEligibility {
    pub(crate) fn check(&self, c: &Checker<'_>) -> Result<Eligibility, ConfError> {
        let file = |v: &Option<Spanned<String>>, field: &str| match v {
            Some(s) if s.get_ref().trim().is_empty() => Err(c.err(s.span(), field, "must not be empty")),
            Some(s) => Ok(Some(s.get_ref().clone())),
            None => Ok(None),
        };
        Ok(Eligibility {
            blacklist_file: file(&self.blacklist_file, "eligibility.blacklist_file")?,
            eligible_file: file(&self.eligible_file, "eligibility.eligible_file")?,
            min_account_age_days: bounded_or(
                c,
                &self.min_account_age_days,
                "eligibility.min_account_age_days",
                0,
                36_500,
                0,
            )?,
            min_level: bounded_or(c, &self.min_level, "eligibility.min_level", 0, 1_000_000, 0)?,
            regions: self.regions.clone(),
        })
    }
}
