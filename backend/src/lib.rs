//! The order writer: reservations through Kafka into PostgreSQL exactly once, the result query,
//! payment and unpaid-timeout close, and reconciliation. Its folders are its jobs.
//!
//! The gateway produces each reservation to Kafka itself, signed (the record format is in
//! [`kafka::produce`]); the order writer has no reservation intake over HTTP.
//!
//! - [`writer`]: Kafka → PostgreSQL, one transaction per batch, then the Redis ack/compensation;
//!   a record without the gateway key's signature is dead-lettered; [`writer::leases`]: writers
//!   without a fixed plan share the partitions by lease in PostgreSQL, each batch fenced by its
//!   lease's epoch;
//! - [`kafka`]: the client and topics; [`kafka::producer`] (signed records, used by the sweeper)
//!   and [`kafka::produce`]: `order-writer produce`, signed test reservations from a file
//!   (replayed as written) or, in [`kafka::produce::generate`] apart from everything above,
//!   generated through `lua/reserve.lua`, so the writer runs without a gateway;
//! - [`workers`]: the [`workers::sweeper`] (outbox entries without an order after T → Kafka
//!   again, signed), the [`workers::closer`] (unpaid orders past their pay-by time → CLOSED,
//!   stock back), the order-events relay ([`workers::events`]) and [`workers::reconcile`] (the
//!   seed's equation and repairs);
//! - [`http`]: the routes of the result query ([`http::result`]) and the payment callback
//!   ([`http::payment`], [`http::pay_auth`] checks a callback's signature and time); they share
//!   [`http::state`] and answer through [`http::reply`];
//! - [`campaign`]: campaign file → PG → Redis ([`campaign::publish`]), the hot-stock buckets and
//!   their rebalance;
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz` on the admin listener, and what the process
//!   counts ([`admin::metrics`]);
//! - [`serve`]: all of it in one process; [`app`]: the connections every subcommand takes, built
//!   in one place from the validated [`conf`]; [`setup`]: `migrate` and `topic create`;
//!   [`db`]: the pool, and [`db::schema`]: the PostgreSQL schema the tables are in, the
//!   migrations compiled in and the version check; [`check`]: `order-writer check`, each server
//!   reachable; [`redis`]: the writer's Redis scripts.
//!
//! Every module here is public because another crate uses it, not by default: `order-writer`
//! (`main.rs`, a crate of its own) calls each subcommand's one function in its module, and the
//! workspace's other crates build on the same parts rather than copies of them (the gateway's
//! campaign tests publish through [`campaign::publish`], the crowd's judge and `sale-cleanup`
//! read the stores through [`db`], [`kafka`] and [`writer`], the fixtures spawn and clean up
//! through [`conf`] and [`redis`], the bench tools drive [`workers`] and the producer). What
//! no other crate needs stays private inside its module.

pub mod admin;
pub mod app;
pub mod campaign;
pub mod check;
pub mod conf;
pub mod db;
pub mod http;
pub mod kafka;
pub mod redis;
pub mod serve;
pub mod setup;
pub mod workers;
pub mod writer;
