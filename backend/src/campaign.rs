//! A campaign in the database and in Redis: `order-writer campaign publish` (the file into
//! PostgreSQL, then its stock into Redis with a version: [`publish`]), the hot-stock buckets'
//! counts and transfer ledgers ([`buckets`]) and the moves of stock between buckets after a
//! change of their count ([`rebalance`]).

pub mod buckets;
pub mod publish;
pub mod rebalance;

// The sale afterwards: who won it, and its report.
pub mod audit;
pub mod report;
