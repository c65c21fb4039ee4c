use std::sync::Arc;
use std::time::Duration;

use super::*;

const NODELAY: u64 = u64::MAX;

#[test]
fn a_burst_passes_then_rejects_and_leaks_back_as_nginx_counts() {
    // 1r/m is 16 milli-requests a second in Nginx's integer rate; burst 3.
    let z = ReqZone::new(16, 100);
    let got: Vec<Verdict> = (0..6).map(|_| z.check(b"a", 10, 3000, NODELAY)).collect();
    assert_eq!(got[..4], [Verdict::Pass; 4], "the first and the burst of 3");
    assert_eq!(got[4..], [Verdict::Reject(4000); 2], "a rejection leaves the key as it was");
    // A leak of 16 a second: 62.5 s later one request's room is back (4000 - 1000 = 3000).
    assert_eq!(z.check(b"a", 10 + 62_500, 3000, NODELAY), Verdict::Pass);
    assert_eq!(z.check(b"a", 10 + 62_500, 3000, NODELAY), Verdict::Reject(4000));
    // Another key is its own bucket.
    assert_eq!(z.check(b"b", 10, 3000, NODELAY), Verdict::Pass);
}

#[test]
fn a_leak_rounded_to_zero_is_lost_as_in_nginx() {
    // 1r/m: 10 ms leak 16 * 10 / 1000 = 0, and the key's time moves on.
    let z = ReqZone::new(16, 100);
    for t in 0..4 {
        assert_eq!(z.check(b"k", t * 10, 3000, NODELAY), Verdict::Pass);
    }
    assert_eq!(z.check(b"k", 40, 3000, NODELAY), Verdict::Reject(4000));
}

#[test]
fn without_nodelay_the_burst_waits_excess_over_rate() {
    // 2r/s = 2000; burst 5, no delay: the second request waits 1000 * 1000 / 2000 = 500 ms.
    let z = ReqZone::new(2000, 100);
    assert_eq!(z.check(b"k", 0, 5000, 0), Verdict::Pass);
    assert_eq!(z.check(b"k", 0, 5000, 0), Verdict::Delay(Duration::from_millis(500)));
    assert_eq!(z.check(b"k", 0, 5000, 0), Verdict::Delay(Duration::from_millis(1000)));
    // delay=2: the first 2 past the first pass at once, the next waits for its excess over 2.
    let d = ReqZone::new(2000, 100);
    let got: Vec<Verdict> = (0..5).map(|_| d.check(b"k", 0, 5000, 2000)).collect();
    assert_eq!(got[..3], [Verdict::Pass; 3]);
    assert_eq!(
        got[3..],
        [Verdict::Delay(Duration::from_millis(500)), Verdict::Delay(Duration::from_millis(1000))]
    );
    // 500 ms later 1000 have leaked.
    assert_eq!(z.check(b"k", 500, 5000, 0), Verdict::Delay(Duration::from_millis(1000)));
}

#[test]
fn a_zone_keeps_at_most_its_keys_forgetting_the_least_recent() {
    let z = ReqZone::new(1000, 32);
    for i in 0u32..10_000 {
        z.check(&i.to_be_bytes(), 0, 0, NODELAY);
    }
    assert!(z.len() <= 32, "{} keys", z.len());
    assert!(!z.is_empty());
}

#[test]
fn connections_count_in_flight_and_give_back_when_dropped() {
    let z = Arc::new(ConnZone::new(100));
    let a = z.acquire(b"ip", 2).expect("first");
    let b = z.acquire(b"ip", 2).expect("second");
    assert!(z.acquire(b"ip", 2).is_none(), "a third in flight");
    assert!(z.acquire(b"other", 2).is_some(), "another key");
    drop(a);
    assert_eq!(z.in_flight(b"ip"), 1);
    let c = z.acquire(b"ip", 2).expect("a place given back");
    drop((b, c));
    assert_eq!(z.in_flight(b"ip"), 0);
    // Full of keys in flight: a new key is refused, a known one still counts.
    let small = Arc::new(ConnZone::new(1));
    let held: Vec<_> = (0u8..=255).filter_map(|i| small.acquire(&[i], 5)).collect();
    assert!(held.len() < 256 && !held.is_empty());
}

#[test]
fn a_reload_keeps_the_state_of_an_unchanged_zone_only() {
    let conf = |rate: &str| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:1\"\n[[limit_req_zone]]\nname = \"a\"\nkey = \"$remote_addr\"\n\
             rate = \"1r/s\"\n[[limit_req_zone]]\nname = \"b\"\nkey = \"$remote_addr\"\nrate = \"{rate}\"\n\
             [[limit_conn_zone]]\nname = \"c\"\nkey = \"$remote_addr\"\n"
        );
        crate::conf::parse_server(std::path::Path::new("s.toml"), &text).unwrap()
    };
    let old = Zones::new(&conf("1r/s"), None);
    let new = Zones::new(&conf("2r/s"), Some(&old));
    assert!(Arc::ptr_eq(&old.req[0].1, &new.req[0].1), "a: unchanged, kept");
    assert!(!Arc::ptr_eq(&old.req[1].1, &new.req[1].1), "b: another rate, a new zone");
    assert!(Arc::ptr_eq(&old.conn[0].1, &new.conn[0].1), "c: unchanged, kept (its guards too)");
}
