//! The reservation record.
//!
//! The reservation script (`lua/reserve.lua`) builds this record from the campaign's published
//! metadata (server-side price, stock version) and stores it in the campaign's outbox in the same
//! atomic step as the decrement. The gateway produces exactly those bytes to the reservations
//! topic (key = user, partition = [`partition_for`], signed: see [`crate::signing`]); the order
//! writer's sweeper re-produces records left in the outbox the same way. [`SignedRecord`] is the
//! one builder of that Kafka record, used by the gateway's queue and the order writer's producer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::signing::{Signer, RECORD_SIGNATURE_HEADER};

/// One successful reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Globally unique request id, chosen by the gateway (UUID v7).
    pub request_id: String,
    /// Campaign id.
    pub campaign: String,
    /// Buyer.
    pub user: String,
    /// Item.
    pub sku: String,
    /// Quantity reserved, at least 1 and at most the campaign's per-user limit.
    pub qty: i64,
    /// Unit price in cents, from the published campaign, never from the client.
    pub price_cents: i64,
    /// Version of the price snapshot.
    pub price_version: i64,
    /// Version of the published stock this reservation was taken from.
    pub stock_version: i64,
    /// Redis server time of the reservation, in milliseconds since the Unix epoch.
    pub reserved_at_ms: i64,
    /// How many hot-stock buckets the campaign has (absent: 1). The reservation lives in the
    /// buyer's home bucket, [`Reservation::bucket`].
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub buckets: u32,
    /// The client's address after trusted proxies, for the audit ([`Origin`]; absent in
    /// records written before it and in the order writer's own test reservations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<String>,
    /// The device id the buyer's campaign token is bound to ([`Origin`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The account's creation time, unix seconds ([`Origin`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_at: Option<i64>,
}

/// What the gateway knew of a winning order's sender, carried in its record for the audit
/// (`order-writer campaign audit`): every field optional, absent when unknown. The gateway
/// passes it to `reserve.lua` already encoded ([`Origin::fragment`]), which splices it into the
/// record's text as is (one concatenation per order, no encoding in the script).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The client's address after trusted proxies (IPv4 or IPv6, as text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<String>,
    /// The device id the campaign token is bound to (`x-device-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The account's creation time, unix seconds (the login JWT's `registered_at` claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_at: Option<i64>,
}

impl Origin {
    /// The record's text for these fields: `,"client_ip":"...","device":"...","registered_at":N`
    /// (each only when known; empty when none is), JSON-escaped, ready to follow the record's
    /// `qty`.
    pub fn fragment(&self) -> String {
        let mut out = String::new();
        let mut field = |name: &str, value: serde_json::Value| {
            out.push_str(&format!(",\"{name}\":{value}"));
        };
        if let Some(ip) = &self.client_ip {
            field("client_ip", ip.as_str().into());
        }
        if let Some(device) = &self.device {
            field("device", device.as_str().into());
        }
        if let Some(at) = self.registered_at {
            field("registered_at", at.into());
        }
        out
    }
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Reservation {
    /// Parses a record as stored in the outbox or carried in a Kafka message.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// Checks what serde cannot: ids usable as keys, and every number within the bounds a
    /// campaign file may give it ([`crate::campaign`]: a quantity up to the highest per-user limit,
    /// a price up to the highest price), a bucket count publish may write, versions and a time
    /// that are not negative.
    pub fn check(&self) -> Result<(), String> {
        use crate::campaign::{MAX_PER_USER_LIMIT, MAX_PRICE_CENTS};
        use crate::keys::{valid_campaign_id, MAX_BUCKETS};
        if self.request_id.is_empty() || self.request_id.len() > 128 {
            return Err("request_id must be 1 to 128 bytes".into());
        }
        if !valid_campaign_id(&self.campaign) {
            return Err(format!("invalid campaign id {:?}", self.campaign));
        }
        if self.user.is_empty() {
            return Err("empty user".into());
        }
        for (field, n, min, max) in [
            ("qty", self.qty, 1, MAX_PER_USER_LIMIT),
            ("price_cents", self.price_cents, 0, MAX_PRICE_CENTS),
            ("price_version", self.price_version, 0, i64::MAX),
            ("stock_version", self.stock_version, 0, i64::MAX),
            ("reserved_at_ms", self.reserved_at_ms, 0, i64::MAX),
            ("buckets", i64::from(self.buckets), 1, i64::from(MAX_BUCKETS)),
        ] {
            if !(min..=max).contains(&n) {
                return Err(format!("{field} {n} is not between {min} and {max}"));
            }
        }
        Ok(())
    }

    /// Forgets the origin fields the audit could not use: an address that does not parse, a
    /// device id outside 1 to 128 bytes (the gateway's bound on `x-device-id`), a negative
    /// creation time. Never a reason to refuse the reservation ([`Reservation::check`] ignores
    /// them).
    pub fn drop_bad_origin(&mut self) {
        if self.client_ip.as_ref().is_some_and(|ip| ip.parse::<std::net::IpAddr>().is_err()) {
            self.client_ip = None;
        }
        if self.device.as_ref().is_some_and(|d| d.is_empty() || d.len() > 128) {
            self.device = None;
        }
        if self.registered_at.is_some_and(|at| at < 0) {
            self.registered_at = None;
        }
    }

    /// Where the order came from, as far as its record says.
    pub fn origin(&self) -> Origin {
        Origin {
            client_ip: self.client_ip.clone(),
            device: self.device.clone(),
            registered_at: self.registered_at,
        }
    }

    /// The bucket whose keys hold this reservation: the buyer's home bucket.
    pub fn bucket(&self) -> crate::keys::Bucket {
        crate::keys::Bucket::of_user(&self.campaign, &self.user, self.buckets)
    }
}

/// The partition of a user's records: FNV-1a of the user id modulo the partition count. Stable
/// across processes and versions, so the gateway and the sweeper agree and one user's records stay
/// in one partition, in order.
pub fn partition_for(user: &str, partitions: i32) -> i32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in user.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % partitions.max(1) as u64) as i32
}

/// A reservation record on its way to the topic: key = the user, value = the record bytes as
/// `reserve.lua` wrote them, header [`RECORD_SIGNATURE_HEADER`] = hex HMAC-SHA256 of the value
/// under the gateway key, partition = [`partition_for`] of the user. The gateway's queue and
/// the order writer's producer (sweeper, `order-writer produce`) both build their records here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRecord {
    /// The buyer: the record's key, and what its partition is computed from.
    pub user: String,
    /// The reservation JSON, produced as is.
    pub value: Vec<u8>,
    /// Hex HMAC-SHA256 of `value` under the gateway key.
    pub signature: String,
}

impl SignedRecord {
    /// Signs `value` with the gateway key `signer`.
    pub fn sign(signer: &Signer, user: impl Into<String>, value: Vec<u8>) -> Self {
        let signature = signer.sign(&value);
        Self { user: user.into(), value, signature }
    }

    /// The partition of this record on a topic of `partitions` partitions.
    pub fn partition(&self, partitions: i32) -> i32 {
        partition_for(&self.user, partitions)
    }

    /// The Kafka record, stamped with `timestamp`.
    pub fn into_kafka(self, timestamp: chrono::DateTime<chrono::Utc>) -> rskafka::record::Record {
        rskafka::record::Record {
            key: Some(self.user.into_bytes()),
            value: Some(self.value),
            headers: BTreeMap::from([(RECORD_SIGNATURE_HEADER.to_string(), self.signature.into_bytes())]),
            timestamp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_record_is_keyed_by_its_user_partitioned_by_it_and_signed_over_its_value() {
        let signer = Signer::new(b"record-test-key-0123");
        let value = br#"{"request_id":"r1"}"#.to_vec();
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        let signed = SignedRecord::sign(&signer, "u7", value.clone());
        assert_eq!(signed.partition(4), partition_for("u7", 4));
        let r = signed.into_kafka(at);
        assert_eq!(r.key.as_deref(), Some(b"u7".as_slice()));
        assert_eq!(r.value.as_deref(), Some(value.as_slice()));
        assert_eq!(r.timestamp, at);
        assert_eq!(r.headers.len(), 1);
        let sig = std::str::from_utf8(&r.headers[RECORD_SIGNATURE_HEADER]).unwrap();
        assert!(signer.verify(&value, sig).is_ok());
    }

    #[test]
    fn a_record_signed_here_equals_one_signed_before_the_queue() {
        // The gateway signs as it reserves and hands the signature to its queue; the order
        // writer's producer signs here: both are the same record, byte for byte.
        let signer = Signer::new(b"record-test-key-0123");
        let value = br#"{"request_id":"r2","user":"u9"}"#.to_vec();
        let at = chrono::Utc::now();
        let by_gateway =
            SignedRecord { user: "u9".into(), value: value.clone(), signature: signer.sign(&value) };
        let by_writer = SignedRecord::sign(&signer, "u9", value);
        assert_eq!(by_gateway, by_writer);
        assert_eq!(by_gateway.partition(12), by_writer.partition(12));
        assert_eq!(by_gateway.into_kafka(at), by_writer.into_kafka(at));
    }

    #[test]
    fn partitions_are_fnv1a_64_of_the_user() {
        // The FNV-1a 64 test vectors: "" = 0xcbf29ce484222325, "a" = 0xaf63dc4c8601ec8c.
        assert_eq!(partition_for("", 1000), (0xcbf2_9ce4_8422_2325u64 % 1000) as i32);
        assert_eq!(partition_for("a", 1000), (0xaf63_dc4c_8601_ec8cu64 % 1000) as i32);
        assert_eq!(partition_for("x", 1), 0);
    }

    #[test]
    fn parses_what_the_script_writes() {
        // The shape cjson.encode produces in lua/reserve.lua.
        let raw = br#"{"request_id":"r1","campaign":"c","user":"u","sku":"s","qty":1,
            "price_cents":999,"price_version":2,"stock_version":3,"reserved_at_ms":1700000000000}"#;
        let r = Reservation::from_json(raw).unwrap();
        assert_eq!(r.request_id, "r1");
        assert_eq!(r.price_cents, 999);
        assert_eq!(r.reserved_at_ms, 1_700_000_000_000);
        assert_eq!(r.buckets, 1, "a record without buckets is of a campaign without");
        assert_eq!(r.bucket().keys, crate::keys::CampaignKeys::new("c"));
        let raw = br#"{"request_id":"r1","campaign":"c","user":"u","sku":"s","qty":1,
            "price_cents":999,"price_version":2,"stock_version":3,"reserved_at_ms":1,"buckets":3}"#;
        let r = Reservation::from_json(raw).unwrap();
        assert_eq!(r.bucket(), crate::keys::Bucket::of_user("c", "u", 3));
    }

    #[test]
    fn the_origin_goes_into_the_record_as_its_fragment_says_and_older_records_have_none() {
        let origin = Origin {
            client_ip: Some("203.0.113.7".into()),
            device: Some("dev-\"1\"".into()),
            registered_at: Some(1_600_000_000),
        };
        let frag = origin.fragment();
        assert_eq!(frag, r#","client_ip":"203.0.113.7","device":"dev-\"1\"","registered_at":1600000000"#);
        // As reserve.lua splices it: after qty, before the campaign's fields.
        let raw = format!(
            r#"{{"request_id":"r1","user":"u","qty":1{frag},"campaign":"c","sku":"s","price_cents":9,"price_version":1,"stock_version":1,"reserved_at_ms":5}}"#
        );
        let r = Reservation::from_json(raw.as_bytes()).unwrap();
        assert_eq!(r.origin(), origin);
        assert_eq!(r.check(), Ok(()));
        assert_eq!(Origin::default().fragment(), "");
        let old = br#"{"request_id":"r1","campaign":"c","user":"u","sku":"s","qty":1,
            "price_cents":999,"price_version":2,"stock_version":3,"reserved_at_ms":1}"#;
        assert_eq!(Reservation::from_json(old).unwrap().origin(), Origin::default());
        let only_ip = Origin { client_ip: Some("2001:db8::1".into()), ..Origin::default() };
        assert_eq!(only_ip.fragment(), r#","client_ip":"2001:db8::1""#);
        let mut bad = Reservation { client_ip: Some("x".into()), registered_at: Some(-1), ..r };
        assert_eq!(bad.check(), Ok(()), "an origin is never a reason to refuse the sale");
        bad.drop_bad_origin();
        assert_eq!(bad.origin(), Origin { device: origin.device, ..Origin::default() });
    }

    #[test]
    fn refuses_a_record_with_a_missing_field() {
        let raw = br#"{"request_id":"r1","campaign":"c"}"#;
        assert!(Reservation::from_json(raw).is_err());
    }
}
