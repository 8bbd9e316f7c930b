#include "interpose/runtime/config.h"

#include "interpose/capture/capture_clock.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

namespace sigmatrace::interpose {
namespace {

// The configuration in force: written before the program runs (library constructor) or by a test between
// runs, read afterwards. Guarded by nothing else because nothing writes it concurrently with readers.
// Constructed on first use, never destroyed: the library constructor writes it before the dynamic initialisers of
// other translation units are guaranteed to have run (their order follows the link order), and destructors that
// run after ours (other libraries', atexit handlers) may still read it.
Config& stored_config() noexcept {
    union Storage {
        Config value;
        Storage() : value() {}
        ~Storage() {}
    };
    static Storage storage;
    return storage.value;
}

void note(std::string* errors, std::string_view var, std::string_view value, std::string_view expected) {
    if (errors == nullptr) return;
    errors->append("sigmatrace: Ignoring ").append(var).append("=").append(value).append(": expected ").append(expected);
    errors->append("\n");
}

// Splits a comma list and calls f(item) for each non-empty item; returns false if f rejected one.
template <typename F> bool for_each_item(std::string_view list, F f) {
    bool ok = true;
    while (!list.empty()) {
        const size_t comma = list.find(',');
        std::string_view item = list.substr(0, comma);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        if (!item.empty() && !f(item)) ok = false;
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
    return ok;
}

uint32_t flags_for(const Config& c) {
    if (c.mode == Mode::off) return 0;
    if (c.mode == Mode::counters) return kFlagCounting;
    uint32_t f = 0;
    if (c.categories & kCategorySend) f |= kFlagSendEvents;
    if (c.categories & kCategoryRecv) f |= kFlagRecvEvents;
    if (c.categories & kCategoryPoll) f |= kFlagPollEvents;
    if (c.categories & kCategoryNotify) f |= kFlagNotifyEvents;
    if (c.defer) f |= kFlagDefer;
    return f;
}

}  // namespace

Config parse_config(const char* (*get)(const char*), std::string* errors) {
    Config c;
    if (const char* v = get("SIGMATRACE_MODE"); v != nullptr && *v != '\0') {
        std::string_view s = v;
        if (s == "ops") c.mode = Mode::ops;
        else if (s == "counters") c.mode = Mode::counters;
        else if (s == "off") c.mode = Mode::off;
        else note(errors, "SIGMATRACE_MODE", s, "ops, counters or off");
    }
    if (const char* v = get("SIGMATRACE_EVENTS"); v != nullptr && *v != '\0') {
        uint32_t cats = 0;
        const bool ok = for_each_item(v, [&](std::string_view item) {
            if (item == "all") cats |= kCategoryAll;
            else if (item == "send") cats |= kCategorySend;
            else if (item == "recv") cats |= kCategoryRecv;
            else if (item == "poll") cats |= kCategoryPoll;
            else if (item == "notify") cats |= kCategoryNotify;
            else if (item == "none") {}
            else return false;
            return true;
        });
        if (ok) c.categories = cats;
        else note(errors, "SIGMATRACE_EVENTS", v, "a comma list of all, send, recv, poll, notify, none");
    }
    if (const char* v = get("SIGMATRACE_REDACT"); v != nullptr && *v != '\0') {
        uint32_t bits = 0;
        const bool ok = for_each_item(v, [&](std::string_view item) {
            if (item == "none") {}
            else if (item == "addresses" || item == "addr") bits |= kRedactAddresses;
            else if (item == "keys") bits |= kRedactKeys;
            else if (item == "all") bits |= kRedactAddresses | kRedactKeys;
            else return false;
            return true;
        });
        if (ok) c.redact = bits;
        else note(errors, "SIGMATRACE_REDACT", v, "none, addresses, keys or all (comma list)");
    }
    if (const char* v = get("SIGMATRACE_COUNTERS_INTERVAL_MS"); v != nullptr && *v != '\0') {
        char* end = nullptr;
        const unsigned long ms = std::strtoul(v, &end, 10);
        if (end != nullptr && *end == '\0' && ms >= 1 && ms <= 3600000) c.counters_interval_ms = static_cast<uint32_t>(ms);
        else note(errors, "SIGMATRACE_COUNTERS_INTERVAL_MS", v, "milliseconds between 1 and 3600000");
    }
    if (const char* v = get("SIGMATRACE_DEBUG"); v != nullptr && *v != '\0') {
        std::string_view s = v;
        if (s == "1") c.debug = true;
        else if (s != "0") note(errors, "SIGMATRACE_DEBUG", s, "0 or 1");
    }
    if (const char* v = get("SIGMATRACE_DEFER"); v != nullptr && *v != '\0') {
        std::string_view s = v;
        if (s == "1") c.defer = true;
        else if (s == "0") c.defer = false;
        else note(errors, "SIGMATRACE_DEFER", s, "1 (deferred emission) or 0 (immediate)");
    }
    if (const char* v = get("SIGMATRACE_DEFER_FORMAT"); v != nullptr && *v != '\0') {
        std::string_view s = v;
        // Kept so that a setting of the removed events format says what to use instead.
        if (s != "records")
            note(errors, "SIGMATRACE_DEFER_FORMAT", s,
                 "records (the only format; babeltrace2's filter.sigmatrace.expand prints records as one event per "
                 "call)");
    }
    if (const char* v = get("SIGMATRACE_DEFER_MAX_AGE_US"); v != nullptr && *v != '\0') {
        char* end = nullptr;
        const unsigned long us = std::strtoul(v, &end, 10);
        if (end != nullptr && *end == '\0' && us >= 100 && us <= 1000000) c.defer_max_age_us = static_cast<uint32_t>(us);
        else note(errors, "SIGMATRACE_DEFER_MAX_AGE_US", v, "microseconds between 100 and 1000000");
    }
    if (const char* v = get("SIGMATRACE_DEFER_RING_KB"); v != nullptr && *v != '\0') {
        char* end = nullptr;
        const unsigned long kb = std::strtoul(v, &end, 10);
        if (end != nullptr && *end == '\0' && kb >= 16 && kb <= 65536) c.defer_ring_kb = static_cast<uint32_t>(kb);
        else note(errors, "SIGMATRACE_DEFER_RING_KB", v, "KiB between 16 and 65536");
    }
    if (const char* v = get("SIGMATRACE_PROVIDER"); v != nullptr) c.provider_path = v;
    if (const char* v = get("SIGMATRACE_RECORD_REPORT"); v != nullptr) c.record_report = v;
    if (const char* v = get("SIGMATRACE_SALVAGE_DIR"); v != nullptr) c.salvage_dir = v;
    // lttng-ust's own variable, parsed exactly as it does (strtol, every negative value meaning -1), not validated:
    // it is lttng-ust's to judge.
    if (const char* v = get("LTTNG_UST_REGISTER_TIMEOUT"); v != nullptr) {
        const long ms = std::strtol(v, nullptr, 10);
        c.register_timeout_ms = ms < -1 ? -1 : ms;
    }
    return c;
}

const Config& config() noexcept {
    return stored_config();
}

void set_config(const Config& c) noexcept {
    stored_config() = c;
    detail::g_defer_max_age_ns.store(static_cast<uint64_t>(c.defer_max_age_us) * 1000, std::memory_order_relaxed);
    detail::g_redact.store(c.redact, std::memory_order_relaxed);
    detail::g_defer_max_age_ticks.store(capture_clock::ticks_for_ns(static_cast<uint64_t>(c.defer_max_age_us) * 1000),
                                        std::memory_order_relaxed);
    detail::g_data_path_flags.store(flags_for(c), std::memory_order_relaxed);
}

}  // namespace sigmatrace::interpose
