#!/usr/bin/env bash
# run_fuzzer.sh SOURCE_DIR WORK_DIR [SECONDS] [event|ctf]: builds a fuzzer with clang++ and libFuzzer
# (-fsanitize=fuzzer,address,undefined) into WORK_DIR, then fuzzes for SECONDS (default 20) starting from the
# committed corpus (new inputs go to WORK_DIR/corpus, not into the source tree). `event` (the default):
# event_fuzzer.cpp, the decoded-event layer, corpus tests/analyzer/fuzz/corpus; `ctf`: ctf_fuzzer.cpp, the whole
# reading path from CTF bytes (precheck, the direct reader, guarded read, analysis), corpus tests/analyzer/fuzz/ctf_corpus.
# Exit status 77 (skip) when clang++ or libFuzzer is not installed (Debian: clang-14, libclang-rt-14-dev).
# SIGMATRACE_ANALYZER_GENERATED: the build's generated analyzer sources (src/analyzer/outputs in the build tree:
# the protobuf code of the Perfetto timeline), which the ctest entries set.
set -euo pipefail
src=$(cd "$1" && pwd); work=$2; seconds=${3:-20}; target=${4:-event}
cxx=${SIGMATRACE_FUZZ_CXX:-}
for c in clang++-14 clang++; do [[ -z $cxx ]] && command -v "$c" >/dev/null && cxx=$c; done
[[ -n $cxx ]] || { echo "run_fuzzer.sh: skipped: no clang++ (install clang-14)"; exit 77; }
bin=$work/analyzer_${target}_fuzzer
a=$src/src/analyzer
# What sigmatrace_analysis holds (src/analyzer/CMakeLists.txt): every analysis and output, and the decoding that
# needs no Babeltrace2; the ctf target adds the rest of decode/. Not the writers neither fuzzer calls (the
# protobuf timeline with its generated code, SQLite): they take fuzzed data only through the document and the
# operations every output gets, and their compile was most of this script's time in CI.
bt2_decode=(bt_message_consumer trace_reader ctf_precheck read_guard lttng_tsdl lttng_stream_reader sharded_read)
unused_outputs=(perfetto_proto_writer sqlite_writer)
sources=("$src"/tests/analyzer/fuzz/${target}_fuzzer.cpp "$a"/analyses/*.cpp)
for f in "$a"/outputs/*.cpp; do
  [[ " ${unused_outputs[*]} " == *" $(basename "$f" .cpp) "* ]] || sources+=("$f")
done
for f in "$a"/decode/*.cpp; do
  [[ " ${bt2_decode[*]} " == *" $(basename "$f" .cpp) "* ]] || sources+=("$f")
done
gen=${SIGMATRACE_ANALYZER_GENERATED:?set it to src/analyzer/outputs of the build tree, with the generated protobuf code}
corpus=$src/tests/analyzer/fuzz/corpus; out_corpus=$work/corpus; libs=(-lfmt)
limits=(-timeout=10 -max_len=4096)
read -ra bt_cflags <<<"$(pkg-config --cflags babeltrace2 2>/dev/null || true)"
if [[ $target == ctf ]]; then
  for f in "${bt2_decode[@]}"; do sources+=("$a/decode/$f.cpp"); done
  corpus=$src/tests/analyzer/fuzz/ctf_corpus; out_corpus=$work/corpus-ctf
  read -ra bt_libs <<<"$(pkg-config --libs babeltrace2)"
  libs+=("${bt_libs[@]}")
  # An input is a whole trace (its metadata alone is ~32 KiB); the guard's watchdog bounds a read, not libFuzzer.
  limits=(-timeout=60 -max_len=65536)
fi
mkdir -p "$out_corpus" "$work/obj" "$work/unity"
# The sources compile as a few unity sources (as the sanitizer builds of CMake do; the normal build compiles
# each alone): the fuzzer's own source, the shared sources in two halves (one per core) and, for ctf, the
# Babeltrace2 decoding. The headers every source includes are then parsed four times, not forty. Both targets
# share $work/obj (the same flags): a unit is compiled again only when one of its sources or a header is newer.
# The ctest entries hold a resource lock, so two runs never write one object.
fuzzer=${sources[0]}; shared=("${sources[@]:1}")
[[ $target == ctf ]] && shared=("${shared[@]:0:${#shared[@]}-${#bt2_decode[@]}}")
half=$(((${#shared[@]} + 1) / 2))
units=(); unit_files=()
# add_unit NAME SOURCE...: a unity source $work/unity/NAME.cpp that includes each SOURCE, rewritten only when
# its list changes (its time is the unit's).
add_unit() {
  local name=$1; shift
  local file=$work/unity/$name.cpp text=""
  for f in "$@"; do text+="#include \"$f\""$'\n'; done
  [[ -e $file && $(cat "$file")$'\n' == "$text" ]] || printf '%s' "$text" >"$file"
  units+=("$name"); unit_files+=("$file")
}
add_unit "${target}_fuzzer" "$fuzzer"
add_unit shared_0 "${shared[@]:0:half}"
add_unit shared_1 "${shared[@]:half}"
[[ $target == ctf ]] && add_unit bt2_decode "${sources[@]: -${#bt2_decode[@]}}"
headers=("$a"/*/*.h "$src"/include/sigmatrace/*)
objs=(); stale=()
for i in "${!units[@]}"; do
  o=$work/obj/${units[$i]}.o; objs+=("$o")
  fresh=1; [[ -e $o ]] || fresh=0
  if [[ $fresh == 1 ]]; then
    for f in "${unit_files[$i]}" $(sed -n 's/^#include "\(.*\)"$/\1/p' "${unit_files[$i]}") "${headers[@]}"; do
      [[ $f -nt $o ]] && { fresh=0; break; }
    done
  fi
  [[ $fresh == 1 ]] || stale+=("${unit_files[$i]}")
done
relink=0; [[ -x $bin ]] || relink=1
for o in "${objs[@]}"; do [[ $o -nt $bin ]] && relink=1; done
if [[ ${#stale[@]} -gt 0 || $relink == 1 ]]; then
  # -O0 and line tables only: this build's time counts in CI (template-heavy headers); coverage feedback works
  # the same, and a crash's stack still names files and lines.
  echo "building $bin with $cxx (${#stale[@]} of ${#units[@]} units to compile)"
  rm -f "$work/build.log"
  flags=(-std=c++20 -O0 -g1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
         -DSIGMATRACE_VERSION_STRING='"fuzz"' -I"$src/include" -I"$src/src" -isystem "$gen" -isystem "$gen/.." "${bt_cflags[@]}")
  # Two compilers at a time (the machine has two cores), then one link.
  # sh -c 'SCRIPT' CXX OBJDIR FLAGS...: $0 is the compiler, $1 the object directory, the rest the flags.
  if { [[ ${#stale[@]} -gt 0 ]] && ! printf '%s\n' "${stale[@]}" | xargs -P "${SIGMATRACE_JOBS:-2}" -I{} sh -c \
      'cxx=$0; obj=$1; shift; "$cxx" "$@" -c "{}" -o "$obj/$(basename "{}" .cpp).o" 2>>"$obj/../build.log"' \
      "$cxx" "$work/obj" "${flags[@]}"; } ||
     ! "$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" "${libs[@]}" -o "$bin" 2>>"$work/build.log"; then
    if grep -q "libclang_rt.fuzzer\|-lFuzzer\|fuzzer.*not found" "$work/build.log"; then
      echo "run_fuzzer.sh: skipped: libFuzzer runtime missing (install libclang-rt-14-dev)"; exit 77
    fi
    cat "$work/build.log" >&2; exit 1
  fi
fi
# -rss_limit_mb bounds memory; -timeout catches hangs (an input taking more than 10 s).
exec "$bin" "$out_corpus" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 "${limits[@]}" -print_final_stats=1
