//! `order-writer campaign rebalance <id>`: evens the stock of a campaign's hot-stock buckets.
//!
//! Buyers drain their home buckets unevenly; the gateway moves stock to a short bucket when a
//! buyer needs it, but an operator may want the remainder spread out again (before a second wave,
//! after a pause). Each bucket's stock is read, the even shares of their sum computed
//! ([`protocol::scripts::bucket_shares`]), and units moved from the buckets above their share to
//! those below, each move a transfer (`lua/transfer.lua` give, then take) under an id unique to
//! the run. A give takes at most what the donor holds when it runs, so buyers reserving
//! meanwhile are never oversold; the take adds what was given. Running it on even buckets moves
//! nothing.

use fred::prelude::*;
use protocol::keys::Bucket;
use protocol::scripts::{bucket_shares, Scripts};
use sqlx::PgPool;

/// One move of a plan: `qty` units from bucket `from` to bucket `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Donor bucket.
    pub from: u32,
    /// Receiving bucket.
    pub to: u32,
    /// Units.
    pub qty: i64,
}

/// The even share of each bucket: the shares of the sum ([`bucket_shares`]), the larger ones
/// (the remainder's units) given to the buckets that hold the most already, so that buckets
/// within one unit of each other are even as they are.
pub fn targets(stocks: &[i64]) -> Vec<i64> {
    let shares = bucket_shares(stocks.iter().sum(), stocks.len() as u32);
    let mut order: Vec<usize> = (0..stocks.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(stocks[i]));
    let mut target = vec![0; stocks.len()];
    for (share, i) in shares.into_iter().zip(order) {
        target[i] = share;
    }
    target
}

/// The moves that bring `stocks` (by bucket index) to their even [`targets`], surpluses paired
/// with deficits in bucket order; empty when already even.
pub fn plan(stocks: &[i64]) -> Vec<Move> {
    let target = targets(stocks);
    let mut surplus: Vec<(u32, i64)> = (0..stocks.len())
        .filter(|&i| stocks[i] > target[i])
        .map(|i| (i as u32, stocks[i] - target[i]))
        .collect();
    let mut deficit: Vec<(u32, i64)> = (0..stocks.len())
        .filter(|&i| stocks[i] < target[i])
        .map(|i| (i as u32, target[i] - stocks[i]))
        .collect();
    let mut moves = Vec::new();
    let (mut d, mut r) = (0, 0);
    while d < surplus.len() && r < deficit.len() {
        let qty = surplus[d].1.min(deficit[r].1);
        moves.push(Move { from: surplus[d].0, to: deficit[r].0, qty });
        surplus[d].1 -= qty;
        deficit[r].1 -= qty;
        if surplus[d].1 == 0 {
            d += 1;
        }
        if deficit[r].1 == 0 {
            r += 1;
        }
    }
    moves
}

/// What a rebalance did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebalanced {
    /// Each bucket's stock before.
    pub before: Vec<i64>,
    /// Each bucket's stock after.
    pub after: Vec<i64>,
    /// The moves made: (from, to, units actually given).
    pub moved: Vec<Move>,
}

impl std::fmt::Display for Rebalanced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sum = |v: &[i64]| v.iter().sum::<i64>();
        writeln!(f, "before: {:?} (sum {})", self.before, sum(&self.before))?;
        if self.moved.is_empty() {
            writeln!(f, "already even: nothing moved")?;
        }
        for m in &self.moved {
            writeln!(f, "moved {} unit(s) from bucket {} to bucket {}", m.qty, m.from, m.to)?;
        }
        write!(f, "after: {:?} (sum {})", self.after, sum(&self.after))
    }
}

/// Each bucket's stock.
async fn stocks(redis: &Client, all: &[Bucket]) -> anyhow::Result<Vec<i64>> {
    let mut out = Vec::with_capacity(all.len());
    for b in all {
        let n: Option<i64> = redis.get(&b.keys.stock).await?;
        out.push(n.unwrap_or(0));
    }
    Ok(out)
}

/// Rebalances campaign `id`. Refuses a campaign PostgreSQL does not know, or one without buckets.
/// `order-writer campaign rebalance ID`.
pub async fn run(conns: &crate::app::Connections<'_>, id: &str) -> anyhow::Result<()> {
    let pool = conns.postgres(crate::app::COMMAND_POOL).await?;
    let redis = conns.redis().await?;
    let scripts = conns.scripts()?;
    let out = rebalance(&pool, &redis, &scripts.shared, id).await?;
    println!("campaign {id}:\n{out}");
    Ok(())
}

pub async fn rebalance(
    pool: &PgPool,
    redis: &Client,
    scripts: &Scripts,
    id: &str,
) -> anyhow::Result<Rebalanced> {
    let Some(count) = crate::campaign::buckets::count(pool, id).await? else {
        anyhow::bail!("unknown campaign {id:?}: not in PostgreSQL (publish it first)")
    };
    if count <= 1 {
        anyhow::bail!(
            "campaign {id} has no hot-stock buckets (buckets = 1): its stock is one key, nothing to rebalance"
        );
    }
    let all = Bucket::all(id, count);
    let before = stocks(redis, &all).await?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    let mut moved = Vec::new();
    for (k, m) in plan(&before).into_iter().enumerate() {
        let transfer = format!("rebalance-{run}-{k}");
        let (from, to) = (&all[m.from as usize], &all[m.to as usize]);
        let given = scripts.transfer(redis, from, to, &transfer, m.qty, false).await?;
        if given > 0 {
            moved.push(Move { qty: given, ..m });
        }
    }
    let after = stocks(redis, &all).await?;
    Ok(Rebalanced { before, after, moved })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(stocks: &[i64], moves: &[Move]) -> Vec<i64> {
        let mut s = stocks.to_vec();
        for m in moves {
            s[m.from as usize] -= m.qty;
            s[m.to as usize] += m.qty;
        }
        s
    }

    #[test]
    fn uneven_buckets_become_the_even_shares_of_their_sum() {
        for stocks in [vec![10, 0, 2], vec![0, 0, 7], vec![3, 9, 0, 1], vec![1, 0]] {
            let moves = plan(&stocks);
            let sum: i64 = stocks.iter().sum();
            let mut after = apply(&stocks, &moves);
            assert_eq!(after.iter().sum::<i64>(), sum);
            after.sort_by_key(|&n| std::cmp::Reverse(n));
            assert_eq!(after, bucket_shares(sum, stocks.len() as u32), "{stocks:?}");
            assert!(moves.iter().all(|m| m.qty > 0 && m.from != m.to), "{moves:?}");
        }
        assert_eq!(plan(&[10, 0, 2]), vec![Move { from: 0, to: 1, qty: 4 }, Move { from: 0, to: 2, qty: 2 }]);
    }

    #[test]
    fn even_buckets_move_nothing() {
        assert!(plan(&[4, 3, 3]).is_empty());
        assert!(plan(&[3, 4, 3]).is_empty(), "within one unit: even as they are");
        assert!(plan(&[0, 0]).is_empty());
        assert!(plan(&[]).is_empty());
    }
}
