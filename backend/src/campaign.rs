//! A campaign in the database and in Redis: `order-writer campaign publish` (the file into
//! PostgreSQL, then its stock into Redis with a version: [`publish`]), its operated life across
//! the fleet (`check`: [`check`]; `diff`: [`diff`]; `pause`, `resume`, `queue-only`, `close`, `extend`, `status`, `apply`: [`operate`];
//! `add-stock`: [`stock`]; `end`: [`end`]; the gateways reached through [`fleet`]), the hot-stock
//! buckets' counts and transfer ledgers ([`buckets`]) and the moves of stock between buckets
//! after a change of their count ([`rebalance`]).

pub mod buckets;
pub mod check;
pub mod diff;
pub mod end;
pub mod fleet;
pub mod live;
pub mod operate;
pub mod publish;
pub mod rebalance;
pub mod stock;

// The sale afterwards: who won it, and its report.
pub mod audit;
pub mod report;
