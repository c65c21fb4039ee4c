//! What every HTTP handler of the order writer can reach.

use std::sync::Arc;

use fred::prelude::Client as RedisClient;
use protocol::signing::Signer;
use sqlx::PgPool;

use crate::producer::Producer;

/// The handlers' shared state.
#[derive(Clone)]
pub struct AppState {
    /// PostgreSQL.
    pub pool: PgPool,
    /// Redis.
    pub redis: RedisClient,
    /// Kafka producer.
    pub producer: Producer,
    /// Verifies the gateway's signature on forwarded reservations.
    pub gateway: Arc<Signer>,
    /// Verifies the payment provider's callbacks.
    pub payment: Arc<Signer>,
    /// How far (seconds, either way) a payment callback's timestamp may be from server time.
    pub payment_max_skew_secs: u64,
}
