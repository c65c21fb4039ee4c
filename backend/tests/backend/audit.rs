//! `order-writer campaign audit`, the binary on a fresh database: orders reserved through
//! `lua/reserve.lua` with their origin (address, device, account creation) and written by the
//! writer, an access log of the crowd's attempts beside them; the crafted clusters are flagged,
//! the ordinary buyers are not, in the JSON and in the table; the conf's `[audit]` and the flags
//! move the thresholds; an unknown campaign is a clear error.

use crate::common::{bin, Env};

use protocol::record::{Origin, Reservation};
use protocol::scripts::{ReserveCall, ReserveOutcome};
use serde_json::Value;

/// Reserves one unit for `user` from `ip` on `device`, account created `age_days` before now,
/// through the real script; returns the record.
pub async fn reserve_from(env: &Env, user: &str, ip: &str, device: &str, age_days: i64) -> Vec<u8> {
    let origin = Origin {
        client_ip: Some(ip.into()),
        device: Some(device.into()),
        registered_at: Some(chrono::Utc::now().timestamp() - age_days * 86_400),
    };
    let call = ReserveCall::new(uuid::Uuid::now_v7().to_string(), user, 1).with_origin(&origin);
    match env.scripts.shared.reserve(&env.redis, &env.bucket(), &call).await.unwrap() {
        ReserveOutcome::Reserved { record, .. } => record.into_bytes(),
        other => panic!("reserve for {user}: {other:?}"),
    }
}

/// The crafted sale: 12 accounts from one /24, 3 accounts on one device (one address), 5
/// ordinary buyers and one order of an older record without origin; written by the writer.
async fn crafted_sale(env: &Env) {
    let mut records = Vec::new();
    for i in 0..12 {
        records.push(
            reserve_from(env, &format!("farm-{i}"), &format!("203.0.113.{i}"), &format!("farm-{i}"), 400)
                .await,
        );
    }
    for i in 0..3 {
        records.push(reserve_from(env, &format!("multi-{i}"), "192.0.2.9", "shared-dev", 400).await);
    }
    for i in 0..5 {
        records.push(
            reserve_from(env, &format!("buyer-{i}"), &format!("198.51.{i}.7"), &format!("dev-{i}"), 900)
                .await,
        );
    }
    records.push(env.reserve("old-record", 1).await);
    let r = Reservation::from_json(&records[0]).unwrap();
    assert_eq!(r.client_ip.as_deref(), Some("203.0.113.0"), "the origin is in the record");
    env.produce_records(records).await;
    env.drain(50).await;
}

/// An access log of the crowd: each buyer's order and three refusals, and a bot's forged ones.
fn access_log(env: &Env) -> std::path::PathBuf {
    let line = |ip: &str, dev: &str, code: &str| {
        serde_json::json!({"time": "t", "client": ip, "method": "POST", "device": dev, "code": code,
            "uri": format!("/seckill/{}/order?qty=1", env.campaign)})
        .to_string()
    };
    let mut lines = Vec::new();
    for i in 0..5 {
        let (ip, dev) = (format!("198.51.{i}.7"), format!("dev-{i}"));
        lines.push(line(&ip, &dev, "QUEUED"));
        lines.extend((0..3).map(|_| line(&ip, &dev, "LIMIT_REACHED")));
        lines.extend((0..5).map(|_| line(&ip, &dev, "TRY_LATER")));
    }
    lines.extend((0..4).map(|_| line("198.18.0.66", "bot-dev", "BAD_SIGNATURE")));
    // Another campaign's order and a page view are not attempts.
    lines.push(line("198.51.0.7", "dev-0", "QUEUED").replace(&env.campaign, "other"));
    let path = env.dir.join("access.json.log");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// Runs `campaign audit <id> <args>`; its exit, stdout and stderr.
fn audit(conf: &std::path::Path, id: &str, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["campaign", "audit", id];
    all.extend_from_slice(args);
    let out = bin::command(conf, &all).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The flagged groups of an audit's JSON, as "kind key".
fn flagged(v: &Value) -> Vec<String> {
    v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| !g["flags"].as_array().unwrap().is_empty())
        .map(|g| format!("{} {}", g["kind"].as_str().unwrap(), g["key"].as_str().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_flags_a_slash_24_cluster_a_shared_device_and_a_bot_and_not_the_buyers() {
    let env = Env::new(50, 1, 2).await;
    crafted_sale(&env).await;
    let log = access_log(&env);
    let conf = bin::write_conf(&env, 100);
    let log_arg = log.to_str().unwrap();
    let (ok, out, err) = audit(&conf, &env.campaign, &["--json", "--access-log", log_arg]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let mut got = flagged(&v);
    got.sort();
    assert_eq!(
        got,
        [
            "device bot-dev",
            "device shared-dev",
            "ip24 198.18.0.0/24",
            "ip24 203.0.113.0/24",
            "ip32 192.0.2.9",
            "ip32 198.18.0.66",
        ],
        "{out}"
    );
    let crowd = &v["crowd"];
    // 21 winners; attempts: 5 buyers x 4 decided + 4 forged (TRY_LATER and the other campaign's
    // line are not attempts).
    assert_eq!((crowd["winners"].as_u64(), crowd["units"].as_i64()), (Some(21), Some(21)));
    assert_eq!((crowd["attempts"].as_u64(), crowd["without_origin"].as_u64()), (Some(24), Some(1)));
    let group = |kind: &str, key: &str| {
        v["groups"].as_array().unwrap().iter().find(|g| g["kind"] == kind && g["key"] == key).unwrap().clone()
    };
    let net = group("ip24", "203.0.113.0/24");
    assert_eq!((net["winners"].as_u64(), net["attempts"].as_u64()), (Some(12), Some(0)));
    assert_eq!(net["flags"][0], "12 winners from one /24 (max 10)");
    assert_eq!(group("device", "shared-dev")["flags"][0], "3 winning accounts on one device (max 1)");
    let buyer = group("device", "dev-3");
    assert_eq!((buyer["winners"].as_u64(), buyer["attempts"].as_u64()), (Some(1), Some(4)));
    assert_eq!(buyer["success_rate"].as_f64(), Some(0.25));
    assert_eq!(group("account_age", ">=1y")["winners"].as_u64(), Some(20));
    assert_eq!(v["thresholds"]["max_per_ip24"].as_u64(), Some(10));

    // The table says the same.
    let (ok, table, _) = audit(&conf, &env.campaign, &["--access-log", log_arg]);
    assert!(ok);
    assert!(table.contains("6 groups flagged"), "{table}");
    assert!(table.contains("203.0.113.0/24") && table.contains("12 winners from one /24"), "{table}");
    assert!(!table.contains("dev-3"), "a buyer is not listed: {table}");

    // The conf's [audit] moves a threshold, a flag moves it again; exempt networks are never
    // flagged by address.
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{text}\n[audit]\nmax_per_ip24 = 12\nexempt = [\"192.0.2.0/24\"]\n"))
        .unwrap();
    let (ok, out, err) = audit(&conf, &env.campaign, &["--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(flagged(&v), ["device shared-dev"], "{out}");
    assert!(v["crowd"]["attempts"].is_null(), "no access log: attempts unknown");
    let (_, out, _) = audit(&conf, &env.campaign, &["--json", "--max-per-ip24", "11"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(flagged(&v), ["ip24 203.0.113.0/24", "device shared-dev"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_of_an_unknown_campaign_or_with_a_bad_threshold_is_a_clear_error() {
    let env = Env::new(5, 1, 1).await;
    let conf = bin::write_conf(&env, 100);
    let (ok, out, err) = audit(&conf, "no-such-campaign", &["--json"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(err.contains("no campaign \"no-such-campaign\""), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (ok, _, err) = audit(&conf, &env.campaign, &["--exempt", "10.0.0.0/33"]);
    assert!(!ok && err.contains("exempt network"), "{err}");
    // A campaign without orders: nothing flagged, an empty crowd.
    let (ok, out, err) = audit(&conf, &env.campaign, &["--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["crowd"]["winners"].as_u64(), v["groups"].as_array().map(Vec::len)), (Some(0), Some(0)));
}
