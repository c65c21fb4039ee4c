//! `campaign publish`: harmless twice, never resets a LIVE campaign, clear errors.

use crate::common;

use backend::campaign::publish::{publish, Published};
use common::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_twice_is_harmless_and_live_is_never_reset() {
    let env = Env::new(5, 1, 1).await;
    let dir = env.dir.join("campaigns");
    let again = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap();
    assert_eq!(again, Published::Unchanged { stock_version: 1 });
    assert_eq!(env.redis_stock().await, 5);

    env.reserve("g1", 1).await;
    assert_eq!(env.redis_stock().await, 4);
    // A campaign with reservations is not reset by publishing it again.
    let out = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap();
    assert!(matches!(out, Published::RefusedLive { .. }), "{out:?}");
    assert!(out.to_string().contains("nothing changed"), "{out}");
    assert_eq!(env.redis_stock().await, 4);

    // LIVE in PostgreSQL (an order written) is refused before Redis is touched.
    let r = env.reserve("g2", 1).await;
    env.produce(0, vec![r]).await;
    env.drain(10).await;
    let out = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap();
    assert!(out.to_string().contains("LIVE"), "{out}");
    assert_eq!(env.redis_stock().await, 3);
    assert_eq!(env.count("SELECT total_stock FROM campaigns WHERE id = $1").await, 5);
}

/// After publish, an edit of what the sale was made with (stock, price, limit, SKU, buckets) is
/// refused loudly, at the file's line and field, and changes nothing: before, the stock edit
/// only logged a warning and the rest was silently ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_campaigns_frozen_fields_are_refused_not_ignored() {
    let env = Env::new(5, 1, 1).await;
    let dir = env.dir.join("campaigns");
    let file = dir.join(format!("{}.toml", env.campaign));
    let original = std::fs::read_to_string(&file).unwrap();
    let edits = [
        ("stock = 5", "stock = 50", "stock", "stock is 5 published, 50 in the file"),
        (
            "price_cents = 1999",
            "price_cents = 1",
            "price_cents",
            "price_cents is 1999 published, 1 in the file",
        ),
        ("per_user_limit = 1", "per_user_limit = 3", "per_user_limit", "per_user_limit is 1 published, 3"),
        ("sku = \"SKU-", "sku = \"OTHER-", "sku", "in the file"),
    ];
    for (from, to, field, says) in edits {
        assert!(original.contains(from), "{from}");
        std::fs::write(&file, original.replace(from, to)).unwrap();
        let e = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap_err();
        let text = format!("{e:#}");
        assert!(text.contains(&format!("field `{field}`")) && text.contains(says), "{field}: {text}");
        assert!(text.contains("never change once published") && text.contains(".toml:"), "{text}");
    }
    // Two at once: both said, the first one's line named.
    std::fs::write(
        &file,
        original.replace("stock = 5", "stock = 6").replace("price_cents = 1999", "price_cents = 2"),
    )
    .unwrap();
    let text =
        format!("{:#}", publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap_err());
    assert!(
        text.contains("stock is 5 published, 6") && text.contains("price_cents is 1999 published, 2"),
        "{text}"
    );
    // Nothing changed anywhere; the file put back publishes as before.
    assert_eq!(env.redis_stock().await, 5);
    assert_eq!(env.count("SELECT total_stock FROM campaigns WHERE id = $1").await, 5);
    std::fs::write(&file, &original).unwrap();
    let again = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap();
    assert_eq!(again, Published::Unchanged { stock_version: 1 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_is_updated_from_its_file_before_publishing() {
    let env = Env::new(5, 1, 1).await;
    let dir = env.dir.join("campaigns");
    let id = fixtures::stack::unique("d-");
    let _keys = fixtures::cleanup::Campaign::adopt(&id, &fixtures::stack::redis_url());
    std::fs::write(dir.join(format!("{id}.toml")), common::campaign_toml(&id, 7, 2, 60)).unwrap();
    // As if a first publish had stopped after the database step.
    sqlx::query(
        "INSERT INTO campaigns (id, sku, total_stock, per_user_limit, price_cents, starts_at, ends_at, pay_window_secs)
         VALUES ($1, 'old', 3, 1, 1, now(), now() + interval '1 day', 60)",
    )
    .bind(&id)
    .execute(&env.pool)
    .await
    .unwrap();
    let out = publish(&env.pool, &env.redis, &env.scripts, &dir, &id).await.unwrap();
    assert_eq!(out, Published::Ready { stock_version: 2, stock: 7 });
    let (state, total, limit): (String, i64, i64) =
        sqlx::query_as("SELECT state, total_stock, per_user_limit FROM campaigns WHERE id = $1")
            .bind(&id)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), total, limit), ("READY", 7, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_campaign_and_bad_file_are_clear_errors() {
    let env = Env::new(5, 1, 1).await;
    let dir = env.dir.join("campaigns");
    let e = publish(&env.pool, &env.redis, &env.scripts, &dir, "no-such-campaign").await.unwrap_err();
    assert!(e.to_string().contains("unknown campaign"), "{e}");
    std::fs::write(
        dir.join("broken.toml"),
        common::campaign_toml("broken", 5, 1, 900).replace("stock = 5", "stock = -5"),
    )
    .unwrap();
    let e = publish(&env.pool, &env.redis, &env.scripts, &dir, "broken").await.unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("broken.toml:3:") && msg.contains("stock"), "{msg}");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM campaigns WHERE id = 'broken'")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}
