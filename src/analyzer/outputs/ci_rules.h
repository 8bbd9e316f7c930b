// CI mode: --fail-on rules, checked against the analysis document and, for increase()/decrease(), against a
// baseline document (--baseline OLD.json). Syntax (docs/analyzer.md "CI mode"):
//
//   RULE    := METRIC CMP VALUE | increase(METRIC) CMP VALUE | decrease(METRIC) CMP VALUE
//   CMP     := > | >= | < | <= | == | !=
//   VALUE   := number [unit]      units: ns us ms s (times, in ns), % (relative change), x (plain factor),
//                                 KiB MiB GiB (bytes)
//   METRIC  := an alias (discarded, errors, in_flight, skew, inbound_skew, outbound_skew, ops, p50, p99, max,
//              p50[OPCODE], p99[OPCODE], max[OPCODE], count[OPCODE], bytes[OPCODE], spread, spread_p50,
//              spread_max, epochs, findings, findings[KIND])
//            | a dotted path into the document, `*` matching every key of an object
//              (ops.by_opcode.*.latency_ns.p99, traffic.inbound_skew, ...)
//
// A rule fails when any value it selects satisfies the comparison. increase(M) is the change from the
// baseline: in percent of the baseline value with a % unit, else absolute. Values that are null (no data) on
// either side are skipped and said so.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sigmatrace::analyzer {

enum class RuleCmp { Gt, Ge, Lt, Le, Eq, Ne };
enum class RuleMode { Absolute, Increase, Decrease };

struct Rule {
    std::string text;                 // as given
    RuleMode mode = RuleMode::Absolute;
    std::vector<std::string> paths;   // dotted paths (aliases expanded), `*` allowed
    RuleCmp cmp = RuleCmp::Gt;
    double value = 0.0;
    bool percent = false;
};

struct RuleResult {
    std::string rule;
    bool failed = false;
    std::vector<std::string> details;   // one line per value that failed (or why nothing was checked)
};

// Parses one rule; nullopt and `error` set (naming the rule and what is wrong) when malformed.
std::optional<Rule> parse_rule(std::string_view text, std::string& error);

// Latency-like metrics of an opcode with fewer completed operations than this are not compared with a
// baseline: a p99 over a handful of samples is noise.
inline constexpr uint64_t kMinSamplesForChange = 10;

RuleResult evaluate_rule(const Rule& rule, const nlohmann::json& doc, const nlohmann::json* baseline);

// The rules --baseline adds when no --fail-on rule compares with the baseline.
std::vector<std::string> default_baseline_rules();

}  // namespace sigmatrace::analyzer
