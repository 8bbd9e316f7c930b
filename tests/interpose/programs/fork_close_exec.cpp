// fork_close_exec N: opens the first RDMA device (so the tracer has started: lttng-ust is loaded), then N times
// forks a child that closes every descriptor above stderr — as Open MPI's launcher, many daemons and
// fork-based subprocess modules do before exec — and execs /bin/true. Prints "children N failed F" and exits
// 0 only if every child exited with status 0 (a child killed by SIGABRT is what lttng-ust's listener thread
// does when its descriptors vanish under it; fd_hooks.cpp).
#include <infiniband/verbs.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 20;
    int ndev = 0;
    ibv_device** devs = ibv_get_device_list(&ndev);
    ibv_context* ctx = (devs != nullptr && ndev > 0) ? ibv_open_device(devs[0]) : nullptr;
    if (ctx == nullptr) {
        std::fprintf(stderr, "fork_close_exec: no RDMA device to open\n");
        return 2;
    }
    rlimit lim{};
    const int top = (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536) ? static_cast<int>(lim.rlim_cur) : 65536;
    int failed = 0;
    for (int i = 0; i < n; ++i) {
        std::fflush(stdout);
        const pid_t pid = fork();
        if (pid < 0) {
            std::perror("fork_close_exec: fork");
            return 1;
        }
        if (pid == 0) {
            for (int fd = 3; fd < top; ++fd) close(fd);
            execl("/bin/true", "true", static_cast<char*>(nullptr));
            _exit(127);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ++failed;
            std::fprintf(stderr, "fork_close_exec: child %d: %s %d\n", i, WIFSIGNALED(status) ? "signal" : "status",
                         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        }
    }
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    std::printf("children %d failed %d\n", n, failed);
    return failed == 0 ? 0 : 1;
}
