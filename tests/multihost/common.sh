# common.sh: what every many-host test starts with. Source it from a test script run as
#   tests/support/sandbox.sh TEST.sh SIGMATRACE
# after setting `tools` (the programs the test needs besides SigmaTrace's); it sets sigmatrace, analyze, alltoall
# (st-alltoall), skip/fail, and `work` (a directory removed at the end), skips (exit 77) without root, the
# sandbox, a tool or st-alltoall, and brings up 4 hosts (tests/support/hosts.sh), taken down at the end.
set -uo pipefail
sigmatrace=$(realpath "$1")
bindir=$(dirname "$sigmatrace")
analyze=$bindir/sigmatrace-analyze
alltoall=$(dirname "$bindir")/libexec/sigmatrace/st-alltoall

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 && ${SIGMATRACE_SANDBOXED:-0} == 1 ]] || skip "needs root inside tests/support/sandbox.sh (namespaces)"
for tool in ip nsenter unshare mpirun lttng-sessiond python3 ${tools:-}; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[[ -x $alltoall ]] || skip "st-alltoall is not built (no MPI development files)"

source "$(dirname "${BASH_SOURCE[0]}")/../support/hosts.sh"
work=$(mktemp -d /tmp/sigmatrace-multihost.XXXXXX)
trap 'hosts_down; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT   # ctest's timeout: the hosts' daemons still go
hosts_up 4 || fail "cannot set up the hosts"
