//! The order writer's tests against the real stack (`e2e/stack.sh up`: Redis, PostgreSQL,
//! Kafka), one test binary: each module is one subject, and its tests run beside the others'
//! (each on a fresh database, topic and campaign of its own, [`common::Env`]). One binary, not
//! one per file: it is compiled and linked once, and the files' tests do not wait for each other.
//!
//! `cargo test -p backend --test backend -- leases::` runs one subject.

mod common;

mod audit;
mod buckets;
mod campaign_end;
mod events;
mod http;
mod integrating;
mod kafka_security;
mod leases;
mod observe;
mod payment;
mod process;
mod produce;
mod publish;
mod reconcile;
mod release;
mod report;
mod signature;
mod standalone;
mod writer;
mod writer_fallback;
