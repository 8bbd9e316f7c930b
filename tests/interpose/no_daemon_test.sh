#!/usr/bin/env bash
# no_daemon_test.sh SIGMATRACE LIBSIGMATRACE RUN_PAIR PROGRAM_DIR: with libsigmatrace.so preloaded and no
# session daemon at all, programs behave exactly as without it (same output, same exit status), and the
# RTLD_NEXT lookups of other interposers are unaffected. Runs inside tests/support/sandbox.sh (no --lttng).
set -uo pipefail
sigmatrace=$1 lib=$2 pair=$3 programs=$4
work=$(mktemp -d /tmp/interpose-no-daemon.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
preload=${LD_PRELOAD:+$LD_PRELOAD:}$lib

if lttng list >/dev/null 2>&1; then echo "a session daemon answers here; this test needs none"; exit 77; fi

# 1. ibv_devinfo -v on the fabric: byte-identical output and status.
"$sigmatrace" fabric -- ibv_devinfo -v >"$work/plain.txt" 2>&1; plain_rc=$?
LD_PRELOAD=$preload "$sigmatrace" fabric -- ibv_devinfo -v >"$work/pre.txt" 2>&1; pre_rc=$?
[[ $plain_rc == "$pre_rc" ]] || fail "ibv_devinfo status $plain_rc untraced vs $pre_rc preloaded"
cmp -s "$work/plain.txt" "$work/pre.txt" || { fail "ibv_devinfo output differs"; diff "$work/plain.txt" "$work/pre.txt" | head; }

# 2. a pingpong pair, preloaded, no daemon: completes.
LD_PRELOAD=$preload "$pair" "$sigmatrace" nodaemon "$work/pair" -- ibv_rc_pingpong -d sfab_0 -n 100 \
  || { fail "ibv_rc_pingpong preloaded without a daemon"; cat "$work/pair"/*.out; }

# 3. RTLD_NEXT from another interposer and from the program, through libsigmatrace.so's dlsym.
LD_PRELOAD=$preload timeout 20 "$programs/rtld_next_main" >"$work/next.txt" 2>&1 || { fail "RTLD_NEXT lookups"; cat "$work/next.txt"; }
grep -q '^ok$' "$work/next.txt" || fail "rtld_next_main did not print ok"

# 4. a failing program keeps its status.
LD_PRELOAD=$preload sh -c 'exit 7'; rc=$?
[[ $rc == 7 ]] || fail "sh -c 'exit 7' returned $rc preloaded"
[[ $status == 0 ]] && echo "all checks passed"
exit $status
