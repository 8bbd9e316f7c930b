#!/usr/bin/env bash
# analyzer_speed.sh BUILD_DIR [ITERS] [WORK_DIR]: the analyzer's speed and memory budget (docs/PERFORMANCE.md).
#
# Records two traces of the same workload with st-synth in immediate mode (2 ranks, one deferred_records event
# per call): a short one with ITERS writes per rank (default 300000) and one 10x longer. Then,
# side by side in one run (interleaved, 3 rounds, median):
#   - time of `babeltrace2 TRACE -c sink.utils.dummy` (decoding only) vs `sigmatrace-analyze TRACE --quiet`
#     (decoding + reconstruction + statistics + report) on the short and the long trace: the ratio must be
#     <= 1.5;
#   - peak RSS of sigmatrace-analyze on the long trace vs the short one: within 10%.
# Needs root (records inside tests/support/sandbox.sh --lttng) and /usr/bin/time.
set -euo pipefail
build=$(cd "$1" && pwd); iters=${2:-300000}; work=${3:-$(mktemp -d /tmp/analyzer-bench.XXXXXX)}
root=$(cd "$(dirname "$0")/../.." && pwd)
synth=$build/stage/libexec/sigmatrace/st-synth
analyze=$build/stage/bin/sigmatrace-analyze
[[ -x /usr/bin/time ]] || { echo "analyzer_speed.sh: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
record() {
  "$root/tests/support/sandbox.sh" --lttng "$root/tests/analyzer/record_synth.sh" "$work/$1" --subbuf 4M --num-subbuf 8 \
    -- "$synth" bench --ranks 2 --iters "$2" >/dev/null
}
[[ -d $work/short ]] || record short "$iters"
[[ -d $work/long ]] || record long $((iters * 10))
# measure CMD...: prints "seconds max_rss_kib"
measure() { /usr/bin/time -f "%e %M" -o "$work/time.out" "$@" >/dev/null 2>&1; cat "$work/time.out"; }
median() { sort -n | sed -n 2p; }
declare -A t rss
for trace in short long; do
  : >"$work/$trace.dummy"; : >"$work/$trace.ours"; : >"$work/$trace.rss"
  for round in 1 2 3; do
    read -r s _ < <(measure babeltrace2 "$work/$trace" -c sink.utils.dummy)
    echo "$s" >>"$work/$trace.dummy"
    read -r s m < <(measure "$analyze" "$work/$trace" --quiet --json "$work/$trace.json")
    echo "$s" >>"$work/$trace.ours"
    echo "$m" >>"$work/$trace.rss"
  done
  t[$trace.dummy]=$(median <"$work/$trace.dummy")
  t[$trace.ours]=$(median <"$work/$trace.ours")
  rss[$trace]=$(median <"$work/$trace.rss")
done
# trace.events of an analysis document (the first "events" key after "trace": {).
events() { awk '/^  "trace": \{/ { t = 1 } t && /"events":/ { gsub(/[^0-9]/, ""); print; exit }' "$work/$1.json"; }
printf '%-6s %12s %14s %14s %8s %12s %12s\n' trace events dummy_s analyze_s ratio analyze_Mev/s peak_rss_MiB
for trace in short long; do
  ev=$(events "$trace")
  awk -v tr="$trace" -v ev="$ev" -v d="${t[$trace.dummy]}" -v o="${t[$trace.ours]}" -v m="${rss[$trace]}" \
    'BEGIN { printf "%-6s %12d %14.2f %14.2f %8.2f %12.2f %12.1f\n", tr, ev, d, o, o / d, ev / o / 1e6, m / 1024 }'
done
awk -v a="${rss[short]}" -v b="${rss[long]}" 'BEGIN { printf "peak RSS long/short: %.3f\n", b / a }'
echo "traces and outputs: $work"
