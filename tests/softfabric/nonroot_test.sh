#!/usr/bin/env bash
# `sigmatrace fabric` as a non-root user: each launch needs a user + mount namespace, and all processes of a
# fabric must share one user namespace (process_vm_writev needs ptrace access). Runs ibv_rc_pingpong between
# two nodes as `nobody` (when run as root) or as the current user.
# Usage: nonroot_test.sh SIGMATRACE PAIR_SCRIPT (inside tests/support/sandbox.sh)
set -uo pipefail
sigmatrace=$1 pair=$2
as_user=()
if [[ $(id -u) -eq 0 ]]; then
  command -v runuser >/dev/null || { echo "SKIP: runuser not available"; exit 77; }
  as_user=(runuser -u nobody --)
  # The mount point libibverbs needs; a root launch would create it the same way (docs/softfabric.md).
  [[ -d /dev/infiniband ]] || mkdir /dev/infiniband
fi
"${as_user[@]}" test -x "$sigmatrace" || { echo "SKIP: $sigmatrace is not executable by nobody"; exit 77; }
"${as_user[@]}" unshare --user --mount true 2>/dev/null || { echo "SKIP: unprivileged user namespaces are disabled"; exit 77; }
"${as_user[@]}" "$pair" "$sigmatrace" --fabric "--name nonroot-$$" --port 23456 \
  --expect-link node0/sfab_0:node1/sfab_0 --expect-link node1/sfab_0:node0/sfab_0 \
  -- ibv_rc_pingpong -d sfab_0 -p 23456 -c -n 20 -s 4096
