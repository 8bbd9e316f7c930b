#!/usr/bin/env bash
# clock_skew_test.sh SIGMATRACE: the fabric's injected host clocks (`clock` statements, an LTTng-UST clock
# plugin per node: src/softfabric/clock/) reach the trace, and shared times across hosts are then wrong.
# 4 hosts x 2 fabric nodes run st-alltoall's barrier with rank 7 (h3) late by 4 ms, once with true clocks and once
# with h1 +2 ms (+50 ppm), h2 -2 ms (-50 ppm), h3 -3 ms. True clocks: spread 4 ms, straggler rank 7. Skewed,
# as recorded: every rank's arrival moves by its host's offset, so the spread is 5 ms (h1's +2 against h3's -3)
# and the straggler is a rank of h1 — what an analysis without clock alignment reports.
# The alltoall uses only one-sided operations, which order nothing across hosts: clock.hosts[] must say every host
# but the reference is unconstrained rather than guess. Then ib_send_lat between h0 (node0) and h1 (node2, +2 ms,
# +50 ppm): its messages bound the skew both ways, and clock.hosts[] must give h1's offset at the trace's start
# (2 ms + 50 ppm x the time since the plugin's epoch, the fabric's start) within 5 us, inside
# its stated uncertainty, and its drift within 2 ppm.
# Runs inside tests/support/sandbox.sh, as root; exits 77 (skip) when what it needs is missing.
tools="ib_send_lat"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

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
for h in skewed["clock"]["hosts"]:
    want = "reference" if h["host"] == skewed["clock"]["reference"] else "unconstrained"
    if h["status"] != want or (want == "unconstrained" and h["offset_ns"] is not None):
        bad.append(f"one-sided traffic only, yet host {h['host']}: {h}")
for b in bad: print(b, file=sys.stderr)
print(f"true clocks: spread p50 {spread(true) / 1e6:.2f} ms, straggler rank {straggler(true)}; "
      f"skewed as recorded: {spread(skewed) / 1e6:.2f} ms, rank {straggler(skewed)}")
sys.exit(1 if bad else 0)
PY
# Messages both ways: the skew is recovered.
printf 'clock node2 offset 2ms drift 50ppm\n' >"$work/lat.conf"
host_run h1 "$sigmatrace" record -o "$work/lat/h1" -- "$sigmatrace" fabric --node 2 --config "$work/lat.conf" -- \
  bash -c "echo \$SOFTFABRIC_CLOCK_EPOCH_NS >$work/epoch; exec timeout 60 ib_send_lat -d sfab_0 -n 20000" \
  >"$work/lat.h1.out" 2>&1 &
server=$!
# Ready once it listens on perftest's port (18515 = 0x4853; state 0A = LISTEN). A probe connection would be taken
# for its client.
for _ in $(seq 200); do
  host_run h1 cat /proc/net/tcp | grep -q ":4853 00000000:0000 0A" && break
  sleep 0.05
done
host_run h0 "$sigmatrace" record -o "$work/lat/h0" -- "$sigmatrace" fabric --node 0 --config "$work/lat.conf" -- \
  timeout 60 ib_send_lat -d sfab_0 -n 20000 10.231.0.2 >"$work/lat.h0.out" 2>&1 || fail "ib_send_lat client: $(cat "$work/lat.h0.out")"
wait "$server" || fail "ib_send_lat server: $(cat "$work/lat.h1.out")"
# The plugin's epoch (the fabric's start, CLOCK_MONOTONIC), as h1's process got it: the injected drift counts from it.
real_minus_mono=$(python3 -c "import time; print(time.time_ns() - time.monotonic_ns())")
"$analyze" "$work/lat" --json "$work/lat.json" >"$work/lat.txt" 2>&1 || fail "analysis of ib_send_lat: $(cat "$work/lat.txt")"
python3 - "$work/lat.json" "$(cat "$work/epoch")" "$real_minus_mono" <<'PY' || fail "the skew is not recovered: $(grep -A4 ^Clocks "$work/lat.txt")"
import json, sys
doc = json.load(open(sys.argv[1]))
epoch = int(sys.argv[2])
t0 = doc["clock"]["at_ns"] - int(sys.argv[3])
want = 2e6 + 50e-6 * (t0 - epoch)
hosts = {h["host"]: h for h in doc["clock"]["hosts"]}
h1, bad = hosts["h1"], []
if doc["clock"]["reference"] != "h0" or hosts["h0"]["status"] != "reference": bad.append(f"reference: {doc['clock']}")
if h1["status"] != "estimated": bad.append(f"h1: {h1}")
else:
    err = h1["offset_ns"] - want
    if abs(err) > 5000 or abs(err) > h1["uncertainty_ns"] + 1000:
        bad.append(f"h1 offset {h1['offset_ns']} ns +- {h1['uncertainty_ns']}, injected {want:.0f}: off by {err:.0f} ns")
    if abs(h1["drift_ppm"] - 50) > 2: bad.append(f"h1 drift {h1['drift_ppm']} ppm, injected 50")
for b in bad: print(b, file=sys.stderr)
print(f"h1 recovered: {h1['offset_ns']} ns +- {h1['uncertainty_ns']} (injected {want:.0f}), drift {h1['drift_ppm']} ppm")
sys.exit(1 if bad else 0)
PY
echo "PASS: injected clocks move the barrier spread from ${late_ms} ms to $((late_ms + 1)) ms and the straggler off rank 7"
