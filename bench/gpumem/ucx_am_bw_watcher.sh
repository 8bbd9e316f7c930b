#!/usr/bin/env bash
# Does the GPU watcher keep up with UCX's direct mlx5 path at the fabric's full rate? (docs/PERFORMANCE.md,
# "GPU watcher"). Run inside tests/support/sandbox.sh --lttng, from a build tree:
#
#   tests/support/sandbox.sh --lttng bench/gpumem/ucx_am_bw_watcher.sh build/stage/bin/sigmatrace ITERS [KNOB=VALUE...]
#
# Records `ucx_perftest -t am_bw -D short -s 64 -x rc_mlx5 -n ITERS -w 0 $PERFTEST_ARGS` between fabric nodes 0 and 1
# (the KNOBs, e.g. SIGMATRACE_GPU_WATCH_IDLE_PERIOD_US=100, go to both sides) and prints one line: the message rate
# UCX reports, WQEs the client posted (the fabric's message counter node1 -> node0), the client's operations in the
# trace, WQEBBs lost (the watchers' gpu_watch_stats lost_wqes as the analyzer sums them; a 64-byte short AM is 2
# WQEBBs), the client's send ring (WQEBBs), and the client watcher thread's (st-gpu-watch) CPU time (schedstat)
# over the client's run time. FABRIC_BANDWIDTH (e.g. 2MB/s) shapes every link, which paces UCX's posting.
set -uo pipefail
sigmatrace=$1 iters=$2
shift 2
analyze="$(dirname "$sigmatrace")/sigmatrace-analyze"
export UCX_NET_DEVICES=sfab_0:1 UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=rc_mlx5
for kv in "$@"; do export "${kv?}"; done
work=$(mktemp -d /tmp/ucx-watcher-bench.XXXXXX)
fabric_conf=""
if [[ -n ${FABRIC_BANDWIDTH:-} ]]; then
  fabric_conf=$work/fabric.conf
  echo "bandwidth $FABRIC_BANDWIDTH" >"$fabric_conf"
fi
[[ -n ${SIGMATRACE_BENCH_KEEP:-} ]] || trap 'rm -rf "$work"' EXIT

# The client's watcher thread (st-gpu-watch): its CPU time in ns (schedstat), sampled beside the client (inside the
# recording, which runs its command in namespaces of its own) until the client ends; the last value is kept.
sample_watcher() {
  local pid=$1 task comm ns rest
  unset LD_PRELOAD  # the sampler itself stays untraced; it uses bash builtins but for sleep
  while [[ ! -e $work/done ]]; do
    for task in /proc/"$pid"/task/*; do
      read -r comm <"$task/comm" 2>/dev/null || continue
      [[ $comm == st-gpu-watch ]] || continue
      # shellcheck disable=SC2034
      read -r ns rest <"$task/schedstat" 2>/dev/null && echo "$ns" >"$work/watcher_cpu_ns"
    done
    sleep 0.02
  done
}

client_run() {
  local start pid sampler rc
  start=$(date +%s.%N)
  "$sigmatrace" fabric --node 1 ${fabric_conf:+--config "$fabric_conf"} -- ucx_perftest localhost -p 18515 \
    -t am_bw -D short -s 64 -x rc_mlx5 -d sfab_0:1 -n "$iters" -w 0 ${PERFTEST_ARGS:-} >"$work/client.log" 2>&1 &
  pid=$!
  sample_watcher $pid &
  sampler=$!
  wait $pid
  rc=$?
  touch "$work/done"
  wait $sampler
  echo "$rc $(echo "$(date +%s.%N) - $start" | bc)" >"$work/client.rc"
}
export -f client_run sample_watcher
export sigmatrace iters work fabric_conf

"$sigmatrace" record -o "$work/trace" -- bash -c '
  "$sigmatrace" fabric --node 0 ${fabric_conf:+--config "$fabric_conf"} -- ucx_perftest -p 18515 \
    >"$work/server.log" 2>&1 &
  for _ in $(seq 200); do
    awk '\''substr($2, length($2) - 4) == ":4853" && $4 == "0A" { f = 1 } END { exit !f }'\'' /proc/net/tcp && break
    sleep 0.05
  done
  client_run
  wait' >"$work/record.log" 2>&1
cpu_ns=$(cat "$work/watcher_cpu_ns" 2>/dev/null || echo 0)
read -r rc seconds <"$work/client.rc"
[[ $rc -eq 0 ]] || { echo "ucx_perftest failed ($rc)"; cat "$work/client.log"; exit 1; }
"$sigmatrace" fabric --stats --json >"$work/stats.json"
"$analyze" "$work/trace" --json "$work/analysis.json" >/dev/null 2>&1 || { echo "analysis failed"; exit 1; }
python3 - "$work" "$cpu_ns" "$seconds" "$* ${PERFTEST_ARGS:-} ${FABRIC_BANDWIDTH:+bandwidth $FABRIC_BANDWIDTH}" <<'EOF'
import json, re, sys
work, cpu_ns, seconds, knobs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4].strip()
stats = json.load(open(f"{work}/stats.json"))
posted = sum(l["ops"] for l in stats["links"] if l["from"].startswith("node1/") and l["to"].startswith("node0/"))
a = json.load(open(f"{work}/analysis.json"))
client = [p for p in a["processes"] if p["node"] == "node1"]
observed = client[0]["ops"] if client else 0
lost = 0
for w in a.get("warnings", []):
    m = re.match(r"([\d,]+) GPU WQEs were overwritten", w)
    if m:
        lost += int(m.group(1).replace(",", ""))
rate = next((l.split()[-1] for l in open(f"{work}/client.log") if l.startswith("Final:")), "?")
cpu = (f"client watcher CPU {cpu_ns / 1e9:.3f} s of {seconds:.2f} s ({100 * cpu_ns / 1e9 / seconds:.1f}%)"
       if cpu_ns else "client watcher CPU not sampled (the run ended between two samples)")
print(f"[{knobs or 'default'}]: {rate} msg/s; client posted {posted}, in trace {observed}, lost {lost} WQEBBs; {cpu}")
EOF
