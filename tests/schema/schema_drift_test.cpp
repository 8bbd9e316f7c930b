// Compares, event by event and field by field, the LTTng-UST provider's own description of the "sigmatrace"
// events (the probe descriptor lttng-ust turns into CTF metadata) with the analyzer's schema tables.
#include <gtest/gtest.h>

#include <lttng/ust-events.h>

#include <map>
#include <string>
#include <string_view>

#include "analyzer/decode/schema_table.h"
#include "provider/probe_desc.h"

namespace {

using sigmatrace::analyzer::EventSchema;
using sigmatrace::analyzer::FieldKind;
using sigmatrace::analyzer::FieldSchema;

struct ProviderField {
    std::string name;
    FieldKind kind;
    unsigned bits;
    bool is_signed;
    bool hex;
};

// Describes one provider field in the analyzer's terms; fails the test on a type the schema cannot express.
ProviderField describe(const lttng_ust_event_field& f) {
    ProviderField out{f.name, FieldKind::Integer, 0, false, false};
    const lttng_ust_type_common* type = f.type;
    if (type->type == lttng_ust_type_sequence) {
        out.kind = FieldKind::Sequence;
        // Each lttng_ust_type_* starts with its lttng_ust_type_common `parent`, so the downcast is by layout.
        type = reinterpret_cast<const struct lttng_ust_type_sequence*>(type)->elem_type;
    } else if (type->type == lttng_ust_type_string) {
        out.kind = FieldKind::String;
        return out;
    }
    EXPECT_EQ(type->type, lttng_ust_type_integer) << "field " << f.name << " has a type the schema cannot express";
    const auto* integer = reinterpret_cast<const struct lttng_ust_type_integer*>(type);
    out.bits = integer->size;
    out.is_signed = integer->signedness;
    out.hex = integer->base == 16;
    return out;
}

std::map<std::string, std::vector<ProviderField>> provider_events() {
    std::map<std::string, std::vector<ProviderField>> events;
    const lttng_ust_probe_desc* probe = sigmatrace::provider_probe_desc();
    for (unsigned i = 0; i < probe->nr_events; ++i) {
        const lttng_ust_event_desc* ev = probe->event_desc[i];
        auto& fields = events[ev->event_name];
        const size_t nr = ev->tp_class->nr_fields;
        for (size_t j = 0; j < nr; ++j) {
            const lttng_ust_event_field& f = *ev->tp_class->fields[j];
            // lttng-ust writes each sequence's length as a field "_<name>_length" right before it; that is
            // serialization detail, not schema, so it is skipped (and checked to be exactly that).
            if (j + 1 < nr && ev->tp_class->fields[j + 1]->type->type == lttng_ust_type_sequence) {
                std::string expected = std::string("_") + ev->tp_class->fields[j + 1]->name + "_length";
                if (expected == f.name) continue;
            }
            fields.push_back(describe(f));
        }
    }
    return events;
}

TEST(SchemaDrift, ProviderNameIsSigmatrace) {
    EXPECT_STREQ(sigmatrace::provider_probe_desc()->provider_name, "sigmatrace");
}

TEST(SchemaDrift, SameEventsOnBothSides) {
    auto provider = provider_events();
    auto tables = sigmatrace::analyzer::event_schemas();
    EXPECT_EQ(provider.size(), tables.size());
    for (const EventSchema& ev : tables)
        EXPECT_TRUE(provider.contains(std::string(ev.name))) << "analyzer knows event '" << ev.name
                                                             << "' that the tracer does not emit";
    for (const auto& [name, fields] : provider) {
        bool known = false;
        for (const EventSchema& ev : tables) known |= ev.name == name;
        EXPECT_TRUE(known) << "tracer emits event '" << name << "' that the analyzer does not know";
    }
}

TEST(SchemaDrift, SameFieldsInSameOrderWithSameTypes) {
    auto provider = provider_events();
    for (const EventSchema& ev : sigmatrace::analyzer::event_schemas()) {
        auto it = provider.find(std::string(ev.name));
        if (it == provider.end()) continue;  // reported by SameEventsOnBothSides
        const auto& pf = it->second;
        EXPECT_EQ(pf.size(), ev.fields.size()) << "event " << ev.name << ": field count differs";
        for (size_t i = 0; i < std::min(pf.size(), ev.fields.size()); ++i) {
            const FieldSchema& af = ev.fields[i];
            SCOPED_TRACE(std::string(ev.name) + "." + std::string(af.name));
            EXPECT_EQ(pf[i].name, af.name);
            EXPECT_EQ(pf[i].kind, af.kind);
            if (af.kind == FieldKind::String) continue;
            EXPECT_EQ(pf[i].bits, af.bits);
            EXPECT_EQ(pf[i].is_signed, af.is_signed);
            EXPECT_EQ(pf[i].hex, af.hex);
        }
    }
}

TEST(SchemaDrift, SequencesAreSizedByFieldN) {
    // Every event with sequences carries the element count in an integer field `n` before them.
    for (const EventSchema& ev : sigmatrace::analyzer::event_schemas()) {
        int n_index = sigmatrace::analyzer::field_index(ev, "n");
        for (size_t i = 0; i < ev.fields.size(); ++i) {
            if (ev.fields[i].kind != FieldKind::Sequence) continue;
            ASSERT_GE(n_index, 0) << ev.name << " has sequences but no field n";
            EXPECT_LT(static_cast<size_t>(n_index), i) << ev.name << ": n must precede " << ev.fields[i].name;
        }
    }
}

}  // namespace
