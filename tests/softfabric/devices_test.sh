#!/usr/bin/env bash
# Debian's ibv_devices and ibv_devinfo -v, unmodified, list exactly the NICs of the node they run on.
# Usage: devices_test.sh SIGMATRACE (inside tests/support/sandbox.sh)
set -euo pipefail
sigmatrace=$1
fail() { echo "FAILED: $*"; exit 1; }

out=$("$sigmatrace" fabric --node 3 --rails 2 -- ibv_devices)
echo "$out"
grep -qE 'sfab_0[[:space:]]+5346000000030000' <<<"$out" || fail "ibv_devices does not list sfab_0 of node3 with its GUID"
grep -qE 'sfab_1[[:space:]]+5346000000030100' <<<"$out" || fail "ibv_devices does not list sfab_1 of node3 with its GUID"
[[ $(grep -c sfab_ <<<"$out") -eq 2 ]] || fail "ibv_devices lists another number of NICs than 2"
# Rail 0 comes first: programs without -d take the first device.
[[ $(grep -m1 -o 'sfab_[0-9]' <<<"$out") == sfab_0 ]] || fail "sfab_0 is not the first device"

info=$("$sigmatrace" fabric --node 3 --rails 2 -- ibv_devinfo -v -d sfab_1)
grep -q 'node_guid:.*5346:0000:0003:0100' <<<"$info" || fail "ibv_devinfo node_guid"
grep -q 'state:.*PORT_ACTIVE' <<<"$info" || fail "ibv_devinfo port state"
# LID = 1 + node * 8 + rail = 26
grep -q 'port_lid:.*26' <<<"$info" || fail "ibv_devinfo LID of node3/sfab_1 is not 26"
grep -q 'GID\[  0\]:.*fe80:0000:0000:0000:5346:0000:0003:0101' <<<"$info" || fail "ibv_devinfo GID[0]"
grep -q 'link_layer:.*InfiniBand' <<<"$info" || fail "ibv_devinfo link layer"

# The node name reaches the command, and the variables stay out of the caller's environment.
[[ $("$sigmatrace" fabric --node 5 -- printenv SOFTFABRIC_NODE) == node5 ]] || fail "SOFTFABRIC_NODE"
[[ -z ${SYSFS_PATH:-} ]] || fail "SYSFS_PATH leaked into the caller"
echo "OK"
