// The LTTng-UST backend of provider/trace.h: defines st_trace_on_<event> and sigmatrace::trace::emit_<event>
// for every event. Include it once per module, after provider/sigmatrace_tp.h, in the translation unit that
// defines the tracepoints (LTTNG_UST_TRACEPOINT_DEFINE with LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION): the
// aliases below name the hidden tracepoint structures, which only that unit's assembly can.
//
// st_trace_on_<event> is an assembler alias of the `state` field of the tracepoint structure (the word
// lttng_ust_tracepoint_enabled reads; liblttng-ust sets it when a session enables the event), so the call sites'
// check stays one load and one branch. emit_<event> is the tracepoint's own call into the registered probes.
#pragma once

#include <cstddef>
#include <type_traits>

#include "provider/trace.h"

#if !defined(LTTNG_UST_TRACEPOINT_DEFINE) || !defined(LTTNG_UST_TRACEPOINT_HIDDEN_DEFINITION)
#error "Include provider/trace_lttng_backend.h where the tracepoints are defined, hidden (see the comment above)"
#endif

// The alias is written as an offset in assembler text, so the layout it assumes is checked here
// (lttng/tracepoint-types.h: struct_size, provider_name, event_name, state, ...; part of lttng-ust's ABI).
#define SIGMATRACE_LTTNG_STATE_OFFSET 24
static_assert(offsetof(lttng_ust_tracepoint, state) == SIGMATRACE_LTTNG_STATE_OFFSET);
static_assert(std::is_same_v<decltype(lttng_ust_tracepoint::state), int>);

#define SIGMATRACE_LTTNG_STR_(x) #x
#define SIGMATRACE_LTTNG_XSTR_(x) SIGMATRACE_LTTNG_STR_(x)

#define SIGMATRACE_LTTNG_ON_ALIAS_(event, comment)                                                             \
    asm(".globl st_trace_on_" #event "\n\t"                                                                    \
        ".hidden st_trace_on_" #event "\n\t"                                                                   \
        ".type st_trace_on_" #event ", @object\n\t"                                                           \
        ".size st_trace_on_" #event ", 4\n\t"                                                                  \
        ".set st_trace_on_" #event ", lttng_ust_tracepoint_sigmatrace___" #event                               \
        " + " SIGMATRACE_LTTNG_XSTR_(SIGMATRACE_LTTNG_STATE_OFFSET));
SIGMATRACE_EVENTS(SIGMATRACE_LTTNG_ON_ALIAS_)
#undef SIGMATRACE_LTTNG_ON_ALIAS_

#define SIGMATRACE_LTTNG_EMIT_(event, comment)                                                                 \
    void sigmatrace::trace::emit_##event(const st_##event##_rec* rec) {                                        \
        lttng_ust_do_tracepoint(sigmatrace, event, rec);                                                       \
    }
SIGMATRACE_EVENTS(SIGMATRACE_LTTNG_EMIT_)
#undef SIGMATRACE_LTTNG_EMIT_
