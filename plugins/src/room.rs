//! The waiting room at the token endpoint, and the proof of work that hardens with the crowd.
//!
//! When a campaign's `[waiting_room]` is on, a token request without an admitted queue ticket is
//! answered `WAITING` with a signed ticket, the position, the number ahead, the ETA and when to
//! come back; the buyer presents the ticket again ([`TICKET_HEADER`]) and gets a token once its
//! position is served. No process runs in the background and nothing is stored per ticket:
//!
//! - **Positions** come from Redis, one counter per campaign under its hash tag
//!   (`lua/room.lua`, one call when a buyer enters, none when a ticket is presented again).
//! - **The serving position** is a pure function of the time since the start ([`Schedule`]):
//!   `admit_per_sec` positions a second, and at most `max_active` admitted within any
//!   `session_secs` (an admitted ticket may get tokens for `session_secs`, then it joins again at
//!   the back). So every gateway, restarted or not, computes the same answer from the clock.
//! - **The ticket** ([`Ticket`]) binds the campaign, the user, the device and the place under an
//!   HMAC with a key derived from the master key ([`crate::issue::token::EdgeKeys::room_key`]); it
//!   expires `ticket_ttl_secs` after its issue, and every presentation renews it.
//! - **The pre-queue**: arrivals in the `pre_queue_secs` before the start get an arrival number;
//!   at the start the pre-queue's size is frozen and each number becomes a position by a keyed
//!   shuffle ([`shuffle`]), unpredictable without the master key. Every pre-queue arrival has the
//!   same chance of every place, whenever it came in the window: a script firing at T−0 gains
//!   nothing over a buyer who came five minutes early, and one account has one place.
//! - **The start draw**: arrivals in the `start_draw_ms` after the start get a draw number. The
//!   draw closes once every arrival in it can have been seen, its end plus
//!   [`protocol::timing::ARRIVAL_CLAIM_MAX_MS`] (arrivals after its window meanwhile get a
//!   number after it, first come first served); then its size is frozen with its base (the
//!   pre-queue's size, or the serving position then plus the positions served while the drawn
//!   are asked back, if higher) and each number becomes a position after the base by another
//!   keyed shuffle ([`draw_shuffle`]): a script firing at T+0 is not first among a crowd that
//!   arrives over the first second. The drawn are asked back one by one, `draw_return_per_sec`
//!   a second by number ([`Lotteries::draw_return_at_ms`]), and their turns start after the last
//!   is asked back: no turn has passed when a buyer learns its place, and the places are served
//!   at the rate (no burst). Positions after the draw are first come, first served.
//! - **Judged by the arrival**: both lotteries take a buyer by when the request reached the
//!   proxy ([`Asker::arrived`], taken once per request), not by when an overloaded process got
//!   round to `room.lua`; the script clamps the claim to Redis's clock less
//!   [`protocol::timing::ARRIVAL_CLAIM_MAX_MS`].
//! - **Admitted in place**: a request whose turn is less than [`ADMIT_IN_PLACE_MS`] away and that
//!   brings its captcha's answer is held (an async sleep) and goes on as admitted, instead of a
//!   `WAITING` answer whose promise would be shorter than the round trip to keep it. One without
//!   its answer is promised [`MIN_PROMISE_MS`] at least, and its ticket keeps that promise
//!   ([`Ticket::promised_ms`], [`kept_turn`]): held until it, not let in before.
//!
//! The proof of work's bits ([`protocol::waiting_room::pow_bits`]) follow the campaign's
//! arrivals (token requests) per second across every gateway, counted in Redis
//! (`lua/arrivals.lua`, only for a campaign with `[[pow_level]]`s) and remembered per process
//! ([`ArrivalRates`]) so that the challenge endpoint picks its bits without a Redis call.
//!
//! What the room did is kept per campaign for the gateway's metrics ([`RoomStats`], read at
//! scrape time): the places issued (as `room.lua` last counted them across every gateway, or a
//! higher one shown since), the admissions (a token issued on a ticket given while it waited,
//! so once per wait) and how late each came after the time its ticket's position promised.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fred::clients::Pool;
use protocol::campaign::Campaign;
use protocol::codes::Code;
use protocol::scripts::{Admit, Admitted, Drawn, RoomEntry, RoomPlace, Scripts};
use protocol::waiting_room::{self as conf, pow_bits};
use ring::hmac;
use serde_json::{json, Value};

use crate::checks::window;
use crate::denial::Denial;

/// The header a token request presents its queue ticket in.
pub const TICKET_HEADER: &str = "x-queue-ticket";
/// The longest `Retry-After` of a `WAITING` answer: a buyer far back comes back at least this
/// often (and sees the ETA shrink).
pub const MAX_RETRY_SECS: u64 = 30;
/// A request whose turn is at most this many ms away, and that brings its captcha's answer, is
/// held until its turn and goes on as admitted ([`hold_ms`]): no `WAITING` answer promises a wait
/// shorter than the round trip needed to keep it. At `admit_per_sec` a second, at most
/// `admit_per_sec / 10` positions are this close, so as many requests are held at once (each an
/// async sleep, no thread).
pub const ADMIT_IN_PLACE_MS: i64 = 100;
/// The shortest wait a `WAITING` answer promises: a turn nearer than this, told to a request
/// that did not bring its work (so could not be held in place), is promised this far instead
/// and the ticket keeps the promise ([`Ticket::promised_ms`]): the buyer has the time to fetch
/// a challenge, solve it and present the ticket before the promise, is held until it
/// ([`ADMIT_IN_PLACE_MS`]) and gets in on it, where a promise of a few ms is missed by the
/// round trip that keeps it.
pub const MIN_PROMISE_MS: i64 = 250;

// ---------------------------------------------------------------------------------------------
// The serving schedule (pure).

/// Who is served when: `rate` positions per second from the start, at most `max_active` within
/// any `session_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Positions per second.
    pub rate: u64,
    /// Admitted at once, if capped.
    pub max_active: Option<u64>,
    /// How long an admission lasts, in ms.
    pub session_ms: i64,
}

impl Schedule {
    /// The schedule of a campaign's room.
    pub fn of(room: &conf::WaitingRoom) -> Self {
        Self {
            rate: room.admit_per_sec.max(1),
            max_active: room.max_active,
            session_ms: i64::from(room.session_secs.max(1)) * 1000,
        }
    }

    /// The serving position `elapsed_ms` after the start: positions up to it are admitted (or
    /// were). `floor(rate · t)`, capped so that at most `max_active` positions are admitted
    /// within any session: in the k-th session window, at most `(k + 1) · max_active` in all.
    pub fn serving(&self, elapsed_ms: i64) -> u64 {
        if elapsed_ms <= 0 {
            return 0;
        }
        let t = elapsed_ms as u128;
        let flat = (u128::from(self.rate) * t / 1000).min(u128::from(u64::MAX));
        let Some(m) = self.max_active else { return flat as u64 };
        let s = self.session_ms as u128;
        let (k, into) = (t / s, t % s);
        let capped = k * u128::from(m) + (u128::from(self.rate) * into / 1000).min(u128::from(m));
        flat.min(capped).min(u128::from(u64::MAX)) as u64
    }

    /// When position `p` (from 1) is served, in ms after the start: the least `t` with
    /// `serving(t) >= p`.
    pub fn served_at(&self, p: u64) -> i64 {
        let p = u128::from(p.max(1));
        let r = u128::from(self.rate);
        let flat = (1000 * p).div_ceil(r);
        let at = match self.max_active {
            None => flat,
            Some(m) => {
                let (m, s) = (u128::from(m), self.session_ms as u128);
                let k = (p - 1) / m;
                let into = (1000 * (p - k * m)).div_ceil(r);
                let capped = if into < s { k * s + into } else { (k + 1) * s };
                flat.max(capped)
            }
        };
        at.min(i64::MAX as u128) as i64
    }
}

// ---------------------------------------------------------------------------------------------
// The pre-queue shuffle (pure).

/// The position (1..=`size`) of the pre-queue's `arrival`-th arrival (1..=`size`): a keyed
/// pseudo-random permutation of the arrival order (a 4-round Feistel network over the smallest
/// even power of two ≥ `size`, walking the cycle back into range), keyed by the room key, the
/// campaign and the size. A bijection: every position is given once.
pub fn shuffle(key: &hmac::Key, campaign: &str, size: u64, arrival: u64) -> u64 {
    permute(key, "shuffle", campaign, size, arrival)
}

/// The place (1..=`size`, after the draw's base) of the start draw's `arrival`-th arrival: the
/// same keyed permutation as [`shuffle`], under another label (the two lotteries of a campaign
/// are drawn apart).
pub fn draw_shuffle(key: &hmac::Key, campaign: &str, size: u64, arrival: u64) -> u64 {
    permute(key, "draw", campaign, size, arrival)
}

fn permute(key: &hmac::Key, label: &str, campaign: &str, size: u64, arrival: u64) -> u64 {
    if size <= 1 || arrival == 0 || arrival > size {
        return arrival;
    }
    let bits = (64 - (size - 1).leading_zeros()).max(2);
    let half = bits.div_ceil(2);
    let mask = (1u64 << half) - 1;
    let round = |i: u8, x: u64| -> u64 {
        let tag = hmac::sign(key, format!("{label}\n{campaign}\n{size}\n{i}\n{x}").as_bytes());
        let mut b = [0u8; 8];
        b.copy_from_slice(&tag.as_ref()[..8]);
        u64::from_be_bytes(b) & mask
    };
    let feistel = |x: u64| -> u64 {
        let (mut l, mut r) = (x >> half, x & mask);
        for i in 0..4 {
            (l, r) = (r, l ^ round(i, r));
        }
        (l << half) | r
    };
    let mut x = feistel(arrival - 1);
    while x >= size {
        x = feistel(x);
    }
    x + 1
}

/// What this process knows of a campaign's lotteries: the pre-queue's size and the start draw,
/// once each is closed (`room.lua` says so).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Closed {
    /// The pre-queue's frozen size.
    pub pre: Option<u64>,
    /// The start draw's base and size.
    pub draw: Option<Drawn>,
}

impl Closed {
    /// Both kept, the newer known one of each.
    fn merge(self, other: Closed) -> Closed {
        Closed { pre: other.pre.or(self.pre), draw: other.draw.or(self.draw) }
    }
}

/// Which lottery a place not known yet waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lottery {
    /// The pre-queue's, drawn at the start.
    PreQueue,
    /// The start draw's, drawn when it closes.
    StartDraw,
    /// First come, first served right after the start draw's places, known when it closes (an
    /// arrival after its window, before its close).
    AfterDraw,
}

impl Lottery {
    /// The lottery `place` waits for, if any.
    pub fn of(place: RoomPlace) -> Option<Lottery> {
        match place {
            RoomPlace::PreQueue(_) => Some(Lottery::PreQueue),
            RoomPlace::Draw(_) => Some(Lottery::StartDraw),
            RoomPlace::Late(_) => Some(Lottery::AfterDraw),
            RoomPlace::Position(_) => None,
        }
    }
}

/// Where a place stands once its lottery is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// At this position.
    Position(u64),
    /// Its lottery is not drawn yet: its buyer learns its place at `drawn_at_ms` (unix ms).
    Undrawn {
        /// When to come back to learn the place, unix ms.
        drawn_at_ms: i64,
        /// Which lottery.
        lottery: Lottery,
    },
    /// Its lottery's result is not known to this process yet, though drawn: ask `room.lua`.
    Unknown,
}

/// A campaign's lottery windows, unix ms, and the pace at which the drawn are asked back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lotteries {
    /// The start: the pre-queue's places are drawn then.
    pub start_ms: i64,
    /// The start draw's end (the start plus `start_draw_ms`).
    pub draw_end_ms: i64,
    /// When `room.lua` closes the start draw: its end plus
    /// [`protocol::timing::ARRIVAL_CLAIM_MAX_MS`] (no later call can claim an arrival in it),
    /// or the start itself without a draw.
    pub draw_close_ms: i64,
    /// Drawn buyers asked back per second from the draw's close (`draw_return_per_sec`).
    pub return_per_sec: u64,
}

impl Lotteries {
    /// `campaign`'s.
    pub fn of(campaign: &Campaign) -> Self {
        let (start_ms, draw_end_ms) = (campaign.starts_at.timestamp_millis(), draw_ends_at_ms(campaign));
        Self::new(start_ms, draw_end_ms, campaign.waiting_room.draw_return_per_sec)
    }

    /// A start at `start_ms`, a draw to `draw_end_ms` (none when equal), the drawn asked back
    /// `return_per_sec` a second.
    pub fn new(start_ms: i64, draw_end_ms: i64, return_per_sec: u64) -> Self {
        let grace = if draw_end_ms > start_ms { protocol::timing::ARRIVAL_CLAIM_MAX_MS } else { 0 };
        Self {
            start_ms,
            draw_end_ms,
            draw_close_ms: draw_end_ms.saturating_add(grace),
            return_per_sec: return_per_sec.max(1),
        }
    }

    /// When the start draw's `d`-th arrival (from 1), or the `d`-th arrival after its window
    /// (before its close), is asked back to learn its place (unix ms): `(d − 1) /
    /// return_per_sec` after the draw's close, so the gateways tell them their places at that
    /// pace instead of all at once (`room.lua` starts their turns after the last of them is
    /// asked back).
    pub fn draw_return_at_ms(&self, d: u64) -> i64 {
        let after = u128::from(d.saturating_sub(1)) * 1000 / u128::from(self.return_per_sec.max(1));
        self.draw_close_ms.saturating_add(after.min(i64::MAX as u128) as i64)
    }
}

/// The position of `place` at `now_ms` given what is `closed` and the campaign's `lotteries`: a
/// position is itself; a pre-queue arrival is shuffled among the pre-queue from the start on; a
/// draw arrival is the draw's base plus its shuffle among the draw, and a late arrival the
/// draw's base plus its size plus its number, from the time its buyer is asked back
/// ([`Lotteries::draw_return_at_ms`]).
pub fn place_position(
    key: &hmac::Key,
    campaign: &str,
    place: RoomPlace,
    closed: Closed,
    now_ms: i64,
    lotteries: Lotteries,
) -> Placed {
    match place {
        RoomPlace::Position(p) => Placed::Position(p),
        RoomPlace::PreQueue(_) if now_ms < lotteries.start_ms => {
            Placed::Undrawn { drawn_at_ms: lotteries.start_ms, lottery: Lottery::PreQueue }
        }
        RoomPlace::PreQueue(a) => match closed.pre {
            Some(n) => Placed::Position(shuffle(key, campaign, n, a)),
            None => Placed::Unknown,
        },
        RoomPlace::Draw(d) if now_ms < lotteries.draw_return_at_ms(d) => {
            Placed::Undrawn { drawn_at_ms: lotteries.draw_return_at_ms(d), lottery: Lottery::StartDraw }
        }
        RoomPlace::Draw(d) => match closed.draw {
            Some(Drawn { base, size }) => Placed::Position(base + draw_shuffle(key, campaign, size, d)),
            None => Placed::Unknown,
        },
        RoomPlace::Late(n) if now_ms < lotteries.draw_return_at_ms(n) => {
            Placed::Undrawn { drawn_at_ms: lotteries.draw_return_at_ms(n), lottery: Lottery::AfterDraw }
        }
        RoomPlace::Late(n) => match closed.draw {
            Some(Drawn { base, size }) => Placed::Position(base + size + n),
            None => Placed::Unknown,
        },
    }
}

/// How long to hold a request whose position stands at `turn` before it goes on as admitted
/// ([`ADMIT_IN_PLACE_MS`]), if it brings its captcha's answer (`brings_work`): `None` to answer
/// as the turn says.
pub fn hold_ms(turn: Turn, brings_work: bool) -> Option<i64> {
    match turn {
        Turn::Waiting { eta_ms, .. } if brings_work && eta_ms <= ADMIT_IN_PLACE_MS => Some(eta_ms.max(0)),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The ticket (pure).

/// A queue ticket: bound to its campaign, user and device, signed, expiring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The campaign (signed, not written in the ticket: the route names it).
    pub campaign: String,
    /// The buyer.
    pub user: String,
    /// The device it was given to.
    pub device: String,
    /// Where the buyer stands.
    pub place: RoomPlace,
    /// Issued at, unix seconds.
    pub issued_at: i64,
    /// Expires at, unix seconds.
    pub expires_at: i64,
    /// The admission it promised, unix ms, when that is later than its position's turn (a wait
    /// padded to [`MIN_PROMISE_MS`]): the buyer is not admitted before it.
    pub promised_ms: Option<i64>,
}

fn bad_ticket(message: &'static str) -> Denial {
    Denial::new(Code::BadTicket, message)
}

impl Ticket {
    /// What the tag signs: every field, the user and device length-prefixed.
    /// (A ticket without a promise signs what it did before there were promises.)
    fn message(&self) -> String {
        let mut m = format!(
            "ticket\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}",
            self.campaign,
            self.user.len(),
            self.user,
            self.device.len(),
            self.device,
            self.place.as_stored(),
            self.issued_at,
            self.expires_at
        );
        if let Some(promised) = self.promised_ms {
            m.push_str(&format!("\npromised {promised}"));
        }
        m
    }

    /// The ticket as handed out: `{place}.{issued}.{expires}.{hex user}.{hex device}.{hex tag}`,
    /// with `.{promised ms}` after `{expires}` when it keeps a promise.
    pub fn sign(&self, key: &hmac::Key) -> String {
        let tag = hmac::sign(key, self.message().as_bytes());
        let promised = self.promised_ms.map(|p| format!(".{p}")).unwrap_or_default();
        format!(
            "{}.{}.{}{promised}.{}.{}.{}",
            self.place.as_stored(),
            self.issued_at,
            self.expires_at,
            hex::encode(&self.user),
            hex::encode(&self.device),
            hex::encode(tag.as_ref())
        )
    }

    /// Checks a presented ticket for `campaign`, `user` and `device` at `now` (unix seconds):
    /// `BAD_TICKET` when it is malformed, forged or for another campaign (its tag does not
    /// verify), for another user or device, or expired.
    pub fn verify(
        key: &hmac::Key,
        token: &[u8],
        campaign: &str,
        user: &str,
        device: &str,
        now: i64,
    ) -> Result<Ticket, Denial> {
        let forged = || bad_ticket("the queue ticket is not valid for this campaign: ask again without it");
        let text = std::str::from_utf8(token).map_err(|_| forged())?;
        if text.len() > 1024 {
            return Err(forged());
        }
        let parts: Vec<&str> = text.split('.').collect();
        let (place, issued, expires, promised, u, d, tag) = match parts.as_slice() {
            [place, issued, expires, u, d, tag] => (place, issued, expires, None, u, d, tag),
            [place, issued, expires, promised, u, d, tag] => {
                (place, issued, expires, Some(promised), u, d, tag)
            }
            _ => return Err(forged()),
        };
        let number = |s: &str| {
            (!s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<i64>().ok())
                .flatten()
        };
        let text_of = |h: &str| hex::decode(h).ok().and_then(|b| String::from_utf8(b).ok());
        let ticket = Ticket {
            campaign: campaign.to_string(),
            place: RoomPlace::parse(place).ok_or_else(forged)?,
            issued_at: number(issued).ok_or_else(forged)?,
            expires_at: number(expires).ok_or_else(forged)?,
            user: text_of(u).ok_or_else(forged)?,
            device: text_of(d).ok_or_else(forged)?,
            promised_ms: match promised {
                Some(p) => Some(number(p).ok_or_else(forged)?),
                None => None,
            },
        };
        let tag = hex::decode(tag).map_err(|_| forged())?;
        hmac::verify(key, ticket.message().as_bytes(), &tag).map_err(|_| forged())?;
        if ticket.user != user {
            return Err(bad_ticket("the queue ticket is another user's"));
        }
        if ticket.device != device {
            return Err(bad_ticket("the queue ticket was given to another device (x-device-id)"));
        }
        if now > ticket.expires_at {
            return Err(bad_ticket("the queue ticket has expired: ask again without it"));
        }
        Ok(ticket)
    }
}

// ---------------------------------------------------------------------------------------------
// The decision (pure).

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
pub fn check_window(campaign: &Campaign, now: DateTime<Utc>) -> Result<(), Denial> {
    let room = &campaign.waiting_room;
    if room.enabled && room.pre_queue_secs > 0 {
        let opens = campaign.starts_at.to_utc() - chrono::Duration::seconds(i64::from(room.pre_queue_secs));
        if now >= opens && now < campaign.starts_at.to_utc() {
            return Ok(());
        }
    }
    window::check(campaign, now)
}

// ---------------------------------------------------------------------------------------------
// With Redis: entering the room, presenting a ticket, counting arrivals.

/// What the room says to a token request.
#[derive(Debug, Clone, PartialEq)]
pub enum Pass {
    /// The room is off: go on as before.
    Open,
    /// Admitted: go on to the token; `ticket` (renewed) goes with it, for another token within
    /// the session.
    Admitted {
        /// The renewed ticket.
        ticket: String,
        /// Until the session ends, in seconds.
        session_left_secs: u64,
        /// The first admission of a place (the ticket presented was a waiting one, the request
        /// was held until its turn, or came without a ticket; not a place admitted before), if
        /// it is.
        first: Option<Admission>,
        /// How long the request was held until its turn (admitted in place), ms, if it was.
        held_ms: Option<i64>,
    },
    /// Not yet: the `WAITING` answer.
    Waiting(Value),
}

/// An admission to record once its token is issued ([`RoomStats::admitted`]): the presented
/// ticket was given while it waited, and its position promised admission at `promised_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// Unix ms the schedule promised (every `WAITING` answer's `eta_at_ms` for the position).
    pub promised_ms: i64,
}

/// A `WAITING` answer for a drawn position: where it stands and when to come back.
struct Told {
    message: &'static str,
    /// The ticket to present again (`null` if there is none).
    ticket: Value,
    position: u64,
    serving: u64,
    ahead: u64,
    /// Until it is let in, ms: `Retry-After` follows ([`retry_after_secs`]).
    eta_ms: i64,
}

impl Told {
    /// Its JSON answer at `now_ms`, a ticket living `ttl_secs`.
    fn answer(self, now_ms: i64, ttl_secs: u32) -> Value {
        json!({
            "code": Code::Waiting,
            "message": self.message,
            "ticket": self.ticket,
            "pre_queue": false,
            "start_draw": false,
            "after_draw": false,
            "position": self.position,
            "serving": self.serving,
            "ahead": self.ahead,
            "eta_ms": self.eta_ms,
            "eta_at_ms": now_ms + self.eta_ms,
            "retry_after": retry_after_secs(self.eta_ms),
            "expires_in": ttl_secs,
        })
    }
}

/// The `WAITING` answer of a late first admission at `position` in a second whose admissions are
/// full (at `now_ms`; `promised_ms` its promise): come back in the next second with the ticket
/// presented (its wait is still the first; its session counts from its turn), or, asked without
/// one, with a waiting ticket for the place, dated before its promise, so that presenting it is a
/// first admission, paced as this one.
fn full_second(
    key: &hmac::Key,
    campaign: &Campaign,
    who: Asker<'_>,
    position: u64,
    now_ms: i64,
    promised_ms: i64,
) -> Told {
    let ticket = match who.ticket {
        Some(t) => String::from_utf8_lossy(t).into_owned(),
        None => Ticket {
            campaign: campaign.id.clone(),
            user: who.user.to_string(),
            device: who.device.to_string(),
            place: RoomPlace::Position(position),
            issued_at: (promised_ms - 1).div_euclid(1000),
            expires_at: now_ms.div_euclid(1000) + i64::from(campaign.waiting_room.ticket_ttl_secs),
            promised_ms: None,
        }
        .sign(key),
    };
    let start = campaign.starts_at.timestamp_millis();
    Told {
        message: "this second's admissions are full: present the ticket again after retry_after seconds",
        ticket: ticket.into(),
        position,
        serving: Schedule::of(&campaign.waiting_room).serving(now_ms - start),
        ahead: 0,
        eta_ms: 1000 - now_ms.rem_euclid(1000),
    }
}

/// Who asks, for [`WaitingRoom::pass`].
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    /// The buyer (the verified login's user).
    pub user: &'a str,
    /// Their device.
    pub device: &'a str,
    /// The ticket presented, if any.
    pub ticket: Option<&'a [u8]>,
    /// Whether the request brings its captcha's answer (a challenge and its answer, or a
    /// provider's token): only such a request is held until a turn that is near
    /// ([`ADMIT_IN_PLACE_MS`]); one without would be refused at the captcha once admitted.
    pub brings_work: bool,
    /// When the request reached the proxy (`crate::edge::Head::arrived`): the pre-queue and
    /// the start draw take a buyer by it (`room.lua` clamps it to Redis's clock).
    pub arrived: DateTime<Utc>,
}

/// The waiting room's Redis side, and the lotteries this process has seen closed.
pub struct WaitingRoom {
    pool: Pool,
    scripts: Scripts,
    timeout: Duration,
    /// Campaign and start (unix ms) -> its lotteries, once closed.
    closed: Mutex<HashMap<(String, i64), Closed>>,
    rates: ArrivalRates,
    stats: RoomStats,
    /// Campaign -> its first admissions this second ([`Pace`]).
    paces: Mutex<HashMap<String, Pace>>,
}

impl std::fmt::Debug for WaitingRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitingRoom").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

fn degraded() -> Denial {
    Denial::new(Code::ServiceDegraded, "cannot reach the waiting room now; try again").retry_after(1)
}

/// The start draw's end, unix ms: the start plus `start_draw_ms`.
pub fn draw_ends_at_ms(campaign: &Campaign) -> i64 {
    campaign.starts_at.timestamp_millis() + i64::from(campaign.waiting_room.start_draw_ms)
}

impl WaitingRoom {
    /// Over `pool` and the loaded `scripts`, each call bounded by `timeout`.
    pub fn new(pool: Pool, scripts: Scripts, timeout: Duration) -> Self {
        Self {
            pool,
            scripts,
            timeout,
            closed: Mutex::new(HashMap::new()),
            rates: ArrivalRates::default(),
            stats: RoomStats::default(),
            paces: Mutex::new(HashMap::new()),
        }
    }

    /// The arrival rates this process has counted.
    pub fn rates(&self) -> &ArrivalRates {
        &self.rates
    }

    /// What the room did, per campaign (for metrics).
    pub fn stats(&self) -> &RoomStats {
        &self.stats
    }

    /// What this process knows of `campaign`'s lotteries.
    fn known(&self, campaign: &Campaign) -> Closed {
        let key = (campaign.id.clone(), campaign.starts_at.timestamp_millis());
        self.closed.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied().unwrap_or_default()
    }

    /// One `room.lua` call for `who` (its arrival judged by the script) at `now_ms`.
    async fn enter(
        &self,
        campaign: &Campaign,
        who: Asker<'_>,
        now_ms: i64,
        renew: Option<RoomPlace>,
    ) -> Result<(RoomPlace, Closed), Denial> {
        let room = &campaign.waiting_room;
        let start = campaign.starts_at.timestamp_millis();
        let entry = RoomEntry {
            campaign: &campaign.id,
            user: who.user,
            arrived_ms: who.arrived.timestamp_millis(),
            starts_at_ms: start,
            serving: Schedule::of(room).serving(now_ms - start),
            renew,
            expire_at_ms: campaign.ends_at.timestamp_millis() + i64::from(room.ticket_ttl_secs) * 1000,
            draw_ends_at_ms: draw_ends_at_ms(campaign),
            rates: (room.admit_per_sec, room.draw_return_per_sec),
        };
        let call = self.scripts.room_enter(self.pool.next_connected(), &entry);
        let out = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                tracing::warn!(campaign = %campaign.id, error = %e, "room.lua failed");
                return Err(degraded());
            }
            Err(_) => return Err(degraded()),
        };
        let said = Closed { pre: out.size, draw: out.draw };
        let closed = {
            let mut all = self.closed.lock().unwrap_or_else(|e| e.into_inner());
            let known = all.entry((campaign.id.clone(), start)).or_default();
            *known = known.merge(said);
            *known
        };
        self.stats.saw(&campaign.id, out.place, closed);
        self.stats.issued(&campaign.id, out.issued);
        Ok((out.place, closed))
    }

    /// Whether `user`'s admission at `position`, at `now_ms`, promised at `promised_ms`, goes
    /// through (`lua/admit.lua`, across every gateway): the place's first admission is counted
    /// in this second, and a late one waits when the second's are full; the same place admitted
    /// again is not counted again. When Redis does not answer in time, this process's own count
    /// ([`Pace`]) decides, counting every admission it lets through.
    async fn paced(
        &self,
        campaign: &Campaign,
        user: &str,
        position: u64,
        now_ms: i64,
        promised_ms: i64,
    ) -> Admitted {
        let room = &campaign.waiting_room;
        let (late_ms, rate) = (now_ms - promised_ms, room.admit_per_sec);
        let admit = Admit {
            campaign: &campaign.id,
            second: now_ms.div_euclid(1000),
            late: late_ms >= LATE_ADMISSION_MS,
            admit_per_sec: rate,
            user,
            position,
            expire_at_ms: campaign.ends_at.timestamp_millis() + i64::from(room.ticket_ttl_secs) * 1000,
        };
        let call = self.scripts.admit(self.pool.next_connected(), &admit);
        match tokio::time::timeout(self.timeout, call).await {
            // Every gateway's admissions of the second: the bound across N gateways.
            Ok(Ok(across)) => return across,
            Ok(Err(e)) => {
                tracing::warn!(campaign = %campaign.id, error = %e, "admit.lua failed: this process's pace decides");
            }
            Err(_) => {}
        }
        let mut paces = self.paces.lock().unwrap_or_else(|e| e.into_inner());
        let pace = match paces.get_mut(&campaign.id) {
            Some(pace) => pace,
            None => paces.entry(campaign.id.clone()).or_default(),
        };
        if pace.admits(now_ms, late_ms, rate) {
            Admitted::First
        } else {
            Admitted::Wait
        }
    }

    /// The room's answer to a token request of `who` at `now`, keys from `key`: [`Pass::Open`]
    /// when the room is off; otherwise the presented ticket is checked (`BAD_TICKET`) or a
    /// place taken (one `room.lua` call), and the place's turn decides. A turn at most
    /// [`ADMIT_IN_PLACE_MS`] away is waited for here when the request brings its work.
    pub async fn pass(
        &self,
        key: &hmac::Key,
        campaign: &Campaign,
        who: Asker<'_>,
        now: DateTime<Utc>,
    ) -> Result<Pass, Denial> {
        let room = &campaign.waiting_room;
        if !room.enabled {
            return Ok(Pass::Open);
        }
        let (now_s, now_ms) = (now.timestamp(), now.timestamp_millis());
        let start = campaign.starts_at.timestamp_millis();
        let lotteries = Lotteries::of(campaign);
        // When the presented ticket was issued (unix s), and whether it was a lottery's.
        let mut presented: Option<(i64, bool)> = None;
        // The promise the presented ticket keeps, ms after the start ([`MIN_PROMISE_MS`]).
        let mut kept: Option<i64> = None;
        let (mut place, mut closed, asked) = match who.ticket {
            Some(t) => {
                let ticket = Ticket::verify(key, t, &campaign.id, who.user, who.device, now_s)?;
                let lottery = !matches!(ticket.place, RoomPlace::Position(_));
                presented = Some((ticket.issued_at, lottery));
                kept = ticket.promised_ms.map(|at| at - start);
                let closed = self.known(campaign);
                self.stats.saw(&campaign.id, ticket.place, closed);
                (ticket.place, closed, false)
            }
            None => {
                let (place, closed) = self.enter(campaign, who, now_ms, None).await?;
                (place, closed, true)
            }
        };
        let mut placed = place_position(key, &campaign.id, place, closed, now_ms, lotteries);
        if placed == Placed::Unknown && !asked {
            // The first presentation of a lottery's ticket in this process after its draw: the
            // lottery's size, frozen (the buyer's place is the same one).
            (place, closed) = self.enter(campaign, who, now_ms, None).await?;
            placed = place_position(key, &campaign.id, place, closed, now_ms, lotteries);
        }
        let schedule = Schedule::of(room);
        let mut position = match placed {
            Placed::Position(p) => p,
            Placed::Undrawn { drawn_at_ms, lottery } => {
                return Ok(Pass::Waiting(self.waiting_undrawn(
                    key,
                    campaign,
                    who,
                    place,
                    drawn_at_ms,
                    lottery,
                    now_ms,
                )));
            }
            // Not drawn in Redis yet, though its time has come (`room.lua` was just asked): this
            // request arrived in the lottery's window and reached the script late, before any
            // arrival after the window closed it. The buyer's next request, arriving after the
            // window, closes it: come back now.
            Placed::Unknown => {
                let lottery = Lottery::of(place).unwrap_or(Lottery::StartDraw);
                return Ok(Pass::Waiting(
                    self.waiting_undrawn(key, campaign, who, place, now_ms, lottery, now_ms),
                ));
            }
        };
        let mut now_ms = now_ms;
        let mut turn = kept_turn(&schedule, position, now_ms - start, kept);
        if turn == Turn::Passed {
            if let Some(p) = self.rejoin(key, campaign, who, now_ms, place, position).await? {
                (position, kept) = (p, None);
                turn = self::turn(&schedule, p, now_ms - start);
            }
        }
        let promised_ms = (start + schedule.served_at(position)).max(kept.map_or(i64::MIN, |k| start + k));
        let (asked_ms, mut held) = (now_ms, None);
        while let Some(wait) = hold_ms(turn, who.brings_work) {
            // Admitted in place: its turn is nearer than a round trip to come back at it.
            tokio::time::sleep(Duration::from_millis(wait as u64 + 1)).await;
            now_ms = now_ms.max(Utc::now().timestamp_millis());
            held = Some(now_ms - asked_ms);
            turn = kept_turn(&schedule, position, now_ms - start, kept);
        }
        if kept.is_none() {
            // No promise shorter than the round trip to keep it.
            (turn, kept) = padded(turn, now_ms - start);
        }
        let mut first = match held {
            // Asked without a ticket: its place may be admitted for the first time (paced as a
            // waiting ticket's would be), or again (then not counted again).
            Some(_) => Some(Admission { promised_ms }),
            None if who.ticket.is_none() => Some(Admission { promised_ms }),
            None => first_admission(presented, promised_ms),
        };
        if matches!(turn, Turn::Admitted { .. }) && first.is_some() {
            match self.paced(campaign, who.user, position, now_ms, promised_ms).await {
                Admitted::First => {}
                Admitted::Again => first = None,
                Admitted::Wait => {
                    let told = full_second(key, campaign, who, position, now_ms, promised_ms);
                    return Ok(Pass::Waiting(told.answer(now_ms, room.ticket_ttl_secs)));
                }
            }
        }
        let issued_at = issued_at(turn, now_ms);
        let ticket = Ticket {
            campaign: campaign.id.clone(),
            user: who.user.to_string(),
            device: who.device.to_string(),
            place: RoomPlace::Position(position),
            issued_at,
            expires_at: issued_at + i64::from(room.ticket_ttl_secs),
            promised_ms: kept.filter(|_| matches!(turn, Turn::Waiting { .. })).map(|k| start + k),
        }
        .sign(key);
        Ok(match turn {
            Turn::Admitted { left_ms } => Pass::Admitted {
                ticket,
                session_left_secs: (left_ms.max(0) as u64).div_ceil(1000),
                first,
                held_ms: held,
            },
            Turn::Waiting { serving, ahead, eta_ms } => {
                let told = Told {
                    message:
                        "not your turn yet: present the ticket as X-Queue-Ticket after retry_after seconds",
                    ticket: ticket.into(),
                    position,
                    serving,
                    ahead,
                    eta_ms,
                };
                Pass::Waiting(told.answer(now_ms, room.ticket_ttl_secs))
            }
            Turn::Passed => Pass::Waiting(json!({
                "code": Code::Waiting,
                "message": "your turn has passed: ask again without the ticket",
                "ticket": Value::Null,
                "retry_after": 1,
            })),
        })
    }

    /// A new position at the back for `who`, whose session at `position` is over, held as `place`
    /// (the ticket's form or `room.lua`'s), if `room.lua` gives one. The script replaces the place
    /// it keeps only when named as it keeps it, and it keeps a lottery's place in its lottery's
    /// form (`a<n>`, `d<n>`, `q<n>`) after the draw, while the ticket renewed at the admission
    /// holds the position: when the script answers a lottery's place that stands at `position`,
    /// it is named so in a second call.
    async fn rejoin(
        &self,
        key: &hmac::Key,
        campaign: &Campaign,
        who: Asker<'_>,
        now_ms: i64,
        place: RoomPlace,
        position: u64,
    ) -> Result<Option<u64>, Denial> {
        let (mut again, closed) = self.enter(campaign, who, now_ms, Some(place)).await?;
        if again != place && Lottery::of(again).is_some() {
            let at = place_position(key, &campaign.id, again, closed, now_ms, Lotteries::of(campaign));
            if at == Placed::Position(position) {
                (again, _) = self.enter(campaign, who, now_ms, Some(again)).await?;
            }
        }
        Ok(match again {
            RoomPlace::Position(p) => Some(p),
            _ => None,
        })
    }

    /// The `WAITING` answer of a lottery's arrival before its draw (the pre-queue's at the
    /// start; the start draw's, and a late arrival's after it, when its buyer is asked back,
    /// `drawn_at_ms`): no position yet, come back then.
    #[allow(clippy::too_many_arguments)]
    fn waiting_undrawn(
        &self,
        key: &hmac::Key,
        campaign: &Campaign,
        who: Asker<'_>,
        place: RoomPlace,
        drawn_at_ms: i64,
        lottery: Lottery,
        now_ms: i64,
    ) -> Value {
        let room = &campaign.waiting_room;
        let now_s = now_ms.div_euclid(1000);
        let ticket = Ticket {
            campaign: campaign.id.clone(),
            user: who.user.to_string(),
            device: who.device.to_string(),
            place,
            issued_at: now_s,
            expires_at: now_s + i64::from(room.ticket_ttl_secs),
            promised_ms: None,
        }
        .sign(key);
        let to_draw = drawn_at_ms - now_ms;
        let message = match lottery {
            Lottery::StartDraw => "in the start draw: every place of those who came in the sale's first moments is drawn at random when it closes; present the ticket then",
            Lottery::PreQueue => "in the pre-queue: every place in it is drawn at random at the start; present the ticket then",
            Lottery::AfterDraw => "after the start draw: your place, first come first served, comes right after the drawn ones, known when the draw closes; present the ticket then",
        };
        let mut answer = json!({
            "code": Code::Waiting,
            "message": message,
            "ticket": ticket,
            "pre_queue": lottery == Lottery::PreQueue,
            "start_draw": lottery == Lottery::StartDraw,
            "after_draw": lottery == Lottery::AfterDraw,
            "drawn_at_ms": drawn_at_ms,
            "position": Value::Null,
            "ahead": Value::Null,
            "eta_ms": to_draw,
            "eta_at_ms": drawn_at_ms,
            "retry_after": retry_after_secs(to_draw),
            "expires_in": room.ticket_ttl_secs,
        });
        if lottery != Lottery::PreQueue {
            // The draw's window, for the page to say who is drawn; `drawn_at_ms` is when this
            // buyer is asked back to learn its place.
            answer["draw_ends_at_ms"] = draw_ends_at_ms(campaign).into();
        }
        answer
    }

    /// Counts one arrival of `campaign` at `now` across every gateway (`lua/arrivals.lua`,
    /// bounded by the timeout; a failure keeps the last rate), only when it has `[[pow_level]]`s.
    pub async fn arrive(&self, campaign: &Campaign, now: DateTime<Utc>) {
        if campaign.pow_levels.is_empty() {
            return;
        }
        let second = now.timestamp();
        let call = self.scripts.arrive(self.pool.next_connected(), &campaign.id, second);
        if let Ok(Ok(a)) = tokio::time::timeout(self.timeout, call).await {
            self.rates.record(&campaign.id, second, a.this_second.max(a.last_second));
        }
    }
}

/// Most ETA errors kept between two scrapes (the oldest are dropped beyond it).
const MAX_PENDING_ERRORS: usize = 4096;

/// What one campaign's room did in this process.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CampaignRoom {
    /// Places issued, as far as this process knows: the most `room.lua` last counted across
    /// every gateway, or a higher place this process was shown since.
    pub issued: u64,
    /// Admissions: tokens issued on a ticket given while it waited (once per wait).
    pub admitted: u64,
    /// How late each admission came after its promise, in ms, not read yet (negative: earlier,
    /// another gateway's clock ahead).
    pub late_ms: Vec<i64>,
}

/// Per campaign, what its room did in this process, for the gateway's metrics.
#[derive(Debug, Default)]
pub struct RoomStats {
    campaigns: Mutex<HashMap<String, CampaignRoom>>,
}

impl RoomStats {
    fn with(&self, campaign: &str, f: impl FnOnce(&mut CampaignRoom)) {
        let mut all = self.campaigns.lock().unwrap_or_else(|e| e.into_inner());
        match all.get_mut(campaign) {
            Some(c) => f(c),
            None => f(all.entry(campaign.to_string()).or_default()),
        }
    }

    /// A place given or presented, and what is known of the lotteries (a draw arrival comes
    /// after the pre-queue; a closed draw's places are all given).
    pub fn saw(&self, campaign: &str, place: RoomPlace, closed: Closed) {
        let p = match place {
            RoomPlace::Position(p) | RoomPlace::PreQueue(p) => p,
            RoomPlace::Draw(d) | RoomPlace::Late(d) => closed.pre.unwrap_or(0) + d,
        };
        let known = closed.draw.map_or(closed.pre.unwrap_or(0), |d| d.base + d.size);
        self.with(campaign, |c| c.issued = c.issued.max(p).max(known));
    }

    /// The places given so far, as `room.lua` read them across every gateway.
    pub fn issued(&self, campaign: &str, issued: u64) {
        self.with(campaign, |c| c.issued = c.issued.max(issued));
    }

    /// A token issued on the first admission of a wait, at `now_ms`.
    pub fn admitted(&self, campaign: &str, admission: Admission, now_ms: i64) {
        self.with(campaign, |c| {
            c.admitted += 1;
            if c.late_ms.len() >= MAX_PENDING_ERRORS {
                c.late_ms.remove(0);
            }
            c.late_ms.push(now_ms - admission.promised_ms);
        });
    }

    /// `campaign`'s counts, taking its ETA errors not read yet.
    pub fn take(&self, campaign: &str) -> CampaignRoom {
        let mut all = self.campaigns.lock().unwrap_or_else(|e| e.into_inner());
        let Some(c) = all.get_mut(campaign) else { return CampaignRoom::default() };
        CampaignRoom { issued: c.issued, admitted: c.admitted, late_ms: std::mem::take(&mut c.late_ms) }
    }
}

/// The queue's length at `now`: the places issued (as `room` knows them) minus the positions
/// the schedule has served; before the start, every pre-queue arrival.
pub fn queue_length(campaign: &Campaign, room: &CampaignRoom, now: DateTime<Utc>) -> u64 {
    let elapsed = now.timestamp_millis() - campaign.starts_at.timestamp_millis();
    room.issued.saturating_sub(Schedule::of(&campaign.waiting_room).serving(elapsed))
}

/// The arrival rate of each campaign as last counted in Redis by this process.
#[derive(Debug, Default)]
pub struct ArrivalRates {
    last: Mutex<HashMap<String, (i64, u64)>>,
}

impl ArrivalRates {
    /// Remembers `rate` arrivals per second of `campaign` counted in unix second `second`.
    pub fn record(&self, campaign: &str, second: i64, rate: u64) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let e = last.entry(campaign.to_string()).or_insert((second, rate));
        if second > e.0 || (second == e.0 && rate > e.1) {
            *e = (second, rate);
        }
    }

    /// The campaign's rate at unix second `now`: the last one counted, if it is at most 2 s
    /// old (a crowd that stopped arriving is no crowd).
    pub fn rate(&self, campaign: &str, now: i64) -> u64 {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.get(campaign).filter(|(s, _)| now - s <= 2).map_or(0, |(_, r)| *r)
    }

    /// The bits a challenge of `campaign` asks for at `now`.
    pub fn bits(&self, campaign: &Campaign, now: i64) -> u32 {
        let base = campaign.defense.pow_bits;
        if campaign.pow_levels.is_empty() {
            return base;
        }
        pow_bits(base, &campaign.pow_levels, self.rate(&campaign.id, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, b"room-key-0123456789")
    }

    fn schedule(rate: u64, max_active: Option<u64>, session_secs: i64) -> Schedule {
        Schedule { rate, max_active, session_ms: session_secs * 1000 }
    }

    #[test]
    fn late_first_admissions_are_paced_at_the_rate_and_on_time_ones_never() {
        let (rate, mut pace) = (3, Pace::default());
        let second = 1_764_000_000_000;
        // On time: always through, and counted.
        for i in 0..5 {
            assert!(pace.admits(second + i, LATE_ADMISSION_MS - 1, rate), "on time {i}");
        }
        // The second's admissions are over the rate: a late one waits for the next second.
        assert!(!pace.admits(second + 10, LATE_ADMISSION_MS, rate));
        assert!(!pace.admits(second + 999, 60_000, rate));
        // The next second: the rate's worth of late ones, then no more.
        let next = second + 1000;
        for i in 0..rate {
            assert!(pace.admits(next + i as i64, 5_000, rate), "late {i} of the next second");
        }
        assert!(!pace.admits(next + 500, 5_000, rate));
        assert!(pace.admits(next + 600, 0, rate), "on time, even then");
        // A backlog of 10 late ones presented every 100 ms drains at the rate, never above it.
        let mut pace = Pace::default();
        let mut per_second = std::collections::BTreeMap::new();
        let mut waiting = 10;
        for tick in 0..50 {
            let now = second + tick * 100;
            let mut left = 0;
            for _ in 0..waiting {
                if pace.admits(now, 2_000, rate) {
                    *per_second.entry(now / 1000).or_insert(0) += 1;
                } else {
                    left += 1;
                }
            }
            waiting = left;
        }
        assert_eq!(waiting, 0, "all admitted in the end");
        assert!(per_second.values().all(|&n| n <= rate), "{per_second:?}");
    }

    #[test]
    fn serving_advances_at_the_rate_from_the_start() {
        let s = schedule(10, None, 60);
        assert_eq!(s.serving(-5000), 0);
        assert_eq!(s.serving(0), 0);
        assert_eq!(s.serving(99), 0);
        assert_eq!(s.serving(100), 1);
        assert_eq!(s.serving(1000), 10);
        assert_eq!(s.serving(60_000), 600);
        assert_eq!(s.served_at(1), 100);
        assert_eq!(s.served_at(10), 1000);
        assert_eq!(schedule(3, None, 60).served_at(1), 334, "ceil(1000/3)");
    }

    #[test]
    fn max_active_caps_the_admitted_within_any_session() {
        // 10/s for 10 s sessions would admit 100 at once; max_active 30 holds it at 30.
        let s = schedule(10, Some(30), 10);
        assert_eq!(s.serving(3000), 30);
        assert_eq!(s.serving(9999), 30, "full until the first session ends");
        assert_eq!(s.serving(10_000), 30);
        assert_eq!(s.serving(10_100), 31);
        assert_eq!(s.serving(13_000), 60);
        assert_eq!(s.serving(25_000), 90);
        // A cap above the rate times the session never binds.
        assert_eq!(schedule(10, Some(100), 10).serving(37_000), schedule(10, None, 10).serving(37_000));
        for (rate, m, session) in
            [(10, Some(30), 10), (7, Some(5), 3), (3, Some(100), 10), (1000, Some(999), 1)]
        {
            let s = schedule(rate, m, session);
            let mut last = 0;
            for t in (0..40_000).step_by(37) {
                let now = s.serving(t);
                assert!(now >= last, "never goes back");
                last = now;
                let before = s.serving(t - s.session_ms);
                assert!(now - before <= m.unwrap(), "{rate} {m:?} {session}: {now} - {before} at {t}");
            }
            for p in 1..200 {
                let at = s.served_at(p);
                assert!(s.serving(at) >= p, "{p} served at {at}");
                assert!(s.serving(at - 1) < p, "{p} not served before {at}");
            }
        }
    }

    #[test]
    fn a_turn_waits_then_is_admitted_for_a_session_then_passes() {
        let s = schedule(10, None, 60);
        assert_eq!(turn(&s, 25, 1000), Turn::Waiting { serving: 10, ahead: 14, eta_ms: 1500 });
        assert_eq!(turn(&s, 25, 2500), Turn::Admitted { left_ms: 60_000 });
        assert_eq!(turn(&s, 25, 62_499), Turn::Admitted { left_ms: 1 });
        assert_eq!(turn(&s, 25, 62_500), Turn::Passed);
        assert_eq!(turn(&s, 1, -10_000), Turn::Waiting { serving: 0, ahead: 0, eta_ms: 10_100 });
        assert_eq!((retry_after_secs(1500), retry_after_secs(0), retry_after_secs(600_000)), (2, 1, 30));
    }

    #[test]
    fn an_admission_is_counted_once_per_wait() {
        let s = schedule(10, None, 60);
        let promised = s.served_at(25); // 2500 ms after a start at 0
                                        // Waiting tickets, issued up to just before the promise, are waiting ones.
        for now in [0, 1000, 2000, 2499] {
            let issued = issued_at(turn(&s, 25, now), now);
            assert_eq!(
                first_admission(Some((issued, false)), promised),
                Some(Admission { promised_ms: promised })
            );
        }
        // The ticket renewed at the admission, even in the promise's own second, is not.
        for now in [2500, 2501, 2999, 3000, 60_000] {
            let issued = issued_at(turn(&s, 25, now), now);
            assert!(issued * 1000 >= promised, "{now}: issued {issued}");
            assert_eq!(first_admission(Some((issued, false)), promised), None, "{now}");
        }
        assert!(first_admission(Some((5, true)), promised).is_some(), "a pre-queue ticket waited");
        assert_eq!(first_admission(None, promised), None, "no ticket: not counted");
    }

    #[test]
    fn room_stats_keep_the_highest_place_and_the_errors_until_read() {
        let stats = RoomStats::default();
        let none = Closed::default();
        stats.saw("c1", RoomPlace::PreQueue(4), none);
        stats.saw("c1", RoomPlace::Position(2), Closed { pre: Some(6), draw: None });
        stats.saw("c1", RoomPlace::Position(9), none);
        stats.saw("c1", RoomPlace::Position(3), none);
        stats.saw("c1", RoomPlace::Draw(2), Closed { pre: Some(6), draw: None });
        stats.saw("c1", RoomPlace::Draw(1), Closed { pre: Some(6), draw: Some(Drawn { base: 6, size: 3 }) });
        stats.admitted("c1", Admission { promised_ms: 1000 }, 1040);
        stats.admitted("c1", Admission { promised_ms: 2000 }, 1990);
        let read = stats.take("c1");
        assert_eq!(read, CampaignRoom { issued: 9, admitted: 2, late_ms: vec![40, -10] });
        stats.issued("c1", 12);
        stats.issued("c1", 11);
        let again = CampaignRoom { issued: 12, admitted: 2, late_ms: vec![] };
        assert_eq!(stats.take("c1"), again, "room.lua's count; errors read once");
        assert_eq!(stats.take("c2"), CampaignRoom::default());
    }

    #[test]
    fn the_shuffle_is_a_keyed_permutation() {
        for size in [1u64, 2, 3, 5, 16, 17, 100, 1000] {
            let mut seen: Vec<u64> = (1..=size).map(|a| shuffle(&key(), "c1", size, a)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (1..=size).collect::<Vec<_>>(), "a bijection of 1..={size}");
        }
        let order = |k: &hmac::Key, c: &str| (1..=100).map(|a| shuffle(k, c, 100, a)).collect::<Vec<_>>();
        assert_ne!(order(&key(), "c1"), (1..=100).collect::<Vec<_>>(), "not the arrival order");
        assert_ne!(order(&key(), "c1"), order(&key(), "c2"), "another campaign, another order");
        let other = hmac::Key::new(hmac::HMAC_SHA256, b"another");
        assert_ne!(order(&key(), "c1"), order(&other, "c1"), "another key, another order");
        // Arriving last is no worse than arriving first: the last tenth of 1000 arrivals land
        // all over the positions, not at the back (mean near the middle).
        let late: u64 = (901..=1000).map(|a| shuffle(&key(), "c1", 1000, a)).sum::<u64>() / 100;
        assert!((300..=700).contains(&late), "the late arrivals' mean position is {late}");
    }

    #[test]
    fn the_start_draw_is_another_keyed_permutation() {
        for size in [1u64, 2, 7, 64, 65, 1000] {
            let mut seen: Vec<u64> = (1..=size).map(|a| draw_shuffle(&key(), "c1", size, a)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (1..=size).collect::<Vec<_>>(), "a bijection of 1..={size}");
        }
        let drawn: Vec<u64> = (1..=100).map(|a| draw_shuffle(&key(), "c1", 100, a)).collect();
        let pre: Vec<u64> = (1..=100).map(|a| shuffle(&key(), "c1", 100, a)).collect();
        assert_ne!(drawn, pre, "the two lotteries of a campaign are drawn apart");
        assert_ne!(drawn, (1..=100).collect::<Vec<_>>(), "not the arrival order");
        // The first tenth of the arrivals (a script firing at T+0) is not at the front: its mean
        // place is near the middle.
        let first: u64 = (1..=100).map(|a| draw_shuffle(&key(), "c1", 1000, a)).sum::<u64>() / 100;
        assert!((300..=700).contains(&first), "the first arrivals' mean place is {first}");
    }

    #[test]
    fn a_place_is_positioned_once_its_lottery_is_drawn() {
        let (start, end) = (10_000, 11_000);
        // Drawn buyers asked back 4 a second: the d-th 250 ms × (d − 1) after the draw's close,
        // its end plus the longest an arrival may be claimed before Redis's clock.
        let lotteries = Lotteries::new(start, end, 4);
        let close = end + protocol::timing::ARRIVAL_CLAIM_MAX_MS;
        assert_eq!(lotteries.draw_close_ms, close);
        assert_eq!(Lotteries::new(start, start, 4).draw_close_ms, start, "no draw: nothing waits");
        let at = |place, closed, now| place_position(&key(), "c1", place, closed, now, lotteries);
        let none = Closed::default();
        let pre = Closed { pre: Some(5), draw: None };
        let both = Closed { pre: Some(5), draw: Some(Drawn { base: 8, size: 4 }) };
        assert_eq!(at(RoomPlace::Position(42), none, 0), Placed::Position(42));
        // The pre-queue: drawn at the start.
        let undrawn = |drawn_at_ms, lottery| Placed::Undrawn { drawn_at_ms, lottery };
        assert_eq!(at(RoomPlace::PreQueue(2), none, 9_999), undrawn(start, Lottery::PreQueue));
        assert_eq!(at(RoomPlace::PreQueue(2), none, start), Placed::Unknown, "drawn, not known here yet");
        assert_eq!(at(RoomPlace::PreQueue(2), pre, start), Placed::Position(shuffle(&key(), "c1", 5, 2)));
        // The start draw: the first arrival asked back at its close, the third 500 ms later, and
        // told nothing more before then, even once the draw is known.
        let draw = Lottery::StartDraw;
        assert_eq!(at(RoomPlace::Draw(1), pre, 10_500), undrawn(close, draw));
        assert_eq!(at(RoomPlace::Draw(3), pre, 10_500), undrawn(close + 500, draw));
        assert_eq!(at(RoomPlace::Draw(3), both, close + 499), undrawn(close + 500, draw));
        assert_eq!(at(RoomPlace::Draw(1), pre, close), Placed::Unknown);
        assert_eq!(at(RoomPlace::Draw(3), pre, close + 500), Placed::Unknown);
        let drawn = at(RoomPlace::Draw(3), both, close + 500);
        assert_eq!(drawn, Placed::Position(8 + draw_shuffle(&key(), "c1", 4, 3)));
        // An arrival after the window, before the close: right after the drawn places, first
        // come first served, told at the same pace.
        assert_eq!(at(RoomPlace::Late(2), pre, end + 10), undrawn(close + 250, Lottery::AfterDraw));
        assert_eq!(at(RoomPlace::Late(2), pre, close + 250), Placed::Unknown);
        assert_eq!(at(RoomPlace::Late(2), both, close + 250), Placed::Position(8 + 4 + 2));
        let mut places: Vec<u64> = (1..=4)
            .map(|d| match at(RoomPlace::Draw(d), both, close + 1000) {
                Placed::Position(p) => p,
                other => panic!("{other:?}"),
            })
            .collect();
        places.sort_unstable();
        assert_eq!(places, vec![9, 10, 11, 12], "base + 1 ..= base + size, each once");
    }

    #[test]
    fn the_drawn_are_asked_back_at_a_pace_from_the_close_and_no_turn_comes_before_its_buyer_is() {
        let l = |return_per_sec| Lotteries::new(0, 1000, return_per_sec);
        let close = 1000 + protocol::timing::ARRIVAL_CLAIM_MAX_MS;
        assert_eq!(l(1000).draw_return_at_ms(1), close);
        assert_eq!(l(1000).draw_return_at_ms(2), close + 1);
        assert_eq!(l(3).draw_return_at_ms(2), close + 333);
        assert_eq!(l(0).draw_return_at_ms(3), close + 2000, "a pace of 0 is read as 1 a second");
        assert_eq!(l(1).draw_return_at_ms(u64::MAX), i64::MAX, "no overflow");
        // `room.lua`'s base for a draw of m, and late arrivals after it, closed at `after` ms
        // past the close: the serving line then plus ceil((m + late) · rate / pace), or the
        // pre-queue's size if higher. Every drawn or late place's turn then comes at or after its
        // buyer is asked back, whatever the pace, the rate, the cap or the pre-queue.
        for (rate, max_active, pace, m, late, pre, after) in [
            (500, None, 5000, 5000, 0, 0, 0),
            (500, None, 5000, 5000, 800, 0, 3000),
            (500, None, 500, 37, 5, 0, 0),
            (1, None, 10, 20, 3, 2, 400),
            (7, Some(5), 70, 300, 40, 3, 2500),
            (1000, Some(999), 20_000, 10_000, 700, 1500, 0),
            (3, None, 1, 10, 10, 0, 0),
        ] {
            let s = Schedule { rate, max_active, session_ms: 10_000 };
            let lotteries = Lotteries::new(0, 1000, pace);
            let told = ((m + late) * rate).div_ceil(pace);
            let base = pre.max(s.serving(lotteries.draw_close_ms + after) + told);
            let places = (1..=m)
                .map(|d| (base + draw_shuffle(&key(), "c1", m, d), d))
                .chain((1..=late).map(|n| (base + m + n, n)));
            for (p, number) in places {
                let (turn_at, back_at) = (s.served_at(p), lotteries.draw_return_at_ms(number));
                assert!(
                    turn_at >= back_at,
                    "{rate}/s, pace {pace}, {m} drawn: place {p} at {turn_at} < {back_at}"
                );
            }
        }
    }

    #[test]
    fn the_arrival_claim_bound_covers_the_longest_a_token_request_waits_before_room_lua() {
        // The body's read, then one Redis call bounded as the room's calls are (the undo's
        // timeout of the longest reservation timeout a conf may have).
        let most = protocol::timing::undo_timeout(Duration::from_millis(
            protocol::timing::RESERVE_TIMEOUT_MAX_MS as u64,
        ));
        assert_eq!(
            crate::serve::flash_sale::BODY_TIMEOUT + most,
            Duration::from_millis(protocol::timing::ARRIVAL_CLAIM_MAX_MS as u64)
        );
    }

    #[test]
    fn a_near_turn_is_held_only_with_the_work() {
        let waiting = |eta_ms| Turn::Waiting { serving: 1, ahead: 0, eta_ms };
        assert_eq!(hold_ms(waiting(3), true), Some(3));
        assert_eq!(hold_ms(waiting(ADMIT_IN_PLACE_MS), true), Some(ADMIT_IN_PLACE_MS));
        assert_eq!(hold_ms(waiting(ADMIT_IN_PLACE_MS + 1), true), None, "far enough to come back");
        assert_eq!(hold_ms(waiting(3), false), None, "no answer to the captcha: told to wait");
        assert_eq!(hold_ms(Turn::Admitted { left_ms: 5 }, true), None);
        assert_eq!(hold_ms(Turn::Passed, true), None);
        // Held that long, the turn has come: the schedule's promise is reached.
        let s = schedule(500, None, 60);
        let (p, t) = (17, 30);
        let Turn::Waiting { eta_ms, .. } = turn(&s, p, t) else { panic!() };
        assert!(matches!(turn(&s, p, t + hold_ms(turn(&s, p, t), true).unwrap()), Turn::Admitted { .. }));
        assert_eq!(t + eta_ms, s.served_at(p));
    }

    #[test]
    fn no_wait_is_promised_shorter_than_a_round_trip_and_the_ticket_keeps_the_promise() {
        let s = schedule(500, None, 60);
        // Position 17 at 30 ms: its turn 4 ms away. Padded to MIN_PROMISE_MS, kept from 30 ms.
        let (p, t) = (17, 30);
        let (answer, promise) = padded(turn(&s, p, t), t);
        assert!(matches!(answer, Turn::Waiting { eta_ms: MIN_PROMISE_MS, .. }), "{answer:?}");
        assert_eq!(promise, Some(t + MIN_PROMISE_MS));
        // The ticket keeps it: waiting until the promise, before the turn has come and after,
        // then in.
        let before = kept_turn(&s, p, t + 1, promise);
        assert!(matches!(before, Turn::Waiting { eta_ms: 249, .. }), "{before:?}");
        let waiting = kept_turn(&s, p, t + 100, promise);
        assert!(matches!(waiting, Turn::Waiting { ahead: 0, eta_ms: 150, .. }), "{waiting:?}");
        assert_eq!(hold_ms(waiting, true), None, "150 ms away: not held yet");
        let near = kept_turn(&s, p, t + 200, promise);
        assert_eq!(hold_ms(near, true), Some(50), "held until the promise, not let in at once");
        assert!(matches!(kept_turn(&s, p, t + MIN_PROMISE_MS, promise), Turn::Admitted { .. }));
        assert_eq!(kept_turn(&s, p, t + 100, None), turn(&s, p, t + 100), "no promise: the turn's");
        // A wait already that long is not padded, nor is an admission.
        let far = turn(&s, 400, t);
        assert_eq!(padded(far, t), (far, None));
        let admitted = Turn::Admitted { left_ms: 5 };
        assert_eq!(padded(admitted, t), (admitted, None));
    }

    #[test]
    fn a_ticket_keeps_its_promise_signed() {
        let now = 1_700_000_000;
        let promised =
            Ticket { promised_ms: Some(now * 1000 + 250), ..ticket(RoomPlace::Position(42), now + 60) };
        let t = promised.sign(&key());
        assert_eq!(t.split('.').count(), 7, "{t}");
        let check = |t: &str| Ticket::verify(&key(), t.as_bytes(), "c1", "u1", "d1", now);
        assert_eq!(check(&t).unwrap(), promised);
        let sooner = t.replacen(&format!(".{}.", now * 1000 + 250), &format!(".{}.", now * 1000), 1);
        assert_ne!(sooner, t);
        assert_eq!(check(&sooner).unwrap_err().code, Code::BadTicket, "promise moved up");
        let dropped = t.replacen(&format!(".{}", now * 1000 + 250), "", 1);
        assert_eq!(dropped.split('.').count(), 6);
        assert_eq!(check(&dropped).unwrap_err().code, Code::BadTicket, "promise taken out");
        let junk = t.replacen(&format!(".{}.", now * 1000 + 250), ".25x.", 1);
        assert_eq!(check(&junk).unwrap_err().code, Code::BadTicket, "not a number");
    }

    fn ticket(place: RoomPlace, expires_at: i64) -> Ticket {
        Ticket {
            campaign: "c1".into(),
            user: "u1".into(),
            device: "d1".into(),
            place,
            issued_at: 1_700_000_000,
            expires_at,
            promised_ms: None,
        }
    }

    #[test]
    fn a_ticket_verifies_only_for_its_campaign_user_device_and_life() {
        let now = 1_700_000_000;
        let t = ticket(RoomPlace::Position(42), now + 60).sign(&key());
        let check =
            |t: &str, c: &str, u: &str, d: &str, at: i64| Ticket::verify(&key(), t.as_bytes(), c, u, d, at);
        assert_eq!(check(&t, "c1", "u1", "d1", now).unwrap(), ticket(RoomPlace::Position(42), now + 60));
        assert!(check(&t, "c1", "u1", "d1", now + 60).is_ok(), "valid up to its expiry");
        let code = |r: Result<Ticket, Denial>| r.unwrap_err();
        for (d, why) in [
            (code(check(&t, "c2", "u1", "d1", now)), "another campaign"),
            (code(check(&t, "c1", "u2", "d1", now)), "another user"),
            (code(check(&t, "c1", "u1", "d2", now)), "another device"),
            (code(check(&t, "c1", "u1", "d1", now + 61)), "expired"),
        ] {
            assert_eq!(d.code, Code::BadTicket, "{why}");
            assert_eq!(Code::BadTicket.status(), 403);
        }
        assert!(code(check(&t, "c1", "u2", "d1", now)).message.contains("another user"));
        assert!(code(check(&t, "c1", "u1", "d2", now)).message.contains("another device"));
        assert!(code(check(&t, "c1", "u1", "d1", now + 61)).message.contains("expired"));
        // Forged: a better place, a longer life, another user written in, another key.
        let forged = t.replacen("p42.", "p1.", 1);
        assert_eq!(code(check(&forged, "c1", "u1", "d1", now)).code, Code::BadTicket, "place moved up");
        let longer = t.replacen(&format!(".{}.", now + 60), &format!(".{}.", now + 6000), 1);
        assert_eq!(code(check(&longer, "c1", "u1", "d1", now + 100)).code, Code::BadTicket, "life extended");
        let as_u2 = t.replacen(&hex::encode("u1"), &hex::encode("u2"), 1);
        assert_eq!(code(check(&as_u2, "c1", "u2", "d1", now)).code, Code::BadTicket, "user written in");
        let other = hmac::Key::new(hmac::HMAC_SHA256, b"another");
        let theirs = ticket(RoomPlace::Position(1), now + 60).sign(&other);
        assert_eq!(code(check(&theirs, "c1", "u1", "d1", now)).code, Code::BadTicket, "another key");
        for junk in ["", "p1", "p1.2.3.4.5.6", "p1.1.1.75.64.zz", "x1.1.1.7531.6431.00", "\u{ff}"] {
            assert_eq!(code(check(junk, "c1", "u1", "d1", now)).code, Code::BadTicket, "{junk:?}");
        }
        let pre = ticket(RoomPlace::PreQueue(7), now + 60).sign(&key());
        assert_eq!(check(&pre, "c1", "u1", "d1", now).unwrap().place, RoomPlace::PreQueue(7));
    }

    #[test]
    fn arrival_rates_pick_the_bits_and_fade() {
        let text = "id = \"c1\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\n\
                    starts_at = 2026-12-01T10:00:00Z\nends_at = 2026-12-01T11:00:00Z\n\
                    [[pow_level]]\narrivals_per_sec = 100\nbits = 20\n";
        let c = Campaign::parse(std::path::Path::new("c1.toml"), text).unwrap();
        let rates = ArrivalRates::default();
        assert_eq!(rates.bits(&c, 1000), 16, "no count yet: the base");
        rates.record("c1", 1000, 150);
        rates.record("c1", 1000, 120);
        assert_eq!(rates.rate("c1", 1000), 150, "the highest count of a second");
        assert_eq!(rates.bits(&c, 1001), 20);
        assert_eq!(rates.bits(&c, 1003), 16, "a count older than 2 s fades");
        rates.record("c1", 1004, 99);
        assert_eq!(rates.bits(&c, 1004), 16);
    }

    #[test]
    fn the_pre_queue_window_opens_the_token_endpoint_before_the_start_only_with_the_room() {
        let text = "id = \"c1\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\n\
                    starts_at = 2026-12-01T10:00:00Z\nends_at = 2026-12-01T11:00:00Z\n";
        let off = Campaign::parse(std::path::Path::new("c1.toml"), text).unwrap();
        let on = Campaign::parse(
            std::path::Path::new("c1.toml"),
            &format!("{text}[waiting_room]\nadmit_per_sec = 5\npre_queue_secs = 60\n"),
        )
        .unwrap();
        let start = on.starts_at.to_utc();
        let at = |s: i64| start + chrono::Duration::seconds(s);
        assert!(check_window(&on, at(-60)).is_ok());
        assert!(check_window(&on, at(-1)).is_ok());
        assert_eq!(check_window(&on, at(-61)).unwrap_err().code, Code::NotStarted);
        assert_eq!(check_window(&off, at(-1)).unwrap_err().code, Code::NotStarted);
        assert!(check_window(&on, at(0)).is_ok());
        assert_eq!(check_window(&on, at(3600)).unwrap_err().code, Code::Ended);
    }
}
