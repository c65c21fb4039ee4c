//! Keeps each connection's I/O on the thread that serves it, as far as Pingora 0.9 allows.
//!
//! The gateway runs Pingora without work stealing: each of its threads runs its own runtime with
//! its own reactor (epoll), and a socket is watched by the reactor of the thread that created
//! it. Three Pingora habits split one proxied request over two threads, each hand-over an
//! `eventfd` write and a wake-up of the other thread (Nginx's workers never do this):
//!
//! 1. the upstream keepalive pool is one for all threads: a connection opened on one thread and
//!    reused on another is still watched by the first one's reactor;
//! 2. the pool's idle watcher of a released connection is spawned on a thread picked at random
//!    (`TransportConnector::release_stream`); taking the connection back wakes that thread, and
//!    its release races the taker's `Arc::try_unwrap` ("failed to acquire reusable stream": the
//!    connection is closed and a new one opened);
//! 3. the listener accepts every connection on one thread and hands it to a thread picked at
//!    random, the socket still registered with the acceptor's reactor.
//!
//! [`upstream_group_key`] takes out the first (the gateway keys its upstream peers by thread).
//! The second is Pingora's alone. The proxy floor's `FLOOR_REHOME=1` lever takes out the third
//! (`e2e/bench/src/bin/proxy_floor.rs`), but the stream it builds has no write buffer (Pingora's
//! is crate-private), so an answer's head and body go out in two writes; measured with Pingora
//! as it is, that costs more than it saves, so the gateway does not do it.

use std::hash::{Hash, Hasher};

/// The upstream keepalive pool's group of the calling thread (`HttpPeer::group_key`).
pub fn upstream_group_key() -> u64 {
    thread_local! {
        static KEY: u64 = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::thread::current().id().hash(&mut h);
            h.finish()
        };
    }
    KEY.with(|k| *k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_upstream_group() {
        let here = upstream_group_key();
        assert_eq!(here, upstream_group_key(), "stable within a thread");
        let there = std::thread::spawn(upstream_group_key).join().unwrap();
        assert_ne!(here, there);
    }
}
