//! What a crowd of `seckill-load` looks like: its size, pace and mix (hot users, bots, early
//! birds, payers), read by the burst ([`crate::load`]) and the drain ([`crate::drain`]).

use std::time::Duration;

/// Who is in the crowd besides plain buyers.
#[derive(Debug, Clone)]
pub struct Mix {
    /// Users (among the crowd's) who also fire many attempts at once.
    pub hot_users: u32,
    /// Concurrent attempts of each hot user.
    pub hot_attempts: u32,
    /// Bot requests of each bot kind.
    pub bots_per_kind: u32,
    /// Users who send one order before the window opens.
    pub early_birds: u32,
    /// Percentage of winners who pay (the others let their order close).
    pub pay_percent: u32,
    /// Percentage of buyers who give up on an answer the buyer's page resends (`TRY_LATER`,
    /// `SERVICE_DEGRADED`) instead of resending it ([`crate::resend`]); the others resend.
    pub give_up_percent: u32,
}

/// What the crowd looks like.
#[derive(Debug, Clone)]
pub struct Crowd {
    /// Gateway base URLs, without a trailing slash (attempts go round robin).
    pub gateways: Vec<String>,
    /// Campaign id.
    pub campaign: String,
    /// Distinct users.
    pub users: u32,
    /// Requests per user.
    pub requests_per_user: u32,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// How long queued requests may take to settle.
    pub settle: Duration,
    /// The shop's auth service (mints the users' login JWTs).
    pub auth: crate::client::Auth,
    /// Hot users, bots, early birds, payers.
    pub mix: Mix,
    /// The order writer's base URL and the payment provider's key (payments), if any.
    pub payments: Option<(String, Vec<u8>)>,
    /// The sale's Redis URL and the order writer's database URL, to read the stock left at the
    /// burst's end (the undersell judge, [`crate::undersell`]); none: not judged.
    pub stock_at: Option<(String, String)>,
}
