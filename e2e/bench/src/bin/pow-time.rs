//! `pow-time`: how long the Rust client (`protocol::pow::solve`, what `e2e/fixtures/src/client.rs` runs)
//! takes to solve the captcha's proof of work at each `--bits`, over `--rounds` challenges of
//! the gateway's shape; prints the median and mean ms of each. `e2e/bench/page.sh` prints it
//! beside the buyer's page's Web Worker in Chromium.

use std::time::Instant;

use clap::Parser;

#[derive(Parser)]
#[command(about = "The Rust client's proof-of-work time at each difficulty")]
struct Args {
    /// Difficulties, comma-separated.
    #[arg(long, default_value = "8,12,16", value_delimiter = ',')]
    bits: Vec<u32>,
    /// Challenges per difficulty.
    #[arg(long, default_value_t = 30)]
    rounds: u32,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!((1..=1000).contains(&a.rounds), "--rounds 1..1000");
    anyhow::ensure!(a.bits.iter().all(|b| *b <= 24), "--bits 0..24");
    for bits in &a.bits {
        let mut ms: Vec<f64> = (0..a.rounds)
            .map(|i| {
                // A challenge as long as the gateway's (an id, a time, an HMAC).
                let challenge =
                    format!("c{i:04}.{}.{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
                let t = Instant::now();
                let answer = protocol::pow::solve(&challenge, *bits, 1 << 32);
                std::hint::black_box(answer);
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        println!(
            "rust {bits} bits: median {:.2} ms, mean {mean:.2} ms ({} challenges)",
            ms[ms.len() / 2],
            a.rounds
        );
    }
    Ok(())
}
