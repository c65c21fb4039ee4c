//! The timing rules between the gateway and the order writer's sweeper, and between a gateway
//! and the waiting room's script in Redis ([`ARRIVAL_CLAIM_MAX_MS`]).
//!
//! After a reservation call, a gateway may still act on its outbox entry for a while: when the
//! call's answer does not come back within the reservation timeout, the gateway undoes it, and the
//! undo may take [`undo_timeout`] more. That span is the gateway's *hold*, [`gateway_hold`]. When
//! the call reserved, the gateway produces the record to Kafka itself within its batch linger
//! plus its produce deadline, also bounded by the hold ([`LINGER_MAX_MS`],
//! [`PRODUCE_TIMEOUT_MAX_MS`]), so the sweeper never produces a needless copy of a record the
//! gateway is still sending.
//! The sweeper produces an outbox entry again only once it is older than the sweep age. The
//! undo and the sweeper's claim exclude each other in Redis (`lua/claim.lua`), so the order
//! cannot go wrong either way; the rule keeps the two apart in time, so that a slow answer is
//! undone (and the buyer told so) rather than found claimed, and no entry is produced twice
//! while the gateway still decides it:
//!
//! > sweep age ≥ 2 × [`GATEWAY_HOLD_MAX`]
//!
//! While the order writer is behind its topic, an old outbox entry may just be a record waiting
//! in Kafka, and producing it again would only add to the backlog. So the sweeper holds a pass
//! back until the writer has read every partition up to the end offsets it saw one pass earlier
//! (`backend::sweeper`). A record the gateway produced for an entry the sweeper is about to take
//! (older than the sweep age) was produced within the hold of its reservation, so before that
//! earlier look as long as
//!
//! > sweep interval ≤ sweep age − [`GATEWAY_HOLD_MAX`] ([`check_sweep_interval`])
//!
//! Each binary checks its own file against the shared bound when its configuration loads (the
//! gateway: `redis.timeout_ms` at most [`RESERVE_TIMEOUT_MAX_MS`], whose hold is within
//! [`GATEWAY_HOLD_MAX`]; the order writer: [`check_sweep_age`]), so the two files can never break
//! the rule together, whoever edits which.

use std::time::Duration;

/// How far before Redis's own `TIME` a gateway may claim that a token request arrived, when it
/// asks `lua/room.lua` for the buyer's place (the room's pre-queue and start draw are judged by
/// the arrival, not by when an overloaded gateway got round to the call): the longest a gateway
/// keeps a token request between reading its head and that call. The body is read first, within
/// `plugins::flash_sale::BODY_TIMEOUT` (2 s), then one Redis call is made (`arrivals.lua`, for a
/// campaign with proof-of-work levels), bounded by the room's timeout, [`undo_timeout`] of at
/// most [`RESERVE_TIMEOUT_MAX_MS`] (2 s): 4 s. The script clamps every claim to
/// `[TIME − this, TIME]` with the same number written in it (a test keeps the two equal), so a
/// wrong clock or a bad argument cannot put a request in a lottery whose window it missed by
/// more. A gateway starved of CPU for longer than this is judged as if its request arrived this
/// long before the call.
pub const ARRIVAL_CLAIM_MAX_MS: i64 = 4000;

/// The longest hold a gateway configuration may have.
pub const GATEWAY_HOLD_MAX: Duration = Duration::from_secs(3);

/// The longest reservation timeout a gateway configuration may have (`redis.timeout_ms`): its
/// hold, the timeout plus the undo's, is [`GATEWAY_HOLD_MAX`].
pub const RESERVE_TIMEOUT_MAX_MS: i64 = 1000;

/// The longest linger of a gateway's Kafka batches (`kafka.linger_ms`).
pub const LINGER_MAX_MS: i64 = 500;

/// The longest deadline of a gateway's Kafka produce (`kafka.produce_timeout_ms`): with the
/// longest linger, a record the gateway still produces itself is within [`GATEWAY_HOLD_MAX`].
pub const PRODUCE_TIMEOUT_MAX_MS: i64 = 2500;

/// The shortest sweep age an order writer configuration may have: twice [`GATEWAY_HOLD_MAX`].
pub const SWEEP_AGE_MIN: Duration = Duration::from_secs(6);

/// How long the undo of a reservation call without an answer may take, from the reservation
/// timeout: longer than the call, because a stalled Redis that comes back answers the call and
/// then the undo, and that answer is worth waiting for.
pub fn undo_timeout(timeout: Duration) -> Duration {
    (timeout * 5).clamp(Duration::from_millis(200), Duration::from_secs(2))
}

/// How long after a reservation call a gateway bounded by `timeout` may still act on its entry.
pub fn gateway_hold(timeout: Duration) -> Duration {
    timeout + undo_timeout(timeout)
}

/// Checks an order writer's sweep age against the rule; the error says why.
pub fn check_sweep_age(age: Duration) -> Result<(), String> {
    if age < SWEEP_AGE_MIN {
        return Err(format!(
            "must be {} s or more: twice the longest time a gateway may still undo a reservation \
             ({} ms, protocol::timing), so the sweeper never produces an entry a gateway is deciding",
            SWEEP_AGE_MIN.as_secs(),
            GATEWAY_HOLD_MAX.as_millis()
        ));
    }
    Ok(())
}

/// Checks an order writer's sweep interval against its sweep age; the error says why.
pub fn check_sweep_interval(age: Duration, interval: Duration) -> Result<(), String> {
    let most = age.saturating_sub(GATEWAY_HOLD_MAX);
    if interval > most {
        return Err(format!(
            "must be at most the sweep age minus {} ms ({} ms here): the sweeper waits for the \
             writer to read what the topic held one pass earlier, which must include every record \
             a gateway produced for the entries it sweeps (protocol::timing)",
            GATEWAY_HOLD_MAX.as_millis(),
            most.as_millis()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_interval_fits_within_the_age_less_the_hold() {
        let s = Duration::from_secs;
        assert!(check_sweep_interval(s(10), s(2)).is_ok());
        assert!(check_sweep_interval(s(10), s(7)).is_ok(), "the bound itself");
        assert!(check_sweep_interval(s(10), s(8)).unwrap_err().contains("7000 ms here"));
        assert!(check_sweep_interval(SWEEP_AGE_MIN, s(4)).is_err());
    }

    #[test]
    fn the_bounds_agree_with_each_other() {
        assert_eq!(SWEEP_AGE_MIN, GATEWAY_HOLD_MAX * 2);
    }

    #[test]
    fn every_timeout_the_gateway_conf_allows_fits_the_hold() {
        let max = Duration::from_millis(RESERVE_TIMEOUT_MAX_MS as u64);
        assert_eq!(gateway_hold(max), GATEWAY_HOLD_MAX, "the bound is tight");
        for ms in [5, 100, 200, 400] {
            assert!(gateway_hold(Duration::from_millis(ms)) < GATEWAY_HOLD_MAX, "{ms} ms");
        }
        assert!(gateway_hold(Duration::from_millis(1001)) > GATEWAY_HOLD_MAX);
        assert_eq!(gateway_hold(Duration::from_millis(200)), Duration::from_millis(1200));
    }

    #[test]
    fn the_gateways_own_produce_fits_the_hold() {
        let produce = Duration::from_millis((LINGER_MAX_MS + PRODUCE_TIMEOUT_MAX_MS) as u64);
        assert!(produce <= GATEWAY_HOLD_MAX);
    }

    #[test]
    fn room_lua_clamps_an_arrival_to_the_same_bound() {
        let script = include_str!("../lua/room.lua");
        let line = format!("local CLAIM_MAX_MS = {ARRIVAL_CLAIM_MAX_MS}\n");
        assert!(script.contains(&line), "lua/room.lua must say {line:?}");
        let undo = undo_timeout(Duration::from_millis(RESERVE_TIMEOUT_MAX_MS as u64));
        assert_eq!(Duration::from_secs(2) + undo, Duration::from_millis(ARRIVAL_CLAIM_MAX_MS as u64));
    }

    #[test]
    fn a_short_sweep_age_is_refused_with_the_reason() {
        assert!(check_sweep_age(Duration::from_secs(6)).is_ok());
        let e = check_sweep_age(Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("6 s or more") && e.contains("3000 ms"), "{e}");
    }
}
