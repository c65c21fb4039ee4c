//! The campaign token, the hidden order path and the per-token signing key, all from one
//! server master key, so any gateway process re-derives them without storage.
//!
//! - **Token**: a JWT (HS256 under a key derived from the master key) bound to user, campaign
//!   and device, with a random `jti` and a short life (the campaign's `token_ttl_secs`). It
//!   carries the login JWT's eligibility claims (`lvl`, `rgn`, `reg`) so the order's
//!   eligibility check needs no other lookup.
//! - **Hidden path**: `hex(HMAC-SHA256(path key, user "\n" campaign "\n" jti))`, truncated to
//!   [`PATH_LEN`] characters. The order goes to `/seckill/{campaign}/{path}/order`; a path that
//!   is not the token's is `BAD_PATH`.
//! - **Signing key**: `HMAC-SHA256(signing master, jti)`, given to the client once (hex) with
//!   the token; the client signs each order with it ([`crate::checks::signature`]).
//!
//! - **Result token**: given with a `QUEUED` answer (and again with a safe retry's), sent as
//!   [`RESULT_TOKEN_HEADER`] when polling the result: `{expires_at}.{hex(user)}.{hex(tag)}`,
//!   the tag `HMAC-SHA256(result key, campaign, user, request id, expires_at)`. It lives the
//!   campaign's pay window plus [`RESULT_TOKEN_GRACE_SECS`]. The gateway checks it with one HMAC
//!   and no lookup, so a result is told only to the buyer who holds it, and a poll without it
//!   costs the order writer nothing; the answer to a bad one is the same whether the request id
//!   exists or not.
//!
//! - **Queue ticket**: the waiting room's signed ticket ([`crate::room`]), under the
//!   room key.
//!
//! The sub-keys are `HMAC-SHA256(master, label)` for the labels `token`, `path`, `signing`,
//! `challenge`, `result` and `room`.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use protocol::codes::Code;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::denial::Denial;
use crate::issue::auth::Login;

/// Characters of the hidden path segment (hex; 64 bits).
pub const PATH_LEN: usize = 16;
/// The `aud` of every campaign token.
pub const TOKEN_AUDIENCE: &str = "seckill-order";

/// The header a result query carries its result token in.
pub const RESULT_TOKEN_HEADER: &str = "x-result-token";
/// How long a result token outlives its campaign's pay window (a day).
pub const RESULT_TOKEN_GRACE_SECS: i64 = 86_400;

/// What a campaign token says (its JWT claims).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignClaims {
    /// The buyer.
    pub sub: String,
    /// The campaign.
    pub cmp: String,
    /// The device it was issued to.
    pub dev: String,
    /// Its random id (hex): derives the path and the signing key, scopes the nonces.
    pub jti: String,
    /// Issued at (unix seconds).
    pub iat: i64,
    /// Expires at (unix seconds).
    pub exp: i64,
    /// Always [`TOKEN_AUDIENCE`].
    pub aud: String,
    /// The account's level, from the login JWT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lvl: Option<u32>,
    /// The account's region, from the login JWT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rgn: Option<String>,
    /// The account's creation time, from the login JWT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reg: Option<i64>,
}

impl CampaignClaims {
    /// The login facts the token carries, for eligibility.
    pub fn login(&self) -> Login {
        Login { user: self.sub.clone(), level: self.lvl, region: self.rgn.clone(), registered_at: self.reg }
    }
}

/// A token as handed to the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issued {
    /// The campaign token (JWT).
    pub token: String,
    /// The hidden path segment.
    pub path: String,
    /// The signing key, hex.
    pub signing_key: String,
    /// Expiry, unix seconds.
    pub expires_at: i64,
}

/// The keys derived from the server's master key.
#[derive(Clone)]
pub struct EdgeKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    path: hmac::Key,
    signing: hmac::Key,
    challenge: hmac::Key,
    result: hmac::Key,
    room: hmac::Key,
}

impl std::fmt::Debug for EdgeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EdgeKeys(..)")
    }
}

fn derive(master: &hmac::Key, label: &str) -> Vec<u8> {
    hmac::sign(master, label.as_bytes()).as_ref().to_vec()
}

/// Equal in time independent of where they differ.
pub fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl EdgeKeys {
    /// Derives every key from `master` (the server's `defense.master_key`).
    pub fn derive(master: &[u8]) -> Result<Self, String> {
        let master = hmac::Key::new(hmac::HMAC_SHA256, master);
        let token = derive(&master, "token");
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 1;
        validation.set_audience(&[TOKEN_AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        let bad = |e: jsonwebtoken::errors::Error| format!("cannot derive the token key: {e}");
        Ok(Self {
            encoding: EncodingKey::from_secret(&token).map_err(bad)?,
            decoding: DecodingKey::from_secret(&token).map_err(bad)?,
            validation,
            path: hmac::Key::new(hmac::HMAC_SHA256, &derive(&master, "path")),
            signing: hmac::Key::new(hmac::HMAC_SHA256, &derive(&master, "signing")),
            challenge: hmac::Key::new(hmac::HMAC_SHA256, &derive(&master, "challenge")),
            result: hmac::Key::new(hmac::HMAC_SHA256, &derive(&master, "result")),
            room: hmac::Key::new(hmac::HMAC_SHA256, &derive(&master, "room")),
        })
    }

    /// The key that authenticates captcha challenges ([`crate::issue::captcha`]).
    pub fn challenge_key(&self) -> &hmac::Key {
        &self.challenge
    }

    /// The key of the waiting room's tickets and of its pre-queue shuffle
    /// ([`crate::room`]).
    pub fn room_key(&self) -> &hmac::Key {
        &self.room
    }

    /// The hidden path segment of (user, campaign, jti).
    pub fn path(&self, user: &str, campaign: &str, jti: &str) -> String {
        let tag = hmac::sign(&self.path, format!("{user}\n{campaign}\n{jti}").as_bytes());
        hex::encode(&tag.as_ref()[..PATH_LEN / 2])
    }

    /// The signing key of the token `jti`.
    pub fn signing_key(&self, jti: &str) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, hmac::sign(&self.signing, jti.as_bytes()).as_ref())
    }

    /// What a result token's tag signs: every field, the user length-prefixed (a user id may
    /// hold any character).
    fn result_message(campaign: &str, user: &str, request_id: &str, expires_at: i64) -> String {
        format!("{campaign}\n{}\n{user}\n{request_id}\n{expires_at}", user.len())
    }

    /// The result token of `user`'s reservation `request_id` on `campaign`, valid until
    /// `expires_at` (unix seconds).
    pub fn result_token(&self, campaign: &str, user: &str, request_id: &str, expires_at: i64) -> String {
        let message = Self::result_message(campaign, user, request_id, expires_at);
        let tag = hmac::sign(&self.result, message.as_bytes());
        format!("{expires_at}.{}.{}", hex::encode(user), hex::encode(tag.as_ref()))
    }

    /// Checks a result query's token (the [`RESULT_TOKEN_HEADER`] value) for `request_id` on
    /// `campaign` at `now` (unix seconds); returns the buyer it was given to. Anything wrong
    /// (missing, malformed, forged, another user's, request's or campaign's, expired) is
    /// `BAD_RESULT_TOKEN`, decided without a lookup.
    pub fn check_result_token(
        &self,
        token: Option<&[u8]>,
        campaign: &str,
        request_id: &str,
        now: i64,
    ) -> Result<String, Denial> {
        let bad = || {
            Denial::new(
                Code::BadResultToken,
                "X-Result-Token must be the result token given with this request's QUEUED answer",
            )
        };
        let token = token.ok_or_else(|| {
            Denial::new(
                Code::BadResultToken,
                "X-Result-Token is required: the result token given with QUEUED",
            )
        })?;
        let token = std::str::from_utf8(token).map_err(|_| bad())?;
        let mut parts = token.splitn(3, '.');
        let (Some(exp), Some(user), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        if exp.is_empty() || exp.len() > 18 || !exp.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let expires_at: i64 = exp.parse().map_err(|_| bad())?;
        let user = hex::decode(user).ok().and_then(|u| String::from_utf8(u).ok()).ok_or_else(bad)?;
        let tag = hex::decode(tag).map_err(|_| bad())?;
        let message = Self::result_message(campaign, &user, request_id, expires_at);
        hmac::verify(&self.result, message.as_bytes(), &tag).map_err(|_| bad())?;
        if now > expires_at {
            return Err(Denial::new(Code::BadResultToken, "the result token has expired"));
        }
        Ok(user)
    }

    /// Issues a token for `login` on `campaign` from `device`, living `ttl_secs` from `now`.
    pub fn issue(
        &self,
        login: &Login,
        campaign: &str,
        device: &str,
        ttl_secs: u32,
        now: i64,
    ) -> Result<Issued, Denial> {
        let mut id = [0u8; 16];
        SystemRandom::new().fill(&mut id).map_err(|_| Denial::new(Code::Internal, "no randomness"))?;
        let jti = hex::encode(id);
        let claims = CampaignClaims {
            sub: login.user.clone(),
            cmp: campaign.to_string(),
            dev: device.to_string(),
            iat: now,
            exp: now + i64::from(ttl_secs),
            aud: TOKEN_AUDIENCE.to_string(),
            lvl: login.level,
            rgn: login.region.clone(),
            reg: login.registered_at,
            jti,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|_| Denial::new(Code::Internal, "cannot sign the token"))?;
        let key = hmac::sign(&self.signing, claims.jti.as_bytes());
        Ok(Issued {
            path: self.path(&claims.sub, campaign, &claims.jti),
            signing_key: hex::encode(key.as_ref()),
            expires_at: claims.exp,
            token,
        })
    }

    /// Verifies an order's campaign token (`Authorization: Bearer`) for `campaign` from
    /// `device`: `TOKEN_EXPIRED` past its life, otherwise `BAD_TOKEN` for anything wrong.
    pub fn verify(
        &self,
        authorization: Option<&[u8]>,
        campaign: &str,
        device: Option<&str>,
    ) -> Result<CampaignClaims, Denial> {
        let bad = |m: &'static str| Denial::new(Code::BadToken, m);
        let token = crate::issue::auth::bearer(authorization)
            .ok_or_else(|| bad("Authorization: Bearer <campaign token> is required"))?;
        let claims = jsonwebtoken::decode::<CampaignClaims>(token, &self.decoding, &self.validation)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => {
                    Denial::new(Code::TokenExpired, "the campaign token has expired: get a new one")
                }
                _ => bad("the campaign token is not valid"),
            })?
            .claims;
        if claims.cmp != campaign {
            return Err(bad("the campaign token is for another campaign"));
        }
        if device != Some(claims.dev.as_str()) {
            return Err(bad("the campaign token was issued to another device (x-device-id)"));
        }
        Ok(claims)
    }

    /// Whether `path` is the hidden path of `claims` (compared in constant time).
    pub fn check_path(&self, claims: &CampaignClaims, path: &str) -> Result<(), Denial> {
        let expected = self.path(&claims.sub, &claims.cmp, &claims.jti);
        if constant_eq(expected.as_bytes(), path.as_bytes()) {
            Ok(())
        } else {
            Err(Denial::new(Code::BadPath, "no such order path"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> EdgeKeys {
        EdgeKeys::derive(b"master-key-0123456789abcdef").unwrap()
    }

    fn login(user: &str) -> Login {
        Login { user: user.into(), level: Some(2), ..Login::default() }
    }

    fn bearer(t: &str) -> Vec<u8> {
        format!("Bearer {t}").into_bytes()
    }

    #[test]
    fn an_issued_token_verifies_for_its_campaign_device_and_path() {
        let now = chrono::Utc::now().timestamp();
        let issued = keys().issue(&login("u1"), "c1", "d1", 60, now).unwrap();
        let claims = keys().verify(Some(&bearer(&issued.token)), "c1", Some("d1")).unwrap();
        assert_eq!((claims.sub.as_str(), claims.lvl, claims.exp), ("u1", Some(2), now + 60));
        assert!(keys().check_path(&claims, &issued.path).is_ok());
        assert_eq!(issued.path.len(), PATH_LEN);
        assert_eq!(hex::encode(hmac::sign(&keys().signing_key(&claims.jti), b"x").as_ref()).len(), 64);
        // Another process with the same master key derives the same signing key.
        let key = hex::decode(&issued.signing_key).unwrap();
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), b"x");
        assert!(hmac::verify(&keys().signing_key(&claims.jti), b"x", tag.as_ref()).is_ok());
    }

    #[test]
    fn wrong_campaign_device_path_key_or_time_is_refused() {
        let now = chrono::Utc::now().timestamp();
        let k = keys();
        let t = k.issue(&login("u1"), "c1", "d1", 60, now).unwrap();
        let code = |r: Result<CampaignClaims, Denial>| r.unwrap_err().code;
        assert_eq!(code(k.verify(Some(&bearer(&t.token)), "c2", Some("d1"))), Code::BadToken);
        assert_eq!(code(k.verify(Some(&bearer(&t.token)), "c1", Some("d2"))), Code::BadToken);
        assert_eq!(code(k.verify(Some(&bearer(&t.token)), "c1", None)), Code::BadToken);
        assert_eq!(code(k.verify(None, "c1", Some("d1"))), Code::BadToken);
        let other = EdgeKeys::derive(b"another-master-key-0123456789").unwrap();
        assert_eq!(code(other.verify(Some(&bearer(&t.token)), "c1", Some("d1"))), Code::BadToken);
        let old = k.issue(&login("u1"), "c1", "d1", 10, now - 100).unwrap();
        assert_eq!(code(k.verify(Some(&bearer(&old.token)), "c1", Some("d1"))), Code::TokenExpired);

        let claims = k.verify(Some(&bearer(&t.token)), "c1", Some("d1")).unwrap();
        let u2 = k.issue(&login("u2"), "c1", "d1", 60, now).unwrap();
        assert_eq!(k.check_path(&claims, &u2.path).unwrap_err().code, Code::BadPath, "another user's path");
        assert_eq!(k.check_path(&claims, "order").unwrap_err().code, Code::BadPath);
    }

    #[test]
    fn a_result_token_answers_its_own_request_only_until_it_expires() {
        let (k, now) = (keys(), 1_700_000_000);
        let t = k.result_token("c1", "u1", "r1", now + 60);
        let check = |key: &EdgeKeys, token: &str, campaign: &str, request: &str, at: i64| {
            key.check_result_token(Some(token.as_bytes()), campaign, request, at)
        };
        assert_eq!(check(&k, &t, "c1", "r1", now).unwrap(), "u1");
        assert_eq!(check(&k, &t, "c1", "r1", now + 60).unwrap(), "u1", "valid up to its expiry");
        let code = |r: Result<String, Denial>| r.unwrap_err().code;
        assert_eq!(code(check(&k, &t, "c1", "r1", now + 61)), Code::BadResultToken, "expired");
        assert_eq!(code(check(&k, &t, "c1", "r2", now)), Code::BadResultToken, "another request");
        assert_eq!(code(check(&k, &t, "c2", "r1", now)), Code::BadResultToken, "another campaign");
        let other = EdgeKeys::derive(b"another-master-key-0123456789").unwrap();
        assert_eq!(code(check(&other, &t, "c1", "r1", now)), Code::BadResultToken, "another key");
        assert_eq!(code(k.check_result_token(None, "c1", "r1", now)), Code::BadResultToken, "none");

        // Every field is bound: another user, a later expiry or a changed tag does not verify.
        let (exp, rest) = t.split_once('.').unwrap();
        let (user, tag) = rest.split_once('.').unwrap();
        assert_eq!(user, hex::encode("u1"));
        let as_u2 = format!("{exp}.{}.{tag}", hex::encode("u2"));
        assert_eq!(code(check(&k, &as_u2, "c1", "r1", now)), Code::BadResultToken, "user swapped");
        let later = format!("{}.{user}.{tag}", now + 3600);
        assert_eq!(code(check(&k, &later, "c1", "r1", now + 61)), Code::BadResultToken, "expiry moved");
        let flipped =
            format!("{exp}.{user}.{}{}", &tag[..tag.len() - 1], if tag.ends_with('0') { '1' } else { '0' });
        assert_eq!(code(check(&k, &flipped, "c1", "r1", now)), Code::BadResultToken, "tag changed");
        for junk in ["", "x", "1.2", "+1.7531.00", "-5.7531.00", ".7531.00", "1.zz.00"] {
            assert_eq!(code(check(&k, junk, "c1", "r1", now)), Code::BadResultToken, "{junk:?}");
        }
        // Another user's token for their own request does not open this one.
        let u2 = k.result_token("c1", "u2", "r2", now + 60);
        assert_eq!(check(&k, &u2, "c1", "r2", now).unwrap(), "u2");
        assert_eq!(code(check(&k, &u2, "c1", "r1", now)), Code::BadResultToken);
    }

    #[test]
    fn constant_eq_compares_whole_slices() {
        assert!(constant_eq(b"abc", b"abc"));
        assert!(!constant_eq(b"abc", b"abd"));
        assert!(!constant_eq(b"abc", b"ab"));
    }
}
