//! What a scrape reads of the sale ([`Measured`] for [`FlashSale`]): its campaigns' sold-out
//! flags, the Kafka queue, the Redis pool, the threads' lag and each campaign's waiting room.

use std::sync::atomic::Ordering;

use fred::interfaces::ClientLike;

use crate::serve::flash_sale::FlashSale;
use crate::serve::metrics::{Measured, RoomSnapshot, Snapshot};

impl Measured for FlashSale {
    fn snapshot(&self) -> Snapshot {
        let now = crate::checks::now_ms();
        let registry = self.registry();
        let stats = self.queue().stats();
        Snapshot {
            sold_out: registry.campaigns.iter().map(|(id, e)| (id.clone(), e.sold_out.is_set(now))).collect(),
            depth: self.queue().depth() as u64,
            capacity: self.queue().capacity() as u64,
            produced: stats.produced.load(Ordering::Relaxed),
            batches: stats.batches.load(Ordering::Relaxed),
            dropped_full: stats.dropped_full.load(Ordering::Relaxed),
            dropped_kafka: stats.dropped_kafka.load(Ordering::Relaxed),
            redis_connected: self.redis().clients().iter().filter(|c| c.is_connected()).count() as u64,
            lag_peak_us: i64::try_from(self.take_peak_lag().as_micros()).unwrap_or(i64::MAX),
            rooms: rooms(self),
        }
    }
}

/// Every campaign's bits in force; for a campaign whose room is on, its queue's length, its
/// admissions and the ETA errors since the last scrape.
fn rooms(sale: &FlashSale) -> Vec<RoomSnapshot> {
    let room = sale.waiting_room();
    let now = chrono::Utc::now();
    sale.registry()
        .campaigns
        .iter()
        .map(|(id, entry)| {
            let c = &entry.campaign;
            let queue = c.waiting_room.enabled.then(|| {
                let stats = room.stats().take(id);
                (crate::room::queue_length(c, &stats, now), stats.admitted, stats.late_ms)
            });
            RoomSnapshot { campaign: id.clone(), pow_bits: room.rates().bits(c, now.timestamp()), queue }
        })
        .collect()
}
