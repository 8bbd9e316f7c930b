// Where the parts of an installed (or staged build-tree) SigmaTrace live, found from the running binary's
// own path: the install tree is relocatable and needs no environment variable (docs/architecture.md, "Install layout").
#pragma once

#include <filesystem>

namespace sigmatrace {

class InstallLayout {
public:
    // The layout around the running executable (/proc/self/exe is PREFIX/bin/<tool>).
    static InstallLayout from_self();
    explicit InstallLayout(std::filesystem::path prefix) : prefix_(std::move(prefix)) {}

    const std::filesystem::path& prefix() const { return prefix_; }
    std::filesystem::path bin_dir() const;
    std::filesystem::path lib_dir() const;
    std::filesystem::path preload_library() const;   // lib/libsigmatrace.so
    std::filesystem::path plugin_dir() const;        // Babeltrace2 plugin directory
    std::filesystem::path fabric_dir() const;        // software fabric provider directory
    std::filesystem::path libexec_dir() const;       // workloads
    std::filesystem::path data_dir() const;          // share/sigmatrace

private:
    std::filesystem::path prefix_;
};

}  // namespace sigmatrace
