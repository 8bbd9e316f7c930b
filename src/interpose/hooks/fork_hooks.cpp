// fork() and daemon() as libsigmatrace.so exports them: a child that keeps running without exec is traced
// under its own pid and identifies itself with its own process_info.
//
// lttng-ust must be told about a fork (lttng_ust_before_fork / after_fork_parent / after_fork_child, the same
// calls liblttng-ust-fork.so makes): without that the child keeps the parent's vpid context and its exit
// handler can crash. Wrapping here means users preload one library, not two.
// liblttng-ust is loaded only once the process used RDMA (activation.h): before that a fork is a plain fork
// (the child loads its own provider if it ever uses RDMA), and the hooks are looked up, not linked.
//
// Not wrapped: vfork (its child may only exec or _exit, and exec reloads the preload), clone (thread-like
// uses are not forks; process-like uses are rare in RDMA programs) and posix_spawn (always execs).
#include <unistd.h>

#include <cerrno>

#include "interpose/runtime/activation.h"
#include "interpose/capture/deferred_rings.h"
#include "interpose/runtime/elf_symbols.h"
#include "interpose/hooks/export.h"
#include "interpose/state/process_identity.h"

using namespace sigmatrace::interpose;

namespace {

// lttng-ust forks internally (a helper child that creates its wait shm, then _exits), while it starts (on the
// thread loading the provider) and later (on its listener threads). Its hooks already ignore that fork (they
// check lttng-ust's own nesting count); our child-side work must be skipped too.
bool called_from_lttng_ust(const LttngForkHooks* hooks, const void* return_address) {
    if (activating_on_this_thread()) return true;
    if (hooks == nullptr) return false;
    static const link_map* lttng = link_map_containing(reinterpret_cast<const void*>(hooks->before_fork));
    return lttng != nullptr && link_map_containing(return_address) == lttng;
}

// After the child re-registered with the session daemon (lttng_ust_after_fork_child runs lttng-ust's
// constructor again, which waits for registration like at process start).
void child_identifies_itself() {
    reset_process_info_after_fork();
    emit_process_info_once();
}

// The fork protocol around `call` (fork or daemon): this thread's records go out first (the parent emits
// them; the child drops its copy), lttng-ust's hooks run on each side, and errno is the call's.
// `in_child(result)` says which side returned.
template <typename Call, typename InChild> auto forked(const LttngForkHooks* hooks, Call call, InChild in_child) {
    sigset_t saved_mask;
    int saved_errno = errno;
    deferred::before_fork();
    hooks->before_fork(&saved_mask);
    errno = saved_errno;
    const auto result = call();
    saved_errno = errno;
    if (in_child(result)) {
        hooks->after_fork_child(&saved_mask);
        deferred::after_fork_child_resume();
        child_identifies_itself();
    } else {
        hooks->after_fork_parent(&saved_mask);
    }
    errno = saved_errno;
    return result;
}

}  // namespace

ST_EXPORT pid_t fork(void) {
    static RealFunction<pid_t (*)()> real{"fork", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<pid_t>("fork", nullptr, ENOSYS, -1);
    const LttngForkHooks* hooks = lttng_fork_hooks();
    if (hooks == nullptr || called_from_lttng_ust(hooks, __builtin_return_address(0))) return fn();
    return forked(hooks, fn, [](pid_t pid) { return pid == 0; });
}

ST_EXPORT int daemon(int nochdir, int noclose) {
    static RealFunction<int (*)(int, int)> real{"daemon", nullptr, WrappedLibrary::libc};
    auto fn = real.get();
    if (fn == nullptr) return missing_real_errno<int>("daemon", nullptr, ENOSYS, -1);
    const LttngForkHooks* hooks = lttng_fork_hooks();
    if (hooks == nullptr) return fn(nochdir, noclose);
    // daemon() returns only in the grandchild (success) or in the caller (failure).
    return forked(hooks, [&] { return fn(nochdir, noclose); }, [](int ret) { return ret == 0; });
}
