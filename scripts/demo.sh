#!/usr/bin/env bash
# The main job: builds the static release binaries, starts joinsvc on
# loopback, shows it answering, and stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

target=x86_64-unknown-linux-musl
cargo build --locked --release --target "$target" -p bootstrapper -p joinsvc -p confboot-cli
bin="target/$target/release"
for b in joinsvc bootstrapper confboot; do
  printf '%-13s %8d bytes, %s\n' "$b" "$(stat -c %s "$bin/$b")" "$(file -b "$bin/$b" 2>/dev/null | cut -d, -f1-2 || echo ELF)"
done

rpc_port=${CONFBOOT_DEMO_RPC_PORT:-19090}
health_port=${CONFBOOT_DEMO_HEALTH_PORT:-19091}
log=$(mktemp)
"$bin/joinsvc" --listen "127.0.0.1:$rpc_port" --health-listen "127.0.0.1:$health_port" -v 4 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT

for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$health_port/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
echo
echo "== joinsvc answers"
for path in healthz readyz metrics; do
  echo "GET /$path"
  curl -fsS "http://127.0.0.1:$health_port/$path" | sed 's/^/  /'
done
echo
echo "== stopping joinsvc with SIGTERM"
kill -TERM "$pid"
wait "$pid"
echo "joinsvc exited with status $?"
echo "== joinsvc log"
sed 's/^/  /' "$log"
