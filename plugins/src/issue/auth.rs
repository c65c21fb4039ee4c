//! Who the buyer is: the login JWT of the shop's auth service, verified at the edge with its
//! configured key. The algorithm is pinned by conf (RS256 or ES256 with a public key, or HS256
//! with a secret): a token whose header names another algorithm (`none`, or HS256 signed with
//! the public key as its secret) is refused before any key is used. `exp`, `nbf`, `iss` and
//! `aud` are checked with a small leeway. Used by the token endpoint only; an order carries the
//! campaign token (`crate::issue::token`) instead.
//!
//! The key is one key, or a JWK set (RFC 7517) whose keys are chosen by the token's `kid`: the
//! auth service can rotate its signing key without a window where the edge refuses either the
//! old key's tokens or the new one's (add the new key to the set, reload, sign with it, drop the
//! old key once its tokens have expired). Every key of a set is of the pinned algorithm.

use std::borrow::Cow;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use protocol::codes::Code;
use serde::Deserialize;

use crate::denial::Denial;

/// Longest accepted user id.
pub const MAX_USER_LEN: usize = 128;

/// The login JWT's algorithm, pinned by conf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginAlg {
    /// RSA PKCS#1 v1.5 with SHA-256; the key is a PEM public key.
    Rs256,
    /// ECDSA P-256 with SHA-256; the key is a PEM public key.
    Es256,
    /// HMAC-SHA256; the key is a shared secret.
    Hs256,
}

impl LoginAlg {
    /// From its JOSE name (`RS256`, `ES256`, `HS256`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "RS256" => Some(Self::Rs256),
            "ES256" => Some(Self::Es256),
            "HS256" => Some(Self::Hs256),
            _ => None,
        }
    }

    fn jwt(self) -> Algorithm {
        match self {
            Self::Rs256 => Algorithm::RS256,
            Self::Es256 => Algorithm::ES256,
            Self::Hs256 => Algorithm::HS256,
        }
    }

    fn jwk(self) -> KeyAlgorithm {
        match self {
            Self::Rs256 => KeyAlgorithm::RS256,
            Self::Es256 => KeyAlgorithm::ES256,
            Self::Hs256 => KeyAlgorithm::HS256,
        }
    }

    /// Whether `jwk`'s key type (and curve, and `alg` when it names one) is this algorithm's.
    fn fits(self, jwk: &Jwk) -> bool {
        let kind = match (&jwk.algorithm, self) {
            (AlgorithmParameters::RSA(_), Self::Rs256) | (AlgorithmParameters::OctetKey(_), Self::Hs256) => {
                true
            }
            (AlgorithmParameters::EllipticCurve(ec), Self::Es256) => ec.curve == EllipticCurve::P256,
            _ => false,
        };
        kind && jwk.common.key_algorithm.is_none_or(|a| a == self.jwk())
    }
}

/// The verification keys of a [`JwtCheck`].
#[derive(Clone)]
enum Keys {
    /// One key, whatever the token's `kid`.
    One(DecodingKey),
    /// A JWK set's keys by `kid` (at least one).
    ByKid(Vec<(String, DecodingKey)>),
}

impl Keys {
    /// The key for `token`: by its header's `kid` for a set (a set of one also takes a token
    /// without `kid`).
    fn for_token(&self, token: &str) -> Result<&DecodingKey, &'static str> {
        let set = match self {
            Keys::One(key) => return Ok(key),
            Keys::ByKid(set) => set,
        };
        let header = jsonwebtoken::decode_header(token).map_err(|_| "the token is malformed")?;
        match (header.kid, set.as_slice()) {
            (Some(kid), _) => set
                .iter()
                .find(|(k, _)| *k == kid)
                .map(|(_, key)| key)
                .ok_or("the token's key id (kid) is not one of the configured keys"),
            (None, [(_, only)]) => Ok(only),
            (None, _) => Err("the token names no key id (kid), and several keys are configured"),
        }
    }
}

/// Reads a JWK set (`{"keys": [...]}`) of `alg` keys, each with a distinct `kid`.
fn jwk_set(alg: LoginAlg, text: &[u8]) -> Result<Vec<(String, DecodingKey)>, String> {
    let set: JwkSet =
        serde_json::from_slice(text).map_err(|e| format!("not a JWK set ({{\"keys\": [...]}}): {e}"))?;
    if set.keys.is_empty() {
        return Err("the JWK set has no keys".into());
    }
    let mut keys: Vec<(String, DecodingKey)> = Vec::with_capacity(set.keys.len());
    for (i, jwk) in set.keys.iter().enumerate() {
        let kid = jwk.common.key_id.clone().filter(|k| !k.is_empty());
        let kid = kid.ok_or_else(|| format!("key {i} of the JWK set has no kid"))?;
        if keys.iter().any(|(k, _)| *k == kid) {
            return Err(format!("kid {kid:?} names two keys of the JWK set"));
        }
        if !alg.fits(jwk) {
            return Err(format!("key {kid:?} of the JWK set is not a {:?} key", alg.jwk()));
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("key {kid:?} of the JWK set: {e}"))?;
        if alg == LoginAlg::Hs256 && key.try_get_as_bytes().map_or(0, <[u8]>::len) < 16 {
            return Err(format!("key {kid:?} of the JWK set is shorter than 16 bytes"));
        }
        keys.push((kid, key));
    }
    Ok(keys)
}

/// How to verify a JWT signed by someone else (the shop's auth service, a captcha provider).
#[derive(Clone)]
pub struct JwtCheck {
    keys: Keys,
    validation: Validation,
}

impl std::fmt::Debug for JwtCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtCheck").field("algorithms", &self.validation.algorithms).finish_non_exhaustive()
    }
}

impl JwtCheck {
    /// A check of tokens signed with `alg` by `key` (PEM public key for RS256/ES256, the secret
    /// for HS256), issued by `issuer` for `audience`, with `leeway_secs` on the times.
    pub fn new(
        alg: LoginAlg,
        key: &[u8],
        issuer: &str,
        audience: &str,
        leeway_secs: u64,
    ) -> Result<Self, String> {
        let key = match alg {
            LoginAlg::Rs256 => {
                DecodingKey::from_rsa_pem(key).map_err(|e| format!("not an RSA public key (PEM): {e}"))?
            }
            LoginAlg::Es256 => {
                DecodingKey::from_ec_pem(key).map_err(|e| format!("not an EC public key (PEM): {e}"))?
            }
            LoginAlg::Hs256 => {
                DecodingKey::from_secret(key).map_err(|e| format!("not a usable secret: {e}"))?
            }
        };
        Ok(Self { keys: Keys::One(key), validation: validation(alg, issuer, audience, leeway_secs) })
    }

    /// A check of tokens signed with `alg` by one of the keys of the JWK set `jwks` (JSON), the
    /// token's `kid` naming which; the rest as [`JwtCheck::new`].
    pub fn from_jwks(
        alg: LoginAlg,
        jwks: &[u8],
        issuer: &str,
        audience: &str,
        leeway_secs: u64,
    ) -> Result<Self, String> {
        let keys = Keys::ByKid(jwk_set(alg, jwks)?);
        Ok(Self { keys, validation: validation(alg, issuer, audience, leeway_secs) })
    }

    /// Verifies `token` and returns its claims; the error says why it was refused.
    pub fn decode<T: serde::de::DeserializeOwned>(&self, token: &str) -> Result<T, Cow<'static, str>> {
        let key = self.keys.for_token(token).map_err(Cow::Borrowed)?;
        jsonwebtoken::decode::<T>(token, key, &self.validation).map(|t| t.claims).map_err(|e| {
            Cow::Borrowed(match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired",
                ErrorKind::ImmatureSignature => "the token is not valid yet",
                ErrorKind::InvalidIssuer => "the token is from another issuer",
                ErrorKind::InvalidAudience => "the token is for another audience",
                ErrorKind::InvalidAlgorithm
                | ErrorKind::InvalidAlgorithmName
                | ErrorKind::UnsupportedAlgorithm => "the token's algorithm is not the one configured",
                ErrorKind::InvalidSignature => "the token's signature does not verify",
                ErrorKind::MissingRequiredClaim(_) => "the token lacks a required claim",
                _ => "the token is malformed",
            })
        })
    }
}

/// The checks of a token of `alg` from `issuer` for `audience`, `leeway_secs` on its times.
fn validation(alg: LoginAlg, issuer: &str, audience: &str, leeway_secs: u64) -> Validation {
    let mut validation = Validation::new(alg.jwt());
    validation.leeway = leeway_secs;
    validation.validate_nbf = true;
    validation.set_issuer(&[issuer]);
    validation.set_audience(&[audience]);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    validation
}

/// The buyer, from a verified login JWT.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Login {
    /// The user id (`sub`).
    pub user: String,
    /// Account level (`level`), for eligibility rules.
    pub level: Option<u32>,
    /// Account region (`region`), for eligibility rules.
    pub region: Option<String>,
    /// Account creation time, unix seconds (`registered_at`), for eligibility rules.
    pub registered_at: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct LoginClaims {
    sub: String,
    #[serde(default)]
    level: Option<u32>,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    registered_at: Option<i64>,
}

/// Whether `b` may appear in a user or device id: `A-Z a-z 0-9 _ - . : @`.
pub fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'@')
}

/// Whether `id` is a user or device id: 1 to 128 of `A-Z a-z 0-9 _ - . : @`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_USER_LEN && id.bytes().all(id_byte)
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer(header: Option<&[u8]>) -> Option<&str> {
    let raw = std::str::from_utf8(header?).ok()?;
    let (scheme, token) = raw.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= 8192).then_some(token)
}

fn bad_login(message: impl Into<Cow<'static, str>>) -> Denial {
    Denial::new(Code::BadLogin, message)
}

/// Verifies the login JWT of the shop's auth service.
#[derive(Debug, Clone)]
pub struct LoginVerifier {
    check: JwtCheck,
}

impl LoginVerifier {
    /// A verifier over a configured check.
    pub fn new(check: JwtCheck) -> Self {
        Self { check }
    }

    /// The buyer of the request's `Authorization` header, or `BAD_LOGIN`.
    pub fn verify(&self, authorization: Option<&[u8]>) -> Result<Login, Denial> {
        let token = bearer(authorization)
            .ok_or_else(|| bad_login("Authorization: Bearer <login JWT> is required"))?;
        let claims: LoginClaims =
            self.check.decode(token).map_err(|why| bad_login(format!("login JWT: {why}")))?;
        if !valid_id(&claims.sub) {
            return Err(bad_login("login JWT: sub must be 1 to 128 of A-Z a-z 0-9 _ - . : @"));
        }
        Ok(Login {
            user: claims.sub,
            level: claims.level,
            region: claims.region,
            registered_at: claims.registered_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};

    const SECRET: &[u8] = b"login-secret-0123456789";

    fn mint(alg: Algorithm, key: &EncodingKey, claims: serde_json::Value) -> String {
        encode(&Header::new(alg), &claims, key).unwrap()
    }

    fn now() -> i64 {
        chrono::Utc::now().timestamp()
    }

    fn good(sub: &str) -> serde_json::Value {
        serde_json::json!({"sub": sub, "iss": "shop", "aud": "seckill", "exp": now() + 60, "level": 3})
    }

    fn verifier() -> LoginVerifier {
        LoginVerifier::new(JwtCheck::new(LoginAlg::Hs256, SECRET, "shop", "seckill", 2).unwrap())
    }

    fn header(token: &str) -> Vec<u8> {
        format!("Bearer {token}").into_bytes()
    }

    #[test]
    fn a_good_token_names_the_buyer_and_its_claims() {
        let t = mint(Algorithm::HS256, &EncodingKey::from_secret(SECRET).unwrap(), good("u-1"));
        let login = verifier().verify(Some(&header(&t))).unwrap();
        assert_eq!((login.user.as_str(), login.level), ("u-1", Some(3)));
    }

    #[test]
    fn every_bad_login_is_refused_with_bad_login() {
        let key = EncodingKey::from_secret(SECRET).unwrap();
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut c = good("u-1");
            f(&mut c);
            mint(Algorithm::HS256, &key, c)
        };
        let cases = [
            ("expired", with(&|c| c["exp"] = (now() - 600).into())),
            ("not yet", with(&|c| c["nbf"] = (now() + 600).into())),
            ("issuer", with(&|c| c["iss"] = "other".into())),
            ("audience", with(&|c| c["aud"] = "other".into())),
            ("bad sub", with(&|c| c["sub"] = "a b".into())),
            (
                "other key",
                mint(Algorithm::HS256, &EncodingKey::from_secret(b"another-secret-0123").unwrap(), good("u")),
            ),
            ("HS384", mint(Algorithm::HS384, &key, good("u"))),
            ("garbage", "a.b.c".into()),
        ];
        for (what, token) in cases {
            let d = verifier().verify(Some(&header(&token))).unwrap_err();
            assert_eq!(d.code, Code::BadLogin, "{what}: {}", d.message);
        }
        assert_eq!(verifier().verify(None).unwrap_err().code, Code::BadLogin);
        assert_eq!(verifier().verify(Some(b"Basic abc")).unwrap_err().code, Code::BadLogin);
    }

    #[test]
    fn alg_none_is_refused() {
        // {"alg":"none","typ":"JWT"} . claims . (no signature)
        let claims = serde_json::to_vec(&good("u-1")).unwrap();
        let token = format!("{}.{}.", base64url(br#"{"alg":"none","typ":"JWT"}"#), base64url(&claims));
        let d = verifier().verify(Some(&header(&token))).unwrap_err();
        assert_eq!(d.code, Code::BadLogin, "{}", d.message);
    }

    /// Unpadded base64url, as JWTs use.
    fn base64url(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    /// A JWK set of HS256 secrets by kid.
    fn jwks(keys: &[(&str, &[u8])]) -> Vec<u8> {
        let keys: Vec<_> = keys
            .iter()
            .map(|(kid, k)| serde_json::json!({"kty": "oct", "kid": kid, "alg": "HS256", "k": base64url(k)}))
            .collect();
        serde_json::to_vec(&serde_json::json!({ "keys": keys })).unwrap()
    }

    fn mint_kid(kid: Option<&str>, secret: &[u8]) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = kid.map(str::to_string);
        encode(&header, &good("u-1"), &EncodingKey::from_secret(secret).unwrap()).unwrap()
    }

    fn set_verifier(keys: &[(&str, &[u8])]) -> LoginVerifier {
        LoginVerifier::new(JwtCheck::from_jwks(LoginAlg::Hs256, &jwks(keys), "shop", "seckill", 2).unwrap())
    }

    const OLD: &[u8] = b"old-login-secret-0123";
    const NEW: &[u8] = b"new-login-secret-4567";

    #[test]
    fn a_jwk_set_takes_each_tokens_key_by_kid_through_a_rotation() {
        let both = set_verifier(&[("2026-11", OLD), ("2026-12", NEW)]);
        for (kid, secret) in [("2026-11", OLD), ("2026-12", NEW)] {
            let login = both.verify(Some(&header(&mint_kid(Some(kid), secret)))).unwrap();
            assert_eq!(login.user, "u-1", "{kid}");
        }
        let refusals = [
            (mint_kid(Some("2026-10"), OLD), "not one of the configured keys"),
            (mint_kid(Some("2026-11"), NEW), "signature does not verify"),
            (mint_kid(None, NEW), "names no key id"),
        ];
        for (token, why) in refusals {
            let d = both.verify(Some(&header(&token))).unwrap_err();
            assert_eq!(d.code, Code::BadLogin);
            assert!(d.message.contains(why), "{why}: {}", d.message);
        }
        // The old key dropped: its tokens are refused, the new ones (with or without kid) pass.
        let new_only = set_verifier(&[("2026-12", NEW)]);
        assert!(new_only.verify(Some(&header(&mint_kid(Some("2026-11"), OLD)))).is_err());
        assert!(new_only.verify(Some(&header(&mint_kid(None, NEW)))).is_ok());
    }

    #[test]
    fn a_bad_jwk_set_is_refused_with_its_reason() {
        let check = |text: &str| JwtCheck::from_jwks(LoginAlg::Hs256, text.as_bytes(), "shop", "seckill", 2);
        let oct = |kid: &str, alg: &str| {
            format!(r#"{{"kty":"oct","kid":"{kid}","alg":"{alg}","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQ"}}"#)
        };
        let rsa = r#"{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}"#;
        let cases = [
            ("not json".to_string(), "not a JWK set"),
            (r#"{"keys": []}"#.to_string(), "has no keys"),
            (r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#.to_string(), "has no kid"),
            (format!(r#"{{"keys":[{},{}]}}"#, oct("a", "HS256"), oct("a", "HS256")), "names two keys"),
            (format!(r#"{{"keys":[{}]}}"#, oct("a", "HS384")), "is not a HS256 key"),
            (format!(r#"{{"keys":[{rsa}]}}"#), "is not a HS256 key"),
            (r#"{"keys":[{"kty":"oct","kid":"s","k":"c2hvcnQ"}]}"#.to_string(), "shorter than 16 bytes"),
        ];
        for (text, why) in cases {
            let e = check(&text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let rs = JwtCheck::from_jwks(
            LoginAlg::Rs256,
            format!(r#"{{"keys":[{}]}}"#, oct("a", "HS256")).as_bytes(),
            "s",
            "a",
            0,
        );
        assert!(rs.unwrap_err().contains("is not a RS256 key"));
    }

    /// `docs/integrating.md`'s JWK set example is a set the gateway takes (RS256, two kids).
    #[test]
    fn the_docs_jwk_set_example_loads() {
        let doc = include_str!("../../../docs/integrating.md");
        let marker = "<!-- login-keys example: read by plugins' tests -->";
        let after = &doc[doc.find(marker).expect("the example's marker") + marker.len()..];
        let block = after.split("```json").nth(1).and_then(|b| b.split("```").next()).expect("a json block");
        let check = JwtCheck::from_jwks(LoginAlg::Rs256, block.as_bytes(), "shop", "seckill", 5).unwrap();
        match check.keys {
            Keys::ByKid(keys) => {
                let kids: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
                assert_eq!(kids, ["2026-11", "2026-12"]);
            }
            Keys::One(_) => panic!("a set"),
        }
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer(Some(b"Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some(b"bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some(b"Bearer ")), None);
        assert_eq!(bearer(Some(b"Token abc")), None);
        assert_eq!(bearer(Some(&[0xff, 0x20, 0x41])), None);
        assert_eq!(bearer(None), None);
    }
}
