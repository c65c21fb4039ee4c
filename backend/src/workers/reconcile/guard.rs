//! When a repair of a reservation without its order may act (pure).

/// How much older than the sweep age an entry must be before a repair may decide it without
/// its order: the sweeper has produced it at least twice by then.
pub const REPAIR_AGE_FACTOR: u32 = 3;

/// Why a `Kind::ReservedWithoutOrder` repair must not act now, or `None` when it may: the
/// entry must be older than [`REPAIR_AGE_FACTOR`] × the sweep age by Redis' clock, and the
/// writer's committed offset must have reached the end of the user's partition (nothing of it
/// can still be waiting in Kafka).
pub fn repair_blocker(
    reserved_at_ms: i64,
    redis_now_ms: i64,
    sweep_age_ms: i64,
    partition: Option<(i32, i64, i64)>,
) -> Option<String> {
    let age = redis_now_ms - reserved_at_ms;
    let min = sweep_age_ms * i64::from(REPAIR_AGE_FACTOR);
    if age < min {
        return Some(format!(
            "reserved {age} ms ago by Redis' clock; a repair waits {min} ms ({REPAIR_AGE_FACTOR} × the sweep age)"
        ));
    }
    match partition {
        None => Some("the reservations topic could not be read: the record may still be waiting in Kafka".into()),
        Some((p, committed, end)) if committed < end => Some(format!(
            "partition {p}: the writer has committed offset {committed} of {end}; the record may still be waiting in Kafka"
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repair_waits_for_age_and_for_the_partition_to_drain() {
        let caught_up = Some((2, 50, 50));
        assert!(repair_blocker(0, 29_000, 10_000, caught_up).unwrap().contains("waits 30000 ms"));
        assert_eq!(repair_blocker(0, 30_000, 10_000, caught_up), None);
        let behind = repair_blocker(0, 60_000, 10_000, Some((2, 40, 50))).unwrap();
        assert!(behind.contains("partition 2") && behind.contains("40 of 50"), "{behind}");
        assert!(repair_blocker(0, 60_000, 10_000, None).unwrap().contains("could not be read"));
    }
}
