// `sigmatrace-analyze DIR [options]`: see analyze_main.h.
#include "analyze/analyze_main.h"

#include <cstddef>

int main(int argc, char** argv) {
    return sigmatrace::analyzer::analyze_main(std::span<char* const>(argv + 1, static_cast<std::size_t>(argc - 1)));
}
