#!/usr/bin/env bash
# perftest_toggle.sh [BUILD_DIR] [RUNS]: what recording costs ib_write_bw (64 KiB), measured inside one run: the
# session's events are disabled and enabled in turn while the program moves data, and the fabric's byte counter
# gives the bandwidth of each phase.
#
# Why: traced and untraced runs are different processes, and on a shared VM a process's bandwidth depends on the
# process itself by ±5-10% (two untraced pairs run side by side, each on its own CPU, differ by that much:
# perftest_concurrent.sh CONTROL=1), so a traced/untraced ratio needs many rounds to say anything at the 1%
# level (docs/PERFORMANCE.md). Within one process that variation is gone: phases a few seconds apart share
# its memory, its buffers' pages and the host's mood.
#
# What is compared: phases with the session's events enabled (recording every WR and completion, as
# `sigmatrace record` does) against phases with them disabled (`lttng disable-event`: libsigmatrace.so's
# wrappers are installed and test the tracepoints' state, nothing is captured or emitted), in one process traced
# by `sigmatrace record`. That is the cost of recording, not of the preload: a session recording nothing
# measured 0.998-1.003 of untraced (docs/PERFORMANCE.md, "perftest on the fabric, traced vs untraced").
#
# Each run: ib_write_bw -n BW_ITERS (default 4,000,000 WRITEs, ~30 s) pinned as in perftest_overhead.sh; once the
# transfer has begun, phases of PHASE_S seconds (default 1.5) alternate, on/off in odd pairs and off/on in even
# ones, each after SETTLE_S (default 0.3 s: the change reaches the program through its lttng-ust listener
# thread) and measured by two readings of `sigmatrace fabric --stats` (the link's bytes) and the clock. The ratio
# of a pair's two phases is one sample (a pair the transfer did not outlast is left out); the script prints every
# pair's ratio and their median, mean and range.
#
# CONTROL=1 leaves the events disabled in both kinds of phases (the ratio should be 1).
#
# Runs itself inside tests/support/sandbox.sh --lttng (a session daemon of its own, which `record` then uses
# and this script can reach with `lttng`).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
runs=${2:-3}
if [[ ${SIGMATRACE_SANDBOXED:-0} != 1 ]]; then
  exec "$here/tests/support/sandbox.sh" --lttng "$0" "$build" "$runs"
fi
command -v lttng >/dev/null || { echo "perftest_toggle.sh: needs lttng (lttng-tools)" >&2; exit 2; }
sigmatrace=$build/stage/bin/sigmatrace
pair=$here/tests/interpose/support/run_pair.sh
# shellcheck source=bench/interpose/stats.sh
source "$here/bench/interpose/stats.sh"
work=$(mktemp -d /tmp/perftest-toggle.XXXXXX)
trap 'rm -rf "$work"' EXIT
export RUN_PAIR_PIN=${RUN_PAIR_PIN:-1}  # server on CPU 0, client on CPU 1
iters=${BW_ITERS:-4000000}
phase_s=${PHASE_S:-1.5}
settle_s=${SETTLE_S:-0.3}

# "<ns> <bytes>": the clock in the middle of one read of the fabric's counters (all links); "0 0" when the fabric
# cannot be read (not there yet, or gone), which every caller treats as no progress.
sample() {
  local t0 t1 json
  t0=$(date +%s%N)
  json=$("$sigmatrace" fabric --stats --json --name "$1" 2>/dev/null) || { echo "0 0"; return 0; }
  t1=$(date +%s%N)
  awk -v t=$(( (t0 + t1) / 2 )) '{ while (match($0, /"bytes": [0-9]+/)) { s += substr($0, RSTART + 9, RLENGTH - 9); $0 = substr($0, RSTART + RLENGTH) } }
       END { printf "%.0f %.0f\n", t, s }' <<<"$json"  # %d would clip at 2^31 in mawk
}
# events on|off for session $1 (CONTROL=1: always off, so that both kinds of phases are the same state: the
# method's own bias and scatter)
events() {
  if [[ $2 == on && ${CONTROL:-0} != 1 ]]; then
    lttng enable-event --userspace --session="$1" --channel=sigmatrace 'sigmatrace:*' >/dev/null 2>&1 || true  # already in that state: fine
  else
    lttng disable-event --userspace --session="$1" --channel=sigmatrace 'sigmatrace:*' >/dev/null 2>&1 || true  # already in that state: fine
  fi
}

: >"$work/ratios"
for run in $(seq "$runs"); do
  name=toggle$run
  "$sigmatrace" record -o "$work/t$run.trace" -- "$pair" "$sigmatrace" "$name" "$work/o$run" -- \
    ib_write_bw -d sfab_0 -s 65536 -n "$iters" >"$work/r$run.log" 2>&1 &
  recorder=$!
  # The transfer has begun when the link has carried a few MB.
  for _ in $(seq 600); do
    read -r _ b < <(sample "$name")
    (( b > 100000000 )) && break
    sleep 0.05
  done
  session=$(lttng list 2>/dev/null | awk '/^ *[0-9]+\) / { print $2; exit }')
  [[ -n $session ]] || { echo "perftest_toggle.sh: no session found" >&2; kill "$recorder"; exit 1; }
  p=0
  while kill -0 "$recorder" 2>/dev/null; do
    p=$((p + 1))
    order=(on off)
    (( p % 2 == 0 )) && order=(off on)
    declare -A rate=()
    for state in "${order[@]}"; do
      events "$session" "$state"
      sleep "$settle_s"
      read -r ta ba < <(sample "$name")
      sleep "$phase_s"
      read -r tb bb < <(sample "$name")
      # A phase is kept only if the transfer ran all through it (the program still moving data at its end).
      if (( bb <= ba )); then rate=(); break; fi
      rate[$state]=$(awk -v db=$((bb - ba)) -v dt=$((tb - ta)) 'BEGIN { printf "%.1f", db / dt * 1000 }')  # MB/s
      last=$bb
    done
    [[ -n ${rate[on]:-} && -n ${rate[off]:-} ]] || break
    # The transfer must outlast the pair: one that ended inside its last phase would make that phase look slow.
    sleep 0.2
    read -r _ bc < <(sample "$name")
    (( bc > last )) || break
    ratio=$(awk -v a="${rate[on]}" -v b="${rate[off]}" 'BEGIN { printf "%.4f", a / b }')
    echo "$ratio" >>"$work/ratios"
    echo "run $run pair $p (${order[*]}): recording ${rate[on]} MB/s, not recording ${rate[off]} MB/s, ratio $ratio"
  done
  events "$session" on 2>/dev/null || true
  wait "$recorder" || { echo "run $run failed:" >&2; cat "$work/r$run.log" "$work/o$run"/*.out >&2; exit 1; }
  echo "run $run: ib_write_bw's own average over the whole run (both kinds of phases): $(bw_of "$work/o$run/client.out") MB/s"
  rm -rf "$work/t$run.trace"
done
n=$(wc -l <"$work/ratios")
echo
echo "ib_write_bw 64 KiB, recording / not recording within one run, $n phase pairs over $runs runs: median ratio" \
     "$(median <"$work/ratios" | awk '{ printf "%.4f", $1 }') ($(range <"$work/ratios"), mean $(mean <"$work/ratios"))"
