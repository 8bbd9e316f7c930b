#include "record/lttng_control.h"

#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/core.h>

#include <sigmatrace/schema.h>

namespace sigmatrace::record {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRootRunDir = "/var/run/lttng";

bool daemon_answers(const Environment& env) {
    return run_captured({"lttng", "list"}, env).status == 0;
}

std::string errno_text(const char* what, const char* path) {
    return std::string(what) + ": path=" + path + ", reason=" + std::strerror(errno);
}

// Moves this process into a private mount namespace with an empty tmpfs on /var/run/lttng.
std::string enter_private_run_dir() {
    if (unshare(CLONE_NEWNS) != 0)
        return errno_text("Cannot create a private mount namespace for the session daemon (needs CAP_SYS_ADMIN)", "/");
    // Our mounts must not propagate back to the host's namespace.
    if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        return errno_text("Cannot make the mount namespace private", "/");
    std::error_code ec;
    fs::create_directories(kRootRunDir, ec);
    if (mount("sigmatrace-lttng", kRootRunDir, "tmpfs", 0, "mode=0755") != 0)
        return errno_text("Cannot mount a private tmpfs for the session daemon", kRootRunDir);
    return "";
}

// The run directory of the daemon that LTTNG_HOME=home reaches: the root daemon's is fixed.
std::string run_dir_of(const std::string& home) {
    if (geteuid() == 0) return kRootRunDir;
    return home + "/.lttng";
}

std::string pid_file(const std::string& home) {
    return run_dir_of(home) + "/lttng-sessiond.pid";
}

// The number in the first "<tag>N</tag>" of `xml`; 0 when there is none.
uint64_t tag_value(std::string_view xml, std::string_view tag) {
    const std::string open = fmt::format("<{}>", tag);
    const size_t pos = xml.find(open);
    uint64_t v = 0;
    if (pos != std::string_view::npos) std::from_chars(xml.data() + pos + open.size(), xml.data() + xml.size(), v);
    return v;
}

// SIGKILL to `pid` and every process under it (a session daemon's consumer daemons), children first.
void kill_tree(pid_t pid) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        const std::string name = e.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream stat(e.path() / "stat");
        std::string line;
        std::getline(stat, line);
        // pid (comm) state ppid ...: comm may hold spaces and parentheses, so parse after the last ')'.
        const auto close = line.rfind(')');
        if (close == std::string::npos) continue;
        char state = 0;
        int ppid = 0;
        if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == pid)
            kill_tree(static_cast<pid_t>(std::stoi(name)));
    }
    kill(pid, SIGKILL);
}

}  // namespace

std::unique_ptr<SessionDaemon> SessionDaemon::acquire(std::string* error) {
    std::unique_ptr<SessionDaemon> d(new SessionDaemon());
    if (daemon_answers(d->tool_environment())) return d;

    // No daemon answers: start a private one.
    d->private_ = true;
    if (geteuid() == 0) {
        if (std::string e = enter_private_run_dir(); !e.empty()) {
            *error = e;
            return nullptr;
        }
    }
    char home[] = "/tmp/sigmatrace-record.XXXXXX";
    if (mkdtemp(home) == nullptr) {
        *error = errno_text("Cannot create a private LTTNG_HOME", "/tmp/sigmatrace-record.XXXXXX");
        return nullptr;
    }
    d->private_home_ = home;
    setenv("LTTNG_HOME", home, 1);
    const Captured c = run_captured({"lttng-sessiond", "--daemonize", "--no-kernel"}, d->tool_environment());
    if (c.status != 0) {
        *error = "Cannot start a private lttng-sessiond (is lttng-tools installed?): status=" + std::to_string(c.status) +
                 ", output=" + c.output;
        return nullptr;
    }
    if (!daemon_answers(d->tool_environment())) {
        *error = "Started a private lttng-sessiond but `lttng list` cannot reach it: LTTNG_HOME=" + d->private_home_;
        return nullptr;
    }
    return d;
}

SessionDaemon::~SessionDaemon() {
    if (!private_) return;
    // Stop the daemon this object started, and wait until it (and its consumer) finished writing.
    std::ifstream in(pid_file(private_home_));
    pid_t pid = 0;
    if (in >> pid && pid > 0 && kill(pid, SIGTERM) == 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(stuck_ ? 2 : 10);
        while (kill(pid, 0) == 0 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        // A daemon holding a stream that can never be delivered (crash_recovery.h) does not exit on SIGTERM;
        // left alone it would outlive the recording with its consumers and their buffers.
        if (kill(pid, 0) == 0) kill_tree(pid);
    }
    if (!private_home_.empty()) {
        std::error_code ec;
        fs::remove_all(private_home_, ec);
    }
}

std::string SessionDaemon::run_dir() const {
    // A private daemon's LTTNG_HOME is set in this process's environment (acquire()).
    const char* home = std::getenv("LTTNG_HOME");
    if (home == nullptr || *home == 0) home = std::getenv("HOME");
    return run_dir_of(home != nullptr ? home : "");
}

Environment SessionDaemon::tool_environment() const {
    return without(current_environment(), "LD_PRELOAD");
}

RecordingSession::RecordingSession(const SessionDaemon& daemon, std::string name)
    : env_(daemon.tool_environment()), name_(name.empty() ? "sigmatrace-" + std::to_string(getpid()) : std::move(name)) {}

RecordingSession::~RecordingSession() {
    destroy();
}

void RecordingSession::destroy() {
    if (!created_) return;
    created_ = false;
    // Bounded: stop() already waited until every event was in the trace, but destroy waits again for the data
    // of every stream, and a stream whose process was killed in the middle of writing an event never finishes
    // (crash_recovery.h). The daemon goes on destroying the session alone.
    constexpr const char* kDestroyLimit = "20";
    std::vector<std::string> argv = {"timeout", "--kill-after=2", kDestroyLimit, "lttng", "destroy", name_};
    if (no_wait_) argv.push_back("--no-wait");
    const Captured c = run_captured(argv, env_);
    if (c.status == 124 || c.status == 137)
        fmt::print(stderr, "sigmatrace record: 'lttng destroy {}' did not finish within {} s (a traced process killed "
                           "while writing an event leaves a stream LTTng waits for); the trace written stands\n",
                   name_, kDestroyLimit);
}

bool RecordingSession::exists() {
    return lttng({"list", name_}).status == 0;
}

Captured RecordingSession::lttng(std::vector<std::string> args) {
    args.insert(args.begin(), "lttng");
    return run_captured(args, env_);
}

std::string RecordingSession::check(const Captured& c, const std::vector<std::string>& args) {
    if (c.status == 0) return "";
    std::string cmd = "lttng";
    for (const auto& a : args) cmd += " " + a;
    return "LTTng command failed: command=\"" + cmd + "\", status=" + std::to_string(c.status) + ", output=\"" +
           c.trimmed_output() + "\"";
}

std::string RecordingSession::start(const std::string& output_dir, const std::string& relay_url,
                                    const ChannelSettings& channel, const std::string& buffers_dir) {
    std::vector<std::vector<std::string>> steps;
    if (!relay_url.empty())
        // Live: the relay serves the session while it records (sigmatrace-analyze --live), its streams flushed
        // every kLiveTimerUs.
        steps.push_back({"create", name_, "--set-url=" + relay_url, "--live=" + std::to_string(kLiveTimerUs)});
    else
        steps.push_back({"create", name_, "--output=" + output_dir});
    if (!buffers_dir.empty()) steps.back().push_back("--shm-path=" + buffers_dir);
    const auto enable_channel = [&](const char* channel_name, uint64_t subbuffer_size, uint32_t subbuffers) {
        std::vector<std::string> enable = {"enable-channel", "--userspace", "--session=" + name_, "--buffers-uid",
                                           "--subbuf-size=" + std::to_string(subbuffer_size),
                                           "--num-subbuf=" + std::to_string(subbuffers)};
        if (channel.blocking) enable.push_back("--blocking-timeout=inf");
        enable.push_back(channel_name);
        steps.push_back(enable);
        steps.push_back({"add-context", "--userspace", "--session=" + name_, std::string("--channel=") + channel_name,
                         "--type=vpid", "--type=vtid", "--type=procname"});
    };
    enable_channel(kChannelName, channel.subbuffer_size, channel.subbuffers);
    enable_channel(kSetupChannelName, kSetupSubbufferSize, kSetupSubbuffers);
    steps.push_back({"enable-event", "--userspace", "--session=" + name_, std::string("--channel=") + kSetupChannelName,
                     channel_event_names(false)});
    steps.push_back({"enable-event", "--userspace", "--session=" + name_, std::string("--channel=") + kChannelName,
                     channel_event_names(true)});
    steps.push_back({"start", name_});
    for (size_t i = 0; i < steps.size(); ++i) {
        const Captured c = lttng(steps[i]);
        if (i == 0 && c.status == 0) created_ = true;
        // The session connects to the relay with its first channel.
        if (c.status != 0 && !relay_url.empty())
            if (const std::string why = relay_unreachable(relay_url); !why.empty())
                return "Cannot reach lttng-relayd at " + relay_url + " (" + why +
                       "; its control and data ports are 5342 and 5343 unless the URL names others): start it on "
                       "that host, e.g. `lttng-relayd --daemonize --output=DIR`, and let this host reach those ports "
                       "(lttng said: " + c.trimmed_output() + ")";
        if (std::string e = check(c, steps[i]); !e.empty()) return e;
    }
    return "";
}

std::string channel_event_names(bool data) {
    std::string names;
    for (std::size_t i = 0; i < kEventCount; ++i)
        if (carries_data_path(static_cast<EventId>(i)) == data)
            names += fmt::format("{}{}:{}", names.empty() ? "" : ",", kProviderName, kEventNames[i]);
    return names;
}

std::string RecordingSession::stop() {
    const std::vector<std::string> args = {"stop", name_};
    return check(lttng(args), args);
}

std::string RecordingSession::restart() {
    const std::vector<std::string> args = {"start", name_};
    return check(lttng(args), args);
}

std::string RecordingSession::rotate(bool* ok) {
    const std::vector<std::string> args = {"rotate", name_};
    const Captured c = lttng(args);
    *ok = c.status == 0;
    if (!*ok) return check(c, args);
    return c.trimmed_output();
}

std::optional<RecordingSession::Loss> RecordingSession::loss(std::string* error) {
    const std::vector<std::string> args = {"--mi", "xml", "list", name_};
    const Captured c = lttng(args);
    if (std::string e = check(c, args); !e.empty()) {
        *error = e;
        return std::nullopt;
    }
    std::optional<Loss> l = Loss::parse(c.output);
    if (!l) *error = "Cannot read the discarded-event count: `lttng --mi xml list " + name_ + "` has no <discarded_events>";
    return l;
}

std::optional<RecordingSession::Loss> RecordingSession::Loss::parse(std::string_view xml) {
    if (xml.find("<discarded_events>") == std::string_view::npos) return std::nullopt;
    Loss l;
    // Each channel's element: its name first, its counts among its attributes.
    constexpr std::string_view kOpen = "<channel>", kClose = "</channel>";
    for (size_t at = xml.find(kOpen); at != std::string_view::npos; at = xml.find(kOpen, at + 1)) {
        const size_t end = xml.find(kClose, at);
        const std::string_view channel = xml.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
        const size_t name_at = channel.find("<name>"), name_end = channel.find("</name>");
        const std::string_view name = name_at == std::string_view::npos || name_end == std::string_view::npos
                                          ? std::string_view()
                                          : channel.substr(name_at + 6, name_end - name_at - 6);
        Count& c = name == kSetupChannelName ? l.setup : l.data;
        c.events += tag_value(channel, "discarded_events");
        c.packets += tag_value(channel, "lost_packets");
    }
    return l;
}

namespace {

// A relay URL's parts: net://HOST[:CTRL[:DATA]], net6://[ADDR][:CTRL[:DATA]] (tcp:// and tcp6:// alike).
struct RelayAddress {
    std::string scheme;   // "net", "net6", ...
    std::string host;     // without the brackets of an IPv6 address
    bool bracketed = false;
    std::string control_port = "5342";
};

std::optional<RelayAddress> parse_relay_url(const std::string& url) {
    RelayAddress r;
    std::string rest;
    for (const char* scheme : {"net://", "net6://", "tcp://", "tcp6://"})
        if (url.rfind(scheme, 0) == 0) {
            r.scheme = std::string(scheme, std::strlen(scheme) - 3);
            rest = url.substr(std::strlen(scheme));
        }
    if (rest.empty()) return std::nullopt;
    if (rest.front() == '[') {
        const size_t close = rest.find(']');
        if (close == std::string::npos) return std::nullopt;
        r.host = rest.substr(1, close - 1);
        r.bracketed = true;
        rest = rest.substr(close + 1);
    } else {
        const size_t colon = rest.find_first_of(":/");
        r.host = rest.substr(0, colon);
        rest = colon == std::string::npos ? "" : rest.substr(colon);
    }
    if (!rest.empty() && rest.front() == ':') {
        const size_t end = rest.find_first_of(":/", 1);
        r.control_port = rest.substr(1, end == std::string::npos ? std::string::npos : end - 1);
    }
    return r;
}

}  // namespace

std::string live_url_of(const std::string& relay_url, const std::string& host, const std::string& session) {
    const std::optional<RelayAddress> r = parse_relay_url(relay_url);
    if (!r) return "";
    return r->scheme + "://" + (r->bracketed ? "[" + r->host + "]" : r->host) + "/host/" + host + "/" + session;
}

std::string relay_unreachable(const std::string& url) {
    const std::optional<RelayAddress> r = parse_relay_url(url);
    if (!r) return "";  // not a network URL: nothing to ask
    const std::string& host = r->host;
    const std::string& port = r->control_port;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
        return "cannot resolve " + host + ": " + gai_strerror(rc);
    std::string why = "no address of " + host + " accepts a connection on port " + port;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            int err = 0;
            socklen_t len = sizeof err;
            ok = poll(&p, 1, 2000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
            if (!ok && err != 0) why = "port " + port + " of " + host + ": " + std::strerror(err);
        } else if (!ok) {
            why = "port " + port + " of " + host + ": " + std::strerror(errno);
        }
        close(fd);
        if (ok) {
            freeaddrinfo(found);
            return "";
        }
    }
    freeaddrinfo(found);
    return why;
}

}  // namespace sigmatrace::record
