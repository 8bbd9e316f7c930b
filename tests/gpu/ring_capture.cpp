#include "ring_capture.h"

#include <sigmatrace/deferred_records.h>
#include <sigmatrace/deferred_records_wire.h>

#include "provider/trace_callback.h"

namespace sigmatrace::gpu_check {

namespace {

void on_event(EventId id, const void* rec, void* user) {
    auto& cap = *static_cast<Captured*>(user);
    std::lock_guard lk(cap.mu);
    if (id == EventId::deferred_records) {
        namespace R = sigmatrace::records;
        const auto* r = static_cast<const st_deferred_records_rec*>(rec);
        if (!R::layout_readable(r->layout)) return;
        R::walk_records(r->words, r->n, [&cap](const R::RecordHeader& h) {
            if (h.kind != R::RecordKind::ring_post) return;
            const R::RingWqeEntry* e = R::entries<R::RingPostFixed, R::RingWqeEntry>(&h);
            for (uint32_t i = 0; i < h.n; ++i) {
                cap.raddr.push_back(e[i].raddr);
                cap.index.push_back(static_cast<uint16_t>(e[i].pi));
                cap.rkey.push_back(e[i].rkey);
                cap.bytes.push_back(e[i].bytes);
            }
        });
    } else if (id == EventId::gpu_watch_stats) {
        const auto* r = static_cast<const st_gpu_watch_stats_rec*>(rec);
        cap.lost += r->lost_wqes;
        cap.malformed += r->malformed_wqes;
    }
}

}  // namespace

void start_capture(Captured& cap) { set_trace_callback(&on_event, &cap); }
void stop_capture() { set_trace_callback(nullptr, nullptr); }

}  // namespace sigmatrace::gpu_check
