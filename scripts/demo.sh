#!/usr/bin/env bash
# The main job, for now: builds the static release binaries and boots a
# cluster of processes on this machine: every node is a bootstrapper with its
# own swtpm and LUKS2 state-disk image; `confboot init` makes node 1 the first
# control plane; joinsvc admits two more nodes after verifying them; a node
# with a tampered image is refused; a rebooted node rejoins.
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
# The orchestrator runs in the dev profile: it unwinds on a panic, so every
# process it started is ended.
cargo run --locked --quiet -p confboot-tests --bin demo -- "$bin"
