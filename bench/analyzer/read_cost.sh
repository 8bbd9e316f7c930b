#!/usr/bin/env bash
# read_cost.sh BASE_BUILD_DIR NEW_BUILD_DIR [ITERS] [WORK_DIR]: what the reading path's checks cost on a good
# trace (docs/PERFORMANCE.md, "Reading damaged traces"). Records one st-synth trace (2 ranks, ITERS writes per
# rank, default 300000), then measures the CPU time of `sigmatrace-analyze TRACE --quiet --json` of both builds interleaved
# (7 rounds, medians; NEW also with SIGMATRACE_ANALYZE_STALL_S=0, the precheck without the guarded child), and
# checks that both builds write the same JSON.
set -euo pipefail
base=$(cd "$1" && pwd); new=$(cd "$2" && pwd); iters=${3:-300000}; work=${4:-$(mktemp -d /tmp/read-cost.XXXXXX)}
root=$(cd "$(dirname "$0")/../.." && pwd)
[[ -x /usr/bin/time ]] || { echo "read_cost.sh: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
[[ -d $work/trace ]] || "$root/tests/support/sandbox.sh" --lttng "$root/tests/analyzer/record_synth.sh" "$work/trace" \
  --subbuf 4M --num-subbuf 8 -- "$new/stage/libexec/sigmatrace/st-synth" bench --ranks 2 --iters "$iters" >/dev/null
# CPU seconds (user + system, children included): the machine is shared, and CPU time moves less with its load.
measure() { /usr/bin/time -f "%U %S" -o "$work/time.out" "$@" >/dev/null 2>&1; awk '{print $1 + $2}' "$work/time.out"; }
median() { sort -n | sed -n 4p; }
: >"$work/base"; : >"$work/new"; : >"$work/new0"
for round in 1 2 3 4 5 6 7; do
  measure "$base/stage/bin/sigmatrace-analyze" "$work/trace" --quiet --json "$work/base.json" >>"$work/base"
  measure "$new/stage/bin/sigmatrace-analyze" "$work/trace" --quiet --json "$work/new.json" >>"$work/new"
  measure env SIGMATRACE_ANALYZE_STALL_S=0 "$new/stage/bin/sigmatrace-analyze" "$work/trace" --quiet --json \
    "$work/new0.json" >>"$work/new0"
done
b=$(median <"$work/base"); n=$(median <"$work/new"); n0=$(median <"$work/new0")
same=identical; cmp -s "$work/base.json" "$work/new.json" || same=DIFFERENT
echo "events $(grep -m1 '"events"' "$work/new.json" | tr -dc 0-9)  base ${b}s  new ${n}s (ratio $(echo "scale=3; $n / $b" | bc))  new unguarded ${n0}s (ratio $(echo "scale=3; $n0 / $b" | bc))  JSON $same"
