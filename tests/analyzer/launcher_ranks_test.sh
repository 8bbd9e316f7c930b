#!/usr/bin/env bash
# launcher_ranks_test.sh ANALYZE TRACE: sigmatrace-analyze started as several ranks that MPI cannot join (a
# launcher's variables alone): rank 0 analyzes the whole trace, says so once, and writes the same outputs as a
# plain run; the other ranks exit 0 at once, writing nothing. A rank variable without its launcher's size
# variable (Slurm's batch step passes SLURM_PROCID to everything a script runs) changes nothing. With mpirun
# installed, the same outputs under a real `mpirun -np 3`: a build with MPI joins the ranks, and this one host's
# trace is read on rank 0 alone (shares hold whole hosts), said once; a bad option is reported once and every
# rank leaves.
set -uo pipefail
analyze=$1 trace=$2
work=$(mktemp -d /tmp/sigmatrace-launcher.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# Outside any job, whatever the environment that runs the test.
clean=(env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE -u MV2_COMM_WORLD_RANK
       -u MV2_COMM_WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS -u FLUX_TASK_RANK -u FLUX_JOB_SIZE)
outputs() { echo --json "$work/$1.json" --html "$work/$1.html"; }

"${clean[@]}" "$analyze" "$trace" $(outputs plain) >"$work/plain.txt" 2>"$work/plain.err" || fail "plain run: $(cat "$work/plain.err")"
[[ -s $work/plain.json && -s $work/plain.html ]] || fail "the plain run wrote no outputs"

# Rank 1 of 2: nothing written, nothing said, exit 0.
"${clean[@]}" OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 "$analyze" "$trace" $(outputs r1) >"$work/r1.txt" 2>"$work/r1.err" \
  || fail "rank 1 exited $?"
[[ ! -e $work/r1.json && ! -e $work/r1.html && ! -s $work/r1.txt && ! -s $work/r1.err ]] \
  || fail "rank 1 wrote something: $(ls "$work"; cat "$work/r1.err")"
# Rank 0 of 2: the plain run's outputs and text, and one line that says what happened.
"${clean[@]}" OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "$analyze" "$trace" $(outputs r0) >"$work/r0.txt" 2>"$work/r0.err" \
  || fail "rank 0: $(cat "$work/r0.err")"
cmp -s "$work/plain.json" "$work/r0.json" || fail "rank 0's JSON differs from the plain run's"
cmp -s "$work/plain.txt" "$work/r0.txt" || fail "rank 0's text report differs from the plain run's"
cmp -s "$work/plain.html" "$work/r0.html" || fail "rank 0's HTML report differs from the plain run's"
grep -qx "sigmatrace-analyze: started as rank 0 of 2 (OMPI_COMM_WORLD_RANK): this rank analyzes the whole trace and the others exit (the analysis is not sharded across ranks)" "$work/r0.err" \
  || fail "rank 0 did not say it: $(cat "$work/r0.err")"
# A bad option is still reported, by rank 0.
"${clean[@]}" OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "$analyze" "$trace" --bogus >/dev/null 2>"$work/bad.err"
[[ $? -eq 2 ]] && grep -q "bogus" "$work/bad.err" || fail "a bad option under rank 0: $(cat "$work/bad.err")"
# SLURM_PROCID alone (a batch script's step): an ordinary run.
"${clean[@]}" SLURM_PROCID=1 "$analyze" "$trace" --json "$work/batch.json" --quiet 2>"$work/batch.err" || fail "batch step: $(cat "$work/batch.err")"
cmp -s "$work/plain.json" "$work/batch.json" || fail "a lone SLURM_PROCID changed the analysis"
[[ ! -s $work/batch.err ]] || fail "a lone SLURM_PROCID: $(cat "$work/batch.err")"

if command -v mpirun >/dev/null; then
  # Under ASan, what Open MPI leaves allocated at exit is not ours to report.
  export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
  root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  "${clean[@]}" mpirun "${root[@]}" --oversubscribe -np 3 "$analyze" "$trace" $(outputs mpi) >"$work/mpi.txt" 2>"$work/mpi.err" \
    || fail "mpirun -np 3: $(cat "$work/mpi.err")"
  cmp -s "$work/plain.json" "$work/mpi.json" || fail "mpirun's JSON differs from the plain run's"
  cmp -s "$work/plain.txt" "$work/mpi.txt" || fail "mpirun's text report differs from the plain run's (one report expected)"
  [[ $(grep -c "started as rank 0 of 3 (OMPI_COMM_WORLD_RANK)" "$work/mpi.err") -eq 1 ]] || fail "mpirun: $(cat "$work/mpi.err")"
  if [[ $(ldd "$analyze") == *libmpi* ]]; then
    # The ranks would read in shares; one host's trace is read whole, on rank 0.
    grep -q "the ranks read the trace in shares, one each, and this rank merges them" "$work/mpi.err" \
      && [[ $(grep -c "3 ranks: reading in one share: a trace of one host" "$work/mpi.err") -eq 1 ]] \
      || fail "mpirun, shares: $(cat "$work/mpi.err")"
  else
    # The 3 ranks share this node: rank 0 reads in 3 shares when the trace allows (one host's does not, and it says so).
    grep -q "in 3 shares on threads when it can (--jobs 3: the ranks on its node)" "$work/mpi.err" \
      && grep -q -- "--jobs 3: reading in one share: a trace of one host" "$work/mpi.err" || fail "mpirun, shares: $(cat "$work/mpi.err")"
  fi
  "${clean[@]}" timeout 60 mpirun "${root[@]}" --oversubscribe -np 3 "$analyze" "$trace" --bogus >/dev/null 2>"$work/mpi-bad.err"
  status=$?
  [[ $status -ne 0 && $status -ne 124 && $(grep -c "unknown option.*bogus\|bogus" "$work/mpi-bad.err") -ge 1 ]] \
    || fail "a bad option under mpirun (status $status): $(cat "$work/mpi-bad.err")"
  [[ $(grep -c "^sigmatrace-analyze: .*bogus" "$work/mpi-bad.err") -eq 1 ]] || fail "a bad option reported other than once: $(cat "$work/mpi-bad.err")"
fi
echo "PASS: rank 0 analyzes the whole trace and says so; other ranks write nothing"
