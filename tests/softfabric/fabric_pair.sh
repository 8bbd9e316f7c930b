#!/usr/bin/env bash
# fabric_pair.sh SIGMATRACE [options] -- PROGRAM ARGS...
#
# Runs a client/server verbs program (ibv_*_pingpong, perftest) across two fabric nodes: the server
# (PROGRAM ARGS) on --server-node, the client (PROGRAM ARGS localhost) on --client-node, each under
# `sigmatrace fabric`. Run it inside tests/support/sandbox.sh (own network namespace and /dev/shm).
#
# Options:
#   --server-node N / --client-node M   fabric nodes (default 0 and 1)
#   --fabric "ARGS"                     extra `sigmatrace fabric` arguments for both (e.g. "--config F")
#   --port P                            TCP port the server listens on (default 18515)
#   --timeout S                         seconds before both are killed (default 120)
#   --expect-link FROM:TO               after the run, the fabric counters must show bytes FROM -> TO
#                                       (e.g. node1/sfab_0:node0/sfab_0); repeatable
#   --no-self-loop                      and no bytes on a NIC-to-itself link
# Exit: 0 when both programs succeed and the counter checks hold; the failing side's output otherwise.
set -uo pipefail

sigmatrace=$1; shift
server_node=0 client_node=1 fabric_args="" port=18515 timeout_s=120 no_self_loop=0
expect_links=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --server-node) server_node=$2; shift 2 ;;
    --client-node) client_node=$2; shift 2 ;;
    --fabric) fabric_args=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --expect-link) expect_links+=("$2"); shift 2 ;;
    --no-self-loop) no_self_loop=1; shift ;;
    --) shift; break ;;
    *) echo "fabric_pair.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "fabric_pair.sh: no program" >&2; exit 2; }

work=$(mktemp -d /tmp/fabric-pair.XXXXXX)
trap 'rm -rf "$work"' EXIT

# shellcheck disable=SC2086
timeout "$timeout_s" "$sigmatrace" fabric --node "$server_node" $fabric_args -- "$@" >"$work/server.log" 2>&1 &
server_pid=$!

# Wait until the server listens (it first opens the device and creates its QP).
# Only a socket in LISTEN state (st 0A) counts: a TIME_WAIT entry left by an earlier run on the same port would
# otherwise start the client before the server is ready.
hexport=$(printf '%04X' "$port")
listening() {
  awk -v p=":$hexport" 'substr($2, length($2) - 4) == p && $4 == "0A" { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
for _ in $(seq 200); do
  listening && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done

# shellcheck disable=SC2086
timeout "$timeout_s" "$sigmatrace" fabric --node "$client_node" $fabric_args -- "$@" localhost >"$work/client.log" 2>&1
client_rc=$?
wait "$server_pid"
server_rc=$?

status=0
if [[ $server_rc -ne 0 || $client_rc -ne 0 ]]; then
  echo "FAILED: server rc=$server_rc, client rc=$client_rc ($*)"
  echo "--- server output"; cat "$work/server.log"
  echo "--- client output"; cat "$work/client.log"
  exit 1
fi
echo "--- client output"; tail -n 12 "$work/client.log"

# shellcheck disable=SC2086
"$sigmatrace" fabric --stats $(echo " $fabric_args" | grep -o -- '--name [^ ]*') >"$work/stats.txt" || status=1
cat "$work/stats.txt"
for link in "${expect_links[@]}"; do
  from=${link%%:*} to=${link##*:}
  bytes=$(awk -v f="$from" -v t="$to" '$1 == f && $2 == t { print $3 }' "$work/stats.txt")
  if [[ -z $bytes || $bytes -eq 0 ]]; then
    echo "FAILED: no bytes counted on link $from -> $to"
    status=1
  fi
done
if [[ $no_self_loop == 1 ]]; then
  loops=$(awk 'NR > 2 && $1 == $2 && $3 > 0' "$work/stats.txt")
  if [[ -n $loops ]]; then
    echo "FAILED: bytes on a NIC-to-itself link: $loops"
    status=1
  fi
fi
exit $status
