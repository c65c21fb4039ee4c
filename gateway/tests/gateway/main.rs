//! End-to-end tests of the gateway binary: each test starts its own gateway process(es) on free
//! loopback ports against real Redis (the stack's, or a private `redis-server` where a test
//! must count commands or kill Redis), with wiremock as the upstream.

mod support;

mod conf;
mod orders;
mod polling;
mod routes;
mod sold_out;
