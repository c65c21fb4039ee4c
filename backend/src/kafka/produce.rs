//! `order-writer produce`: signed test reservations on the topic, so the order writer can be run
//! and exercised without a gateway.
//!
//! # The record format on the topic
//!
//! Every reservation travels as one Kafka record on the topic `kafka.topic`:
//!
//! | part | content |
//! |---|---|
//! | value | the reservation JSON exactly as `lua/reserve.lua` returned it ([`Reservation`]), one object, no trailing newline |
//! | key | the user id (UTF-8) |
//! | partition | [`protocol::record::partition_for`]`(user, kafka.partitions)`: FNV-1a of the user id modulo the partition count, so one user's records stay in one partition, in order |
//! | header `seckill-signature` ([`RECORD_SIGNATURE_HEADER`]) | hex HMAC-SHA256 of the value bytes under the gateway key (`gateway_key`; [`Signer::sign`]) |
//!
//! The value's fields ([`Reservation`]): `request_id` (1 to 128 bytes, unique; the gateway uses a
//! UUID v7), `campaign` (1 to 64 of `A-Z a-z 0-9 _ -`), `user` (not empty), `sku`, `qty` (1 to
//! 10,000), `price_cents` (unit price, 0 to 10^10, from the published campaign),
//! `price_version`, `stock_version`, `reserved_at_ms` (Redis time of the reservation, ms since
//! the epoch; these three not negative), `buckets` (1 to 64, absent: 1); checked by
//! [`Reservation::check`]. For example:
//!
//! ```text
//! {"request_id":"0190c3e4-…","campaign":"demo","user":"u42","sku":"SKU-1","qty":1,
//!  "price_cents":1999,"price_version":1,"stock_version":1,"reserved_at_ms":1700000000000}
//! ```
//!
//! The gateway, the sweeper ([`crate::kafka::producer`]) and this subcommand write records this way. The
//! writer signs nothing and trusts nothing else: a record without the header, or whose signature
//! does not match its value, goes to `dead_letters` with its offset ("unsigned record" /
//! "signature does not match") and never becomes an order; so does a signed value that is not a
//! valid reservation. Either way the partition moves on.
//!
//! # The subcommand
//!
//! - `order-writer produce --file PATH`: JSON lines, one reservation per line (blank lines are
//!   skipped), each produced exactly as written, signed, in file order. The whole file is read
//!   and checked first: a file that cannot be read, or a line that is not a reservation, is
//!   refused with the file and line named, and nothing is produced. These reservations are not
//!   in Redis: the writer orders them against PostgreSQL's stock, and a refusal gives nothing
//!   back to Redis.
//! - `order-writer produce --generate N --campaign ID [--users M]`: reserves N units, one per
//!   call, through `lua/reserve.lua` in Redis as the gateway does (the campaign must be
//!   published: `order-writer campaign publish ID`), spread round robin over M new users (default
//!   N, one unit each), so the outbox holds them; then produces the signed records. If the script
//!   refuses one (sold out, a user at the per-user limit), what was reserved before is produced
//!   and the command fails saying why. A record whose produce fails stays in the outbox, and a
//!   running `order-writer serve`'s sweeper produces it later. The generator lives apart, in
//!   [`generate`]: a test-data tool the writer, the sweeper and the closer never use.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use protocol::record::Reservation;
use protocol::signing::{Signer, RECORD_SIGNATURE_HEADER};

use crate::app::Connections;
use crate::kafka::producer::Producer;

pub mod generate;

/// One record to produce: its user (the key) and its value bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The user id: the record's key and what its partition is computed from.
    pub user: String,
    /// The reservation JSON, produced as is.
    pub value: Vec<u8>,
}

/// Why a file of reservations was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A line is not a reservation record.
    #[error("{}:{line}: not a reservation record: {reason}", path.display())]
    BadLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file holds no reservation at all.
    #[error("{}: no reservation record in the file", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// Parses the JSON lines of `path` (its `bytes`): one [`Reservation`] per line, blank lines
/// skipped, each value kept byte for byte (without its line ending). The first bad line refuses
/// the whole file.
pub fn parse_lines(path: &Path, bytes: &[u8]) -> Result<Vec<Outgoing>, FileError> {
    let mut out = Vec::new();
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let bad = |reason: String| FileError::BadLine { path: path.to_path_buf(), line: i + 1, reason };
        let r = Reservation::from_json(line).map_err(|e| bad(e.to_string()))?;
        r.check().map_err(bad)?;
        out.push(Outgoing { user: r.user, value: line.to_vec() });
    }
    if out.is_empty() {
        return Err(FileError::Empty { path: path.to_path_buf() });
    }
    Ok(out)
}

/// Reads and parses a file of reservations ([`parse_lines`]).
pub fn read_file(path: &Path) -> Result<Vec<Outgoing>, FileError> {
    let bytes = std::fs::read(path).map_err(|source| FileError::Read { path: path.to_path_buf(), source })?;
    parse_lines(path, &bytes)
}

/// Where `order-writer produce` takes its records from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--file PATH`: JSON lines, produced as written.
    File(PathBuf),
    /// `--generate N --campaign ID [--users M]`: reserved through `lua/reserve.lua` first.
    Generate(generate::Plan),
}

/// `order-writer produce`: reads or generates the records, produces them, prints where they
/// went; fails after producing when the generation stopped early.
pub async fn run(conns: &Connections<'_>, source: Source) -> anyhow::Result<()> {
    let (records, stopped) = match source {
        Source::File(path) => (read_file(&path)?, None),
        Source::Generate(plan) => {
            let g = generate::run(conns, &plan).await?;
            (g.records, g.stopped)
        }
    };
    let per = produce(conns, records).await?;
    println!("{}", summary(&conns.conf().kafka.topic, &per));
    if let Some(why) = stopped {
        anyhow::bail!("stopped early: {why}");
    }
    Ok(())
}

/// Produces `records` to the configured topic, signed with the gateway key, in order (one
/// user's records in their order on the user's partition), and waits for every ack. Returns how
/// many went to each partition.
pub async fn produce(conns: &Connections<'_>, records: Vec<Outgoing>) -> anyhow::Result<Vec<usize>> {
    let cfg = conns.conf();
    let kc = Arc::new(conns.kafka_with_topic().await?);
    let producer = Producer::start(
        kc,
        &cfg.kafka.topic,
        cfg.kafka.partitions,
        cfg.kafka.produce_batch,
        cfg.kafka.produce_timeout,
        Arc::new(Signer::new(&cfg.gateway_key)),
    );
    let total = records.len();
    let mut pending = Vec::with_capacity(total);
    for r in records {
        pending.push(producer.submit(&r.user, r.value).await?);
    }
    let mut per = vec![0; cfg.kafka.partitions as usize];
    let mut failed = Vec::new();
    for result in futures::future::join_all(pending.into_iter().map(|p| p.acked())).await {
        match result {
            Ok((p, _offset)) => per[p as usize] += 1,
            Err(e) => failed.push(e.to_string()),
        }
    }
    if let Some(first) = failed.first() {
        anyhow::bail!("{} of {total} records not produced: {first}", failed.len());
    }
    Ok(per)
}

/// One line saying where the records went.
pub fn summary(topic: &str, per_partition: &[usize]) -> String {
    let total: usize = per_partition.iter().sum();
    let parts: Vec<String> = per_partition.iter().enumerate().map(|(p, n)| format!("{p}: {n}")).collect();
    format!(
        "produced {total} signed records ({RECORD_SIGNATURE_HEADER} header) to {topic}, by partition {}",
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = r#"{"request_id":"r1","campaign":"c","user":"u1","sku":"s","qty":1,"price_cents":1,"price_version":1,"stock_version":1,"reserved_at_ms":1}"#;
    const B: &str = r#"{"request_id":"r2","campaign":"c","user":"u2","sku":"s","qty":2,"price_cents":1,"price_version":1,"stock_version":1,"reserved_at_ms":1}"#;

    #[test]
    fn lines_are_kept_byte_for_byte_in_order_and_blank_lines_skipped() {
        let text = format!("{A}\r\n\n   \n{B}");
        let out = parse_lines(Path::new("r.jsonl"), text.as_bytes()).unwrap();
        assert_eq!(
            out,
            [
                Outgoing { user: "u1".into(), value: A.as_bytes().to_vec() },
                Outgoing { user: "u2".into(), value: B.as_bytes().to_vec() },
            ]
        );
    }

    #[test]
    fn a_bad_line_refuses_the_file_naming_it_and_its_line() {
        for (text, line, words) in [
            (format!("{A}\n\n{{not json\n{B}\n"), 3, "key must be a string"),
            (format!("{A}\n{}\n", r#"{"request_id":"r3"}"#), 2, "missing field"),
            (format!("{A}\n\u{0}\u{ff}\n"), 2, "reservation"),
            (
                format!("{A}\n{}\n", A.replace("\"price_cents\":1,", "\"price_cents\":100000000000000,")),
                2,
                "price_cents",
            ),
            (format!("{A}\n{}\n", A.replace("\"qty\":1,", "\"qty\":0,")), 2, "qty 0"),
        ] {
            let e = parse_lines(Path::new("dir/r.jsonl"), text.as_bytes()).unwrap_err();
            assert!(matches!(e, FileError::BadLine { line: l, .. } if l == line), "{e}");
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("dir/r.jsonl:{line}: not a reservation record")), "{msg}");
            assert!(msg.contains(words), "{msg}");
        }
        let e = parse_lines(Path::new("empty.jsonl"), b"\n \n").unwrap_err();
        assert_eq!(e.to_string(), "empty.jsonl: no reservation record in the file");
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let e = read_file(Path::new("/nonexistent/reservations.jsonl")).unwrap_err();
        assert!(e.to_string().starts_with("cannot read /nonexistent/reservations.jsonl:"), "{e}");
    }

    #[test]
    fn the_summary_names_the_topic_and_each_partition() {
        assert_eq!(
            summary("t", &[2, 0, 1]),
            "produced 3 signed records (seckill-signature header) to t, by partition 0: 2, 1: 0, 2: 1"
        );
    }
}
