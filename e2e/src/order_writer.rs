//! An order writer configuration on the local stack, for tests that run the order writer
//! in-process (the order writer's own tests, and the gateway's end-to-end sale tests).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use backend::conf::{Conf, KafkaConf, LeaseConf, Plan, PostgresConf, WriterConf};
use protocol::conf::Millis;

use crate::stack;

/// The writer's batch and fetch settings of the tests: small batches, short waits.
pub fn writer_conf(batch_size: usize) -> WriterConf {
    WriterConf {
        batch_size,
        max_wait: Millis::new(20).expect("a wait"),
        fetch_max_bytes: 1 << 20,
        idle_wait: Millis::new(50).expect("a wait"),
        batch_retries: 3,
    }
}

/// What a test order writer needs of its environment.
pub struct Place<'a> {
    /// Where its HTTP server listens.
    pub listen: SocketAddr,
    /// Its database (fresh, from [`crate::cleanup::Database::create`]).
    pub postgres_url: &'a str,
    /// The folder of its campaign files.
    pub campaigns_dir: &'a Path,
    /// Its topic, and the topic's partition count.
    pub topic: &'a str,
    /// Partitions of `topic` (all assigned to this writer: a fixed plan).
    pub partitions: i32,
    /// The key records are signed with.
    pub gateway_key: &'a [u8],
    /// The payment provider's key.
    pub payment_key: &'a [u8],
}

/// A configuration on the stack's servers, with the scripts and migrations compiled in, a
/// sweeper of age 1 s every 200 ms and a closer every 100 ms (override fields as a test needs).
pub fn conf(place: Place<'_>) -> Conf {
    Conf {
        file: std::path::PathBuf::new(),
        listen: place.listen,
        redis_url: stack::redis_url(),
        redis_password: None,
        postgres: PostgresConf {
            url: place.postgres_url.to_string(),
            password: None,
            schema: None,
            migrations_dir: None,
        },
        campaigns_dir: place.campaigns_dir.to_path_buf(),
        lua_dir: None,
        gateway_key: place.gateway_key.to_vec(),
        payment_key: place.payment_key.to_vec(),
        payment_max_skew_secs: 300,
        result_pool_size: 2,
        kafka: KafkaConf {
            connection: stack::kafka_connection(),
            replication_factor: 1,
            topic: place.topic.to_string(),
            partitions: place.partitions,
            plan: Plan::Fixed((0..place.partitions).collect()),
            produce_timeout: Duration::from_secs(3),
            produce_batch: 200,
        },
        writer: writer_conf(100),
        sweep_age: Duration::from_secs(1),
        sweep_interval: Duration::from_millis(200),
        close_interval: Duration::from_millis(100),
        close_batch: 50,
        admin_listen: None,
        admin_token: None,
        events: backend::workers::events::EventsConf {
            topic: backend::workers::events::default_topic(place.topic),
            partitions: place.partitions,
        },
        leases: LeaseConf { lease: Duration::from_secs(10), renew: Duration::from_millis(2500) },
        fleet: Default::default(),
    }
}
