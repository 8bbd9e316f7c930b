// Helpers for the functions libsigmatrace.so exports in place of libibverbs'/libmlx5's (verbs_hooks.cpp,
// mlx5dv_hooks.cpp, and the GPU module's DevX wrappers). Each export must also be listed in the version node
// of the real symbol in libsigmatrace.map.
#pragma once

#include "interpose/runtime/real_symbol.h"

// An exported wrapper (everything else in the library is hidden).
#define ST_EXPORT extern "C" __attribute__((visibility("default")))

// The real `fn` (a function declared by the library's header, which the wrapper shadows), resolved once.
// Evaluates to nullptr while the library is not loaded.
#define ST_REAL(fn, version, lib)                                                                              \
    ([]() noexcept {                                                                                            \
        static ::sigmatrace::interpose::RealFunction<decltype(&fn)> real_{#fn, version, lib};                  \
        return real_.get();                                                                                     \
    }())

#define ST_REAL_IBVERBS(fn, version) ST_REAL(fn, version, ::sigmatrace::interpose::WrappedLibrary::ibverbs)
#define ST_REAL_MLX5(fn, version) ST_REAL(fn, version, ::sigmatrace::interpose::WrappedLibrary::mlx5)
