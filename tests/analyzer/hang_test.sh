#!/usr/bin/env bash
# hang_test.sh SIGMATRACE ANALYZER MODE PROGRAM, inside tests/support/sandbox.sh --lttng.
#
# Hang diagnosis while the job is still hung (docs/analyzer.md, "Queue progress and stalls"; docs/interpose.md,
# "A job that hangs"), the way NVIDIA/nccl#2383 hung. A 2-rank job on 2 fabric nodes, recorded: rank 0 writes to
# rank 1 (acknowledged), the fabric takes the link down at 2 s, rank 0's signal ATOMIC_FETCH_AND_ADD then fails
# with RETRY_EXC_ERR, and both ranks spin forever. MODE says how rank 0 posts:
#   verbs: PROGRAM is st-hang (ibv_post_send of a 4 MiB write, wr_ids 1 and 2; ibv_poll_cq);
#   ring:  PROGRAM is gpu_gin_hang (NCCL GIN GDAKI's DBR-less DevX QP: WQEs written into the ring and the
#          doorbell rung directly, a 1 MiB write then the atomic at WQE index 1; the CQ ring read by index), so
#          what the report says comes from the queue watcher's decoded WQEs and CQEs. PE 1's reverse put, posted
#          after the link fell, is unacknowledged too: a second stalled queue, on node1, naming that put.
# While they spin, SIGUSR1 to `sigmatrace record` rotates the session; the rotated chunk is analyzed and must say:
#   - a stalled_queue finding on rank 0's QP (the number the program printed), on node0, peer node1 and rank 1's QP;
#   - its first unacknowledged operation: ATOMIC_FETCH_AND_ADD, 8 bytes, to the flag address the program printed,
#     failed with RETRY_EXC_ERR (verbs: wr_id 2; ring: WQE index 1, the CQE's syndrome 0x15 and its meaning, the
#     vendor syndrome the CQE carried); the last completed one: the write; stalled for more than 1 s;
#   - qps[].progress of that QP: 2 posted, 1 completed, 1 failed, and its move to ERR by the error completion;
#   - ring: the QUERY_QP PE 0 makes after the error (mlx5dv_devx_obj_query, as DOCA's qp query): in the finding
#     and the text report, state ERR and the NIC's consumed and producer indices as the program printed them;
#   - and the job is still running when the report is made. Then the job is killed, and the whole recording (both
#     chunks) has the same stalled_queue.
set -uo pipefail
st=$1 analyzer=$2 mode=$3 hang=$4
case $mode in
  verbs) tag=st-hang who=rank write_bytes=4194304 ;;
  ring) tag=gpu_gin_hang who=PE write_bytes=1048576 ;;
  *) echo "hang_test.sh: MODE is verbs or ring, not '$mode'"; exit 2 ;;
esac
command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
[[ -x $hang ]] || { echo "SKIP: $tag not built (no MPI)"; exit 77; }
work=$(mktemp -d /tmp/hang-test.XXXXXX)
rec=
cleanup() {
  if [[ -n $rec ]] && kill -0 "$rec" 2>/dev/null; then
    kill -TERM "$rec" 2>/dev/null
    wait "$rec" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
# start_job DOWN_S: records the program on a fabric whose link goes down at fabric time DOWN_S, and waits until both
# ranks report. Returns 2 when the job's set-up outlasted DOWN_S (the write failed: "too early"), 1 on another
# failure.
start_job() {
  local down=$1
  echo "down node0/sfab_0 <-> node1/sfab_0 from ${down}s to 3600s" >"$work/fabric.conf"
  # mpirun runs untraced, its ranks traced (as linkload_test.cpp does: a traced mpirun may abort at exit). The
  # atomic is posted --wait-ms after the acknowledged write, past the link's fall however early set-up ended.
  local job="timeout 300 mpirun ${root[*]} --oversubscribe -np 2 --mca btl self,vader --mca pml ob1 env LD_PRELOAD=\"\$P\" \
$st fabric --name hang-$mode-$$-$down --node rank --config $work/fabric.conf -- $hang --wait-ms $((down * 1000 + 1000))"
  rm -rf "$work/trace"
  "$st" record -o "$work/trace" -- bash -c "P=\$LD_PRELOAD; exec env -u LD_PRELOAD $job" >"$work/run.log" 2>&1 &
  rec=$!
  for _ in $(seq 1 $((down * 10 + 600))); do
    grep -q 'too early' "$work/run.log" && break
    grep -q "$tag: $who 0: qp" "$work/run.log" && grep -q "$tag: $who 1: qp" "$work/run.log" && return 0
    kill -0 "$rec" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM "$rec" 2>/dev/null
  wait "$rec" 2>/dev/null
  rec=
  grep -q 'too early' "$work/run.log" && return 2
  return 1
}
# Set-up takes well under 2 s on a quiet machine, several seconds in a sanitized build on a loaded one.
started=1
for down in 2 6 18; do
  start_job "$down"; started=$?
  [[ $started == 2 ]] || break
  echo "note: the job's set-up outlasted the link's fall at ${down} s; again with a later fall"
done
if [[ $started != 0 ]]; then
  echo "FAILED: $tag did not reach its hang"; cat "$work/run.log"; exit 1
fi
grep "$tag:" "$work/run.log"
if [[ $mode == verbs ]]; then
  read -r qp0 flag status < <(sed -n 's/^st-hang: rank 0: qp \([0-9]*\) atomic to \(0x[0-9a-f]*\) completed with \(.*\), vendor_err.*/\1 \2 \3/p' "$work/run.log" | awk '{print $1, $2, $3}')
  [[ $status == transport ]] || fail "the atomic did not fail with the retry error: $(grep 'rank 0' "$work/run.log")"
else
  read -r qp0 wqe flag status syndrome vendor qstate qhw qsw < <(sed -n 's/^gpu_gin_hang: PE 0: qp \([0-9]*\) wqe \([0-9]*\) atomic to \(0x[0-9a-f]*\) completed with \([a-z]*\), syndrome \(0x[0-9a-f]*\), vendor \(0x[0-9a-f]*\); QUERY_QP state \([0-9]*\) hw \([0-9]*\) sw \([0-9]*\)$/\1 \2 \3 \4 \5 \6 \7 \8 \9/p' "$work/run.log")
  [[ $status == error && $syndrome == 0x15 ]] || fail "the atomic's CQE is not a retry-exceeded error: $(grep 'PE 0' "$work/run.log")"
  # The NIC moved the QP to ERR and consumed both WQEs (the write and the atomic).
  [[ $qstate == 6 && $qhw == 2 && $qsw == 2 ]] || fail "QUERY_QP after the error: state '$qstate' hw '$qhw' sw '$qsw', expected 6 2 2"
  read -r rwqe rdest rstatus rsyndrome < <(sed -n 's/^gpu_gin_hang: PE 1: qp [0-9]* wqe \([0-9]*\) put to \(0x[0-9a-f]*\) completed with \([a-z]*\), syndrome \(0x[0-9a-f]*\),.*/\1 \2 \3 \4/p' "$work/run.log")
  [[ $rstatus == error && $rsyndrome == 0x15 ]] || fail "the reverse put's CQE is not a retry-exceeded error: $(grep 'PE 1' "$work/run.log")"
fi
qp1=$(sed -n "s/^$tag: $who 1: qp \([0-9]*\) .*/\1/p" "$work/run.log")

# Let the stall pass the default threshold (1 s), then make the recording so far readable.
sleep 1.5
kill -USR1 "$rec"
chunk=
for _ in $(seq 1 300); do
  chunk=$(sed -n 's/.*is now readable at \(.*\)$/\1/p' "$work/run.log" | head -1)
  [[ -n $chunk ]] && break
  sleep 0.1
done
[[ -n $chunk && -d $chunk ]] || { echo "FAILED: no rotated chunk"; cat "$work/run.log"; exit 1; }
"$analyzer" "$chunk" --json "$work/a.json" >"$work/a.txt" 2>&1 || fail "sigmatrace-analyze $chunk failed: $(cat "$work/a.txt")"
cat "$work/a.txt" | sed -n '1,8p'
kill -0 "$rec" 2>/dev/null || fail "the job was no longer running when it was analyzed"

j() { jq -r "$1" "$work/a.json"; }
stall='[.findings[] | select(.kind == "stalled_queue")]'
# verbs: rank 1 only waits; ring: PE 1's reverse put failed too, a second stalled queue.
stalls=1
[[ $mode == ring ]] && stalls=2
[[ $(j "$stall | length") == "$stalls" ]] || fail "expected $stalls stalled_queue finding(s): $(j '[.findings[].kind]')"
e="($stall | map(select(.evidence.qp_num == $qp0)))[0].evidence"
check() {  # check WHAT JQ EXPECTED
  local got
  got=$(j "$2")
  [[ $got == "$3" ]] || fail "$1: got '$got', expected '$3'"
}
check "QP" "$e.qp_num" "$qp0"
check "node" "$e.node" node0
check "peer node" "$e.peer.node" node1
check "peer QP" "$e.peer.qp_num" "$qp1"
check "opcode" "$e.first_unacknowledged.opcode" ATOMIC_FETCH_AND_ADD
check "bytes" "$e.first_unacknowledged.bytes" 8
check "remote address" "$e.first_unacknowledged.remote_addr" "$flag"
check "status" "$e.first_unacknowledged.error.status" RETRY_EXC_ERR
check "last error" "$e.last_error.status" RETRY_EXC_ERR
check "last completed" "$e.last_completed | \"\\(.opcode) \\(.bytes)\"" "RDMA_WRITE $write_bytes"
if [[ $mode == verbs ]]; then
  check "wr_id" "$e.first_unacknowledged.wr_id" 2
  check "error source" "$e.last_error.source" verbs
else
  check "WQE index" "$e.first_unacknowledged.wqe_index" "$wqe"
  check "poster" "$e.first_unacknowledged.poster" cpu_direct
  check "error source" "$e.last_error.source" cqe
  check "syndrome" "$e.last_error.syndrome" 0x15
  check "syndrome meaning" "$e.last_error.syndrome_meaning" "transport retry counter exceeded"
  check "vendor syndrome" "$e.last_error.vendor_syndrome" "$vendor"
fi
check "stalled past 1 s" "$e.stalled_ns > 1000000000" true
check "outstanding" "$e.outstanding" 1
q=".qps[] | select(.qp_num == $qp0 and .node == \"node0\") | .progress"
check "progress" "$q | [.posted, .completed, .failed, .in_flight] | map(tostring) | join(\" \")" "2 1 1 0"
check "ERR by the error completion" "[$q | .states[] | select(.state == \"ERR\" and .source == \"error_completion\")] | length" 1
if [[ $mode == ring ]]; then
  # The owner's QUERY_QP after the error (a watchdog's): the NIC's word, ERR already known from the CQE.
  check "NIC query" "$e.nic_query | \"\(.state) \(.consumed_index) \(.producer_index)\"" "ERR $qhw $qsw"
  check "progress NIC query" "$q | .nic_query.state" ERR
  grep -q "QUERY_QP .*: state ERR, NIC consumed index $qhw of producer index $qsw" "$work/a.txt" ||
    fail "the text report does not give the QUERY_QP answer"
else
  check "no NIC query" "$e.nic_query" null
fi
grep -q "stalled_queue: QP $qp0 of rank 0 (node0) (peer node1 QP $qp1)" "$work/a.txt" || fail "the text report does not name the QP"
if [[ $mode == ring ]]; then
  # The peer's reverse put, unacknowledged: its own stall, on node1, toward PE 0's QP, nothing completed before.
  r="($stall | map(select(.evidence.qp_num == $qp1)))[0].evidence"
  check "reverse QP node" "$r.node" node1
  check "reverse peer" "\"\($r.peer.node) \($r.peer.qp_num)\"" "node0 $qp0"
  check "reverse put" "$r.first_unacknowledged | \"\(.opcode) \(.bytes) \(.remote_addr) \(.wqe_index)\"" \
    "RDMA_WRITE $write_bytes $rdest $rwqe"
  check "reverse put's syndrome" "$r.last_error.syndrome" 0x15
  check "reverse QP's last completed" "$r.last_completed" null
fi

kill -TERM "$rec"
wait "$rec" 2>/dev/null
rec=
# The whole recording (the rotated chunk and the last one, one trace set) says the same, stalled until the kill.
"$analyzer" "$work/trace" --json "$work/all.json" >"$work/all.txt" 2>&1 || fail "sigmatrace-analyze of the whole trace failed: $(cat "$work/all.txt")"
ja() { jq -r "$1" "$work/all.json"; }
[[ $(ja "[.findings[] | select(.kind == \"stalled_queue\" and .evidence.qp_num == $qp0)] | length") == 1 ]] ||
  fail "the whole recording has no stalled_queue on QP $qp0: $(ja '[.findings[].kind]')"
if ((failures)); then
  echo "$failures check(s) failed"; cat "$work/run.log"; exit 1
fi
echo "hang_test: OK"
