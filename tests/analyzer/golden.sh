#!/usr/bin/env bash
# golden.sh ANALYZER DATA_DIR CASE EXPECTED_DIR [ARGS...]: runs `ANALYZER CASE_TRACE ARGS --json ...` inside
# DATA_DIR (so the trace path printed is the relative one) and diffs stdout, stderr, the JSON document and the
# exit status against EXPECTED_DIR/CASE.{txt,stderr,json,rc}. With SIGMATRACE_UPDATE_GOLDEN=1 it rewrites
# them instead (review the diff before committing).
#
# CASE is NAME or NAME@VARIANT: the trace is DATA_DIR/NAME, the expectations are named after CASE.
set -uo pipefail
analyzer=$1; data=$2; case_name=$3; expected=$4; shift 4
trace=${case_name%%@*}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$data" && "$analyzer" "$trace" "$@" --json "$out/$case_name.json" >"$out/$case_name.txt" 2>"$out/$case_name.stderr")
echo $? >"$out/$case_name.rc"
if [[ ${SIGMATRACE_UPDATE_GOLDEN:-0} == 1 ]]; then
  cp "$out/$case_name".{txt,stderr,json,rc} "$expected/"
  echo "updated $expected/$case_name.*"
  exit 0
fi
status=0
for ext in rc txt stderr json; do
  if ! diff -u "$expected/$case_name.$ext" "$out/$case_name.$ext"; then
    echo "golden.sh: $case_name.$ext differs from $expected/$case_name.$ext (SIGMATRACE_UPDATE_GOLDEN=1 rewrites it)" >&2
    status=1
  fi
done
exit $status
