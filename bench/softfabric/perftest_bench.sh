#!/usr/bin/env bash
# perftest on the software fabric, between two processes on two nodes: ib_write_bw with 64 KiB messages and
# ib_send_lat with 2-byte messages, on unshaped links (bandwidth unlimited, latency 0) and on the default
# links (100 Gbit/s, 1 us). Results go to stdout as a Markdown table (docs/PERFORMANCE.md, "Software fabric").
#
# Usage (as root, from the repository root, after building):
#   tests/support/sandbox.sh bench/softfabric/perftest_bench.sh build/stage/bin/sigmatrace [ROUNDS]
# Each measurement runs ROUNDS times (default 3); the table shows the median and the range.
set -euo pipefail
sigmatrace=${1:?usage: perftest_bench.sh SIGMATRACE [ROUNDS]}
rounds=${2:-3}
pair=$(cd "$(dirname "$0")/../../tests/softfabric" && pwd)/fabric_pair.sh
work=$(mktemp -d /tmp/softfabric-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf 'bandwidth unlimited\nlatency 0\n' >"$work/unshaped.conf"
printf '# defaults: 100Gbit/s, 1us\n' >"$work/default.conf"

# run CONFIG NAME PROGRAM ARGS...: prints the figure of interest of one run
run() {
  local conf=$1 name=$2; shift 2
  "$pair" "$sigmatrace" --fabric "--name $name --config $conf" -- "$@" >"$work/out.txt" 2>&1 \
    || { cat "$work/out.txt" >&2; return 1; }
  case "$1" in
    ib_write_bw|ib_read_bw|ib_send_bw) awk '$1 == 65536 { print $4 }' "$work/out.txt" | tail -1 ;;  # BW average MB/s
    ib_send_lat|ib_write_lat|ib_read_lat) awk '$1 == 2 { print $5 }' "$work/out.txt" | tail -1 ;;   # t_typical usec
  esac
}

# median_range VALUES...: "median (min..max)"
median_range() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%s (%s..%s)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}

measure() {
  local label=$1 unit=$2; shift 2
  for conf in unshaped default; do
    local values=()
    for r in $(seq "$rounds"); do values+=("$(run "$work/$conf.conf" "bench-$conf-$r-$$" "$@")"); done
    printf '| %s | %s | %s %s | `%s` |\n' "$label" "$conf" "$(median_range "${values[@]}")" "$unit" "$*"
  done
}

echo "| measurement | links | result (median of $rounds, range) | command (server; the client adds localhost) |"
echo "|---|---|---|---|"
measure "ib_write_bw 64 KiB, ibv_wr_* path" "MB/s" ib_write_bw -d sfab_0 -s 65536 -n 20000
measure "ib_write_bw 64 KiB, classic post" "MB/s" ib_write_bw -d sfab_0 -s 65536 -n 20000 --use_old_post_send
measure "ib_read_bw 64 KiB" "MB/s" ib_read_bw -d sfab_0 -s 65536 -n 20000
measure "ib_send_lat 2 B, typical" "us" ib_send_lat -d sfab_0 -s 2 -n 20000
measure "ib_write_lat 2 B, typical" "us" ib_write_lat -d sfab_0 -s 2 -n 20000
