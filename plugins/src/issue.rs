//! What a buyer is issued before an order, one file each: the shop's login JWT checked
//! ([`auth`]), a captcha (proof of work or a provider's token, single use: [`captcha`]) and the
//! campaign token with its hidden order path and signing key (`token`). The endpoints that
//! use them are `crate::edge`'s (`Edge::challenge`, `Edge::token`).

pub mod auth;
pub mod captcha;
pub(crate) mod token;

pub use auth::{JwtCheck, Login, LoginAlg, LoginVerifier};
pub use token::{EdgeKeys, RESULT_TOKEN_HEADER};
