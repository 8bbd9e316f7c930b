#!/usr/bin/env bash
# sandbox.sh [--lttng] [--] CMD ARGS...
#
# Runs CMD isolated from everything else on the machine, so that tests can run in parallel (ctest -j) and
# beside other work:
#   - its own network namespace with loopback up: TCP ports (perftest's and pingpong's default 18515, MPI's)
#     never collide with another test's;
#   - its own mount namespace with a fresh tmpfs on /var/run/lttng and a private LTTNG_HOME: a session daemon
#     started in here (by --lttng, or by `sigmatrace record`) sees only this test's processes, and no daemon
#     outside is visible or disturbed;
#   - its own tmpfs on /dev/shm, so fabric and tracer shared memory cannot clash with other tests'.
# With --lttng a session daemon is started inside and stopped at the end.
#
# Needs root (CI runs as root); as another user it tries an unprivileged user namespace, else runs CMD
# unisolated with a warning. Exit status: CMD's.
set -euo pipefail

start_daemon=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lttng) start_daemon=1; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { echo "usage: sandbox.sh [--lttng] [--] CMD ARGS..." >&2; exit 2; }

if [[ ${SIGMATRACE_SANDBOX_INNER:-0} != 1 ]]; then
  export SIGMATRACE_SANDBOX_INNER=1
  flag=()
  [[ $start_daemon == 1 ]] && flag=(--lttng)
  if [[ $(id -u) -eq 0 ]]; then
    exec unshare --mount --net --propagation private "$0" "${flag[@]}" -- "$@"
  elif unshare --user --map-root-user --mount --net true 2>/dev/null; then
    exec unshare --user --map-root-user --mount --net --propagation private "$0" "${flag[@]}" -- "$@"
  else
    echo "sandbox.sh: warning: no namespaces available; running unisolated" >&2
  fi
fi

if [[ $(id -u) -eq 0 ]]; then
  ip link set lo up 2>/dev/null || true
  mkdir -p /var/run/lttng
  mount -t tmpfs -o mode=0755 sigmatrace-lttng /var/run/lttng
  mount -t tmpfs -o mode=1777 sigmatrace-shm /dev/shm
fi
LTTNG_HOME=$(mktemp -d /tmp/sigmatrace-sandbox.XXXXXX)
export LTTNG_HOME

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/kill_tree.sh"   # kill_tree PID
daemon_pid=""
cleanup() {
  if [[ -n $daemon_pid ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.05; done
    # A daemon with a session whose stream can never be delivered (a process killed inside a tracepoint)
    # does not exit on SIGTERM: left alone, it and its consumers would outlive the test, with their buffers.
    kill -0 "$daemon_pid" 2>/dev/null && kill_tree "$daemon_pid"
  fi
  rm -rf "$LTTNG_HOME"
}
trap cleanup EXIT

if [[ $start_daemon == 1 ]]; then
  # Not under the test's LD_PRELOAD (a sanitizer build's runtime): the daemon is not ours to instrument.
  env -u LD_PRELOAD lttng-sessiond --daemonize --no-kernel >/dev/null 2>&1 \
    || { echo "sandbox.sh: cannot start lttng-sessiond (install lttng-tools)" >&2; exit 2; }
  for f in /var/run/lttng/lttng-sessiond.pid "$LTTNG_HOME/.lttng/lttng-sessiond.pid"; do
    [[ -f $f ]] && daemon_pid=$(cat "$f")
  done
fi

# The marker only tells this script it already entered its namespaces; a sandbox.sh that CMD runs (nested
# tests) must make namespaces of its own. Tests that need isolation check SIGMATRACE_SANDBOXED instead.
unset SIGMATRACE_SANDBOX_INNER
export SIGMATRACE_SANDBOXED=1
set +e
"$@"
status=$?
set -e
exit $status
