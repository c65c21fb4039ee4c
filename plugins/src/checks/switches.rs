//! A campaign's kill switches (seed: 降级策略): the file's `[switches]`, taking effect on reload,
//! and its operated state, set for the whole fleet by `order-writer campaign pause|resume|
//! queue-only|close|end` and read from Redis ([`crate::setup::control`]); the stricter of the two
//! wins. `pause_replenish` is the order writer's business, not the edge's.

use protocol::campaign::Switches;
use protocol::codes::Code;
use protocol::control::State;

use crate::denial::Denial;
use crate::setup::control::LiveControl;

/// The answer's `Retry-After` while a campaign is paused, in seconds.
const PAUSED_RETRY_SECS: u32 = 5;

/// In order: files that disagree with the published campaign → `CAMPAIGN_NOT_READY`; `ENDED` or
/// `CLOSED` → `ENDED`; `PAUSED` → `CAMPAIGN_CLOSED` with `Retry-After`; the file's `closed` →
/// `CAMPAIGN_CLOSED` (fail fast); `QUEUE_ONLY` or the file's `queue_only` → `TRY_LATER` with
/// `Retry-After: 1` and nothing reserved; otherwise `Ok`.
pub fn check(switches: &Switches, live: &LiveControl) -> Result<(), Denial> {
    if live.conflicted() {
        return Err(Denial::new(
            Code::CampaignNotReady,
            "this gateway's campaign files disagree with the published campaign; the shop is fixing it",
        ));
    }
    match live.state() {
        State::Ended => return Err(Denial::new(Code::Ended, "the sale has ended")),
        State::Closed => return Err(Denial::new(Code::Ended, "the sale is closed")),
        State::Paused => {
            return Err(Denial::new(Code::CampaignClosed, "the sale is paused by the shop; it may resume")
                .retry_after(PAUSED_RETRY_SECS))
        }
        State::Open | State::QueueOnly => {}
    }
    if switches.closed {
        return Err(Denial::new(Code::CampaignClosed, "the campaign is closed"));
    }
    if switches.queue_only || live.state() == State::QueueOnly {
        return Err(
            Denial::new(Code::TryLater, "the campaign is queueing requests: try again later").retry_after(1)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::control::{Control, Fleet};

    fn live(state: State) -> LiveControl {
        let l = LiveControl::default();
        let c = protocol::campaign::Campaign::parse(
            std::path::Path::new("c.toml"),
            "id = \"c\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\n\
             starts_at = 2026-01-01T00:00:00Z\nends_at = 2036-01-01T00:00:00Z\n",
        )
        .unwrap();
        let fleet = Fleet { signing: "k".into(), topic: "t".into(), partitions: 1 };
        l.update(Control { state, version: 1, ..Default::default() }, &c, &fleet);
        l
    }

    #[test]
    fn closed_wins_over_queue_only() {
        let open = live(State::Open);
        let s = Switches { closed: true, queue_only: true, pause_replenish: false };
        assert_eq!(check(&s, &open).unwrap_err().code, Code::CampaignClosed);
        let s = Switches { queue_only: true, ..Default::default() };
        let d = check(&s, &open).unwrap_err();
        assert_eq!((d.code, d.retry_after_secs), (Code::TryLater, Some(1)));
        assert!(check(&Switches { pause_replenish: true, ..Default::default() }, &open).is_ok());
    }

    #[test]
    fn the_operated_state_answers_and_the_stricter_switch_wins() {
        let none = Switches::default();
        let answer = |state, s: &Switches| check(s, &live(state)).map_err(|d| (d.code, d.retry_after_secs));
        assert_eq!(answer(State::Open, &none), Ok(()));
        assert_eq!(answer(State::Paused, &none), Err((Code::CampaignClosed, Some(PAUSED_RETRY_SECS))));
        assert_eq!(answer(State::QueueOnly, &none), Err((Code::TryLater, Some(1))));
        assert_eq!(answer(State::Closed, &none), Err((Code::Ended, None)));
        assert_eq!(answer(State::Ended, &none), Err((Code::Ended, None)));
        let closed = Switches { closed: true, ..Default::default() };
        assert_eq!(answer(State::QueueOnly, &closed), Err((Code::CampaignClosed, None)), "the file's closed");
        assert_eq!(answer(State::Ended, &closed), Err((Code::Ended, None)), "ended is final");
    }
}
