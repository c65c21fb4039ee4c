//! Partitions by lease, with real `order-writer serve` processes on a 12-partition topic: three
//! writers share the partitions with no plan; one killed with SIGKILL mid-sale has its partitions
//! resumed by the others within the lease bound; one paused (SIGSTOP) past its lease writes
//! nothing when it resumes, its late batch refused by the fence; a fourth joining mid-sale takes
//! its share. Every sale ends with each reservation ordered exactly once.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bin::{command, write_conf, Running};
use common::Env;

const PARTITIONS: i32 = 12;
/// The lease and renewal of these writers: a dead writer's partitions are taken over within
/// `LEASE + RENEW` plus the new owner's start.
const LEASE: Duration = Duration::from_millis(3000);
const RENEW: Duration = Duration::from_millis(500);
/// Margin over that bound for a loaded machine (a start connects to Kafka and PostgreSQL).
const MARGIN: Duration = Duration::from_secs(6);

/// One `order-writer serve` by lease, its log in a file.
struct Writer {
    child: Running,
    log: PathBuf,
}

impl Writer {
    /// Starts writer `name` of `env` (its own listen port, the test's lease timings).
    fn start(env: &Env, name: &str) -> Writer {
        Self::start_with(env, name, 6)
    }

    /// [`Writer::start_with`], with `args` after `serve` (a fixed plan: `--partitions ...`) and
    /// writer batches of `batch`; the binary is `ORDER_WRITER_BIN` when set (a release build,
    /// for [`measure_orders_per_second_by_writers`]).
    fn start_args(env: &Env, name: &str, batch: usize, args: &[&str]) -> Writer {
        Self::spawn(env, name, 6, batch, args)
    }

    /// [`Writer::start`] with a sweeper of age `sweep_age_secs` (a long one produces nothing
    /// again during a test: the topic then holds only what the test produced).
    fn start_with(env: &Env, name: &str, sweep_age_secs: u32) -> Writer {
        Self::spawn(env, name, sweep_age_secs, 20, &[])
    }

    fn spawn(env: &Env, name: &str, sweep_age_secs: u32, batch: usize, args: &[&str]) -> Writer {
        let base = std::fs::read_to_string(write_conf(env, batch)).unwrap();
        let base = base.replace("age_secs = 6", &format!("age_secs = {sweep_age_secs}"));
        let port = fixtures::stack::free_port();
        let first = base.lines().next().unwrap().to_string();
        let text = format!(
            "{}\n[leases]\nlease_ms = {}\nrenew_ms = {}\n",
            base.replacen(&first, &format!("listen = \"127.0.0.1:{port}\""), 1),
            LEASE.as_millis(),
            RENEW.as_millis()
        );
        let conf = env.dir.join(format!("{name}.toml"));
        std::fs::write(&conf, text).unwrap();
        let log = env.dir.join(format!("{name}.log"));
        let mut cmd = command(&conf, &[&["serve"], args].concat());
        if let Some(bin) = std::env::var_os("ORDER_WRITER_BIN") {
            let mut other = Command::new(bin);
            other.args(cmd.get_args()).envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))));
            cmd = other;
        }
        let child = cmd
            .env("RUST_LOG", "warn,backend::writer::leases=info,backend::writer=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Writer { child: Running::from(child), log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: &str) {
        assert!(Command::new("kill").args([sig, &self.pid().to_string()]).status().unwrap().success());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and a clean exit.
    fn stop(mut self) {
        self.signal("-TERM");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "SIGTERM ends a writer by lease cleanly: {status}\n{}", self.log());
    }
}

/// The partitions each live owner holds (owner id → partitions).
async fn holders(env: &Env) -> BTreeMap<String, Vec<i32>> {
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "SELECT owner, partition FROM partition_leases
          WHERE topic = $1 AND owner IS NOT NULL AND expires_at > now() ORDER BY partition",
    )
    .bind(&env.topic)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (owner, p) in rows {
        out.entry(owner).or_default().push(p);
    }
    out
}

/// The partitions the writer of `pid` holds.
async fn held_by(env: &Env, pid: u32) -> Vec<i32> {
    let prefix = format!("pid{pid}-");
    holders(env).await.into_iter().filter(|(o, _)| o.starts_with(&prefix)).flat_map(|(_, p)| p).collect()
}

/// Waits (bounded) until `n` writers hold `per` partitions each, every partition held.
async fn wait_spread(env: &Env, writers: &[&Writer], per: usize) {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let mut counts = Vec::new();
        for w in writers {
            counts.push(held_by(env, w.pid()).await.len());
        }
        if counts.iter().all(|&c| c == per) {
            return;
        }
        assert!(
            Instant::now() < limit,
            "shares {counts:?}, not {per} each, after 60 s: {:?}",
            holders(env).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reserves one unit for each of users `{prefix}{from..to}`; the records by partition, as the
/// gateway would produce them.
async fn reserve(env: &Env, prefix: &str, from: i64, to: i64) -> Vec<Vec<Vec<u8>>> {
    let mut per: Vec<Vec<Vec<u8>>> = vec![Vec::new(); env.partitions as usize];
    for i in from..to {
        let r = env.reserve(&format!("{prefix}{i}"), 1).await;
        let u = protocol::record::Reservation::from_json(&r).unwrap().user;
        per[backend::kafka::partition_for(&u, env.partitions) as usize].push(r);
    }
    per
}

/// Produces records reserved by [`reserve`].
async fn produce(env: &Env, per: Vec<Vec<Vec<u8>>>) {
    for (p, list) in per.into_iter().enumerate() {
        for chunk in list.chunks(500) {
            env.produce(p as i32, chunk.to_vec()).await;
        }
    }
}

/// [`reserve`], then [`produce`].
async fn sell(env: &Env, prefix: &str, from: i64, to: i64) {
    produce(env, reserve(env, prefix, from, to).await).await;
}

async fn offsets(env: &Env) -> Vec<i64> {
    let mut out = Vec::new();
    for p in 0..env.partitions {
        out.push(backend::writer::stored_offset(&env.pool, &env.topic, p).await.unwrap());
    }
    out
}

/// Waits (bounded) until each of `partitions` has a stored offset above `at[p]`; returns how
/// long after `t0` that was for the last of them.
async fn wait_advanced(env: &Env, partitions: &[i32], at: &[i64], t0: Instant, bound: Duration) -> Duration {
    loop {
        let now = offsets(env).await;
        if partitions.iter().all(|&p| now[p as usize] > at[p as usize]) {
            return t0.elapsed();
        }
        if t0.elapsed() > bound {
            panic!(
                "partitions {partitions:?} still at {now:?} (were {at:?}) after {bound:?}; {:?}",
                holders(env).await
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every reservation ordered exactly once, the stock and the outbox settled (bounded wait for
/// the sweeper to redeliver what a killed writer committed but did not ack).
async fn exactly_once(env: &Env, n: i64) {
    env.wait_offsets(&env.end_offsets().await).await;
    let limit = Instant::now() + Duration::from_secs(60);
    while env.outbox_len().await > 0 {
        assert!(Instant::now() < limit, "outbox still holds {} entries", env.outbox_len().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await,
        n,
        "no loss, no duplicate"
    );
    assert_eq!(env.count("SELECT count(DISTINCT user_id) FROM orders WHERE campaign_id = $1").await, n);
    assert_eq!(env.count("SELECT count(*) FROM stock_ledger WHERE campaign_id = $1").await, n);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, n);
    assert_eq!(env.stat("acked_count").await, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_writers_partitions_resume_on_the_others_within_the_bound() {
    const N: i64 = 6000;
    let env = Env::new(N, 1, PARTITIONS).await;
    // a writes a record per transaction: its ~1,000 records of the first half take it long
    // enough that the kill lands mid-stream however the machine schedules the test.
    let a = Writer::start_args(&env, "a", 1, &[]);
    let (b, c) = (Writer::start(&env, "b"), Writer::start(&env, "c"));
    wait_spread(&env, &[&a, &b, &c], 4).await;

    // Mid-sale: half the records produced, and a's first commit seen; a is killed.
    let rest = reserve(&env, "k", N / 2, N).await;
    sell(&env, "k", 0, N / 2).await;
    let theirs = held_by(&env, a.pid()).await;
    wait_written(&env, &theirs, &a).await;
    let mut a = a;
    a.child.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    a.child.wait().unwrap();
    let at_kill = offsets(&env).await;
    let ends = env.end_offsets().await;
    assert!(theirs.iter().any(|&p| at_kill[p as usize] < ends[p as usize]), "killed mid-stream");
    // The rest of the sale, so every partition of a has records to resume with.
    produce(&env, rest).await;
    let took = wait_advanced(&env, &theirs, &at_kill, killed, LEASE + RENEW + MARGIN).await;
    eprintln!("takeover after kill -9: {} ms (lease {LEASE:?}, renew {RENEW:?})", took.as_millis());

    exactly_once(&env, N).await;
    wait_spread(&env, &[&b, &c], 6).await;
    assert!(format!("{}{}", b.log(), c.log()).contains("partition taken over"), "{}", b.log());
    b.stop();
    c.stop();
    assert_eq!(holders(&env).await, BTreeMap::new(), "a clean stop releases every lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_paused_past_its_lease_writes_nothing_its_late_batch_fenced() {
    const N: i64 = 6000;
    let env = Env::new(N, 1, PARTITIONS).await;
    // No sweeper pass during the test (nothing is left unacked): the partitions' ends stay put,
    // so an offset that moves after the others wrote everything is a batch of b's.
    let start = |name| Writer::start_with(&env, name, 300);
    // b writes a record per transaction: its ~2,000 records take it long enough that the pause
    // lands mid-stream however the machine schedules the test.
    let (a, b, c) = (start("a"), Writer::spawn(&env, "b", 300, 1, &[]), start("c"));
    wait_spread(&env, &[&a, &b, &c], 4).await;

    // The whole sale on the topic; b is paused as soon as one of its partitions has a commit,
    // with most of its records still to write.
    sell(&env, "p", 0, N).await;
    let theirs = held_by(&env, b.pid()).await;
    wait_written(&env, &theirs, &b).await;
    b.signal("-STOP");
    let paused = Instant::now();
    // A commit b had sent lands meanwhile.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let at_pause = offsets(&env).await;
    let ends = env.end_offsets().await;
    assert!(theirs.iter().any(|&p| at_pause[p as usize] < ends[p as usize]), "paused mid-stream");

    // a and c take b's partitions over once its leases expire, and write everything.
    let behind: Vec<i32> =
        theirs.iter().copied().filter(|&p| at_pause[p as usize] < ends[p as usize]).collect();
    let took = wait_advanced(&env, &behind, &at_pause, paused, LEASE + RENEW + MARGIN).await;
    eprintln!("takeover after SIGSTOP: {} ms", took.as_millis());
    env.wait_offsets(&ends).await;
    let written = offsets(&env).await;
    assert_eq!(written, ends);

    // b resumes: the batch it had in flight is refused by the fence, nothing of it is written,
    // and no offset goes back.
    b.signal("-CONT");
    let limit = Instant::now() + Duration::from_secs(30);
    while !b.log().contains("the fence refused the batch") {
        assert!(Instant::now() < limit, "b's late batch was not refused by the fence:\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(LEASE).await;
    assert_eq!(offsets(&env).await, written, "b wrote nothing after its pause");
    exactly_once(&env, N).await;
    // b is a live writer again: the three share the partitions anew.
    wait_spread(&env, &[&a, &b, &c], 4).await;
    for w in [a, b, c] {
        w.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fourth_writer_joining_mid_sale_takes_its_share() {
    const N: i64 = 4000;
    let env = Env::new(N, 1, PARTITIONS).await;
    let (a, b, c) = (Writer::start(&env, "a"), Writer::start(&env, "b"), Writer::start(&env, "c"));
    wait_spread(&env, &[&a, &b, &c], 4).await;
    sell(&env, "j", 0, N / 2).await;

    // d joins mid-sale: the others release down to ceil(12 / 4) = 3 each, d claims 3.
    let d = Writer::start(&env, "d");
    wait_spread(&env, &[&a, &b, &c, &d], 3).await;
    let mine = held_by(&env, d.pid()).await;
    let before = offsets(&env).await;
    let joined = Instant::now();
    sell(&env, "j", N / 2, N).await;
    // d writes its share of the rest.
    wait_advanced(&env, &mine, &before, joined, Duration::from_secs(60)).await;
    assert_eq!(held_by(&env, d.pid()).await, mine, "d kept its partitions");
    exactly_once(&env, N).await;
    for w in [a, b, c, d] {
        w.stop();
    }
}

/// Waits (bounded) until one of `partitions` (held by `w`) has a commit.
async fn wait_written(env: &Env, partitions: &[i32], w: &Writer) {
    let limit = Instant::now() + Duration::from_secs(60);
    loop {
        let now = offsets(env).await;
        if partitions.iter().any(|&p| now[p as usize] > 0) {
            return;
        }
        assert!(Instant::now() < limit, "no commit on {partitions:?} within 60 s:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The fence itself, on one batch: a stale epoch, another owner or an expired lease is refused
/// in the batch's transaction (nothing written, the offset unmoved); the current lease commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_refuses_a_stale_epoch_another_owner_and_an_expired_lease() {
    use backend::writer::{write_batch_fenced, Fence, Fenced, Incoming};
    let env = Env::new(10, 1, 1).await;
    sqlx::query(
        "INSERT INTO partition_leases (topic, partition, owner, epoch, expires_at)
         VALUES ($1, 0, 'w1', 2, now() + interval '1 minute')",
    )
    .bind(&env.topic)
    .execute(&env.pool)
    .await
    .unwrap();
    let signer = protocol::signing::Signer::new(common::GATEWAY_KEY);
    let records: Vec<Incoming> = vec![Incoming::signed(0, env.reserve("fenced-user", 1).await, &signer)];
    let fence = |owner: &str, epoch| Fence { owner: owner.into(), epoch, idle: Duration::from_secs(1) };
    let write = |f: Fence| {
        let (pool, topic, records, signer) = (&env.pool, &env.topic, &records, &signer);
        async move { write_batch_fenced(pool, topic, 0, records, signer, Some(&f)).await }
    };
    for stale in [fence("w1", 1), fence("w2", 2)] {
        let e = write(stale).await.unwrap_err();
        assert!(e.downcast_ref::<Fenced>().is_some(), "{e:#}");
    }
    let orders = || env.count("SELECT count(*) FROM orders WHERE campaign_id = $1");
    assert_eq!(orders().await, 0, "a fenced batch writes nothing");
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 0);
    write(fence("w1", 2)).await.unwrap();
    assert_eq!(orders().await, 1, "the lease's own epoch commits");
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 1);

    sqlx::query("UPDATE partition_leases SET expires_at = now() - interval '1 second' WHERE topic = $1")
        .bind(&env.topic)
        .execute(&env.pool)
        .await
        .unwrap();
    let again = vec![Incoming::signed(1, env.reserve("fenced-user-2", 1).await, &signer)];
    let e = write_batch_fenced(&env.pool, &env.topic, 0, &again, &signer, Some(&fence("w1", 2)))
        .await
        .unwrap_err();
    assert!(e.downcast_ref::<Fenced>().is_some(), "an expired lease is refused: {e:#}");
    assert_eq!(orders().await, 1);
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 1);
}

/// A measure, not a test: orders/s of 1, 2 and 3 writers by lease on a 12-partition topic,
/// beside one writer with a fixed plan of all 12 (how a writer ran before leases), in one run,
/// each on a fresh database and topic with `MEASURE_ORDERS` (default 12,000) records produced
/// once the writers are ready, writer batches of 1,000 (the conf's default). Run by hand:
/// `ORDER_WRITER_BIN=<a release build> cargo test -p backend --test backend -- --ignored
/// --nocapture leases::measure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measure, run by hand"]
async fn measure_orders_per_second_by_writers() {
    let n: i64 = std::env::var("MEASURE_ORDERS").ok().and_then(|v| v.parse().ok()).unwrap_or(12_000);
    let all: String = (0..PARTITIONS).map(|p| p.to_string()).collect::<Vec<_>>().join(",");
    let fixed = ["--partitions", all.as_str()];
    for (label, writers, args) in [
        ("fixed plan (--partitions 0..11), 1 writer", 1, &fixed[..]),
        ("by lease, 1 writer", 1, &[][..]),
        ("by lease, 2 writers", 2, &[][..]),
        ("by lease, 3 writers", 3, &[][..]),
    ] {
        let env = Env::new(n, 1, PARTITIONS).await;
        let records = reserve(&env, "m", 0, n).await;
        let ws: Vec<Writer> =
            (0..writers).map(|i| Writer::start_args(&env, &format!("m{i}"), 1000, args)).collect();
        if args.is_empty() {
            let refs: Vec<&Writer> = ws.iter().collect();
            wait_spread(&env, &refs, PARTITIONS as usize / writers).await;
        } else {
            wait_started(&ws[0]).await;
        }
        let t0 = Instant::now();
        produce(&env, records).await;
        env.wait_offsets(&env.end_offsets().await).await;
        let secs = t0.elapsed().as_secs_f64();
        eprintln!("{label}: {n} orders in {secs:.2} s = {:.0} orders/s", n as f64 / secs);
        assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, n);
        for w in ws {
            w.stop();
        }
    }
}

/// Waits (bounded) until `w` runs a writer for each of the 12 partitions (its log's "writer
/// started" lines).
async fn wait_started(w: &Writer) {
    let limit = Instant::now() + Duration::from_secs(60);
    while w.log().matches("writer started").count() < PARTITIONS as usize {
        assert!(Instant::now() < limit, "writers not started within 60 s:\n{}", w.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
