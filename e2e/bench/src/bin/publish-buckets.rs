//! `publish-buckets`: publishes a campaign's stock straight to Redis (a single server or a
//! cluster), split over its hot-stock buckets, with the same script and split the order writer
//! uses (`lua/publish.lua`, `protocol::scripts::bucket_shares`), for benchmarks that run without
//! PostgreSQL. Prints each bucket's index, hash slot and share.

use anyhow::Context;
use clap::Parser;
use protocol::keys::Bucket;
use protocol::scripts::{self, bucket_shares, PublishSpec, Scripts};

#[derive(Parser)]
#[command(about = "Publish a campaign's stock to Redis over its buckets")]
struct Args {
    /// Redis URL: redis://host:port, or redis-cluster://host:port?node=host:port...
    #[arg(long)]
    redis: String,
    /// The campaign.
    #[arg(long)]
    campaign: String,
    /// Units for sale.
    #[arg(long)]
    stock: i64,
    /// Buckets (1: none).
    #[arg(long, default_value_t = 1)]
    buckets: u32,
    /// Per-user limit.
    #[arg(long, default_value_t = 1)]
    limit: i64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(protocol::keys::valid_campaign_id(&a.campaign), "bad campaign id {:?}", a.campaign);
    anyhow::ensure!((1..=protocol::keys::MAX_BUCKETS).contains(&a.buckets), "--buckets must be 1 to 64");
    let redis = fixtures::stack::redis_client(&a.redis).await?;
    let scripts = Scripts::load(&scripts::default_dir())?;
    let spec = PublishSpec {
        stock_version: 1,
        total: a.stock,
        limit: a.limit,
        sku: "SKU-BENCH".into(),
        price_cents: 100,
        price_version: 1,
    };
    let outcomes =
        scripts.publish_buckets(&redis, &a.campaign, a.buckets, &spec).await.context("publish.lua")?;
    let all = Bucket::all(&a.campaign, a.buckets);
    for ((bucket, share), out) in all.iter().zip(bucket_shares(a.stock, a.buckets)).zip(outcomes) {
        println!("bucket {} slot {} stock {share}: {out:?}", bucket.index, bucket.slot());
    }
    Ok(())
}
