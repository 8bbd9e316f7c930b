// fork_verbs: forks without exec; parent and child each open the first RDMA device (when there is one) and
// create and destroy a CQ, so that a trace shows which process did what. Prints "parent PID child PID".
// Exit status: the child's, or 1 when the fork fails.
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace {

// Opens the first device and creates/destroys one CQ of `cqe` entries; 0 when there is no device.
int touch_device(int cqe) {
    int n = 0;
    ibv_device** devs = ibv_get_device_list(&n);
    if (devs == nullptr || n == 0) return 0;
    ibv_context* ctx = ibv_open_device(devs[0]);
    int rc = 1;
    if (ctx != nullptr) {
        ibv_cq* cq = ibv_create_cq(ctx, cqe, nullptr, nullptr, 0);
        if (cq != nullptr && ibv_destroy_cq(cq) == 0) rc = 0;
        ibv_close_device(ctx);
    }
    ibv_free_device_list(devs);
    return rc;
}

}  // namespace

int main() {
    std::fflush(stdout);
    const pid_t child = fork();
    if (child < 0) {
        std::perror("fork_verbs: fork");
        return 1;
    }
    if (child == 0) {
        // exit(), not _exit(): the tracer's exit handlers must be safe in a forked child.
        std::exit(touch_device(64));
    }
    const int parent_rc = touch_device(32);
    int status = 0;
    waitpid(child, &status, 0);
    std::printf("parent %d child %d\n", static_cast<int>(getpid()), static_cast<int>(child));
    if (parent_rc != 0) return parent_rc;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
