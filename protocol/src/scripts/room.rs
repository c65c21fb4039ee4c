//! The wrappers of `lua/room.lua` (a buyer's place in a campaign's waiting room) and
//! `lua/arrivals.lua` (the campaign's arrivals per second, for the proof of work's levels).

use fred::prelude::Client;

use super::{int, ScriptError, Scripts};
use crate::cluster::EvalRetry;
use crate::keys::CampaignKeys;

/// A buyer's place in the waiting room, as `room.lua` keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomPlace {
    /// The n-th arrival of the pre-queue (from 1), before the start: its position is the keyed
    /// shuffle of n among the pre-queue's size.
    PreQueue(u64),
    /// The n-th arrival of the start draw (from 1), in its window after the start: its position
    /// is the draw's base plus the keyed shuffle of n among the draw's size.
    Draw(u64),
    /// The n-th arrival (from 1) after the start draw's window and before its close (the draw
    /// waits for every arrival in its window): its position is right after the drawn ones, the
    /// draw's base plus its size plus n.
    Late(u64),
    /// A position in the queue (from 1).
    Position(u64),
}

impl RoomPlace {
    /// As the script stores it: `a<n>`, `d<n>`, `q<n>` or `p<n>`.
    pub fn as_stored(&self) -> String {
        match self {
            RoomPlace::PreQueue(n) => format!("a{n}"),
            RoomPlace::Draw(n) => format!("d{n}"),
            RoomPlace::Late(n) => format!("q{n}"),
            RoomPlace::Position(n) => format!("p{n}"),
        }
    }

    /// Parses `a<n>`, `d<n>`, `q<n>` or `p<n>` (n ≥ 1).
    pub fn parse(s: &str) -> Option<Self> {
        let (kind, n) = s.split_at_checked(1)?;
        if n.is_empty() || n.len() > 19 || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = n.parse().ok().filter(|n| *n >= 1)?;
        match kind {
            "a" => Some(RoomPlace::PreQueue(n)),
            "d" => Some(RoomPlace::Draw(n)),
            "q" => Some(RoomPlace::Late(n)),
            "p" => Some(RoomPlace::Position(n)),
            _ => None,
        }
    }
}

/// One call of `room.lua`: who enters, when, and what the gateway knows of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomEntry<'a> {
    /// The campaign.
    pub campaign: &'a str,
    /// The buyer.
    pub user: &'a str,
    /// When the request reached the gateway, unix ms (the gateway's clock when it read the
    /// request's head): the pre-queue and the start draw are judged by it. The script clamps it
    /// to Redis's `TIME` less [`crate::timing::ARRIVAL_CLAIM_MAX_MS`] at the earliest, `TIME`
    /// at the latest.
    pub arrived_ms: i64,
    /// The campaign's start, unix ms.
    pub starts_at_ms: i64,
    /// The serving position now: a new position is always above it.
    pub serving: u64,
    /// The buyer's place whose session is over, to be replaced by a new one at the back: named
    /// as the script keeps it (a lottery's place in its lottery's form, never its position),
    /// else nothing is replaced.
    pub renew: Option<RoomPlace>,
    /// When the room's keys expire, unix ms.
    pub expire_at_ms: i64,
    /// The start draw's end, unix ms (the start itself when there is none).
    pub draw_ends_at_ms: i64,
    /// The room's `admit_per_sec` and `draw_return_per_sec`: when the draw closes, its places
    /// start after the serving line by the positions served while its buyers are asked back.
    pub rates: (u64, u64),
}

/// The start draw, once closed: its places are `base + 1 ..= base + size`, the late arrivals'
/// after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawn {
    /// The last position before the drawn ones.
    pub base: u64,
    /// The draw's arrivals.
    pub size: u64,
}

/// What `room.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoomAnswer {
    /// The buyer's place.
    pub place: RoomPlace,
    /// The pre-queue's size once closed (`None` while open).
    pub size: Option<u64>,
    /// Places given so far: the last position once the draw is closed, else the pre-queue's
    /// size plus the draw's and the late arrivals, else the pre-queue's arrivals.
    pub issued: u64,
    /// The start draw once closed (`None` while open).
    pub draw: Option<Drawn>,
}

/// What `arrivals.lua` counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrivals {
    /// Arrivals in this second so far (this one included).
    pub this_second: u64,
    /// Arrivals in the second before.
    pub last_second: u64,
}

/// A first admission for `admit.lua` to count (and, when late, to let through or not), once per
/// place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admit<'a> {
    /// The campaign.
    pub campaign: &'a str,
    /// The unix second it happens in, by the gateway's clock.
    pub second: i64,
    /// A backlog's admission (past its promise by a second or more): let through only while
    /// the second's admissions are under `admit_per_sec`.
    pub late: bool,
    /// The campaign's rate.
    pub admit_per_sec: u64,
    /// The buyer.
    pub user: &'a str,
    /// The position admitted: the same one admitted again is not counted again.
    pub position: u64,
    /// When the record of admitted places may go (unix ms: the campaign's end plus a ticket's
    /// life).
    pub expire_at_ms: i64,
}

/// What `admit.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// A first admission of this place: let through, counted in the second.
    First,
    /// This place was admitted before (its ticket presented again, or asked without it): let
    /// through, not counted again.
    Again,
    /// A late first admission in a second whose admissions are full: not now (not counted).
    Wait,
}

impl Scripts {
    /// `admit.lua`: counts a first admission of a place across every gateway, once; a late one
    /// waits for the next second when this second's are full.
    pub async fn admit(&self, client: &Client, admit: &Admit<'_>) -> Result<Admitted, ScriptError> {
        const NAME: &str = "admit.lua";
        let keys = CampaignKeys::new(admit.campaign);
        let args = vec![
            u8::from(admit.late).to_string(),
            admit.admit_per_sec.to_string(),
            admit.user.to_string(),
            RoomPlace::Position(admit.position).as_stored(),
            admit.expire_at_ms.to_string(),
        ];
        let keys = vec![keys.admitted(admit.second), keys.room_admitted()];
        let out: fred::types::Value = self.admit.evalsha_with_retry(client, keys, args).await?;
        match int(NAME, &out)? {
            0 => Ok(Admitted::Wait),
            1 => Ok(Admitted::First),
            2 => Ok(Admitted::Again),
            n => Err(ScriptError::Protocol { script: NAME, detail: format!("{n} is not 0, 1 or 2") }),
        }
    }

    /// `room.lua`: the buyer's place (the same on every call, unless `renew` names it), the
    /// pre-queue's size and the start draw once closed (`None` while open).
    pub async fn room_enter(
        &self,
        client: &Client,
        entry: &RoomEntry<'_>,
    ) -> Result<RoomAnswer, ScriptError> {
        const NAME: &str = "room.lua";
        let keys = CampaignKeys::new(entry.campaign);
        let args = vec![
            entry.user.to_string(),
            entry.arrived_ms.to_string(),
            entry.starts_at_ms.to_string(),
            entry.serving.to_string(),
            entry.renew.map(|p| p.as_stored()).unwrap_or_default(),
            entry.expire_at_ms.to_string(),
            entry.draw_ends_at_ms.to_string(),
            entry.rates.0.to_string(),
            entry.rates.1.to_string(),
        ];
        let out: Vec<fred::types::Value> =
            self.room.evalsha_with_retry(client, vec![keys.room(), keys.room_users()], args).await?;
        let [place, size, issued, base, drawn] = out.as_slice() else {
            return Err(ScriptError::Protocol { script: NAME, detail: format!("{} values", out.len()) });
        };
        let place = place.as_string().as_deref().and_then(RoomPlace::parse).ok_or_else(|| {
            ScriptError::Protocol { script: NAME, detail: format!("{place:?} is not a place") }
        })?;
        let size = int(NAME, size)?;
        let issued = u64::try_from(int(NAME, issued)?).unwrap_or(0);
        let draw = match (u64::try_from(int(NAME, base)?), u64::try_from(int(NAME, drawn)?)) {
            (Ok(base), Ok(size)) => Some(Drawn { base, size }),
            _ => None,
        };
        Ok(RoomAnswer { place, size: u64::try_from(size).ok(), issued, draw })
    }

    /// `arrivals.lua`: counts one arrival of `campaign` in unix second `second`.
    pub async fn arrive(
        &self,
        client: &Client,
        campaign: &str,
        second: i64,
    ) -> Result<Arrivals, ScriptError> {
        const NAME: &str = "arrivals.lua";
        let keys = CampaignKeys::new(campaign);
        let out: Vec<fred::types::Value> = self
            .arrivals
            .evalsha_with_retry(
                client,
                vec![keys.arrivals(second), keys.arrivals(second - 1)],
                Vec::<String>::new(),
            )
            .await?;
        match out.as_slice() {
            [now, before] => Ok(Arrivals {
                this_second: int(NAME, now)?.max(0) as u64,
                last_second: int(NAME, before)?.max(0) as u64,
            }),
            other => Err(ScriptError::Protocol { script: NAME, detail: format!("{} values", other.len()) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_parse_as_stored() {
        for p in [
            RoomPlace::PreQueue(1),
            RoomPlace::Draw(7),
            RoomPlace::Late(3),
            RoomPlace::Position(42),
            RoomPlace::Position(u64::from(u32::MAX)),
        ] {
            assert_eq!(RoomPlace::parse(&p.as_stored()), Some(p));
        }
        for bad in ["", "a", "d", "d0", "q", "q0", "p0", "x5", "p-1", "p1.5", "p99999999999999999999", "a 1"]
        {
            assert_eq!(RoomPlace::parse(bad), None, "{bad:?}");
        }
    }
}
