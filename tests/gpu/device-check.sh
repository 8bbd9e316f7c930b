#!/usr/bin/env bash
# Every GPU check of SigmaTrace's GPU module, in one go, for a short visit to a machine with an NVIDIA GPU.
# Builds what it needs itself (nvcc + g++, no CMake, no Debian packages), runs each check with a timeout, and
# prints a pass/fail table. Whole run: under 5 minutes.
#
#   tests/gpu/device-check.sh [--dry-run] [--build DIR]
#
#   --dry-run    build everything and run the checks even without a GPU (they report SKIP): proves the script
#   --build DIR  a CMake build tree of this repository (configured where nvcc exists, with MPI): adds the CUDA
#                workloads (real kernels posting WQEs) on the software fabric; default: ./build if it has them
#
# Checks: cuda_ring_check (tests/gpu/cuda_ring_check.cu: memory classification; the watcher reading rings that a
# kernel writes in GPU memory, through the CUDA copy path, and in host-mapped memory, exact and under overrun; the
# watcher's cost on the kernel's time), and, with a build tree, gpu_ibgda_put_cuda / gpu_bfs_levels_cuda on the
# fabric, recorded with `sigmatrace record` where LTTng is installed: the analysis must count exactly the WQEs the
# kernels wrote. Exit 0 when nothing FAILed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dry_run=0
build=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    --build) build=$2; shift 2 ;;
    *) echo "usage: device-check.sh [--dry-run] [--build DIR]" >&2; exit 2 ;;
  esac
done
[[ -z $build && -d $here/build ]] && build=$here/build
work=$(mktemp -d "${TMPDIR:-/tmp}/sigmatrace-device-check.XXXXXX")
start=$(date +%s)
rows=()
add() { rows+=("$1|$2|$3"); printf '%-22s %-5s %s\n' "$1" "$2" "$3"; }

# ------------------------------------------------------------------ environment
nvcc=$(command -v nvcc || true)
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then gpu=$(nvidia-smi -L 2>/dev/null | head -1); fi
arch=90
if command -v nvidia-smi >/dev/null 2>&1; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [[ $cc =~ ^[0-9]+$ ]] && arch=$cc
fi
add environment INFO "gpu: ${gpu:-none}; nvcc: ${nvcc:-none}; sm_$arch; $(uname -m)"
if [[ -z $gpu && $dry_run == 0 ]]; then
  add gpu SKIP "no NVIDIA GPU visible (nvidia-smi): nothing to check here; --dry-run builds anyway"
fi

# ------------------------------------------------------------------ build the standalone check
built=0
if [[ -z $nvcc ]]; then
  add build SKIP "nvcc not found (PATH, /usr/local/cuda/bin)"
elif ! command -v g++ >/dev/null 2>&1; then
  add build SKIP "g++ not found"
else
  objs=()
  ok=1
  for src in src/mlx5_format/wqe_decoder.cpp src/mlx5_format/prm_commands.cpp src/gpumem/queue_registry.cpp \
             src/gpumem/memory_reader.cpp src/gpumem/cuda_driver.cpp src/gpumem/memory_classifier.cpp \
             src/gpumem/watcher_config.cpp src/gpumem/index_scanner.cpp src/gpumem/watcher.cpp \
             src/provider/trace_callback.cpp tests/gpu/ring_capture.cpp; do
    o=$work/$(basename "$src" .cpp).o
    if ! g++ -std=c++20 -O2 -I"$here/include" -I"$here/src" -c "$here/$src" -o "$o" \
         2>>"$work/build.log"; then ok=0; break; fi
    objs+=("$o")
  done
  if [[ $ok == 1 ]] && "$nvcc" -std=c++20 -O2 -arch="sm_$arch" -I"$here/include" \
        -I"$here/src" -I"$here/tests/gpu" "$here/tests/gpu/cuda_ring_check.cu" "${objs[@]}" -o "$work/cuda_ring_check" \
        -ldl -lpthread 2>>"$work/build.log"; then
    built=1
    add build PASS "cuda_ring_check (sm_$arch) in $(( $(date +%s) - start )) s"
  else
    add build FAIL "see $work/build.log: $(tail -3 "$work/build.log" | tr '\n' ' ')"
  fi
fi

# ------------------------------------------------------------------ run it
if [[ $built == 1 && ( -n $gpu || $dry_run == 1 ) ]]; then
  out=$(timeout 180 "$work/cuda_ring_check" 2>&1)
  rc=$?
  if [[ $rc == 77 ]]; then
    add cuda_ring_check SKIP "$(head -1 <<<"$out")"
  elif [[ $rc == 124 ]]; then
    add cuda_ring_check FAIL "timed out after 180 s"
  else
    while read -r _ name verdict detail; do add "$name" "$verdict" "$detail"; done < <(grep '^CHECK ' <<<"$out")
    [[ $rc != 0 ]] && ! grep -q ' FAIL ' <<<"$out" && add cuda_ring_check FAIL "exit $rc: $(tail -2 <<<"$out" | tr '\n' ' ')"
  fi
fi

# ------------------------------------------------------------------ CUDA workloads on the fabric (needs a build tree)
stage=${build:+$build/stage}
if [[ -z $stage || ! -x $stage/libexec/sigmatrace/gpu_ibgda_put_cuda ]]; then
  add fabric-workloads SKIP "no build tree with the CUDA workloads (--build DIR, configured where nvcc and MPI exist)"
elif ! command -v mpirun >/dev/null 2>&1; then
  add fabric-workloads SKIP "mpirun not installed"
elif [[ -z $gpu && $dry_run == 0 ]]; then
  add fabric-workloads SKIP "no GPU"
else
  root=()
  [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  # Recorded with the real tracer when LTTng's session daemon is installed: the analysis must hold exactly the
  # WQEs the kernels wrote (their ground truth, --truth), every one GPU-posted, none lost.
  record=()
  if command -v lttng-sessiond >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then record=(--lttng); fi
  for w in gpu_ibgda_put_cuda gpu_bfs_levels_cuda; do
    args=(--truth "$work/truth-$w")
    mkdir -p "$work/truth-$w"
    [[ $w == gpu_bfs_levels_cuda ]] && args+=(--levels 4 --delay-ms 10)
    run=(mpirun "${root[@]}" --oversubscribe -np 2 --mca btl self,vader --mca pml ob1 "$stage/bin/sigmatrace" fabric
         --node rank -- "$stage/libexec/sigmatrace/$w" "${args[@]}")
    [[ ${#record[@]} -gt 0 ]] && run=("$stage/bin/sigmatrace" record -o "$work/trace-$w" -- "${run[@]}")
    out=$(timeout 180 "$here/tests/support/sandbox.sh" "${record[@]}" "${run[@]}" 2>&1)
    rc=$?
    if [[ $rc == 0 ]]; then add "$w" PASS "$(grep -m1 'PE 0' <<<"$out")"
    elif grep -q 'SKIP' <<<"$out"; then add "$w" SKIP "$(grep -m1 SKIP <<<"$out")"; continue
    else add "$w" FAIL "exit $rc: $(grep -v '^-*$' <<<"$out" | tail -3 | tr '\n' ' ')"; continue
    fi
    if [[ ${#record[@]} -eq 0 ]]; then
      add "${w%_cuda}-traced" SKIP "lttng-sessiond or python3 not installed: ran untraced"
      continue
    fi
    if ! "$stage/bin/sigmatrace-analyze" "$work/trace-$w" --quiet --json "$work/analysis-$w.json" >"$work/analyze-$w.log" 2>&1; then
      add "${w%_cuda}-traced" FAIL "sigmatrace-analyze failed: $(tail -2 "$work/analyze-$w.log" | tr '\n' ' ')"
      continue
    fi
    verdict=$(python3 - "$work/analysis-$w.json" "$work/truth-$w" <<'PY'
import json, pathlib, sys
a = json.load(open(sys.argv[1]))
posted = sum(1 for f in pathlib.Path(sys.argv[2]).glob("truth-*.txt")
             for line in f.read_text().splitlines() if line and not line.startswith("#"))
ops = a["ops"]
lost = sum(1 for w in a.get("warnings", []) if "overwritten in their ring" in w)
ok = posted > 0 and ops["total"] == posted and ops.get("gpu", 0) == posted and ops["errors"] == 0 and not lost
print(("PASS" if ok else "FAIL") + f" traced {ops['total']} operations ({ops.get('gpu', 0)} GPU-posted) of {posted} "
      f"WQEs the kernels wrote; errors {ops['errors']}; {'loss reported' if lost else 'no loss'}")
PY
)
    add "${w%_cuda}-traced" "${verdict%% *}" "${verdict#* }"
  done
fi

# ------------------------------------------------------------------ table
echo
echo "SigmaTrace GPU device check ($(( $(date +%s) - start )) s)"
printf '+------------------------+-------+%s\n' "$(printf -- '-%.0s' {1..60})"
failed=0
for r in "${rows[@]}"; do
  IFS='|' read -r name verdict detail <<<"$r"
  printf '| %-22s | %-5s | %.100s\n' "$name" "$verdict" "$detail"
  [[ $verdict == FAIL ]] && failed=1
done
printf '+------------------------+-------+%s\n' "$(printf -- '-%.0s' {1..60})"
[[ $failed == 0 ]] && rm -rf "$work"
exit $failed
