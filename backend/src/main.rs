//! `order-writer`: the order writer's command line. See `conf/order-writer.toml`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use backend::config::Config;
use backend::produce::{self, generate};
use backend::{db, kafka, publish, rebalance, reconcile, redis, serve};
use clap::{ArgGroup, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "order-writer",
    version,
    about = "Reservations through Kafka into PostgreSQL, exactly once."
)]
struct Cli {
    /// Configuration file.
    #[arg(long, short, global = true, default_value = "conf/order-writer.toml", env = "ORDER_WRITER_CONF")]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// HTTP (result query, payment callback, health), sweeper, writers and close worker
    /// (applies migrations first).
    Serve {
        /// Partitions this instance consumes, e.g. `0,1` (default: all, or `kafka.assigned`).
        #[arg(long, value_delimiter = ',')]
        partitions: Option<Vec<i32>>,
    },
    /// Applies the migrations under `sql/`.
    Migrate,
    /// Kafka topic administration.
    Topic {
        #[command(subcommand)]
        command: TopicCommand,
    },
    /// Campaign administration.
    Campaign {
        #[command(subcommand)]
        command: CampaignCommand,
    },
    /// Produces signed test reservations to the topic, so the writer runs without a gateway
    /// (the record format is documented in backend/src/produce.rs).
    #[command(group(ArgGroup::new("source").required(true).args(["file", "generate"])))]
    Produce {
        /// JSON lines, one reservation record per line, produced as written (signed). A bad
        /// line refuses the whole file.
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
        /// Reserves N units through lua/reserve.lua (as the gateway does), then produces them.
        #[arg(long, value_name = "N", requires = "campaign")]
        generate: Option<u64>,
        /// The published campaign to reserve from (with --generate).
        #[arg(long, requires = "generate")]
        campaign: Option<String>,
        /// New users the N units are spread over, round robin (default: N, one unit each).
        #[arg(long, value_name = "M", requires = "generate")]
        users: Option<u64>,
    },
    /// Prints the stock equation of a campaign and every request id that differs.
    Reconcile {
        /// Campaign id.
        campaign: String,
        /// Fix what is safe to fix (idempotent; one audit row per action).
        #[arg(long)]
        repair: bool,
    },
}

#[derive(Subcommand)]
enum TopicCommand {
    /// Creates the reservations topic (an existing one is fine).
    Create,
}

#[derive(Subcommand)]
enum CampaignCommand {
    /// Loads `<campaigns_dir>/<id>.toml` into PostgreSQL and its stock into Redis; READY.
    Publish {
        /// Campaign id.
        id: String,
    },
    /// Evens the stock of a campaign's hot-stock buckets (moves units from the buckets above
    /// the even share to those below); prints each bucket's stock before and after.
    Rebalance {
        /// Campaign id.
        id: String,
    },
}

fn main() -> ExitCode {
    protocol::logging::init();
    let cli = Cli::parse();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("order-writer: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let mut cfg = Config::load(&cli.config)?;
    match cli.command {
        Command::Serve { partitions } => {
            if let Some(p) = partitions {
                if p.is_empty() || p.iter().any(|x| !(0..cfg.kafka.partitions).contains(x)) {
                    anyhow::bail!(
                        "--partitions must list partitions between 0 and {}",
                        cfg.kafka.partitions - 1
                    );
                }
                cfg.kafka.assigned = p;
            }
            let (tx, _rx) = tokio::sync::watch::channel(false);
            serve::serve(cfg, tx, true).await
        }
        Command::Migrate => {
            let pool = db::connect(&cfg.postgres_url, 2).await?;
            db::migrate(&pool, &cfg.migrations_dir).await?;
            println!("migrations applied from {}", cfg.migrations_dir.display());
            Ok(())
        }
        Command::Topic { command: TopicCommand::Create } => {
            let kc = kafka::client(&cfg.kafka.connection, cfg.kafka.produce_timeout).await?;
            let created = kafka::ensure_topic(&kc, &cfg.kafka).await?;
            println!(
                "topic {} {} ({} partitions)",
                cfg.kafka.topic,
                if created { "created" } else { "already exists" },
                cfg.kafka.partitions
            );
            Ok(())
        }
        Command::Campaign { command: CampaignCommand::Publish { id } } => {
            let pool = db::connect(&cfg.postgres_url, 2).await?;
            db::migrate(&pool, &cfg.migrations_dir).await?;
            let r = redis::connect(&cfg.redis_url).await?;
            let scripts = redis::RedisScripts::load(&cfg.lua_dir)?;
            let out = publish::publish(&pool, &r, &scripts, &cfg.campaigns_dir, &id).await?;
            println!("campaign {id}: {out}");
            Ok(())
        }
        Command::Campaign { command: CampaignCommand::Rebalance { id } } => {
            let pool = db::connect(&cfg.postgres_url, 2).await?;
            let r = redis::connect(&cfg.redis_url).await?;
            let scripts = protocol::scripts::Scripts::load(&cfg.lua_dir)?;
            let out = rebalance::rebalance(&pool, &r, &scripts, &id).await?;
            println!("campaign {id}:\n{out}");
            Ok(())
        }
        Command::Produce { file, generate, campaign, users } => {
            let (records, stopped) = match (file, generate) {
                (Some(path), _) => (produce::read_file(&path)?, None),
                (None, Some(n)) => {
                    let plan = generate::Plan::new(n, campaign.unwrap_or_default(), users)?;
                    let r = redis::connect(&cfg.redis_url).await?;
                    let scripts = protocol::scripts::Scripts::load(&cfg.lua_dir)?;
                    let pool = db::connect(&cfg.postgres_url, 1).await?;
                    let buckets = backend::buckets::count(&pool, &plan.campaign).await?.unwrap_or(1);
                    let g =
                        generate::generate(&r, &scripts, &plan.campaign, buckets, plan.n, plan.users).await?;
                    if g.records.is_empty() {
                        anyhow::bail!("nothing reserved: {}", g.stopped.unwrap_or_default());
                    }
                    println!(
                        "reserved {} of {n} units of campaign {} (over {} users)",
                        g.records.len(),
                        plan.campaign,
                        plan.users
                    );
                    (g.records, g.stopped)
                }
                (None, None) => anyhow::bail!("give --file PATH or --generate N --campaign ID"),
            };
            let per = produce::produce(&cfg, records).await?;
            println!("{}", produce::summary(&cfg.kafka.topic, &per));
            if let Some(why) = stopped {
                anyhow::bail!("stopped early: {why}");
            }
            Ok(())
        }
        Command::Reconcile { campaign, repair } => {
            let pool = db::connect(&cfg.postgres_url, 2).await?;
            let r = redis::connect(&cfg.redis_url).await?;
            let scripts = redis::RedisScripts::load(&cfg.lua_dir)?;
            // Without the topic, stale reservations are listed but not repaired (the report says so).
            let kc = match kafka::client(&cfg.kafka.connection, cfg.kafka.produce_timeout).await {
                Ok(kc) => Some(kc),
                Err(e) => {
                    eprintln!("order-writer: {e:#}: stale reservations will not be repaired");
                    None
                }
            };
            let topic = kc.as_ref().map(|kafka| reconcile::Topic {
                kafka,
                name: &cfg.kafka.topic,
                partitions: cfg.kafka.partitions,
            });
            let stores = reconcile::Stores {
                pool: &pool,
                redis: &r,
                scripts: &scripts,
                topic,
                sweep_age: cfg.sweep_age,
                between_reads: None,
            };
            let rep = reconcile::reconcile(stores, &campaign, repair).await.context("reconciliation")?;
            print!("{}", rep.text);
            Ok(())
        }
    }
}
