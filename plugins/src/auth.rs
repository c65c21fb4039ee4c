//! Who the buyer is: the login JWT of the shop's auth service, verified at the edge with its
//! configured key. The algorithm is pinned by conf (RS256 or ES256 with a public key, or HS256
//! with a secret): a token whose header names another algorithm (`none`, or HS256 signed with
//! the public key as its secret) is refused before any key is used. `exp`, `nbf`, `iss` and
//! `aud` are checked with a small leeway. Used by the token endpoint only; an order carries the
//! campaign token ([`crate::token`]) instead.

use std::borrow::Cow;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use protocol::codes::Code;
use serde::Deserialize;

use crate::Denial;

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
}

/// How to verify a JWT signed by someone else (the shop's auth service, a captcha provider).
#[derive(Clone)]
pub struct JwtCheck {
    key: DecodingKey,
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
        let mut validation = Validation::new(alg.jwt());
        validation.leeway = leeway_secs;
        validation.validate_nbf = true;
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        Ok(Self { key, validation })
    }

    /// Verifies `token` and returns its claims; the error says why it was refused.
    pub fn decode<T: serde::de::DeserializeOwned>(&self, token: &str) -> Result<T, Cow<'static, str>> {
        jsonwebtoken::decode::<T>(token, &self.key, &self.validation).map(|t| t.claims).map_err(|e| {
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
