//! End-to-end tests of the gateway binary: each test starts its own gateway process(es) on free
//! loopback ports against real Redis (the stack's, or a private `redis-server` where a test
//! must count commands or kill Redis), with wiremock as the shop's and the result query's
//! upstream; `sale` adds the stack's Kafka and PostgreSQL and the real order writer; `cluster`
//! runs the sale on the stack's Redis Cluster (`e2e/stack.sh up cluster`); `safe_retry` puts a
//! relay the test controls between one gateway and Redis; `proxy_only` runs it without the sale,
//! with none of the stack.

mod pebble;
mod support;

mod access_log;
mod acme;
mod admission;
mod balancing;
mod campaign_life;
mod cluster;
mod conf;
mod defense;
mod files;
mod global_limits;
mod limits;
mod nginx_routes;
mod observe;
mod orders;
mod polling;
mod proxy_only;
mod proxy_protocol;
mod requests;
mod route_limits;
mod routes;
mod safe_retry;
mod sale;
mod scrape;
mod shed;
mod sold_out;
mod tls;
mod upgrade;
mod waiting_room;
mod websocket;
mod workers;
