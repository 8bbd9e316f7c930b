// html_render DOC.json DATA_DIR|--no-library OUT.html: renders the HTML report of an analysis document, so that
// html_report_test.sh can render documents the committed traces do not produce (a gray-link finding, phases[]).
#include <fmt/core.h>

#include <fstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "analyzer/outputs/html_report.h"

int main(int argc, char** argv) {
    if (argc != 4) {
        fmt::print(stderr, "usage: html_render DOC.json DATA_DIR|--no-library OUT.html\n");
        return 2;
    }
    std::ifstream in(argv[1]);
    const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    if (doc.is_discarded()) {
        fmt::print(stderr, "html_render: Cannot parse the analysis document: path={}\n", argv[1]);
        return 1;
    }
    std::optional<std::string> library;
    if (std::string_view(argv[2]) != "--no-library") {
        library = sigmatrace::analyzer::load_charting_library(argv[2]);
        if (!library) {
            fmt::print(stderr, "html_render: Cannot read the charting library: dir={}\n", argv[2]);
            return 1;
        }
    }
    std::ofstream(argv[3]) << sigmatrace::analyzer::render_html_report(doc, library);
    return 0;
}
