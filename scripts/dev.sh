#!/usr/bin/env bash
# The two set-up commands of README.md, for a fresh Debian 12 machine (root, or sudo for the apt step):
#
#   scripts/dev.sh demo    install what is missing, build, install into ./_install, run `sigmatrace demo`
#   scripts/dev.sh test    install what is missing, build, run the whole test suite: the normal build, then
#                          libsigmatrace.so built with CMake's default generator and loaded into programs, then
#                          the ASan+UBSan build, then the TSan build of the shim's threading tests
#
# Options (environment): SIGMATRACE_JOBS (build parallelism, default nproc), SIGMATRACE_BUILD_ROOT
# (default ./build), SIGMATRACE_SKIP_APT=1 (trust what is installed), SIGMATRACE_TEST_SANITIZERS=0 (normal
# build only).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-}
build_root=${SIGMATRACE_BUILD_ROOT:-$here/build}
jobs=${SIGMATRACE_JOBS:-$(nproc)}

started=$SECONDS
log() { printf '\n==> [%dm%02ds] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*"; }
die() { printf 'dev.sh: %s\n' "$*" >&2; exit 2; }

# Debian 12 packages the build, the tests and the demo use.
packages=(
  build-essential cmake ninja-build pkg-config git
  lttng-tools liblttng-ust-dev babeltrace2 libbabeltrace2-dev
  libibverbs-dev ibverbs-utils ibverbs-providers rdma-core perftest
  libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev nlohmann-json3-dev libcereal-dev libsqlite3-dev clang-14 libclang-rt-14-dev time
  libprotobuf-dev protobuf-compiler python3-protobuf
  openmpi-bin libopenmpi-dev
  util-linux procps iproute2 python3 jq
  ucx-utils qperf python3-pyverbs
  chromium
)

install_packages() {
  [[ ${SIGMATRACE_SKIP_APT:-0} == 1 ]] && return 0
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "Installing ${missing[*]}"
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure_and_build DIR [cmake options...]: configures DIR and builds everything, or only the target named
# by the variable `target` when the caller sets it (target=NAME configure_and_build ...).
configure_and_build() {
  local dir=$1; shift
  cmake -S "$here" -B "$dir" -G Ninja -DSIGMATRACE_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" ${target:+--target "$target"}
}

# run_ctest DIR [ctest args...]: runs ctest inside a private LTTng environment (scripts/with-private-lttng.sh)
run_ctest() {
  local dir=$1; shift
  "$here/scripts/with-private-lttng.sh" ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@"
}

case "$mode" in
  demo)
    install_packages
    log "Building (release)"
    configure_and_build "$build_root/release" -DCMAKE_BUILD_TYPE=Release -DSIGMATRACE_BUILD_TESTS=OFF -DSIGMATRACE_BUILD_BENCH=OFF
    log "Installing into $here/_install"
    cmake --install "$build_root/release" --prefix "$here/_install" >/dev/null
    log "Running: _install/bin/sigmatrace demo"
    exec "$here/_install/bin/sigmatrace" demo
    ;;
  test)
    install_packages
    log "Building (normal)"
    # Line tables only (-g1 where RelWithDebInfo has -g): backtraces keep their files and lines, and the
    # compiler writes much less. A build for a debugger: -DCMAKE_BUILD_TYPE=Debug.
    configure_and_build "$build_root/normal" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
    log "Testing (normal)"
    run_ctest "$build_root/normal"
    # CMake's default generator (Unix Makefiles) links the library's objects in another order than Ninja: its
    # start-up and shutdown must not depend on it (tests/interpose/init_order_test.sh). Only the library and the
    # provider it loads are built.
    log "Building libsigmatrace.so with CMake's default generator (Release)"
    env -u CMAKE_GENERATOR cmake -S "$here" -B "$build_root/make" -DCMAKE_BUILD_TYPE=Release -DSIGMATRACE_WERROR=ON \
      -DSIGMATRACE_BUILD_TESTS=OFF -DSIGMATRACE_BUILD_BENCH=OFF >/dev/null
    cmake --build "$build_root/make" -j "$jobs" --target sigmatrace_preload
    log "Testing (default generator: the library loaded into programs)"
    "$here/tests/interpose/init_order_test.sh" "$build_root/make/stage/lib/libsigmatrace.so"
    if [[ ${SIGMATRACE_TEST_SANITIZERS:-1} == 1 ]]; then
      log "Building (ASan+UBSan)"
      # The sanitizer builds compile each target's sources as a few unity sources (CMAKE_UNITY_BUILD): the
      # normal build has already compiled every source on its own, and the shared headers (JSON, fmt, GoogleTest)
      # are parsed once per batch, not per source. The sources keep their file-local names distinct for this.
      # The programs only the slow-labelled tests run (left out below) are not built either.
      configure_and_build "$build_root/asan" -DSIGMATRACE_SANITIZE=ON -DSIGMATRACE_BUILD_BENCH=OFF -DSIGMATRACE_CUDA=OFF \
        -DCMAKE_UNITY_BUILD=ON -DSIGMATRACE_SLOW_TEST_PROGRAMS=OFF
      log "Testing (ASan+UBSan)"
      # Not the fuzzers: their targets are built with ASan and UBSan already, and ran in the normal stage. Not the
      # slow-labelled end-to-end runs either (MPI stress, the acceptance suites, recorded UCX transports, exit
      # paths): under ASan they cost half of this stage, and the shorter fabric tests that do run here drive the
      # same shim, provider and watcher code under the sanitizers. Run them in the ASan build with:
      # cmake --build build/asan --target slow_test_programs && ctest -L slow --test-dir build/asan.
      run_ctest "$build_root/asan" -LE "no-sanitizer|fuzz|slow"
      log "Building (TSan)"
      # Only what the tsan-labelled tests need (tests/CMakeLists.txt, tsan_tests): half the build.
      target=tsan_tests configure_and_build "$build_root/tsan" -DSIGMATRACE_TSAN=ON -DSIGMATRACE_BUILD_BENCH=OFF \
        -DSIGMATRACE_CUDA=OFF -DCMAKE_UNITY_BUILD=ON
      log "Testing (TSan: threading tests)"
      run_ctest "$build_root/tsan" -L tsan
    fi
    log "All tests passed"
    ;;
  *)
    die "usage: scripts/dev.sh demo|test"
    ;;
esac
