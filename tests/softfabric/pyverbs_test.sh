#!/usr/bin/env bash
# pyverbs_test.sh SIGMATRACE: rdma-core's own pyverbs test suite (the tests/ directory Debian's python3-pyverbs
# ships under /usr/share/doc/rdma-core/tests, rdma-core v44) on fabric node 0's sfab_0, untraced and then under
# `sigmatrace record`, with the same random seed. Passes when no test fails or errors except the divergences
# listed below, and every test has the same outcome with and without the tracer. Inside tests/support/sandbox.sh
# --lttng. KEEP=1 keeps its work directory (the unpacked tests, both runs' outcome lines, the trace).
set -uo pipefail
sigmatrace=$1
seed=${PYVERBS_SEED:-7}
python=/usr/bin/python3  # Debian's interpreter: pyverbs is installed for it, not for other pythons on PATH
docs=/usr/share/doc/rdma-core/tests
[[ -f $docs/run_tests.py ]] || { echo "SKIP: $docs/run_tests.py missing (install python3-pyverbs)"; exit 77; }
"$python" -c 'import pyverbs.device' 2>/dev/null || { echo "SKIP: $python cannot import pyverbs (install python3-pyverbs)"; exit 77; }
work=$(mktemp -d /tmp/pyverbs-test.XXXXXX)
trap '[[ ${KEEP:-0} == 1 ]] || rm -rf "$work"' EXIT
cp -r "$docs" "$work/tests" && gunzip -f "$work"/tests/*.gz || { echo "FAILED: cannot unpack $docs"; exit 1; }
driver=$(dirname "$0")/pyverbs_driver.py

# Divergences the fabric cannot remove, each with its reason (docs/softfabric.md, "rdma-core's tests"):
#   ibv_import_device: libibverbs answers EINVAL itself for a command fd that is not a character device, before
#   any provider runs; a fabric context's cmd_fd is a pipe (src/softfabric/provider/command_channel.h).
known='^error tests\.test_shared_pd\.SharedPDTestCase\.test_imported_[a-z_]+ .*Failed to import device\. Errno: 22'

run() {  # OUT [record args]: one run of the suite, its lines in OUT
  local out=$1; shift
  "$@" "$sigmatrace" fabric --node 0 -- "$python" "$driver" "$work/tests" "$seed" --dev sfab_0 >"$out" 2>"$out.err"
}
status=0
run "$work/plain"
run "$work/traced" "$sigmatrace" record -o "$work/trace" --
for kind in plain traced; do
  f=$work/$kind
  if ! grep -q '^# ran [0-9]' "$f"; then
    echo "FAILED: the $kind run did not finish"; tail -n 20 "$f.err"; status=1; continue
  fi
  ran=$(sed -n 's/^# ran //p' "$f")
  echo "$kind: ran $ran: $(grep -c '^ok ' "$f") ok, $(grep -c '^skip ' "$f") skipped, $(grep -cE '^(fail|error) ' "$f") failed"
  unexpected=$(grep -E '^(fail|error) ' "$f" | grep -vE "$known")
  [[ -z $unexpected ]] || { echo "FAILED ($kind):"; echo "$unexpected"; status=1; }
  [[ $ran -ge 250 ]] || { echo "FAILED ($kind): only $ran tests ran"; status=1; }
done
# Same outcome per test (the detail of a failure may name addresses; the outcome and the test must match).
if ! diff <(awk '$1 != "#" { print $1, $2 }' "$work/plain") <(awk '$1 != "#" { print $1, $2 }' "$work/traced"); then
  echo "FAILED: outcomes differ with the tracer preloaded (< untraced, > traced)"; status=1
fi
grep -q 'sigmatrace record: traced processes: 1$' "$work/traced.err" \
  || { echo "FAILED: the traced run was not traced: $(grep 'sigmatrace record' "$work/traced.err")"; status=1; }
exit $status
