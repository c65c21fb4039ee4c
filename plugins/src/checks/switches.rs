//! A campaign's kill switches (seed: 降级策略). They are read from the campaign file and take
//! effect on reload; `pause_replenish` is the order writer's business, not the edge's.

use protocol::campaign::Switches;
use protocol::codes::Code;

use crate::denial::Denial;

/// `closed` → `CAMPAIGN_CLOSED` (fail fast); `queue_only` → `TRY_LATER` with `Retry-After: 1`
/// and nothing reserved; otherwise `Ok`.
pub fn check(switches: &Switches) -> Result<(), Denial> {
    if switches.closed {
        return Err(Denial::new(Code::CampaignClosed, "the campaign is closed"));
    }
    if switches.queue_only {
        return Err(
            Denial::new(Code::TryLater, "the campaign is queueing requests: try again later").retry_after(1)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_wins_over_queue_only() {
        let s = Switches { closed: true, queue_only: true, pause_replenish: false };
        assert_eq!(check(&s).unwrap_err().code, Code::CampaignClosed);
        let s = Switches { queue_only: true, ..Default::default() };
        let d = check(&s).unwrap_err();
        assert_eq!((d.code, d.retry_after_secs), (Code::TryLater, Some(1)));
        assert!(check(&Switches { pause_replenish: true, ..Default::default() }).is_ok());
    }
}
