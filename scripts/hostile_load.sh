#!/usr/bin/env bash
# Hostile-load campaign: honest nodes join the static joinsvc while hostile
# clients attack it on loopback, and the bootstrapper's Init and recovery
# servers answer the admin under the same attack
# (tests/benches/hostile_load.rs says what each phase and attack does).
#
#   scripts/hostile_load.sh [--seconds S]   (each phase S seconds, default 15)
#   scripts/hostile_load.sh --short          (3 s phases: a smoke run)
#   scripts/hostile_load.sh --pause MS       (each looping attacker waits MS
#                                             between attempts, default 20: a
#                                             larger pause, a smaller attack)
#
# Builds the static musl release binaries it drives, runs the benchmark,
# and appends one line of figures to tests/benches/hostile_load.tsv: date,
# commit (with "-dirty" if the tree differs from it), cores, phase length,
# honest tickets/s without and with the attack and their ratio, failed
# honest joins, joinsvc's CPU per ticket without and with, its peak RSS
# (VmHWM) and open file descriptors, the attack's connections, closes and
# bytes, tickets hostile clients got (must be 0), and the admin's calls to
# the Init and recovery servers under attack (answered/asked, median and
# slowest in ms), joinsvc's CPU on the attack, and honest tickets/s and
# their ratio under the connection-level attack alone, and the pause. The
# CI version is tests/tests/hostile_load.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

seconds=15
pause=20
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --short) seconds=3; shift ;;
        --pause)
            pause="$2"; shift 2
            [[ "$pause" =~ ^[0-9]+$ ]] && [ "$pause" -ge 1 ] || {
                echo "hostile_load.sh: --pause takes milliseconds (a whole number ≥ 1)" >&2
                exit 2
            } ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        *) echo "hostile_load.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

bash scripts/setup.sh >/dev/null
cargo build --release --target x86_64-unknown-linux-musl \
    -p bootstrapper -p joinsvc -p confboot-cli

results=tests/benches/hostile_load.tsv
commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- . ":!$results" || commit="$commit-dirty"

CONFBOOT_HOSTILE_SECONDS="$seconds" \
CONFBOOT_HOSTILE_PAUSE_MS="$pause" \
CONFBOOT_HOSTILE_RESULTS="$PWD/$results" \
CONFBOOT_COMMIT="$commit" \
    cargo bench -p confboot-tests --bench hostile_load
