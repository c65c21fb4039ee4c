//! The crowd tool's judge against a real PostgreSQL: it waits for the closer to finish (orders
//! closed, and their stock released in Redis) before it checks anything.

use std::time::Duration;

use e2e::stack;
use sqlx::Executor;

/// A fresh database with the order writer's schema, one campaign, and one order in `status` with
/// `redis_released`; dropped by [`drop_db`].
async fn sale(status: &str, released: bool) -> (e2e::cleanup::Database, sqlx::PgPool) {
    let url = e2e::cleanup::Database::create().await.expect("PostgreSQL of the stack");
    let pool = backend::db::connect(&url, 2).await.unwrap();
    backend::db::migrate(&pool, &stack::workspace_root().join("sql")).await.unwrap();
    sqlx::query(
        "INSERT INTO campaigns (id, sku, total_stock, sold, per_user_limit, price_cents, starts_at, ends_at,
                                pay_window_secs)
         VALUES ('c', 's', 10, 1, 1, 1, now() - interval '1 hour', now() + interval '1 hour', 5)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO orders (request_id, campaign_id, user_id, sku, qty, amount_cents, price_version,
                             stock_version, one_per_user, status, reserved_at, pay_by, redis_released)
         VALUES ('r1', 'c', 'u1', 's', 1, 1, 1, 1, true, $1, now(), now(), $2)",
    )
    .bind(status)
    .bind(released)
    .execute(&pool)
    .await
    .unwrap();
    (url, pool)
}

async fn drop_db(url: &str, pool: sqlx::PgPool) {
    pool.close().await;
    let name = url.rsplit('/').next().unwrap();
    let mut admin = stack::pg_connect(&stack::pg_admin_url()).await.unwrap();
    admin.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))).await.unwrap();
}

#[tokio::test]
async fn the_judge_waits_for_closed_orders_to_be_released_in_redis() {
    // Closed in PostgreSQL, its unit not back in Redis yet: not settled ("closed, release pending").
    let (url, pool) = sale("CLOSED", false).await;
    let err = e2e::report::wait_closed("c", &url, Duration::ZERO).await.unwrap_err();
    assert!(err.to_string().contains("release pending"), "{err}");
    // The closer released it: settled.
    sqlx::query("UPDATE orders SET redis_released = true").execute(&pool).await.unwrap();
    e2e::report::wait_closed("c", &url, Duration::ZERO).await.unwrap();
    drop_db(&url, pool).await;

    // Unpaid: not settled either.
    let (url, pool) = sale("PENDING_PAYMENT", false).await;
    let err = e2e::report::wait_closed("c", &url, Duration::ZERO).await.unwrap_err();
    assert!(err.to_string().contains("wait for payment"), "{err}");
    drop_db(&url, pool).await;
}
