//! The `[defense]` table of the sale's conf: the keys of the edge defenses, shared by every
//! gateway process of the shop.
//!
//! - `master_key` (secret reference): derives the campaign-token key, the hidden-path key, the
//!   per-token signing keys and the captcha challenge key (`plugins::token::EdgeKeys`);
//! - `login_alg` (`RS256`, `ES256` or `HS256`, pinned), `login_key` (a PEM public key file for
//!   RS256/ES256, a secret reference for HS256) or `login_keys` (a reference to a JWK set: keys
//!   by the token's `kid`, for rotating the auth service's key), `login_issuer`,
//!   `login_audience`, `leeway_secs`: the shop auth service's login JWT;
//! - `captcha_provider_alg` / `_key` / `_issuer` / `_audience` (optional): a third-party
//!   captcha provider's signed token, for campaigns with `captcha = "provider"`.

use std::path::Path;

use crate::issue::auth::{JwtCheck, LoginAlg, LoginVerifier};
use crate::issue::token::EdgeKeys;
use protocol::conf::ConfError;
use ring::digest;
use serde::Deserialize;

use protocol::conf::Checker;

use super::{spanned, S};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefense {
    master_key: S<String>,
    login_alg: S<String>,
    #[serde(default)]
    login_key: Option<S<String>>,
    #[serde(default)]
    login_keys: Option<S<String>>,
    login_issuer: S<String>,
    login_audience: S<String>,
    #[serde(default = "d_leeway")]
    leeway_secs: S<i64>,
    #[serde(default)]
    captcha_provider_alg: Option<S<String>>,
    #[serde(default)]
    captcha_provider_key: Option<S<String>>,
    #[serde(default)]
    captcha_provider_issuer: Option<S<String>>,
    #[serde(default)]
    captcha_provider_audience: Option<S<String>>,
}

fn d_leeway() -> S<i64> {
    spanned(5)
}

/// The edge defenses' keys and verifiers, ready to use.
#[derive(Clone)]
pub struct DefenseConf {
    /// Keys derived from the master key.
    pub keys: EdgeKeys,
    /// The login JWT's verifier.
    pub login: LoginVerifier,
    /// The captcha provider's token check, when configured.
    pub provider: Option<JwtCheck>,
    /// SHA-256 of everything above's inputs: two confs are equal when it is.
    digest: Vec<u8>,
}

impl PartialEq for DefenseConf {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for DefenseConf {}

impl std::fmt::Debug for DefenseConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefenseConf").field("provider", &self.provider.is_some()).finish_non_exhaustive()
    }
}

/// Validates the table; `base` anchors relative `file:` references.
pub(super) fn check(c: &Checker<'_>, d: &RawDefense, base: &Path) -> Result<DefenseConf, ConfError> {
    let secret = |v: &S<String>, field: &str| {
        protocol::secret::resolve(v.get_ref(), base).map_err(|e| c.err(v.span(), field, e.to_string()))
    };
    let alg = |v: &S<String>, field: &str| {
        LoginAlg::from_name(v.get_ref())
            .ok_or_else(|| c.err(v.span(), field, "must be RS256, ES256 or HS256"))
    };
    let text = |v: &S<String>, field: &str| {
        let t = v.get_ref().trim();
        if t.is_empty() {
            return Err(c.err(v.span(), field, "must not be empty"));
        }
        Ok(t.to_string())
    };
    let leeway = c.int(&d.leeway_secs, "defense.leeway_secs", 0, 300)? as u64;
    let master = secret(&d.master_key, "defense.master_key")?;
    let keys = EdgeKeys::derive(&master).map_err(|e| c.err(d.master_key.span(), "defense.master_key", e))?;
    let login_alg = alg(&d.login_alg, "defense.login_alg")?;
    let (issuer, audience) =
        (text(&d.login_issuer, "defense.login_issuer")?, text(&d.login_audience, "defense.login_audience")?);
    let (login, login_key) = match (&d.login_key, &d.login_keys) {
        (Some(k), None) => {
            let key = secret(k, "defense.login_key")?;
            let check = JwtCheck::new(login_alg, &key, &issuer, &audience, leeway)
                .map_err(|e| c.err(k.span(), "defense.login_key", e))?;
            (check, key)
        }
        (None, Some(k)) => {
            let set = secret(k, "defense.login_keys")?;
            let check = JwtCheck::from_jwks(login_alg, &set, &issuer, &audience, leeway)
                .map_err(|e| c.err(k.span(), "defense.login_keys", e))?;
            (check, set)
        }
        (Some(_), Some(k)) => {
            return Err(c.err(
                k.span(),
                "defense.login_keys",
                "set login_key (one key) or login_keys, not both",
            ))
        }
        (None, None) => {
            return Err(c.err(
                d.login_alg.span(),
                "defense.login_key",
                "the login JWT needs login_key (one key) or login_keys (a JWK set, keys by kid)",
            ))
        }
    };

    let mut inputs = vec![master, login_key, d.login_alg.get_ref().clone().into_bytes()];
    inputs.extend([issuer, audience, leeway.to_string()].map(String::into_bytes));
    let provider = match (
        &d.captcha_provider_alg,
        &d.captcha_provider_key,
        &d.captcha_provider_issuer,
        &d.captcha_provider_audience,
    ) {
        (None, None, None, None) => None,
        (Some(a), Some(k), Some(i), Some(u)) => {
            let (alg, key) =
                (alg(a, "defense.captcha_provider_alg")?, secret(k, "defense.captcha_provider_key")?);
            let (iss, aud) =
                (text(i, "defense.captcha_provider_issuer")?, text(u, "defense.captcha_provider_audience")?);
            let check = JwtCheck::new(alg, &key, &iss, &aud, leeway)
                .map_err(|e| c.err(k.span(), "defense.captcha_provider_key", e))?;
            inputs.extend([key, a.get_ref().clone().into_bytes(), iss.into_bytes(), aud.into_bytes()]);
            Some(check)
        }
        _ => {
            return Err(c.err(
                d.login_audience.span(),
                "defense.captcha_provider_alg",
                "captcha_provider_alg, _key, _issuer and _audience go together: set all four or none",
            ))
        }
    };
    let mut ctx = digest::Context::new(&digest::SHA256);
    for i in &inputs {
        ctx.update(&(i.len() as u64).to_be_bytes());
        ctx.update(i);
    }
    Ok(DefenseConf {
        keys,
        login: LoginVerifier::new(login),
        provider,
        digest: ctx.finish().as_ref().to_vec(),
    })
}
