// Checks a CTF trace directory's bytes before Babeltrace2 sees them. Babeltrace 2.0.4's CTF reader hangs on a
// truncated packetized metadata file and can crash or hang on damaged packet headers, so what it is handed is
// first validated here, with our own bounds checks:
//
// - metadata: every packet of a packetized metadata file (magic, UUID, sizes inside the file, no compression),
//   and its text (no NUL, brackets, strings and comments closed at the end). Damaged metadata makes the trace
//   unreadable: nothing of it is handed to Babeltrace.
// - stream files, when the metadata declares lttng-ust's packet header and context (the layout every
//   lttng-ust 2.x trace has): each packet's magic, UUID, stream id, sizes (inside the file, content within the
//   packet) and times (begin <= end, not before the previous packet). A damaged byte range is skipped up to the
//   next packet that passes, and reported with its offsets; a file with no good packet is left out.
// - index files (index/*.idx): used by Babeltrace instead of scanning the stream, so they must agree with the
//   packets found; one that does not is left out (no event is lost: Babeltrace scans the stream instead), which
//   is noted on stderr but does not make the read partial. An index naming a stream file that is missing does.
//
// The result is a ReadPlan: which files Babeltrace gets, and what was skipped. When anything was skipped the
// plan is materialized as a scratch trace directory (symbolic links to the good files, trimmed copies of damaged
// streams) that the reader opens instead of the original.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sigmatrace::analyzer {

struct PacketRange {
    uint64_t begin = 0, end = 0;   // byte offsets in the original file, end excluded
    uint64_t seq_num = 0;          // packet_seq_num as written (renumbered in trimmed copies)
    uint64_t content_bits = 0, ts_begin = 0, ts_end = 0;   // for the index check
};

struct StreamPlan {
    std::filesystem::path file;         // the original stream file
    uint64_t size = 0;
    bool layout_known = false;          // packets below were found (lttng-ust layout); else the file is whole
    std::vector<PacketRange> packets;   // the packets handed to Babeltrace, in file order
    bool skipped_any = false;           // some bytes of the file are not handed over
    bool excluded = false;              // nothing of the file is handed over
};

struct TracePlan {
    std::filesystem::path dir;          // the original trace directory
    bool readable = true;               // false: metadata damaged, nothing is handed to Babeltrace
    std::vector<StreamPlan> streams;    // every regular file of `dir` but metadata
    bool drop_index = false;            // index/ disagrees with the streams (or a stream was trimmed)
    std::filesystem::path materialized; // the directory Babeltrace opens (dir itself when nothing was skipped)
    std::string hostname;               // the metadata's env hostname ("" when absent or unreadable)
    bool needs_copy() const;
};

struct ReadPlan {
    std::vector<TracePlan> traces;
    std::vector<std::string> problems;  // what was skipped, where, and why (each one makes the read partial)
    std::vector<std::string> notes;     // damage that loses nothing (an index file not used): stderr only
    std::vector<std::filesystem::path> scratch;   // directories materialize() created
    ReadPlan() = default;
    ReadPlan(const ReadPlan&) = delete;
    ReadPlan& operator=(const ReadPlan&) = delete;
    ReadPlan(ReadPlan&&) = default;
    ReadPlan& operator=(ReadPlan&&) = default;
    ~ReadPlan();

    // Leaves out packet `index` (of the packets handed over) of `stream`, saying why; the whole file when its
    // packets are not known.
    void skip_packet(TracePlan& trace, StreamPlan& stream, std::size_t index, const std::string& reason);
    void skip_trace(TracePlan& trace, const std::string& reason);
    // Writes the scratch directories of the traces that need one (again after a skip). False (and a problem)
    // when the scratch space cannot be written.
    bool materialize();
};

// Writes `packets` of stream file `from` (lttng-ust layout) to `to`, packet_seq_num renumbered across the gaps.
bool write_packets(const std::filesystem::path& from, const std::vector<PacketRange>& packets,
                   const std::filesystem::path& to);

// Checks every trace directory of `dirs` (find_trace_dirs()).
ReadPlan precheck_traces(const std::vector<std::filesystem::path>& dirs);

// The checks on bytes in memory (what precheck_traces runs on each file; public for the fuzzer and tests).
struct MetadataCheck {
    bool ok = false;
    std::string problem;       // when !ok
    std::string text;          // the TSDL text (packets' payloads concatenated)
    bool lttng_layout = false; // lttng-ust's packet header and context, stream packets checkable
    bool big_endian = false;
    uint8_t uuid[16] = {};
    bool has_uuid = false;
    std::vector<uint64_t> stream_ids;
    std::string hostname;      // env's hostname ("" when absent): which host recorded it
};
MetadataCheck check_metadata(const uint8_t* data, std::size_t size);

struct StreamCheck {
    std::vector<PacketRange> packets;
    struct Bad {
        uint64_t begin, end;
        std::string reason;
    };
    std::vector<Bad> bad;
};
StreamCheck check_stream(const MetadataCheck& meta, const uint8_t* data, std::size_t size);

}  // namespace sigmatrace::analyzer
