#!/usr/bin/env bash
# The fabric provider's cost per operation, on unshaped links (bandwidth unlimited, latency 0).
# Usage (as root, from the repository root, after building):
#   tests/support/sandbox.sh bench/softfabric/hot_path_bench.sh build/stage/bin/sigmatrace build/bench/bin/softfabric_hot_path_bench
set -euo pipefail
sigmatrace=${1:?usage: hot_path_bench.sh SIGMATRACE BENCH_BINARY}
bench=${2:?usage: hot_path_bench.sh SIGMATRACE BENCH_BINARY}
conf=$(mktemp /tmp/unshaped.XXXXXX)
trap 'rm -f "$conf"' EXIT
printf 'bandwidth unlimited\nlatency 0\n' >"$conf"
exec "$sigmatrace" fabric --rails 2 --config "$conf" --name "hotpath-$$" -- "$bench" --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true
