#include "core/config.h"

#include <fmt/core.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace softfabric {
namespace {

std::vector<std::string_view> split_words(std::string_view line) {
    std::vector<std::string_view> words;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
        size_t start = i;
        while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
        if (i > start) words.push_back(line.substr(start, i - start));
    }
    return words;
}

// Splits "12.5GB/s" into 12.5 and "GB/s".
std::pair<double, std::string> number_and_unit(std::string_view text, const char* what) {
    size_t n = 0;
    while (n < text.size() && (std::isdigit(static_cast<unsigned char>(text[n])) || text[n] == '.')) ++n;
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + n, value);
    if (n == 0 || ec != std::errc() || end != text.data() + n)
        throw ConfigError(fmt::format("invalid {} '{}': expected a number followed by a unit", what, text));
    std::string unit(text.substr(n));
    for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return {value, unit};
}

NicSelector parse_nic(std::string_view text) {
    NicSelector sel;
    if (text == "*") return sel;
    auto slash = text.find('/');
    std::string_view node = text.substr(0, slash);
    std::string_view rail = slash == std::string_view::npos ? std::string_view("*") : text.substr(slash + 1);
    if (node != "*") {
        auto parsed = parse_node_name(std::string(node));
        if (!parsed || *parsed >= kMaxNodes)
            throw ConfigError(fmt::format("invalid node '{}' in '{}': use nodeN or N with N < {}, or *", node,
                                          text, kMaxNodes));
        sel.node = static_cast<int32_t>(*parsed);
    }
    if (rail != "*") {
        std::string_view r = rail;
        if (r.starts_with("sfab_")) r.remove_prefix(5);
        uint32_t value = 0;
        auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), value);
        if (r.empty() || ec != std::errc() || end != r.data() + r.size() || value >= kMaxRails)
            throw ConfigError(fmt::format("invalid rail '{}' in '{}': use a number < {}, sfab_N, or *", rail,
                                          text, kMaxRails));
        sel.rail = static_cast<int32_t>(value);
    }
    return sel;
}

// Parses "SRC -> DST" or "SRC <-> DST" starting at words[i]; advances i past it.
LinkSelector parse_link(const std::vector<std::string_view>& words, size_t& i) {
    if (i + 3 > words.size()) throw ConfigError("expected 'SRC -> DST' or 'SRC <-> DST'");
    LinkSelector link;
    link.src = parse_nic(words[i]);
    if (words[i + 1] == "->") {
        link.both = false;
    } else if (words[i + 1] == "<->") {
        link.both = true;
    } else {
        throw ConfigError(fmt::format("expected '->' or '<->' after '{}', found '{}'", words[i], words[i + 1]));
    }
    link.dst = parse_nic(words[i + 2]);
    i += 3;
    return link;
}

double parse_plain_number(std::string_view text, const char* what) {
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        throw ConfigError(fmt::format("invalid {} '{}': expected a number", what, text));
    return value;
}

std::string_view value_after(const std::vector<std::string_view>& words, size_t& i) {
    if (i + 1 >= words.size()) throw ConfigError(fmt::format("'{}' needs a value", words[i]));
    i += 2;
    return words[i - 1];
}

void parse_window(const std::vector<std::string_view>& words, size_t& i, Fault& fault) {
    while (i < words.size()) {
        if (words[i] == "from") {
            fault.from_ns = parse_duration_ns(value_after(words, i));
        } else if (words[i] == "to") {
            fault.to_ns = parse_duration_ns(value_after(words, i));
        } else {
            throw ConfigError(fmt::format("unexpected '{}': expected 'from TIME' or 'to TIME'", words[i]));
        }
    }
    if (fault.to_ns <= fault.from_ns)
        throw ConfigError("the fault window is empty: 'to' must be later than 'from'");
}

void parse_statement(const std::vector<std::string_view>& words, FabricConfig& config) {
    std::string_view keyword = words[0];
    size_t i = 1;
    if (keyword == "bandwidth" || keyword == "latency" || keyword == "mtu" || keyword == "seed") {
        if (words.size() != 2) throw ConfigError(fmt::format("'{}' takes exactly one value", keyword));
        if (keyword == "bandwidth") {
            config.defaults.bandwidth_bytes_per_s = parse_bandwidth(words[1]);
        } else if (keyword == "latency") {
            config.defaults.latency_ns = parse_duration_ns(words[1]);
        } else if (keyword == "mtu") {
            double mtu = parse_plain_number(words[1], "mtu");
            if (mtu != 256 && mtu != 512 && mtu != 1024 && mtu != 2048 && mtu != 4096)
                throw ConfigError(fmt::format("invalid mtu '{}': use 256, 512, 1024, 2048 or 4096", words[1]));
            config.mtu = static_cast<uint32_t>(mtu);
        } else {
            config.loss_seed = static_cast<uint64_t>(parse_plain_number(words[1], "seed"));
        }
        return;
    }
    if (keyword == "link") {
        LinkOverride ov;
        ov.link = parse_link(words, i);
        while (i < words.size()) {
            if (words[i] == "bandwidth") {
                ov.params.bandwidth_bytes_per_s = parse_bandwidth(value_after(words, i));
                ov.has_bandwidth = true;
            } else if (words[i] == "latency") {
                ov.params.latency_ns = parse_duration_ns(value_after(words, i));
                ov.has_latency = true;
            } else {
                throw ConfigError(fmt::format("unexpected '{}': expected 'bandwidth RATE' or 'latency TIME'",
                                              words[i]));
            }
        }
        if (!ov.has_bandwidth && !ov.has_latency)
            throw ConfigError("'link' needs 'bandwidth RATE' and/or 'latency TIME'");
        config.overrides.push_back(ov);
        return;
    }
    if (keyword == "slow" || keyword == "loss" || keyword == "down") {
        Fault fault;
        fault.link = parse_link(words, i);
        if (keyword == "slow") {
            fault.kind = FaultKind::Slow;
            if (i >= words.size() || words[i] != "factor") throw ConfigError("'slow' needs 'factor F'");
            fault.value = parse_plain_number(value_after(words, i), "factor");
            if (!(fault.value >= 1.0)) throw ConfigError("the slow-down factor must be >= 1");
        } else if (keyword == "loss") {
            fault.kind = FaultKind::Loss;
            if (i >= words.size() || words[i] != "probability") throw ConfigError("'loss' needs 'probability P'");
            fault.value = parse_plain_number(value_after(words, i), "probability");
            if (!(fault.value >= 0.0 && fault.value <= 1.0))
                throw ConfigError("the loss probability must be between 0 and 1");
        } else {
            fault.kind = FaultKind::Down;
        }
        parse_window(words, i, fault);
        config.faults.push_back(fault);
        return;
    }
    if (keyword == "clock") {
        if (i >= words.size()) throw ConfigError("'clock' needs a node: clock nodeN offset TIME drift Nppm");
        const NicSelector nic = parse_nic(words[i++]);
        if (nic.node == NicSelector::kAny || nic.rail != NicSelector::kAny)
            throw ConfigError("'clock' takes one node (nodeN): a clock belongs to a host, not to a NIC");
        ClockSkew skew;
        skew.node = static_cast<uint32_t>(nic.node);
        bool any = false;
        while (i < words.size()) {
            if (words[i] == "offset") {
                std::string_view v = value_after(words, i);
                const bool negative = v.starts_with('-');
                if (negative || v.starts_with('+')) v.remove_prefix(1);
                const auto ns = static_cast<int64_t>(parse_duration_ns(v));
                skew.offset_ns = negative ? -ns : ns;
            } else if (words[i] == "drift") {
                std::string_view v = value_after(words, i);
                if (!v.ends_with("ppm")) throw ConfigError(fmt::format("invalid drift '{}': expected e.g. 50ppm or -20ppm", v));
                v.remove_suffix(3);
                if (v.starts_with('+')) v.remove_prefix(1);
                skew.drift_ppm = parse_plain_number(v, "drift");
                if (!(skew.drift_ppm > -1e5 && skew.drift_ppm < 1e5))
                    throw ConfigError("the drift must be within +-100000ppm");
            } else {
                throw ConfigError(fmt::format("unexpected '{}': expected 'offset TIME' or 'drift Nppm'", words[i]));
            }
            any = true;
        }
        if (!any) throw ConfigError("'clock' needs 'offset TIME' and/or 'drift Nppm'");
        std::erase_if(config.clocks, [&](const ClockSkew& c) { return c.node == skew.node; });
        config.clocks.push_back(skew);
        return;
    }
    throw ConfigError(fmt::format(
        "unknown statement '{}': expected bandwidth, latency, mtu, seed, link, slow, loss, down or clock", keyword));
}

}  // namespace

std::string NicSelector::to_string() const {
    std::string n = node == kAny ? "*" : node_name(static_cast<uint32_t>(node));
    std::string r = rail == kAny ? "*" : std::to_string(rail);
    return n + "/" + r;
}

std::string LinkSelector::to_string() const {
    return src.to_string() + (both ? " <-> " : " -> ") + dst.to_string();
}

uint64_t parse_bandwidth(std::string_view text) {
    if (text == "unlimited" || text == "0") return 0;
    auto [value, unit] = number_and_unit(text, "bandwidth");
    if (unit.ends_with("/s")) unit.resize(unit.size() - 2);
    if (unit.ends_with("bps")) {  // Gbps -> gbit
        unit.resize(unit.size() - 3);
        unit += "bit";
    }
    double bytes_per_s = 0;
    struct Unit {
        const char* name;
        double bytes;
    };
    static constexpr Unit kUnits[] = {
        {"bit", 1.0 / 8},   {"kbit", 1e3 / 8},   {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8}, {"tbit", 1e12 / 8},
        {"b", 1},           {"kb", 1e3},         {"mb", 1e6},       {"gb", 1e9},       {"tb", 1e12},
        {"kib", 1024.0},    {"mib", 1048576.0},  {"gib", 1073741824.0},
    };
    bool known = false;
    for (const auto& u : kUnits) {
        if (unit == u.name) {
            bytes_per_s = value * u.bytes;
            known = true;
        }
    }
    if (!known)
        throw ConfigError(fmt::format("invalid bandwidth unit in '{}': use e.g. 100Gbit/s, 25Gbps, 12.5GB/s, "
                                      "800MiB/s or unlimited",
                                      text));
    if (bytes_per_s < 1) throw ConfigError(fmt::format("bandwidth '{}' is below 1 byte/s", text));
    return static_cast<uint64_t>(std::llround(bytes_per_s));
}

uint64_t parse_duration_ns(std::string_view text) {
    if (text == "0") return 0;
    auto [value, unit] = number_and_unit(text, "time");
    double scale = 0;
    if (unit == "ns") {
        scale = 1;
    } else if (unit == "us") {
        scale = 1e3;
    } else if (unit == "ms") {
        scale = 1e6;
    } else if (unit == "s") {
        scale = 1e9;
    } else {
        throw ConfigError(fmt::format("invalid time unit in '{}': use ns, us, ms or s", text));
    }
    return static_cast<uint64_t>(std::llround(value * scale));
}

FabricConfig parse_config(std::string_view text, const std::string& file_name) {
    FabricConfig config;
    size_t line_no = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        auto words = split_words(line);
        if (words.empty()) continue;
        try {
            parse_statement(words, config);
        } catch (const ConfigError& e) {
            throw ConfigError(fmt::format("{}:{}: {}", file_name, line_no, e.what()));
        }
    }
    return config;
}

FabricConfig load_config_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw ConfigError(fmt::format("Cannot read fabric configuration: path={}", path));
    std::stringstream buffer;
    buffer << in.rdbuf();
    return parse_config(buffer.str(), path);
}

}  // namespace softfabric
