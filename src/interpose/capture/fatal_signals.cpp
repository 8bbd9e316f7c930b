#include "interpose/capture/fatal_signals.h"

#include <signal.h>

#include <atomic>
#include <cerrno>

#include "interpose/capture/deferred_rings.h"

namespace sigmatrace::interpose {
namespace {

constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
constexpr int kTerminationSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

// The actions that were in place when ours were installed, by signal number. Written once (before any of our
// handlers can run), read by the handlers.
struct sigaction g_previous[NSIG];
bool g_installed[NSIG];
std::atomic<bool> g_done{false};

void hand_on(int sig, siginfo_t* info, void* context) {
    struct sigaction& prev = g_previous[sig];
    if ((prev.sa_flags & SA_SIGINFO) != 0) {
        void (*fn)(int, siginfo_t*, void*) = prev.sa_sigaction;  // (a union with sa_handler)
        if ((prev.sa_flags & SA_RESETHAND) != 0) {  // a one-shot handler: the next delivery gets the default
            prev.sa_flags = 0;
            prev.sa_handler = SIG_DFL;
        }
        if (fn != nullptr) fn(sig, info, context);
        return;
    }
    if (prev.sa_handler == SIG_IGN) return;
    if (prev.sa_handler == SIG_DFL) {
        // The default action, exactly: restore it and raise the signal again. It is blocked while this handler
        // runs, so it is delivered — and ends the process — as soon as the handler returns (a faulting
        // instruction would fault again anyway).
        struct sigaction dfl{};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, nullptr);
        raise(sig);
        return;
    }
    void (*fn)(int) = prev.sa_handler;
    if ((prev.sa_flags & SA_RESETHAND) != 0) prev.sa_handler = SIG_DFL;
    fn(sig);
}

void on_signal(int sig, siginfo_t* info, void* context) {
    const int saved = errno;
    // The receiving thread first (a crash's own thread), then the others; busy rings are skipped.
    deferred::drain_own(UINT64_MAX, UINT32_MAX, deferred::Wait::no);
    deferred::drain_all(deferred::Wait::no);
    errno = saved;
    hand_on(sig, info, context);
}

void install(int sig, bool only_if_default) {
    struct sigaction prev{};
    if (sigaction(sig, nullptr, &prev) != 0) return;
    const bool has_function = (prev.sa_flags & SA_SIGINFO) != 0 || (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN);
    if (!has_function && prev.sa_handler == SIG_IGN) return;  // ignored stays ignored
    if (only_if_default && has_function) return;               // the application handles it: its choice
    struct sigaction ours{};
    ours.sa_sigaction = &on_signal;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigfillset(&ours.sa_mask);  // nothing else interrupts the drain
    g_previous[sig] = prev;
    g_installed[sig] = true;
    if (sigaction(sig, &ours, nullptr) != 0) g_installed[sig] = false;
}

}  // namespace

void install_fatal_signal_handlers() noexcept {
    bool expected = false;
    if (!g_done.compare_exchange_strong(expected, true)) return;
    for (int sig : kCrashSignals) install(sig, false);
    for (int sig : kTerminationSignals) install(sig, true);
}

void uninstall_fatal_signal_handlers_for_testing() noexcept {
    for (int sig = 1; sig < NSIG; ++sig) {
        if (!g_installed[sig]) continue;
        sigaction(sig, &g_previous[sig], nullptr);
        g_installed[sig] = false;
    }
    g_done.store(false);
}

}  // namespace sigmatrace::interpose
