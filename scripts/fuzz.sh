#!/usr/bin/env bash
# Fuzzing campaign: cargo-fuzz (libFuzzer) over the targets of
# fuzz-targets/ (listed in fuzz/fuzz_targets/), one target at a time, one job.
#
#   scripts/fuzz.sh [options] [TARGET...]      (no TARGET: every target)
#
#   --runs N        executions per target (default 10000000)
#   --seconds S     run each target S seconds instead of a number of runs
#   --short         a smoke run: 20 seconds per target
#   --rss-mb M      libFuzzer's RSS limit (default 512; under a sanitizer also
#                   its limit on one allocation)
#   --max-len N     largest input (default 16384 bytes)
#   --sanitizer S   none (default: confboot is Rust without unsafe, and an
#                   uninstrumented run is faster) or address (AddressSanitizer)
#   --cmin          afterwards, add to fuzz/corpus/TARGET the fewest inputs
#                   of the working corpus that reach every edge it reaches,
#                   if the corpus stays within --cmin-max files (default 40:
#                   the repository stays lean)
#   --list          print the targets and exit
#
# Needs: rustup's nightly toolchain (installed if missing) and cargo-fuzz
# (`cargo install cargo-fuzz --locked` if missing).
#
# Inputs libFuzzer finds go to fuzz/corpus-new/TARGET (not committed; later
# runs start from it too, as well as from fuzz/corpus/TARGET and
# fuzz/regressions/TARGET). A crash stops that target's run and is kept as
# fuzz/artifacts/TARGET/crash-*: reproduce it with
#   fuzz/target/x86_64-unknown-linux-gnu/release/TARGET fuzz/artifacts/TARGET/crash-...
# or on stable through the target's function; fix the code, then keep the
# input as fuzz/regressions/TARGET/NAME so the test suite replays it
# (fuzz-targets/tests/corpus_replay.rs).
#
# Every run appends one line to fuzz/results.tsv: date, commit (with
# "-dirty" if the tree differs from it), target, sanitizer, executions,
# exec/s, seconds, working corpus size (inputs), coverage (edges), features,
# crashes, peak RSS in MB.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

runs=10000000
seconds=""
rss_mb=512
max_len=16384
sanitizer=none
cmin=0
cmin_max=40
targets=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; seconds=""; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --short) seconds=20; shift ;;
    --rss-mb) rss_mb="$2"; shift 2 ;;
    --max-len) max_len="$2"; shift 2 ;;
    --sanitizer) sanitizer="$2"; shift 2 ;;
    --cmin) cmin=1; shift ;;
    --cmin-max) cmin_max="$2"; shift 2 ;;
    --list) ls fuzz/fuzz_targets | sed 's/\.rs$//'; exit 0 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(ls fuzz/fuzz_targets | sed 's/\.rs$//')
fi
for t in "${targets[@]}"; do
  [ -f "fuzz/fuzz_targets/$t.rs" ] || { echo "fuzz.sh: no target $t (see --list)" >&2; exit 2; }
done

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "fuzz.sh: installing the nightly toolchain"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

echo "fuzz.sh: building ${#targets[@]} target(s) (sanitizer $sanitizer, debug assertions on)"
one=()
[ "${#targets[@]}" -eq 1 ] && one=("${targets[0]}")
(cd fuzz && cargo +nightly fuzz build --sanitizer "$sanitizer" --debug-assertions "${one[@]}")
bin_dir=fuzz/target/x86_64-unknown-linux-gnu/release

commit=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- . ':!fuzz/results.tsv' || commit="$commit-dirty"
results=fuzz/results.tsv
[ -f "$results" ] || printf 'date\tcommit\ttarget\tsanitizer\texecutions\texec_per_s\tseconds\tcorpus\tcoverage\tfeatures\tcrashes\tpeak_rss_mb\n' > "$results"

if [ -n "$seconds" ]; then
  budget=(-max_total_time="$seconds")
else
  budget=(-runs="$runs")
fi

status=0
for t in "${targets[@]}"; do
  work=fuzz/corpus-new/$t
  artifacts=fuzz/artifacts/$t
  log=fuzz/artifacts/$t.log
  mkdir -p "$work" "$artifacts" "fuzz/corpus/$t"
  dirs=("$work" "fuzz/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  crashes_before=$(find "$artifacts" -type f | wc -l)
  echo "fuzz.sh: $t (${budget[*]}, rss $rss_mb MB, max_len $max_len)"
  start=$(date +%s)
  set +e
  "$bin_dir/$t" "${dirs[@]}" "${budget[@]}" \
    -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb" -max_len="$max_len" -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  elapsed=$(( $(date +%s) - start ))
  stat() { grep -m1 "^stat::$1:" "$log" | awk '{print $2}'; }
  execs=$(stat number_of_executed_units)
  if [ -z "$execs" ]; then
    # A crash ends the run before the final statistics: take the last status line.
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  fi
  execs=${execs:-0}
  per_s=$(stat average_exec_per_sec)
  [ -n "$per_s" ] || per_s=$(( elapsed > 0 ? execs / elapsed : execs ))
  rss=$(stat peak_rss_mb)
  last=$(grep -E '^#[0-9]+.*cov:' "$log" | tail -1 || true)
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$last")
  corpus=$(find "$work" -type f | wc -l)
  crashes=$(( $(find "$artifacts" -type f | wc -l) - crashes_before ))
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$(date -u +%FT%TZ)" "$commit" "$t" "$sanitizer" "$execs" "$per_s" "$elapsed" \
    "$corpus" "${cov:-?}" "${ft:-?}" "$crashes" "${rss:-?}" >> "$results"
  echo "fuzz.sh: $t: $execs executions, $per_s/s, ${elapsed}s, corpus $corpus, cov ${cov:-?}, crashes $crashes"
  if [ "$crashes" -gt 0 ]; then
    status=1
    echo "fuzz.sh: $t FOUND A CRASH (exit $rc): see $log and $artifacts/" >&2
    grep -m5 -E 'panicked|ERROR|SUMMARY' "$log" >&2 || true
  fi

  if [ "$cmin" -eq 1 ] && [ "$crashes" -eq 0 ]; then
    # The fewest inputs that reach every edge the corpora reach (hit
    # counts and comparison features aside: those keep hundreds).
    merged=$(mktemp -d)
    "$bin_dir/$t" -set_cover_merge=1 -use_counters=0 -use_cmp=0 -use_value_profile=0 \
      "$merged" "fuzz/corpus/$t" "$work" -max_len="$max_len" -rss_limit_mb="$rss_mb" \
      -timeout=10 >"fuzz/artifacts/$t.cmin.log" 2>&1
    # The seeds stay (they reach the deep checks by construction); the
    # other inputs are named by their SHA-1, as libFuzzer names them.
    new=()
    for f in "$merged"/*; do
      [ -f "$f" ] || continue
      seen=0
      for c in "fuzz/corpus/$t"/*; do
        if [ -f "$c" ] && cmp -s "$c" "$f"; then seen=1; break; fi
      done
      [ "$seen" -eq 1 ] || new+=("$f")
    done
    n=$(( $(find "fuzz/corpus/$t" -type f | wc -l) + ${#new[@]} ))
    if [ "$n" -le "$cmin_max" ]; then
      [ "${#new[@]}" -eq 0 ] || cp "${new[@]}" "fuzz/corpus/$t/"
      echo "fuzz.sh: $t: fuzz/corpus/$t has $n inputs (${#new[@]} new)"
    else
      echo "fuzz.sh: $t: with the edges the campaign reached it would have $n inputs (over $cmin_max): left as it is"
    fi
    rm -rf "$merged"
  fi
done
exit "$status"
