#!/usr/bin/env bash
# Join storm: distinct nodes (real swtpm quotes) join through three joinsvc
# replicas sharing one master secret (tests/benches/join_storm.rs says what
# it measures); then one replica with --workers 1 and 2.
#
#   scripts/join_storm.sh [--nodes N] [--tpms N] [--concurrency N]
#
# Defaults: 1000 nodes, 32 swtpms, 64 joining at once. Builds the static
# joinsvc it drives and prints the tables. The CI version is
# tests/tests/join_storm.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) export CONFBOOT_STORM_NODES="$2"; shift 2 ;;
        --tpms) export CONFBOOT_STORM_TPMS="$2"; shift 2 ;;
        --concurrency) export CONFBOOT_STORM_CONCURRENCY="$2"; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "join_storm.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
cargo build --release --target x86_64-unknown-linux-musl -p joinsvc
cargo bench -p confboot-tests --bench join_storm
