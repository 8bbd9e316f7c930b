# Warnings and sanitizers for every target of the project.

add_library(sigmatrace_warnings INTERFACE)
target_compile_options(sigmatrace_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wshadow -Wformat=2 -Wundef>
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>)
if(SIGMATRACE_WERROR)
  target_compile_options(sigmatrace_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX,C>:-Werror>)
endif()

# Sanitizers apply to everything built here, so that a preload library and the test programs it is loaded
# into share one runtime. Tests that preload an instrumented library into an uninstrumented program
# (Debian's perftest) must put the sanitizer runtime first in LD_PRELOAD: see tests/support/sanitizer.cmake.
if(SIGMATRACE_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=address,undefined$<SEMICOLON>-fno-omit-frame-pointer$<SEMICOLON>-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
  set(SIGMATRACE_SANITIZER_RUNTIME asan)
elseif(SIGMATRACE_TSAN)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=thread$<SEMICOLON>-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=thread)
  set(SIGMATRACE_SANITIZER_RUNTIME tsan)
endif()
# Sanitizer reports need function names and file:line, which line tables (-g1) give; RelWithDebInfo's full -g
# makes every compile of the ASan build slower for nothing they print. These come after
# CMAKE_<LANG>_FLAGS_<CONFIG> on the command line, so they are the -g and -O that count.
# -O1, as the sanitizers' own documentation advises: it compiles markedly faster than -O2, and this build is
# CI's longest stage.
if(SIGMATRACE_SANITIZE OR SIGMATRACE_TSAN)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-g1$<SEMICOLON>-O1>)
endif()

# Path of the sanitizer runtime shared object, for LD_PRELOAD in tests (empty without sanitizers).
set(SIGMATRACE_SANITIZER_PRELOAD "")
if(SIGMATRACE_SANITIZER_RUNTIME)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=lib${SIGMATRACE_SANITIZER_RUNTIME}.so
                  OUTPUT_VARIABLE SIGMATRACE_SANITIZER_PRELOAD OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
