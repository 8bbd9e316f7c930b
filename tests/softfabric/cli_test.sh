#!/usr/bin/env bash
# `sigmatrace fabric` as a command: exit statuses (CMD's own, 127 when CMD is missing, 2 for usage and set-up
# errors) and messages that say what is wrong. Usage: cli_test.sh SIGMATRACE (inside tests/support/sandbox.sh)
set -uo pipefail
st=$1
fail() { echo "FAILED: $*"; exit 1; }

# expect STATUS PATTERN -- ARGS...: runs `sigmatrace fabric ARGS`, checks its status and that its output matches.
expect() {
  local want=$1 pattern=$2; shift 3
  local out rc
  out=$("$st" fabric "$@" 2>&1); rc=$?
  [[ $rc -eq $want ]] || fail "sigmatrace fabric $*: status $rc, expected $want; output: $out"
  [[ -z $pattern ]] || grep -qE -- "$pattern" <<<"$out" || fail "sigmatrace fabric $*: output lacks '$pattern': $out"
}

expect 0 "" -- -- true
expect 1 "" -- -- false
expect 7 "" -- -- sh -c 'exit 7'
expect 127 "Cannot run '/nonexistent/prog'" -- -- /nonexistent/prog
expect 2 "no command to run" --
expect 2 "unknown option '--bogus'" -- --bogus -- true
expect 2 "invalid --rails '9'" -- --rails 9 -- true
expect 2 "Invalid --node 'banana'" -- --node banana -- true
expect 2 "OMPI_COMM_WORLD_RANK" -- --node rank/2 -- true
expect 2 "Cannot read fabric configuration: path=/nonexistent.conf" -- --config /nonexistent.conf -- true
bad=$(mktemp /tmp/bad-conf.XXXXXX)
printf 'latency 1us\nslow node0 -> node1 factor 0.5\n' >"$bad"
expect 2 "$bad:2: the slow-down factor must be >= 1" -- --config "$bad" -- true
rm -f "$bad"
expect 2 "Invalid fabric name" -- --name 'a/b' -- true
expect 2 "No fabric named 'nosuch'" -- --stats --name nosuch
expect 0 "usage: sigmatrace fabric" -- --help
# The rank expression takes the launcher's rank variable.
out=$(OMPI_COMM_WORLD_RANK=5 "$st" fabric --node rank/2 -- printenv SOFTFABRIC_NODE) || fail "rank/2"
[[ $out == node2 ]] || fail "rank 5 with rank/2 gave $out, expected node2"
echo OK
