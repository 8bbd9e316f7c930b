// close(), fclose(), closefrom() and close_range() as libsigmatrace.so exports them: once the process loaded
// lttng-ust (its first RDMA use, activation.h), a descriptor that lttng-ust owns is not closed (the call fails
// with EBADF, as if it were not open); every other descriptor is closed as usual. Before that — in launchers,
// shells, every process that never touched RDMA — these are the plain libc calls behind one load and branch.
//
// Why: programs close descriptors they did not open. Open MPI's launcher (and many daemons, and Python's
// subprocess with fork) close every descriptor in a forked child before exec. lttng-ust re-registers the child
// with the session daemon at the fork (fork_hooks.cpp), so its listener thread is running in the child; when
// its socket and shared-memory descriptors vanish under it, it tears its objects down, finds their descriptors
// already closed, and asserts: the child aborts ("counter/shm.c:327: lttng_counter_shmp_object_destroy:
// Assertion `0' failed", ~1 fork in 10 here). This is what liblttng-ust-fd.so does for daemons (lttng-ust(3));
// doing it here keeps "preload one library". lttng-ust's descriptors are close-on-exec, so exec still drops them.
#include <linux/close_range.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "interpose/runtime/activation.h"
#include "interpose/hooks/export.h"

using namespace sigmatrace::interpose;

namespace {

int real_close(int fd) {
    static RealFunction<int (*)(int)> real{"close", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("close", nullptr, ENOSYS, -1);
    return fn(fd);
}

int real_fclose(FILE* stream) {
    static RealFunction<int (*)(FILE*)> real{"fclose", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("fclose", nullptr, ENOSYS, EOF);
    return fn(stream);
}

}  // namespace

ST_EXPORT int close(int fd) {
    if (const LttngFdGuard* guard = lttng_fd_guard()) [[unlikely]]
        return guard->safe_close(fd, &real_close);
    return real_close(fd);
}

ST_EXPORT int fclose(FILE* stream) {
    if (const LttngFdGuard* guard = lttng_fd_guard()) [[unlikely]]
        return guard->safe_fclose(stream, &real_fclose);
    return real_fclose(stream);
}

ST_EXPORT void closefrom(int lowfd) {
    if (const LttngFdGuard* guard = lttng_fd_guard()) [[unlikely]] {
        (void)guard->safe_closefrom(lowfd, &real_close);  // glibc's closefrom reports nothing either
        return;
    }
    static RealFunction<void (*)(int)> real{"closefrom", nullptr, WrappedLibrary::libc};
    if (auto fn = real.get()) fn(lowfd);
}

ST_EXPORT int close_range(unsigned int first, unsigned int last, int flags) {
    static RealFunction<int (*)(unsigned, unsigned, int)> real{"close_range", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("close_range", nullptr, ENOSYS, -1);
    const LttngFdGuard* guard = lttng_fd_guard();
    // Marking descriptors close-on-exec is harmless: lttng-ust's already are.
    if (guard == nullptr || (flags & CLOSE_RANGE_CLOEXEC) != 0 || first > last) return fn(first, last, flags);
    // Unshare the table first (what the flag asks), then close in the private copy as below.
    if ((flags & CLOSE_RANGE_UNSHARE) != 0 && unshare(CLONE_FILES) != 0) return -1;
    // One descriptor at a time through the tracker (lttng-ust 2.13 has no range helper), up to the highest
    // descriptor this process may have.
    rlimit lim{};
    unsigned int top = last;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur - 1 < top)
        top = static_cast<unsigned int>(lim.rlim_cur - 1);
    const int saved = errno;
    for (unsigned int fd = first; fd <= top && fd <= static_cast<unsigned int>(INT32_MAX); ++fd) {
        (void)guard->safe_close(static_cast<int>(fd), &real_close);
        if (fd == top) break;
    }
    errno = saved;
    return 0;
}
