#!/usr/bin/env bash
# mpirun_stress_test.sh SIGMATRACE MPI_PROGRAM: a traced mpirun never aborts, and the launcher never loads
# lttng-ust. Runs inside tests/support/sandbox.sh --lttng (record uses that daemon).
#
# Were tracing to start at process start rather than at its first RDMA use (docs/interpose.md, "When tracing
# starts"), ~1 traced `mpirun -np 4` in 8 would end with "mpirun: counter/shm.c:327: lttng_counter_shmp_object_destroy: Assertion `0'
# failed" (exit 134): mpirun would load lttng-ust with the preload, the fork hooks restart it in each forked
# child, and Open MPI close every descriptor there before exec, under lttng-ust's listener thread. Here:
#   1. 10 traced `mpirun -np 16` of a shell rank (160 forks by mpirun; at that rate of ~1 abort in 40 forks
#      this fails with probability > 98 %): every run exits 0, and neither mpirun nor a rank maps liblttng-ust;
#   2. 5 traced runs of the fabric's MPI all-to-all (4 ranks doing RDMA): exit 0, the 4 ranks and nothing else
#      in the trace.
set -uo pipefail
sigmatrace=$1
program=$2
command -v mpirun >/dev/null || { echo "SKIP: mpirun (openmpi-bin) is not installed"; exit 77; }
[[ -x $program ]] || { echo "SKIP: $program was not built (no MPI)"; exit 77; }
work=$(mktemp -d /tmp/interpose-mpirun-stress.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
root=()
[[ $(id -u) == 0 ]] && root=(--allow-run-as-root)

for i in $(seq 10); do
  # Each rank prints how many liblttng-ust.so mappings its launcher (the parent) and itself have.
  "$sigmatrace" record -o "$work/shell$i" -- mpirun "${root[@]}" --oversubscribe -np 16 \
    sh -c 'echo "maps $(grep -c "liblttng-ust\.so" /proc/$PPID/maps) $(grep -c "liblttng-ust\.so" /proc/$$/maps)"' \
    >"$work/shell$i.out" 2>&1; rc=$?
  [[ $rc == 0 ]] || fail "shell run $i: exit status $rc: $(grep -v '^maps' "$work/shell$i.out" | head -5)"
  [[ $(grep -c '^maps 0 0$' "$work/shell$i.out") == 16 ]] \
    || fail "shell run $i: lttng-ust loaded by mpirun or a rank that never used RDMA: $(grep '^maps' "$work/shell$i.out" | sort | uniq -c)"
done

for i in $(seq 5); do
  "$sigmatrace" record -o "$work/rdma$i" -- mpirun "${root[@]}" --oversubscribe -np 4 --mca btl self,vader \
    "$sigmatrace" fabric --node rank -- "$program" >"$work/rdma$i.out" 2>&1; rc=$?
  [[ $rc == 0 ]] || fail "RDMA run $i: exit status $rc: $(tail -5 "$work/rdma$i.out")"
  grep -q "sigmatrace record: traced processes: 4$" "$work/rdma$i.out" \
    || fail "RDMA run $i: not 4 traced processes: $(grep 'sigmatrace record' "$work/rdma$i.out")"
  infos=$(babeltrace2 "$work/rdma$i" 2>/dev/null | grep -o 'sigmatrace:process_info: .*procname = "[^"]*"' | sed 's/.*procname = //')
  [[ $(grep -c . <<<"$infos") == 4 ]] || fail "RDMA run $i: process_info of: $infos"
  grep -q -e '"mpirun"' -e '"sigmatrace"' -e '"orted"' <<<"$infos" && fail "RDMA run $i: a launcher is in the trace: $infos"
done
[[ $status == 0 ]] && echo "all checks passed"
exit $status
