#!/usr/bin/env bash
# The whole test suite: formatting, lints, static release builds, every test.
# --quick: the contributor's tier, the same without the static release
# builds (minutes of LTO) and the test targets that need them or boot QEMU;
# it names every target it leaves out.
set -euo pipefail
quick=false
case "${1:-}" in
  "") ;;
  --quick) quick=true ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2 && exit 2 ;;
esac
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo clippy --locked -p confboot-snp -p confboot-tdx --all-targets --features confboot-snp/kds,confboot-tdx/pcs -- -D warnings

if ! $quick; then
step "static release builds (x86_64-unknown-linux-musl)"
cargo build --locked --release --target x86_64-unknown-linux-musl \
  -p bootstrapper -p joinsvc -p nodeagent -p confboot-cli -p confboot-pause \
  -p confboot-tests --bins
fi

step "cargo test"
if $quick; then
  # QEMU (boot, vm_*) or the static release binaries: left out, by name.
  kept=() left=()
  for f in tests/tests/*.rs; do
    t=$(basename "$f" .rs)
    case $t in
      boot | vm_* | static_binaries | deploy_manifests | relay | hostile_load | join_storm) left+=("$t") ;;
      *) kept+=(--test "$t") ;;
    esac
  done
  echo "quick tier: NOT running confboot-tests' ${left[*]} (run scripts/test.sh for them)"
  { cargo test --locked --workspace --exclude confboot-tests &&
    cargo test --locked -p confboot-tests --lib --bins "${kept[@]}"; } 2>&1 | tee target/test-output.txt
else
  cargo test --locked --workspace 2>&1 | tee target/test-output.txt
fi
# One closing line for the whole run.
awk '/^test result:/ { p += $4; f += $6 } END { printf "\n%d passed, %d failed\n", p, f }' target/test-output.txt
