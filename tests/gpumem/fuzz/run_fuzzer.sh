#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time over the committed corpus (ctest entry gpumem_fuzz_*).
#   run_fuzzer.sh FUZZER_BINARY CORPUS_DIR [SECONDS]
# New interesting inputs go to a scratch directory (the committed corpus is only read); a crash leaves its input
# there and the path is printed. SIGMATRACE_FUZZ_SECONDS overrides the time (default 20).
set -euo pipefail
bin=$1 corpus=$2 seconds=${3:-${SIGMATRACE_FUZZ_SECONDS:-20}}
[[ -x $bin ]] || { echo "run_fuzzer.sh: fuzzer not built: $bin" >&2; exit 2; }
[[ -d $corpus ]] || { echo "run_fuzzer.sh: corpus directory missing: $corpus" >&2; exit 2; }
scratch=$(mktemp -d "${TMPDIR:-/tmp}/sigmatrace-fuzz.XXXXXX")
trap 'rm -rf "$scratch/new"' EXIT
mkdir -p "$scratch/new"
status=0
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$scratch/" "$scratch/new" "$corpus" || status=$?
if [[ $status -ne 0 ]]; then
  echo "run_fuzzer.sh: $bin failed (status $status); crashing input(s) kept in $scratch:" >&2
  ls -l "$scratch" >&2
  exit 1
fi
rm -rf "$scratch"
