#!/usr/bin/env bash
# fabric_pingpong.sh [BUILD_DIR] [ROUNDS] [--classic]: where a traced message's time goes (fabric_pingpong.cpp).
#
# Each round runs the ping-pong (server pinned to CPU 0, client to CPU 1, ITERS messages) once per variant,
# back to back:
#   plain    no tracer
#   preload  libsigmatrace.so preloaded, no session daemon (wrappers installed, nothing recorded)
#   session  under `sigmatrace record` with SIGMATRACE_EVENTS=none (daemons and lttng-ust registered; the data
#            path records nothing)
#   traced   under `sigmatrace record`
# and prints each variant's medians: one-way latency, the client's posting call, and its doorbell
# (ibv_wr_complete; --classic posts with ibv_post_send instead, doorbell 0). At the end: per variant, the
# median over rounds of each, and the difference to `plain`.
#
# Runs itself inside tests/support/sandbox.sh (private /dev/shm for the fabric).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-5}
api=--wr
[[ ${3:-} == --classic ]] && api=
if [[ ${SIGMATRACE_SANDBOXED:-0} != 1 ]]; then
  exec "$here/tests/support/sandbox.sh" "$0" "$build" "$rounds" ${3:+"$3"}
fi
sigmatrace=$build/stage/bin/sigmatrace
# shellcheck source=bench/interpose/stats.sh
source "$here/bench/interpose/stats.sh"
program=$build/bench/bin/fabric_pingpong
preload=$build/stage/lib/libsigmatrace.so
iters=${ITERS:-100000}
[[ -x $program ]] || { echo "fabric_pingpong.sh: build $program first (cmake --build $build)" >&2; exit 2; }
work=$(mktemp -d /tmp/fabric-pingpong.XXXXXX)
trap 'rm -rf "$work"' EXIT

# pair DIR: server and client (each its own fabric node), prints the client's result line
pair() {
  local dir=$1
  taskset -c 0 "$sigmatrace" fabric --name pingpong --node 0 -- "$program" --role 0 --dir "$dir" --iters "$iters" $api \
    >"$dir/server.out" 2>&1 &
  local server=$!
  taskset -c 1 "$sigmatrace" fabric --name pingpong --node 1 -- "$program" --role 1 --dir "$dir" --iters "$iters" $api \
    >"$dir/client.out" 2>&1 || { cat "$dir/client.out" >&2; return 1; }
  wait "$server" || { cat "$dir/server.out" >&2; return 1; }
  cat "$dir/client.out"
}
export -f pair
export sigmatrace program iters api

run() {  # run VARIANT: the client's result line
  local dir
  dir=$(mktemp -d "$work/run.XXXXXX")
  case $1 in
    plain) pair "$dir" ;;
    preload) LD_PRELOAD=$preload pair "$dir" ;;
    session) SIGMATRACE_EVENTS=none "$sigmatrace" record -o "$dir/trace" -- bash -c "pair $dir" 2>"$dir/record.log" ;;
    traced) "$sigmatrace" record -o "$dir/trace" -- bash -c "pair $dir" 2>"$dir/record.log" ;;
  esac
  rm -rf "$dir"
}

variants=(plain preload session traced)
for r in $(seq "$rounds"); do
  for v in "${variants[@]}"; do
    line=$(run "$v" | grep '^one_way_ns=') || { echo "fabric_pingpong.sh: the $v run failed" >&2; exit 1; }
    echo "round $r $v $line"
    echo "$line" | tr ' ' '\n' | sed 's/=/ /' | while read -r key value; do echo "$value" >>"$work/$v.$key"; done
  done
done

echo
echo "medians over $rounds rounds, $iters messages each (ns; in brackets: minus plain)"
for v in "${variants[@]}"; do
  out="  $v:"
  for key in one_way_ns post_ns doorbell_ns; do
    m=$(median <"$work/$v.$key")
    base=$(median <"$work/plain.$key")
    out+=" $key=$m [$(awk -v a="$m" -v b="$base" 'BEGIN { printf "%+d", a - b }')]"
  done
  echo "$out"
done
