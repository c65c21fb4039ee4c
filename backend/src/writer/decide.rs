//! The pure part of a batch: verifying and decoding its records, then deciding each reservation against what
//! the database said (the campaign rows, earlier deliveries, the users who already hold their
//! one order). No I/O here; [`super::batch`] reads the facts and writes the decision.

use std::collections::{BTreeMap, HashMap, HashSet};

use protocol::record::Reservation;
use protocol::signing::Signer;

use super::{Incoming, Rejected};

/// The dead letter's error of a record without a signature header.
pub(super) const UNSIGNED: &str = "unsigned record";
/// The dead letter's error of a record whose signature is not the gateway key's of its value.
pub(super) const MISMATCH: &str = "signature does not match";
/// The refusal's reason of a signed record that cannot be decoded but names its reservation.
pub(super) const UNDECODABLE: &str = "UNDECODABLE";

/// A campaign row as the batch read it.
#[derive(Debug, Clone)]
pub(super) struct CampaignRow {
    /// `total_stock`.
    pub total: i64,
    /// `sold`.
    pub sold: i64,
    /// `per_user_limit`.
    pub limit: i64,
    /// `pay_window_secs`.
    pub pay_window_secs: i64,
}

/// A record that is not signed or cannot be decoded: kept with its place, never retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DeadLetter {
    /// Offset in the partition.
    pub offset: i64,
    /// The record's value (empty for a tombstone).
    pub payload: Vec<u8>,
    /// Why it was dead-lettered.
    pub error: String,
    /// A signed record that cannot be decoded but names its reservation (request id, campaign,
    /// user, quantity, buckets): it is refused `UNDECODABLE` and its units released, so that the
    /// sweeper does not produce the outbox's copy again forever. `None` for a record that is not
    /// the gateway's (unsigned, forged) or names nothing.
    pub release: Option<Reservation>,
}

/// A batch's records, decoded.
#[derive(Debug, Default)]
pub(super) struct Decoded {
    /// The first delivery of each request id, in offset order.
    pub valid: Vec<Reservation>,
    /// The records that are not signed or cannot be decoded.
    pub dead: Vec<DeadLetter>,
}

/// Checks that `signature` (the record's header, if any) is `signer`'s HMAC of `value`, then
/// decodes the value and checks what serde cannot ([`Reservation::check`]).
pub(super) fn decode(
    value: Option<&[u8]>,
    signature: Option<&[u8]>,
    signer: &Signer,
) -> Result<Reservation, String> {
    let signature = signature.ok_or(UNSIGNED)?;
    let bytes = value.ok_or("record has no value")?;
    let signature = std::str::from_utf8(signature).map_err(|_| MISMATCH)?;
    signer.verify(bytes, signature.trim()).map_err(|_| MISMATCH)?;
    let mut r = Reservation::from_json(bytes).map_err(|e| format!("not a reservation record: {e}"))?;
    r.check()?;
    // An origin the audit cannot use is dropped, never a reason to refuse the sale.
    r.drop_bad_origin();
    Ok(r)
}

/// What a signed record that [`decode`] refused still says of its reservation: enough to release
/// it (request id, campaign, user, quantity, bucket count), the rest zero. `None` when it does not
/// name one.
fn salvage(bytes: &[u8]) -> Option<Reservation> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let text = |k: &str| v.get(k)?.as_str().map(str::to_string);
    let buckets = match v.get("buckets") {
        None => 1,
        Some(b) => u32::try_from(b.as_u64()?).ok()?,
    };
    let r = Reservation {
        request_id: text("request_id")?,
        campaign: text("campaign")?,
        user: text("user")?,
        sku: text("sku").unwrap_or_default(),
        qty: v.get("qty")?.as_i64()?,
        price_cents: 0,
        price_version: 0,
        stock_version: 0,
        reserved_at_ms: 0,
        buckets,
        client_ip: None,
        device: None,
        registered_at: None,
    };
    r.check().is_ok().then_some(r)
}

/// Verifies and decodes every record of a batch; a request id seen twice is kept once (its
/// first delivery).
pub(super) fn decode_batch(records: &[Incoming], signer: &Signer) -> Decoded {
    let mut out = Decoded::default();
    let mut seen = HashSet::new();
    for rec in records {
        match decode(rec.value.as_deref(), rec.signature.as_deref(), signer) {
            Ok(r) => {
                if seen.insert(r.request_id.clone()) {
                    out.valid.push(r);
                }
            }
            Err(error) => out.dead.push(DeadLetter {
                offset: rec.offset,
                payload: rec.value.clone().unwrap_or_default(),
                // Only a record the gateway signed may give units back.
                release: if error == UNSIGNED || error == MISMATCH {
                    None
                } else {
                    rec.value.as_deref().and_then(salvage)
                },
                error,
            }),
        }
    }
    out
}

/// The campaigns a batch touches, sorted (the order their rows are locked in).
pub(super) fn campaign_ids(valid: &[Reservation]) -> Vec<String> {
    let mut ids: Vec<String> = valid.iter().map(|r| r.campaign.clone()).collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The (campaign, user, sku) triples whose current holder must be looked up: new reservations of
/// limit-1 campaigns.
pub(super) fn holder_candidates(
    valid: &[Reservation],
    campaigns: &HashMap<String, CampaignRow>,
    already_ordered: &HashSet<String>,
) -> Vec<(String, String, String)> {
    valid
        .iter()
        .filter(|r| {
            campaigns.get(&r.campaign).is_some_and(|c| c.limit == 1)
                && !already_ordered.contains(&r.request_id)
        })
        .map(|r| (r.campaign.clone(), r.user.clone(), r.sku.clone()))
        .collect()
}

/// The (campaign, user) pairs whose units in open orders must be summed: new reservations of
/// campaigns with a limit above 1.
pub(super) fn held_candidates(
    valid: &[Reservation],
    campaigns: &HashMap<String, CampaignRow>,
    already_ordered: &HashSet<String>,
) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = valid
        .iter()
        .filter(|r| {
            campaigns.get(&r.campaign).is_some_and(|c| c.limit > 1)
                && !already_ordered.contains(&r.request_id)
        })
        .map(|r| (r.campaign.clone(), r.user.clone()))
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

/// The (campaign, user) pairs of the accepted orders of campaigns with a limit above 1: what
/// the check under the campaign lock sums again.
pub(super) fn accepted_pairs(
    decision: &Decision,
    campaigns: &HashMap<String, CampaignRow>,
) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = decision
        .accepted
        .iter()
        .filter(|r| campaigns.get(&r.campaign).is_some_and(|c| c.limit > 1))
        .map(|r| (r.campaign.clone(), r.user.clone()))
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

/// Whether any user holds more than their campaign's limit in `held` (units in open orders per
/// (campaign, user), read under the campaign lock with this batch's orders in).
pub(super) fn over_limit(
    held: &HashMap<(String, String), i64>,
    campaigns: &HashMap<String, CampaignRow>,
) -> bool {
    held.iter().any(|((c, _), n)| campaigns.get(c).is_some_and(|row| *n > row.limit))
}

/// What the database said, read in the batch's transaction.
#[derive(Debug, Default)]
pub(super) struct Facts {
    /// The campaign rows touched, by id (a missing id is an unknown campaign).
    pub campaigns: HashMap<String, CampaignRow>,
    /// Request ids that already have an order.
    pub already_ordered: HashSet<String>,
    /// Request ids already refused: (status, reason).
    pub already_refused: HashMap<String, (String, String)>,
    /// (campaign, user, sku) that already hold their one order in a limit-1 campaign.
    pub holders: HashSet<(String, String, String)>,
    /// Units each (campaign, user) holds in open (not CLOSED) orders, for campaigns with a limit
    /// above 1 (a pair not here holds none).
    pub held: HashMap<(String, String), i64>,
}

/// The decision for every decoded reservation of a batch.
#[derive(Debug, Default)]
pub(super) struct Decision {
    /// Ordered by an earlier delivery: acknowledged again, nothing written.
    pub ordered_before: Vec<Reservation>,
    /// Refused by an earlier delivery: released again (idempotent), nothing written.
    pub refused_before: Vec<Rejected>,
    /// New orders, in offset order.
    pub accepted: Vec<Reservation>,
    /// Refused by this batch (stock, limit, unknown campaign).
    pub refused_now: Vec<Rejected>,
    /// Units left per campaign once the accepted ones are taken.
    pub remaining: HashMap<String, i64>,
}

impl Decision {
    /// Units the accepted orders take, per campaign, in id order (the stock update's input).
    pub fn units_per_campaign(&self) -> BTreeMap<String, i64> {
        let mut per = BTreeMap::new();
        for r in &self.accepted {
            *per.entry(r.campaign.clone()).or_default() += r.qty;
        }
        per
    }
}

/// Decides each reservation, in offset order, against the stock read: an earlier delivery's
/// decision stands; otherwise an unknown campaign, a user who already holds their one order or
/// whose open orders and this one would pass the limit (the database's own check of the sum
/// `reserve.lua` keeps in Redis, for when Redis forgot it), or too few units left refuse it;
/// anything else is accepted and takes its units.
pub(super) fn decide(valid: &[Reservation], facts: &Facts) -> Decision {
    let mut d = Decision {
        remaining: facts.campaigns.iter().map(|(k, c)| (k.clone(), c.total - c.sold)).collect(),
        ..Default::default()
    };
    let mut holders = facts.holders.clone();
    let mut held = facts.held.clone();
    for r in valid {
        if facts.already_ordered.contains(&r.request_id) {
            d.ordered_before.push(r.clone());
            continue;
        }
        if let Some((status, reason)) = facts.already_refused.get(&r.request_id) {
            let status = if status == "SOLD_OUT" { "SOLD_OUT" } else { "FAILED" };
            d.refused_before.push(Rejected { record: r.clone(), status, reason: reason.clone() });
            continue;
        }
        let refuse = |status: &'static str, reason: &str| Rejected {
            record: r.clone(),
            status,
            reason: reason.into(),
        };
        let Some(c) = facts.campaigns.get(&r.campaign) else {
            d.refused_now.push(refuse("FAILED", "CAMPAIGN_UNKNOWN"));
            continue;
        };
        if c.limit == 1 && !holders.insert((r.campaign.clone(), r.user.clone(), r.sku.clone())) {
            d.refused_now.push(refuse("FAILED", "LIMIT_REACHED"));
            continue;
        }
        let user_held = held.entry((r.campaign.clone(), r.user.clone())).or_default();
        if c.limit > 1 && *user_held + r.qty > c.limit {
            d.refused_now.push(refuse("FAILED", "LIMIT_REACHED"));
            continue;
        }
        let left = d.remaining.get_mut(&r.campaign).expect("every campaign has a remaining count");
        if *left < r.qty {
            d.refused_now.push(refuse("SOLD_OUT", "SOLD_OUT"));
            continue;
        }
        *left -= r.qty;
        *user_held += r.qty;
        d.accepted.push(r.clone());
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(id: &str, campaign: &str, user: &str, qty: i64) -> Reservation {
        Reservation {
            request_id: id.into(),
            campaign: campaign.into(),
            user: user.into(),
            sku: "s".into(),
            qty,
            price_cents: 100,
            price_version: 1,
            stock_version: 1,
            reserved_at_ms: 1,
            buckets: 1,
            client_ip: None,
            device: None,
            registered_at: None,
        }
    }

    fn row(total: i64, sold: i64, limit: i64) -> CampaignRow {
        CampaignRow { total, sold, limit, pay_window_secs: 900 }
    }

    fn facts(campaigns: &[(&str, CampaignRow)]) -> Facts {
        Facts {
            campaigns: campaigns.iter().map(|(id, c)| (id.to_string(), c.clone())).collect(),
            ..Default::default()
        }
    }

    fn ids(rs: &[Reservation]) -> Vec<&str> {
        rs.iter().map(|r| r.request_id.as_str()).collect()
    }

    fn why(fs: &[Rejected]) -> Vec<(&str, &str, &str)> {
        fs.iter().map(|f| (f.record.request_id.as_str(), f.status, f.reason.as_str())).collect()
    }

    fn key() -> Signer {
        Signer::new(b"decide-test-gateway-key")
    }

    fn incoming(offset: i64, r: &Reservation) -> Incoming {
        Incoming::signed(offset, serde_json::to_vec(r).unwrap(), &key())
    }

    /// `decode` of a record signed with the test key.
    fn decode_signed(r: &Reservation) -> Result<Reservation, String> {
        let value = serde_json::to_vec(r).unwrap();
        decode(Some(&value), Some(key().sign(&value).as_bytes()), &key())
    }

    #[test]
    fn undecodable_records_are_dead_letters_with_their_place_and_duplicates_kept_once() {
        let a = res("a", "c", "u1", 1);
        let mut bad_qty = res("b", "c", "u2", 1);
        bad_qty.qty = 0;
        let records = vec![
            incoming(10, &a),
            Incoming::signed(11, b"{not json".to_vec(), &key()),
            Incoming { offset: 12, value: None, signature: Some(key().sign(b"").into_bytes()) },
            incoming(13, &a),
            incoming(14, &bad_qty),
        ];
        let d = decode_batch(&records, &key());
        assert_eq!(ids(&d.valid), ["a"]);
        let dead: Vec<(i64, &[u8])> = d.dead.iter().map(|x| (x.offset, x.payload.as_slice())).collect();
        assert_eq!(
            dead,
            [(11, b"{not json".as_slice()), (12, b"".as_slice()), (14, records[4].value.as_deref().unwrap())]
        );
        assert!(d.dead[0].error.contains("not a reservation record"), "{}", d.dead[0].error);
        assert!(d.dead[1].error.contains("no value"), "{}", d.dead[1].error);
        assert!(d.dead[2].error.contains("qty"), "{}", d.dead[2].error);
    }

    #[test]
    fn ids_and_campaigns_are_checked() {
        assert!(decode_signed(&res("", "c", "u", 1)).is_err());
        assert!(decode_signed(&res("r", "a}b", "u", 1)).unwrap_err().contains("campaign"));
        assert!(decode_signed(&res("r", "c", "", 1)).is_err());
        assert!(decode_signed(&res("r", "c", "u", 1)).is_ok());
    }

    #[test]
    fn only_a_value_signed_with_the_gateway_key_is_decoded() {
        let value = serde_json::to_vec(&res("r", "c", "u", 1)).unwrap();
        let good = key().sign(&value);
        assert_eq!(decode(Some(&value), Some(good.as_bytes()), &key()).unwrap().request_id, "r");
        // No header at all.
        assert_eq!(decode(Some(&value), None, &key()).unwrap_err(), UNSIGNED);
        // Another key's signature, a signature of other bytes, garbage, not UTF-8, empty.
        let forged = Signer::new(b"someone else's key").sign(&value);
        let mut tampered = value.clone();
        tampered[2] ^= 1;
        let of_tampered = key().sign(&tampered);
        let sigs: [&[u8]; 5] = [forged.as_bytes(), of_tampered.as_bytes(), b"zz", b"\xff\xfe", b""];
        for sig in sigs {
            assert_eq!(decode(Some(&value), Some(sig), &key()).unwrap_err(), MISMATCH, "{sig:?}");
        }
        // The tampered value with the original signature.
        assert_eq!(decode(Some(&tampered), Some(good.as_bytes()), &key()).unwrap_err(), MISMATCH);
        // A tombstone is unsigned or has no value.
        assert_eq!(decode(None, None, &key()).unwrap_err(), UNSIGNED);
        assert!(decode(None, Some(good.as_bytes()), &key()).unwrap_err().contains("no value"));
    }

    #[test]
    fn unsigned_and_forged_records_are_dead_letters_and_the_valid_ones_after_them_stand() {
        let (a, b, c) = (res("a", "c", "u1", 1), res("b", "c", "u2", 1), res("x", "c", "u3", 1));
        let forged_value = serde_json::to_vec(&b).unwrap();
        let forged_sig = Signer::new(b"not the gateway key").sign(&forged_value).into_bytes();
        let records = vec![
            Incoming { offset: 0, value: Some(serde_json::to_vec(&a).unwrap()), signature: None },
            Incoming { offset: 1, value: Some(forged_value.clone()), signature: Some(forged_sig) },
            incoming(2, &c),
        ];
        let d = decode_batch(&records, &key());
        assert_eq!(ids(&d.valid), ["x"]);
        let dead: Vec<(i64, &str)> = d.dead.iter().map(|x| (x.offset, x.error.as_str())).collect();
        assert_eq!(dead, [(0, UNSIGNED), (1, MISMATCH)]);
        assert_eq!(d.dead[1].payload, forged_value, "the payload is kept as it came");
        // A forged copy does not shadow the genuine record of the same request id after it.
        let records = vec![records[1].clone(), incoming(3, &b)];
        assert_eq!(ids(&decode_batch(&records, &key()).valid), ["b"]);
    }

    #[test]
    fn stock_running_out_mid_batch_refuses_the_rest_as_sold_out() {
        let valid = [res("a", "c", "u1", 1), res("b", "c", "u2", 1), res("x", "c", "u3", 1)];
        let d = decide(&valid, &facts(&[("c", row(10, 8, 5))]));
        assert_eq!(ids(&d.accepted), ["a", "b"]);
        assert_eq!(why(&d.refused_now), [("x", "SOLD_OUT", "SOLD_OUT")]);
        assert_eq!(d.remaining["c"], 0);
        assert_eq!(d.units_per_campaign(), BTreeMap::from([("c".to_string(), 2)]));
    }

    #[test]
    fn multi_quantity_records_take_their_units_and_a_smaller_later_one_still_fits() {
        let valid = [res("a", "c", "u1", 3), res("b", "c", "u2", 3), res("x", "c", "u3", 2)];
        let d = decide(&valid, &facts(&[("c", row(5, 0, 5))]));
        assert_eq!(ids(&d.accepted), ["a", "x"]);
        assert_eq!(why(&d.refused_now), [("b", "SOLD_OUT", "SOLD_OUT")]);
        assert_eq!(d.remaining["c"], 0);
        assert_eq!(d.units_per_campaign()["c"], 5);
    }

    #[test]
    fn one_per_user_refuses_a_current_holder_and_a_second_reservation_in_the_batch() {
        let valid = [res("a", "c", "holder", 1), res("b", "c", "u2", 1), res("x", "c", "u2", 1)];
        let mut f = facts(&[("c", row(10, 0, 1))]);
        f.holders.insert(("c".into(), "holder".into(), "s".into()));
        let d = decide(&valid, &f);
        assert_eq!(ids(&d.accepted), ["b"]);
        assert_eq!(why(&d.refused_now), [("a", "FAILED", "LIMIT_REACHED"), ("x", "FAILED", "LIMIT_REACHED")]);
        assert_eq!(d.remaining["c"], 9, "a refusal takes no stock");
        // A larger limit lets the same user order twice.
        let d = decide(&valid, &facts(&[("c", row(10, 0, 2))]));
        assert_eq!(ids(&d.accepted), ["a", "b", "x"]);
    }

    #[test]
    fn a_limit_above_one_counts_open_orders_and_the_batch_and_a_refusal_takes_nothing() {
        let valid = [
            res("a", "c", "u1", 1),
            res("b", "c", "u1", 1),
            res("x", "c", "u2", 2),
            res("y", "c", "u2", 1),
            res("z", "c", "u1", 1),
        ];
        let mut f = facts(&[("c", row(3, 0, 3))]);
        f.held.insert(("c".into(), "u1".into()), 2);
        let d = decide(&valid, &f);
        // u1 held 2: a takes the third unit, b passes the limit; x takes 2; y and z find no
        // stock (y) or the limit (z) in their way.
        assert_eq!(ids(&d.accepted), ["a", "x"]);
        assert_eq!(
            why(&d.refused_now),
            [
                ("b", "FAILED", "LIMIT_REACHED"),
                ("y", "SOLD_OUT", "SOLD_OUT"),
                ("z", "FAILED", "LIMIT_REACHED")
            ]
        );
        // A stock refusal takes nothing from the user's count: a later one still fits.
        let valid = [res("a", "c", "u1", 2), res("b", "c", "u1", 1)];
        let d = decide(&valid, &facts(&[("c", row(1, 0, 2))]));
        assert_eq!(ids(&d.accepted), ["b"]);
        let campaigns: HashMap<String, CampaignRow> = [("c".to_string(), row(9, 0, 2))].into();
        let mut held = HashMap::from([(("c".to_string(), "u1".to_string()), 2)]);
        assert!(!over_limit(&held, &campaigns));
        held.insert(("c".into(), "u2".into()), 3);
        assert!(over_limit(&held, &campaigns));
    }

    #[test]
    fn a_missing_campaign_is_refused_and_the_others_go_on() {
        let valid = [res("a", "gone", "u1", 1), res("b", "c", "u2", 1)];
        let d = decide(&valid, &facts(&[("c", row(1, 0, 1))]));
        assert_eq!(why(&d.refused_now), [("a", "FAILED", "CAMPAIGN_UNKNOWN")]);
        assert_eq!(ids(&d.accepted), ["b"]);
        assert_eq!(d.units_per_campaign(), BTreeMap::from([("c".to_string(), 1)]));
    }

    #[test]
    fn an_earlier_delivery_decision_stands_and_takes_no_stock() {
        let valid =
            [res("a", "c", "u1", 1), res("b", "c", "u2", 1), res("x", "c", "u3", 1), res("y", "c", "u4", 1)];
        let mut f = facts(&[("c", row(1, 1, 1))]);
        f.already_ordered.insert("a".into());
        f.already_refused.insert("b".into(), ("SOLD_OUT".into(), "SOLD_OUT".into()));
        f.already_refused.insert("x".into(), ("FAILED".into(), "LIMIT_REACHED".into()));
        let d = decide(&valid, &f);
        assert_eq!(ids(&d.ordered_before), ["a"]);
        assert_eq!(why(&d.refused_before), [("b", "SOLD_OUT", "SOLD_OUT"), ("x", "FAILED", "LIMIT_REACHED")]);
        assert_eq!(why(&d.refused_now), [("y", "SOLD_OUT", "SOLD_OUT")]);
        assert!(d.accepted.is_empty());
        assert!(d.units_per_campaign().is_empty());
    }

    #[test]
    fn holders_are_looked_up_only_for_new_reservations_of_limit_one_campaigns() {
        let valid = [
            res("a", "one", "u1", 1),
            res("b", "one", "u2", 1),
            res("x", "many", "u3", 1),
            res("y", "gone", "u4", 1),
        ];
        let campaigns: HashMap<String, CampaignRow> =
            [("one".to_string(), row(5, 0, 1)), ("many".to_string(), row(5, 0, 3))].into();
        let ordered: HashSet<String> = ["a".to_string()].into();
        assert_eq!(
            holder_candidates(&valid, &campaigns, &ordered),
            [("one".into(), "u2".into(), "s".into())]
        );
        assert_eq!(campaign_ids(&valid), ["gone", "many", "one"]);
    }
}
