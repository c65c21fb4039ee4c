//! Addresses of the local stack and fresh per-test resources on it.
//!
//! The addresses come from the environment (`SECKILL_REDIS_URL`, `SECKILL_PG_ADMIN_URL`,
//! `SECKILL_KAFKA_BROKER`, `SECKILL_REDIS_CLUSTER_URL`); the defaults are the ports `e2e/stack.sh` uses.

use anyhow::Context;

/// Redis URL of the stack.
pub fn redis_url() -> String {
    std::env::var("SECKILL_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into())
}

/// The stack's Redis Cluster URL when it is up (`SECKILL_REDIS_CLUSTER_URL`, written by
/// `e2e/stack.sh up cluster`), else the single Redis: for the tests that run on a bucket of the
/// cluster where there is one.
pub fn cluster_or_single_redis_url() -> String {
    std::env::var("SECKILL_REDIS_CLUSTER_URL").unwrap_or_else(|_| redis_url())
}

/// PostgreSQL URL of the stack's admin database (a superuser, database `postgres`).
pub fn pg_admin_url() -> String {
    std::env::var("SECKILL_PG_ADMIN_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5440/postgres".into())
}

/// `host:port` of the stack's Kafka-compatible broker.
pub fn kafka_broker() -> String {
    std::env::var("SECKILL_KAFKA_BROKER").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// The stack's broker as a checked connection (plain TCP, no SASL), for the binaries' confs.
pub fn kafka_connection() -> protocol::kafka::KafkaConnection {
    protocol::kafka::KafkaConnection::plaintext(vec![kafka_broker()])
}

/// A name no other test uses: `prefix` followed by 12 hex digits.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// A loopback port that nothing else in this test process will be given, for a server a test
/// is about to start there (or for an address that must refuse connections).
///
/// Binding port 0 and closing the socket again (the usual trick) lets the kernel hand the same
/// port to the next `bind(0)` before the server has bound it: another test's mock server then
/// answers this test's requests, or two gateways (both `SO_REUSEPORT`) share one address. Here
/// the socket stays bound (not listening) until the process exits, with `SO_REUSEADDR` and
/// `SO_REUSEPORT`: connects to it are refused until a server listens on it; the gateway,
/// `redis-server` and the order writer (all `SO_REUSEADDR`) can still listen there; no other
/// `bind(0)` gets it.
pub fn free_port() -> u16 {
    use socket2::{Domain, Socket, Type};
    static HELD: std::sync::Mutex<Vec<Socket>> = std::sync::Mutex::new(Vec::new());
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
    socket.set_reuse_address(true).expect("SO_REUSEADDR");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    socket.bind(&any.into()).expect("bind 127.0.0.1:0");
    let port = socket.local_addr().unwrap().as_socket().expect("an IP address").port();
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(socket);
    port
}

/// The workspace's root folder (holds `lua/`, `sql/`, `conf/`).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What every "server unreachable" error of this module ends with.
pub const STACK_HINT: &str = "is the stack up? (bash e2e/stack.sh up)";

/// How long connecting to one of the stack's servers may take before it counts as down.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs `fut` for at most [`CONNECT_TIMEOUT`]; a failure or a timeout becomes an error that
/// names `what` and `addr` (any password in it shown as `***`) and ends with [`STACK_HINT`].
async fn reach<T, E>(
    what: &str,
    addr: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T>
where
    E: std::fmt::Display,
{
    let addr = protocol::secret::redact_url(addr);
    match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(anyhow::anyhow!("{what} is not reachable at {addr} ({e}): {STACK_HINT}")),
        Err(_) => Err(anyhow::anyhow!(
            "{what} is not reachable at {addr} (no answer within {CONNECT_TIMEOUT:?}): {STACK_HINT}"
        )),
    }
}

/// A connected Redis client for `url`, with bounded connect and command timeouts and no
/// reconnection loop, so a test against a stopped server fails fast with a clear message.
pub async fn redis_client(url: &str) -> anyhow::Result<fred::prelude::Client> {
    use fred::prelude::{Builder, ClientLike, Config};
    let shown = protocol::secret::redact_url(url);
    let config = Config::from_url(url).with_context(|| format!("bad Redis URL {shown}"))?;
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = CONNECT_TIMEOUT;
            c.internal_command_timeout = CONNECT_TIMEOUT;
            c.max_command_attempts = 1;
        })
        .with_performance_config(|p| p.default_command_timeout = CONNECT_TIMEOUT)
        .build()?;
    reach("Redis", url, async {
        client.init().await?;
        client.ping::<String>(None).await
    })
    .await?;
    Ok(client)
}

/// Checks that Redis answers `PING` at `url`.
pub async fn check_redis(url: &str) -> anyhow::Result<()> {
    use fred::prelude::ClientLike;
    let client = redis_client(url).await?;
    let _ = client.quit().await;
    Ok(())
}

/// One PostgreSQL connection to `url`, bounded by [`CONNECT_TIMEOUT`].
pub async fn pg_connect(url: &str) -> anyhow::Result<sqlx::PgConnection> {
    use sqlx::Connection;
    reach("PostgreSQL", url, sqlx::PgConnection::connect(url)).await
}

/// Checks that PostgreSQL accepts a connection at `url` and answers a query.
pub async fn check_postgres(url: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    let mut conn = pg_connect(url).await?;
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut conn).await?;
    anyhow::ensure!(
        one == 1,
        "PostgreSQL at {} answered {one} to SELECT 1",
        protocol::secret::redact_url(url)
    );
    conn.close().await?;
    Ok(())
}

/// rskafka's retry policy for the stack: short backoff, and a deadline. rskafka's default has
/// none and retries for minutes, which would turn a stopped broker into a hung test.
pub fn kafka_backoff() -> rskafka::BackoffConfig {
    rskafka::BackoffConfig {
        init_backoff: std::time::Duration::from_millis(50),
        max_backoff: std::time::Duration::from_millis(500),
        base: 2.0,
        deadline: Some(CONNECT_TIMEOUT),
    }
}

/// A Kafka client for `broker` (`host:port`) with [`kafka_backoff`]: it has fetched the
/// cluster's metadata, so the broker answered a real Kafka request.
pub async fn kafka_client(broker: &str) -> anyhow::Result<rskafka::client::Client> {
    let builder = rskafka::client::ClientBuilder::new(vec![broker.to_string()])
        .client_id("seckill-e2e")
        .backoff_config(kafka_backoff());
    reach("The Kafka broker", broker, builder.build()).await
}

/// Checks that the Kafka broker at `broker` answers a metadata request.
pub async fn check_kafka(broker: &str) -> anyhow::Result<()> {
    let client = kafka_client(broker).await?;
    reach("The Kafka broker", broker, client.list_topics()).await?;
    Ok(())
}

/// Creates `topic` with `partitions` partitions (replication 1) on the stack's broker, as the
/// order writer does ([`backend::kafka::create_topic`]: it returns once every partition has a
/// leader). Topics are never created automatically.
pub async fn create_topic(
    client: &rskafka::client::Client,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    tokio::time::timeout(CONNECT_TIMEOUT * 2, backend::kafka::create_topic(client, topic, partitions, 1))
        .await
        .with_context(|| format!("creating topic {topic}: no answer within {:?}", CONNECT_TIMEOUT * 2))??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    /// The port stays ours: no `bind(0)` of this process is given it (the kernel reissues a
    /// just-released port within a few thousand binds on loopback), a connect to it is refused
    /// until a server listens there, and a server that sets `SO_REUSEADDR` (as the gateway,
    /// `redis-server` and tokio's listeners do) can listen there.
    #[test]
    fn a_free_port_is_held_refuses_connects_and_takes_a_server() {
        let port = super::free_port();
        for _ in 0..20_000 {
            let other = TcpListener::bind("127.0.0.1:0").unwrap();
            assert_ne!(other.local_addr().unwrap().port(), port, "bind(0) was given the held port");
        }
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "nothing listens yet");
        let server = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        server.set_reuse_address(true).unwrap();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        server.bind(&addr.into()).unwrap();
        server.listen(16).unwrap();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok(), "the server answers");
    }
}
