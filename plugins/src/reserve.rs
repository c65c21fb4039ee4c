//! The reservation at the edge (seed: Redis 原子预扣库存): one `EVALSHA` of `lua/reserve.lua`
//! (per-user limit, stock check, decrement and outbox record, atomically), with a bounded
//! timeout. Redis down or slow → `SERVICE_DEGRADED` quickly; the database is never the fallback.

use std::time::Duration;

use fred::clients::Pool;
use protocol::codes::Code;
use protocol::scripts::{ReserveOutcome, ScriptError, Scripts};

use crate::Denial;

/// Runs the reservation script over a pool of Redis connections.
#[derive(Clone)]
pub struct Reserver {
    pool: Pool,
    scripts: Scripts,
    timeout: Duration,
}

impl std::fmt::Debug for Reserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserver").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// Why no decision came back from Redis.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    /// Redis did not answer within the timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis failed, or the script answered something unexpected.
    #[error(transparent)]
    Script(#[from] ScriptError),
}

impl Reserver {
    /// A reserver over `pool`, giving up after `timeout`.
    pub fn new(pool: Pool, scripts: Scripts, timeout: Duration) -> Self {
        Self { pool, scripts, timeout }
    }

    /// The Redis pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs `reserve.lua` once. Never retried by the caller: a timeout may hide a reservation
    /// that did happen, and the outbox (swept by the order writer) is what keeps it.
    pub async fn reserve(
        &self,
        campaign: &str,
        request_id: &str,
        user: &str,
        qty: i64,
    ) -> Result<ReserveOutcome, ReserveError> {
        let call = self.scripts.reserve(self.pool.next_connected(), campaign, request_id, user, qty);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(ReserveError::Timeout(self.timeout)),
        }
    }
}

/// The answer for an outcome that is not a reservation; `None` for [`ReserveOutcome::Reserved`].
pub fn denial(outcome: &ReserveOutcome) -> Option<Denial> {
    Some(match outcome {
        ReserveOutcome::Reserved { .. } => return None,
        ReserveOutcome::SoldOut { remaining: 0 } => Denial::new(Code::SoldOut, "sold out"),
        ReserveOutcome::SoldOut { remaining } => {
            Denial::new(Code::SoldOut, format!("only {remaining} left, fewer than the quantity asked"))
        }
        ReserveOutcome::LimitReached { held } => {
            Denial::new(Code::LimitReached, format!("you already hold {held}, the most one buyer may hold"))
        }
        ReserveOutcome::NotReady => {
            Denial::new(Code::CampaignNotReady, "the campaign's stock is not published yet")
        }
        ReserveOutcome::BadQuantity { limit } => {
            Denial::new(Code::BadRequest, format!("qty must be between 1 and {limit}"))
        }
        ReserveOutcome::Duplicate => Denial::new(Code::Internal, "request id used twice"),
    })
}

/// Whether `outcome` should set the local sold-out flag: nothing is left at all.
pub fn sets_sold_out_flag(outcome: &ReserveOutcome) -> bool {
    matches!(outcome, ReserveOutcome::SoldOut { remaining } if *remaining <= 0)
}

/// The answer when Redis gave no decision.
pub fn degraded(err: &ReserveError) -> Denial {
    tracing::warn!(error = %err, "reservation failed: answering SERVICE_DEGRADED");
    Denial::new(
        Code::ServiceDegraded,
        "the reservation service is unavailable: nothing was reserved, try again",
    )
    .retry_after(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_map_to_codes() {
        let code = |o: ReserveOutcome| denial(&o).map(|d| d.code);
        assert_eq!(code(ReserveOutcome::Reserved { remaining: 1, record: String::new() }), None);
        assert_eq!(code(ReserveOutcome::SoldOut { remaining: 0 }), Some(Code::SoldOut));
        assert_eq!(code(ReserveOutcome::SoldOut { remaining: 1 }), Some(Code::SoldOut));
        assert_eq!(code(ReserveOutcome::LimitReached { held: 1 }), Some(Code::LimitReached));
        assert_eq!(code(ReserveOutcome::NotReady), Some(Code::CampaignNotReady));
        assert_eq!(code(ReserveOutcome::BadQuantity { limit: 2 }), Some(Code::BadRequest));
        assert!(sets_sold_out_flag(&ReserveOutcome::SoldOut { remaining: 0 }));
        assert!(
            !sets_sold_out_flag(&ReserveOutcome::SoldOut { remaining: 1 }),
            "a smaller qty may still fit"
        );
    }
}
