//! What every HTTP handler of the order writer can reach.

use std::sync::Arc;

use fred::prelude::Client as RedisClient;
use protocol::signing::Signer;
use sqlx::PgPool;

/// The handlers' shared state.
#[derive(Clone)]
pub struct AppState {
    /// PostgreSQL pool of the order path (the payment callback updates orders on it).
    pub pool: PgPool,
    /// Verifies the payment provider's callbacks.
    pub payment: Arc<Signer>,
    /// How far (seconds, either way) a payment callback's timestamp may be from server time.
    pub payment_max_skew_secs: u64,
    /// The result query's own connections.
    pub results: ResultStore,
}

/// The result query's own small PostgreSQL pool and Redis client, apart from the ones orders
/// are written with, so that a storm of polls waits on these and never takes the writer's
/// connections.
#[derive(Clone)]
pub struct ResultStore {
    /// Small pool (`result_pool_size`), read-only queries.
    pub pool: PgPool,
    /// Redis client of its own.
    pub redis: RedisClient,
    /// Each campaign's bucket count, read once (`campaigns.buckets`).
    pub buckets: crate::campaign::buckets::CountCache,
}
