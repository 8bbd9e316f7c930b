// exec*() and _exit()/_Exit() as libsigmatrace.so exports them: with deferred emission, records captured but
// not yet emitted would vanish with the process image (exec replaces it, _exit skips every exit handler), so
// every thread's records become events first (deferred_rings.h), then the real call runs with the caller's
// arguments. Nothing else changes: same return values and errno when exec fails.
//
// Not in a vfork child (or any child sharing our memory that did not go through fork()): it runs on its
// parent's memory and thread state, which is suspended mid-call; emitting from there is not safe. Such a
// child is recognised by a pid that is not ours.
#include <stdarg.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "interpose/runtime/config.h"
#include "interpose/capture/deferred_rings.h"
#include "interpose/hooks/export.h"

using namespace sigmatrace::interpose;

namespace {

// Our pid: set by the constructor and in every forked child (our pthread_atfork handler).
std::atomic<pid_t> g_pid{0};

void remember_pid() {
    g_pid.store(getpid(), std::memory_order_relaxed);
}

__attribute__((constructor)) void exit_hooks_init() {
    remember_pid();
    pthread_atfork(nullptr, nullptr, &remember_pid);
}

// Before the image goes away.
void drain_before_leaving() {
    if ((data_path_flags() & kFlagDefer) == 0) return;
    if (getpid() != g_pid.load(std::memory_order_relaxed)) return;  // a vfork child
    const int saved = errno;
    deferred::drain_all(deferred::Wait::yes);
    errno = saved;
}

// execl-style argument lists: counts them, then copies them to the stack (what glibc's own execl does).
#define ST_COLLECT_ARGS(first, ap, argv)                                                                      \
    size_t argc_ = 1;                                                                                          \
    {                                                                                                          \
        va_list count_;                                                                                        \
        va_copy(count_, ap);                                                                                   \
        while (va_arg(count_, const char*) != nullptr) ++argc_;                                                \
        va_end(count_);                                                                                        \
    }                                                                                                          \
    const char* argv[argc_ + 1];                                                                               \
    argv[0] = first;                                                                                           \
    for (size_t i_ = 1; i_ <= argc_; ++i_) argv[i_] = va_arg(ap, const char*);

}  // namespace

ST_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
    static RealFunction<int (*)(const char*, char* const*, char* const*)> real{"execve", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("execve", nullptr, ENOSYS, -1);
    drain_before_leaving();
    return fn(path, argv, envp);
}

ST_EXPORT int execv(const char* path, char* const argv[]) {
    static RealFunction<int (*)(const char*, char* const*)> real{"execv", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("execv", nullptr, ENOSYS, -1);
    drain_before_leaving();
    return fn(path, argv);
}

ST_EXPORT int execvp(const char* file, char* const argv[]) {
    static RealFunction<int (*)(const char*, char* const*)> real{"execvp", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("execvp", nullptr, ENOSYS, -1);
    drain_before_leaving();
    return fn(file, argv);
}

ST_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
    static RealFunction<int (*)(const char*, char* const*, char* const*)> real{"execvpe", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("execvpe", nullptr, ENOSYS, -1);
    drain_before_leaving();
    return fn(file, argv, envp);
}

ST_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
    static RealFunction<int (*)(int, char* const*, char* const*)> real{"fexecve", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("fexecve", nullptr, ENOSYS, -1);
    drain_before_leaving();
    return fn(fd, argv, envp);
}

ST_EXPORT int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
    static RealFunction<int (*)(int, const char*, char* const*, char* const*, int)> real{"execveat", nullptr,
                                                                                          WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("execveat", nullptr, ENOSYS, -1);
    drain_before_leaving();
    return fn(dirfd, path, argv, envp, flags);
}

ST_EXPORT int execl(const char* path, const char* arg, ...) {
    va_list ap;
    va_start(ap, arg);
    ST_COLLECT_ARGS(arg, ap, argv)
    va_end(ap);
    return execv(path, const_cast<char* const*>(argv));
}

ST_EXPORT int execlp(const char* file, const char* arg, ...) {
    va_list ap;
    va_start(ap, arg);
    ST_COLLECT_ARGS(arg, ap, argv)
    va_end(ap);
    return execvp(file, const_cast<char* const*>(argv));
}

ST_EXPORT int execle(const char* path, const char* arg, ...) {
    va_list ap;
    va_start(ap, arg);
    ST_COLLECT_ARGS(arg, ap, argv)
    char* const* envp = va_arg(ap, char* const*);  // after the terminating NULL
    va_end(ap);
    return execve(path, const_cast<char* const*>(argv), envp);
}

ST_EXPORT void _exit(int status) {
    static RealFunction<void (*)(int)> real{"_exit", nullptr, WrappedLibrary::libc};
    drain_before_leaving();
    if (auto fn = real.get()) fn(status);
    std::abort();  // unreachable: libc always has _exit
}

ST_EXPORT void _Exit(int status) {
    static RealFunction<void (*)(int)> real{"_Exit", nullptr, WrappedLibrary::libc};
    drain_before_leaving();
    if (auto fn = real.get()) fn(status);
    std::abort();
}
