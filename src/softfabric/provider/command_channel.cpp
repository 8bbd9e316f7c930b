#include "provider/command_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <rdma/ib_user_verbs.h>
#include <signal.h>
#include <sys/socket.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#if !defined(__x86_64__)
#error "The fabric's command emulation reads syscall registers from the signal context: x86-64 only"
#endif

namespace softfabric::provider {
namespace {

// Tables read by the signal handler: fixed arrays of atomics (async-signal-safe). They are process-wide
// because the handler is.
constexpr int kMaxCommandFiles = 64;
constexpr int kMaxChannels = 1024;
struct CommandFd {
    std::atomic<int> fd{-1};
};
CommandFd g_command_fds[kMaxCommandFiles];
struct Channel {
    std::atomic<int> app_fd{-1};
    std::atomic<int> event_fd{-1};
};
Channel g_channels[kMaxChannels];
struct sigaction g_previous;  // what SIGPIPE did before the fabric's handler was installed
std::mutex g_install_mutex;

bool is_command_fd(long fd) {
    for (auto& f : g_command_fds)
        if (f.fd.load(std::memory_order_acquire) == fd && fd >= 0) return true;
    return false;
}

// Async-signal-safe: creates a channel and returns its application fd, or -errno.
int create_channel() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -errno;
    // A stale entry with the same application fd (the application closed that channel) is replaced.
    for (auto& c : g_channels) {
        if (c.app_fd.load() == sv[0]) {
            int old = c.event_fd.exchange(-1);
            c.app_fd.store(-1);
            if (old >= 0) close(old);
        }
    }
    for (auto& c : g_channels) {
        int expected = -1;
        if (c.app_fd.compare_exchange_strong(expected, -2)) {  // -2: being filled
            c.event_fd.store(sv[1]);
            c.app_fd.store(sv[0], std::memory_order_release);
            return sv[0];
        }
    }
    close(sv[0]);
    close(sv[1]);
    return -EMFILE;
}

// Executes a uverbs write command; returns the value write() must return.
long execute_command(const unsigned char* req, unsigned long len) {
    ib_uverbs_cmd_hdr hdr{};
    if (len < sizeof hdr) return -EINVAL;
    std::memcpy(&hdr, req, sizeof hdr);
    if (hdr.command == IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL) {
        ib_uverbs_create_comp_channel cmd{};
        if (len < sizeof hdr + sizeof cmd) return -EINVAL;
        std::memcpy(&cmd, req + sizeof hdr, sizeof cmd);
        int fd = create_channel();
        if (fd < 0) return fd;
        ib_uverbs_create_comp_channel_resp resp{};
        resp.fd = static_cast<uint32_t>(fd);
        std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(cmd.response)), &resp, sizeof resp);
        return static_cast<long>(len);
    }
    return -EOPNOTSUPP;  // every other command is the provider's business, not the (absent) kernel's
}

void chain_previous(int sig, siginfo_t* info, void* uctx) {
    if (g_previous.sa_flags & SA_SIGINFO) {
        if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, uctx);
        return;
    }
    if (g_previous.sa_handler == SIG_IGN) return;
    if (g_previous.sa_handler == SIG_DFL) {
        // What would have happened without the fabric: the default action (terminate) once the handler returns.
        signal(SIGPIPE, SIG_DFL);
        raise(SIGPIPE);
        return;
    }
    g_previous.sa_handler(sig);
}

void on_sigpipe(int sig, siginfo_t* info, void* uctx) {
    int saved_errno = errno;
    auto* uc = static_cast<ucontext_t*>(uctx);
    greg_t* r = uc->uc_mcontext.gregs;
    const auto* ip = reinterpret_cast<const unsigned char*>(r[REG_RIP]);
    // Ours when the thread is returning from a syscall instruction (0f 05) with -EPIPE for a write to a fabric
    // command file.
    if (r[REG_RAX] == -EPIPE && ip && ip[-2] == 0x0f && ip[-1] == 0x05 && is_command_fd(r[REG_RDI])) {
        r[REG_RAX] = execute_command(reinterpret_cast<const unsigned char*>(r[REG_RSI]),
                                     static_cast<unsigned long>(r[REG_RDX]));
        errno = saved_errno;
        return;
    }
    errno = saved_errno;
    chain_previous(sig, info, uctx);
}

// Closes channels whose application end is gone (ibv_destroy_comp_channel closed it).
void collect_closed_channels() {
    for (auto& c : g_channels) {
        int efd = c.event_fd.load();
        if (efd < 0 || c.app_fd.load() < 0) continue;
        pollfd p{efd, 0, 0};
        if (poll(&p, 1, 0) == 1 && (p.revents & POLLHUP)) {
            if (c.event_fd.compare_exchange_strong(efd, -1)) {
                c.app_fd.store(-1);
                close(efd);
            }
        }
    }
}

}  // namespace

void ensure_sigpipe_handler() {
    std::lock_guard lock(g_install_mutex);
    struct sigaction current {};
    sigaction(SIGPIPE, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigpipe) return;
    struct sigaction ours {};
    ours.sa_sigaction = on_sigpipe;
    ours.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(SIGPIPE, &ours, &g_previous);
}

int open_command_file() {
    ensure_sigpipe_handler();
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    close(p[0]);  // no reader: every write raises SIGPIPE
    for (auto& f : g_command_fds) {
        int expected = -1;
        if (f.fd.compare_exchange_strong(expected, p[1], std::memory_order_release)) return p[1];
    }
    close(p[1]);
    errno = EMFILE;
    return -1;
}

void close_command_file(int fd) {
    for (auto& f : g_command_fds) {
        int expected = fd;
        f.fd.compare_exchange_strong(expected, -1);
    }
}

int channel_event_fd(int channel_fd) {
    collect_closed_channels();
    for (auto& c : g_channels)
        if (c.app_fd.load(std::memory_order_acquire) == channel_fd) return c.event_fd.load();
    return -1;
}

}  // namespace softfabric::provider
