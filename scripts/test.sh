#!/usr/bin/env bash
# The whole test suite: formatting, lints, static release builds, every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo clippy --locked -p confboot-attest --all-targets --features kds,pcs -- -D warnings

step "static release builds (x86_64-unknown-linux-musl)"
cargo build --locked --release --target x86_64-unknown-linux-musl \
  -p bootstrapper -p joinsvc -p nodeagent -p confboot-cli \
  -p confboot-tests --bins

step "cargo test"
cargo test --locked --workspace 2>&1 | tee target/test-output.txt
# One closing line for the whole run.
awk '/^test result:/ { p += $4; f += $6 } END { printf "\n%d passed, %d failed\n", p, f }' target/test-output.txt
