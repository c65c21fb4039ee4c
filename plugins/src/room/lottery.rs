//! The pre-queue shuffle (pure).

use super::{draw_ends_at_ms, Turn, ADMIT_IN_PLACE_MS};
use protocol::campaign::Campaign;
use protocol::scripts::Drawn;
use protocol::scripts::RoomPlace;
use ring::hmac;

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
    pub(super) fn merge(self, other: Closed) -> Closed {
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
