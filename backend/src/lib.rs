//! The order writer: reservations through Kafka into PostgreSQL exactly once, the result query,
//! payment and unpaid-timeout close, and reconciliation.
//!
//! The gateway produces each reservation to Kafka itself, signed (the record format is in
//! [`produce`]); the order writer has no reservation intake over HTTP.
//!
//! - [`writer`]: Kafka → PostgreSQL, one transaction per batch, then the Redis ack/compensation;
//!   a record without the gateway key's signature is dead-lettered;
//! - [`leases`]: writers without a fixed plan share the partitions by lease in PostgreSQL, each
//!   batch fenced by its lease's epoch;
//! - [`sweeper`]: outbox entries without an order after T → Kafka again, signed (through
//!   [`producer`]);
//! - [`produce`]: `order-writer produce`, signed test reservations from a file (replayed as
//!   written) or, in [`produce::generate`] apart from everything above, generated through
//!   `lua/reserve.lua`, so the writer runs without a gateway;
//! - [`result`], [`payment`]: the HTTP queries and the payment callback ([`http`] routes them;
//!   they share [`state`] and answer through [`reply`]; [`pay_auth`] checks a callback's
//!   signature and time);
//! - [`closer`]: unpaid orders past their pay-by time → CLOSED, stock back;
//! - [`reconcile`]: the seed's equation and repairs; [`publish`]: campaign file → PG → Redis;
//! - [`metrics`]: what the process counts; [`admin`]: `/metrics`, `/healthz`, `/readyz` on the
//!   admin listener;
//! - [`serve`]: all of it in one process; [`app`]: the connections every subcommand takes, built
//!   in one place from the validated [`conf`]; [`setup`]: `migrate` and `topic create`;
//!   [`schema`]: the PostgreSQL schema the tables are in, the migrations compiled in and the
//!   version check; [`check`]: `order-writer check`, each server reachable.

pub mod admin;
pub mod app;
pub mod buckets;
pub mod check;
pub mod closer;
pub mod conf;
pub mod db;
pub mod events;
pub mod http;
pub mod kafka;
pub mod leases;
pub mod metrics;
pub mod pay_auth;
pub mod payment;
pub mod produce;
pub mod producer;
pub mod publish;
pub mod rebalance;
pub mod reconcile;
pub mod redis;
pub mod reply;
pub mod result;
pub mod schema;
pub mod serve;
pub mod setup;
pub mod state;
pub mod sweeper;
pub mod writer;
