#!/usr/bin/env bash
# real_programs_test.sh SIGMATRACE ANALYZER MPI_PROGRAM ST_SYNTH, inside tests/support/sandbox.sh --lttng.
#
# Unmodified real programs recorded on the software fabric with `sigmatrace record`, each on a fabric of its own
# (so its link counters are its own), then analyzed. A clean run must not cry wolf:
#   - no finding of severity warning or error (info findings are printed: late_events is one when the events
#     that came late changed no match);
#   - nothing in flight at the end, no error completion, the trace complete;
#   - the node matrix equal to the fabric's link counters, bytes and operations, cell by cell (above them by at
#     most the WRs left unconfirmed at teardown, which it counts as moved);
#   - latency from operations whose own completion was seen (a tag_lat SEND's p50 near UCX's own figure,
#     not the time of the next signaled completion).
# Programs: ucx_perftest tag_lat with UCX_TLS=rc_verbs and ud_verbs, tag_bw 64 KiB over rc_verbs, Open MPI with
# pml ucx (rc_verbs) and with btl openib (whose teardown flushes 1024 receives: flushed_at_teardown, no
# error_storm), qperf rc_bw/rc_lat/ud_lat, two-node ib_write_bw; ib_write_bw in counters mode (matrix, rails and
# per-QP counts equal the fabric's and perftest's); and a trace without SigmaTrace events (exit 3).
# Programs that are not installed are skipped one by one (the whole test skips, 77, when none could run).
set -uo pipefail
st=$1 analyzer=$2 mpi_program=$3 synth=$4
work=$(mktemp -d /tmp/real-programs.XXXXXX)
trap 'rm -rf "$work"' EXIT
export UCX_NET_DEVICES=sfab_0:1 UCX_WARN_UNUSED_ENV_VARS=n
failures=0 ran=0
fail() { echo "FAILED: $case_name: $*"; failures=$((failures + 1)); }
have() { command -v "$1" >/dev/null; }

# The fabric's link counters of fabric $1 as "SRC_NODE DST_NODE BYTES OPS LOST" lines, summed per node pair.
fabric_cells() {
  "$st" fabric --name "$1" --stats | awk 'NR > 1 && $1 ~ /\// {
      split($1, s, "/"); split($2, d, "/"); k = s[1] " " d[1]; b[k] += $3; o[k] += $4; l[k] += $5 }
    END { for (k in b) printf "%s %.0f %.0f %.0f\n", k, b[k], o[k], l[k] }' | sort
}

# Server on node0 and client on node1 of fabric $case_name, recorded into $work/$case_name.
#   record_pair [RECORD_OPTS...] -- SERVER... -- CLIENT...
# With KILL_SERVER=1 the server (qperf's runs forever) is stopped once the client is done.
record_pair() {
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  "$st" record "${opts[@]}" -o "$work/$case_name" -- bash -c '
    st=$1 name=$2 log=$3 kill_server=$4; shift 4
    srv=(); while [[ $1 != -- ]]; do srv+=("$1"); shift; done; shift
    timeout 60 "$st" fabric --name "$name" --node 0 -- "${srv[@]}" >"$log.server" 2>&1 &
    server=$!
    sleep 1
    timeout 60 "$st" fabric --name "$name" --node 1 -- "$@" >"$log.client" 2>&1
    rc=$?
    [[ $kill_server == 1 ]] && kill $server
    wait $server
    src=$?
    [[ $kill_server == 1 ]] && src=0
    exit $((rc != 0 || src != 0))' _ "$st" "$case_name" "$work/$case_name.log" "${KILL_SERVER:-0}" "$@" \
    >"$work/$case_name.record" 2>&1
}

# Two ranks on nodes 0 and 1 of fabric $case_name: record_mpi ENV_ASSIGNMENTS MPIRUN_OPTS...
record_mpi() {
  local envs=$1
  shift
  local root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  # shellcheck disable=SC2086
  "$st" record -o "$work/$case_name" -- timeout 120 mpirun "${root[@]}" --oversubscribe -np 2 "$@" \
    env $envs "$st" fabric --name "$case_name" --node rank -- "$mpi_program" >"$work/$case_name.log.client" 2>&1
}

# The analysis of $work/$case_name against the rules above. $1: the run's exit status.
check() {
  local rc=$1
  ran=$((ran + 1))
  if [[ $rc -ne 0 ]]; then
    fail "the program failed (rc $rc)"
    tail -n 5 "$work/$case_name".log.* "$work/$case_name.record"
    return
  fi
  local json=$work/$case_name.json
  "$analyzer" "$work/$case_name" --json "$json" --quiet 2>"$work/$case_name.analyze.err"
  local arc=$?
  [[ $arc -eq 0 ]] || { fail "the analyzer exited $arc: $(cat "$work/$case_name.analyze.err")"; return; }
  local bad
  bad=$(jq -r '.findings[] | select(.severity != "info") | "\(.severity) \(.kind): \(.summary)"' "$json")
  [[ -z $bad ]] || fail "findings on a clean run: $bad"
  jq -r '.findings[] | select(.severity == "info") | "  info: \(.kind): \(.summary)"' "$json"
  read -r in_flight errors complete < <(jq -r '"\(.ops.in_flight_at_end) \(.ops.errors) \(.trace.complete)"' "$json")
  [[ $in_flight == 0 && $errors == 0 && $complete == true ]] ||
    fail "in_flight_at_end $in_flight, errors $errors, complete $complete"
  # The matrix, cell by cell, against the fabric (a link that lost packets retransmitted: skipped, said).
  local fabric analyzed unconfirmed unconfirmed_bytes
  read -r unconfirmed unconfirmed_bytes < <(jq -r '"\(.ops.unconfirmed) \(.ops.unconfirmed_bytes)"' "$json")
  fabric=$(fabric_cells "$case_name")
  analyzed=$(jq -r '.traffic.node_matrix[] | "\(.src) \(.dst) \(.bytes) \(.ops)"' "$json" | sort)
  while read -r src dst bytes ops lost; do
    [[ -n $src ]] || continue
    if [[ $lost -ne 0 ]]; then
      echo "  note: $src -> $dst lost $lost packets on the fabric: not compared"
      continue
    fi
    local mine
    mine=$(awk -v s="$src" -v d="$dst" '$1 == s && $2 == d { print $3, $4 }' <<<"$analyzed")
    # Equal, but for the unconfirmed tails the matrix counts as moved: at most those were not transmitted
    # (qperf destroys its QPs with WRs still queued).
    awk -v m="$mine" -v b="$bytes" -v o="$ops" -v ub="$unconfirmed_bytes" -v uo="$unconfirmed" 'BEGIN {
        split(m, x, " "); if (m == "") exit 1
        exit !(x[1] >= b && x[1] - b <= ub && x[2] >= o && x[2] - o <= uo) }' ||
      fail "$src -> $dst: fabric $bytes bytes in $ops ops, analyzer ${mine:-nothing} ($unconfirmed_bytes B in $unconfirmed ops unconfirmed)"
    [[ $mine == "$bytes $ops" ]] || echo "  note: $src -> $dst: analyzer $mine, fabric $bytes $ops: unconfirmed WRs that had not crossed"
  done <<<"$fabric"
  local cells_fabric cells_mine
  cells_fabric=$(grep -c . <<<"$fabric")
  cells_mine=$(grep -c . <<<"$analyzed")
  [[ $cells_fabric -eq $cells_mine ]] || fail "the fabric has $cells_fabric node pairs, the analyzer $cells_mine"
  jq -r '"  ok: \(.ops.total) ops, \(.ops.unconfirmed) unconfirmed at teardown (\(.ops.unconfirmed_bytes) B), \(.ops.flushed_at_teardown) flushed at teardown, \(.ops.implied) implied"' "$json"
}

# tag_lat: the SEND latency is UCX's own one-way figure, within what a loaded machine adds (UCX measures it in
# the same run), not the time of the next signaled completion, which is 100x that.
check_tag_lat() {
  local json=$work/$case_name.json
  [[ -f $json ]] || return
  local ucx_p50 p50 samples expected
  ucx_p50=$(awk '/^Final:/ { print $3 }' "$work/$case_name.log.client")
  read -r p50 samples expected < <(jq -r '.ops.by_opcode.SEND | "\(.latency_ns.p50) \(.latency_ns.count) \(.completed - .implied)"' "$json")
  [[ $samples == "$expected" ]] || fail "SEND latency from $samples operations, $expected had their own completion"
  awk -v p="$p50" -v u="$ucx_p50" 'BEGIN { exit !(p != "null" && p <= 4 * u * 1000 + 20000) }' ||
    fail "SEND latency p50 ${p50} ns against UCX's ${ucx_p50} us"
  echo "  ok: SEND p50 $p50 ns over $samples signaled completions (UCX: $ucx_p50 us)"
}

if have ucx_perftest; then
  for tls in rc_verbs ud_verbs; do
    case_name=ucx_${tls}_tag_lat
    echo "== $case_name"
    # rc_verbs needs a transport for its wire-up: ud_verbs (UCX's own default choice).
    full=$tls
    [[ $tls == rc_verbs ]] && full=rc_verbs,ud_verbs
    UCX_TLS=$full record_pair -- ucx_perftest -p 18515 -- ucx_perftest localhost -p 18515 -t tag_lat -n 2000
    check $?
    check_tag_lat
  done
  case_name=ucx_rc_verbs_tag_bw_64k
  echo "== $case_name"
  UCX_TLS=rc_verbs,ud_verbs record_pair -- ucx_perftest -p 18515 -- ucx_perftest localhost -p 18515 -t tag_bw -s 65536 -n 500
  check $?
fi

if have mpirun && [[ -x $mpi_program ]]; then
  case_name=mpi_pml_ucx
  echo "== $case_name"
  record_mpi "UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=sfab_0:1 UCX_WARN_UNUSED_ENV_VARS=n" --mca pml ucx
  check $?
  case_name=mpi_btl_openib
  echo "== $case_name"
  # mpi_leave_pinned 0: a traced openib rank on the fabric ends its device teardown early (its large CQs and most
  # MRs are never destroyed), and with leave_pinned its registration cache, closed later in MPI_Finalize, then calls
  # into the already unloaded openib component: a SIGSEGV for some environment sizes. Open, not understood yet
  # (docs/softfabric.md, "Requirements and limits"); without the cache the run and its teardown flushes are still checked.
  record_mpi "OMPI_MCA_btl_openib_warn_no_device_params_found=0" --mca pml ob1 --mca btl openib,self --mca btl_openib_allow_ib 1 \
    --mca mpi_leave_pinned 0
  check $?
  # Its teardown moves every QP to ERR and polls the flushes of its pre-posted receives.
  flushed=$(jq -r '.ops.flushed_at_teardown' "$work/$case_name.json" 2>/dev/null)
  [[ ${flushed:-0} -gt 0 ]] || fail "no flushed_at_teardown (${flushed:-no document})"
fi

if have qperf; then
  case_name=qperf
  echo "== $case_name"
  KILL_SERVER=1 record_pair -- qperf -- qperf -t 1 -i sfab_0:1 localhost rc_bw rc_lat ud_lat
  check $?
fi

if have ib_write_bw; then
  case_name=ib_write_bw
  echo "== $case_name"
  record_pair -- ib_write_bw -d sfab_0 -s 65536 -n 2000 -- ib_write_bw -d sfab_0 -s 65536 -n 2000 localhost
  check $?
  bytes=$(jq -r '.ops.by_opcode.RDMA_WRITE.completed_bytes' "$work/$case_name.json" 2>/dev/null)
  [[ $bytes == $((2000 * 65536)) ]] || fail "RDMA_WRITE completed_bytes $bytes, ib_write_bw -n 2000 -s 65536 writes $((2000 * 65536))"

  # Counters mode: the always-on mode's matrix, rails and per-QP counts.
  case_name=ib_write_bw_counters
  echo "== $case_name"
  record_pair --mode counters -- ib_write_bw -d sfab_0 -s 4096 -n 50000 -- ib_write_bw -d sfab_0 -s 4096 -n 50000 localhost
  check $?
  json=$work/$case_name.json
  if [[ -f $json ]]; then
    [[ $(jq -r '.trace.mode' "$json") == counters ]] || fail "trace.mode $(jq -r '.trace.mode' "$json")"
    got=$(jq -r '[.counters.per_qp[] | select(.posted_wrs > 0)] | map("\(.node) \(.posted_wrs) \(.posted_bytes) \(.peer.node)") | join(";")' "$json")
    [[ $got == "node1 50000 204800000 node0" ]] || fail "per-QP counters: $got"
    rails=$(jq -r '[.rails[] | "\(.node) \(.bytes_tx) \(.bytes_rx)"] | join(";")' "$json")
    [[ $rails == "node0 0 204800000;node1 204800000 0" ]] || fail "rails: $rails"
    jq -e '.counters.needs_per_operation_events | length > 0' "$json" >/dev/null || fail "no list of what counters cannot give"
    "$analyzer" "$work/$case_name" >"$work/$case_name.txt" 2>&1
    grep -q "^Operations: 0" "$work/$case_name.txt" && fail "the text report shows 'Operations: 0'"
    grep -q "^Counters (counters mode" "$work/$case_name.txt" || fail "the text report has no Counters section"
    echo "  ok: 50000 WRs, 204800000 bytes node1 -> node0 from counters"
  fi
fi

# A trace without SigmaTrace events: an LTTng session that enabled only lttng-ust's own state dump.
case_name=no_sigmatrace_events
echo "== $case_name"
if lttng create foreign --output="$work/foreign" >/dev/null && lttng enable-event -u 'lttng_ust_statedump:*' >/dev/null &&
   lttng add-context -u -t vpid >/dev/null && lttng start >/dev/null; then
  "$synth" traffic --ranks 1 --truth "$work/foreign.truth.json" >/dev/null 2>&1
  lttng stop >/dev/null
  lttng destroy >/dev/null
  ran=$((ran + 1))
  "$analyzer" "$work/foreign" --quiet 2>"$work/foreign.err"
  rc=$?
  [[ $rc -eq 3 ]] || fail "exit status $rc, expected 3"
  grep -q "No SigmaTrace events in the trace: path=$work/foreign" "$work/foreign.err" || fail "message: $(cat "$work/foreign.err")"
  echo "  ok: exit $rc: $(head -c 120 "$work/foreign.err")"
else
  echo "  skipped: cannot create an LTTng session here"
fi

[[ $ran -gt 0 ]] || { echo "SKIP: none of ucx_perftest, mpirun, qperf, ib_write_bw is installed"; exit 77; }
[[ $failures -eq 0 ]] || { echo "$failures check(s) failed"; exit 1; }
echo "OK: $ran runs, no false finding, every matrix equal to the fabric's"
