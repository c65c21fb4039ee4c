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
//! The second is Pingora's alone. [`rehome`] takes out the third, but the stream it builds has
//! no write buffer (Pingora's is crate-private), so an answer's head and body go out in two
//! writes; measured with Pingora as it is, that costs more than it saves, so only the proxy
//! floor's lever uses it (`gateway/examples/proxy_floor.rs`, `FLOOR_REHOME=1`).

use std::hash::{Hash, Hasher};
use std::os::fd::{AsRawFd, BorrowedFd};

use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::{GetSocketDigest, SocketDigest, Stream};

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

/// A new plain-TCP downstream connection, registered with the calling thread's reactor (see
/// the module doc); any other stream (TLS, Unix socket), or one that cannot be moved, is
/// returned as it is. Call it before anything is read from the connection.
pub fn rehome(stream: Stream) -> Stream {
    if !stream.as_any().is::<L4Stream>() {
        return stream;
    }
    let Ok(old) = stream.into_any().downcast::<L4Stream>() else { unreachable!("checked above") };
    // SAFETY: the descriptor belongs to `old`, alive for this borrow.
    let dup = match unsafe { BorrowedFd::borrow_raw(old.as_raw_fd()) }.try_clone_to_owned() {
        Ok(fd) => fd,
        Err(_) => return old,
    };
    let std_stream = std::net::TcpStream::from(dup);
    let moved = std_stream.set_nonblocking(true).and_then(|()| tokio::net::TcpStream::from_std(std_stream));
    let Ok(tcp) = moved else {
        return old;
    };
    let mut new = L4Stream::from(tcp);
    let digest = SocketDigest::from_raw_fd(new.as_raw_fd());
    if let Some(peer) = old.get_socket_digest().and_then(|d| d.peer_addr().cloned()) {
        let _ = digest.peer_addr.set(Some(peer));
    }
    new.set_socket_digest(digest);
    // Dropping `old` deregisters the socket from the acceptor's reactor and closes its
    // descriptor; the connection lives on in the duplicate.
    drop(old);
    Box::new(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn each_thread_has_its_own_upstream_group() {
        let here = upstream_group_key();
        assert_eq!(here, upstream_group_key(), "stable within a thread");
        let there = std::thread::spawn(upstream_group_key).join().unwrap();
        assert_ne!(here, there);
    }

    #[tokio::test]
    async fn a_rehomed_connection_keeps_its_bytes_and_its_peer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, peer) = listener.accept().await.unwrap();
        let mut l4 = L4Stream::from(accepted);
        let digest = SocketDigest::from_raw_fd(l4.as_raw_fd());
        digest.peer_addr.set(Some(peer.into())).unwrap();
        l4.set_socket_digest(digest);
        let old_fd = l4.as_raw_fd();

        let mut moved = rehome(Box::new(l4));
        assert_ne!(moved.as_any().downcast_ref::<L4Stream>().unwrap().as_raw_fd(), old_fd);
        let seen = moved.get_socket_digest().and_then(|d| d.peer_addr().cloned());
        assert_eq!(seen.and_then(|a| a.as_inet().copied()), Some(peer));

        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        moved.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        moved.write_all(b"pong").await.unwrap();
        moved.flush().await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
    }
}
