//! A campaign's waiting room (`[waiting_room]`) and its proof-of-work levels (`[[pow_level]]`),
//! as written in the campaign file and validated with it ([`crate::campaign`]), every error
//! naming file:line:column:field.
//!
//! ```toml
//! [waiting_room]
//! enabled = true            # default true when the table is written
//! admit_per_sec = 200       # buyers let through to the token per second (1..=1,000,000)
//! max_active = 2000         # admitted buyers at once, each for session_secs (default: no cap)
//! pre_queue_secs = 300      # arrivals this long before the start are shuffled (0..=86,400)
//! start_draw_ms = 1000      # arrivals this long after the start are drawn too (0..=10,000; 0: off)
//! draw_return_per_sec = 2000 # drawn buyers asked back per second to learn their places
//!                           # (1..=10,000,000; default 10 × admit_per_sec)
//! ticket_ttl_secs = 600     # a ticket's life, renewed each time it is presented (10..=86,400)
//! session_secs = 120        # how long an admitted ticket may get tokens (10..=86,400)
//!
//! [[pow_level]]             # from this many arrivals per second (across gateways) ...
//! arrivals_per_sec = 1000
//! bits = 20                 # ... a challenge asks for this many bits (0..=28)
//! ```

use serde::Deserialize;
use toml::Spanned;

/// The most admissions per second a room may promise.
pub const MAX_ADMIT_PER_SEC: i64 = 1_000_000;
/// The longest pre-queue window, ticket life and session: a day.
pub const MAX_ROOM_SECS: i64 = 86_400;
/// The longest start draw, ms: the shortest session (10 s), so that no session can end, and its
/// buyer join again, while the draw is open.
pub const MAX_START_DRAW_MS: i64 = 10_000;
/// The start draw when `start_draw_ms` is not written, ms.
pub const DEFAULT_START_DRAW_MS: u32 = 1000;
/// `draw_return_per_sec` when not written: this many times `admit_per_sec`.
pub const DRAW_RETURN_PER_ADMIT: u64 = 10;
/// The most drawn buyers a room may ask back per second.
pub const MAX_DRAW_RETURN_PER_SEC: i64 = 10 * MAX_ADMIT_PER_SEC;

/// A campaign's `[waiting_room]`; off by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingRoom {
    /// Whether the token endpoint queues buyers at all.
    pub enabled: bool,
    /// Buyers admitted per second, from the start.
    pub admit_per_sec: u64,
    /// Admitted buyers at once (a buyer counts for `session_secs` from their admission); `None`
    /// is no cap.
    pub max_active: Option<u64>,
    /// Seconds before the start during which arrivals join the pre-queue (shuffled at the start).
    pub pre_queue_secs: u32,
    /// Milliseconds after the start during which arrivals are drawn at random too (the start
    /// draw: placed after the pre-queue, shuffled when it closes); 0: first come, first served
    /// from the start.
    pub start_draw_ms: u32,
    /// Drawn buyers asked back per second after the draw's end to learn their places: the draw's
    /// n-th arrival comes back `(n − 1) / draw_return_per_sec` after it, and the drawn places'
    /// turns start only once the last of them is told, so the gateways tell the drawn their
    /// places at this pace and no turn has passed when they do (default
    /// [`DRAW_RETURN_PER_ADMIT`] × `admit_per_sec`).
    pub draw_return_per_sec: u64,
    /// Seconds a ticket lives from its issue; each presentation renews it.
    pub ticket_ttl_secs: u32,
    /// Seconds an admitted ticket may get campaign tokens, from its admission.
    pub session_secs: u32,
}

impl Default for WaitingRoom {
    fn default() -> Self {
        Self {
            enabled: false,
            admit_per_sec: 100,
            max_active: None,
            pre_queue_secs: 0,
            start_draw_ms: DEFAULT_START_DRAW_MS,
            draw_return_per_sec: 100 * DRAW_RETURN_PER_ADMIT,
            ticket_ttl_secs: 600,
            session_secs: 120,
        }
    }
}

/// One `[[pow_level]]`: from `arrivals_per_sec` arrivals per second, challenges ask `bits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowLevel {
    /// Arrivals per second across every gateway (token requests of the campaign).
    pub arrivals_per_sec: u64,
    /// Leading zero bits a challenge asks for from that rate (0..=28).
    pub bits: u32,
}

/// The bits a challenge asks for at `rate` arrivals per second: the highest level reached, or
/// `base` (the campaign's `pow_bits`) below every level. `levels` are sorted by rate.
pub fn pow_bits(base: u32, levels: &[PowLevel], rate: u64) -> u32 {
    levels.iter().rev().find(|l| rate >= l.arrivals_per_sec).map_or(base, |l| l.bits.max(base))
}

/// `[waiting_room]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWaitingRoom {
    #[serde(default)]
    enabled: Option<bool>,
    admit_per_sec: Spanned<i64>,
    #[serde(default)]
    max_active: Option<Spanned<i64>>,
    #[serde(default)]
    pre_queue_secs: Option<Spanned<i64>>,
    #[serde(default)]
    start_draw_ms: Option<Spanned<i64>>,
    #[serde(default)]
    draw_return_per_sec: Option<Spanned<i64>>,
    #[serde(default)]
    ticket_ttl_secs: Option<Spanned<i64>>,
    #[serde(default)]
    session_secs: Option<Spanned<i64>>,
}

/// `[[pow_level]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPowLevel {
    arrivals_per_sec: Spanned<i64>,
    bits: Spanned<i64>,
}

/// A field out of its bounds: (span, field, message).
type FieldError = (std::ops::Range<usize>, &'static str, String);

fn within(v: &Spanned<i64>, field: &'static str, min: i64, max: i64) -> Result<i64, FieldError> {
    let n = *v.get_ref();
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err((v.span(), field, format!("must be between {min} and {max}, found {n}")))
    }
}

fn optional(
    v: &Option<Spanned<i64>>,
    field: &'static str,
    min: i64,
    max: i64,
    default: u32,
) -> Result<u32, FieldError> {
    v.as_ref().map_or(Ok(default), |v| within(v, field, min, max).map(|n| n as u32))
}

/// Checks the campaign's `[waiting_room]` and `[[pow_level]]` tables.
pub(crate) fn check(
    room: Option<&RawWaitingRoom>,
    levels: &[RawPowLevel],
) -> Result<(WaitingRoom, Vec<PowLevel>), FieldError> {
    let room = match room {
        None => WaitingRoom::default(),
        Some(r) => check_room(r)?,
    };
    Ok((room, check_levels(levels)?))
}

/// Checks a `[waiting_room]` table: each field within its bounds, the defaults for those absent.
fn check_room(r: &RawWaitingRoom) -> Result<WaitingRoom, FieldError> {
    let d = WaitingRoom::default();
    let admit_per_sec = within(&r.admit_per_sec, "waiting_room.admit_per_sec", 1, MAX_ADMIT_PER_SEC)? as u64;
    Ok(WaitingRoom {
        enabled: r.enabled.unwrap_or(true),
        admit_per_sec,
        max_active: match &r.max_active {
            None => None,
            Some(m) => Some(within(m, "waiting_room.max_active", 1, 1_000_000_000)? as u64),
        },
        pre_queue_secs: optional(&r.pre_queue_secs, "waiting_room.pre_queue_secs", 0, MAX_ROOM_SECS, 0)?,
        start_draw_ms: optional(
            &r.start_draw_ms,
            "waiting_room.start_draw_ms",
            0,
            MAX_START_DRAW_MS,
            d.start_draw_ms,
        )?,
        draw_return_per_sec: match &r.draw_return_per_sec {
            None => admit_per_sec * DRAW_RETURN_PER_ADMIT,
            Some(v) => within(v, "waiting_room.draw_return_per_sec", 1, MAX_DRAW_RETURN_PER_SEC)? as u64,
        },
        ticket_ttl_secs: optional(
            &r.ticket_ttl_secs,
            "waiting_room.ticket_ttl_secs",
            10,
            MAX_ROOM_SECS,
            d.ticket_ttl_secs,
        )?,
        session_secs: optional(
            &r.session_secs,
            "waiting_room.session_secs",
            10,
            MAX_ROOM_SECS,
            d.session_secs,
        )?,
    })
}

/// Checks the `[[pow_level]]` tables: each within its bounds, in order of arrivals (strictly
/// rising) with bits that never fall.
fn check_levels(levels: &[RawPowLevel]) -> Result<Vec<PowLevel>, FieldError> {
    let mut out: Vec<PowLevel> = Vec::with_capacity(levels.len());
    for l in levels {
        let level = PowLevel {
            arrivals_per_sec: within(&l.arrivals_per_sec, "pow_level.arrivals_per_sec", 1, 1_000_000_000)?
                as u64,
            bits: within(&l.bits, "pow_level.bits", 0, 28)? as u32,
        };
        if let Some(before) = out.last() {
            if level.arrivals_per_sec <= before.arrivals_per_sec {
                return Err((
                    l.arrivals_per_sec.span(),
                    "pow_level.arrivals_per_sec",
                    format!("must be above the level before it ({})", before.arrivals_per_sec),
                ));
            }
            if level.bits < before.bits {
                return Err((
                    l.bits.span(),
                    "pow_level.bits",
                    format!(
                        "must be at least the level before it ({}): the work hardens with the crowd",
                        before.bits
                    ),
                ));
            }
        }
        out.push(level);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::Campaign;
    use crate::conf::ConfError;

    const BASE: &str = "id = \"phone\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\n\
                        starts_at = 2026-12-01T10:00:00Z\nends_at = 2026-12-01T11:00:00Z\n";

    fn parse(extra: &str) -> Result<Campaign, ConfError> {
        Campaign::parse(Path::new("conf/campaigns/phone.toml"), &format!("{BASE}{extra}"))
    }

    fn expect_err(extra: &str, line: usize, field: &str, words: &str) {
        crate::conf::assert_refused(parse(extra), "conf/campaigns/phone.toml", line, field, words);
    }

    #[test]
    fn the_room_is_off_unless_written_and_on_with_its_defaults_when_written() {
        let c = parse("").unwrap();
        assert_eq!(c.waiting_room, WaitingRoom::default());
        assert!(!c.waiting_room.enabled && c.pow_levels.is_empty());
        let c = parse("[waiting_room]\nadmit_per_sec = 50\n").unwrap();
        assert_eq!(
            c.waiting_room,
            WaitingRoom {
                enabled: true,
                admit_per_sec: 50,
                draw_return_per_sec: 500,
                ..WaitingRoom::default()
            },
            "written: on, the rest defaults"
        );
        let c = parse(
            "[waiting_room]\nenabled = false\nadmit_per_sec = 5\nmax_active = 40\npre_queue_secs = 300\n\
             start_draw_ms = 2500\ndraw_return_per_sec = 7\nticket_ttl_secs = 900\nsession_secs = 60\n\n[[pow_level]]\narrivals_per_sec = 100\nbits = 18\n\n\
             [[pow_level]]\narrivals_per_sec = 1000\nbits = 22\n",
        )
        .unwrap();
        let r = c.waiting_room;
        assert_eq!(
            (r.enabled, r.admit_per_sec, r.max_active, r.pre_queue_secs, r.ticket_ttl_secs, r.session_secs),
            (false, 5, Some(40), 300, 900, 60)
        );
        assert_eq!((r.start_draw_ms, r.draw_return_per_sec), (2500, 7));
        assert_eq!(
            c.pow_levels,
            vec![PowLevel { arrivals_per_sec: 100, bits: 18 }, PowLevel { arrivals_per_sec: 1000, bits: 22 }]
        );
        let c = parse("[waiting_room]\nadmit_per_sec = 50\nstart_draw_ms = 0\n").unwrap();
        assert_eq!(c.waiting_room.start_draw_ms, 0, "0: no start draw");
        assert_eq!(parse("[waiting_room]\nadmit_per_sec = 50\n").unwrap().waiting_room.start_draw_ms, 1000);
    }

    #[test]
    fn bad_room_values_are_refused_at_their_line_and_field() {
        // BASE has 7 lines: the table is line 8, its first key line 9.
        let room = |kv: &str| format!("[waiting_room]\nadmit_per_sec = 10\n{kv}\n");
        expect_err("[waiting_room]\nadmit_per_sec = 0\n", 9, "waiting_room.admit_per_sec", "between 1 and");
        expect_err("[waiting_room]\nadmit_per_sec = 2000000\n", 9, "waiting_room.admit_per_sec", "1000000");
        expect_err(&room("max_active = 0"), 10, "waiting_room.max_active", "between 1 and");
        expect_err(&room("pre_queue_secs = -1"), 10, "waiting_room.pre_queue_secs", "between 0 and 86400");
        expect_err(&room("start_draw_ms = -1"), 10, "waiting_room.start_draw_ms", "between 0 and 10000");
        expect_err(&room("start_draw_ms = 10001"), 10, "waiting_room.start_draw_ms", "between 0 and 10000");
        expect_err(&room("draw_return_per_sec = 0"), 10, "waiting_room.draw_return_per_sec", "between 1 and");
        expect_err(
            &room("draw_return_per_sec = 10000001"),
            10,
            "waiting_room.draw_return_per_sec",
            "10000000",
        );
        expect_err(&room("ticket_ttl_secs = 5"), 10, "waiting_room.ticket_ttl_secs", "between 10 and");
        expect_err(&room("session_secs = 100000"), 10, "waiting_room.session_secs", "86400");
        expect_err(&room("enabled = \"yes\""), 10, "enabled", "invalid type");
        expect_err(&room("seats = 3"), 10, "seats", "unknown field");
        let err = parse("[waiting_room]\nenabled = true\n").unwrap_err();
        assert!(err.to_string().contains("admit_per_sec"), "admit_per_sec is required: {err}");
    }

    #[test]
    fn bad_pow_levels_are_refused_at_their_line_and_field() {
        let level =
            |rate: &str, bits: &str| format!("[[pow_level]]\narrivals_per_sec = {rate}\nbits = {bits}\n");
        expect_err(&level("0", "18"), 9, "pow_level.arrivals_per_sec", "between 1 and");
        expect_err(&level("10", "29"), 10, "pow_level.bits", "between 0 and 28");
        let two = format!("{}{}", level("100", "18"), level("100", "20"));
        expect_err(&two, 12, "pow_level.arrivals_per_sec", "above the level before it (100)");
        let softer = format!("{}{}", level("100", "18"), level("200", "12"));
        expect_err(&softer, 13, "pow_level.bits", "at least the level before it (18)");
        let err = parse("[[pow_level]]\nbits = 3\n").unwrap_err();
        assert_eq!(err.line, 8, "{err}");
        assert!(err.to_string().contains("missing field `arrivals_per_sec`"), "{err}");
    }

    #[test]
    fn bits_step_up_with_the_rate_and_never_below_the_base() {
        let levels =
            [PowLevel { arrivals_per_sec: 100, bits: 18 }, PowLevel { arrivals_per_sec: 1000, bits: 22 }];
        assert_eq!(pow_bits(16, &levels, 0), 16);
        assert_eq!(pow_bits(16, &levels, 99), 16);
        assert_eq!(pow_bits(16, &levels, 100), 18);
        assert_eq!(pow_bits(16, &levels, 999), 18);
        assert_eq!(pow_bits(16, &levels, 1000), 22);
        assert_eq!(pow_bits(16, &levels, u64::MAX), 22);
        assert_eq!(pow_bits(20, &levels, 100), 20, "a level below the base asks the base");
        assert_eq!(pow_bits(16, &[], 1_000_000), 16);
    }
}
