// Re-entrancy guard of the set-up wrappers.
//
// A wrapped call may reach another wrapped function before returning: libibverbs' ibv_reg_mr calls the
// exported ibv_reg_mr_iova2 through its PLT (so our export), a provider may create objects through its own
// verbs_context entries. Only the outermost wrapper emits; nested ones just forward, so one application
// call is one event. The depth lives in initial-exec TLS: a plain %fs-relative access that can never call
// into the dynamic linker (__tls_get_addr), which could itself end up in a wrapper.
#pragma once

#include <cerrno>

namespace sigmatrace::interpose {

extern __thread int tls_hook_depth __attribute__((tls_model("initial-exec")));

class HookScope {
public:
    HookScope() noexcept : outermost_(tls_hook_depth++ == 0) {}
    ~HookScope() { --tls_hook_depth; }
    HookScope(const HookScope&) = delete;
    HookScope& operator=(const HookScope&) = delete;

    bool outermost() const noexcept { return outermost_; }

private:
    bool outermost_;
};

// errno as the real call left it, restored when the wrapper returns: tracing must never change what the
// application sees.
class KeepErrno {
public:
    KeepErrno() noexcept : saved_(errno) {}
    ~KeepErrno() { errno = saved_; }
    KeepErrno(const KeepErrno&) = delete;
    KeepErrno& operator=(const KeepErrno&) = delete;
    int value() const noexcept { return saved_; }

private:
    int saved_;
};

// What a set-up hook does around the real function: calls it inside this thread's hook scope and, when this is
// the outermost hook (not one the real function reached through another export), hands `record` its result and
// the errno the call left, which is restored afterwards. Returns the real function's result.
template <typename Real, typename Record, typename... Args>
auto call_and_record(Real real, Record&& record, Args... args) {
    HookScope scope;
    auto ret = real(args...);
    if (scope.outermost()) {
        KeepErrno keep;
        record(ret, keep.value());
    }
    return ret;
}

inline bool inside_hook() noexcept {
    return tls_hook_depth != 0;
}

}  // namespace sigmatrace::interpose
