// The direct CTF reader: reads the stream files of traces LTTng-UST 2.13 wrote straight from their bytes,
// without Babeltrace2's field objects (src.ctf.fs builds one object per element of a sequence, which for the
// `deferred_records` event's `words` costs more than the whole analysis), and feeds the same boundary as the
// Babeltrace2 path: DecodedEvents into an ElementDecoder and a ReorderStage in front of the Analysis.
//
// It computes what Babeltrace2 2.0 (src.ctf.fs -> filter.utils.muxer -> BtMessageConsumer) computes:
//   - layouts from the TSDL metadata (lttng_tsdl.h): lttng-ust's packet header and context, the compact or large
//     event header, the stream's event context, each event's payload;
//   - timestamps: the event header's 27/32-bit values update the stream's clock like Babeltrace's clock
//     update (wrap detection on the low bits), the packet's timestamp_begin sets it; ns from origin =
//     the clock's offset + cycles (1 GHz clocks only);
//   - discarded events: a message per packet whose events_discarded counter grew (the first packet's without a
//     count), timed from the previous packet's end (or the packet's begin) to the packet's end;
//   - the order of the muxer: by ns from origin, ties by trace UUID, trace name, stream class id, stream id;
//   - trace indexes in the order the traces' first events or discards are delivered, trace names (the
//     hostname), stream names (the stream file's absolute path).
//
// It reads only what it can read exactly, and refuses everything else before handing over a single event: a
// plan with any damage (ctf_precheck.h), metadata it does not parse, a sigmatrace event whose field types differ
// from the schema or that the schema does not know, packet sequence gaps (discarded packets), a stream file
// holding two streams, two traces with one UUID, and, in a first pass over every packet, any event that does
// not decode within its packet, an unknown event id, a clock that overflows or a stream whose times go
// backwards. A refused read goes through Babeltrace2 (trace_reader.cpp), which reports what it finds.
#pragma once

#include <optional>
#include <string>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/ctf_precheck.h"
#include "analyzer/decode/trace_reader.h"

namespace sigmatrace::analyzer {

// SIGMATRACE_ANALYZE_READER: which reader sigmatrace-analyze uses.
enum class ReaderChoice {
    Auto,        // the direct reader when it accepts the trace, else Babeltrace2 (default)
    Babeltrace,  // always Babeltrace2
    Direct,      // the direct reader only: a trace it refuses is an error naming why (tests)
};
// The knob's value; an unknown value is reported on stderr and reads as Auto.
ReaderChoice reader_choice_from_env();

// Reads the traces of `plan` (nothing skipped in it: plan_is_pristine()) under `root` (for messages). nullopt,
// with `why`, when it refuses; then nothing was handed to `analysis` or `tap`. The summary has events,
// foreign_events and traces_opened set, and a problem when a stream file changed between the two passes.
std::optional<ReadSummary> read_direct(const ReadPlan& plan, const std::string& root, Analysis& analysis, EventSink* tap,
                                       ReadProgress* progress, std::string& why);

// True when the precheck left every byte of every trace in the plan (the direct reader's precondition).
bool plan_is_pristine(const ReadPlan& plan);

}  // namespace sigmatrace::analyzer
