#!/usr/bin/env bash
# The fault campaign: every scenario of RELIABILITY.md's "Faults" section at
# full length (CONFBOOT_FAULTS=all), where the test suite runs one per kind:
#   1. a node process killed after each step of its first boot (faults.rs)
#   2. joinsvc killed mid-handshake and mid-call, the Kubernetes API failing,
#      joinsvc's swtpm restarting (joinsvc_faults.rs)
#   3. a node VM powered off after each step of its first boot, after it
#      wrote data on its bootstrapped disk, and at each step of a rejoin
#      that must read that data back (vm_faults.rs; ~1 min per step, about
#      half an hour in all)
# Each prints its matrix (scenario, outcome, formats, time to converge); the
# tables, with the commit they were measured on, go to
# target/faults/<commit>.md for RELIABILITY.md.
#
# Usage: scripts/faults.sh [process|joinsvc|vm]...   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(process joinsvc vm)

commit="$(git rev-parse --short HEAD)"
dirty=""
git diff --quiet HEAD || dirty=" (with uncommitted changes)"
out="target/faults/$commit.md"
mkdir -p target/faults
printf '# Fault campaign at commit %s%s, %s\n' "$commit" "$dirty" "$(date -u +%Y-%m-%dT%H:%MZ)" >"$out"

step() { printf '\n== %s\n' "$*"; }

# The process tests run the debug joinsvc; the VM test the static binaries.
step "builds"
cargo build --locked -p joinsvc -p bootstrapper
if [[ " ${kinds[*]} " == *" vm "* ]]; then
  cargo build --locked --release --target x86_64-unknown-linux-musl \
    -p bootstrapper -p joinsvc -p confboot-cli
fi

run() {
  local title="$1" package="$2" test="$3"
  step "$title"
  local log="target/faults/$test.log"
  local start=$SECONDS
  CONFBOOT_FAULTS=all cargo test --locked -p "$package" --test "$test" -- --nocapture \
    2>&1 | tee "$log"
  {
    printf '\n## %s\n\n`CONFBOOT_FAULTS=all cargo test -p %s --test %s -- --nocapture` (%d s)\n\n' \
      "$title" "$package" "$test" $((SECONDS - start))
    grep '^|' "$log"
  } >>"$out"
}

for kind in "${kinds[@]}"; do
  case "$kind" in
    process) run "A node process killed at every step of its first boot" bootstrapper faults ;;
    joinsvc) run "Faults on the join service's side" bootstrapper joinsvc_faults ;;
    vm) run "A node VM powered off at every step of its first boot" confboot-tests vm_faults ;;
    *) echo "unknown kind '$kind' (process, joinsvc, vm)" >&2; exit 2 ;;
  esac
done
step "matrices: $out"
cat "$out"
