// Replays every file of the committed corpus (tests/analyzer/fuzz/corpus) through the fuzz target, in every
// build (normal, ASan+UBSan): the inputs libFuzzer found interesting keep being exercised without clang.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: analyzer_fuzz_replay CORPUS_DIR\n");
        return 2;
    }
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
        std::ifstream f(e.path(), std::ios::binary);
        std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
        ++n;
    }
    std::printf("replayed %zu inputs\n", n);
    return n > 0 ? 0 : 1;
}
