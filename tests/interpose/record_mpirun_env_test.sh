#!/usr/bin/env bash
# record_mpirun_env_test.sh SIGMATRACE MPI_PROGRAM: `sigmatrace record -- mpirun ...` forwards the tracer's
# variables in a way Open MPI accepts next to the user's own forwarding (tools/record/rank_forwarding.h), so
# mpirun runs, every rank is traced and every rank sees what the user forwarded:
#   1. -x FOO=bar on the command line (Open MPI 4.1 aborts on -x beside OMPI_MCA_mca_base_env_list);
#   2. OMPI_MCA_mca_base_env_list already set by the user;
#   3. mca_base_env_list in an MCA parameter file;
#   4. --mca mca_base_env_list on the command line.
# The ranks run on "another machine": mpirun is given --host othermachine:2 and, as its ssh, a stand-in that runs
# orted here with a login environment (PATH, HOME, and this sandbox's LTTNG_HOME and sanitizer options, which
# stand for that machine's own configuration), so a rank has exactly what mpirun forwarded, as on a remote node.
# Runs inside tests/support/sandbox.sh --lttng (record uses that daemon).
set -uo pipefail
sigmatrace=$1
program=$2
command -v mpirun >/dev/null || { echo "SKIP: mpirun (openmpi-bin) is not installed"; exit 77; }
[[ -x $program ]] || { echo "SKIP: $program was not built (no MPI)"; exit 77; }
work=$(mktemp -d /tmp/record-mpirun-env.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
root=()
[[ $(id -u) == 0 ]] && root=(--allow-run-as-root)
cat >"$work/ssh" <<'SSH'
#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) shift; break ;; esac; done
exec env -i PATH="$PATH" HOME="$HOME" LTTNG_HOME="$LTTNG_HOME" ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} \
  ${TSAN_OPTIONS:+TSAN_OPTIONS="$TSAN_OPTIONS"} /bin/sh -c "$*"
SSH
chmod +x "$work/ssh"
# Each rank prints what it was given, then becomes the fabric's MPI all-to-all (RDMA on every rank).
# HERE is set for mpirun only: a rank that sees it was not started the way a remote one is.
export HERE=1
rank=(sh -c 'echo "rank sees FOO=${FOO:-} BAZ=${BAZ:-} HERE=${HERE:-}"; exec "$0"' "$program")

# check NAME EXPECTED_LINE HOW: the run's exit status, what both ranks saw, both ranks in the trace.
check() {
  local name=$1 expected=$2 how=$3 out="$work/$1.out"
  [[ $rc == 0 ]] || { fail "$name: exit status $rc: $(tail -5 "$out")"; return; }
  [[ $(grep -c "^$expected\$" "$out") == 2 ]] || fail "$name: ranks did not both see '$expected': $(grep '^rank sees' "$out")"
  grep -qF "sigmatrace record: ranks on other machines get the tracer's variables: $how" "$out" \
    || fail "$name: forwarded otherwise than by '$how': $(grep 'ranks on other' "$out")"
  grep -q "sigmatrace record: traced processes: 2$" "$out" \
    || fail "$name: not 2 traced processes: $(grep 'sigmatrace record' "$out")"
  local vpids
  vpids=$(babeltrace2 "$work/$name" 2>/dev/null | grep -E 'sigmatrace:(post_send|deferred_records)' \
          | grep -o 'vpid = [0-9]*' | sort -u | wc -l)
  [[ $vpids == 2 ]] || fail "$name: data-path events from $vpids processes, expected 2"
}

mpi=(mpirun "${root[@]}" --host othermachine:2 --mca plm_rsh_agent "$work/ssh" -np 2 --mca btl self,vader
     --mca pml ob1)
fabric=("$sigmatrace" fabric --node rank --)

"$sigmatrace" record -o "$work/dash_x" -- "${mpi[@]}" -x FOO=bar "${fabric[@]}" "${rank[@]}" >"$work/dash_x.out" 2>&1
rc=$?; check dash_x "rank sees FOO=bar BAZ= HERE=" "-x LD_PRELOAD"

OMPI_MCA_mca_base_env_list='BAZ=qux' "$sigmatrace" record -o "$work/env_list" -- "${mpi[@]}" "${fabric[@]}" \
  "${rank[@]}" >"$work/env_list.out" 2>&1
rc=$?; check env_list "rank sees FOO= BAZ=qux HERE=" "appended to OMPI_MCA_mca_base_env_list: LD_PRELOAD"

printf 'mca_base_env_list = BAZ=file\n' >"$work/params.conf"
OMPI_MCA_mca_param_files="$work/params.conf" "$sigmatrace" record -o "$work/param_file" -- "${mpi[@]}" \
  "${fabric[@]}" "${rank[@]}" >"$work/param_file.out" 2>&1
rc=$?; check param_file "rank sees FOO= BAZ=file HERE=" "the parameter file's mca_base_env_list plus LD_PRELOAD"

"$sigmatrace" record -o "$work/mca_arg" -- "${mpi[@]}" --mca mca_base_env_list 'BAZ=arg' "${fabric[@]}" \
  "${rank[@]}" >"$work/mca_arg.out" 2>&1
rc=$?; check mca_arg "rank sees FOO= BAZ=arg HERE=" "appended to the command line's --mca mca_base_env_list: LD_PRELOAD"

[[ $status == 0 ]] && echo "all checks passed"
exit $status
