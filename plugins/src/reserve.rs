//! The reservation at the edge (seed: Redis 原子预扣库存): one `EVALSHA` of `lua/reserve.lua`
//! (per-user limit, stock check, decrement and outbox record, atomically), with a bounded
//! timeout. Redis down or slow → `SERVICE_DEGRADED` quickly; the database is never the fallback.
//!
//! Each worker thread has its own Redis connections, opened on first use from that thread, so
//! their I/O runs on the thread's own runtime: a reservation never hops to another thread and
//! back (Pingora runs one single-threaded runtime per worker thread).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::ClientLike;
use protocol::codes::Code;
use protocol::scripts::{ReserveOutcome, ScriptError, Scripts};

use crate::Denial;

/// Builds a Redis pool that is not connected yet.
pub type PoolFactory = Arc<dyn Fn() -> Result<Pool, fred::error::Error> + Send + Sync>;

/// Runs the reservation script over the calling thread's Redis connections.
#[derive(Clone)]
pub struct Reserver {
    /// Tells this reserver's pools apart from another's in the thread-local map.
    id: u64,
    factory: PoolFactory,
    scripts: Scripts,
    timeout: Duration,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's pool of each reserver, connected on this thread's runtime.
    static POOLS: RefCell<HashMap<u64, Pool>> = RefCell::new(HashMap::new());
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
    /// A reserver whose threads each build a pool with `factory`, giving up after `timeout`.
    pub fn new(factory: PoolFactory, scripts: Scripts, timeout: Duration) -> Self {
        Self { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), factory, scripts, timeout }
    }

    /// The calling thread's pool, and whether it was opened just now. Must run inside a Tokio
    /// runtime: the connections' tasks are spawned on it.
    fn local_pool(&self) -> Result<(Pool, bool), fred::error::Error> {
        POOLS.with(|pools| {
            let mut pools = pools.borrow_mut();
            if let Some(pool) = pools.get(&self.id) {
                return Ok((pool.clone(), false));
            }
            let pool = (self.factory)()?;
            pool.connect();
            pools.insert(self.id, pool.clone());
            Ok((pool, true))
        })
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
        let (pool, opened) = self.local_pool().map_err(ScriptError::from)?;
        let call = async {
            if opened {
                // This thread's first reservation: its connections are being opened.
                pool.wait_for_connect().await?;
            }
            self.scripts.reserve(pool.next_connected(), campaign, request_id, user, qty).await
        };
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
