//! The decision (pure).

use super::{Admission, Schedule, MAX_RETRY_SECS, MIN_PROMISE_MS};
use crate::checks::window;
use crate::denial::Denial;
use chrono::DateTime;
use chrono::Utc;
use protocol::campaign::Campaign;

/// Where a position stands at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Not yet: `ahead` positions are before it, served in `eta_ms`.
    Waiting {
        /// The serving position now.
        serving: u64,
        /// Positions before this one not served yet.
        ahead: u64,
        /// Until it is served, in ms.
        eta_ms: i64,
    },
    /// Served, and its session still lasts `left_ms`.
    Admitted {
        /// Until the session ends, in ms.
        left_ms: i64,
    },
    /// Served, and its session is over: the buyer joins again at the back.
    Passed,
}

/// Where position `p` stands `elapsed_ms` after the start under `schedule`.
pub fn turn(schedule: &Schedule, p: u64, elapsed_ms: i64) -> Turn {
    let at = schedule.served_at(p);
    if elapsed_ms < at {
        let serving = schedule.serving(elapsed_ms);
        return Turn::Waiting { serving, ahead: p.saturating_sub(serving + 1), eta_ms: at - elapsed_ms };
    }
    let end = at.saturating_add(schedule.session_ms);
    if elapsed_ms < end {
        Turn::Admitted { left_ms: end - elapsed_ms }
    } else {
        Turn::Passed
    }
}

/// Where position `p` stands `elapsed_ms` after the start for a ticket that keeps a promise
/// (`promised`, ms after the start; [`MIN_PROMISE_MS`]): as [`turn`], but not admitted before
/// the promise, waiting until then.
pub fn kept_turn(schedule: &Schedule, p: u64, elapsed_ms: i64, promised: Option<i64>) -> Turn {
    match (turn(schedule, p, elapsed_ms), promised) {
        (Turn::Admitted { .. }, Some(at)) if elapsed_ms < at => {
            Turn::Waiting { serving: schedule.serving(elapsed_ms), ahead: 0, eta_ms: at - elapsed_ms }
        }
        (Turn::Waiting { serving, ahead, eta_ms }, Some(at)) => {
            Turn::Waiting { serving, ahead, eta_ms: eta_ms.max(at - elapsed_ms) }
        }
        (t, _) => t,
    }
}

/// A wait to answer `WAITING` `elapsed_ms` after the start: one under [`MIN_PROMISE_MS`] is
/// promised that far instead. The turn to answer, and the promise for its ticket to keep (ms
/// after the start) when it was padded.
pub fn padded(turn: Turn, elapsed_ms: i64) -> (Turn, Option<i64>) {
    match turn {
        Turn::Waiting { serving, ahead, eta_ms } if eta_ms < MIN_PROMISE_MS => {
            (Turn::Waiting { serving, ahead, eta_ms: MIN_PROMISE_MS }, Some(elapsed_ms + MIN_PROMISE_MS))
        }
        t => (t, None),
    }
}

/// When a ticket renewed at `now_ms` with `turn` says it was issued (unix s): a waiting one
/// before its turn (now, rounded down: before the promise), an admitted one at or after it
/// (rounded up), so that [`first_admission`] tells them apart.
pub fn issued_at(turn: Turn, now_ms: i64) -> i64 {
    match turn {
        Turn::Admitted { .. } => now_ms.div_euclid(1000) + i64::from(now_ms.rem_euclid(1000) != 0),
        _ => now_ms.div_euclid(1000),
    }
}

/// A first admission this long past its promise, or longer, is a backlog's: the presentation was
/// answered late (a gateway that stalled, then answers the pile), and it is paced: across every
/// gateway by `lua/admit.lua`, by [`Pace`] when Redis does not answer.
pub const LATE_ADMISSION_MS: i64 = 1000;

/// This process's first admissions of a campaign in the current second, which paces the late
/// ones (pure bookkeeping). The schedule paces admissions on time; a gateway that stalls and
/// then answers the presentations that piled up would admit every one whose turn passed at
/// once, above the rate the sale is sized for. A late first admission goes through only while
/// this second's first admissions are under `admit_per_sec`; the others are told to present
/// their ticket again in the next second. `lua/admit.lua` keeps the same count across every
/// gateway, once per place, and decides; this one, per process, decides when Redis does not
/// answer in time, and counts only the admissions it decided (every one, a place admitted before
/// too: it keeps no places; N gateways that stall together may then admit up to N times the rate
/// in that second).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    second: i64,
    admitted: u64,
}

impl Pace {
    /// Whether a first admission at `now_ms`, `late_ms` past its promise, goes through now under
    /// `admit_per_sec` (counted when it does): on time always, late only under the rate.
    pub fn admits(&mut self, now_ms: i64, late_ms: i64, admit_per_sec: u64) -> bool {
        let second = now_ms.div_euclid(1000);
        if second != self.second {
            *self = Pace { second, admitted: 0 };
        }
        if late_ms >= LATE_ADMISSION_MS && self.admitted >= admit_per_sec {
            return false;
        }
        self.admitted += 1;
        true
    }
}

/// Whether an admission on the presented ticket (`issued` unix s, `lottery`: its place is a
/// pre-queue's or a start draw's arrival) is the first of its wait: a lottery's ticket, or one
/// issued before its position's promise.
pub fn first_admission(presented: Option<(i64, bool)>, promised_ms: i64) -> Option<Admission> {
    presented
        .filter(|(issued, lottery)| *lottery || issued.saturating_mul(1000) < promised_ms)
        .map(|_| Admission { promised_ms })
}

/// The `Retry-After` of a wait of `eta_ms`: the ETA itself when near, at most
/// [`MAX_RETRY_SECS`], at least 1 s.
pub fn retry_after_secs(eta_ms: i64) -> u64 {
    (eta_ms.max(0) as u64).div_ceil(1000).clamp(1, MAX_RETRY_SECS)
}

/// A token request may come in the pre-queue window before the start when the room is on;
/// otherwise the campaign's window decides (`window::check`).
pub fn check_window(campaign: &Campaign, now: DateTime<Utc>, extended_ms: Option<i64>) -> Result<(), Denial> {
    let room = &campaign.waiting_room;
    if room.enabled && room.pre_queue_secs > 0 {
        let opens = campaign.starts_at.to_utc() - chrono::Duration::seconds(i64::from(room.pre_queue_secs));
        if now >= opens && now < campaign.starts_at.to_utc() {
            return Ok(());
        }
    }
    window::check(campaign, now, extended_ms)
}
