//! The `order-writer` binary installed alone, as a backend team runs it: copied out of the
//! repository, `migrate` with nothing but a PostgreSQL URL, the tables in the conf's schema,
//! `serve --no-migrate` refusing an older schema, and `check` naming each server.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use backend::db::schema::{self, Schema};
use common::bin::{command, write_conf};
use common::Env;
use fixtures::{cleanup, stack};

/// A folder outside the repository holding a copy of the binary; removed on drop.
struct Installed {
    dir: PathBuf,
    bin: PathBuf,
}

impl Installed {
    fn new() -> Installed {
        let dir = std::env::temp_dir().join(stack::unique("ow-alone-"));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("order-writer");
        std::fs::copy(common::bin::BIN, &bin).unwrap();
        Installed { dir, bin }
    }

    /// `order-writer <args>` run in the folder, with an empty environment but `PATH` (no Redis,
    /// no keys, nothing of the repository).
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .unwrap()
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The tables of `schema` in the database of `url`, sorted.
async fn tables(url: &str, schema: &str) -> Vec<String> {
    let pool = backend::db::connect(url, 1).await.unwrap();
    let names = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    names
}

/// The newest migration of this build: one a file of `sql/`, numbered from 1.
fn newest() -> usize {
    std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../sql")).unwrap().count()
}

const TABLES: [&str; 12] = [
    "_sqlx_migrations",
    "audit_log",
    "campaigns",
    "consumer_offsets",
    "dead_letters",
    "order_events",
    "orders",
    "partition_leases",
    "reservation_results",
    "stock_additions",
    "stock_ledger",
    "writer_heartbeats",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_needs_only_a_postgres_url_outside_the_repository() {
    let db = cleanup::Database::create().await.expect("PostgreSQL of the stack");
    let alone = Installed::new();
    for run in ["first", "again"] {
        let out = alone.run(&["migrate", "--postgres-url", &db.url, "--schema", "shop"]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{run}: {stderr}");
        assert!(
            stdout.contains(&format!(
                "schema shop (compiled in): at migration {}, this binary's newest",
                newest()
            )),
            "{stdout}"
        );
    }
    assert_eq!(tables(&db.url, "shop").await, TABLES, "every table in the schema");
    assert_eq!(tables(&db.url, "public").await, Vec::<String>::new(), "nothing in public");

    // A conf with the PostgreSQL part alone next to keys and servers this environment lacks.
    std::fs::write(
        alone.dir.join("order-writer.toml"),
        format!(
            "postgres_url = \"{}\"\nredis_url = \"redis://127.0.0.1:1\"\ngateway_key = \"env:NOT_SET\"\n\n\
             [postgres]\nschema = \"shop_two\"\n",
            db.url
        ),
    )
    .unwrap();
    let out = alone.run(&["--conf", "order-writer.toml", "migrate"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(tables(&db.url, "shop_two").await, TABLES, "a second schema in the same database");

    // No schema: the server's search_path (public), as before the setting existed.
    let out = alone.run(&["migrate", "--postgres-url", &db.url]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(text(&out).0.contains("the default schema"), "{}", text(&out).0);
    assert_eq!(tables(&db.url, "public").await, TABLES);

    // Bad input: a schema name refused before connecting, a conf's with its place.
    let out = alone.run(&["migrate", "--postgres-url", &db.url, "--schema", "Shop"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("\"Shop\" is not a schema name"), "{}", text(&out).1);
    let conf = alone.dir.join("order-writer.toml");
    let bad = std::fs::read_to_string(&conf).unwrap().replace("shop_two", "pg_shop");
    std::fs::write(&conf, bad).unwrap();
    let out = alone.run(&["--conf", "order-writer.toml", "migrate"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("order-writer.toml:6:10: field `postgres.schema`"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Runs `cmd` to its end, at most `within`: a command that should refuse to start and serves
/// instead is killed, and the test fails.
fn run_bounded(mut cmd: Command, within: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let limit = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {within:?}: {}", text(&out).1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Applies the migrations up to `version` only, in `schema`: the schema an older binary left.
async fn migrate_to(url: &str, schema: &Schema, version: i64) {
    let pool = backend::db::connect_in(url, None, Some(schema), 1).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&pool).await.unwrap();
    let migrations = schema::migrations(None, Some(schema)).await.unwrap();
    migrations.run_to(version, &pool).await.unwrap();
    pool.close().await;
}

/// Adds `[postgres] schema = "<schema>"` to the conf of `path`.
fn with_schema(path: &Path, schema: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, format!("{text}\n[postgres]\nschema = \"{schema}\"\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_no_migrate_refuses_an_older_schema_and_check_says_why() {
    let env = Env::new(1, 1, 1).await;
    let conf = write_conf(&env, 10);
    with_schema(&conf, "shop");
    let shop = Schema::new("shop").unwrap();
    migrate_to(&env.pg_url, &shop, 3).await;

    let out = run_bounded(command(&conf, &["serve", "--no-migrate"]), Duration::from_secs(30));
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "schema shop is older than this order-writer: it has migrations up to 3, and lacks 4 \
             (held per user)"
        ) && stderr.contains("; run `order-writer migrate` first"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = run_bounded(command(&conf, &["check"]), Duration::from_secs(60));
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("FAILED  postgres ") && stdout.contains("is older than this order-writer"),
        "{stdout}"
    );
    assert!(stdout.contains("ok      redis ") && stdout.contains("ok      kafka "), "{stdout}");
    assert!(stderr.contains("check failed: postgres"), "{stderr}");

    let out = command(&conf, &["migrate"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let out = run_bounded(command(&conf, &["check"]), Duration::from_secs(60));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let newest_line = format!("schema shop at migration {}, this binary's newest", newest());
    assert!(stdout.contains(&newest_line), "{stdout}");
    let topic = format!("topic {} has 1 partitions", env.topic);
    assert!(stdout.contains(&topic), "{stdout}");

    // A topic with another partition count, a Redis that is not there: each named.
    let text_of = std::fs::read_to_string(&conf).unwrap();
    let broken = text_of
        .replace("partitions = 1", "partitions = 2")
        .replace(&stack::redis_url(), "redis://127.0.0.1:1");
    std::fs::write(&conf, broken).unwrap();
    let out = run_bounded(command(&conf, &["check"]), Duration::from_secs(60));
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stdout.contains("ok      postgres "), "{stdout}");
    assert!(stdout.contains("FAILED  redis redis://127.0.0.1:1"), "{stdout}");
    assert!(stdout.contains("has 1 partitions but kafka.partitions = 2"), "{stdout}");
    assert!(stderr.contains("check failed: redis, kafka"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_runs_outside_the_repository_and_refuses_a_missing_key() {
    let env = Env::new(1, 1, 1).await;
    let alone = Installed::new();
    let conf = write_conf(&env, 10);
    let text_of = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(alone.dir.join("order-writer.toml"), &text_of).unwrap();
    // The keys are not in this environment: the conf is refused at the key, nothing connects.
    let out = alone.run(&["-c", "order-writer.toml", "check"]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("order-writer.toml:") && stderr.contains("gateway_key"), "{stderr}");
    assert!(!stdout.contains("postgres"), "{stdout}");
    // With the keys, from the folder: every server answers (the default schema, migrated by Env).
    let out = Command::new(&alone.bin)
        .args(["-c", "order-writer.toml", "check"])
        .current_dir(&alone.dir)
        .env_clear()
        .env("OW_TEST_GATEWAY_KEY", String::from_utf8_lossy(common::GATEWAY_KEY).to_string())
        .env("OW_TEST_PAYMENT_KEY", String::from_utf8_lossy(common::PAYMENT_KEY).to_string())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let newest_line = format!("the default schema (search_path) at migration {}", newest());
    assert!(stdout.contains(&newest_line), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok  ")).count(), 4, "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_writes_every_order_in_the_schema() {
    let env = Env::new(5, 1, 1).await;
    let conf = write_conf(&env, 10);
    with_schema(&conf, "shop");
    for args in [&["migrate"][..], &["campaign", "publish", &env.campaign][..]] {
        let out = command(&conf, args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out).1);
    }
    let mut child = common::bin::spawn(&conf, &["serve", "--no-migrate"]);
    env.produce_records(vec![env.reserve("schema-user", 1).await]).await;
    let pool = backend::db::connect(&env.pg_url, 1).await.unwrap();
    let in_shop = || sqlx::query_scalar::<_, i64>("SELECT count(*) FROM shop.orders").fetch_one(&pool);
    let limit = Instant::now() + Duration::from_secs(60);
    while in_shop().await.unwrap() == 0 {
        assert!(Instant::now() < limit, "no order in shop.orders within 60 s");
        assert!(child.try_wait().unwrap().is_none(), "serve ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
    let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool);
    assert_eq!(count("SELECT count(*) FROM public.orders").await.unwrap(), 0, "nothing in public");
    assert_eq!(count("SELECT sold FROM shop.campaigns").await.unwrap(), 1);
    assert_eq!(count("SELECT count(*) FROM shop.stock_ledger").await.unwrap(), 1);
    assert_eq!(count("SELECT count(*) FROM shop.consumer_offsets").await.unwrap(), 1);
    // The order's event: written by the trigger into the schema's outbox.
    assert_eq!(count("SELECT count(*) FROM shop.order_events WHERE kind = 'created'").await.unwrap(), 1);
    pool.close().await;
}

/// Connections whose `search_path` is not the schema (a pooler that dropped the startup
/// parameter) are refused before anything is read or written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_outside_the_schema_are_refused() {
    let db = cleanup::Database::create().await.expect("PostgreSQL of the stack");
    let shop = Schema::new("shop").unwrap();
    let migrations = schema::migrations(None, Some(&shop)).await.unwrap();
    let plain = backend::db::connect(&db.url, 1).await.unwrap();
    for e in [
        schema::migrate(&plain, Some(&shop), &migrations).await.unwrap_err(),
        schema::verify(&plain, Some(&shop), &migrations).await.map(|_| ()).unwrap_err(),
    ] {
        assert!(e.to_string().contains("public, not shop"), "{e:#}");
    }
    plain.close().await;
    assert_eq!(tables(&db.url, "public").await, Vec::<String>::new(), "nothing written");
}
