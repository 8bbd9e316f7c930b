#!/usr/bin/env bash
# with-private-lttng.sh CMD ARGS...: run CMD with an LTTng session daemon of its own, stopped afterwards.
#
# The daemon never touches another one on the machine: as root, CMD runs in a private mount namespace where
# /var/run/lttng (the root daemon's fixed run directory) is a fresh tmpfs; LTTNG_HOME is a private temporary
# directory in every case. Processes CMD starts inherit both, so everything they trace reaches this daemon.
set -euo pipefail

if [[ ${SIGMATRACE_PRIVATE_LTTNG_INNER:-0} != 1 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    exec unshare --mount --propagation private env SIGMATRACE_PRIVATE_LTTNG_INNER=1 "$0" "$@"
  else
    # A non-root per-user daemon lives under LTTNG_HOME already; no namespace needed.
    export SIGMATRACE_PRIVATE_LTTNG_INNER=1
  fi
fi

if [[ $(id -u) -eq 0 ]]; then
  mkdir -p /var/run/lttng
  mount -t tmpfs -o mode=0755 sigmatrace-lttng /var/run/lttng
fi
LTTNG_HOME=$(mktemp -d /tmp/sigmatrace-lttng-home.XXXXXX)
export LTTNG_HOME
source "$(dirname "${BASH_SOURCE[0]}")/kill_tree.sh"   # kill_tree PID
cleanup() {
  local pidfile pid
  for pidfile in /var/run/lttng/lttng-sessiond.pid "$LTTNG_HOME/.lttng/lttng-sessiond.pid"; do
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || continue
    # Let the daemon and its consumer flush and exit before their directories go.
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    # One with a session whose stream can never be delivered (a process killed inside a tracepoint) does not
    # exit on SIGTERM.
    kill -0 "$pid" 2>/dev/null && kill_tree "$pid"
  done
  rm -rf "$LTTNG_HOME"
}
trap cleanup EXIT

lttng-sessiond --daemonize --no-kernel >/dev/null 2>&1 \
  || { echo "with-private-lttng.sh: cannot start lttng-sessiond (is lttng-tools installed?)" >&2; exit 2; }
unset SIGMATRACE_PRIVATE_LTTNG_INNER   # a nested with-private-lttng.sh makes its own namespace
export SIGMATRACE_TEST_LTTNG=1   # tests that need a daemon check this, and skip with a reason without it
"$@"
