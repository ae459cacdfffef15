#!/usr/bin/env bash
# The whole test suite: formatting, lints, static release builds, every test.
# --quick: the contributor's tier, the same without the static release
# builds (minutes of LTO) and the test targets that need them or boot QEMU;
# it names every target it leaves out.
#
# Where the Kubernetes parts are not cached yet, scripts/kubernetes.sh builds
# them beside the Rust builds (its log: target/kubernetes-build.log); the
# tests wait for it. The tests then run in two lanes at once: the QEMU VM
# test binaries one after another (each VM is one emulated CPU), and every
# other test binary; each line on the terminal names its lane, and each
# lane's output is kept whole in target/test-output-<lane>.txt.
set -euo pipefail
quick=false
case "${1:-}" in
  "") ;;
  --quick) quick=true ;;
  -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2 && exit 2 ;;
esac
cd "$(dirname "$0")/.."
bash scripts/setup.sh --without-kubernetes
export PATH="$HOME/.cargo/bin:$PATH"
mkdir -p target
start=$(date +%s)

step() { printf '\n== [%ds] %s\n' "$(($(date +%s) - start))" "$*"; }

# The Kubernetes parts, in their own process group so that an early failure
# (formatting, a lint) stops the Go build with it.
kube_pid=""
stop_kubernetes() { [ -z "$kube_pid" ] || kill -- "-$kube_pid" 2>/dev/null || true; }
trap stop_kubernetes EXIT
if ! bash scripts/kubernetes.sh --print >/dev/null 2>&1; then
  step "building the Kubernetes parts beside the Rust builds (target/kubernetes-build.log)"
  setsid bash scripts/kubernetes.sh >target/kubernetes-build.log 2>&1 &
  kube_pid=$!
fi
wait_kubernetes() {
  [ -n "$kube_pid" ] || return 0
  step "waiting for the Kubernetes parts"
  while kill -0 "$kube_pid" 2>/dev/null; do
    sleep 30
    tail -n 1 target/kubernetes-build.log
  done
  if ! wait "$kube_pid"; then
    kube_pid=""
    tail -n 30 target/kubernetes-build.log
    echo "the Kubernetes parts did not build: target/kubernetes-build.log" >&2
    exit 1
  fi
  kube_pid=""
  bash scripts/kubernetes.sh --print >/dev/null
}

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

step "cargo test: building the tests"
# Every test executable `cargo test --workspace` runs, as cargo built them
# (one build, so one feature set): lane, package directory, executable, name.
cargo test --locked --workspace --no-run --message-format=json-render-diagnostics |
  python3 -c '
import json, os, re, sys
quick = sys.argv[1] == "true"
vm = re.compile(r"^(boot|vm_.*)$")
plan = []
needs_release = {"static_binaries", "deploy_manifests", "relay", "hostile_load", "join_storm"}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    t = m["target"]
    name = t["name"]
    kind = t["kind"][0]
    lane = "rest"
    if m["manifest_path"].endswith("/tests/Cargo.toml") and kind == "test":
        if vm.match(name):
            lane = "left" if quick else "vm"
        elif name in needs_release and quick:
            lane = "left"
    label = "%s (%s %s)" % (os.path.relpath(t["src_path"]), kind, name)
    plan.append((lane, label, os.path.dirname(m["manifest_path"]), m["executable"]))
for lane, label, pkg_dir, exe in sorted(plan):
    print("\t".join([lane, pkg_dir, exe, label]))
' "$quick" >target/test-plan.txt
wait_kubernetes
if $quick; then
  echo "quick tier: NOT running $(awk -F'\t' '$1 == "left" { printf "%s ", $4 }' target/test-plan.txt)(run scripts/test.sh for them)"
fi

# Runs one lane's test executables one after another, in their package's
# directory as cargo does, every one whatever the others gave; its output
# is kept in target/test-output-LANE.txt and shown with the lane's name.
# Fails if any of them failed.
lane() {
  local name=$1 out="target/test-output-$1.txt"
  : >"$out"
  (
    failed=0
    while IFS=$'\t' read -r l dir exe label; do
      [ "$l" = "$name" ] || continue
      printf '     Running %s\n' "$label" >>"$out"
      t0=$(date +%s)
      (cd "$dir" && "$exe") >>"$out" 2>&1 || { failed=1; echo "FAILED: $label" >>"$out"; }
      printf '%6ds  %-4s  %s\n' "$(($(date +%s) - t0))" "$name" "$label" >>target/test-times.txt
    done <target/test-plan.txt
    if [ "$name" = rest ]; then
      # Documentation tests, which rustdoc builds as it runs them.
      cargo test --locked --workspace --doc >>"$out" 2>&1 || { failed=1; echo "FAILED: doc tests" >>"$out"; }
    fi
    exit "$failed"
  ) &
  local pid=$!
  tail -n +1 -f --pid="$pid" "$out" | sed -u "s/^/$name | /"
  wait "$pid"
}

: >target/test-times.txt
lanes=(rest)
if grep -q '^vm' target/test-plan.txt; then
  lanes+=(vm)
  step "cargo test: the QEMU VM tests (lane vm) beside every other test (lane rest)"
else
  step "cargo test"
fi
lane rest &
rest=$!
vm_ok=0
if [ "${#lanes[@]}" -gt 1 ]; then lane vm || vm_ok=1; fi
rest_ok=0
wait "$rest" || rest_ok=1

# One closing line for the whole run.
for l in "${lanes[@]}"; do cat "target/test-output-$l.txt"; done >target/test-output.txt
step "done; the longest test binaries (all in target/test-times.txt):"
sort -rn target/test-times.txt | head -n 12
awk '/^test result:/ { p += $4; f += $6 } END { printf "\n%d passed, %d failed\n", p, f }' target/test-output.txt
[ "$rest_ok" -eq 0 ] && [ "$vm_ok" -eq 0 ]
