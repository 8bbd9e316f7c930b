#!/usr/bin/env bash
# stalled_buffer_test.sh SIGMATRACE ANALYZE STALL_WRITER: a traced process that dies between reserving and committing
# an event (tests/interpose/programs/stall_writer.cpp) stalls its CPU's per-uid sub-buffer; `sigmatrace record`
# recovers every event written before it (tools/record/crash_recovery.h), does not wait for the stream at
# destroy, and leaves no recovered/ directory when nothing was stalled. Runs inside tests/support/sandbox.sh
# --lttng.
set -uo pipefail
sigmatrace=$1 analyze=$2 program=$3
work=$(mktemp -d /tmp/stalled-buffer.XXXXXX)
trap 'rm -rf "$work"' EXIT
ulimit -c 0
status=0
fail() { echo "FAILED: $*"; status=1; }
events=500

count() {  # events stall_writer wrote, as a CTF reader reads the whole trace directory
  babeltrace2 "$1" 2>"$1.bt.err" | grep -c 'procname = "stall_writer"'
}

for mode in crash exit; do
  start=$SECONDS
  # One CPU: the crash stalls the buffer every event of the run went to.
  "$sigmatrace" record -o "$work/$mode" -- taskset -c 0 "$program" "$events" "$mode" >"$work/$mode.log" 2>&1
  took=$((SECONDS - start))
  got=$(count "$work/$mode")
  echo "$mode: $got events in the trace, record took ${took} s"
  [[ $got == "$events" ]] || { fail "$mode: $got events in the trace, the program wrote $events"; cat "$work/$mode.log" "$work/$mode.bt.err"; }
  (( took < 15 )) || fail "$mode: record took $took s (waited for a stream that cannot be delivered?)"
  if [[ $mode == crash ]]; then
    grep -q "recovered 1 packet(s)" "$work/$mode.log" || { fail "crash: record did not say it recovered a packet"; cat "$work/$mode.log"; }
    [[ -d $work/$mode/recovered ]] || fail "crash: no recovered/ directory"
    grep -q "did not finish within" "$work/$mode.log" && fail "crash: lttng destroy waited for the stalled stream"
    # The analyzer reads the recovered packets (their end times patched) with the rest, and no stream is
    # reported truncated (the main trace's empty file of that CPU is gone).
    analyzed=$("$analyze" "$work/$mode" --json - 2>"$work/analyze.err" | python3 -c 'import json, sys; print(json.load(sys.stdin)["trace"]["events"])')
    [[ $analyzed == "$events" ]] || { fail "crash: the analyzer read $analyzed events, expected $events"; cat "$work/analyze.err"; }
    grep -q "Stream file\|Skipped" "$work/analyze.err" && { fail "crash: the analyzer reports damage"; cat "$work/analyze.err"; }
  else
    [[ -e $work/$mode/recovered ]] && fail "exit: a recovered/ directory when nothing was stalled"
    grep -q recovered "$work/$mode.log" && fail "exit: record says it recovered something"
  fi
done
[[ $status == 0 ]] && echo "all checks passed"
exit $status
