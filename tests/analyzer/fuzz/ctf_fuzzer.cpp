// Fuzz target for the whole reading path, CTF bytes in: the input becomes a trace directory (a metadata file and
// one stream file), which goes through what sigmatrace-analyze does with a directory: the precheck
// (ctf_precheck.h, in this process), then the guarded read (read_guard.h: Babeltrace2's src.ctf.fs, the muxer
// and BtMessageConsumer in a forked child under the watchdog, retried without the packet at fault), the
// analysis and every report. Whatever the bytes, the run must end with the body's own status: a crash of our
// code in the child (a sanitizer report exits 1) or a status the body never returns aborts here. The direct CTF
// reader also runs in this process first, unguarded, when the precheck left the trace whole.
//
// Input: a 4-byte little-endian metadata length L, L bytes of metadata, then the stream file's bytes. Seeds
// (tests/analyzer/fuzz/ctf_corpus) are made from a committed trace by make_ctf_seeds.sh.
//
// Built with libFuzzer by run_fuzzer.sh ctf; replayed over the seeds by every build (analyzer_ctf_fuzz_replay).
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "analyzer/analyses/analysis.h"
#include "analyzer/decode/lttng_stream_reader.h"
#include "analyzer/decode/read_guard.h"
#include "analyzer/outputs/text_report.h"
#include "analyzer/decode/trace_reader.h"

namespace fs = std::filesystem;
using namespace sigmatrace::analyzer;

namespace {

constexpr int kBodyOk = 0, kBodyFatal = 2;

void write(const fs::path& p, const uint8_t* d, std::size_t n) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(d), static_cast<std::streamsize>(n));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    if (size < 4) return 0;
    const std::size_t meta_len = std::min<std::size_t>(size - 4, data[0] | data[1] << 8 | data[2] << 16 |
                                                                      static_cast<std::size_t>(data[3]) << 24);
    std::string templ = (fs::temp_directory_path() / "sigmatrace-ctf-fuzz.XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) return 0;
    const fs::path dir(templ);
    write(dir / "metadata", data + 4, meta_len);
    write(dir / "ch_0", data + 4 + meta_len, size - 4 - meta_len);
    int status = 0;
    {
        PlannedRead planned = plan_read(dir);
        // The direct reader (lttng_stream_reader.h) in this process, unguarded: it must refuse or read, never
        // crash, whatever the bytes (the guarded read below also takes it when it accepts the trace).
        if (!planned.fatal && plan_is_pristine(planned.plan)) {
            Analysis analysis;
            std::string why;
            if (read_direct(planned.plan, dir.string(), analysis, nullptr, nullptr, why)) (void)render_text_report(analysis.finish());
        }
        const auto body = [&](ReadProgress* progress) -> int {
            Analysis analysis;
            const ReadSummary read = read_planned(dir, planned, analysis, nullptr, progress);
            if (read.retry) return kBodyOk;
            if (read.fatal) return kBodyFatal;
            for (const std::string& p : read.problems) analysis.on_read_problem(p);
            const std::string text = render_text_report(analysis.finish());
            return text.empty() ? 3 : kBodyOk;
        };
        // 1 s of CPU without progress is a stall here (as in the damaged-trace corpus).
        status = planned.fatal ? kBodyFatal : run_guarded(dir, planned, 1.0, body);
    }
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (status != kBodyOk && status != kBodyFatal) {
        std::fprintf(stderr, "ctf_fuzzer: the guarded read ended with status %d\n", status);
        abort();
    }
    return 0;
}
