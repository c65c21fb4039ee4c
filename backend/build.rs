//! `sqlx::migrate!` compiles `sql/` into the binary; a migration added or changed there rebuilds it.

fn main() {
    println!("cargo:rerun-if-changed=../sql");
}
