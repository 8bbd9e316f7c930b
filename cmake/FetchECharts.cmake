# Apache ECharts for the HTML report (docs/analyzer.md, "HTML report"). The report is one offline file, so the
# charting library is inlined into it at run time from share/sigmatrace/echarts.min.js; the library is not kept
# in this repository but fetched once, as the npm registry's tarball of a pinned version, checked against the
# sha512 the registry publishes for it, and cached outside the build tree so that later configures (and fresh
# build trees) work offline.
#
#   SIGMATRACE_ECHARTS            ON (default): fetch or reuse the cached tarball; OFF: reports have tables only
#   SIGMATRACE_ECHARTS_TARBALL    a tarball already at hand (same version, same hash), for machines without network
#   SIGMATRACE_CACHE_DIR          the cache (default $XDG_CACHE_HOME/sigmatrace, else ~/.cache/sigmatrace)
option(SIGMATRACE_ECHARTS "Fetch Apache ECharts (npm tarball, hash-pinned) for the charts of the HTML report" ON)
set(SIGMATRACE_ECHARTS_VERSION 5.5.1)
# The registry's "integrity" for echarts-5.5.1.tgz is sha512-Fce8upazaAXUVUVsjgV6mBnGuqgO+JNDlcgF79Dksy4+wgGpQB2lm
# YoO4TSweFg/mZITdpGHomw/cNBJZj1icA== (base64); the same digest in hex, as CMake checks it:
set(SIGMATRACE_ECHARTS_SHA512
  15c7bcba96b36805d455456c8e057a9819c6baa80ef8934395c805efd0e4b32e3ec201a9401da5998a0ee134b078583f999213769187a26c3f70d049663d6270)
set(SIGMATRACE_ECHARTS_URL https://registry.npmjs.org/echarts/-/echarts-${SIGMATRACE_ECHARTS_VERSION}.tgz)

if(NOT SIGMATRACE_ECHARTS)
  message(STATUS "ECharts: off (SIGMATRACE_ECHARTS=OFF); HTML reports will have tables only")
  return()
endif()

if(NOT SIGMATRACE_CACHE_DIR)
  if(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
    set(SIGMATRACE_CACHE_DIR $ENV{XDG_CACHE_HOME}/sigmatrace)
  else()
    set(SIGMATRACE_CACHE_DIR $ENV{HOME}/.cache/sigmatrace)
  endif()
endif()
set(_echarts_tgz ${SIGMATRACE_CACHE_DIR}/echarts-${SIGMATRACE_ECHARTS_VERSION}.tgz)
if(SIGMATRACE_ECHARTS_TARBALL)
  set(_echarts_tgz ${SIGMATRACE_ECHARTS_TARBALL})
endif()

set(_echarts_ok FALSE)
if(EXISTS ${_echarts_tgz})
  file(SHA512 ${_echarts_tgz} _have)
  if(_have STREQUAL SIGMATRACE_ECHARTS_SHA512)
    set(_echarts_ok TRUE)
  elseif(SIGMATRACE_ECHARTS_TARBALL)
    message(FATAL_ERROR "ECharts tarball does not match the pinned hash: path=${_echarts_tgz}, sha512=${_have}, "
                        "expected=${SIGMATRACE_ECHARTS_SHA512}. Use echarts-${SIGMATRACE_ECHARTS_VERSION}.tgz from "
                        "${SIGMATRACE_ECHARTS_URL}.")
  endif()
endif()
if(NOT _echarts_ok)
  message(STATUS "ECharts: fetching ${SIGMATRACE_ECHARTS_URL}")
  file(MAKE_DIRECTORY ${SIGMATRACE_CACHE_DIR})
  # The hash is checked below, not by EXPECTED_HASH: a failed download would then be an error, not the warning.
  file(DOWNLOAD ${SIGMATRACE_ECHARTS_URL} ${_echarts_tgz}.part TIMEOUT 120 STATUS _st)
  list(GET _st 0 _code)
  if(NOT _code EQUAL 0)
    file(REMOVE ${_echarts_tgz}.part)
    list(GET _st 1 _why)
    # A warning, not an error: everything else builds and works, and reports say that their charts are missing.
    message(WARNING
      "Cannot fetch Apache ECharts for the HTML report: url=${SIGMATRACE_ECHARTS_URL}, status=${_code} (${_why}). "
      "HTML reports will have tables only (and say so), and the headless-browser test is skipped. For charts, give "
      "the build network once (the tarball is then cached at ${_echarts_tgz}), or download it elsewhere and "
      "configure with -DSIGMATRACE_ECHARTS_TARBALL=PATH; -DSIGMATRACE_ECHARTS=OFF silences this.")
    return()
  endif()
  file(SHA512 ${_echarts_tgz}.part _got)
  if(NOT _got STREQUAL SIGMATRACE_ECHARTS_SHA512)
    file(REMOVE ${_echarts_tgz}.part)
    message(FATAL_ERROR "The ECharts tarball fetched from ${SIGMATRACE_ECHARTS_URL} does not match the pinned hash: "
                        "sha512=${_got}, expected=${SIGMATRACE_ECHARTS_SHA512}.")
  endif()
  file(RENAME ${_echarts_tgz}.part ${_echarts_tgz})
endif()

# The library and its licence files (Apache-2.0 asks that LICENSE and NOTICE travel with it).
set(_echarts_src ${CMAKE_BINARY_DIR}/echarts-${SIGMATRACE_ECHARTS_VERSION})
if(NOT EXISTS ${_echarts_src}/package/dist/echarts.min.js)
  file(ARCHIVE_EXTRACT INPUT ${_echarts_tgz} DESTINATION ${_echarts_src}
       PATTERNS package/dist/echarts.min.js package/LICENSE package/NOTICE)
endif()
set(_echarts_dest ${SIGMATRACE_STAGE}/${SIGMATRACE_INSTALL_DATADIR})
configure_file(${_echarts_src}/package/dist/echarts.min.js ${_echarts_dest}/echarts.min.js COPYONLY)
configure_file(${_echarts_src}/package/LICENSE ${_echarts_dest}/echarts.LICENSE COPYONLY)
configure_file(${_echarts_src}/package/NOTICE ${_echarts_dest}/echarts.NOTICE COPYONLY)
install(FILES ${_echarts_dest}/echarts.min.js ${_echarts_dest}/echarts.LICENSE ${_echarts_dest}/echarts.NOTICE
        DESTINATION ${SIGMATRACE_INSTALL_DATADIR})
message(STATUS "ECharts ${SIGMATRACE_ECHARTS_VERSION}: ${_echarts_dest}/echarts.min.js (from ${_echarts_tgz})")
