#!/usr/bin/env bash
# direct_queues_test.sh SIGMATRACE ANALYZER, inside tests/support/sandbox.sh --lttng.
#
# UCX's mlx5 transports write their WQEs into verbs QPs exported with mlx5dv_init_obj and ring the doorbells
# themselves: the watcher reads those rings (docs/gpumem.md). Recorded on the software fabric with `sigmatrace
# record`, `ucx_perftest` put_bw 64 KiB zcopy over rc_mlx5 and dc_mlx5, server on node0 and client on node1, each on
# a fabric of its own; then analyzed:
#   - RDMA_WRITE count and bytes equal the fabric's counters of the link node1 -> node0 (ops and bytes), and the
#     node matrix equals the fabric's cell by cell;
#   - every RDMA_WRITE is CPU-direct (cpu_direct == count), none is GPU-posted, the text report says "CPU-direct";
#   - nothing in flight, no error, no unmatched completion, no finding above info.
# Skips (77) when ucx_perftest is not installed.
set -uo pipefail
st=$1 analyzer=$2
command -v ucx_perftest >/dev/null || { echo "SKIP: ucx-utils not installed"; exit 77; }
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
work=$(mktemp -d /tmp/direct-queues.XXXXXX)
trap 'rm -rf "$work"' EXIT
export UCX_NET_DEVICES=sfab_0:1 UCX_WARN_UNUSED_ENV_VARS=n
failures=0
fail() { echo "FAILED: $case_name: $*"; failures=$((failures + 1)); }

# The fabric's link counters of fabric $1 as "SRC_NODE DST_NODE BYTES OPS LOST" lines, summed per node pair.
fabric_cells() {
  "$st" fabric --name "$1" --stats | awk 'NR > 1 && $1 ~ /\// {
      split($1, s, "/"); split($2, d, "/"); k = s[1] " " d[1]; b[k] += $3; o[k] += $4; l[k] += $5 }
    END { for (k in b) printf "%s %.0f %.0f %.0f\n", k, b[k], o[k], l[k] }' | sort
}

for tl in rc_mlx5 dc_mlx5; do
  case_name=$tl
  echo "== $case_name: ucx_perftest -t put_bw -D zcopy -s 65536 -n 200 -x $tl"
  "$st" record -o "$work/$case_name" -- bash -c '
    st=$1 name=$2 log=$3 tl=$4
    timeout 60 "$st" fabric --name "$name" --node 0 -- ucx_perftest -p 18515 >"$log.server" 2>&1 &
    server=$!
    sleep 1
    timeout 60 "$st" fabric --name "$name" --node 1 -- ucx_perftest localhost -p 18515 -t put_bw -D zcopy -s 65536 \
      -n 200 -w 10 -x "$tl" -d sfab_0:1 >"$log.client" 2>&1
    rc=$?
    wait $server
    exit $((rc != 0 || $? != 0))' _ "$st" "$case_name" "$work/$case_name.log" "$tl" >"$work/$case_name.record" 2>&1
  rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "the run failed (rc $rc)"
    tail -n 5 "$work/$case_name".log.* "$work/$case_name.record"
    continue
  fi
  json=$work/$case_name.json
  "$analyzer" "$work/$case_name" --json "$json" >"$work/$case_name.txt" 2>"$work/$case_name.analyze.err"
  arc=$?
  [[ $arc -eq 0 ]] || { fail "the analyzer exited $arc: $(cat "$work/$case_name.analyze.err")"; continue; }
  fabric=$(fabric_cells "$case_name")
  echo "$fabric" | sed 's/^/  fabric: /'
  read -r f_bytes f_ops f_lost < <(awk '$1 == "node1" && $2 == "node0" { print $3, $4, $5 }' <<<"$fabric")
  [[ ${f_lost:-0} == 0 ]] || fail "the fabric lost $f_lost packets node1 -> node0"
  read -r count bytes direct gpu < <(jq -r '.ops.by_opcode.RDMA_WRITE | "\(.count) \(.bytes) \(.cpu_direct) \(.gpu)"' "$json")
  echo "  analyzer: RDMA_WRITE $count ops, $bytes bytes, cpu_direct $direct, gpu $gpu"
  [[ $count == "${f_ops:-x}" && $bytes == "${f_bytes:-x}" ]] ||
    fail "RDMA_WRITE $count ops $bytes bytes, the fabric carried ${f_ops:-no} ops ${f_bytes:-no} bytes node1 -> node0"
  [[ $count -ge 210 && $((bytes % 65536)) -eq 0 ]] || fail "RDMA_WRITE: $count ops of $bytes bytes, put_bw -n 200 -w 10 of 64 KiB"
  [[ $direct == "$count" && $gpu == 0 ]] || fail "poster: cpu_direct $direct, gpu $gpu of $count"
  [[ $(jq -r '.ops.gpu' "$json") == 0 ]] || fail "GPU-posted operations: $(jq -r '.ops.gpu' "$json")"
  grep -q "CPU-direct" "$work/$case_name.txt" || fail "the text report does not say CPU-direct: $(grep '^Operations' "$work/$case_name.txt")"
  # The matrix, cell by cell, against the fabric.
  analyzed=$(jq -r '.traffic.node_matrix[] | "\(.src) \(.dst) \(.bytes) \(.ops)"' "$json" | sort)
  expected=$(awk '{ print $1, $2, $3, $4 }' <<<"$fabric")
  [[ $analyzed == "$expected" ]] || fail "node matrix: analyzer [$analyzed], fabric [$expected]"
  read -r in_flight errors unmatched < <(jq -r '"\(.ops.in_flight_at_end) \(.ops.errors) \([.warnings[] | select(test("matched no posted"))] | length)"' "$json")
  [[ $in_flight == 0 && $errors == 0 && $unmatched == 0 ]] ||
    fail "in_flight_at_end $in_flight, errors $errors, unmatched-completion warnings $unmatched"
  bad=$(jq -r '.findings[] | select(.severity != "info") | "\(.severity) \(.kind): \(.summary)"' "$json")
  [[ -z $bad ]] || fail "findings on a clean run: $bad"
  echo "  ok: $(grep '^Operations' "$work/$case_name.txt")"
done

[[ $failures -eq 0 ]] || { echo "$failures check(s) failed"; exit 1; }
echo "all direct-queue checks passed"
