//! The load tool (`seckill-load`) and the end-to-end phases' helpers: the crowd, its reports,
//! the flood, the parity phase, the soak. What the product's tests need of the stack (its
//! addresses, fresh databases, topics and keys, a client of the edge's protocol) is the
//! `fixtures` crate (`e2e/fixtures/`), re-exported here under the same names.

pub use fixtures::{cleanup, client, order_writer, stack};

pub mod checks;
pub mod crowd;
pub mod drain;
pub mod flood;
pub mod load;
pub mod mix;
pub mod outcome;
pub mod page;
pub mod parity;
pub mod progress;
pub mod report;
pub mod resend;
pub mod sampler;
pub mod shop;
pub mod soak;
pub mod undersell;
pub mod verdict;
pub mod watch;
