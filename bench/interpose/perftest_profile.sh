#!/usr/bin/env bash
# perftest_profile.sh [BUILD_DIR] [ROUNDS]: how much of a traced ib_write_bw client's CPU the tracer takes while
# it moves data, measured by sampling — an attribution that the fabric's run-to-run noise does not drown.
#
# Why: the traced/untraced ratios of perftest_overhead.sh scatter by ±5-10% from one run to the next on a shared VM
# (the fabric's send is a process_vm_writev system call whose speed drifts between runs), which is more than
# the tracer's whole cost. This script runs the traced program only, with the client under
# `perf record -e cpu-clock` (a software clock: no hardware counters needed), and counts, between the client's
# first and last sample inside the fabric's send (the transfer window: set-up and teardown left out), the
# samples in libsigmatrace and liblttng-ust (the data-path captures and the deferred emission). ib_write_bw
# with 64 KiB WRITEs is bound by the client's CPU, which copies every byte inside the send (it polls a CQ
# that is never empty for long): the bandwidth the tracer costs is its share of that CPU, so 1 - share is the
# expected traced/untraced ratio. Not for ib_send_lat: its client spends the round trip polling, and a
# sample in the poll wrapper while nothing has arrived costs the message nothing.
# It does not see what tracing does to other code's speed (caches): perftest_overhead.sh and
# fabric_pingpong.sh measure the whole effect.
#
# BW_ITERS (default 150000) sets the iterations; KEEP=1 keeps the work directory (perf data, client output).
# Needs `perf` (linux-perf) and root (the sandbox, and kernel symbols in the samples); runs itself inside
# tests/support/sandbox.sh like perftest_overhead.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-3}
command -v perf >/dev/null || { echo "perftest_profile.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
if [[ ${SIGMATRACE_SANDBOXED:-0} != 1 ]]; then
  exec "$here/tests/support/sandbox.sh" "$0" "$build" "$rounds"
fi
sigmatrace=$build/stage/bin/sigmatrace
pair=$here/tests/interpose/support/run_pair.sh
work=$(mktemp -d /tmp/perftest-profile.XXXXXX)
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$work"' EXIT
export RUN_PAIR_PIN=${RUN_PAIR_PIN:-1}  # server on CPU 0, client on CPU 1
bw_iters=${BW_ITERS:-150000}

# The program run_pair.sh starts on both nodes: the client (its last argument is the server's host) under perf.
cat >"$work/sampled.sh" <<'EOF'
#!/usr/bin/env bash
data=$1; shift
[[ ${*: -1} == localhost ]] || exec "$@"
exec perf record -q -F 4999 -e cpu-clock -o "$data" "$@"
EOF
chmod +x "$work/sampled.sh"

# share DATA ITERS: "<tracer %> <window s> <tracer ns per iteration>" over the transfer window; fails (exit 3)
# when no sample of the client fell inside the fabric's send.
share() {
  perf script -i "$1" -F comm,time,ip,sym,dso 2>/dev/null | awk -v iters="$2" '
    {
      t = $2; sub(":", "", t); dso = $NF
      n++; time[n] = t; tracer[n] = (dso ~ /libsigmatrace|liblttng-ust/)
      if ($0 ~ / process_vm_rw_core/) { if (first == 0) first = t; last = t }
    }
    END {
      if (first == 0) exit 3
      for (i = 1; i <= n; i++) if (time[i] >= first && time[i] <= last) { in_window++; traced += tracer[i] }
      s = traced / in_window; w = last - first
      printf "%.2f %.3f %.1f\n", 100 * s, w, s * w * 1e9 / iters
    }'
}

# run TAG RESULT_FIELD ITERS PROGRAM...: one traced run; writes "<result> <share line>" to $work/TAG.result.
# Runs in the script's own shell, so a failure ends the script.
run() {
  local tag=$1 result=$2 iters=$3; shift 3
  "$sigmatrace" record -o "$work/$tag.trace" -- "$pair" "$sigmatrace" "$tag" "$work/$tag" -- \
    "$work/sampled.sh" "$work/$tag.perf" "$@" >"$work/$tag.log" 2>&1 ||
    { echo "$tag failed:" >&2; cat "$work/$tag.log" "$work/$tag"/*.out >&2; exit 1; }
  grep -q 'discarded events: 0' "$work/$tag.log" || echo "warning: events were discarded in $tag" >&2
  rm -rf "$work/$tag.trace"
  local value shares
  value=$(awk "/^ *#bytes/ { getline; print $result; exit }" "$work/$tag/client.out")
  [[ -n $value ]] ||
    { echo "$tag: no result line in the client's output:" >&2; cat "$work/$tag/client.out" >&2; exit 1; }
  shares=$(share "$work/$tag.perf" "$iters") || {
    echo "$tag: no sample of the client inside process_vm_rw_core (the fabric's send): perf cannot see kernel" \
         "symbols (run as root, or lower kernel.kptr_restrict and kernel.perf_event_paranoid)" >&2
    exit 1
  }
  echo "$value $shares" >"$work/$tag.result"
}

: >"$work/shares"
for r in $(seq "$rounds"); do
  run "bw$r" '$4' "$bw_iters" ib_write_bw -d sfab_0 -s 65536 -n "$bw_iters"
  read -r bw pct win ns <"$work/bw$r.result"
  echo "$pct" >>"$work/shares"
  echo "round $r: ib_write_bw $bw MB/s; tracer $pct% of the client's CPU over a ${win} s transfer window," \
       "$ns ns per 64 KiB WRITE"
done
sort -g "$work/shares" | awk '{ v[NR] = $1 } END {
  m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "\nmedian of %d: tracer %.2f%% of the client CPU (%.2f..%.2f)", NR, m, v[1], v[NR]
  printf " -> expected bandwidth ratio %.3f (goal >= 0.98)\n", 1 - m / 100 }'
