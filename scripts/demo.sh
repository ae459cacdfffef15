#!/usr/bin/env bash
# The main job, for now: builds the static release binaries, starts joinsvc
# on loopback with a Kubernetes API double, and lets three nodes (each with
# its own swtpm) ask it for join tickets over attested TLS. Two run the
# expected image and get tickets; one runs a tampered image and is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

target=x86_64-unknown-linux-musl
cargo build --locked --release --target "$target" -p bootstrapper -p joinsvc -p confboot-cli
bin="target/$target/release"
for b in joinsvc bootstrapper confboot; do
  printf '%-13s %8d bytes, %s\n' "$b" "$(stat -c %s "$bin/$b")" "$(file -b "$bin/$b" | cut -d, -f1-2)"
done
echo
cargo run --locked --quiet --release -p confboot-tests --bin demo -- "$bin/joinsvc"
