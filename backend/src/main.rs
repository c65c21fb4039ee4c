//! `order-writer`: the order writer's command line. See `conf/order-writer.toml`. It parses the
//! arguments and the configuration, then runs the subcommand's one function in its module; the
//! connections come from [`backend::app::Connections`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use backend::app::Connections;
use backend::campaign::{self, end, operate, publish, rebalance, stock};
use backend::conf::{Conf, PostgresConf};
use backend::db::schema::Schema;
use backend::kafka::produce::{self, generate};
use backend::serve::AtStart;
use backend::workers::reconcile;
use backend::{check, serve, setup};
use clap::{ArgGroup, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "order-writer",
    version,
    about = "Reservations through Kafka into PostgreSQL, exactly once."
)]
struct Cli {
    /// The conf file (`--config`, its older name, is accepted too).
    #[arg(
        long,
        short,
        alias = "config",
        global = true,
        default_value = "conf/order-writer.toml",
        env = "ORDER_WRITER_CONF"
    )]
    conf: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// HTTP (result query, payment callback, health), sweeper, writers and close worker
    /// (applies the migrations first, unless --no-migrate).
    Serve {
        /// Partitions this instance consumes, e.g. `0,1` (default: all, or `kafka.assigned`).
        #[arg(long, value_delimiter = ',')]
        partitions: Option<Vec<i32>>,
        /// Applies no migration: refuses to start on a schema older than this binary (run
        /// `order-writer migrate` apart, e.g. as a deploy step with a DDL role).
        #[arg(long)]
        no_migrate: bool,
    },
    /// Creates the schema when missing and applies the migrations compiled into this binary.
    /// Needs PostgreSQL only: of the conf, only `postgres_url`, `postgres_password` and
    /// `[postgres]` are read.
    Migrate {
        /// This PostgreSQL URL instead of the conf's (the conf is then not read; the password
        /// may be in the URL or in PGPASSWORD).
        #[arg(long, value_name = "URL")]
        postgres_url: Option<String>,
        /// The schema, with --postgres-url (default: the server's search_path, as with no
        /// `[postgres] schema` in a conf).
        #[arg(long, requires = "postgres_url")]
        schema: Option<String>,
    },
    /// Checks the conf (secrets included) and each server: PostgreSQL and its schema version,
    /// Redis, Kafka and the topic's partitions. Changes nothing; fails when anything is wrong.
    Check,
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
    /// (the record format is documented in backend/src/kafka/produce.rs).
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
    /// The campaign file against what was published (frozen fields, the writer's signing key,
    /// topic and partitions) and, with --live, against every gateway of `[fleet]`; changes nothing.
    Check {
        /// Campaign id.
        id: String,
        /// Also ask every gateway (its key fingerprint, topic, partitions, file digest).
        #[arg(long)]
        live: bool,
    },
    /// What a changed campaign file would do, field by field, against the file in force and what
    /// was published (applies at the gateways' reload / at the next publish / refused, and why);
    /// changes nothing.
    Diff {
        /// Campaign id.
        id: String,
        /// The changed file (named ID.toml, in any folder).
        #[arg(long, value_name = "PATH")]
        file: PathBuf,
    },
    /// The campaign's state, stock left per bucket, and every gateway's view of it.
    Status {
        /// Campaign id.
        id: String,
    },
    /// Every gateway reads its files again and must serve this conf's copy of the campaign file
    /// (compared by digest); refused when the file disagrees with what was published.
    Apply {
        /// Campaign id.
        id: String,
    },
    /// Orders answered CAMPAIGN_CLOSED with Retry-After on every gateway, until `resume`.
    Pause {
        /// Campaign id.
        id: String,
    },
    /// Back to selling on every gateway (after pause, queue-only or close).
    Resume {
        /// Campaign id.
        id: String,
    },
    /// Orders answered TRY_LATER on every gateway, nothing reserved, until `resume`.
    QueueOnly {
        /// Campaign id.
        id: String,
    },
    /// Orders answered ENDED on every gateway, until `resume` (or for good after `end`).
    Close {
        /// Campaign id.
        id: String,
    },
    /// Moves the window's end later on every gateway.
    Extend {
        /// Campaign id.
        id: String,
        /// The new end, RFC 3339 with an offset (e.g. 2026-12-06T21:00:00Z).
        #[arg(long)]
        until: String,
    },
    /// More units for sale: a ledger entry in PostgreSQL, each bucket's share in Redis, the
    /// gateways' sold-out flags cleared. Idempotent by --ref.
    AddStock {
        /// Campaign id.
        id: String,
        /// Units to add.
        units: i64,
        /// The addition's reference (default: a new one, printed): run again with it to finish
        /// an addition a failure interrupted.
        #[arg(long = "ref")]
        reference: Option<String>,
    },
    /// Over for good, after the pay window: drain, final reconcile, ENDED on every gateway, the
    /// campaign's Redis keys removed (PostgreSQL's rows kept).
    End {
        /// Campaign id.
        id: String,
    },
    /// Who won a campaign, grouped by address (/32, /24, IPv6 /64), device and account age,
    /// each group's success rate against the crowd's; groups beyond the thresholds (`[audit]`
    /// of the conf, then these flags) flagged for review. A table, or JSON with --json.
    Audit {
        /// Campaign id.
        id: String,
        #[command(flatten)]
        args: backend::campaign::audit::Args,
    },
    /// The HTML report of a campaign's real sale, from PostgreSQL, Redis, the reconciliation,
    /// the audit and the gateways' metrics.
    Report {
        /// Campaign id.
        id: String,
        #[command(flatten)]
        args: backend::campaign::report::Args,
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
    match cli.command {
        // PostgreSQL alone: the rest of the conf (Redis, Kafka, keys) is not read.
        Command::Migrate { postgres_url: Some(url), schema } => {
            let schema = schema.as_deref().map(Schema::new).transpose().map_err(anyhow::Error::msg)?;
            let pg = PostgresConf { url, password: None, schema, migrations_dir: None };
            setup::migrate(&pg).await
        }
        Command::Migrate { postgres_url: None, .. } => setup::migrate(&PostgresConf::load(&cli.conf)?).await,
        command => with_conf(&cli.conf, command).await,
    }
}

/// The subcommands that read the whole conf.
async fn with_conf(file: &Path, command: Command) -> anyhow::Result<()> {
    let cfg = Conf::load(file)?;
    let conns = Connections::new(&cfg);
    match command {
        Command::Serve { partitions, no_migrate } => {
            let at_start = if no_migrate { AtStart::Verify } else { AtStart::Migrate };
            serve::run(cfg, partitions, at_start).await
        }
        Command::Migrate { .. } => setup::migrate(&cfg.postgres).await,
        Command::Check => check::run(&cfg, file).await,
        Command::Topic { command: TopicCommand::Create } => setup::topic_create(&conns).await,
        Command::Campaign { command } => campaign_command(&conns, file, command).await,
        Command::Produce { file, generate, campaign, users } => {
            let source = match (file, generate) {
                (Some(path), _) => produce::Source::File(path),
                (None, Some(n)) => {
                    produce::Source::Generate(generate::Plan::new(n, campaign.unwrap_or_default(), users)?)
                }
                (None, None) => anyhow::bail!("give --file PATH or --generate N --campaign ID"),
            };
            produce::run(&conns, source).await
        }
        Command::Reconcile { campaign, repair } => reconcile::run(&conns, &campaign, repair).await,
    }
}

/// `order-writer campaign ...`.
async fn campaign_command(
    conns: &Connections<'_>,
    file: &Path,
    command: CampaignCommand,
) -> anyhow::Result<()> {
    use operate::Change;
    match command {
        CampaignCommand::Publish { id } => publish::run(conns, &id).await,
        CampaignCommand::Rebalance { id } => rebalance::run(conns, &id).await,
        CampaignCommand::Status { id } => operate::status(conns, &id).await,
        CampaignCommand::Diff { id, file } => campaign::diff::run(conns, &id, &file).await,
        CampaignCommand::Check { id, live } => campaign::check::run(conns, &id, live).await,
        CampaignCommand::Apply { id } => operate::apply(conns, &id).await,
        CampaignCommand::Pause { id } => operate::run(conns, &id, Change::Pause).await,
        CampaignCommand::Resume { id } => operate::run(conns, &id, Change::Resume).await,
        CampaignCommand::QueueOnly { id } => operate::run(conns, &id, Change::QueueOnly).await,
        CampaignCommand::Close { id } => operate::run(conns, &id, Change::Close).await,
        CampaignCommand::Extend { id, until } => {
            let until = chrono::DateTime::parse_from_rfc3339(&until).map_err(|e| {
                anyhow::anyhow!("--until {until:?}: not an RFC 3339 time with an offset: {e}")
            })?;
            operate::run(conns, &id, Change::Extend(until.to_utc())).await
        }
        CampaignCommand::AddStock { id, units, reference } => stock::add(conns, &id, units, reference).await,
        CampaignCommand::End { id } => end::run(conns, &id).await,
        CampaignCommand::Audit { id, args } => campaign::audit::run(conns, &id, file, &args).await,
        CampaignCommand::Report { id, args } => campaign::report::run(conns, &id, file, &args).await,
    }
}
