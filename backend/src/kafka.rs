//! Kafka plumbing shared by the sweeper, `order-writer produce` and the writer: clients with
//! deadlines, topic creation, and the user → partition hash.

pub mod produce;
pub mod producer;

use std::time::Duration;

use anyhow::Context;
use protocol::kafka::KafkaConnection;
use rskafka::client::error::{Error as KafkaError, ProtocolError};
use rskafka::client::partition::{PartitionClient, UnknownTopicHandling};
use rskafka::client::Client;
use rskafka::BackoffConfig;

/// Builds a client (TLS and SASL as the conf says) whose retries stop after `deadline`
/// (rskafka's default retries for minutes).
pub async fn client(connection: &KafkaConnection, deadline: Duration) -> anyhow::Result<Client> {
    let brokers = connection.brokers();
    let backoff = BackoffConfig {
        init_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(500),
        base: 2.0,
        deadline: Some(deadline),
    };
    let build = connection.builder().backoff_config(backoff).build();
    tokio::time::timeout(deadline + Duration::from_secs(1), build)
        .await
        .map_err(|_| anyhow::anyhow!("Kafka at {brokers:?} did not answer within {deadline:?}"))?
        .with_context(|| format!("cannot reach Kafka at {brokers:?}"))
}

/// A client for one partition of `topic`.
pub async fn partition(
    client: &Client,
    topic: &str,
    partition: i32,
    deadline: Duration,
) -> anyhow::Result<PartitionClient> {
    tokio::time::timeout(deadline, client.partition_client(topic, partition, UnknownTopicHandling::Error))
        .await
        .map_err(|_| anyhow::anyhow!("partition {topic}/{partition}: no leader within {deadline:?}"))?
        .with_context(|| format!("partition {topic}/{partition}"))
}

/// Creates `topic` with `partitions` partitions of `replication_factor` replicas each (-1: the
/// cluster's `default.replication.factor`); an existing topic is fine. Returns whether it was
/// created now. The brokers are asked first and a create is sent only for a missing topic:
/// rskafka logs a refused create (`TopicAlreadyExists`) at ERROR level itself, which would read
/// as a failure in the logs of every start after the first.
pub async fn create_topic(
    client: &Client,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
) -> anyhow::Result<bool> {
    let known = client.list_topics().await.context("listing topics")?;
    if known.iter().any(|t| t.name == topic) {
        return Ok(false);
    }
    let controller = client.controller_client().context("no controller")?;
    match controller.create_topic(topic, partitions, replication_factor, 5_000).await {
        Ok(()) => {
            wait_for_leaders(client, topic, partitions).await?;
            Ok(true)
        }
        // Another process created it a moment ago (writers starting together make the events
        // topic at once): the brokers may not list it yet.
        Err(KafkaError::ServerError { protocol_error: ProtocolError::TopicAlreadyExists, .. }) => {
            wait_listed(client, topic).await?;
            Ok(false)
        }
        Err(e) => Err(e).with_context(|| format!("creating topic {topic}")),
    }
}

/// Creates the conf's topic if it is missing (`topic create`, and every start of `serve` and
/// `produce`), then checks that it has the conf's partition count: a topic made elsewhere with
/// another count would hash users over the wrong partitions. Returns whether it was created now.
pub async fn ensure_topic(client: &Client, kafka: &crate::conf::KafkaConf) -> anyhow::Result<bool> {
    let created = create_topic(client, &kafka.topic, kafka.partitions, kafka.replication_factor).await?;
    let found = protocol::kafka::topic_partitions(client, &kafka.topic, kafka.produce_timeout)
        .await
        .map_err(|e| anyhow::anyhow!("reading the metadata of topic {}: {e}", kafka.topic))?;
    protocol::kafka::partitions_match(&kafka.topic, kafka.partitions, found).map_err(anyhow::Error::msg)?;
    Ok(created)
}

/// Waits (at most [`LEADERS_WITHIN`]) until the brokers list `topic`, with its partitions.
async fn wait_listed(client: &Client, topic: &str) -> anyhow::Result<()> {
    let until = tokio::time::Instant::now() + LEADERS_WITHIN;
    loop {
        let known = client.list_topics().await.context("listing topics")?;
        if known.iter().any(|t| t.name == topic && !t.partitions.is_empty()) {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < until,
            "topic {topic} exists (its create was refused) but the brokers do not list it after {LEADERS_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a new topic's partitions may take to get their leaders.
const LEADERS_WITHIN: Duration = Duration::from_secs(15);

/// Apache Kafka answers CreateTopics once its controller has the topic, before every broker has
/// the new partitions' metadata: a produce or fetch right after can meet UnknownTopicOrPartition.
/// Waits (bounded) until each partition has a leader the brokers name.
async fn wait_for_leaders(client: &Client, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let until = tokio::time::Instant::now() + LEADERS_WITHIN;
    for p in 0..partitions {
        loop {
            match client.partition_client(topic, p, UnknownTopicHandling::Error).await {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() >= until => {
                    return Err(e).with_context(|| {
                        format!(
                        "topic {topic}: partition {p} has no leader {LEADERS_WITHIN:?} after its creation"
                    )
                    })
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    Ok(())
}

pub use protocol::record::partition_for;

/// The reservations topic, for proving that a record is not waiting in it (reconcile) and for
/// holding the sweep back while the writer is behind (the sweeper).
#[derive(Clone, Copy)]
pub struct Topic<'a> {
    /// Kafka client.
    pub kafka: &'a Client,
    /// Topic name.
    pub name: &'a str,
    /// Its partition count (users are hashed over it).
    pub partitions: i32,
}

impl Topic<'_> {
    /// The end offset of every partition, in partition order.
    pub async fn end_offsets(&self, deadline: Duration) -> anyhow::Result<Vec<i64>> {
        let mut ends = Vec::with_capacity(self.partitions as usize);
        for p in 0..self.partitions {
            let pc = partition(self.kafka, self.name, p, deadline).await?;
            let end =
                tokio::time::timeout(deadline, pc.get_offset(rskafka::client::partition::OffsetAt::Latest))
                    .await
                    .map_err(|_| {
                        anyhow::anyhow!("partition {}/{p}: no end offset within {deadline:?}", self.name)
                    })?
                    .with_context(|| format!("end offset of {}/{p}", self.name))?;
            ends.push(end);
        }
        Ok(ends)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_spread_and_stay_put() {
        assert_eq!(partition_for("alice", 4), partition_for("alice", 4));
        let mut seen = [0; 4];
        for i in 0..400 {
            seen[partition_for(&format!("u{i}"), 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
        assert_eq!(partition_for("x", 1), 0);
    }
}
