//! The order's request signature, its timestamp and its nonce.
//!
//! Every order carries `X-Timestamp` (unix seconds), `X-Nonce` (8 to 64 of
//! `A-Z a-z 0-9 _ -`) and `X-Signature` = hex HMAC-SHA256 under the token's signing key
//! ([`crate::issue::token::EdgeKeys::signing_key`]) of [`protocol::signing::order_canonical`] (method,
//! path, query, timestamp, nonce, SHA-256 of the body). A timestamp further than the campaign's
//! window from server time is `STALE_TIMESTAMP`; a signature that does not verify (checked in
//! constant time by `ring::hmac::verify`) is `BAD_SIGNATURE`. The nonce's uniqueness is checked
//! in the reservation's own Redis call (`reserve.lua`).

use protocol::codes::Code;
use protocol::signing::order_canonical;
use ring::hmac;

use crate::denial::Denial;

/// The signed headers of an order, well-formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signed<'a> {
    /// `X-Timestamp`, as sent.
    pub timestamp: &'a str,
    /// Its value.
    pub unix_secs: i64,
    /// `X-Nonce`.
    pub nonce: &'a str,
    /// `X-Signature`, hex.
    pub signature: &'a str,
}

fn text(v: Option<&[u8]>) -> Option<&str> {
    v.and_then(|b| std::str::from_utf8(b).ok())
}

/// Reads the three headers: a missing or malformed timestamp is `STALE_TIMESTAMP`, a missing
/// or malformed nonce `BAD_REQUEST`, a missing or malformed signature `BAD_SIGNATURE`.
pub fn parse<'a>(
    timestamp: Option<&'a [u8]>,
    nonce: Option<&'a [u8]>,
    signature: Option<&'a [u8]>,
) -> Result<Signed<'a>, Denial> {
    let ts = text(timestamp)
        .filter(|t| !t.is_empty() && t.len() <= 12 && t.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| Denial::new(Code::StaleTimestamp, "X-Timestamp (unix seconds) is required"))?;
    let nonce = text(nonce)
        .filter(|n| {
            (8..=64).contains(&n.len())
                && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
        .ok_or_else(|| Denial::new(Code::BadRequest, "X-Nonce must be 8 to 64 of A-Z a-z 0-9 _ -"))?;
    let signature = text(signature)
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| Denial::new(Code::BadSignature, "X-Signature (64 hex characters) is required"))?;
    let unix_secs =
        ts.parse().map_err(|_| Denial::new(Code::StaleTimestamp, "X-Timestamp is not a number"))?;
    Ok(Signed { timestamp: ts, unix_secs, nonce, signature })
}

/// `STALE_TIMESTAMP` when `signed` is more than `window_secs` from `now_secs`, either way.
pub fn check_timestamp(signed: &Signed<'_>, now_secs: i64, window_secs: u32) -> Result<(), Denial> {
    if (signed.unix_secs - now_secs).abs() > i64::from(window_secs) {
        return Err(Denial::new(
            Code::StaleTimestamp,
            format!("X-Timestamp is more than {window_secs} s from server time ({now_secs})"),
        ));
    }
    Ok(())
}

/// The request as signed.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Method.
    pub method: &'a str,
    /// Path, as sent.
    pub path: &'a str,
    /// Query without `?`, empty when none.
    pub query: &'a str,
    /// Body.
    pub body: &'a [u8],
}

/// Verifies `signed.signature` over `request` with `key`, in constant time.
pub fn verify(key: &hmac::Key, request: &Request<'_>, signed: &Signed<'_>) -> Result<(), Denial> {
    let canonical = order_canonical(
        request.method,
        request.path,
        request.query,
        signed.timestamp,
        signed.nonce,
        request.body,
    );
    let tag = hex::decode(signed.signature)
        .map_err(|_| Denial::new(Code::BadSignature, "X-Signature is not hex"))?;
    hmac::verify(key, canonical.as_bytes(), &tag)
        .map_err(|_| Denial::new(Code::BadSignature, "X-Signature does not match the request"))
}

/// What a client sends as `X-Signature` for `request` (tests, the load tool).
pub fn sign(key: &hmac::Key, request: &Request<'_>, timestamp: &str, nonce: &str) -> String {
    let canonical =
        order_canonical(request.method, request.path, request.query, timestamp, nonce, request.body);
    hex::encode(hmac::sign(key, canonical.as_bytes()).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, b"signing-key-0123456789")
    }

    const REQ: Request<'static> =
        Request { method: "POST", path: "/seckill/c/p/order", query: "qty=1", body: b"" };

    #[test]
    fn a_signed_request_verifies_and_any_change_does_not() {
        let sig = sign(&key(), &REQ, "1700000000", "nonce-0001");
        let signed = parse(Some(b"1700000000"), Some(b"nonce-0001"), Some(sig.as_bytes())).unwrap();
        assert!(verify(&key(), &REQ, &signed).is_ok());
        for changed in [
            Request { query: "qty=2", ..REQ },
            Request { path: "/seckill/c/q/order", ..REQ },
            Request { body: b"{}", ..REQ },
            Request { method: "PUT", ..REQ },
        ] {
            assert_eq!(verify(&key(), &changed, &signed).unwrap_err().code, Code::BadSignature);
        }
        let other_nonce = Signed { nonce: "nonce-0002", ..signed };
        assert_eq!(verify(&key(), &REQ, &other_nonce).unwrap_err().code, Code::BadSignature);
        let other_key = hmac::Key::new(hmac::HMAC_SHA256, b"another-key-0123456789");
        assert_eq!(verify(&other_key, &REQ, &signed).unwrap_err().code, Code::BadSignature);
    }

    #[test]
    fn headers_and_timestamps() {
        let sig = "a".repeat(64);
        let ok = |t: &'static [u8], n: &'static [u8]| {
            parse(Some(t), Some(n), Some(b"0000000000000000000000000000000000000000000000000000000000000000"))
        };
        assert!(ok(b"100", b"12345678").is_ok());
        assert_eq!(ok(b"-1", b"12345678").unwrap_err().code, Code::StaleTimestamp);
        assert_eq!(
            parse(None, Some(b"12345678"), Some(sig.as_bytes())).unwrap_err().code,
            Code::StaleTimestamp
        );
        assert_eq!(ok(b"100", b"short").unwrap_err().code, Code::BadRequest);
        assert_eq!(ok(b"100", b"has space!").unwrap_err().code, Code::BadRequest);
        assert_eq!(parse(Some(b"100"), Some(b"12345678"), None).unwrap_err().code, Code::BadSignature);
        assert_eq!(parse(Some(b"100"), Some(b"12345678"), Some(b"zz")).unwrap_err().code, Code::BadSignature);

        let s = ok(b"1000", b"12345678").unwrap();
        assert!(check_timestamp(&s, 1030, 30).is_ok());
        assert!(check_timestamp(&s, 970, 30).is_ok());
        assert_eq!(check_timestamp(&s, 1031, 30).unwrap_err().code, Code::StaleTimestamp);
        assert_eq!(check_timestamp(&s, 969, 30).unwrap_err().code, Code::StaleTimestamp);
    }
}
