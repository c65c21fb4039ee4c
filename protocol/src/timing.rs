//! The one timing rule between the gateway and the order writer's sweeper.
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
//! Each binary checks its own file against the shared bound when its configuration loads (the
//! gateway: `redis.timeout_ms` at most [`RESERVE_TIMEOUT_MAX_MS`], whose hold is within
//! [`GATEWAY_HOLD_MAX`]; the order writer: [`check_sweep_age`]), so the two files can never break
//! the rule together, whoever edits which.

use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_short_sweep_age_is_refused_with_the_reason() {
        assert!(check_sweep_age(Duration::from_secs(6)).is_ok());
        let e = check_sweep_age(Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("6 s or more") && e.contains("3000 ms"), "{e}");
    }
}
