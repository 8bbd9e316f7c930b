#include "record/traced_environment.h"

#include <algorithm>
#include <vector>

namespace sigmatrace::record {
namespace {

void set_default(Environment& env, const std::string& name, const std::string& value) {
    if (find_variable(env, name) == nullptr) set_variable(env, name, value);
}

// Whether `entry` is one of the items of `list` separated by any of `separators`.
bool contains_entry(const std::string& list, const std::string& entry, const char* separators) {
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find_first_of(separators, start);
        if (end == std::string::npos) end = list.size();
        if (list.compare(start, end - start, entry) == 0) return true;
        start = end + 1;
    }
    return false;
}

}  // namespace

Environment traced_environment(Environment env, const TraceSetup& setup) {
    std::string preload = value_of(env, "LD_PRELOAD");
    if (!setup.sanitizer_runtime.empty() && !contains_entry(preload, setup.sanitizer_runtime, ": "))
        preload = preload.empty() ? setup.sanitizer_runtime : setup.sanitizer_runtime + ":" + preload;
    if (preload.empty()) preload = setup.preload_library;
    else if (!contains_entry(preload, setup.preload_library, ": ")) preload += ":" + setup.preload_library;
    set_variable(env, "LD_PRELOAD", preload);
    // Sanitizer builds only: options the runtime needs in programs that were not built for it.
    auto add_option = [&](const char* var, const char* key, const char* option) {
        const std::string v = value_of(env, var);
        if (v.find(key) == std::string::npos) set_variable(env, var, v.empty() ? option : v + ":" + option);
    };
    if (setup.sanitizer_runtime.find("libasan") != std::string::npos)
        add_option("ASAN_OPTIONS", "detect_leaks", "detect_leaks=0");
    if (setup.sanitizer_runtime.find("libtsan") != std::string::npos)  // lttng-ust restarts threads in a forked child
        add_option("TSAN_OPTIONS", "die_after_fork", "die_after_fork=0");

    set_default(env, "LTTNG_UST_REGISTER_TIMEOUT", kRegisterTimeoutMs);
    set_default(env, "LTTNG_UST_WITHOUT_BADDR_STATEDUMP", "1");
    set_default(env, "LTTNG_UST_WITHOUT_PROCNAME_STATEDUMP", "1");
    if (setup.blocking) set_variable(env, "LTTNG_UST_ALLOW_BLOCKING", "1");
    if (!setup.mode.empty()) set_variable(env, "SIGMATRACE_MODE", setup.mode);
    if (!setup.report_file.empty()) set_variable(env, "SIGMATRACE_RECORD_REPORT", setup.report_file);
    if (!setup.salvage_dir.empty()) set_variable(env, "SIGMATRACE_SALVAGE_DIR", setup.salvage_dir);
    return env;
}

std::vector<std::string> rank_variables(const Environment& env) {
    std::vector<std::string> names;
    for (const char* n : {"LD_PRELOAD", "LTTNG_UST_REGISTER_TIMEOUT", "LTTNG_UST_WITHOUT_BADDR_STATEDUMP",
                          "LTTNG_UST_WITHOUT_PROCNAME_STATEDUMP", "LTTNG_UST_ALLOW_BLOCKING"})
        if (find_variable(env, n) != nullptr) names.emplace_back(n);
    for (const auto& e : env) {
        if (e.rfind("SIGMATRACE_", 0) != 0) continue;
        const std::string name = e.substr(0, e.find('='));
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
}

}  // namespace sigmatrace::record
