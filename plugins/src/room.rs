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

mod lottery;
mod schedule;
mod stats;
#[cfg(test)]
mod tests;
mod ticket;
mod turn;

pub use lottery::*;
pub use schedule::*;
pub use stats::*;
pub use ticket::*;
pub use turn::*;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fred::clients::Pool;
use protocol::campaign::Campaign;
use protocol::codes::Code;
use protocol::scripts::{Admit, Admitted, RoomEntry, RoomPlace, Scripts};
use ring::hmac;
use serde_json::{json, Value};

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
        let start = campaign.starts_at.timestamp_millis();
        let (place, mut position, presented, mut kept) = match self.locate(key, campaign, who, now).await? {
            Located::At { place, position, presented, kept } => (place, position, presented, kept),
            Located::Told(pass) => return Ok(pass),
        };
        let schedule = Schedule::of(room);
        let now_ms = now.timestamp_millis();
        let mut turn = kept_turn(&schedule, position, now_ms - start, kept);
        if turn == Turn::Passed {
            if let Some(p) = self.rejoin(key, campaign, who, now_ms, place, position).await? {
                (position, kept) = (p, None);
                turn = self::turn(&schedule, p, now_ms - start);
            }
        }
        let promised_ms = (start + schedule.served_at(position)).max(kept.map_or(i64::MIN, |k| start + k));
        let at = Standing::held(&schedule, start, position, turn, kept, who.brings_work, now_ms).await;
        let mut first = match at.held_ms {
            // Asked without a ticket: its place may be admitted for the first time (paced as a
            // waiting ticket's would be), or again (then not counted again).
            Some(_) => Some(Admission { promised_ms }),
            None if who.ticket.is_none() => Some(Admission { promised_ms }),
            None => first_admission(presented, promised_ms),
        };
        if matches!(at.turn, Turn::Admitted { .. }) && first.is_some() {
            match self.paced(campaign, who.user, position, at.now_ms, promised_ms).await {
                Admitted::First => {}
                Admitted::Again => first = None,
                Admitted::Wait => {
                    let told = full_second(key, campaign, who, position, at.now_ms, promised_ms);
                    return Ok(Pass::Waiting(told.answer(at.now_ms, room.ticket_ttl_secs)));
                }
            }
        }
        Ok(at.answer(key, campaign, who, start, first))
    }

    /// Where a token request's place is ([`Located::At`]: verified from its ticket, or given by
    /// `room.lua` when it brings none), or, while its lottery is not drawn, the answer that says
    /// when to come back ([`Located::Told`]).
    async fn locate(
        &self,
        key: &hmac::Key,
        campaign: &Campaign,
        who: Asker<'_>,
        now: DateTime<Utc>,
    ) -> Result<Located, Denial> {
        let (now_s, now_ms) = (now.timestamp(), now.timestamp_millis());
        let start = campaign.starts_at.timestamp_millis();
        let lotteries = Lotteries::of(campaign);
        // When the presented ticket was issued (unix s), and whether it was a lottery's; the
        // promise it keeps, ms after the start ([`MIN_PROMISE_MS`]).
        let (mut presented, mut kept) = (None, None);
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
        let (drawn_at_ms, lottery) = match placed {
            Placed::Position(position) => return Ok(Located::At { place, position, presented, kept }),
            Placed::Undrawn { drawn_at_ms, lottery } => (drawn_at_ms, lottery),
            // Not drawn in Redis yet, though its time has come (`room.lua` was just asked): this
            // request arrived in the lottery's window and reached the script late, before any
            // arrival after the window closed it. The buyer's next request, arriving after the
            // window, closes it: come back now.
            Placed::Unknown => (now_ms, Lottery::of(place).unwrap_or(Lottery::StartDraw)),
        };
        let told = self.waiting_undrawn(key, campaign, who, place, drawn_at_ms, lottery, now_ms);
        Ok(Located::Told(Pass::Waiting(told)))
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

/// Where [`WaitingRoom::pass`] finds a token request.
enum Located {
    /// At `position` (its `place` as held), with the presented ticket's issue time and whether it
    /// was a lottery's, and the promise that ticket keeps (ms after the start).
    At { place: RoomPlace, position: u64, presented: Option<(i64, bool)>, kept: Option<i64> },
    /// Its lottery is not drawn yet: this answer says when to come back.
    Told(Pass),
}

/// A request's turn at `position` once it has been held in place if it was near enough, with
/// the promise its ticket keeps: what its answer is made of.
struct Standing {
    position: u64,
    turn: Turn,
    kept: Option<i64>,
    now_ms: i64,
    /// How long it was held in place, if it was.
    held_ms: Option<i64>,
}

impl Standing {
    /// Holds a request whose turn is nearer than a round trip to come back at it (admitted in
    /// place, [`hold_ms`]), then pads a promise shorter than that round trip ([`padded`]).
    async fn held(
        schedule: &Schedule,
        start: i64,
        position: u64,
        mut turn: Turn,
        mut kept: Option<i64>,
        brings_work: bool,
        asked_ms: i64,
    ) -> Standing {
        let (mut now_ms, mut held_ms) = (asked_ms, None);
        while let Some(wait) = hold_ms(turn, brings_work) {
            tokio::time::sleep(Duration::from_millis(wait as u64 + 1)).await;
            now_ms = now_ms.max(Utc::now().timestamp_millis());
            held_ms = Some(now_ms - asked_ms);
            turn = kept_turn(schedule, position, now_ms - start, kept);
        }
        if kept.is_none() {
            // No promise shorter than the round trip to keep it.
            (turn, kept) = padded(turn, now_ms - start);
        }
        Standing { position, turn, kept, now_ms, held_ms }
    }

    /// The room's answer: admitted or waiting with a renewed ticket at the position, or told
    /// that the turn has passed.
    fn answer(
        self,
        key: &hmac::Key,
        campaign: &Campaign,
        who: Asker<'_>,
        start: i64,
        first: Option<Admission>,
    ) -> Pass {
        let room = &campaign.waiting_room;
        let Standing { position, turn, kept, now_ms, held_ms } = self;
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
        match turn {
            Turn::Admitted { left_ms } => Pass::Admitted {
                ticket,
                session_left_secs: (left_ms.max(0) as u64).div_ceil(1000),
                first,
                held_ms,
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
        }
    }
}
