//! `reserve.lua`'s answers made comparable across two campaigns and two calls, for the tests that
//! hold one way of calling the script (or one version of it) to another.

use protocol::scripts::ReserveOutcome;

/// A record without what differs between two campaigns (its id) and two calls (the time), the
/// rest parsed again, so that the order of its fields does not count. Panics on a record without
/// either field: every record has both.
pub fn strip_record(record: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(record).expect("a record is JSON");
    let o = v.as_object_mut().expect("a record is an object");
    assert!(o.remove("campaign").is_some() && o.remove("reserved_at_ms").is_some(), "{record}");
    v.to_string()
}

/// An outcome comparable across campaigns and calls (its record stripped, [`strip_record`]).
pub fn comparable(o: &ReserveOutcome) -> ReserveOutcome {
    match o {
        ReserveOutcome::Reserved { remaining, record } => {
            ReserveOutcome::Reserved { remaining: *remaining, record: strip_record(record) }
        }
        other => other.clone(),
    }
}
