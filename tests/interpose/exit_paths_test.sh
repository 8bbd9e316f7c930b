#!/usr/bin/env bash
# exit_paths_test.sh SIGMATRACE ANALYZE EXIT_PATHS: every record a traced process captured reaches the trace,
# however the process ends (docs/interpose.md, "Exit paths"). For each way out, one recorded run of
# programs/exit_paths on the software fabric, checked three ways: the RDMA WRITEs the analyzer counts equal the
# program's own count and the fabric's (`sigmatrace fabric --stats`, the operations it executed), as do their
# bytes, and the trace says it is complete. Then SIGKILL at seeded random points of a program that writes
# until killed (`sigmatrace fabric` execs it: same pid): analyzer == fabric, within the one WRITE that may be inside ibv_post_send when the kill lands.
# Runs inside tests/support/sandbox.sh --lttng (one session daemon for every recording).
set -uo pipefail
sigmatrace=$1 analyze=$2 program=$3
work=$(mktemp -d /tmp/interpose-exit-paths.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
writes=50
ulimit -c 0  # abort mode: no core file
bytes=4096

# "WRITES BYTES COMPLETE COMPLETIONS" from the analysis; "OPS BYTES" over every link of the fabric.
analyzed() {
  "$analyze" "$1" --json - 2>"$1.analyze.err" | python3 -c '
import json, sys
d = json.load(sys.stdin)
w = d["ops"]["by_opcode"].get("RDMA_WRITE", {})
print(w.get("count", 0), w.get("bytes", 0), str(d["trace"]["complete"]).lower(), d["trace"].get("lost_records", 0))'
}
fabric_counts() {
  "$sigmatrace" fabric --stats --json --name "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(l["ops"] for l in d["links"]), sum(l["bytes"] for l in d["links"]))'
}

run_mode() {  # MODE: a recorded run that ends that way; checks the counts
  local mode=$1 name=ep-${1//_/-} trace=$work/$1
  "$sigmatrace" record -o "$trace" -- "$sigmatrace" fabric --name "$name" -- "$program" "$mode" "$writes" \
    >"$work/$mode.log" 2>&1
  grep -q "sigmatrace record: discarded events: 0" "$work/$mode.log" || { fail "$mode: record"; cat "$work/$mode.log"; return; }
  read -r fops fbytes < <(fabric_counts "$name")
  read -r aops abytes complete lost < <(analyzed "$trace")
  [[ $fops == "$writes" ]] || fail "$mode: the fabric executed $fops WRITEs, the program $writes"
  [[ $aops == "$fops" && $abytes == "$fbytes" ]] \
    || { fail "$mode: the trace has $aops WRITEs ($abytes B), the fabric executed $fops ($fbytes B)"; cat "$work/$mode.log"; }
  [[ $complete == true && $lost == 0 ]] || fail "$mode: complete=$complete lost_records=$lost"
  echo "$mode: trace $aops WRITEs $abytes B, fabric $fops $fbytes B, complete=$complete"
}

for mode in return exit quick_exit thread exec abort _exit sigkill; do run_mode "$mode"; done

# Counters mode: a process that returns from main or calls exit() with its QP alive still has its final counts
# in the trace (posted WRs and bytes equal to the fabric's).
for mode in return exit; do
  name=ep-counters-$mode trace=$work/counters-$mode
  "$sigmatrace" record --mode counters -o "$trace" -- "$sigmatrace" fabric --name "$name" -- "$program" "$mode" \
    "$writes" >"$work/counters-$mode.log" 2>&1
  read -r fops fbytes < <(fabric_counts "$name")
  read -r cwrs cbytes < <("$analyze" "$trace" --json - 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin).get("counters", {})
print(c.get("posted_wrs", 0), c.get("posted_bytes", 0))')
  [[ $cwrs == "$fops" && $cbytes == "$fbytes" && $fops == "$writes" ]] \
    || { fail "counters mode, $mode: the counters say $cwrs WRs ($cbytes B), the fabric executed $fops ($fbytes B)"; cat "$work/counters-$mode.log"; }
  echo "counters mode, $mode: counters $cwrs WRs $cbytes B, fabric $fops $fbytes B"
done

# SIGKILL at seeded random points of a program writing in a loop.
RANDOM=25
for k in 1 2 3; do
  name=ep-kill-$k trace=$work/kill-$k
  delay_ms=$((20 + RANDOM % 100))
  "$sigmatrace" record -o "$trace" -- sh -c '
    "$1" fabric --name "$2" -- "$3" forever 0 >"$4.out" 2>&1 &
    pid=$!
    for _ in $(seq 200); do grep -q running "$4.out" 2>/dev/null && break; sleep 0.05; done
    sleep "$5"; kill -KILL "$pid"; wait "$pid"; exit 0' \
    sh "$sigmatrace" "$name" "$program" "$work/kill-$k" "0.$(printf %03d "$delay_ms")" >"$work/kill-$k.log" 2>&1
  read -r fops fbytes < <(fabric_counts "$name")
  read -r aops abytes complete lost < <(analyzed "$trace")
  diff=$((fops - aops))
  if (( fops < 10 || diff < -1 || diff > 1 )); then
    fail "SIGKILL after ${delay_ms} ms: the trace has $aops WRITEs, the fabric executed $fops"; cat "$work/kill-$k.log"
  fi
  [[ $lost == 0 || $complete == false ]] || fail "SIGKILL after ${delay_ms} ms: $lost records lost but complete=$complete"
  echo "SIGKILL after ${delay_ms} ms: trace $aops WRITEs, fabric $fops, lost $lost, complete=$complete"
done
[[ $status == 0 ]] && echo "all checks passed"
exit $status
