#include "common/install_layout.h"

#include <system_error>

#include "layout_paths.h"

namespace sigmatrace {

InstallLayout InstallLayout::from_self() {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    // Without /proc the tools cannot locate themselves; fall back to the current directory's parent, which is
    // right when run as ./bin/<tool> from the prefix.
    if (ec) return InstallLayout(std::filesystem::current_path().parent_path());
    return InstallLayout(exe.parent_path().parent_path());
}

std::filesystem::path InstallLayout::bin_dir() const { return prefix_ / layout::kBinDir; }
std::filesystem::path InstallLayout::lib_dir() const { return prefix_ / layout::kLibDir; }
std::filesystem::path InstallLayout::preload_library() const { return lib_dir() / "libsigmatrace.so"; }
std::filesystem::path InstallLayout::plugin_dir() const { return prefix_ / layout::kPluginDir; }
std::filesystem::path InstallLayout::fabric_dir() const { return prefix_ / layout::kFabricDir; }
std::filesystem::path InstallLayout::libexec_dir() const { return prefix_ / layout::kLibexecDir; }
std::filesystem::path InstallLayout::data_dir() const { return prefix_ / layout::kDataDir; }

}  // namespace sigmatrace
