use super::*;
use protocol::scripts::Drawn;

fn key() -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, b"room-key-0123456789")
}

fn schedule(rate: u64, max_active: Option<u64>, session_secs: i64) -> Schedule {
    Schedule { rate, max_active, session_ms: session_secs * 1000 }
}

#[test]
fn late_first_admissions_are_paced_at_the_rate_and_on_time_ones_never() {
    let (rate, mut pace) = (3, Pace::default());
    let second = 1_764_000_000_000;
    // On time: always through, and counted.
    for i in 0..5 {
        assert!(pace.admits(second + i, LATE_ADMISSION_MS - 1, rate), "on time {i}");
    }
    // The second's admissions are over the rate: a late one waits for the next second.
    assert!(!pace.admits(second + 10, LATE_ADMISSION_MS, rate));
    assert!(!pace.admits(second + 999, 60_000, rate));
    // The next second: the rate's worth of late ones, then no more.
    let next = second + 1000;
    for i in 0..rate {
        assert!(pace.admits(next + i as i64, 5_000, rate), "late {i} of the next second");
    }
    assert!(!pace.admits(next + 500, 5_000, rate));
    assert!(pace.admits(next + 600, 0, rate), "on time, even then");
    // A backlog of 10 late ones presented every 100 ms drains at the rate, never above it.
    let mut pace = Pace::default();
    let mut per_second = std::collections::BTreeMap::new();
    let mut waiting = 10;
    for tick in 0..50 {
        let now = second + tick * 100;
        let mut left = 0;
        for _ in 0..waiting {
            if pace.admits(now, 2_000, rate) {
                *per_second.entry(now / 1000).or_insert(0) += 1;
            } else {
                left += 1;
            }
        }
        waiting = left;
    }
    assert_eq!(waiting, 0, "all admitted in the end");
    assert!(per_second.values().all(|&n| n <= rate), "{per_second:?}");
}

#[test]
fn serving_advances_at_the_rate_from_the_start() {
    let s = schedule(10, None, 60);
    assert_eq!(s.serving(-5000), 0);
    assert_eq!(s.serving(0), 0);
    assert_eq!(s.serving(99), 0);
    assert_eq!(s.serving(100), 1);
    assert_eq!(s.serving(1000), 10);
    assert_eq!(s.serving(60_000), 600);
    assert_eq!(s.served_at(1), 100);
    assert_eq!(s.served_at(10), 1000);
    assert_eq!(schedule(3, None, 60).served_at(1), 334, "ceil(1000/3)");
}

#[test]
fn max_active_caps_the_admitted_within_any_session() {
    // 10/s for 10 s sessions would admit 100 at once; max_active 30 holds it at 30.
    let s = schedule(10, Some(30), 10);
    assert_eq!(s.serving(3000), 30);
    assert_eq!(s.serving(9999), 30, "full until the first session ends");
    assert_eq!(s.serving(10_000), 30);
    assert_eq!(s.serving(10_100), 31);
    assert_eq!(s.serving(13_000), 60);
    assert_eq!(s.serving(25_000), 90);
    // A cap above the rate times the session never binds.
    assert_eq!(schedule(10, Some(100), 10).serving(37_000), schedule(10, None, 10).serving(37_000));
    for (rate, m, session) in [(10, Some(30), 10), (7, Some(5), 3), (3, Some(100), 10), (1000, Some(999), 1)]
    {
        let s = schedule(rate, m, session);
        let mut last = 0;
        for t in (0..40_000).step_by(37) {
            let now = s.serving(t);
            assert!(now >= last, "never goes back");
            last = now;
            let before = s.serving(t - s.session_ms);
            assert!(now - before <= m.unwrap(), "{rate} {m:?} {session}: {now} - {before} at {t}");
        }
        for p in 1..200 {
            let at = s.served_at(p);
            assert!(s.serving(at) >= p, "{p} served at {at}");
            assert!(s.serving(at - 1) < p, "{p} not served before {at}");
        }
    }
}

#[test]
fn a_turn_waits_then_is_admitted_for_a_session_then_passes() {
    let s = schedule(10, None, 60);
    assert_eq!(turn(&s, 25, 1000), Turn::Waiting { serving: 10, ahead: 14, eta_ms: 1500 });
    assert_eq!(turn(&s, 25, 2500), Turn::Admitted { left_ms: 60_000 });
    assert_eq!(turn(&s, 25, 62_499), Turn::Admitted { left_ms: 1 });
    assert_eq!(turn(&s, 25, 62_500), Turn::Passed);
    assert_eq!(turn(&s, 1, -10_000), Turn::Waiting { serving: 0, ahead: 0, eta_ms: 10_100 });
    assert_eq!((retry_after_secs(1500), retry_after_secs(0), retry_after_secs(600_000)), (2, 1, 30));
}

#[test]
fn an_admission_is_counted_once_per_wait() {
    let s = schedule(10, None, 60);
    let promised = s.served_at(25); // 2500 ms after a start at 0
                                    // Waiting tickets, issued up to just before the promise, are waiting ones.
    for now in [0, 1000, 2000, 2499] {
        let issued = issued_at(turn(&s, 25, now), now);
        assert_eq!(
            first_admission(Some((issued, false)), promised),
            Some(Admission { promised_ms: promised })
        );
    }
    // The ticket renewed at the admission, even in the promise's own second, is not.
    for now in [2500, 2501, 2999, 3000, 60_000] {
        let issued = issued_at(turn(&s, 25, now), now);
        assert!(issued * 1000 >= promised, "{now}: issued {issued}");
        assert_eq!(first_admission(Some((issued, false)), promised), None, "{now}");
    }
    assert!(first_admission(Some((5, true)), promised).is_some(), "a pre-queue ticket waited");
    assert_eq!(first_admission(None, promised), None, "no ticket: not counted");
}

#[test]
fn room_stats_keep_the_highest_place_and_the_errors_until_read() {
    let stats = RoomStats::default();
    let none = Closed::default();
    stats.saw("c1", RoomPlace::PreQueue(4), none);
    stats.saw("c1", RoomPlace::Position(2), Closed { pre: Some(6), draw: None });
    stats.saw("c1", RoomPlace::Position(9), none);
    stats.saw("c1", RoomPlace::Position(3), none);
    stats.saw("c1", RoomPlace::Draw(2), Closed { pre: Some(6), draw: None });
    stats.saw("c1", RoomPlace::Draw(1), Closed { pre: Some(6), draw: Some(Drawn { base: 6, size: 3 }) });
    stats.admitted("c1", Admission { promised_ms: 1000 }, 1040);
    stats.admitted("c1", Admission { promised_ms: 2000 }, 1990);
    let read = stats.take("c1");
    assert_eq!(read, CampaignRoom { issued: 9, admitted: 2, late_ms: vec![40, -10] });
    stats.issued("c1", 12);
    stats.issued("c1", 11);
    let again = CampaignRoom { issued: 12, admitted: 2, late_ms: vec![] };
    assert_eq!(stats.take("c1"), again, "room.lua's count; errors read once");
    assert_eq!(stats.take("c2"), CampaignRoom::default());
}

#[test]
fn the_shuffle_is_a_keyed_permutation() {
    for size in [1u64, 2, 3, 5, 16, 17, 100, 1000] {
        let mut seen: Vec<u64> = (1..=size).map(|a| shuffle(&key(), "c1", size, a)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (1..=size).collect::<Vec<_>>(), "a bijection of 1..={size}");
    }
    let order = |k: &hmac::Key, c: &str| (1..=100).map(|a| shuffle(k, c, 100, a)).collect::<Vec<_>>();
    assert_ne!(order(&key(), "c1"), (1..=100).collect::<Vec<_>>(), "not the arrival order");
    assert_ne!(order(&key(), "c1"), order(&key(), "c2"), "another campaign, another order");
    let other = hmac::Key::new(hmac::HMAC_SHA256, b"another");
    assert_ne!(order(&key(), "c1"), order(&other, "c1"), "another key, another order");
    // Arriving last is no worse than arriving first: the last tenth of 1000 arrivals land
    // all over the positions, not at the back (mean near the middle).
    let late: u64 = (901..=1000).map(|a| shuffle(&key(), "c1", 1000, a)).sum::<u64>() / 100;
    assert!((300..=700).contains(&late), "the late arrivals' mean position is {late}");
}

#[test]
fn the_start_draw_is_another_keyed_permutation() {
    for size in [1u64, 2, 7, 64, 65, 1000] {
        let mut seen: Vec<u64> = (1..=size).map(|a| draw_shuffle(&key(), "c1", size, a)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (1..=size).collect::<Vec<_>>(), "a bijection of 1..={size}");
    }
    let drawn: Vec<u64> = (1..=100).map(|a| draw_shuffle(&key(), "c1", 100, a)).collect();
    let pre: Vec<u64> = (1..=100).map(|a| shuffle(&key(), "c1", 100, a)).collect();
    assert_ne!(drawn, pre, "the two lotteries of a campaign are drawn apart");
    assert_ne!(drawn, (1..=100).collect::<Vec<_>>(), "not the arrival order");
    // The first tenth of the arrivals (a script firing at T+0) is not at the front: its mean
    // place is near the middle.
    let first: u64 = (1..=100).map(|a| draw_shuffle(&key(), "c1", 1000, a)).sum::<u64>() / 100;
    assert!((300..=700).contains(&first), "the first arrivals' mean place is {first}");
}

#[test]
fn a_place_is_positioned_once_its_lottery_is_drawn() {
    let (start, end) = (10_000, 11_000);
    // Drawn buyers asked back 4 a second: the d-th 250 ms × (d − 1) after the draw's close,
    // its end plus the longest an arrival may be claimed before Redis's clock.
    let lotteries = Lotteries::new(start, end, 4);
    let close = end + protocol::timing::ARRIVAL_CLAIM_MAX_MS;
    assert_eq!(lotteries.draw_close_ms, close);
    assert_eq!(Lotteries::new(start, start, 4).draw_close_ms, start, "no draw: nothing waits");
    let at = |place, closed, now| place_position(&key(), "c1", place, closed, now, lotteries);
    let none = Closed::default();
    let pre = Closed { pre: Some(5), draw: None };
    let both = Closed { pre: Some(5), draw: Some(Drawn { base: 8, size: 4 }) };
    assert_eq!(at(RoomPlace::Position(42), none, 0), Placed::Position(42));
    // The pre-queue: drawn at the start.
    let undrawn = |drawn_at_ms, lottery| Placed::Undrawn { drawn_at_ms, lottery };
    assert_eq!(at(RoomPlace::PreQueue(2), none, 9_999), undrawn(start, Lottery::PreQueue));
    assert_eq!(at(RoomPlace::PreQueue(2), none, start), Placed::Unknown, "drawn, not known here yet");
    assert_eq!(at(RoomPlace::PreQueue(2), pre, start), Placed::Position(shuffle(&key(), "c1", 5, 2)));
    // The start draw: the first arrival asked back at its close, the third 500 ms later, and
    // told nothing more before then, even once the draw is known.
    let draw = Lottery::StartDraw;
    assert_eq!(at(RoomPlace::Draw(1), pre, 10_500), undrawn(close, draw));
    assert_eq!(at(RoomPlace::Draw(3), pre, 10_500), undrawn(close + 500, draw));
    assert_eq!(at(RoomPlace::Draw(3), both, close + 499), undrawn(close + 500, draw));
    assert_eq!(at(RoomPlace::Draw(1), pre, close), Placed::Unknown);
    assert_eq!(at(RoomPlace::Draw(3), pre, close + 500), Placed::Unknown);
    let drawn = at(RoomPlace::Draw(3), both, close + 500);
    assert_eq!(drawn, Placed::Position(8 + draw_shuffle(&key(), "c1", 4, 3)));
    // An arrival after the window, before the close: right after the drawn places, first
    // come first served, told at the same pace.
    assert_eq!(at(RoomPlace::Late(2), pre, end + 10), undrawn(close + 250, Lottery::AfterDraw));
    assert_eq!(at(RoomPlace::Late(2), pre, close + 250), Placed::Unknown);
    assert_eq!(at(RoomPlace::Late(2), both, close + 250), Placed::Position(8 + 4 + 2));
    let mut places: Vec<u64> = (1..=4)
        .map(|d| match at(RoomPlace::Draw(d), both, close + 1000) {
            Placed::Position(p) => p,
            other => panic!("{other:?}"),
        })
        .collect();
    places.sort_unstable();
    assert_eq!(places, vec![9, 10, 11, 12], "base + 1 ..= base + size, each once");
}

#[test]
fn the_drawn_are_asked_back_at_a_pace_from_the_close_and_no_turn_comes_before_its_buyer_is() {
    let l = |return_per_sec| Lotteries::new(0, 1000, return_per_sec);
    let close = 1000 + protocol::timing::ARRIVAL_CLAIM_MAX_MS;
    assert_eq!(l(1000).draw_return_at_ms(1), close);
    assert_eq!(l(1000).draw_return_at_ms(2), close + 1);
    assert_eq!(l(3).draw_return_at_ms(2), close + 333);
    assert_eq!(l(0).draw_return_at_ms(3), close + 2000, "a pace of 0 is read as 1 a second");
    assert_eq!(l(1).draw_return_at_ms(u64::MAX), i64::MAX, "no overflow");
    // `room.lua`'s base for a draw of m, and late arrivals after it, closed at `after` ms
    // past the close: the serving line then plus ceil((m + late) · rate / pace), or the
    // pre-queue's size if higher. Every drawn or late place's turn then comes at or after its
    // buyer is asked back, whatever the pace, the rate, the cap or the pre-queue.
    for (rate, max_active, pace, m, late, pre, after) in [
        (500, None, 5000, 5000, 0, 0, 0),
        (500, None, 5000, 5000, 800, 0, 3000),
        (500, None, 500, 37, 5, 0, 0),
        (1, None, 10, 20, 3, 2, 400),
        (7, Some(5), 70, 300, 40, 3, 2500),
        (1000, Some(999), 20_000, 10_000, 700, 1500, 0),
        (3, None, 1, 10, 10, 0, 0),
    ] {
        let s = Schedule { rate, max_active, session_ms: 10_000 };
        let lotteries = Lotteries::new(0, 1000, pace);
        let told = ((m + late) * rate).div_ceil(pace);
        let base = pre.max(s.serving(lotteries.draw_close_ms + after) + told);
        let places = (1..=m)
            .map(|d| (base + draw_shuffle(&key(), "c1", m, d), d))
            .chain((1..=late).map(|n| (base + m + n, n)));
        for (p, number) in places {
            let (turn_at, back_at) = (s.served_at(p), lotteries.draw_return_at_ms(number));
            assert!(
                turn_at >= back_at,
                "{rate}/s, pace {pace}, {m} drawn: place {p} at {turn_at} < {back_at}"
            );
        }
    }
}

#[test]
fn the_arrival_claim_bound_covers_the_longest_a_token_request_waits_before_room_lua() {
    // The body's read, then one Redis call bounded as the room's calls are (the undo's
    // timeout of the longest reservation timeout a conf may have).
    let most = protocol::timing::undo_timeout(Duration::from_millis(
        protocol::timing::RESERVE_TIMEOUT_MAX_MS as u64,
    ));
    assert_eq!(
        crate::serve::flash_sale::BODY_TIMEOUT + most,
        Duration::from_millis(protocol::timing::ARRIVAL_CLAIM_MAX_MS as u64)
    );
}

#[test]
fn a_near_turn_is_held_only_with_the_work() {
    let waiting = |eta_ms| Turn::Waiting { serving: 1, ahead: 0, eta_ms };
    assert_eq!(hold_ms(waiting(3), true), Some(3));
    assert_eq!(hold_ms(waiting(ADMIT_IN_PLACE_MS), true), Some(ADMIT_IN_PLACE_MS));
    assert_eq!(hold_ms(waiting(ADMIT_IN_PLACE_MS + 1), true), None, "far enough to come back");
    assert_eq!(hold_ms(waiting(3), false), None, "no answer to the captcha: told to wait");
    assert_eq!(hold_ms(Turn::Admitted { left_ms: 5 }, true), None);
    assert_eq!(hold_ms(Turn::Passed, true), None);
    // Held that long, the turn has come: the schedule's promise is reached.
    let s = schedule(500, None, 60);
    let (p, t) = (17, 30);
    let Turn::Waiting { eta_ms, .. } = turn(&s, p, t) else { panic!() };
    assert!(matches!(turn(&s, p, t + hold_ms(turn(&s, p, t), true).unwrap()), Turn::Admitted { .. }));
    assert_eq!(t + eta_ms, s.served_at(p));
}

#[test]
fn no_wait_is_promised_shorter_than_a_round_trip_and_the_ticket_keeps_the_promise() {
    let s = schedule(500, None, 60);
    // Position 17 at 30 ms: its turn 4 ms away. Padded to MIN_PROMISE_MS, kept from 30 ms.
    let (p, t) = (17, 30);
    let (answer, promise) = padded(turn(&s, p, t), t);
    assert!(matches!(answer, Turn::Waiting { eta_ms: MIN_PROMISE_MS, .. }), "{answer:?}");
    assert_eq!(promise, Some(t + MIN_PROMISE_MS));
    // The ticket keeps it: waiting until the promise, before the turn has come and after,
    // then in.
    let before = kept_turn(&s, p, t + 1, promise);
    assert!(matches!(before, Turn::Waiting { eta_ms: 249, .. }), "{before:?}");
    let waiting = kept_turn(&s, p, t + 100, promise);
    assert!(matches!(waiting, Turn::Waiting { ahead: 0, eta_ms: 150, .. }), "{waiting:?}");
    assert_eq!(hold_ms(waiting, true), None, "150 ms away: not held yet");
    let near = kept_turn(&s, p, t + 200, promise);
    assert_eq!(hold_ms(near, true), Some(50), "held until the promise, not let in at once");
    assert!(matches!(kept_turn(&s, p, t + MIN_PROMISE_MS, promise), Turn::Admitted { .. }));
    assert_eq!(kept_turn(&s, p, t + 100, None), turn(&s, p, t + 100), "no promise: the turn's");
    // A wait already that long is not padded, nor is an admission.
    let far = turn(&s, 400, t);
    assert_eq!(padded(far, t), (far, None));
    let admitted = Turn::Admitted { left_ms: 5 };
    assert_eq!(padded(admitted, t), (admitted, None));
}

#[test]
fn a_ticket_keeps_its_promise_signed() {
    let now = 1_700_000_000;
    let promised =
        Ticket { promised_ms: Some(now * 1000 + 250), ..ticket(RoomPlace::Position(42), now + 60) };
    let t = promised.sign(&key());
    assert_eq!(t.split('.').count(), 7, "{t}");
    let check = |t: &str| Ticket::verify(&key(), t.as_bytes(), "c1", "u1", "d1", now);
    assert_eq!(check(&t).unwrap(), promised);
    let sooner = t.replacen(&format!(".{}.", now * 1000 + 250), &format!(".{}.", now * 1000), 1);
    assert_ne!(sooner, t);
    assert_eq!(check(&sooner).unwrap_err().code, Code::BadTicket, "promise moved up");
    let dropped = t.replacen(&format!(".{}", now * 1000 + 250), "", 1);
    assert_eq!(dropped.split('.').count(), 6);
    assert_eq!(check(&dropped).unwrap_err().code, Code::BadTicket, "promise taken out");
    let junk = t.replacen(&format!(".{}.", now * 1000 + 250), ".25x.", 1);
    assert_eq!(check(&junk).unwrap_err().code, Code::BadTicket, "not a number");
}

fn ticket(place: RoomPlace, expires_at: i64) -> Ticket {
    Ticket {
        campaign: "c1".into(),
        user: "u1".into(),
        device: "d1".into(),
        place,
        issued_at: 1_700_000_000,
        expires_at,
        promised_ms: None,
    }
}

#[test]
fn a_ticket_verifies_only_for_its_campaign_user_device_and_life() {
    let now = 1_700_000_000;
    let t = ticket(RoomPlace::Position(42), now + 60).sign(&key());
    let check =
        |t: &str, c: &str, u: &str, d: &str, at: i64| Ticket::verify(&key(), t.as_bytes(), c, u, d, at);
    assert_eq!(check(&t, "c1", "u1", "d1", now).unwrap(), ticket(RoomPlace::Position(42), now + 60));
    assert!(check(&t, "c1", "u1", "d1", now + 60).is_ok(), "valid up to its expiry");
    let code = |r: Result<Ticket, Denial>| r.unwrap_err();
    for (d, why) in [
        (code(check(&t, "c2", "u1", "d1", now)), "another campaign"),
        (code(check(&t, "c1", "u2", "d1", now)), "another user"),
        (code(check(&t, "c1", "u1", "d2", now)), "another device"),
        (code(check(&t, "c1", "u1", "d1", now + 61)), "expired"),
    ] {
        assert_eq!(d.code, Code::BadTicket, "{why}");
        assert_eq!(Code::BadTicket.status(), 403);
    }
    assert!(code(check(&t, "c1", "u2", "d1", now)).message.contains("another user"));
    assert!(code(check(&t, "c1", "u1", "d2", now)).message.contains("another device"));
    assert!(code(check(&t, "c1", "u1", "d1", now + 61)).message.contains("expired"));
    // Forged: a better place, a longer life, another user written in, another key.
    let forged = t.replacen("p42.", "p1.", 1);
    assert_eq!(code(check(&forged, "c1", "u1", "d1", now)).code, Code::BadTicket, "place moved up");
    let longer = t.replacen(&format!(".{}.", now + 60), &format!(".{}.", now + 6000), 1);
    assert_eq!(code(check(&longer, "c1", "u1", "d1", now + 100)).code, Code::BadTicket, "life extended");
    let as_u2 = t.replacen(&hex::encode("u1"), &hex::encode("u2"), 1);
    assert_eq!(code(check(&as_u2, "c1", "u2", "d1", now)).code, Code::BadTicket, "user written in");
    let other = hmac::Key::new(hmac::HMAC_SHA256, b"another");
    let theirs = ticket(RoomPlace::Position(1), now + 60).sign(&other);
    assert_eq!(code(check(&theirs, "c1", "u1", "d1", now)).code, Code::BadTicket, "another key");
    for junk in ["", "p1", "p1.2.3.4.5.6", "p1.1.1.75.64.zz", "x1.1.1.7531.6431.00", "\u{ff}"] {
        assert_eq!(code(check(junk, "c1", "u1", "d1", now)).code, Code::BadTicket, "{junk:?}");
    }
    let pre = ticket(RoomPlace::PreQueue(7), now + 60).sign(&key());
    assert_eq!(check(&pre, "c1", "u1", "d1", now).unwrap().place, RoomPlace::PreQueue(7));
}

#[test]
fn arrival_rates_pick_the_bits_and_fade() {
    let text = "id = \"c1\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\n\
                starts_at = 2026-12-01T10:00:00Z\nends_at = 2026-12-01T11:00:00Z\n\
                [[pow_level]]\narrivals_per_sec = 100\nbits = 20\n";
    let c = Campaign::parse(std::path::Path::new("c1.toml"), text).unwrap();
    let rates = ArrivalRates::default();
    assert_eq!(rates.bits(&c, 1000), 16, "no count yet: the base");
    rates.record("c1", 1000, 150);
    rates.record("c1", 1000, 120);
    assert_eq!(rates.rate("c1", 1000), 150, "the highest count of a second");
    assert_eq!(rates.bits(&c, 1001), 20);
    assert_eq!(rates.bits(&c, 1003), 16, "a count older than 2 s fades");
    rates.record("c1", 1004, 99);
    assert_eq!(rates.bits(&c, 1004), 16);
}

#[test]
fn the_pre_queue_window_opens_the_token_endpoint_before_the_start_only_with_the_room() {
    let text = "id = \"c1\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\n\
                starts_at = 2026-12-01T10:00:00Z\nends_at = 2026-12-01T11:00:00Z\n";
    let off = Campaign::parse(std::path::Path::new("c1.toml"), text).unwrap();
    let on = Campaign::parse(
        std::path::Path::new("c1.toml"),
        &format!("{text}[waiting_room]\nadmit_per_sec = 5\npre_queue_secs = 60\n"),
    )
    .unwrap();
    let start = on.starts_at.to_utc();
    let at = |s: i64| start + chrono::Duration::seconds(s);
    assert!(check_window(&on, at(-60), None).is_ok());
    assert!(check_window(&on, at(-1), None).is_ok());
    assert_eq!(check_window(&on, at(-61), None).unwrap_err().code, Code::NotStarted);
    assert_eq!(check_window(&off, at(-1), None).unwrap_err().code, Code::NotStarted);
    assert!(check_window(&on, at(0), None).is_ok());
    assert_eq!(check_window(&on, at(3600), None).unwrap_err().code, Code::Ended);
}
