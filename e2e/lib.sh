# Shared by the scripts under e2e/ (sourced, not run): the one build of every binary.
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
