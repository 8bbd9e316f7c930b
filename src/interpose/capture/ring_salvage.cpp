// Record's salvage step (ring_file.h): the rings a process left in SIGMATRACE_SALVAGE_DIR become events after it is
// gone, through the same RecordsWriter as the process's own drains, with its pid and tid as their origin.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "interpose/capture/deferred_ring.h"
#include "interpose/capture/deferred_records_writer.h"
#include "interpose/hooks/export.h"
#include "interpose/capture/ring_file.h"

namespace sigmatrace::interpose::deferred {
namespace {

// Whether process `pid` is gone (its rings can no longer change).
bool process_gone(int32_t pid) {
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

// A record as the tracer wrote it: a known kind whose size matches its entry count.
bool well_formed(const RecordHeader& h, uint64_t room) {
    if (h.kind == RecordKind::pad) return h.size >= sizeof(RecordHeader) && h.size % kAlign == 0 && h.size <= room;
    const auto expected = records::expected_size(h.kind, h.n);
    return expected && *expected == h.size && h.size <= room && h.n <= SIGMATRACE_MAX_BATCH;
}

struct Mapping {
    void* mem = MAP_FAILED;
    size_t bytes = 0;
    ~Mapping() {
        if (mem != MAP_FAILED) munmap(mem, bytes);
    }
};

// One file. Returns false when it is not a ring of this build (left in place, counted).
bool salvage_file(const std::string& path, RecordsWriter& writer, SalvageCounts& c, std::set<int32_t>& pids) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st{};
    Mapping m;
    if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > kDataOffset) {
        m.bytes = static_cast<size_t>(st.st_size);
        m.mem = mmap(nullptr, m.bytes, PROT_READ, MAP_SHARED, fd, 0);
    }
    ::close(fd);
    if (m.mem == MAP_FAILED) return false;
    const auto* base = static_cast<const std::byte*>(m.mem);
    const auto* file = reinterpret_cast<const RingFileHeader*>(base);
    const uint64_t cap = file->capacity;
    if (file->magic != kRingFileMagic || file->version != kRingFileVersion || file->ring_object_size != sizeof(Ring) ||
        cap == 0 || (cap & (cap - 1)) != 0 || kDataOffset + cap != m.bytes)
        return false;
    if (!process_gone(file->pid)) {
        ++c.live;
        return true;
    }
    const Ring::Positions p = reinterpret_cast<const Ring*>(base + kRingOffset)->positions();
    const std::byte* data = base + kDataOffset;
    uint64_t lost = file->dropped.load(std::memory_order_relaxed);
    uint64_t saved = 0;
    writer.discard();
    writer.start_run(file->load_anchor());
    const int32_t tid = file->tid.load(std::memory_order_relaxed);
    writer.set_origin(file->pid, tid, 0);
    if (p.head - p.tail > cap || p.tail > p.head) {
        lost += 1;  // positions that cannot be: nothing in it can be trusted
    } else {
        for (uint64_t t = p.tail; t != p.head;) {
            const uint64_t off = t & (cap - 1);
            const auto* h = reinterpret_cast<const RecordHeader*>(data + off);
            if (!well_formed(*h, std::min(cap - off, p.head - t))) {
                ++lost;  // the rest of the ring does not parse: at least one record
                break;
            }
            if (t == p.unfinished) {
                ++lost;  // killed inside the provider's wr_complete: the post's result is unknown
            } else if (h->kind != RecordKind::pad) {
                writer.add(h);
                ++saved;
            }
            t += h->size;
        }
    }
    if (saved == 0 && lost == 0) {
        unlink(path.c_str());
        return true;
    }
    // The loss rides on the ring's first event (an empty one when nothing could be saved).
    writer.set_origin(file->pid, tid, static_cast<uint32_t>(lost));
    if (saved == 0) writer.emit_empty();
    writer.flush();
    c.records += saved;
    c.lost += lost;
    pids.insert(file->pid);
    unlink(path.c_str());
    return true;
}

}  // namespace

bool salvage_rings(const char* dir, SalvageCounts* counts, const char** error) noexcept {
    *counts = SalvageCounts{};
    DIR* d = opendir(dir);
    if (d == nullptr) {
        *error = "cannot open the salvage directory";
        return false;
    }
    // 8 KiB of words: on the heap, not on this thread's stack.
    auto writer = std::make_unique<RecordsWriter>();
    std::set<int32_t> pids;
    while (dirent* e = readdir(d)) {
        if (std::strncmp(e->d_name, "ring-", 5) != 0) continue;
        ++counts->rings;
        if (!salvage_file(std::string(dir) + "/" + e->d_name, *writer, *counts, pids)) ++counts->unreadable;
    }
    closedir(d);
    counts->processes = static_cast<uint32_t>(pids.size());
    return true;
}

}  // namespace sigmatrace::interpose::deferred
