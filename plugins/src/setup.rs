//! What the sale is built from and kept by, apart from requests: its checked conf ([`conf`]),
//! the Redis pool with its safety settings (`redis`), the campaigns and their reload
//! (`registry`) and the replenish listener that clears sold-out flags (`replenish`).

pub mod conf;
pub(crate) mod control;
pub(crate) mod redis;
pub(crate) mod registry;
pub(crate) mod replenish;

pub use redis::connect;
pub use registry::{Registry, SaleSource};
