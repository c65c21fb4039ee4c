# Shared by the scripts under e2e/ (sourced, not run): the one build of every binary, a run's
# random keys and the gateway's [defense] table that reads them.
#
# Cargo resolves features over what one command selects (resolver 2): `-p gateway` alone,
# `-p backend` alone or all of them, with or without an `--example` (which brings in the
# dev-dependencies' features), each give some shared crates (tokio, hyper, fred, ...) another
# feature set, so another build of them and of everything above them. The demo, the tests and
# the benches therefore all build with this one command: the whole workspace, every binary and
# example, so whichever runs first builds for all of them and the others start at once.

# Builds every binary and example of the workspace: release, or the dev profile with `debug`.
build_all() { # [release|debug]
  if [[ "${1:-release}" == debug ]]; then
    cargo build --locked --workspace --bins --examples
  else
    cargo build --locked --workspace --bins --examples --release
  fi
}

# A random key for one run: PREFIX followed by 32 hex digits.
random_key() { # prefix
  printf '%s%s' "$1" "$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')"
}

# Exports a run's edge keys: the gateway's master key and the key of the shop's auth service the
# run plays (its login JWTs, HS256), both read by defense_table's server-file table.
edge_keys() { # prefix
  SECKILL_EDGE_KEY=$(random_key "$1-edge-")
  SECKILL_LOGIN_KEY=$(random_key "$1-login-")
  export SECKILL_EDGE_KEY SECKILL_LOGIN_KEY
}

# The [defense] table of a gateway server file, by reference to edge_keys' variables.
defense_table() {
  cat <<'TOML'
[defense]
master_key = "env:SECKILL_EDGE_KEY"
login_alg = "HS256"
login_key = "env:SECKILL_LOGIN_KEY"
login_issuer = "shop-auth"
login_audience = "seckill"
TOML
}
