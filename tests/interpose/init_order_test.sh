#!/usr/bin/env bash
# init_order_test.sh LIBSIGMATRACE: libsigmatrace.so starts and ends the same whatever order the linker laid out
# its objects in (CMake's Makefiles and Ninja generators link them in different orders):
#   1. no namespace-scope object of the library has a dynamic initialiser (a `_GLOBAL__sub_I_*` function): the
#      library's constructor may run before any of them, so each must be constant-initialised or a
#      function-local static;
#   2. .init_array / .fini_array hold only the constructors and destructors whose relative order is accounted for
#      (tracepoint_definitions.cpp, library_init.cpp, exit_hooks.cpp and the lttng-ust header's per-file ones):
#      a new one must be added here after checking what it may touch;
#   3. the library loads into programs and leaves their output and exit status alone.
# scripts/dev.sh runs it against a Makefiles Release build too; ctest runs it against this build.
set -uo pipefail
lib=$1
status=0
fail() { echo "FAILED: $*"; status=1; }
[[ -r $lib ]] || { echo "FAILED: no library at $lib"; exit 1; }

# 1.
dynamic=$(nm "$lib" 2>/dev/null | grep -c '_GLOBAL__sub_I_')
[[ $dynamic == 0 ]] || fail "dynamic initialisers in $lib: $(nm "$lib" | grep '_GLOBAL__sub_I_' | awk '{print $3}' | tr '\n' ' ')"

# 2. Each .init_array/.fini_array slot is an R_X86_64_RELATIVE relocation whose addend is the function's address.
entries() {  # SECTION: the symbol names its slots point to, one per line
  local addr size
  read -r addr size < <(readelf -S -W "$lib" | sed 's/\[ */[/' | awk -v s="$1" '$2 == s {print $4, $6}')
  [[ -n ${addr:-} ]] || return 0
  local start=$((16#$addr)) end=$((16#$addr + 16#$size))
  readelf -r -W "$lib" | awk '/R_X86_64_RELATIVE/ {print $1, $NF}' | while read -r off target; do
    ((16#$off >= start && 16#$off < end)) || continue
    nm "$lib" | awk -v a="$(printf '%016x' $((16#$target)))" '$1 == a && $2 ~ /[tT]/ {print $3; exit}'
  done
}
allowed='^(frame_dummy|__do_global_dtors_aux|lttng_ust__tracepoints__(init|destroy|ptrs_init|ptrs_destroy)|_ZN12_GLOBAL__N_1(27hold_tracepoint_definitions|30release_tracepoint_definitions|23sigmatrace_library_init|23sigmatrace_library_fini|15exit_hooks_init)Ev)$'
for section in .init_array .fini_array; do
  list=$(entries "$section")
  [[ -n $list ]] || fail "$section: no entries read (readelf/nm output not understood)"
  unexpected=$(grep -Ev "$allowed" <<<"$list" | sort -u | tr '\n' ' ')
  [[ -z $unexpected ]] || fail "$section: constructors/destructors whose order nothing accounts for: $unexpected"
done
grep -q hold_tracepoint_definitions <<<"$(entries .init_array)" \
  || fail ".init_array: the tracepoint definitions' prioritised reference (tracepoint_definitions.cpp) is missing"

# 3.
out=$(LD_PRELOAD=$lib /bin/echo loaded 2>&1); rc=$?
[[ $rc == 0 && $out == loaded ]] || fail "/bin/echo preloaded: status $rc, output: $out"
LD_PRELOAD=$lib sh -c 'exit 7'; rc=$?
[[ $rc == 7 ]] || fail "sh -c 'exit 7' preloaded returned $rc"
if command -v ibv_devices >/dev/null; then
  plain=$(ibv_devices 2>&1); plain_rc=$?
  pre=$(LD_PRELOAD=$lib ibv_devices 2>&1); pre_rc=$?
  [[ $plain_rc == "$pre_rc" && $plain == "$pre" ]] || fail "ibv_devices: status $plain_rc/$pre_rc, output differs: $pre"
fi
[[ $status == 0 ]] && echo "all checks passed"
exit $status
