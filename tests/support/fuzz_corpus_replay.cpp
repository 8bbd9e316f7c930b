// The main() of every corpus replay test (target sigmatrace_fuzz_corpus_replay, linked with one fuzz target's
// LLVMFuzzerTestOneInput): runs the target over every file of the corpus directories given on the command line,
// with the project's own compiler and sanitizers, so a committed corpus is a regression suite even where clang
// and libFuzzer are absent. Exit 0 when every input ran (a crash fails the test by itself).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    size_t runs = 0;
    for (int i = 1; i < argc; ++i) {
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator(argv[i], ec)) {
            if (!entry.is_regular_file()) continue;
            std::ifstream in(entry.path(), std::ios::binary);
            const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
            LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
            ++runs;
        }
        if (ec) {
            std::fprintf(stderr, "Cannot read corpus: dir=%s, reason=%s\n", argv[i], ec.message().c_str());
            return 1;
        }
    }
    if (runs == 0) {
        std::fprintf(stderr, "Corpus is empty: nothing was run (dirs given: %d)\n", argc - 1);
        return 1;
    }
    std::printf("ran %zu corpus inputs\n", runs);
    return 0;
}
