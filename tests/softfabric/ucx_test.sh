#!/usr/bin/env bash
# Debian's UCX and Open MPI on the fabric's mlx5 path (docs/softfabric.md, "UCX and Open MPI"). Inside
# tests/support/sandbox.sh:
#   ucx_test.sh SIGMATRACE info
#       `ucx_info -d` lists rc_mlx5, dc_mlx5 and ud_mlx5 on sfab_0:1, and UCX opened sfab_0 with its DevX memory
#       domain.
#   ucx_test.sh SIGMATRACE perftest TLS FROM:TO:MIN_BYTES -- PERFTEST ARGS...
#       ucx_perftest server on node0 and client on node1 with UCX_TLS=TLS; both exit 0, both opened sfab_0 with
#       UCX's DevX memory domain (and, over RC, connected DevX-created RC QPs; over DC, created DevX DCIs unless
#       UCX_IB_MLX5_DEVX_OBJECTS leaves them out), and the fabric counted at least
#       MIN_BYTES on link FROM -> TO (what the test moves: put data client -> server, get data the other way) and
#       not ten times more.
#   ucx_test.sh SIGMATRACE mpi PROGRAM TLS NP
#       mpirun --mca pml ucx with UCX_TLS=TLS,self, NP ranks on NP fabric nodes: every check of PROGRAM
#       (tests/softfabric/programs/mpi_pingpong_collectives.cpp) passes, and 1 MiB messages cross node0 <-> nodeN.
set -uo pipefail
sigmatrace=$1 mode=$2
shift 2
command -v ucx_perftest >/dev/null || { echo "SKIP: ucx-utils not installed"; exit 77; }
export UCX_NET_DEVICES=sfab_0:1 UCX_WARN_UNUSED_ENV_VARS=n
# UCX's debug log names the memory domain it opened a device with.
devx_md_line="sfab_0: opened DEVX md"
stats_bytes() {  # FROM TO: bytes the fabric counted on that link
  "$sigmatrace" fabric --stats | awk -v f="$1" -v t="$2" '$1 == f && $2 == t { print $3 }'
}

case $mode in
info)
  out=$(timeout 60 "$sigmatrace" fabric --node 0 -- ucx_info -d 2>&1)
  for tl in rc_mlx5 dc_mlx5 ud_mlx5; do
    # "Transport: X" followed by "Device: sfab_0:1"
    grep -A1 "Transport: $tl\$" <<<"$out" | grep -q "Device: sfab_0:1" || {
      echo "FAILED: ucx_info -d lists no $tl on sfab_0:1"; echo "$out"; exit 1; }
    echo "$tl on sfab_0:1"
  done
  grep -q "Memory domain: sfab_0" <<<"$out" || { echo "FAILED: no sfab_0 memory domain"; exit 1; }
  log=$(UCX_LOG_LEVEL=debug timeout 60 "$sigmatrace" fabric --node 0 -- ucx_info -d 2>&1)
  grep -q "$devx_md_line" <<<"$log" || {
    echo "FAILED: UCX did not open sfab_0 with its DevX memory domain"; grep "UCX  DEBUG.*md" <<<"$log"; exit 1; }
  echo "$devx_md_line"
  ;;
perftest)
  tls=$1 expect=$2
  shift 2
  [[ $1 == -- ]] && shift
  from=${expect%%:*} rest=${expect#*:}
  to=${rest%%:*} min=${rest#*:}
  work=$(mktemp -d /tmp/ucx-test.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  export UCX_LOG_LEVEL=debug
  UCX_TLS=$tls timeout 120 "$sigmatrace" fabric --node 0 -- ucx_perftest -p 18515 >"$work/server.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    awk 'substr($2, length($2) - 4) == ":4853" && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp 2>/dev/null && break
    sleep 0.05
  done
  UCX_TLS=$tls timeout 120 "$sigmatrace" fabric --node 1 -- ucx_perftest localhost -p 18515 "$@" >"$work/client.log" 2>&1
  client_rc=$?
  wait $server
  server_rc=$?
  grep -v " UCX  DEBUG " "$work/client.log" | tail -n 3
  if [[ $client_rc -ne 0 || $server_rc -ne 0 ]]; then
    echo "FAILED: client rc=$client_rc, server rc=$server_rc (UCX_TLS=$tls ucx_perftest $*)"
    echo "--- server"; cat "$work/server.log"; echo "--- client"; cat "$work/client.log"
    exit 1
  fi
  for side in server client; do
    grep -q "$devx_md_line" "$work/$side.log" || { echo "FAILED: the $side did not use UCX's DevX memory domain"; exit 1; }
  done
  echo "both sides: $devx_md_line"
  if [[ $tls == rc* ]]; then
    for side in server client; do
      grep -q "connected rc devx qp" "$work/$side.log" || { echo "FAILED: the $side's RC QP is not a DevX QP"; exit 1; }
    done
    echo "both sides: RC QPs created with DevX"
  fi
  # DC: DevX DCIs unless the caller chose UCX's DevX objects without them (then mlx5dv_create_qp's).
  if [[ $tls == dc* && ${UCX_IB_MLX5_DEVX_OBJECTS-dci} == *dci* ]]; then
    for side in server client; do
      grep -q "created DevX DCI" "$work/$side.log" || { echo "FAILED: the $side's DCIs are not DevX QPs"; exit 1; }
    done
    echo "both sides: DCIs created with DevX"
  fi
  "$sigmatrace" fabric --stats
  bytes=$(stats_bytes "$from" "$to")
  if [[ -z $bytes || $bytes -lt $min || $bytes -gt $((min * 10 + 1048576)) ]]; then
    echo "FAILED: $from -> $to carried ${bytes:-no} bytes, expected at least $min (and not ten times more)"
    exit 1
  fi
  echo "OK: $from -> $to carried $bytes bytes (at least $min)"
  ;;
mpi)
  program=$1 tls=$2 np=$3
  command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed"; exit 77; }
  root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  # Debian's /etc/openmpi/openmpi-mca-params.conf excludes pml ucx ("pml = ^ucx"): --mca pml ucx selects it.
  out=$(timeout 240 mpirun "${root[@]}" --oversubscribe -np "$np" --mca pml ucx -x UCX_TLS="$tls,self" \
        -x UCX_NET_DEVICES -x UCX_WARN_UNUSED_ENV_VARS "$sigmatrace" fabric --node rank -- "$program" 2>&1)
  rc=$?
  echo "$out" | grep "^rank"
  [[ $rc -eq 0 ]] || { echo "FAILED: mpirun exited $rc"; echo "$out"; exit 1; }
  expected=$(( (np - 1) * 2 + np * 2 ))  # ping-pong lines (rank 0: np-1, others: 1) + allreduce + barrier
  got=$(grep -c -E '^rank [0-9]+: (pingpong with [0-9]+: 4 x 1048576 bytes, 0 wrong|allreduce of 4096 int64: 0 wrong|barrier passed)$' <<<"$out")
  [[ $got -eq $expected ]] || { echo "FAILED: $got of $expected checks passed"; exit 1; }
  "$sigmatrace" fabric --stats
  for ((n = 1; n < np; n++)); do
    for link in "node0/sfab_0 node$n/sfab_0" "node$n/sfab_0 node0/sfab_0"; do
      # shellcheck disable=SC2086
      bytes=$(stats_bytes $link)
      [[ -n $bytes && $bytes -ge $((4 * 1048576)) ]] || { echo "FAILED: $link carried ${bytes:-no} bytes"; exit 1; }
    done
  done
  echo "OK: $got checks, the ping-pong bytes crossed the fabric"
  ;;
*)
  echo "ucx_test.sh: unknown mode $mode" >&2; exit 2 ;;
esac
