#!/usr/bin/env bash
# perftest_overhead.sh [BUILD_DIR] [ROUNDS]: perftest on the software fabric, traced vs untraced, in one run.
#
# Each round runs, back to back, ib_write_bw (64 KiB) untraced and traced, and ib_send_lat untraced and traced
# ("traced" = under `sigmatrace record`, both sides), alternating which goes first; server and client are
# pinned to CPUs 0 and 1 (RUN_PAIR_PIN=0 to let them float). Reported: the median
# over rounds of ib_write_bw's average bandwidth and of ib_send_lat's typical (median) latency, and the
# traced/untraced ratios with goals (bandwidth >= 0.98, latency <= 1.05; docs/PERFORMANCE.md), both as the ratio of
# those medians and as the median of each round's ratio (the robust one: see round_ratios below); and, with no
# goal, ib_send_lat's minimum latency (t_min) untraced and traced.
#
# BW_ITERS (default 200000) and LAT_ITERS (default 20000) set the iterations. ib_write_bw reports the average
# over its transfer window, which is ~0.12 s at 20,000 64 KiB WRITEs here: one disturbance of a few ms (a
# daemon's wake-up, the hypervisor) moves a run by several percent. 200,000 WRITEs (~1.2 s) halve the spread of
# single runs (docs/PERFORMANCE.md, "perftest on the fabric, traced vs untraced").
#
# Runs itself inside tests/support/sandbox.sh (private network namespace for port 18515, private /dev/shm).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-5}
if [[ ${SIGMATRACE_SANDBOXED:-0} != 1 ]]; then
  exec "$here/tests/support/sandbox.sh" "$0" "$build" "$rounds"
fi
sigmatrace=$build/stage/bin/sigmatrace
pair=$here/tests/interpose/support/run_pair.sh
# shellcheck source=bench/interpose/stats.sh
source "$here/bench/interpose/stats.sh"
work=$(mktemp -d /tmp/perftest-overhead.XXXXXX)
trap 'rm -rf "$work"' EXIT

export RUN_PAIR_PIN=${RUN_PAIR_PIN:-1}  # server on CPU 0, client on CPU 1
bw_iters=${BW_ITERS:-200000}
lat_iters=${LAT_ITERS:-20000}

# run TAG traced|plain PROGRAM ARGS...: prints the client's output file
run() {
  local tag=$1 mode=$2; shift 2
  local out=$work/$tag
  if [[ $mode == traced ]]; then
    "$sigmatrace" record -o "$work/$tag.trace" -- "$pair" "$sigmatrace" "$tag" "$out" -- "$@" >"$work/$tag.log" 2>&1
    grep -q 'discarded events: 0' "$work/$tag.log" || { echo "events were discarded in $tag:" >&2; cat "$work/$tag.log" >&2; }
    rm -rf "$work/$tag.trace"
  else
    "$pair" "$sigmatrace" "$tag" "$out" -- "$@" >"$work/$tag.log" 2>&1
  fi || { echo "$tag failed:" >&2; cat "$out"/*.out >&2; exit 1; }
  echo "$out/client.out"
}

# The result line of perftest follows the header line that starts with " #bytes" (bw_of: stats.sh).
lat_of() { awk '/^ *#bytes/ { getline; print $5; exit }' "$1"; }      # t_typical[usec] (median)
min_of() { awk '/^ *#bytes/ { getline; print $3; exit }' "$1"; }      # t_min[usec]

: >"$work/bw_plain"; : >"$work/bw_traced"; : >"$work/lat_plain"; : >"$work/lat_traced"
: >"$work/min_plain"; : >"$work/min_traced"
for r in $(seq "$rounds"); do
  # Odd rounds run the untraced program first, even rounds the traced one: drift cancels out.
  order=(plain traced)
  (( r % 2 == 0 )) && order=(traced plain)
  for mode in "${order[@]}"; do
    bw_of "$(run "bw-$mode$r" "$mode" ib_write_bw -d sfab_0 -s 65536 -n "$bw_iters")" >>"$work/bw_$mode"
  done
  for mode in "${order[@]}"; do
    out=$(run "lat-$mode$r" "$mode" ib_send_lat -d sfab_0 -n "$lat_iters")
    lat_of "$out" >>"$work/lat_$mode"
    min_of "$out" >>"$work/min_$mode"
  done
  echo "round $r: write_bw MB/s $(tail -1 "$work/bw_plain") untraced, $(tail -1 "$work/bw_traced") traced;" \
       "send_lat us $(tail -1 "$work/lat_plain") untraced, $(tail -1 "$work/lat_traced") traced"
done
bp=$(median <"$work/bw_plain"); bt=$(median <"$work/bw_traced")
lp=$(median <"$work/lat_plain"); lt=$(median <"$work/lat_traced")
# Each round's traced/untraced ratio (the two runs are back to back): the fabric's latency has two levels that
# change between runs minutes apart (docs/PERFORMANCE.md), and a ratio within a round cancels that drift where a
# ratio of medians over all rounds does not.
round_ratios() { paste "$1" "$2" | awk '{ printf "%.4f\n", $2 / $1 }'; }
bw_ratios=$(round_ratios "$work/bw_plain" "$work/bw_traced")
lat_ratios=$(round_ratios "$work/lat_plain" "$work/lat_traced")
echo
echo "ib_write_bw 64 KiB, $bw_iters iterations, median of $rounds: untraced $bp MB/s, traced $bt MB/s," \
     "ratio of medians $(awk -v a="$bt" -v b="$bp" 'BEGIN { printf "%.3f", a / b }');" \
     "median of per-round ratios $(median <<<"$bw_ratios" | awk '{ printf "%.3f", $1 }') ($(range <<<"$bw_ratios")," \
     "mean $(mean <<<"$bw_ratios")) (goal >= 0.98)"
echo "ib_send_lat, $lat_iters iterations, median of $rounds: untraced $lp us, traced $lt us," \
     "ratio of medians $(awk -v a="$lt" -v b="$lp" 'BEGIN { printf "%.3f", a / b }');" \
     "median of per-round ratios $(median <<<"$lat_ratios" | awk '{ printf "%.3f", $1 }') ($(range <<<"$lat_ratios")," \
     "mean $(mean <<<"$lat_ratios")) (goal <= 1.05)"
# The minimum latency has no goal. It is a second view of the tracer's cost on every message's path: the median
# also moves with how many messages of a run arrive during a drain or a preemption, the minimum does not.
min_diffs=$(paste "$work/min_plain" "$work/min_traced" | awk '{ printf "%.0f\n", ($2 - $1) * 1000 }')
echo "ib_send_lat minimum latency (no goal), median of $rounds: untraced $(median <"$work/min_plain") us," \
     "traced $(median <"$work/min_traced") us; median of per-round differences $(median <<<"$min_diffs") ns" \
     "($(range <<<"$min_diffs" | sed 's/\.000//g') ns), median of per-round ratios" \
     "$(round_ratios "$work/min_plain" "$work/min_traced" | median | awk '{ printf "%.3f", $1 }')"
