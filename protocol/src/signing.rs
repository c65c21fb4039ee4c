//! Signatures: the gateway's on reservation records, and the payment provider's on callbacks.
//!
//! Every reservation record on the Kafka topic carries [`RECORD_SIGNATURE_HEADER`] =
//! `hex(HMAC-SHA256(gateway key, record value))`. The gateway, the order writer's sweeper and
//! `order-writer produce` sign; the order writer dead-letters a record without a valid one. The
//! key is shared by the two and nobody else.
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

use ring::{digest, hmac};

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

/// Header of an order carrying its unix time in seconds, as signed.
pub const TIMESTAMP_HEADER: &str = "x-timestamp";
/// Header of an order carrying its nonce: 8 to 64 of `A-Z a-z 0-9 _ -`, never used twice
/// with the same campaign token.
pub const NONCE_HEADER: &str = "x-nonce";
/// Header of an order carrying `hex(HMAC-SHA256(signing key, order_canonical(...)))`.
pub const SIGNATURE_HEADER: &str = "x-signature";
/// Header naming the client's device (the campaign token is bound to it).
pub const DEVICE_HEADER: &str = "x-device-id";

/// The string an order's `X-Signature` covers, one field a line:
///
/// ```text
/// METHOD "\n" PATH "\n" QUERY "\n" TIMESTAMP "\n" NONCE "\n" hex(SHA-256(body))
/// ```
///
/// with the method in upper case, the path as sent (the hidden path included), the query as
/// sent without its `?` (empty when none) and the timestamp as sent in `X-Timestamp`.
pub fn order_canonical(
    method: &str,
    path: &str,
    query: &str,
    timestamp: &str,
    nonce: &str,
    body: &[u8],
) -> String {
    let body_hash = hex::encode(digest::digest(&digest::SHA256, body).as_ref());
    format!("{}\n{path}\n{query}\n{timestamp}\n{nonce}\n{body_hash}", method.to_ascii_uppercase())
}

/// Why a signature was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// The signature is not hex or does not match.
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

    /// The [`PAYMENT_SIGNATURE_HEADER`] value of a callback: the hex HMAC of its
    /// [`payment_canonical`] string.
    pub fn sign_payment(&self, method: &str, path: &str, timestamp: i64, body: &[u8]) -> String {
        self.sign(payment_canonical(method, path, timestamp, body).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_signature_verifies_only_with_its_key_and_value() {
        let s = Signer::new(b"0123456789abcdef0123");
        let other = Signer::new(b"another key of some length");
        let sig = s.sign(b"record");
        assert!(s.verify(b"record", &sig).is_ok());
        assert_eq!(s.verify(b"recorD", &sig), Err(SignatureError::Mismatch), "a tampered value");
        assert_eq!(other.verify(b"record", &sig), Err(SignatureError::Mismatch), "another key");
        assert_eq!(s.verify(b"record", "zz"), Err(SignatureError::Mismatch), "not hex");
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
    fn order_canonical_has_every_part_on_its_line() {
        let c = order_canonical("post", "/seckill/c/abc/order", "qty=1", "1700000000", "n-12345678", b"");
        assert_eq!(
            c,
            "POST\n/seckill/c/abc/order\nqty=1\n1700000000\nn-12345678\n\
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
