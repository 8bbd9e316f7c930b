#include "record/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace sigmatrace::record {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
    std::vector<char*> out;
    out.reserve(v.size() + 1);
    for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
    out.push_back(nullptr);
    return out;
}

int decode_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

// The child that a forwarded signal goes to (written before the handler can run, cleared after).
volatile sig_atomic_t g_child = 0;

void forward_signal(int sig) {
    if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

// Set by SIGUSR1, taken by the waiting loop of run_foreground (a handler can only set a flag).
volatile sig_atomic_t g_usr1 = 0;

void note_usr1(int) { g_usr1 = 1; }

// Starts argv in a child. The child reports an exec failure's errno through a close-on-exec pipe, so the
// parent can tell "could not start" from "started and failed".
pid_t spawn(const std::vector<std::string>& argv, const Environment& env, int out_fd, int* exec_errno) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
        *exec_errno = errno;
        return -1;
    }
    std::vector<char*> args = c_strings(argv);
    std::vector<char*> envp = c_strings(env);
    const pid_t pid = fork();
    if (pid < 0) {
        *exec_errno = errno;
        close(report[0]);
        close(report[1]);
        return -1;
    }
    if (pid == 0) {
        if (out_fd >= 0) {
            dup2(out_fd, STDOUT_FILENO);
            dup2(out_fd, STDERR_FILENO);
            // A tool we run (lttng) dies of SIGPIPE when the session daemon closes the connection before
            // reading the whole command (one it refuses early); ignoring it, the tool reports the failure.
            signal(SIGPIPE, SIG_IGN);
        }
        signal(SIGINT, SIG_DFL);
        signal(SIGQUIT, SIG_DFL);
        execvpe(args[0], args.data(), envp.data());
        const int e = errno;
        ssize_t ignored = write(report[1], &e, sizeof e);
        (void)ignored;
        _exit(127);
    }
    close(report[1]);
    int e = 0;
    ssize_t n;
    do n = read(report[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(report[0]);
    *exec_errno = n == static_cast<ssize_t>(sizeof e) ? e : 0;
    return pid;
}

pid_t wait_for(pid_t pid, int* status) {
    pid_t r;
    do r = waitpid(pid, status, 0);
    while (r < 0 && errno == EINTR);
    return r;
}

}  // namespace

Environment current_environment() {
    Environment env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
    return env;
}

Environment without(Environment env, const std::string& name) {
    const std::string prefix = name + "=";
    std::erase_if(env, [&](const std::string& e) { return e.compare(0, prefix.size(), prefix) == 0; });
    return env;
}

const std::string* find_variable(const Environment& env, const std::string& name) {
    const std::string prefix = name + "=";
    for (const auto& e : env)
        if (e.compare(0, prefix.size(), prefix) == 0) return &e;
    return nullptr;
}

std::string value_of(const Environment& env, const std::string& name) {
    const std::string* e = find_variable(env, name);
    return e != nullptr ? e->substr(name.size() + 1) : std::string();
}

void set_variable(Environment& env, const std::string& name, const std::string& value) {
    env = without(std::move(env), name);
    env.push_back(name + "=" + value);
}

Captured run_captured(const std::vector<std::string>& argv, const Environment& env) {
    Captured c;
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
        c.output = std::string("cannot create a pipe: ") + std::strerror(errno);
        return c;
    }
    int exec_errno = 0;
    const pid_t pid = spawn(argv, env, out[1], &exec_errno);
    close(out[1]);
    if (pid < 0 || exec_errno != 0) {
        if (pid > 0) {
            int ignored;
            wait_for(pid, &ignored);
        }
        close(out[0]);
        c.output = "cannot run " + argv[0] + ": " + std::strerror(exec_errno);
        return c;
    }
    char buf[4096];
    for (;;) {
        const ssize_t n = read(out[0], buf, sizeof buf);
        if (n > 0) c.output.append(buf, static_cast<size_t>(n));
        else if (n == 0 || errno != EINTR) break;
    }
    close(out[0]);
    int status = 0;
    c.status = wait_for(pid, &status) == pid ? decode_status(status) : -1;
    return c;
}

int run_foreground(const std::vector<std::string>& argv, const Environment& env, std::string* spawn_error,
                   const std::function<void()>& on_sigusr1) {
    struct sigaction ignore{}, forward{}, usr1{}, old_int{}, old_quit{}, old_term{}, old_hup{}, old_usr1{};
    // No SA_RESTART: the signal interrupts waitpid, and the loop below runs the callback.
    usr1.sa_handler = &note_usr1;
    if (on_sigusr1) sigaction(SIGUSR1, &usr1, &old_usr1);
    ignore.sa_handler = SIG_IGN;
    forward.sa_handler = &forward_signal;
    sigaction(SIGINT, &ignore, &old_int);
    sigaction(SIGQUIT, &ignore, &old_quit);
    sigaction(SIGTERM, &forward, &old_term);
    sigaction(SIGHUP, &forward, &old_hup);
    int exec_errno = 0;
    const pid_t pid = spawn(argv, env, -1, &exec_errno);
    int result;
    if (pid < 0 || exec_errno != 0) {
        if (pid > 0) {
            int ignored;
            wait_for(pid, &ignored);
        }
        *spawn_error = "cannot run " + argv[0] + ": " + std::strerror(exec_errno);
        result = 127;
    } else {
        g_child = pid;
        int status = 0;
        pid_t r;
        for (;;) {
            r = waitpid(pid, &status, 0);
            if (r >= 0 || errno != EINTR) break;
            if (g_usr1 && on_sigusr1) {
                g_usr1 = 0;
                on_sigusr1();
            }
        }
        result = r == pid ? decode_status(status) : 1;
        g_child = 0;
    }
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    if (on_sigusr1) sigaction(SIGUSR1, &old_usr1, nullptr);
    return result;
}

}  // namespace sigmatrace::record
