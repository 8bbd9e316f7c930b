// A private directory on tmpfs for the life of a recording, removed with what is left in it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace sigmatrace::record {

class TmpfsDir {
public:
    enum Where { tmpfs_or_tmp, tmpfs_only, none };
    // PREFIX names the directory: /dev/shm/PREFIX-XXXXXX, or under /tmp when /dev/shm cannot be written and
    // `where` allows it. path() is empty when that fails, or for `none`.
    explicit TmpfsDir(const char* prefix, Where where = tmpfs_or_tmp) {
        if (where == none) return;
        for (const char* base : {"/dev/shm", "/tmp"}) {
            if (where == tmpfs_only && std::string(base) != "/dev/shm") break;
            std::string templ = std::string(base) + "/" + prefix + "-XXXXXX";
            if (mkdtemp(templ.data()) != nullptr) {
                path_ = templ;
                return;
            }
        }
    }
    ~TmpfsDir() {
        std::error_code ec;
        if (!path_.empty()) std::filesystem::remove_all(path_, ec);
    }
    TmpfsDir(const TmpfsDir&) = delete;
    TmpfsDir& operator=(const TmpfsDir&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace sigmatrace::record
