#!/usr/bin/env bash
# record_test.sh SIGMATRACE: `sigmatrace record` as a command: exit statuses, refusals that keep the command
# from running untraced, the report it prints, and the daemon it uses. Runs inside tests/support/sandbox.sh;
# with --lttng (a daemon is running) it checks that record uses that daemon and leaves it clean.
set -uo pipefail
sigmatrace=$1
work=$(mktemp -d /tmp/interpose-record.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
user_daemon=0
lttng list >/dev/null 2>&1 && user_daemon=1

# 1. The command's exit status, the report, a readable trace with the process_info of the process that used
#    RDMA (ibv_devinfo on the software fabric) and of no other (the shell, the `sigmatrace fabric` front end:
#    tracing starts at a process's first RDMA use).
"$sigmatrace" record -o "$work/t1" -- sh -c "\"$sigmatrace\" fabric -- ibv_devinfo >/dev/null; exit 5" 2>"$work/t1.err"; rc=$?
[[ $rc == 5 ]] || fail "exit status $rc, expected 5"
grep -q "sigmatrace record: trace: $work/t1" "$work/t1.err" || fail "no trace path in: $(cat "$work/t1.err")"
grep -q "sigmatrace record: discarded events: 0" "$work/t1.err" || fail "no discarded count in: $(cat "$work/t1.err")"
grep -q "sigmatrace record: traced processes: 1$" "$work/t1.err" || fail "not 1 traced process: $(cat "$work/t1.err")"
infos=$(babeltrace2 "$work/t1" 2>/dev/null | grep 'sigmatrace:process_info')
grep -q 'procname = "ibv_devinfo"' <<<"$infos" || fail "no process_info of ibv_devinfo in the trace"
[[ $(grep -c . <<<"$infos") == 1 ]] || fail "processes without RDMA are in the trace: $infos"

# 1b. A command that never uses RDMA: an empty trace, said plainly, and the command's status.
"$sigmatrace" record -o "$work/t1b" -- sh -c 'exit 3' 2>"$work/t1b.err"; rc=$?
[[ $rc == 3 ]] || fail "exit status $rc, expected 3"
grep -q "note: the trace is empty: no process of the command used RDMA" "$work/t1b.err" \
  || fail "no note about the empty trace: $(cat "$work/t1b.err")"
grep -q "error" "$work/t1b.err" && fail "an error reported for a command without RDMA: $(cat "$work/t1b.err")"

# 1c. A process that uses RDMA but cannot be traced (its provider library cannot be loaded) is reported by
#     record, and says so itself; the command still runs and keeps its status.
SIGMATRACE_PROVIDER=/nonexistent/libsigmatrace-lttng.so \
  "$sigmatrace" record -o "$work/t1c" -- "$sigmatrace" fabric -- ibv_devinfo >/dev/null 2>"$work/t1c.err"; rc=$?
[[ $rc == 0 ]] || fail "untraceable ibv_devinfo: status $rc, expected 0"
grep -q "a process used RDMA but is NOT in the trace: pid=[0-9]* comm=ibv_devinfo reason=provider: dlopen(/nonexistent/libsigmatrace-lttng.so)" "$work/t1c.err" \
  || fail "record did not report the untraced process: $(cat "$work/t1c.err")"
grep -q "sigmatrace: cannot load the LTTng provider" "$work/t1c.err" \
  || fail "the process did not say it is not traced: $(cat "$work/t1c.err")"

# 2. Killed by a signal: 128 + signal, like a shell.
"$sigmatrace" record -o "$work/t2" -- sh -c 'kill -TERM $$' 2>/dev/null; rc=$?
[[ $rc == 143 ]] || fail "killed command: status $rc, expected 143"

# 3. A command that does not exist: 127 and a message naming it.
"$sigmatrace" record -o "$work/t3" -- /nonexistent/program 2>"$work/t3.err"; rc=$?
[[ $rc == 127 ]] || fail "missing command: status $rc, expected 127"
grep -q "cannot run /nonexistent/program" "$work/t3.err" || fail "no message for the missing command: $(cat "$work/t3.err")"
grep -q "the trace is empty: the command did not start" "$work/t3.err" && ! grep -q "cannot be preloaded" "$work/t3.err" \
  || fail "the missing command's empty trace is explained as a preload problem: $(cat "$work/t3.err")"
# Nothing was recorded, so the directory this recording created is gone (and said so); one the user made stays.
[[ ! -e $work/t3 ]] || fail "the directory of a recording whose command did not start was left behind"
grep -q "its directory $work/t3 was removed" "$work/t3.err" || fail "the removal is not said: $(cat "$work/t3.err")"
mkdir "$work/t3b"
"$sigmatrace" record -o "$work/t3b" -- /nonexistent/program 2>"$work/t3b.err"; rc=$?
[[ $rc == 127 && -d $work/t3b ]] || fail "the user's own empty directory: status $rc (expected 127), or it was removed"
grep -q "trace: $work/t3b" "$work/t3b.err" || fail "the user's directory is not named: $(cat "$work/t3b.err")"

# 4. A non-empty output directory is refused before anything runs.
mkdir -p "$work/t4" && touch "$work/t4/old"
"$sigmatrace" record -o "$work/t4" -- touch "$work/ran" 2>"$work/t4.err"; rc=$?
[[ $rc == 2 ]] || fail "non-empty output: status $rc, expected 2"
[[ ! -e $work/ran ]] || fail "the command ran although the recording was refused"
grep -q "not an empty directory" "$work/t4.err" || fail "no reason given: $(cat "$work/t4.err")"

# 5. Usage errors.
"$sigmatrace" record 2>/dev/null; [[ $? == 2 ]] || fail "no command: expected status 2"
"$sigmatrace" record --help | grep -q "usage: sigmatrace record" || fail "--help prints no usage"

# 6. Counters mode reaches the traced processes.
"$sigmatrace" record --mode counters -o "$work/t6" -- "$sigmatrace" fabric -- ibv_devinfo >/dev/null 2>&1 \
  || fail "--mode counters run failed"
babeltrace2 "$work/t6" 2>/dev/null | grep -q 'process_info.*mode = 1' || fail "process_info does not say counters mode"

# 7. With a daemon already running (sandbox --lttng), record uses it and leaves no session behind.
if [[ $user_daemon == 1 ]]; then
  sessions=$(lttng list 2>/dev/null | grep -c 'sigmatrace-' || true)
  [[ $sessions == 0 ]] || fail "record left $sessions session(s) on the user's daemon"
  lttng list >/dev/null 2>&1 || fail "the user's daemon is gone after record"
fi
# 8. --relay: the trace goes to an lttng-relayd (here, one on this sandbox's loopback).
if command -v lttng-relayd >/dev/null; then
  mkdir -p "$work/relay"
  lttng-relayd --output="$work/relay" >/dev/null 2>&1 &
  relayd=$!
  for _ in $(seq 100); do
    awk '$4 == "0A" && substr($2, length($2) - 4) == ":14DF" { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6 && break
    sleep 0.05
  done
  "$sigmatrace" record --relay net://localhost -- "$sigmatrace" fabric -- ibv_devinfo >/dev/null 2>"$work/t8.err" \
    || fail "--relay run failed: $(cat "$work/t8.err")"
  grep -q "trace sent to the relay at net://localhost" "$work/t8.err" || fail "no relay report: $(cat "$work/t8.err")"
  kill "$relayd"
  wait "$relayd" 2>/dev/null
  meta=$(find "$work/relay" -name metadata | head -1)
  [[ -n $meta ]] && babeltrace2 "$(dirname "$meta")" 2>/dev/null | grep -q 'process_info.*procname = "ibv_devinfo"' \
    || fail "the relay received no trace of ibv_devinfo"
fi
[[ $status == 0 ]] && echo "all checks passed (user daemon: $user_daemon)"
exit $status
