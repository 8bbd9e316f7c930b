#!/usr/bin/env bash
# reader_equivalence.sh ANALYZER DATA_DIR: every committed trace under DATA_DIR read by both readers
# (SIGMATRACE_ANALYZE_READER=babeltrace and =direct, docs/analyzer.md "Readers") gives the same exit status,
# text report, stderr and JSON document. `direct` refuses nothing silently: a trace it does not accept exits 2
# with its reason, which differs from the Babeltrace2 run's output and fails this test.
set -uo pipefail
analyzer=$1; data=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
n=0
for dir in "$data"/*/; do
  trace=$(basename "$dir")
  for reader in babeltrace direct; do
    (cd "$data" && SIGMATRACE_ANALYZE_READER=$reader "$analyzer" "$trace" --json "$out/$reader.json" \
       >"$out/$reader.txt" 2>"$out/$reader.stderr")
    echo $? >"$out/$reader.rc"
  done
  for ext in rc txt stderr json; do
    if ! diff -u "$out/babeltrace.$ext" "$out/direct.$ext"; then
      echo "reader_equivalence.sh: $trace: the readers' $ext differ" >&2
      status=1
    fi
  done
  n=$((n + 1))
done
[[ $n -gt 0 ]] || { echo "reader_equivalence.sh: no trace under $data" >&2; exit 1; }
echo "reader_equivalence.sh: $n traces compared"
exit $status
