#!/usr/bin/env bash
# windows_cost.sh BUILD_DIR [ITERS] [WORK_DIR]: what the timeline windows, the outstanding-work tracking and the
# phases cost the analyzer (docs/PERFORMANCE.md, "Analyzer"; budget: 20% over the analysis without them).
#
# Records st-synth in immediate mode (2 ranks, ITERS writes per rank, default 1000000), then, side by side in
# one run (interleaved, ROUNDS rounds, default 9; medians and minimums: on a shared machine the minimum is the
# least disturbed run): user CPU time of `sigmatrace-analyze TRACE --quiet --json OUT` with the windows and the
# phases (the default), with `--phase-split off` (windows only) and with `--window off --phase-split off`. WORK_DIR/trace, when it exists, is analyzed instead of a new recording.
# Needs root (records inside tests/support/sandbox.sh --lttng) and /usr/bin/time.
set -euo pipefail
build=$(cd "$1" && pwd); iters=${2:-1000000}; work=${3:-$(mktemp -d /tmp/analyzer-windows.XXXXXX)}
root=$(cd "$(dirname "$0")/../.." && pwd)
synth=$build/stage/libexec/sigmatrace/st-synth
analyze=$build/stage/bin/sigmatrace-analyze
[[ -x /usr/bin/time ]] || { echo "windows_cost.sh: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
if [[ ! -d $work/trace ]]; then
  "$root/tests/support/sandbox.sh" --lttng "$root/tests/analyzer/record_synth.sh" "$work/trace" --subbuf 4M --num-subbuf 8 \
    -- "$synth" bench --ranks 2 --iters "$iters" >/dev/null
fi
# user CPU seconds and peak RSS (KiB) of one analysis
measure() { /usr/bin/time -f "%U %M" -o "$work/time.out" "$analyze" "$work/trace" --quiet "$@" >/dev/null 2>&1; cat "$work/time.out"; }
: >"$work/with"; : >"$work/without"; : >"$work/windows"
rounds=${ROUNDS:-9}
for ((round = 0; round < rounds; ++round)); do
  measure --json "$work/with.json" >>"$work/with"
  measure --phase-split off --json "$work/windows.json" >>"$work/windows"
  measure --window off --phase-split off --json "$work/without.json" >>"$work/without"
done
median() { sort -n -k1,1 | sed -n "$(( (rounds + 1) / 2 ))p"; }
minimum() { sort -n -k1,1 | head -1 | cut -d' ' -f1; }
read -r with_s with_rss < <(median <"$work/with")
read -r without_s without_rss < <(median <"$work/without")
read -r windows_s windows_rss < <(median <"$work/windows")
with_min=$(minimum <"$work/with"); without_min=$(minimum <"$work/without"); windows_min=$(minimum <"$work/windows")
ops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ops"]["total"])' "$work/with.json" 2>/dev/null || echo "?")
echo "operations: $ops"
printf '%-16s %14s %11s %14s\n' analysis median_user_s min_user_s peak_rss_MiB
awk -v s="$without_s" -v n="$without_min" -v m="$without_rss" 'BEGIN { printf "%-16s %14.2f %11.2f %14.1f\n", "neither", s, n, m / 1024 }'
awk -v s="$windows_s" -v n="$windows_min" -v m="$windows_rss" 'BEGIN { printf "%-16s %14.2f %11.2f %14.1f\n", "windows", s, n, m / 1024 }'
awk -v s="$with_s" -v n="$with_min" -v m="$with_rss" 'BEGIN { printf "%-16s %14.2f %11.2f %14.1f\n", "windows+phases", s, n, m / 1024 }'
awk -v a="$windows_s" -v b="$without_s" -v c="$windows_min" -v d="$without_min" \
  'BEGIN { printf "cost of the windows: %+.1f%% (medians), %+.1f%% (minimums)\n", (a / b - 1) * 100, (c / d - 1) * 100 }'
awk -v a="$with_s" -v b="$without_s" -v c="$with_min" -v d="$without_min" \
  'BEGIN { printf "cost of the windows and phases: %+.1f%% (medians), %+.1f%% (minimums)\n", (a / b - 1) * 100, (c / d - 1) * 100 }'
echo "trace and outputs: $work"
