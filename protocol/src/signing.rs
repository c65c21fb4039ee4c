//! The gateway's signature on forwarded reservations.
//!
//! The gateway forwards a reservation to the order writer in two headers: [`RESERVATION_HEADER`]
//! carries the record (base64url, no padding) and [`SIGNATURE_HEADER`] carries
//! `hex(HMAC-SHA256(key, record bytes))`. The gateway strips client-sent copies of both, so the
//! order writer accepts only reservations the gateway made. The key is shared by the two and
//! nobody else.

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use ring::hmac;

/// Header carrying the base64url reservation record.
pub const RESERVATION_HEADER: &str = "x-seckill-reservation";
/// Header carrying the hex HMAC-SHA256 of the record bytes.
pub const SIGNATURE_HEADER: &str = "x-seckill-signature";

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
}
