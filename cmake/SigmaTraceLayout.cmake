# The install layout (a contract: docs/architecture.md, "Contracts between the parts"), and a build tree that mirrors it, so that the tools find their
# libraries the same way in both: relative to their own binary, with no environment variable.
#
#   bin/sigmatrace, bin/sigmatrace-analyze           front end and analyzer
#   lib/libsigmatrace.so                              the preload library
#   lib/sigmatrace/bt2-plugins/                       Babeltrace2 plugin (babeltrace2 --plugin-path=...)
#   lib/sigmatrace/softfabric/                        software fabric provider (+ its mlx5dv stand-in)
#   libexec/sigmatrace/                               workloads the demo and tests run
#   share/sigmatrace/                                 fabric configurations, demo inputs, echarts.min.js (HTML report)
#
# These relative paths are also compiled into the tools (see tools/common/install_layout.h).
set(SIGMATRACE_INSTALL_BINDIR bin)
set(SIGMATRACE_INSTALL_LIBDIR lib)
set(SIGMATRACE_INSTALL_PLUGINDIR lib/sigmatrace/bt2-plugins)
set(SIGMATRACE_INSTALL_FABRICDIR lib/sigmatrace/softfabric)
set(SIGMATRACE_INSTALL_LIBEXECDIR libexec/sigmatrace)
set(SIGMATRACE_INSTALL_DATADIR share/sigmatrace)
set(SIGMATRACE_INSTALL_DOCDIR share/doc/sigmatrace)

set(SIGMATRACE_STAGE ${CMAKE_BINARY_DIR}/stage)   # the build-tree copy of the install tree
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${SIGMATRACE_STAGE}/${SIGMATRACE_INSTALL_BINDIR})
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${SIGMATRACE_STAGE}/${SIGMATRACE_INSTALL_LIBDIR})
set(CMAKE_ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/archive)

# Installed binaries find lib/ relative to themselves. Build-tree binaries already live in the staged layout,
# so the same $ORIGIN-relative RPATH serves both (no install-time relinking surprises).
set(CMAKE_BUILD_WITH_INSTALL_RPATH ON)
set(CMAKE_SKIP_INSTALL_RPATH OFF)

# sigmatrace_place(target DIR): put a target's output in the staged DIR and install it there, with an RPATH
# that reaches lib/ from DIR.
function(sigmatrace_place target dir)
  file(RELATIVE_PATH rel_to_lib ${SIGMATRACE_STAGE}/${dir} ${SIGMATRACE_STAGE}/${SIGMATRACE_INSTALL_LIBDIR})
  if(rel_to_lib STREQUAL "")
    set(rpath "$ORIGIN")
  else()
    set(rpath "$ORIGIN/${rel_to_lib}")
  endif()
  set_target_properties(${target} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${SIGMATRACE_STAGE}/${dir}
    LIBRARY_OUTPUT_DIRECTORY ${SIGMATRACE_STAGE}/${dir}
    INSTALL_RPATH "${rpath}")
  install(TARGETS ${target} RUNTIME DESTINATION ${dir} LIBRARY DESTINATION ${dir})
endfunction()

# sigmatrace_gpu_workload(NAME [LIBRARY...]): a GPU-style workload (tools/workloads/gpu_*), NAME.cpp linked with
# gpu_workload_common (tools/workloads/gpu_common, built whenever MPI is found) and placed with the other
# workloads. Nothing without MPI.
function(sigmatrace_gpu_workload name)
  find_package(MPI COMPONENTS C QUIET)
  if(NOT MPI_C_FOUND)
    return()
  endif()
  add_executable(${name} ${name}.cpp)
  target_link_libraries(${name} PRIVATE gpu_workload_common ${ARGN} sigmatrace_warnings)
  sigmatrace_place(${name} ${SIGMATRACE_INSTALL_LIBEXECDIR})
endfunction()

# Adds every child folder of the calling folder that has a CMakeLists.txt, in name order: tests/, bench/ and
# tools/workloads/ hold one folder per area, and a new folder needs no registration. A macro, so that the
# folders are added in the caller's own scope.
macro(sigmatrace_add_child_folders)
  file(GLOB _sigmatrace_children RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _sigmatrace_children)
  foreach(_sigmatrace_child IN LISTS _sigmatrace_children)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_sigmatrace_child}/CMakeLists.txt)
      add_subdirectory(${_sigmatrace_child})
    endif()
  endforeach()
endmacro()
