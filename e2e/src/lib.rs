//! Shared by the tests of every crate: where the local stack's real servers listen
//! (started by `e2e/stack.sh up`), and fresh, isolated places on them.
//!
//! Tests never mock Redis, PostgreSQL or Kafka. They isolate themselves instead: a new database
//! per test, a new topic per test, campaign ids that are unique per test, each deleted again
//! when the test ends ([`cleanup`]).

pub mod checks;
pub mod cleanup;
pub mod client;
pub mod crowd;
pub mod drain;
pub mod flood;
pub mod load;
pub mod mix;
pub mod order_writer;
pub mod outcome;
pub mod page;
pub mod parity;
pub mod progress;
pub mod report;
pub mod resend;
pub mod sampler;
pub mod shop;
pub mod soak;
pub mod stack;
pub mod undersell;
pub mod verdict;
pub mod watch;
