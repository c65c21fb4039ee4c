//! The sale's face to a proxy: [`FlashSale`] answers every sale endpoint (`flash_sale`) on the
//! paths of `route` with a [`Reply`] (`reply`), serves the buyer's page (`page`), keeps a
//! request's part of the proxy's context ([`SaleCtx`], `ctx`), registers its own metrics
//! ([`metrics`]) and, with the `pingora` feature, plugs into a Pingora proxy with hooks and
//! background services shaped like Pingora's ([`pingora`]).

pub(crate) mod ctx;
pub(crate) mod flash_sale;
mod measure;
pub mod metrics;
pub(crate) mod page;
#[cfg(feature = "pingora")]
pub mod pingora;
pub(crate) mod reply;
pub(crate) mod route;

pub use ctx::{new_request_id, SaleCtx};
pub use flash_sale::{FlashSale, Handled, SaleRequest, Start, StartError};
pub use reply::Reply;
pub use route::{Endpoint, SaleRoute};
