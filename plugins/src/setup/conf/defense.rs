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
    let f = Fields { c, base };
    let leeway = c.int(&d.leeway_secs, "defense.leeway_secs", 0, 300)? as u64;
    let master = f.secret(&d.master_key, "defense.master_key")?;
    let keys = EdgeKeys::derive(&master).map_err(|e| c.err(d.master_key.span(), "defense.master_key", e))?;
    let login_alg = f.alg(&d.login_alg, "defense.login_alg")?;
    let (issuer, audience) = (
        f.text(&d.login_issuer, "defense.login_issuer")?,
        f.text(&d.login_audience, "defense.login_audience")?,
    );
    let (login, login_key) = login(&f, d, login_alg, (&issuer, &audience), leeway)?;

    let mut inputs = vec![master, login_key, d.login_alg.get_ref().clone().into_bytes()];
    inputs.extend([issuer, audience, leeway.to_string()].map(String::into_bytes));
    let provider = captcha_provider(&f, d, leeway, &mut inputs)?;
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

/// The checks the table's fields share, each naming the field it refuses.
struct Fields<'a> {
    c: &'a Checker<'a>,
    /// Anchors relative `file:` references.
    base: &'a Path,
}

impl Fields<'_> {
    /// A secret reference, resolved.
    fn secret(&self, v: &S<String>, field: &str) -> Result<Vec<u8>, ConfError> {
        protocol::secret::resolve(v.get_ref(), self.base)
            .map_err(|e| self.c.err(v.span(), field, e.to_string()))
    }

    /// A pinned JWT algorithm.
    fn alg(&self, v: &S<String>, field: &str) -> Result<LoginAlg, ConfError> {
        LoginAlg::from_name(v.get_ref())
            .ok_or_else(|| self.c.err(v.span(), field, "must be RS256, ES256 or HS256"))
    }

    /// A text that is not empty, trimmed.
    fn text(&self, v: &S<String>, field: &str) -> Result<String, ConfError> {
        let t = v.get_ref().trim();
        if t.is_empty() {
            return Err(self.c.err(v.span(), field, "must not be empty"));
        }
        Ok(t.to_string())
    }
}

/// The login JWT's check from `login_key` (one key) or `login_keys` (a JWK set), exactly one of
/// them, with the key's bytes (for the digest).
fn login(
    f: &Fields<'_>,
    d: &RawDefense,
    alg: LoginAlg,
    (issuer, audience): (&str, &str),
    leeway: u64,
) -> Result<(JwtCheck, Vec<u8>), ConfError> {
    let c = f.c;
    match (&d.login_key, &d.login_keys) {
        (Some(k), None) => {
            let key = f.secret(k, "defense.login_key")?;
            let check = JwtCheck::new(alg, &key, issuer, audience, leeway)
                .map_err(|e| c.err(k.span(), "defense.login_key", e))?;
            Ok((check, key))
        }
        (None, Some(k)) => {
            let set = f.secret(k, "defense.login_keys")?;
            let check = JwtCheck::from_jwks(alg, &set, issuer, audience, leeway)
                .map_err(|e| c.err(k.span(), "defense.login_keys", e))?;
            Ok((check, set))
        }
        (Some(_), Some(k)) => {
            Err(c.err(k.span(), "defense.login_keys", "set login_key (one key) or login_keys, not both"))
        }
        (None, None) => Err(c.err(
            d.login_alg.span(),
            "defense.login_key",
            "the login JWT needs login_key (one key) or login_keys (a JWK set, keys by kid)",
        )),
    }
}

/// The captcha provider's token check: its four fields together, or none of them (no check);
/// their values are added to the digest's `inputs`.
fn captcha_provider(
    f: &Fields<'_>,
    d: &RawDefense,
    leeway: u64,
    inputs: &mut Vec<Vec<u8>>,
) -> Result<Option<JwtCheck>, ConfError> {
    match (
        &d.captcha_provider_alg,
        &d.captcha_provider_key,
        &d.captcha_provider_issuer,
        &d.captcha_provider_audience,
    ) {
        (None, None, None, None) => Ok(None),
        (Some(a), Some(k), Some(i), Some(u)) => {
            let (alg, key) =
                (f.alg(a, "defense.captcha_provider_alg")?, f.secret(k, "defense.captcha_provider_key")?);
            let (iss, aud) = (
                f.text(i, "defense.captcha_provider_issuer")?,
                f.text(u, "defense.captcha_provider_audience")?,
            );
            let check = JwtCheck::new(alg, &key, &iss, &aud, leeway)
                .map_err(|e| f.c.err(k.span(), "defense.captcha_provider_key", e))?;
            inputs.extend([key, a.get_ref().clone().into_bytes(), iss.into_bytes(), aud.into_bytes()]);
            Ok(Some(check))
        }
        _ => Err(f.c.err(
            d.login_audience.span(),
            "defense.captcha_provider_alg",
            "captcha_provider_alg, _key, _issuer and _audience go together: set all four or none",
        )),
    }
}
