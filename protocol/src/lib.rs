//! What the gateway and the order writer agree on.
//!
//! Both binaries depend on this crate so that there is exactly one definition of:
//! - [`keys`]: where a campaign lives in Redis (one hash tag per campaign, Cluster-safe);
//! - [`record`]: the reservation record the Lua script writes to the outbox and the gateway
//!   forwards;
//! - [`codes`]: the answer codes clients see, with their HTTP statuses;
//! - [`signing`]: the HMAC header the gateway signs and the order writer verifies;
//! - [`scripts`]: the Lua scripts under `lua/`, loaded from disk and called by SHA;
//! - [`cluster`]: the Redis URL forms (one Redis or a Redis Cluster), and the retry of a script
//!   refused with `TRYAGAIN` during a slot migration;
//! - [`secret`]: secrets referenced from configuration (`env:NAME` or `file:PATH`), never inline;
//! - [`conf`]: TOML parsing whose errors name the file, line, column and field;
//! - [`campaign`]: the per-campaign file both binaries read, with its [`defense`] tables and
//!   its [`global_limit`] rules;
//! - [`pow`]: the proof-of-work captcha, as the gateway checks it and a client solves it;
//! - [`waiting_room`]: a campaign's waiting room and its proof-of-work levels;
//! - [`timing`]: the one timing rule between the gateway's undo and the order writer's sweeper;
//! - [`logging`]: the log output every binary sets up the same way.

#![warn(missing_docs)]

pub mod campaign;
pub mod cluster;
pub mod codes;
pub mod conf;
pub mod control;
pub mod defense;
pub mod global_limit;
pub mod kafka;
pub mod keys;
pub mod logging;
pub mod pow;
pub mod record;
pub mod scripts;
pub mod secret;
pub mod signing;
pub mod timing;
pub mod waiting_room;
