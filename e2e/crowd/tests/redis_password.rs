//! A Redis that asks for a password, given by reference (`[redis] password = "file:..."` of the
//! gateway's file, the order writer's `redis_password`), never in the URL: the sale's pool (and
//! the order writer's client) authenticate with it on a private `redis-server --requirepass`,
//! and a client without it is refused.

use e2e::stack::PrivateRedis;

use fred::prelude::ClientLike;
use protocol::secret::Password;

/// A gateway's server file of the sale's sections, its Redis at `url` with the password of the
/// file `redis.password` beside it.
fn server_file(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let file = dir.join("server.toml");
    std::fs::write(
        &file,
        format!(
            "[sale]\nsigning_key = \"file:key\"\n\n[redis]\nurl = \"{url}\"\npassword = \"file:redis.password\"\n\n\
             [kafka]\nbrokers = [\"127.0.0.1:1\"]\n\n[defense]\nmaster_key = \"file:key\"\nlogin_alg = \"HS256\"\n\
             login_key = \"file:key\"\nlogin_issuer = \"shop\"\nlogin_audience = \"seckill\"\n"
        ),
    )
    .unwrap();
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_password_given_by_reference_is_sent() {
    let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
    let server = PrivateRedis::start(&["--requirepass", &password]).await;
    let dir = std::env::temp_dir().join(format!("redis-password-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("redis.password"), format!("{password}\n")).unwrap();
    std::fs::write(dir.join("key"), "0123456789abcdef0123456789abcdef\n").unwrap();

    let conf = plugins::conf::SaleConf::parse(
        &server_file(&dir, &server.url()),
        &std::fs::read_to_string(dir.join("server.toml")).unwrap(),
    )
    .unwrap();
    let pool = plugins::setup::connect(&conf.redis, &protocol::scripts::Scripts::builtin()).await.unwrap();
    let pong: String = pool.next().ping(None).await.expect("the sale's pool authenticated");
    assert_eq!(pong, "PONG");
    let _ = pool.quit().await;

    let writer = backend::redis::connect_as(
        &server.url(),
        Some(&Password::read("file:redis.password", &dir).unwrap()),
    )
    .await
    .expect("the order writer's client authenticated");
    let _ = writer.quit().await;
    let refused = backend::redis::connect(&server.url()).await.expect_err("no password, no connection");
    assert!(
        format!("{refused:#}").contains("NOAUTH") || format!("{refused:#}").contains("auth"),
        "{refused:#}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
