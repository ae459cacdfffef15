#!/usr/bin/env bash
# The host as a test actor (tests/tests/host_actor.rs): the host's moves
# (header fields and tokens edited, disks rolled back or swapped, the node
# killed, connections dropped, delayed, trickled, replayed, reordered or
# relayed, the host's own join service, Init and Recover, a spoofed name,
# joinsvc's ledger objects deleted, restored from an old copy or churned)
# applied at every step of the init, join, rejoin and recover flows of
# real bootstrapper processes (swtpm, LUKS2 disk image files, a real
# joinsvc, the real CLI), and the host's own TDX and SEV-SNP guests (the
# test issuers, in the test process) against a real joinsvc and the real
# confboot init and recover, each (move, step) judged REFUSED, CONVERGED,
# STOPPED or FAILURE. The tables, with the commit they were measured on,
# go to target/host-actor/<commit>.md; a whole campaign's also to
# target/host-actor/results.md (a run log, never committed: RELIABILITY.md
# keeps the summary table).
#
# Usage: scripts/host_actor.sh [--short]   (--short: the suite's selection)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

mode=all
case "${1:-}" in
  "") ;;
  --short) mode=short ;;
  *) echo "usage: scripts/host_actor.sh [--short]" >&2; exit 2 ;;
esac

commit="$(git rev-parse --short HEAD)"
dirty=""
git diff --quiet HEAD || dirty=" (with uncommitted changes)"
mkdir -p target/host-actor
out="target/host-actor/$commit.md"
log="target/host-actor/$commit.log"
tables="target/host-actor/$commit.tables"

printf '\n== builds\n'
cargo build --locked -p bootstrapper -p joinsvc -p confboot-cli

printf '\n== the campaign (%s)\n' "$mode"
start=$SECONDS
status=0
CONFBOOT_HOST_ACTOR="$mode" CONFBOOT_HOST_ACTOR_REPORT="$PWD/$tables" \
  cargo test --locked -p confboot-tests --test host_actor -- --nocapture \
  2>&1 | tee "$log" || status=$?
{
  printf '# The host as a test actor at commit %s%s, %s\n\n' \
    "$commit" "$dirty" "$(date -u +%Y-%m-%dT%H:%MZ)"
  printf '`CONFBOOT_HOST_ACTOR=%s cargo test -p confboot-tests --test host_actor -- --nocapture` (%d s)\n\n' \
    "$mode" $((SECONDS - start))
  cat "$tables" 2>/dev/null || echo "(no tables: the run failed before the end; see $log)"
} >"$out"
[ "$mode" = all ] && cp "$out" target/host-actor/results.md
printf '\n== tables: %s\n' "$out"
head -20 "$out"
exit "$status"
