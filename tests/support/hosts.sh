# hosts.sh: hosts on one machine, for the many-node tests. Source it inside a sandbox (tests/support/sandbox.sh:
# a network and mount namespace of the test's own), as root:
#
#   source tests/support/hosts.sh
#   hosts_up 4            # hosts h0..h3 and a relay host, each with lttng-sessiond / lttng-relayd running
#   host_run h2 CMD...    # CMD on host h2 (its network, mounts, hostname and session daemon)
#   hosts_down            # everything stopped and removed (also done at the sandbox's exit by the caller's trap)
#
# A host is a network, mount and UTS namespace, held open by one process:
#   - its hostname is its name (LTTng records it in the trace and lttng-relayd files the trace under it);
#   - its own /var/run/lttng (a tmpfs) and LTTNG_HOME, with its own lttng-sessiond;
#   - one address on a bridge that exists only in the test's network namespace: h<i> is 10.231.0.<i+1>, the
#     relay host 10.231.0.100 (HOSTS_RELAY_ADDR), where lttng-relayd listens on its default ports (live viewers too, on all addresses) and writes
#     under $HOSTS_DIR/relay.
# What hosts share: the process-ID space (the fabric checks its members' liveness by pid) and /dev/shm (the
# fabric is shared memory, so fabric nodes on different hosts talk) and the file system.
#
# Needs iproute2, util-linux (unshare, nsenter) and lttng-tools.

HOSTS_BRIDGE=stbr0
HOSTS_RELAY_ADDR=10.231.0.100
HOSTS_NAMES=()
declare -A HOSTS_PID=()     # host name -> the process holding its namespaces
HOSTS_DIR=""

# _hosts_enter NAME: the nsenter prefix that runs a command on host NAME.
_hosts_enter() {
  local pid=${HOSTS_PID[$1]:?unknown host $1}
  echo "nsenter -t $pid --net --mount --uts --"
}

# host_run NAME CMD...: CMD on host NAME, with that host's LTTNG_HOME.
host_run() {
  local name=$1; shift
  $(_hosts_enter "$name") env LTTNG_HOME="$HOSTS_DIR/$name/home" "$@"
}

# _host_add NAME ADDR: one host, its link to the bridge, its address and its mounts.
_host_add() {
  local name=$1 addr=$2 idx=${#HOSTS_NAMES[@]}
  # The holder: new namespaces; it waits until the test ends (killed by hosts_down).
  unshare --net --mount --uts --propagation private sleep infinity &
  HOSTS_PID[$name]=$!
  HOSTS_NAMES+=("$name")
  mkdir -p "$HOSTS_DIR/$name/home"
  echo "${HOSTS_PID[$name]}" >"$HOSTS_DIR/$name/pid"   # for host_rsh.sh
  local tries=0
  until [[ $(readlink "/proc/${HOSTS_PID[$name]}/ns/net") != "$(readlink /proc/self/ns/net)" ]]; do
    ((++tries < 200)) || { echo "hosts.sh: host $name did not start" >&2; return 1; }
    sleep 0.01
  done
  ip link add "sth$idx" type veth peer name "sth${idx}p"
  ip link set "sth${idx}p" netns "${HOSTS_PID[$name]}"
  ip link set "sth$idx" master "$HOSTS_BRIDGE" up
  $(_hosts_enter "$name") bash -c "
    set -e
    hostname $name
    ip link set lo up
    ip link set sth${idx}p name eth0
    ip addr add $addr/24 dev eth0
    ip link set eth0 up
    mkdir -p /var/run/lttng
    mount -t tmpfs -o mode=0755 sigmatrace-lttng-$name /var/run/lttng"
}

# hosts_up N: hosts h0..h(N-1) with a session daemon each, and the relay host with lttng-relayd.
hosts_up() {
  local n=$1 i
  HOSTS_DIR=$(mktemp -d /tmp/sigmatrace-hosts.XXXXXX)
  export HOSTS_DIR   # host_rsh.sh finds the hosts there
  ip link set lo up
  ip link add "$HOSTS_BRIDGE" type bridge
  ip link set "$HOSTS_BRIDGE" up
  for ((i = 0; i < n; i++)); do
    _host_add "h$i" "10.231.0.$((i + 1))" || return 1
    host_run "h$i" env -u LD_PRELOAD lttng-sessiond --daemonize --no-kernel >/dev/null 2>&1 \
      || { echo "hosts.sh: cannot start lttng-sessiond on h$i" >&2; return 1; }
  done
  _host_add relay "$HOSTS_RELAY_ADDR" || return 1
  mkdir -p "$HOSTS_DIR/relay/out"
  host_run relay env -u LD_PRELOAD lttng-relayd --daemonize --output="$HOSTS_DIR/relay/out" --live-port=tcp://0.0.0.0:5344 >/dev/null 2>&1 \
    || { echo "hosts.sh: cannot start lttng-relayd" >&2; return 1; }
  # Every host reaches the relay daemon (its control port) before the caller goes on.
  for ((i = 0; i < n; i++)); do
    host_run "h$i" timeout 5 bash -c "</dev/tcp/$HOSTS_RELAY_ADDR/5342" 2>/dev/null \
      || { echo "hosts.sh: h$i cannot reach lttng-relayd on $HOSTS_RELAY_ADDR:5342" >&2; return 1; }
  done
}

# hosts_mpirun HOST ARGS...: mpirun started on HOST, its ranks placed on the hosts through host_rsh.sh (Open
# MPI's remote launcher, as ssh would be), its traffic on the bridge. ARGS name the hosts (--host h0:2,h1:2).
# Ended after HOSTS_MPIRUN_TIMEOUT seconds (default 180), so a hung job fails its test instead of outliving it.
hosts_mpirun() {
  local name=$1; shift
  host_run "$name" timeout --kill-after=5 "${HOSTS_MPIRUN_TIMEOUT:-180}" mpirun --allow-run-as-root \
    --mca plm_rsh_agent "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/host_rsh.sh" \
    --mca oob_tcp_if_include 10.231.0.0/24 --mca btl self,vader,tcp --mca btl_tcp_if_include 10.231.0.0/24 \
    --mca pml ob1 "$@"
}

# hosts_relay_output: the directory lttng-relayd writes under (one subdirectory per host, then per session).
hosts_relay_output() { echo "$HOSTS_DIR/relay/out"; }

# _host_processes NAME: the processes in host NAME's network namespace, its holder excepted.
_host_processes() {
  local ns p
  ns=$(readlink "/proc/${HOSTS_PID[$1]}/ns/net") || return 0
  for p in /proc/[0-9]*; do
    [[ ${p#/proc/} == "${HOSTS_PID[$1]}" ]] && continue
    [[ $(readlink "$p/ns/net" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
  done
}

# hosts_down: stops every daemon and leftover process on the hosts (SIGTERM: daemons flush what they hold;
# SIGKILL after 5 s), then the holders; removes links and files.
hosts_down() {
  local name pids p
  for name in "${HOSTS_NAMES[@]}"; do
    pids=$(_host_processes "$name")
    [[ -n $pids ]] && kill $pids 2>/dev/null
  done
  for _ in $(seq 100); do
    pids=""
    for name in "${HOSTS_NAMES[@]}"; do pids+=$(_host_processes "$name"); done
    [[ -z $pids ]] && break
    sleep 0.05
  done
  for name in "${HOSTS_NAMES[@]}"; do
    for p in $(_host_processes "$name"); do kill_tree "$p"; done
  done
  for name in "${HOSTS_NAMES[@]}"; do
    kill "${HOSTS_PID[$name]}" 2>/dev/null || true
    wait "${HOSTS_PID[$name]}" 2>/dev/null || true
  done
  ip link del "$HOSTS_BRIDGE" 2>/dev/null || true
  [[ -n $HOSTS_DIR ]] && rm -rf "$HOSTS_DIR"
  HOSTS_NAMES=()
  HOSTS_PID=()
  HOSTS_DIR=""
}

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/kill_tree.sh"   # kill_tree PID
