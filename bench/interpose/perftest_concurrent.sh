#!/usr/bin/env bash
# perftest_concurrent.sh [BUILD_DIR] [ROUNDS]: ib_write_bw (64 KiB) traced and untraced at the same time, each
# on a CPU of its own, and the traced/untraced ratio of their bandwidths per round.
#
# Why: perftest_overhead.sh runs the two back to back, and on a shared VM the fabric's send (a process_vm_writev
# system call) changes speed from one minute to the next by more than the tracer costs: its per-round ratios
# scatter by ±5-20%, so even 120 rounds leave the median's 95% interval ~1.7% wide (docs/PERFORMANCE.md). Run
# side by side, both pairs meet the same host conditions, and what differs between them is the tracer.
#
# How: ib_write_bw's server waits in a TCP read while the client moves data (the client's CPU does every copy),
# so each pair needs one CPU. The untraced pair runs on CPU x; the traced pair and everything tracing brings —
# `sigmatrace record`, its lttng-sessiond and consumer daemon, the emitter thread — run on CPU y, so the tracer
# pays for its daemons here (perftest_overhead.sh lets them use the idle server CPU). x and y swap every round.
# Both servers start first; once both listen, both clients start together (a file both wait for), and the two
# transfer windows overlap from their start (they end within the slower one's last few percent).
#
# BW_ITERS (default 300000, ~2 s) sets the iterations. CONTROL=1 runs the second pair untraced too (same CPUs, same
# start): the method's own bias and scatter, which a traced/untraced result must be read against. Needs 2 CPUs. Runs itself inside tests/support/sandbox.sh
# (private network namespace for ports 18515/18516, private /dev/shm).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-10}
if [[ ${SIGMATRACE_SANDBOXED:-0} != 1 ]]; then
  exec "$here/tests/support/sandbox.sh" "$0" "$build" "$rounds"
fi
(( $(nproc) >= 2 )) || { echo "perftest_concurrent.sh: needs 2 CPUs" >&2; exit 2; }
sigmatrace=$build/stage/bin/sigmatrace
# shellcheck source=bench/interpose/stats.sh
source "$here/bench/interpose/stats.sh"
work=$(mktemp -d /tmp/perftest-concurrent.XXXXXX)
trap 'rm -rf "$work"' EXIT
iters=${BW_ITERS:-300000}

# One pair, on the CPU its caller was pinned to: pair.sh NAME OUTDIR PORT GOFILE
cat >"$work/pair.sh" <<'EOF'
#!/usr/bin/env bash
set -uo pipefail
sigmatrace=$1 name=$2 out=$3 port=$4 go=$5 iters=$6
mkdir -p "$out"
bw=(ib_write_bw -d sfab_0 -s 65536 -n "$iters" -p "$port")
"$sigmatrace" fabric --name "$name" --node 0 -- "${bw[@]}" >"$out/server.out" 2>&1 &
server=$!
listening() {
  awk -v p="$(printf ':%04X' "$port")" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
for _ in $(seq 800); do listening && break; sleep 0.025; done
touch "$out/ready"
for _ in $(seq 2400); do [[ -e $go ]] && break; sleep 0.005; done
"$sigmatrace" fabric --name "$name" --node 1 -- "${bw[@]}" localhost >"$out/client.out" 2>&1
client_rc=$?
wait "$server"
server_rc=$?
[[ $client_rc == 0 && $server_rc == 0 ]]
EOF
chmod +x "$work/pair.sh"

: >"$work/ratios"
for r in $(seq "$rounds"); do
  x=$(( r % 2 )) y=$(( (r + 1) % 2 ))  # untraced on CPU x, traced on CPU y
  go=$work/go$r
  recorder=("$sigmatrace" record -o "$work/t$r.trace" --)
  [[ ${CONTROL:-0} == 1 ]] && recorder=()
  taskset -c "$y" "${recorder[@]}" "$work/pair.sh" "$sigmatrace" "tr$r" "$work/tr$r" 18516 "$go" "$iters" >"$work/tr$r.log" 2>&1 &
  traced=$!
  taskset -c "$x" "$work/pair.sh" "$sigmatrace" "pl$r" "$work/pl$r" 18515 "$go" "$iters" >"$work/pl$r.log" 2>&1 &
  plain=$!
  for _ in $(seq 2000); do [[ -e $work/tr$r/ready && -e $work/pl$r/ready ]] && break; sleep 0.005; done
  touch "$go"
  ok=1
  wait "$traced" || ok=0
  wait "$plain" || ok=0
  if [[ $ok == 0 ]]; then
    echo "round $r failed:" >&2
    cat "$work/tr$r.log" "$work/tr$r"/*.out "$work/pl$r"/*.out >&2
    exit 1
  fi
  [[ ${CONTROL:-0} == 1 ]] || grep -q 'discarded events: 0' "$work/tr$r.log" || { echo "events were discarded in round $r:" >&2; cat "$work/tr$r.log" >&2; }
  rm -rf "$work/t$r.trace"
  p=$(bw_of "$work/pl$r/client.out") t=$(bw_of "$work/tr$r/client.out")
  ratio=$(awk -v a="$t" -v b="$p" 'BEGIN { printf "%.4f", a / b }')
  echo "$ratio" >>"$work/ratios"
  echo "round $r: untraced (CPU $x) $p MB/s, traced (CPU $y) $t MB/s, ratio $ratio"
done
echo
what="traced and untraced"
[[ ${CONTROL:-0} == 1 ]] && what="CONTROL: untraced and untraced"
echo "ib_write_bw 64 KiB, $iters iterations, $what side by side, $rounds rounds: median of per-round" \
     "ratios $(median <"$work/ratios" | awk '{ printf "%.3f", $1 }') ($(range <"$work/ratios"), mean $(mean <"$work/ratios"))" \
     "(goal >= 0.98)"
