#include "analyzer/outputs/ci_rules.h"

#include <fmt/core.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace sigmatrace::analyzer {

using nlohmann::json;

namespace {

std::string trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return std::string(s);
}

// Expands an alias into document paths; a name with a dot is a path already.
std::optional<std::vector<std::string>> expand_metric(const std::string& m, std::string& error) {
    std::string name = m, arg;
    if (auto lb = m.find('['); lb != std::string::npos) {
        if (m.back() != ']') {
            error = "unbalanced [ ]";
            return std::nullopt;
        }
        name = m.substr(0, lb);
        arg = m.substr(lb + 1, m.size() - lb - 2);
        if (arg.empty()) {
            error = "empty [ ]";
            return std::nullopt;
        }
    }
    const std::string op = arg.empty() ? "*" : arg;
    // findings.KIND: the JSON's findings are an array, so a dotted path through it means the count of that kind.
    if (name.starts_with("findings.") && arg.empty() && name.size() > 9)
        return std::vector<std::string>{"#findings:" + name.substr(9)};
    if (name.find('.') != std::string::npos && arg.empty()) return std::vector<std::string>{name};
    // A loss of unknown size (trace.discarded_uncounted streams) fails `discarded>0` too: its counts stay 0.
    if (name == "discarded")
        return std::vector<std::string>{"trace.discarded_events", "trace.discarded_packets", "trace.discarded_uncounted"};
    if (name == "late") return std::vector<std::string>{"trace.late_events"};
    if (name == "errors") return std::vector<std::string>{"ops.errors"};
    if (name == "in_flight") return std::vector<std::string>{"ops.in_flight_at_end"};
    if (name == "ops") return std::vector<std::string>{"ops.total"};
    if (name == "skew") return std::vector<std::string>{"traffic.inbound_skew", "traffic.outbound_skew"};
    if (name == "inbound_skew" || name == "outbound_skew") return std::vector<std::string>{"traffic." + name};
    if (name == "p50" || name == "p99" || name == "max")
        return std::vector<std::string>{"ops.by_opcode." + op + ".latency_ns." + name};
    if (name == "count" || name == "bytes") return std::vector<std::string>{"ops.by_opcode." + op + "." + name};
    if (name == "spread" || name == "spread_p99") return std::vector<std::string>{"barriers.spread_ns.p99"};
    if (name == "spread_p50") return std::vector<std::string>{"barriers.spread_ns.p50"};
    if (name == "spread_max") return std::vector<std::string>{"barriers.spread_ns.max"};
    if (name == "epochs") return std::vector<std::string>{"barriers.epochs"};
    if (name == "findings") return std::vector<std::string>{arg.empty() ? "#findings" : "#findings:" + arg};
    error = fmt::format("unknown metric '{}' (aliases: discarded late errors in_flight ops skew inbound_skew "
                        "outbound_skew p50 p99 max count bytes spread spread_p50 spread_max epochs findings, or a "
                        "dotted path into the JSON)",
                        name);
    return std::nullopt;
}

struct Selected {
    std::string where;   // the concrete path
    json value;
};

void select(const json& node, const std::vector<std::string>& segs, std::size_t i, const std::string& where,
            std::vector<Selected>& out) {
    if (i == segs.size()) {
        out.push_back({where, node});
        return;
    }
    if (!node.is_object()) return;
    if (segs[i] == "*") {
        for (auto it = node.begin(); it != node.end(); ++it)
            select(it.value(), segs, i + 1, where.empty() ? it.key() : where + "." + it.key(), out);
        return;
    }
    auto it = node.find(segs[i]);
    if (it != node.end()) select(*it, segs, i + 1, where.empty() ? segs[i] : where + "." + segs[i], out);
}

std::vector<Selected> select_path(const json& doc, const std::string& path) {
    std::vector<Selected> out;
    if (path.starts_with("#findings")) {
        const std::string kind = path.size() > 10 ? path.substr(10) : "";
        uint64_t n = 0;
        if (doc.contains("findings"))
            for (const auto& f : doc["findings"]) n += kind.empty() || f.value("kind", "") == kind;
        out.push_back({kind.empty() ? "findings" : "findings[" + kind + "]", n});
        return out;
    }
    std::vector<std::string> segs;
    std::size_t start = 0;
    for (;;) {
        auto dot = path.find('.', start);
        segs.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    select(doc, segs, 0, "", out);
    return out;
}

bool compare(double a, RuleCmp c, double b) {
    switch (c) {
    case RuleCmp::Gt: return a > b;
    case RuleCmp::Ge: return a >= b;
    case RuleCmp::Lt: return a < b;
    case RuleCmp::Le: return a <= b;
    case RuleCmp::Eq: return a == b;
    case RuleCmp::Ne: return a != b;
    }
    return false;
}

bool is_time_path(const std::string& p) { return p.find("_ns") != std::string::npos; }

std::string show(double v, const std::string& path) {
    if (is_time_path(path)) {
        if (std::fabs(v) >= 1e6) return fmt::format("{:.3g} ms", v / 1e6);
        if (std::fabs(v) >= 1e3) return fmt::format("{:.3g} us", v / 1e3);
        return fmt::format("{:.0f} ns", v);
    }
    if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
    return fmt::format("{:.4g}", v);
}

// The count of operations behind a latency value (ops.by_opcode.X.latency_ns.p99 -> X.latency_ns.count; a
// version-1 document, without it, X.completed), or max() when the value is not a per-opcode latency.
uint64_t samples_behind(const json& doc, const std::string& where) {
    const std::string prefix = "ops.by_opcode.";
    if (!where.starts_with(prefix) || where.find(".latency_ns.") == std::string::npos)
        return std::numeric_limits<uint64_t>::max();
    const std::string opcode = where.substr(prefix.size(), where.find(".latency_ns.") - prefix.size());
    const json* op = &doc["ops"]["by_opcode"];
    if (!op->contains(opcode)) return 0;
    const json& o = (*op)[opcode];
    if (o.contains("latency_ns") && o["latency_ns"].contains("count")) return o["latency_ns"].value("count", uint64_t{0});
    return o.value("completed", uint64_t{0});
}

}  // namespace

std::optional<Rule> parse_rule(std::string_view text, std::string& error) {
    Rule r;
    r.text = trim(text);
    std::string s;
    for (char c : r.text)
        if (!std::isspace(static_cast<unsigned char>(c))) s.push_back(c);
    auto fail = [&](const std::string& why) {
        error = fmt::format("Invalid --fail-on rule: rule='{}', reason={}", r.text, why);
        return std::nullopt;
    };
    // The comparison: the first of > >= < <= == != outside brackets.
    std::size_t pos = std::string::npos, len = 0;
    int depth = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '(' || c == '[') ++depth;
        if (c == ')' || c == ']') --depth;
        if (depth != 0) continue;
        if (c == '>' || c == '<' || c == '=' || c == '!') {
            pos = i;
            len = (i + 1 < s.size() && s[i + 1] == '=') ? 2 : 1;
            break;
        }
    }
    if (pos == std::string::npos) return fail("no comparison (expected one of > >= < <= == !=)");
    const std::string op = s.substr(pos, len);
    if (op == ">") r.cmp = RuleCmp::Gt;
    else if (op == ">=") r.cmp = RuleCmp::Ge;
    else if (op == "<") r.cmp = RuleCmp::Lt;
    else if (op == "<=") r.cmp = RuleCmp::Le;
    else if (op == "==") r.cmp = RuleCmp::Eq;
    else if (op == "!=") r.cmp = RuleCmp::Ne;
    else return fail("unknown comparison '" + op + "'");

    std::string metric = s.substr(0, pos);
    for (auto [word, mode] : {std::pair{"increase(", RuleMode::Increase}, std::pair{"decrease(", RuleMode::Decrease}}) {
        const std::string w = word;
        if (metric.starts_with(w)) {
            if (metric.back() != ')') return fail("unbalanced ( )");
            metric = metric.substr(w.size(), metric.size() - w.size() - 1);
            r.mode = mode;
        }
    }
    if (metric.empty()) return fail("no metric");
    std::string why;
    auto paths = expand_metric(metric, why);
    if (!paths) return fail(why);
    r.paths = *paths;

    std::string value = s.substr(pos + len);
    double scale = 1.0;
    for (auto [suffix, factor] : {std::pair{"KiB", 1024.0}, std::pair{"MiB", 1048576.0}, std::pair{"GiB", 1073741824.0},
                                  std::pair{"ns", 1.0}, std::pair{"us", 1e3}, std::pair{"ms", 1e6}, std::pair{"s", 1e9},
                                  std::pair{"%", 1.0}, std::pair{"x", 1.0}}) {
        const std::string sfx = suffix;
        if (value.size() > sfx.size() && value.ends_with(sfx)) {
            value.resize(value.size() - sfx.size());
            scale = factor;
            r.percent = sfx == "%";
            break;
        }
    }
    double v = 0.0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || ptr != value.data() + value.size()) return fail("the value '" + value + "' is not a number");
    r.value = v * scale;
    if (r.percent && r.mode == RuleMode::Absolute) return fail("% applies to increase(...) or decrease(...) only");
    return r;
}

RuleResult evaluate_rule(const Rule& rule, const json& doc, const json* baseline) {
    RuleResult res;
    res.rule = rule.text;
    if (rule.mode != RuleMode::Absolute && baseline == nullptr) {
        res.failed = true;
        res.details.push_back("needs --baseline OLD.json to compare with");
        return res;
    }
    std::size_t checked = 0;
    for (const std::string& path : rule.paths) {
        for (const Selected& cur : select_path(doc, path)) {
            if (!cur.value.is_number()) continue;
            const double now = cur.value.get<double>();
            if (rule.mode == RuleMode::Absolute) {
                ++checked;
                if (compare(now, rule.cmp, rule.value)) {
                    res.failed = true;
                    res.details.push_back(fmt::format("{} = {}", cur.where, show(now, cur.where)));
                }
                continue;
            }
            // Against the baseline: the same concrete path there.
            auto old_sel = select_path(*baseline, cur.where);
            if (old_sel.empty() || !old_sel.front().value.is_number()) continue;
            if (samples_behind(doc, cur.where) < kMinSamplesForChange ||
                samples_behind(*baseline, cur.where) < kMinSamplesForChange)
                continue;
            const double old = old_sel.front().value.get<double>();
            double change = rule.mode == RuleMode::Increase ? now - old : old - now;
            if (rule.percent) {
                if (old == 0.0)
                    change = change > 0 ? std::numeric_limits<double>::infinity() : 0.0;
                else
                    change = change / std::fabs(old) * 100.0;
            }
            ++checked;
            if (compare(change, rule.cmp, rule.value)) {
                res.failed = true;
                const std::string rel =
                    old == 0.0 ? std::string("from 0") : fmt::format("{:+.1f}%", (now - old) / std::fabs(old) * 100.0);
                res.details.push_back(
                    fmt::format("{}: {} -> {} ({})", cur.where, show(old, cur.where), show(now, cur.where), rel));
            }
        }
    }
    if (checked == 0) res.details.push_back("no value to check (metric absent or without data)");
    return res;
}

std::vector<std::string> default_baseline_rules() {
    return {"increase(p99)>20%", "increase(spread_p99)>20%", "increase(errors)>0", "increase(discarded)>0"};
}

}  // namespace sigmatrace::analyzer
