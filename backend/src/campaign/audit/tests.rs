use super::*;

fn w(user: &str, ip: &str, device: &str, age_days: Option<i64>) -> Winner {
    Winner {
        user: user.into(),
        qty: 1,
        client_ip: Some(ip.parse().unwrap()),
        device: Some(device.into()),
        account_age_secs: age_days.map(|d| d * 86_400),
    }
}

fn tries(n: usize, ip: &str, device: &str, code: &str) -> Vec<Attempt> {
    (0..n)
        .map(|_| Attempt {
            client: Some(ip.parse().unwrap()),
            device: Some(device.into()),
            code: Some(code.into()),
        })
        .collect()
}

fn group<'a>(a: &'a Audit, kind: Kind, key: &str) -> &'a Group {
    a.groups.iter().find(|g| g.kind == kind && g.key == key).unwrap_or_else(|| panic!("no {key}"))
}

/// Ten ordinary buyers, each from an address and device of their own and an old account, with
/// four attempts each, and one more who lost.
fn buyers() -> (Vec<Winner>, Vec<Attempt>) {
    let mut winners = Vec::new();
    let mut attempts = Vec::new();
    for i in 0..10 {
        let (ip, dev) = (format!("198.51.{i}.7"), format!("dev-{i}"));
        winners.push(w(&format!("buyer-{i}"), &ip, &dev, Some(800)));
        attempts.extend(tries(1, &ip, &dev, "QUEUED"));
        attempts.extend(tries(3, &ip, &dev, "LIMIT_REACHED"));
    }
    attempts.extend(tries(4, "198.51.99.1", "dev-loser", "SOLD_OUT"));
    (winners, attempts)
}

#[test]
fn ordinary_buyers_are_not_flagged() {
    let (winners, attempts) = buyers();
    let a = audit("c", &winners, Some(&attempts), &Thresholds::default());
    assert_eq!(a.flagged().count(), 0, "{}", table(&a));
    assert_eq!((a.crowd.winners, a.crowd.units, a.crowd.attempts), (10, 10, Some(44)));
    assert_eq!(a.crowd.success_rate, Some(10.0 / 44.0));
    let g = group(&a, Kind::Ip24, "198.51.3.0/24");
    assert_eq!((g.winners, g.attempts, g.success_rate), (1, Some(4), Some(0.25)));
    assert_eq!(group(&a, Kind::AccountAge, ">=1y").winners, 10);
}

#[test]
fn a_slash_24_cluster_and_a_device_with_many_accounts_are_flagged() {
    let (mut winners, mut attempts) = buyers();
    // Twelve accounts winning from one /24, one address each.
    for i in 0..12 {
        let ip = format!("203.0.113.{i}");
        winners.push(w(&format!("farm-{i}"), &ip, &format!("farm-dev-{i}"), Some(800)));
        attempts.extend(tries(1, &ip, &format!("farm-dev-{i}"), "QUEUED"));
    }
    // Three accounts on one device, one address.
    for i in 0..3 {
        winners.push(w(&format!("multi-{i}"), "192.0.2.9", "shared-dev", Some(800)));
    }
    attempts.extend(tries(3, "192.0.2.9", "shared-dev", "QUEUED"));
    let a = audit("c", &winners, Some(&attempts), &Thresholds::default());
    let net = group(&a, Kind::Ip24, "203.0.113.0/24");
    assert_eq!(net.winners, 12);
    assert_eq!(net.flags, ["12 winners from one /24 (max 10)"]);
    let dev = group(&a, Kind::Device, "shared-dev");
    assert_eq!(dev.winners, 3);
    assert_eq!(dev.flags, ["3 winning accounts on one device (max 1)"]);
    assert_eq!(group(&a, Kind::Ip32, "192.0.2.9").flags, ["3 winners from one address (max 2)"]);
    // Only these three are flagged, and they come first.
    assert_eq!(a.flagged().count(), 3, "{}", table(&a));
    assert!(a.groups[..3].iter().all(|g| !g.flags.is_empty()));
    assert!(group(&a, Kind::Ip32, "203.0.113.4").flags.is_empty());
}

#[test]
fn hammering_devices_forged_requests_and_abnormal_success_are_flagged() {
    let (mut winners, mut attempts) = buyers();
    // A hot user: one win out of 24 attempts from one device.
    winners.push(w("hot", "198.51.200.1", "hot-dev", Some(800)));
    attempts.extend(tries(1, "198.51.200.1", "hot-dev", "QUEUED"));
    attempts.extend(tries(23, "198.51.200.1", "hot-dev", "LIMIT_REACHED"));
    // A bot: a bad signature; a replay on a buyer's device is counted, not flagged.
    attempts.extend(tries(1, "198.51.201.1", "bot-dev", "BAD_SIGNATURE"));
    attempts.extend(tries(1, "198.51.0.7", "dev-0", "REPLAY"));
    // Resends the page makes itself are not attempts.
    attempts.extend(tries(30, "198.51.1.7", "dev-1", "TRY_LATER"));
    // Twenty-five accounts of one /64 win in 25 attempts: far above the crowd's rate.
    for i in 0..25 {
        let ip = format!("2001:db8:0:1::{i:x}");
        winners.push(w(&format!("v6-{i}"), &ip, &format!("v6-dev-{i}"), Some(800)));
        attempts.extend(tries(1, &ip, &format!("v6-dev-{i}"), "QUEUED"));
    }
    // Fifty buyers who lost, four attempts each.
    for i in 0..50 {
        attempts.extend(tries(4, &format!("198.18.{i}.1"), &format!("lost-{i}"), "SOLD_OUT"));
    }
    let t = Thresholds { max_per_ip64: 100, ..Thresholds::default() };
    let a = audit("c", &winners, Some(&attempts), &t);
    assert_eq!(group(&a, Kind::Device, "hot-dev").flags, ["24 attempts from one device (max 10)"]);
    let bot = group(&a, Kind::Device, "bot-dev");
    assert_eq!((bot.winners, bot.forged), (0, 1));
    assert_eq!(bot.flags.len(), 1);
    assert!(bot.flags[0].starts_with("1 forged requests"), "{:?}", bot.flags);
    let victim = group(&a, Kind::Device, "dev-0");
    assert_eq!((victim.replays, victim.flags.len()), (1, 0));
    assert_eq!(group(&a, Kind::Device, "dev-1").attempts, Some(4));
    let v6 = group(&a, Kind::Ip64, "2001:db8:0:1::/64");
    assert_eq!((v6.winners, v6.attempts), (25, Some(25)));
    assert_eq!(v6.flags.len(), 1);
    assert!(v6.flags[0].starts_with("success rate 100.0% against the crowd's"), "{:?}", v6.flags);
    // The bot's address and /24 too; nothing else.
    assert_eq!(group(&a, Kind::Ip24, "198.51.201.0/24").flags, bot.flags);
    let flagged: Vec<&str> = a.flagged().map(|g| g.key.as_str()).collect();
    assert_eq!(flagged, ["198.51.201.1", "198.51.201.0/24", "2001:db8:0:1::/64", "hot-dev", "bot-dev"]);
}

#[test]
fn exempt_networks_young_accounts_and_no_logs() {
    let mut winners: Vec<Winner> =
        (0..5).map(|i| w(&format!("u{i}"), "127.0.0.1", &format!("d{i}"), Some(200))).collect();
    winners.extend((0..3).map(|i| w(&format!("new{i}"), &format!("10.0.{i}.1"), &format!("n{i}"), Some(0))));
    winners.push(Winner {
        user: "old".into(),
        qty: 2,
        client_ip: None,
        device: None,
        account_age_secs: None,
    });
    let t = Thresholds { exempt: vec!["127.0.0.0/8".into()], ..Thresholds::default() };
    let a = audit("c", &winners, None, &t);
    let lo = group(&a, Kind::Ip32, "127.0.0.1");
    assert!(lo.exempt && lo.flags.is_empty(), "{lo:?}");
    assert_eq!(lo.attempts, None, "no log: attempts unknown");
    assert_eq!(a.crowd.attempts, None);
    assert_eq!((a.crowd.winners, a.crowd.units, a.crowd.without_origin), (9, 10, 1));
    let young = group(&a, Kind::AccountAge, "<1d");
    assert_eq!(young.winners, 3);
    assert_eq!(young.flags, ["young accounts hold 33% of the winners (max 20%)"]);
    assert!(group(&a, Kind::AccountAge, "30-365d").flags.is_empty());
    assert_eq!(group(&a, Kind::AccountAge, "unknown").units, 2);
    let unexempt = audit("c", &winners, None, &Thresholds::default());
    assert_eq!(group(&unexempt, Kind::Ip32, "127.0.0.1").flags, ["5 winners from one address (max 2)"]);
}

#[test]
fn keys_bands_and_thresholds() {
    assert_eq!(
        ip_keys("10.1.2.3".parse().unwrap()),
        [(Kind::Ip32, "10.1.2.3".to_string()), (Kind::Ip24, "10.1.2.0/24".to_string())]
    );
    assert_eq!(ip_keys("::ffff:10.1.2.3".parse().unwrap())[1].1, "10.1.2.0/24");
    assert_eq!(
        ip_keys("2001:db8:1:2:3:4:5:6".parse().unwrap()),
        [(Kind::Ip64, "2001:db8:1:2::/64".to_string())]
    );
    assert_eq!(
        [None, Some(0), Some(86_400), Some(10 * 86_400), Some(100 * 86_400), Some(400 * 86_400)]
            .map(age_band),
        ["unknown", "<1d", "1-7d", "7-30d", "30-365d", ">=1y"]
    );
    assert!(band_is_young("1-7d", 7) && !band_is_young("7-30d", 7) && band_is_young("7-30d", 30));
    assert!(exempt("10.9.8.7".parse().unwrap(), &["10.0.0.0/8".into()]));
    assert!(!exempt("11.9.8.7".parse().unwrap(), &["10.0.0.0/8".into(), "11.9.8.6".into()]));
    let args = Inputs { max_per_ip24: Some(3), exempt: vec!["fd00::/8".into()], ..Inputs::default() };
    let t = args.thresholds(Thresholds { max_per_ip32: 5, ..Thresholds::default() }).unwrap();
    assert_eq!((t.max_per_ip32, t.max_per_ip24, t.exempt.len()), (5, 3, 1));
    assert!(Inputs { exempt: vec!["nope".into()], ..Inputs::default() }
        .thresholds(Thresholds::default())
        .is_err());
    let conf: Thresholds = toml::from_str("max_per_ip24 = 4\nexempt = [\"127.0.0.0/8\"]").unwrap();
    assert_eq!((conf.max_per_ip24, conf.max_per_ip32), (4, Thresholds::default().max_per_ip32));
    assert!(toml::from_str::<Thresholds>("max_per_ip25 = 4").is_err(), "a misspelt threshold is refused");
}

#[test]
fn order_lines_of_the_access_log_are_the_attempts() {
    use super::source::{attempt_of, is_order_uri};
    assert!(is_order_uri("/seckill/c1/order?qty=1", "c1"));
    assert!(is_order_uri("/seckill/c1/a1b2c3/order", "c1"));
    assert!(!is_order_uri("/seckill/c10/order", "c1"));
    assert!(!is_order_uri("/seckill/c1/result/r1", "c1"));
    assert!(!is_order_uri("/seckill/c1/x/y/order", "c1"));
    let line = r#"{"time":"t","client":"203.0.113.7","method":"POST","uri":"/seckill/c1/order?qty=1","code":"BAD_SIGNATURE","device":"d7"}"#;
    assert_eq!(
        attempt_of(line, "c1"),
        Some(Attempt {
            client: Some("203.0.113.7".parse().unwrap()),
            device: Some("d7".into()),
            code: Some("BAD_SIGNATURE".into())
        })
    );
    assert_eq!(attempt_of(&line.replace("POST", "GET"), "c1"), None);
    assert_eq!(attempt_of("2026-05-01T10:00:00.123Z 203.0.113.7 \"POST /seckill/c1/order\"", "c1"), None);
}

#[test]
fn the_conf_files_audit_table_says_the_defaults() {
    // conf/order-writer.toml documents [audit] commented out: uncommented, it is the defaults.
    let conf =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../conf/order-writer.toml")).unwrap();
    let table: String = conf
        .lines()
        .skip_while(|l| *l != "# [audit]")
        .skip(1)
        .take_while(|l| l.starts_with("# ") && l.contains(" = "))
        .map(|l| format!("{}\n", &l[2..]))
        .collect();
    let t: Thresholds = toml::from_str(&table).unwrap();
    assert_eq!(t, Thresholds::default(), "{table}");
    assert_eq!(table.lines().count(), 12, "every threshold is documented: {table}");
}
