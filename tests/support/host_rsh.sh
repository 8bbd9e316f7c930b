#!/usr/bin/env bash
# host_rsh.sh HOST CMD...: Open MPI's remote launcher (plm_rsh_agent) for the hosts of tests/support/hosts.sh,
# in place of ssh: runs the command line CMD on HOST (its namespaces and LTTNG_HOME) through a shell, as sshd
# would.
set -euo pipefail
host=$1; shift
: "${HOSTS_DIR:?host_rsh.sh runs under hosts_mpirun (tests/support/hosts.sh)}"
pid=$(cat "$HOSTS_DIR/$host/pid") || { echo "host_rsh.sh: no host $host" >&2; exit 255; }
exec nsenter -t "$pid" --net --mount --uts -- env LTTNG_HOME="$HOSTS_DIR/$host/home" sh -c "$*"
