#!/usr/bin/env bash
# Two named fabrics on one machine are unrelated: pingpongs run on both at the same time, each fabric counts
# only its own traffic, and a launch with another configuration is refused while a fabric is in use.
# Usage: two_fabrics_test.sh SIGMATRACE PAIR_SCRIPT (inside tests/support/sandbox.sh)
set -uo pipefail
sigmatrace=$1 pair=$2
fail() { echo "FAILED: $*"; exit 1; }

"$pair" "$sigmatrace" --fabric "--name alpha" --port 18515 -- ibv_rc_pingpong -d sfab_0 -p 18515 -c -n 100 -s 1000 \
  >/tmp/alpha.$$ 2>&1 &
alpha=$!
"$pair" "$sigmatrace" --fabric "--name beta" --port 18516 --server-node 4 --client-node 5 \
  -- ibv_rc_pingpong -d sfab_0 -p 18516 -c -n 100 -s 2000 >/tmp/beta.$$ 2>&1 &
beta=$!
wait $alpha || { cat /tmp/alpha.$$; fail "pingpong on fabric alpha"; }
wait $beta || { cat /tmp/beta.$$; fail "pingpong on fabric beta"; }
rm -f /tmp/alpha.$$ /tmp/beta.$$

a=$("$sigmatrace" fabric --stats --name alpha)
b=$("$sigmatrace" fabric --stats --name beta)
echo "$a"; echo "$b"
grep -Eq '^node0/sfab_0 +node1/sfab_0 +100000 +100 ' <<<"$a" || fail "alpha counters"
grep -Eq '^node4/sfab_0 +node5/sfab_0 +200000 +100 ' <<<"$b" || fail "beta counters"
grep -q node4 <<<"$a" && fail "alpha counted beta's traffic"
grep -q node0 <<<"$b" && fail "beta counted alpha's traffic"

# A fabric in use refuses a launch with another configuration, and says why.
conf=$(mktemp /tmp/fabric-conf.XXXXXX)
echo "latency 50us" >"$conf"
"$sigmatrace" fabric --name gamma -- sleep 3 &
holder=$!
sleep 0.5
out=$("$sigmatrace" fabric --name gamma --config "$conf" -- true 2>&1) && fail "a busy fabric accepted another configuration"
grep -q "is in use (pid $holder) with another configuration" <<<"$out" || fail "unexpected message: $out"
kill $holder; wait $holder 2>/dev/null
# Once idle, the same launch (re)starts it with the new configuration.
"$sigmatrace" fabric --name gamma --config "$conf" -- true || fail "an idle fabric refused a new configuration"
rm -f "$conf"
echo OK
