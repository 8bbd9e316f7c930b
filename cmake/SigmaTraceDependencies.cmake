# External dependencies. Every one is a Debian 12 package that scripts/dev.sh installs; a missing one stops
# the configure step with the package to install.

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

macro(sigmatrace_require_pkg var module debian_package)
  pkg_check_modules(${var} REQUIRED IMPORTED_TARGET ${module})
  if(NOT ${var}_FOUND)
    message(FATAL_ERROR "Missing ${module}: install the Debian package ${debian_package}")
  endif()
endmacro()

sigmatrace_require_pkg(LTTNG_UST lttng-ust liblttng-ust-dev)
sigmatrace_require_pkg(BABELTRACE2 babeltrace2 libbabeltrace2-dev)
sigmatrace_require_pkg(IBVERBS libibverbs libibverbs-dev)
find_package(fmt REQUIRED)

# The software fabric is an rdma-core provider for private ABI IBVERBS_PRIVATE_34 as laid out in rdma-core
# v36..v56 (Debian 12 ships v44). Other versions build everything but the fabric, which then refuses to load.
set(SIGMATRACE_IBVERBS_VERSION ${IBVERBS_VERSION})
if(SIGMATRACE_IBVERBS_VERSION VERSION_LESS 1.14.36 OR SIGMATRACE_IBVERBS_VERSION VERSION_GREATER_EQUAL 1.14.57)
  message(WARNING "libibverbs ${SIGMATRACE_IBVERBS_VERSION}: the software fabric supports the private ABI of "
                  "rdma-core 36..56 (IBVERBS_PRIVATE_34) only; it will refuse to load on this system")
endif()

# CUDA: optional, never needed to build or load anything else. nvcc plus the driver link stub are enough
# (no GPU is needed to build; tests that need one skip with a reason).
set(SIGMATRACE_HAVE_CUDA OFF)
if(NOT SIGMATRACE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(SIGMATRACE_HAVE_CUDA ON)
    endif()
  endif()
  if(SIGMATRACE_CUDA STREQUAL "ON" AND NOT SIGMATRACE_HAVE_CUDA)
    message(FATAL_ERROR "SIGMATRACE_CUDA=ON but no usable nvcc/CUDA toolkit was found")
  endif()
endif()
message(STATUS "SigmaTrace: CUDA parts ${SIGMATRACE_HAVE_CUDA}")

# GoogleTest and Google Benchmark from Debian (libgtest-dev, libgmock-dev, libbenchmark-dev).
if(SIGMATRACE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SIGMATRACE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
