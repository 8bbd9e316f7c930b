#!/usr/bin/env bash
# sqlite_cost.sh BUILD_DIR [ITERS] [WORK_DIR]: what --sqlite costs the analyzer (docs/PERFORMANCE.md, "Analyzer").
#
# Records st-synth in immediate mode (2 ranks, ITERS writes per rank, default 1000000), then, side by side in
# one run (interleaved, ROUNDS rounds, default 5; medians): wall time, CPU time (user + system) and peak RSS of
# `sigmatrace-analyze TRACE --quiet --json OUT` without and with `--sqlite DB`, and the operations per second of
# each (per wall second and per CPU second). WORK_DIR/trace, when it exists, is analyzed instead of a new recording.
# Needs root (records inside tests/support/sandbox.sh --lttng) and /usr/bin/time.
set -euo pipefail
build=$(cd "$1" && pwd); iters=${2:-1000000}; work=${3:-$(mktemp -d /tmp/analyzer-sqlite.XXXXXX)}
root=$(cd "$(dirname "$0")/../.." && pwd)
synth=$build/stage/libexec/sigmatrace/st-synth
analyze=$build/stage/bin/sigmatrace-analyze
[[ -x /usr/bin/time ]] || { echo "sqlite_cost.sh: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
if [[ ! -d $work/trace ]]; then
  "$root/tests/support/sandbox.sh" --lttng "$root/tests/analyzer/record_synth.sh" "$work/trace" --subbuf 4M --num-subbuf 8 \
    -- "$synth" bench --ranks 2 --iters "$iters" >/dev/null
fi
# wall seconds, CPU seconds (user + system) and peak RSS (KiB) of one analysis
measure() {
  /usr/bin/time -f "%e %U %S %M" -o "$work/time.out" "$analyze" "$work/trace" --quiet "$@" >/dev/null 2>&1
  awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$work/time.out"
}
: >"$work/without"; : >"$work/with"
rounds=${ROUNDS:-5}
for ((round = 0; round < rounds; ++round)); do
  measure --json "$work/without.json" >>"$work/without"
  rm -f "$work/ops.db"
  measure --json "$work/with.json" --sqlite "$work/ops.db" >>"$work/with"
done
median() { sort -n -k"$1","$1" | sed -n "$(( (rounds + 1) / 2 ))p" | cut -d' ' -f"$1"; }
ops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ops"]["total"])' "$work/with.json")
echo "operations: $ops, database: $(du -m "$work/ops.db" | cut -f1) MiB"
printf '%-10s %8s %8s %14s %14s %10s\n' analysis wall_s cpu_s ops_per_wall_s ops_per_cpu_s rss_MiB
for v in without with; do
  w=$(median 1 <"$work/$v"); c=$(median 2 <"$work/$v"); m=$(median 3 <"$work/$v")
  awk -v v="$v" -v w="$w" -v c="$c" -v m="$m" -v o="$ops" \
    'BEGIN { printf "%-10s %8.2f %8.2f %14.0f %14.0f %10.1f\n", (v == "with" ? "--sqlite" : "without"), w, c, o / w, o / c, m / 1024 }'
done
echo "trace and outputs: $work"
