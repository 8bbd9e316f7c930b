/*
 * The LTTng-UST tracepoint provider "sigmatrace", expanded from <sigmatrace/schema.def>.
 *
 * Each event takes one argument, a pointer to its st_<event>_rec, and serializes the record's fields in
 * schema order. lttng-ust re-includes this header several times with different macro definitions (that is
 * what LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ is for), so the guard below must let those passes through.
 *
 * Call sites never include it (provider/trace.h); it is included where the probe is compiled
 * (sigmatrace_probe.cpp, sigmatrace_tp.cpp) and where the tracepoints are defined (with
 * provider/trace_lttng_backend.h).
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER sigmatrace

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "provider/sigmatrace_tp.h"

#if !defined(SIGMATRACE_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define SIGMATRACE_TP_H

#include <lttng/tracepoint.h>
#include <sigmatrace/schema.h>

#define ST_TP_INT_(type, name, comment) lttng_ust_field_integer(type, name, r->name)
#define ST_TP_HEX_(type, name, comment) lttng_ust_field_integer_hex(type, name, r->name)
#define ST_TP_STR_(name, comment) lttng_ust_field_string(name, r->name)
#define ST_TP_SEQ_(type, name, comment) lttng_ust_field_sequence(type, name, r->name, uint32_t, r->n)
#define ST_TP_SEQHEX_(type, name, comment) lttng_ust_field_sequence_hex(type, name, r->name, uint32_t, r->n)

#define ST_TP_EVENT_(event, comment)                                                                           \
    LTTNG_UST_TRACEPOINT_EVENT(sigmatrace, event, LTTNG_UST_TP_ARGS(const struct st_##event##_rec*, r),         \
                               LTTNG_UST_TP_FIELDS(SIGMATRACE_FIELDS_##event(ST_TP_INT_, ST_TP_HEX_, ST_TP_STR_, \
                                                                             ST_TP_SEQ_, ST_TP_SEQHEX_)))

SIGMATRACE_EVENTS(ST_TP_EVENT_)

#endif /* SIGMATRACE_TP_H */

#include <lttng/tracepoint-event.h>
