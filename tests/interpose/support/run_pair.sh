#!/usr/bin/env bash
# run_pair.sh SIGMATRACE FABRIC_NAME OUTDIR -- PROGRAM ARGS...
#
# Runs a client/server verbs program (ibv_rc_pingpong, perftest) on the software fabric: the server
# (PROGRAM ARGS) on node0, the client (PROGRAM ARGS localhost) on node1, each under
# `sigmatrace fabric --name FABRIC_NAME` (a fabric of their own, so its counters count this run only).
# Writes OUTDIR/server.out, client.out, server.rc, client.rc; exits 0 when both programs succeeded.
# Meant to run inside tests/support/sandbox.sh (private network namespace: port 18515 is ours), possibly
# under `sigmatrace record`, which then traces both sides.
set -uo pipefail
sigmatrace=$1 name=$2 out=$3
shift 3
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || { echo "run_pair.sh: no program" >&2; exit 2; }
mkdir -p "$out"
port=18515
timeout_s=${RUN_PAIR_TIMEOUT:-120}
# RUN_PAIR_PIN=1: server on CPU 0, client on CPU 1 (benchmarks: less variance from migrations).
server_pin=() client_pin=()
if [[ ${RUN_PAIR_PIN:-0} == 1 ]] && command -v taskset >/dev/null; then
  server_pin=(taskset -c 0) client_pin=(taskset -c 1)
fi

timeout "$timeout_s" "${server_pin[@]}" "$sigmatrace" fabric --name "$name" --node 0 -- "$@" >"$out/server.out" 2>&1 &
server=$!
# Wait until the server LISTENs (state 0A): a TIME_WAIT entry left by the previous run on the same port must
# not count, or the client would connect before the server is ready and both would hang.
listening() {
  awk -v p="$(printf ':%04X' "$port")" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
for _ in $(seq 400); do
  listening && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.025
done
timeout "$timeout_s" "${client_pin[@]}" "$sigmatrace" fabric --name "$name" --node 1 -- "$@" localhost >"$out/client.out" 2>&1
echo $? >"$out/client.rc"
wait "$server"
echo $? >"$out/server.rc"
[[ $(cat "$out/server.rc") == 0 && $(cat "$out/client.rc") == 0 ]]
