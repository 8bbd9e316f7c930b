// The LTTng side of `sigmatrace record`: find or start a session daemon, and run one recording session on it,
// through the lttng command-line tool (lttng-tools 2.13; the commands and their machine-interface output are
// stable across 2.x).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "record/subprocess.h"

namespace sigmatrace::record {

// A session daemon to record with: the user's if one answers, else a private one that is stopped (and its
// files removed) when this object goes away.
//
// Private daemon: as root, the root daemon's run directory (/var/run/lttng) is fixed, so this process first
// moves into a mount namespace of its own with a fresh tmpfs there (the recorded command inherits it); a
// daemon started that way is invisible to, and cannot disturb, anything else on the machine. As another user,
// a per-user daemon under a private LTTNG_HOME. Either way LTTNG_HOME is set in this process's environment, so
// the recorded command's processes register with this daemon.
class SessionDaemon {
public:
    static std::unique_ptr<SessionDaemon> acquire(std::string* error);
    ~SessionDaemon();
    SessionDaemon(const SessionDaemon&) = delete;
    SessionDaemon& operator=(const SessionDaemon&) = delete;

    bool is_private() const { return private_; }
    // A session of this daemon holds a stream that can never be delivered (crash_recovery.h): a private daemon
    // is then given 2 s, not 10, to exit before it is killed.
    void expect_stuck() { stuck_ = true; }
    // The environment the lttng tools run with (ours, minus LD_PRELOAD: the tools are neither traced nor
    // sanitized).
    Environment tool_environment() const;
    // Where the daemon keeps its sockets and pid file: local to this host (LTTng requires it).
    std::string run_dir() const;

private:
    SessionDaemon() = default;
    bool private_ = false;
    bool stuck_ = false;
    std::string private_home_;  // temporary LTTNG_HOME to remove, when private
};

struct ChannelSettings {
    uint64_t subbuffer_size = 0;
    uint32_t subbuffers = 0;
    bool blocking = false;
};

// One recording session, named `name` (default: sigmatrace-PID): created by start() or taken over with adopt(),
// destroyed by destroy() or the destructor.
// How often a session streaming to a relay flushes its buffers to it: the delay before a live reader sees an event.
inline constexpr uint64_t kLiveTimerUs = 1'000'000;

class RecordingSession {
public:
    explicit RecordingSession(const SessionDaemon& daemon, std::string name = "");
    ~RecordingSession();
    RecordingSession(const RecordingSession&) = delete;
    RecordingSession& operator=(const RecordingSession&) = delete;

    // Creates the session (output directory, or relay URL when `relay` is set), its per-uid channel with the
    // vpid/vtid/procname contexts and the sigmatrace:* events, and starts it. Returns an error message naming
    // the lttng command that failed and what it said, or "". `buffers_dir`, when set, holds the ring buffers
    // as files (`--shm-path`: crash_recovery.h).
    std::string start(const std::string& output_dir, const std::string& relay_url, const ChannelSettings& channel,
                      const std::string& buffers_dir = "");

    // Stops tracing and waits until every event is in the trace. Returns an error message or "".
    std::string stop();
    // Starts tracing again after stop(). Returns an error message or "".
    std::string restart();

    // Rotates the session while it records (`lttng rotate`): what was recorded until now becomes a trace chunk
    // archive, a complete trace any reader can open, under OUTPUT/archives/. Returns lttng's message (which
    // names the archive) or an error message; `ok` says which.
    std::string rotate(bool* ok);

    // Discarded events and lost packets of the session's channels, read from `lttng --mi xml list`: the data
    // channel's (sized by --channel-size) and the set-up channel's (a fixed size) apart.
    struct Loss {
        struct Count {
            uint64_t events = 0;
            uint64_t packets = 0;
            bool any() const { return events != 0 || packets != 0; }
        };
        Count data;    // every channel but the set-up one
        Count setup;   // kSetupChannelName
        uint64_t discarded_events() const { return data.events + setup.events; }
        // From the text of `lttng --mi xml list SESSION`; nullopt when it has no discarded-event count.
        static std::optional<Loss> parse(std::string_view mi_xml);
    };
    std::optional<Loss> loss(std::string* error);

    const std::string& name() const { return name_; }
    // Whether the daemon has a session of this name.
    bool exists();
    // This object destroys the session (created by another process: job_session.h) as if it had created it.
    void adopt() { created_ = true; }
    // The opposite: the session outlives this object (another process destroys it).
    void release() { created_ = false; }
    // Destroys the session now, when this object created or adopted it; the trace is then complete.
    void destroy();

    // The destructor's `lttng destroy` returns at once (--no-wait) instead of waiting for every stream: for a
    // session with a stream that will never be delivered (crash_recovery.h), once what it held is recovered.
    void destroy_without_waiting() { no_wait_ = true; }

private:
    Captured lttng(std::vector<std::string> args);
    std::string check(const Captured& c, const std::vector<std::string>& args);

    Environment env_;
    std::string name_;
    bool created_ = false;
    bool no_wait_ = false;
};

// Whether lttng-relayd answers at `url` (net://HOST[:CTRL[:DATA]], net6://[ADDR][:CTRL[:DATA]]): a TCP
// connection to its control port within 2 s. Returns "" when it does, else why not. LTTng itself says nothing
// when a relay goes away during a recording (the consumer drops what it cannot send), so record asks.
std::string relay_unreachable(const std::string& url);
// The lttng-live URL of host `host`'s session `session` on the relay of `relay_url` (its default live port):
// net://RELAY/host/HOST/SESSION; "" when `relay_url` is not a network URL.
std::string live_url_of(const std::string& relay_url, const std::string& host, const std::string& session);

// The session's two channels: the data channel takes the data-path events (schema.h, carries_data_path) in
// the ring of the size asked for; the set-up channel takes every other sigmatrace event, in rings of its own
// (kSetupSubbufferSize x kSetupSubbuffers per CPU), so that a share of the analysis can read another host's set-up
// without its data (docs/analyzer.md, "In shares").
inline constexpr const char* kChannelName = "sigmatrace";
inline constexpr const char* kSetupChannelName = "sigmatrace_setup";
inline constexpr uint64_t kSetupSubbufferSize = 256 * 1024;
inline constexpr uint32_t kSetupSubbuffers = 4;
// The data-path events (`data`) or every other event of the schema, comma-separated with their provider
// ("sigmatrace:post_send,..."): what each channel enables, by name (lttng-tools 2.13 cannot list a session whose
// event rule has exclusions, so no wildcard with exclusions).
std::string channel_event_names(bool data);

}  // namespace sigmatrace::record
