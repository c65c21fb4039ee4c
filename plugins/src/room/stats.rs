//! What the room did, per campaign, for the gateway's metrics, and the arrival rates the
//! proof of work follows.

use super::{Admission, Closed, Schedule};
use chrono::DateTime;
use chrono::Utc;
use protocol::campaign::Campaign;
use protocol::scripts::RoomPlace;
use protocol::waiting_room::pow_bits;
use std::collections::HashMap;
use std::sync::Mutex;

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
