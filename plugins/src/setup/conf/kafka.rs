//! The `[kafka]` table of the sale's conf: where the gateway produces reserved records. The
//! connection (brokers, `[kafka.tls]`, `[kafka.sasl]`) and the topic are read as the order
//! writer reads them ([`protocol::kafka`]).

use std::path::Path;

use crate::queue::QueueConf;
use protocol::conf::ConfError;
use protocol::kafka::{RawConnection, RawSasl, RawTls};
use protocol::timing::{LINGER_MAX_MS, PRODUCE_TIMEOUT_MAX_MS};
use serde::Deserialize;

use protocol::conf::Checker;

use super::{spanned, S};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKafka {
    brokers: S<Vec<S<String>>>,
    #[serde(default = "d_topic")]
    topic: S<String>,
    #[serde(default = "d_partitions")]
    partitions: S<i64>,
    #[serde(default = "d_batch_max")]
    batch_max: S<i64>,
    #[serde(default = "d_linger")]
    linger_ms: S<i64>,
    #[serde(default = "d_produce_timeout")]
    produce_timeout_ms: S<i64>,
    #[serde(default = "d_queue_capacity")]
    queue_capacity: S<i64>,
    tls: Option<S<RawTls>>,
    sasl: Option<S<RawSasl>>,
}

fn d_topic() -> S<String> {
    spanned("seckill.reservations".into())
}
fn d_partitions() -> S<i64> {
    spanned(4)
}
fn d_batch_max() -> S<i64> {
    spanned(500)
}
fn d_linger() -> S<i64> {
    spanned(5)
}
fn d_produce_timeout() -> S<i64> {
    spanned(1000)
}
fn d_queue_capacity() -> S<i64> {
    spanned(100_000)
}

/// Validates the table. `base` anchors a relative CA file or `file:` password.
pub(super) fn check(c: &Checker<'_>, k: &RawKafka, base: &Path) -> Result<QueueConf, ConfError> {
    let err = |span, field: &str, msg: String| c.err(span, field, msg);
    let connection = protocol::kafka::check_connection(
        RawConnection { brokers: &k.brokers, tls: k.tls.as_ref(), sasl: k.sasl.as_ref() },
        &err,
        base,
    )?;
    let topic = protocol::kafka::check_topic(&k.topic, &k.partitions, &err)?;
    Ok(QueueConf {
        connection,
        topic: topic.name,
        partitions: topic.partitions,
        batch_max: c.int(&k.batch_max, "kafka.batch_max", 1, 10_000)?,
        linger: c.ms(&k.linger_ms, "kafka.linger_ms", 0, LINGER_MAX_MS)?,
        produce_timeout: c.ms(
            &k.produce_timeout_ms,
            "kafka.produce_timeout_ms",
            10,
            PRODUCE_TIMEOUT_MAX_MS,
        )?,
        capacity: c.int(&k.queue_capacity, "kafka.queue_capacity", 1, 10_000_000)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, parse, GOOD};

    #[test]
    fn bad_kafka_values_are_refused_with_line_and_field() {
        let with = |extra: &str| GOOD.replace("brokers = [\"127.0.0.1:19092\"]", extra);
        expect_err(&with("brokers = []"), 13, "kafka.brokers", "at least one");
        expect_err(&with("brokers = [\"kafka\"]"), 13, "kafka.brokers", "host:port");
        assert!(parse(&with("brokers = [\"kafka-1.corp:9093\"]")).is_ok(), "a company's brokers have names");
        let line = |key: &str| with(&format!("brokers = [\"127.0.0.1:19092\"]\n{key}"));
        expect_err(&line("topic = \"a b\""), 14, "kafka.topic", "1 to 249");
        expect_err(&line("topic = \"\""), 14, "kafka.topic", "1 to 249");
        expect_err(&line("partitions = 0"), 14, "kafka.partitions", "between 1 and 1024");
        expect_err(&line("batch_max = 0"), 14, "kafka.batch_max", "between 1 and 10000");
        expect_err(&line("linger_ms = -1"), 14, "kafka.linger_ms", "between 0 and 500");
        expect_err(&line("linger_ms = 501"), 14, "kafka.linger_ms", "between 0 and 500");
        expect_err(&line("produce_timeout_ms = 9"), 14, "kafka.produce_timeout_ms", "between 10 and 2500");
        expect_err(&line("produce_timeout_ms = 2501"), 14, "kafka.produce_timeout_ms", "between 10 and 2500");
        expect_err(&line("queue_capacity = 0"), 14, "kafka.queue_capacity", "between 1 and 10000000");
        expect_err(&line("lingr_ms = 5"), 14, "lingr_ms", "unknown field");
        let bounds = parse(&line("linger_ms = 500\nproduce_timeout_ms = 2500\nbatch_max = 1")).unwrap();
        assert_eq!(bounds.kafka.linger + bounds.kafka.produce_timeout, protocol::timing::GATEWAY_HOLD_MAX);
        let no_table = GOOD.replace("[kafka]\nbrokers = [\"127.0.0.1:19092\"]\n", "");
        assert!(parse(&no_table).unwrap_err().message.contains("kafka"), "the table is required");
    }
}
