//! The gateway's signature on forwarded reservations.
//!
//! The gateway forwards a reservation to the order writer in two headers: [`RESERVATION_HEADER`]
//! carries the record (base64url, no padding) and [`SIGNATURE_HEADER`] carries
//! `hex(HMAC-SHA256(key, record bytes))`. The gateway strips client-sent copies of both, so the
//! order writer accepts only reservations the gateway made. The key is shared by the two and
//! nobody else.
//!
//! The payment provider's callbacks (`POST /orders/{id}/pay` on the order writer) carry
//! [`PAYMENT_TIMESTAMP_HEADER`] (unix seconds) and [`PAYMENT_SIGNATURE_HEADER`] =
//! `hex(HMAC-SHA256(payment key, canonical))`, where [`payment_canonical`] builds
//!
//! ```text
//! METHOD "\n" PATH "\n" TIMESTAMP "\n" hex(SHA-256(body))
//! ```
//!
//! so the signature covers the action (method and path with the order id), its time and its
//! body: a callback cannot be replayed onto another order or, past the order writer's window,
//! at all.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use ring::{digest, hmac};

/// Header carrying the base64url reservation record.
pub const RESERVATION_HEADER: &str = "x-seckill-reservation";
/// Header carrying the hex HMAC-SHA256 of the record bytes.
pub const SIGNATURE_HEADER: &str = "x-seckill-signature";

/// Kafka record header carrying the hex HMAC-SHA256 (gateway key) of a reservation record's
/// value. The gateway and the order writer's sweeper sign every record they produce; the order
/// writer dead-letters a record without a valid one.
pub const RECORD_SIGNATURE_HEADER: &str = "seckill-signature";

/// Header carrying the unix time (seconds) at which the payment provider signed a callback.
pub const PAYMENT_TIMESTAMP_HEADER: &str = "x-payment-timestamp";
/// Header carrying the hex HMAC-SHA256 of a callback's canonical string.
pub const PAYMENT_SIGNATURE_HEADER: &str = "x-payment-signature";

/// The string a payment callback's signature covers:
/// `METHOD\nPATH\nTIMESTAMP\nhex(SHA-256(body))`, with the method in upper case, the path as
/// sent (no query string) and the timestamp in decimal unix seconds.
pub fn payment_canonical(method: &str, path: &str, timestamp: i64, body: &[u8]) -> String {
    let body_hash = hex::encode(digest::digest(&digest::SHA256, body).as_ref());
    format!("{}\n{path}\n{timestamp}\n{body_hash}", method.to_ascii_uppercase())
}

/// Why a signed reservation was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// A header is absent.
    #[error("missing header {0}")]
    Missing(&'static str),
    /// The record header is not base64url.
    #[error("header {RESERVATION_HEADER} is not base64url")]
    BadEncoding,
    /// The signature header is not hex or does not match.
    #[error("signature does not match")]
    Mismatch,
}

/// An HMAC-SHA256 key shared by the gateway and the order writer.
#[derive(Clone)]
pub struct Signer {
    key: hmac::Key,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    /// A signer over `secret` (at least 16 bytes is advised; checked by configuration).
    pub fn new(secret: &[u8]) -> Self {
        Self { key: hmac::Key::new(hmac::HMAC_SHA256, secret) }
    }

    /// Hex HMAC of `data`.
    pub fn sign(&self, data: &[u8]) -> String {
        hex::encode(hmac::sign(&self.key, data).as_ref())
    }

    /// Checks a hex HMAC of `data` in constant time.
    pub fn verify(&self, data: &[u8], signature_hex: &str) -> Result<(), SignatureError> {
        let tag = hex::decode(signature_hex).map_err(|_| SignatureError::Mismatch)?;
        hmac::verify(&self.key, data, &tag).map_err(|_| SignatureError::Mismatch)
    }

    /// The two header values that carry `record`: (reservation, signature).
    pub fn seal(&self, record: &[u8]) -> (String, String) {
        (URL_SAFE_NO_PAD.encode(record), self.sign(record))
    }

    /// The [`PAYMENT_SIGNATURE_HEADER`] value of a callback: the hex HMAC of its
    /// [`payment_canonical`] string.
    pub fn sign_payment(&self, method: &str, path: &str, timestamp: i64, body: &[u8]) -> String {
        self.sign(payment_canonical(method, path, timestamp, body).as_bytes())
    }

    /// Verifies the two header values and returns the record bytes.
    pub fn open(
        &self,
        reservation: Option<&str>,
        signature: Option<&str>,
    ) -> Result<Vec<u8>, SignatureError> {
        let reservation = reservation.ok_or(SignatureError::Missing(RESERVATION_HEADER))?;
        let signature = signature.ok_or(SignatureError::Missing(SIGNATURE_HEADER))?;
        let record = URL_SAFE_NO_PAD.decode(reservation.trim()).map_err(|_| SignatureError::BadEncoding)?;
        self.verify(&record, signature.trim())?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_then_open_round_trips() {
        let s = Signer::new(b"0123456789abcdef0123");
        let (r, sig) = s.seal(br#"{"a":1}"#);
        assert_eq!(s.open(Some(&r), Some(&sig)).unwrap(), br#"{"a":1}"#);
    }

    #[test]
    fn forged_or_missing_is_refused() {
        let s = Signer::new(b"0123456789abcdef0123");
        let other = Signer::new(b"another key of some length");
        let (r, sig) = other.seal(b"record");
        assert_eq!(s.open(Some(&r), Some(&sig)), Err(SignatureError::Mismatch));
        assert_eq!(s.open(None, Some(&sig)), Err(SignatureError::Missing(RESERVATION_HEADER)));
        assert_eq!(s.open(Some(&r), None), Err(SignatureError::Missing(SIGNATURE_HEADER)));
        assert_eq!(s.open(Some("!!"), Some(&sig)), Err(SignatureError::BadEncoding));
        assert_eq!(s.open(Some(&r), Some("zz")), Err(SignatureError::Mismatch));
        // A tampered record with the original signature.
        let (_, good_sig) = s.seal(b"record");
        let (tampered, _) = s.seal(b"recorD");
        assert_eq!(s.open(Some(&tampered), Some(&good_sig)), Err(SignatureError::Mismatch));
    }

    #[test]
    fn payment_canonical_names_method_path_time_and_body_hash() {
        let c = payment_canonical("post", "/orders/7/pay", 1_700_000_000, b"");
        assert_eq!(
            c,
            "POST\n/orders/7/pay\n1700000000\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn payment_signature_changes_with_every_signed_part() {
        let s = Signer::new(b"0123456789abcdef0123");
        let base = s.sign_payment("POST", "/orders/7/pay", 100, b"{}");
        assert!(s.verify(payment_canonical("POST", "/orders/7/pay", 100, b"{}").as_bytes(), &base).is_ok());
        for other in [
            s.sign_payment("PUT", "/orders/7/pay", 100, b"{}"),
            s.sign_payment("POST", "/orders/8/pay", 100, b"{}"),
            s.sign_payment("POST", "/orders/7/pay", 101, b"{}"),
            s.sign_payment("POST", "/orders/7/pay", 100, b"{ }"),
        ] {
            assert_ne!(other, base);
        }
    }
}
