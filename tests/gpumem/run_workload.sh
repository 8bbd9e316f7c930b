#!/usr/bin/env bash
# One GPU-style workload on 4 fabric nodes, untraced: the workload checks its own data and exits non-zero when
# anything is wrong. Usage (inside tests/support/sandbox.sh): run_workload.sh SIGMATRACE NAME PROGRAM
set -euo pipefail
sigmatrace=$1 name=$2 program=$3
command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed"; exit 77; }
[[ -x $program ]] || { echo "SKIP: $name not built"; exit 77; }
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
timeout 240 mpirun "${root[@]}" --oversubscribe -np 4 --mca btl self,vader --mca pml ob1 \
  "$sigmatrace" fabric --node rank -- "$program"
