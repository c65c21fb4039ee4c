//! The payment callback's authentication: its signature over the action and its time.
//!
//! The provider sends [`PAYMENT_TIMESTAMP_HEADER`] (unix seconds) and
//! [`PAYMENT_SIGNATURE_HEADER`] = `hex(HMAC-SHA256(payment key, canonical))` with
//! `canonical = METHOD\nPATH\nTIMESTAMP\nhex(SHA-256(body))` (built by
//! [`protocol::signing::payment_canonical`], which tools that sign use too). The path carries the
//! order id, so a callback replayed onto another order does not verify; the timestamp is checked
//! after the signature (so it is the provider's) against a window of ± `max_skew_secs` around
//! this server's clock, so an old callback cannot be replayed later. The HMAC is compared in
//! constant time ([`Signer::verify`]). The body (`{"payment_ref": ...}`) carries no amount, so
//! none is signed: the callback says the order was paid, the provider charged the order's
//! amount (README, "What the signature covers").

use protocol::codes::Code;
use protocol::signing::{payment_canonical, Signer, PAYMENT_SIGNATURE_HEADER, PAYMENT_TIMESTAMP_HEADER};

/// Why a callback's authentication failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A header is absent or not text.
    #[error("missing header {0}")]
    Missing(&'static str),
    /// The timestamp header is not an integer.
    #[error("header {PAYMENT_TIMESTAMP_HEADER} must be unix seconds")]
    BadTimestamp,
    /// The signature is not hex or does not match the canonical string.
    #[error("payment signature does not match method, path, timestamp and body")]
    Mismatch,
    /// Signed, but outside the window.
    #[error("payment timestamp {timestamp} is {off} s away from server time (window ± {max} s)")]
    Stale {
        /// The callback's timestamp.
        timestamp: i64,
        /// Seconds between it and now.
        off: u64,
        /// The window.
        max: u64,
    },
}

impl AuthError {
    /// The answer code: [`Code::StaleTimestamp`] for a signed but stale callback,
    /// [`Code::BadSignature`] for everything else (both 401).
    pub fn code(&self) -> Code {
        match self {
            AuthError::Stale { .. } => Code::StaleTimestamp,
            _ => Code::BadSignature,
        }
    }
}

/// Whether `timestamp` is within ± `max_skew_secs` of `now` (unix seconds both).
pub fn within_window(timestamp: i64, now: i64, max_skew_secs: u64) -> bool {
    timestamp.abs_diff(now) <= max_skew_secs
}

/// One callback as received: the two header values (if present), method, path and body.
#[derive(Debug, Clone, Copy)]
pub struct Callback<'a> {
    /// The [`PAYMENT_TIMESTAMP_HEADER`] value.
    pub timestamp: Option<&'a str>,
    /// The [`PAYMENT_SIGNATURE_HEADER`] value.
    pub signature: Option<&'a str>,
    /// HTTP method.
    pub method: &'a str,
    /// Request path, without the query string.
    pub path: &'a str,
    /// Raw body.
    pub body: &'a [u8],
}

/// Checks `cb`: headers present, signature over its canonical string, then the time window.
pub fn check(signer: &Signer, cb: &Callback<'_>, now: i64, max_skew_secs: u64) -> Result<(), AuthError> {
    let ts = cb.timestamp.ok_or(AuthError::Missing(PAYMENT_TIMESTAMP_HEADER))?;
    let sig = cb.signature.ok_or(AuthError::Missing(PAYMENT_SIGNATURE_HEADER))?;
    let ts = ts.trim();
    if ts.is_empty() || ts.len() > 19 || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthError::BadTimestamp);
    }
    let timestamp: i64 = ts.parse().map_err(|_| AuthError::BadTimestamp)?;
    let canonical = payment_canonical(cb.method, cb.path, timestamp, cb.body);
    signer.verify(canonical.as_bytes(), sig.trim()).map_err(|_| AuthError::Mismatch)?;
    if !within_window(timestamp, now, max_skew_secs) {
        return Err(AuthError::Stale { timestamp, off: timestamp.abs_diff(now), max: max_skew_secs });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000;

    fn signed<'a>(ts: &'a str, sig: &'a str, path: &'a str, body: &'a [u8]) -> Callback<'a> {
        Callback { timestamp: Some(ts), signature: Some(sig), method: "POST", path, body }
    }

    #[test]
    fn the_window_is_inclusive_both_ways() {
        assert!(within_window(NOW - 300, NOW, 300));
        assert!(within_window(NOW + 300, NOW, 300));
        assert!(!within_window(NOW - 301, NOW, 300));
        assert!(!within_window(NOW + 301, NOW, 300));
        assert!(within_window(i64::MAX, i64::MAX, 0));
        assert!(!within_window(0, i64::MAX, 300));
    }

    #[test]
    fn a_good_callback_passes_and_each_changed_part_fails() {
        let s = Signer::new(b"0123456789abcdef0123");
        let body = br#"{"payment_ref":"r1"}"#;
        let sig = s.sign_payment("POST", "/orders/7/pay", NOW, body);
        let ts = NOW.to_string();
        assert_eq!(check(&s, &signed(&ts, &sig, "/orders/7/pay", body), NOW, 300), Ok(()));
        // Replayed onto another order.
        let r = check(&s, &signed(&ts, &sig, "/orders/8/pay", body), NOW, 300);
        assert_eq!(r, Err(AuthError::Mismatch));
        // Tampered body.
        let r = check(&s, &signed(&ts, &sig, "/orders/7/pay", br#"{"payment_ref":"r2"}"#), NOW, 300);
        assert_eq!(r, Err(AuthError::Mismatch));
        // Another timestamp with the same signature.
        let later = (NOW + 1).to_string();
        let r = check(&s, &signed(&later, &sig, "/orders/7/pay", body), NOW, 300);
        assert_eq!(r, Err(AuthError::Mismatch));
        // Another method.
        let cb = Callback { method: "PUT", ..signed(&ts, &sig, "/orders/7/pay", body) };
        assert_eq!(check(&s, &cb, NOW, 300), Err(AuthError::Mismatch));
    }

    #[test]
    fn signed_but_stale_or_ahead_is_its_own_refusal() {
        let s = Signer::new(b"0123456789abcdef0123");
        for ts in [NOW - 301, NOW + 301] {
            let sig = s.sign_payment("POST", "/orders/7/pay", ts, b"{}");
            let t = ts.to_string();
            let r = check(&s, &signed(&t, &sig, "/orders/7/pay", b"{}"), NOW, 300);
            assert_eq!(r, Err(AuthError::Stale { timestamp: ts, off: 301, max: 300 }));
            assert_eq!(r.unwrap_err().code(), Code::StaleTimestamp);
        }
    }

    #[test]
    fn missing_or_malformed_headers_are_bad_signatures() {
        let s = Signer::new(b"0123456789abcdef0123");
        let sig = s.sign_payment("POST", "/orders/7/pay", NOW, b"{}");
        let cb = |ts: Option<&'static str>, sig: Option<&str>| -> Result<(), AuthError> {
            let c = Callback {
                timestamp: ts,
                signature: sig,
                method: "POST",
                path: "/orders/7/pay",
                body: b"{}",
            };
            check(&s, &c, NOW, 300)
        };
        assert_eq!(cb(None, Some(&sig)), Err(AuthError::Missing(PAYMENT_TIMESTAMP_HEADER)));
        assert_eq!(cb(Some("1700000000"), None), Err(AuthError::Missing(PAYMENT_SIGNATURE_HEADER)));
        for bad in ["", "soon", "-5", "+1700000000", "1.5", "99999999999999999999"] {
            assert_eq!(cb(Some(bad), Some(&sig)), Err(AuthError::BadTimestamp), "{bad:?}");
        }
        assert_eq!(cb(Some("1700000000"), Some("zz")), Err(AuthError::Mismatch));
        for r in [AuthError::BadTimestamp, AuthError::Mismatch, AuthError::Missing(PAYMENT_SIGNATURE_HEADER)]
        {
            assert_eq!(r.code(), Code::BadSignature);
        }
    }
}
