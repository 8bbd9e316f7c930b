// Running the LTTng command-line tools and the recorded command.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace sigmatrace::record {

using Environment = std::vector<std::string>;  // "NAME=value" entries

// This process's environment.
Environment current_environment();
// `env` without NAME (all its entries).
Environment without(Environment env, const std::string& name);
// The value of NAME in env, or nullptr.
const std::string* find_variable(const Environment& env, const std::string& name);
// The value of NAME in env, "" when it is not set.
std::string value_of(const Environment& env, const std::string& name);
// Sets NAME=value in env (replacing any previous value).
void set_variable(Environment& env, const std::string& name, const std::string& value);

struct Captured {
    int status = -1;     // exit code, 128+signal, or -1 when it could not be started
    std::string output;  // stdout and stderr together (or why it could not be started)
    // `output` without its trailing newlines and spaces, for quoting in a message.
    std::string trimmed_output() const {
        std::string out = output;
        while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
        return out;
    }
};

// Runs argv (looked up in PATH) with env, collecting its output.
Captured run_captured(const std::vector<std::string>& argv, const Environment& env);

// Runs the recorded command in the foreground: its output goes to ours; SIGINT and SIGQUIT reach it (same
// process group) while this process ignores them, so that a Ctrl-C ends the command and the recording is
// still closed properly; SIGTERM and SIGHUP are forwarded to it. Returns its exit code, 128+signal when it was
// killed, or 127 (with *spawn_error set) when it could not be started. `on_sigusr1`, when set, runs (in this
// process, not in a handler) each time this process receives SIGUSR1 while the command runs.
int run_foreground(const std::vector<std::string>& argv, const Environment& env, std::string* spawn_error,
                   const std::function<void()>& on_sigusr1 = {});

}  // namespace sigmatrace::record
