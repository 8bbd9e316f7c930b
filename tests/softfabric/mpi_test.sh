#!/usr/bin/env bash
# One mpirun, 4 ranks, 2 per fabric node (`--node rank/2`): ranks 0,1 must land on node0 and 2,3 on node1,
# all RDMA writes must arrive intact, and the fabric counters must show node0 <-> node1 traffic.
# Usage: mpi_test.sh SIGMATRACE PROGRAM (inside tests/support/sandbox.sh)
set -euo pipefail
sigmatrace=$1 program=$2
command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed"; exit 77; }
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
out=$(timeout 120 mpirun "${root[@]}" --oversubscribe -np 4 --mca btl self,vader --mca pml ob1 \
      "$sigmatrace" fabric --node rank/2 -- "$program" 2>&1)
echo "$out"
for r in 0 1; do grep -q "rank $r on node0 (LID 1): 3 of 3 slots correct" <<<"$out" || { echo "FAILED: rank $r"; exit 1; }; done
for r in 2 3; do grep -q "rank $r on node1 (LID 9): 3 of 3 slots correct" <<<"$out" || { echo "FAILED: rank $r"; exit 1; }; done
stats=$("$sigmatrace" fabric --stats)
echo "$stats"
# 2 ranks on node0 write 64 KiB to each of the 2 ranks on node1: 4 writes, 256 KiB each way.
grep -Eq '^node0/sfab_0 +node1/sfab_0 +262144 +4 ' <<<"$stats" || { echo "FAILED: node0 -> node1 counters"; exit 1; }
grep -Eq '^node1/sfab_0 +node0/sfab_0 +262144 +4 ' <<<"$stats" || { echo "FAILED: node1 -> node0 counters"; exit 1; }
# Ranks on the same node write to each other through their NIC (a loopback), 2 x 64 KiB per node.
grep -Eq '^node0/sfab_0 +node0/sfab_0 +131072 +2 ' <<<"$stats" || { echo "FAILED: node0 loopback counters"; exit 1; }
echo OK
