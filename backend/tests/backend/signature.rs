//! The record signature against the real stack: an unsigned, a forged or a tampered record
//! produced straight to the topic is dead-lettered with its offset, takes no stock and releases
//! none, and the signed records after it become orders.

use crate::common;

use common::Env;
use protocol::record::Reservation;
use protocol::signing::Signer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unsigned_forged_and_tampered_records_are_dead_letters_and_signed_ones_after_them_orders() {
    let env = Env::new(10, 1, 1).await;
    let alice = env.reserve("alice", 1).await;
    let bob = env.reserve("bob", 1).await;
    let carol = env.reserve("carol", 1).await;
    let dave = env.reserve("dave", 1).await;
    // A reservation Redis never made, valid JSON, signed with another key.
    let mut forged = Reservation::from_json(&alice).unwrap();
    forged.request_id = "forged-1".into();
    forged.user = "mallory".into();
    let forged = serde_json::to_vec(&forged).unwrap();
    // Dave's record with a larger quantity, under the signature of the original.
    let mut tampered = Reservation::from_json(&dave).unwrap();
    tampered.qty = 5;
    let tampered = serde_json::to_vec(&tampered).unwrap();
    let dave_sig = Signer::new(common::GATEWAY_KEY).sign(&dave).into_bytes();

    env.produce_unsigned(0, vec![alice.clone()]).await; // offset 0: genuine bytes, no header
    env.produce_signed_by(0, vec![forged.clone()], Some(&Signer::new(b"not-the-gateway-key-0123"))).await; // 1
    env.produce_raw(0, vec![(tampered.clone(), Some(dave_sig))]).await; // 2
    env.produce(0, vec![bob, carol]).await; // 3, 4
    env.drain(100).await;

    let dead: Vec<(i32, i64, Vec<u8>, String)> = env.dead_letters().await;
    let dead: Vec<(i64, &[u8], &str)> =
        dead.iter().map(|(_, o, p, e)| (*o, p.as_slice(), e.as_str())).collect();
    assert_eq!(
        dead,
        [
            (0, alice.as_slice(), "unsigned record"),
            (1, forged.as_slice(), "signature does not match"),
            (2, tampered.as_slice(), "signature does not match"),
        ]
    );
    let users: Vec<String> =
        sqlx::query_scalar("SELECT user_id FROM orders WHERE campaign_id = $1 ORDER BY user_id")
            .bind(&env.campaign)
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(users, ["bob", "carol"]);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 2);
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 5);
    // A dead-lettered record decides nothing: no refusal, no release; alice's and dave's real
    // reservations wait in the outbox for a signed copy (the sweeper's).
    assert_eq!(env.count("SELECT count(*) FROM reservation_results WHERE campaign_id = $1").await, 0);
    assert_eq!(env.stat("released_count").await, 0);
    assert_eq!(env.outbox_len().await, 2);

    env.produce(0, vec![alice, dave]).await;
    env.drain(100).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 4);
    assert_eq!(env.count("SELECT sum(qty)::int8 FROM orders WHERE campaign_id = $1").await, 4);
    assert_eq!(env.outbox_len().await, 0);
    assert_eq!(env.dead_letters().await.len(), 3, "no dead letter for the signed copies");
}
