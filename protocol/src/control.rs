//! A campaign's operated state, shared by the fleet through one Redis hash per campaign
//! ([`crate::keys::control_key`]).
//!
//! `order-writer campaign publish` writes the facts every process must agree on: the frozen
//! fields of the campaign file ([`Facts`]) and the writer's side of the fleet contract
//! ([`Fleet`]: its signing key's fingerprint, its topic and partition count). The state commands
//! (`pause`, `resume`, `queue-only`, `close`, `extend`, `end`) change [`State`] and the window's
//! end, and bump `version`. Every gateway reads the hash every [`POLL`]: it answers by the state
//! at once, refuses to sell a campaign whose files disagree with the published facts
//! ([`Control::disagreements`]), and refuses a reload that would bring such a file. The hash is
//! the one key of a campaign that `end` keeps: an old file coming back never sells an ended
//! campaign again.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::campaign::Campaign;

/// How often a gateway reads the control hash of each campaign it serves: a state command takes
/// effect on every gateway within this (plus one Redis round trip).
pub const POLL: Duration = Duration::from_millis(250);

/// What the fingerprint of a signing key is an HMAC of (never the key itself).
const FINGERPRINT_MESSAGE: &[u8] = b"seckill signing key check v1";

/// The operated state of a campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    /// Selling, within the file's window (the default: no hash, or published and not changed).
    #[default]
    Open,
    /// Every order answered `CAMPAIGN_CLOSED` with `Retry-After`; `resume` opens it again.
    Paused,
    /// Every order answered `TRY_LATER`, nothing reserved (the `queue_only` switch, fleet-wide).
    QueueOnly,
    /// Every order answered `ENDED`; `resume` opens it again until `end`.
    Closed,
    /// Over for good: its Redis keys removed (this hash kept), never sold again.
    Ended,
}

impl State {
    /// Every state, in the order the docs list them.
    pub const ALL: [State; 5] = [State::Open, State::Paused, State::QueueOnly, State::Closed, State::Ended];

    /// The name stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Open => "OPEN",
            State::Paused => "PAUSED",
            State::QueueOnly => "QUEUE_ONLY",
            State::Closed => "CLOSED",
            State::Ended => "ENDED",
        }
    }

    /// The state named `s`.
    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Its index, for an atomic (the inverse of [`State::from_index`]).
    pub fn index(self) -> u8 {
        State::ALL.iter().position(|s| *s == self).unwrap_or(0) as u8
    }

    /// The state of index `i` (Open when out of range).
    pub fn from_index(i: u8) -> State {
        State::ALL.get(usize::from(i)).copied().unwrap_or_default()
    }
}

/// The fields of a campaign file that never change once it is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The file's `stock` (more comes only by `add-stock`, counted apart).
    pub stock: i64,
    /// `per_user_limit`.
    pub per_user_limit: i64,
    /// `sku`.
    pub sku: String,
    /// `price_cents`.
    pub price_cents: i64,
    /// `buckets`.
    pub buckets: u32,
}

impl Facts {
    /// The frozen fields of `c`.
    pub fn of(c: &Campaign) -> Facts {
        Facts {
            stock: c.stock,
            per_user_limit: c.per_user_limit,
            sku: c.sku.clone(),
            price_cents: c.price_cents,
            buckets: c.buckets,
        }
    }

    /// Each field where `c` differs from these facts: (field, published, in the file).
    pub fn differences(&self, c: &Campaign) -> Vec<(&'static str, String, String)> {
        let file = Facts::of(c);
        [
            ("stock", self.stock.to_string(), file.stock.to_string()),
            ("price_cents", self.price_cents.to_string(), file.price_cents.to_string()),
            ("per_user_limit", self.per_user_limit.to_string(), file.per_user_limit.to_string()),
            ("sku", format!("{:?}", self.sku), format!("{:?}", file.sku)),
            ("buckets", self.buckets.to_string(), file.buckets.to_string()),
        ]
        .into_iter()
        .filter(|(_, published, now)| published != now)
        .collect()
    }
}

/// One side of the contract between the gateways and the writer: what signs and carries the
/// records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    /// [`fingerprint`] of the signing key.
    pub signing: String,
    /// The reservations topic.
    pub topic: String,
    /// Its partition count.
    pub partitions: i32,
}

/// The fingerprint of a signing key: an HMAC-SHA256 of a fixed message under the key, its first
/// 8 bytes in hex. Two processes compare keys by it; the key is never printed or stored.
pub fn fingerprint(key: &[u8]) -> String {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    hex::encode(&ring::hmac::sign(&k, FINGERPRINT_MESSAGE).as_ref()[..8])
}

/// Where a process disagrees with the published campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The field: of the campaign file, or of the server file when `server` is true
    /// (`signing_key`, `kafka.topic`, `kafka.partitions`).
    pub field: &'static str,
    /// Whether the field is the server file's rather than the campaign file's.
    pub server: bool,
    /// What differs, both values said (never a key).
    pub message: String,
}

/// A campaign's control hash, read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Control {
    /// Its state.
    pub state: State,
    /// Bumped by every change (0: never written).
    pub version: u64,
    /// The window's end when `extend` moved it (later than the file's).
    pub ends_at: Option<DateTime<Utc>>,
    /// The frozen fields as published.
    pub facts: Option<Facts>,
    /// The writer's side of the contract, as published.
    pub fleet: Option<Fleet>,
    /// Units added by `add-stock` since the publish.
    pub added: i64,
}

impl Control {
    /// The hash's fields read back (`HGETALL`); a field that does not parse is an error naming
    /// it.
    pub fn from_hash(h: &HashMap<String, String>) -> Result<Control, String> {
        let get = |f: &str| h.get(f).map(String::as_str);
        let int = |f: &str| -> Result<Option<i64>, String> {
            get(f)
                .map(|v| v.parse::<i64>().map_err(|_| format!("control field {f} = {v:?} is not an integer")))
                .transpose()
        };
        let state = match get("state") {
            None => State::Open,
            Some(s) => State::parse(s).ok_or_else(|| format!("control field state = {s:?} is no state"))?,
        };
        let ends_at = match get("ends_at_ms") {
            None => None,
            Some(_) => int("ends_at_ms")?.and_then(DateTime::from_timestamp_millis),
        };
        let facts =
            match (int("stock")?, int("per_user_limit")?, get("sku"), int("price_cents")?, int("buckets")?) {
                (Some(stock), Some(per_user_limit), Some(sku), Some(price_cents), Some(buckets)) => {
                    Some(Facts {
                        stock,
                        per_user_limit,
                        sku: sku.to_string(),
                        price_cents,
                        buckets: u32::try_from(buckets)
                            .map_err(|_| "control field buckets out of range".to_string())?,
                    })
                }
                _ => None,
            };
        let fleet = match (get("signing"), get("topic"), int("partitions")?) {
            (Some(signing), Some(topic), Some(p)) => Some(Fleet {
                signing: signing.to_string(),
                topic: topic.to_string(),
                partitions: i32::try_from(p)
                    .map_err(|_| "control field partitions out of range".to_string())?,
            }),
            _ => None,
        };
        Ok(Control {
            state,
            version: int("version")?.unwrap_or(0).max(0) as u64,
            ends_at,
            facts,
            fleet,
            added: int("added")?.unwrap_or(0),
        })
    }

    /// The fields `publish` writes: the facts of `c` and the writer's `fleet`.
    pub fn published_fields(c: &Campaign, fleet: &Fleet) -> Vec<(&'static str, String)> {
        vec![
            ("stock", c.stock.to_string()),
            ("per_user_limit", c.per_user_limit.to_string()),
            ("sku", c.sku.clone()),
            ("price_cents", c.price_cents.to_string()),
            ("buckets", c.buckets.to_string()),
            ("signing", fleet.signing.clone()),
            ("topic", fleet.topic.clone()),
            ("partitions", fleet.partitions.to_string()),
        ]
    }

    /// The window's end in force: the file's, or the later one `extend` set.
    pub fn ends_at(&self, c: &Campaign) -> DateTime<Utc> {
        self.ends_at_after(c.ends_at.to_utc())
    }

    /// The window's end in force over `published` (the file's or the database's end): the later
    /// one `extend` set, when it set one.
    pub fn ends_at_after(&self, published: DateTime<Utc>) -> DateTime<Utc> {
        self.ends_at.map_or(published, |e| e.max(published))
    }

    /// Every way a process with campaign file `c` and contract `mine` disagrees with what was
    /// published (empty when nothing was, or all agree).
    pub fn disagreements(&self, c: &Campaign, mine: &Fleet) -> Vec<Disagreement> {
        let mut out = Vec::new();
        if let Some(facts) = &self.facts {
            for (field, published, file) in facts.differences(c) {
                let message = format!(
                    "campaign {}: {field} is {published} published, {file} in the file; it never \
                     changes once published (stock grows by `order-writer campaign add-stock`)",
                    c.id
                );
                out.push(Disagreement { field, server: false, message });
            }
        }
        if let Some(theirs) = &self.fleet {
            if theirs.signing != mine.signing {
                out.push(Disagreement {
                    field: "signing_key",
                    server: true,
                    message: format!(
                        "campaign {}: the signing key differs from the order writer's that published it \
                         (fingerprints {} here, {} there): every record would be dead-lettered",
                        c.id, mine.signing, theirs.signing
                    ),
                });
            }
            if theirs.topic != mine.topic || theirs.partitions != mine.partitions {
                let field = if theirs.topic != mine.topic { "kafka.topic" } else { "kafka.partitions" };
                out.push(Disagreement {
                    field,
                    server: true,
                    message: format!(
                        "campaign {}: records go to {:?} with {} partitions here, the order writer reads \
                         {:?} with {}: records would land where no writer reads",
                        c.id, mine.topic, mine.partitions, theirs.topic, theirs.partitions
                    ),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn campaign(stock: i64) -> Campaign {
        let text = format!(
            "id = \"c\"\nsku = \"S\"\nstock = {stock}\nper_user_limit = 1\nprice_cents = 5\n\
             starts_at = 2026-01-01T00:00:00Z\nends_at = 2026-02-01T00:00:00Z\n"
        );
        Campaign::parse(Path::new("c.toml"), &text).unwrap()
    }

    fn fleet(signing: &str, partitions: i32) -> Fleet {
        Fleet { signing: signing.into(), topic: "t".into(), partitions }
    }

    fn hash(c: &Campaign, f: &Fleet) -> HashMap<String, String> {
        Control::published_fields(c, f).into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    #[test]
    fn states_round_trip_by_name_and_index() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
            assert_eq!(State::from_index(s.index()), s);
        }
        assert_eq!(State::parse("open"), None, "names are exact");
        assert_eq!(State::from_index(99), State::Open);
    }

    #[test]
    fn an_absent_hash_is_open_and_agrees_with_everything() {
        let c = Control::from_hash(&HashMap::new()).unwrap();
        assert_eq!((c.state, c.version, c.facts.clone(), c.fleet.clone()), (State::Open, 0, None, None));
        assert!(c.disagreements(&campaign(10), &fleet("a", 4)).is_empty());
    }

    #[test]
    fn a_stock_edit_a_key_and_a_partition_count_each_disagree() {
        let published = Control::from_hash(&hash(&campaign(10), &fleet("aa", 4))).unwrap();
        assert!(published.disagreements(&campaign(10), &fleet("aa", 4)).is_empty());

        let d = published.disagreements(&campaign(12), &fleet("aa", 4));
        assert_eq!((d.len(), d[0].field, d[0].server), (1, "stock", false));
        assert!(d[0].message.contains("stock is 10 published, 12 in the file"), "{}", d[0].message);

        let d = published.disagreements(&campaign(10), &fleet("bb", 4));
        assert_eq!((d.len(), d[0].field, d[0].server), (1, "signing_key", true));
        assert!(d[0].message.contains("bb here, aa there"), "{}", d[0].message);

        let d = published.disagreements(&campaign(10), &fleet("aa", 8));
        assert_eq!((d.len(), d[0].field), (1, "kafka.partitions"));
        assert!(d[0].message.contains("8 partitions here"), "{}", d[0].message);
    }

    #[test]
    fn the_fingerprint_tells_keys_apart_and_never_shows_the_key() {
        let (a, b) = (fingerprint(b"key one, long enough"), fingerprint(b"key two, long enough"));
        assert_ne!(a, b);
        assert_eq!(a, fingerprint(b"key one, long enough"));
        assert_eq!(a.len(), 16);
        assert!(!a.contains("6b6579"), "not the key's hex");
    }

    #[test]
    fn a_bad_field_is_named_and_extend_only_moves_the_end_later() {
        let mut h = HashMap::new();
        h.insert("state".to_string(), "SOMETIMES".to_string());
        assert!(Control::from_hash(&h).unwrap_err().contains("state"));
        h.insert("state".to_string(), "PAUSED".to_string());
        h.insert("version".to_string(), "x".to_string());
        assert!(Control::from_hash(&h).unwrap_err().contains("version"));
        h.insert("version".to_string(), "3".to_string());
        let c = campaign(1);
        let later = c.ends_at.to_utc() + chrono::Duration::hours(1);
        h.insert("ends_at_ms".to_string(), later.timestamp_millis().to_string());
        let ctl = Control::from_hash(&h).unwrap();
        assert_eq!((ctl.state, ctl.version, ctl.ends_at(&c)), (State::Paused, 3, later));
        h.insert("ends_at_ms".to_string(), "0".to_string());
        assert_eq!(Control::from_hash(&h).unwrap().ends_at(&c), c.ends_at.to_utc(), "never earlier");
    }
}
