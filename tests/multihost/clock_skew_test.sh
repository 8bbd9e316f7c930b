#!/usr/bin/env bash
# clock_skew_test.sh SIGMATRACE: the fabric's injected host clocks (`clock` statements, an LTTng-UST clock
# plugin per node: src/softfabric/clock/) reach the trace, and shared times across hosts are then wrong.
# 4 hosts x 2 fabric nodes run st-alltoall's barrier with rank 7 (h3) late by 4 ms, once with true clocks and once
# with h1 +2 ms (+50 ppm), h2 -2 ms (-50 ppm), h3 -3 ms. True clocks: spread 4 ms, straggler rank 7. Skewed,
# as recorded: every rank's arrival moves by its host's offset, so the spread is 5 ms (h1's +2 against h3's -3)
# and the straggler is a rank of h1 — what an analysis without clock alignment reports.
# Runs inside tests/support/sandbox.sh, as root; exits 77 (skip) when what it needs is missing.
set -uo pipefail
sigmatrace=$(realpath "$1")
bindir=$(dirname "$sigmatrace")
analyze=$bindir/sigmatrace-analyze
alltoall=$(dirname "$bindir")/libexec/sigmatrace/st-alltoall
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 && ${SIGMATRACE_SANDBOXED:-0} == 1 ]] || skip "needs root inside tests/support/sandbox.sh (namespaces)"
for tool in ip nsenter unshare mpirun lttng-sessiond python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[[ -x $alltoall ]] || skip "st-alltoall is not built (no MPI development files)"

source "$here/../support/hosts.sh"
work=$(mktemp -d /tmp/sigmatrace-clock-test.XXXXXX)
trap 'hosts_down; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
hosts_up 4 || fail "cannot set up the hosts"

late_ms=4
cat >"$work/skewed.conf" <<'CONF'
clock node2 offset 2ms drift 50ppm
clock node3 offset 2ms drift 50ppm
clock node4 offset -2ms drift -50ppm
clock node5 offset -2ms drift -50ppm
clock node6 offset -3ms
clock node7 offset -3ms
CONF
: >"$work/true.conf"

for run in true skewed; do
  hosts_mpirun h0 --host h0:2,h1:2,h2:2,h3:2 -np 8 "$sigmatrace" record -o "$work/$run" -- \
    "$sigmatrace" fabric --node rank --config "$work/$run.conf" -- \
    "$alltoall" --iters 2 --epochs 12 --late-ms "$late_ms" >"$work/$run.out" 2>&1 \
    || fail "the $run-clock run failed: $(cat "$work/$run.out")"
  "$analyze" "$work/$run" --json "$work/$run.json" >"$work/$run.txt" 2>&1 \
    || fail "analysis of the $run-clock run: $(cat "$work/$run.txt")"
done

python3 - "$work/true.json" "$work/skewed.json" "$late_ms" <<'PY' || fail "the injected clocks do not show as designed"
import json, sys
true, skewed = (json.load(open(p)) for p in sys.argv[1:3])
late_ns = float(sys.argv[3]) * 1e6
bad = []
def spread(d): return d["barriers"]["spread_ns"]["p50"]
def straggler(d): return d["barriers"]["stragglers"][0]["rank"] if d["barriers"]["stragglers"] else None
if abs(spread(true) - late_ns) > 0.10 * late_ns: bad.append(f"true clocks: spread {spread(true)} ns, expected ~{late_ns:.0f}")
if straggler(true) != 7: bad.append(f"true clocks: straggler {straggler(true)}, expected 7")
# Skewed: rank 7 seen 3 ms early (+4 - 3 = +1 ms), h1's ranks 2 ms late, h2's 2 ms early, h3's rank 6 3 ms early.
want = late_ns + 1e6   # h1's +2 ms against h3's rank 6 at -3 ms
if abs(spread(skewed) - want) > 0.10 * late_ns: bad.append(f"skewed clocks: spread {spread(skewed)} ns, expected ~{want:.0f}")
if straggler(skewed) not in (2, 3): bad.append(f"skewed clocks: straggler {straggler(skewed)}, expected a rank of h1 (2 or 3)")
for name, d in (("true", true), ("skewed", skewed)):
    if d["trace"]["discarded_events"] != 0 or d["trace"]["read_problems"]:
        bad.append(f"{name}: the trace is not clean: {d['trace']['read_problems']}")
for b in bad: print(b, file=sys.stderr)
print(f"true clocks: spread p50 {spread(true) / 1e6:.2f} ms, straggler rank {straggler(true)}; "
      f"skewed as recorded: {spread(skewed) / 1e6:.2f} ms, rank {straggler(skewed)}")
sys.exit(1 if bad else 0)
PY
echo "PASS: injected clocks move the barrier spread from ${late_ms} ms to $((late_ms + 1)) ms and the straggler off rank 7"
