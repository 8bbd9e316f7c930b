#include "support/verbs_accounting.h"

#include <infiniband/verbs.h>

#include <sstream>

namespace sigmatrace::testing {

uint64_t ProcessAccount::posted(uint32_t opcode) const {
    uint64_t n = 0;
    for (const auto& [qpn, q] : qps)
        if (auto it = q.posted_by_opcode.find(opcode); it != q.posted_by_opcode.end()) n += it->second;
    return n;
}
uint64_t ProcessAccount::posted_recvs() const {
    uint64_t n = 0;
    for (const auto& [qpn, q] : qps) n += q.recv_ids.size();
    return n;
}
uint64_t ProcessAccount::send_completions() const {
    uint64_t n = 0;
    for (const auto& [qpn, q] : qps) n += q.send_completion_ids.size();
    return n;
}
uint64_t ProcessAccount::recv_completions() const {
    uint64_t n = 0;
    for (const auto& [qpn, q] : qps) n += q.recv_completion_ids.size();
    return n;
}
uint64_t ProcessAccount::unsignaled_sends() const {
    uint64_t n = 0;
    for (const auto& [qpn, q] : qps) n += q.unsignaled_sends;
    return n;
}

std::map<int64_t, ProcessAccount> account_processes(const Trace& trace) {
    std::map<int64_t, ProcessAccount> out;
    for (const TraceEvent& e : trace.events) {
        ProcessAccount& p = out[e.vpid];
        p.vpid = e.vpid;
        const std::string& n = e.name;
        if (n == "sigmatrace:process_info") {
            ++p.process_infos;
            p.procname = e.procname;
            p.hostname = e.s("hostname");
            p.ppid = static_cast<int32_t>(e.i("ppid"));
        } else if (n == "sigmatrace:device_open") {
            ++p.device_opens;
        } else if (n == "sigmatrace:qp_create") {
            if (e.u("qp") == 0) continue;
            QpAccount& q = p.qps[static_cast<uint32_t>(e.u("qp_num"))];
            q.qp_num = static_cast<uint32_t>(e.u("qp_num"));
            q.sq_sig_all = e.u("sq_sig_all") != 0;
        } else if (n == "sigmatrace:post_send") {
            QpAccount& q = p.qps[static_cast<uint32_t>(e.u("qp_num"))];
            q.post_apis.insert(static_cast<uint32_t>(e.u("api")));
            const int64_t ret = e.i("ret");
            const int64_t bad = e.i("bad_index");
            const uint64_t offset = e.u("batch_offset");
            const auto& ids = e.seq("wr_id");
            const auto& ops = e.seq("opcode");
            const auto& flags = e.seq("send_flags");
            for (size_t k = 0; k < ids.size(); ++k) {
                const int64_t index = static_cast<int64_t>(offset + k);
                if (ret != 0 && (bad < 0 || index >= bad)) continue;  // not posted
                ++q.posted_by_opcode[static_cast<uint32_t>(ops[k])];
                if (q.sq_sig_all || (flags[k] & IBV_SEND_SIGNALED)) q.signaled_send_ids.insert(ids[k]);
                else ++q.unsignaled_sends;
            }
        } else if (n == "sigmatrace:post_recv") {
            QpAccount& q = p.qps[static_cast<uint32_t>(e.u("qp_num"))];
            const int64_t ret = e.i("ret");
            const int64_t bad = e.i("bad_index");
            const uint64_t offset = e.u("batch_offset");
            const auto& ids = e.seq("wr_id");
            for (size_t k = 0; k < ids.size(); ++k) {
                const int64_t index = static_cast<int64_t>(offset + k);
                if (ret != 0 && (bad < 0 || index >= bad)) continue;
                q.recv_ids.insert(ids[k]);
            }
        } else if (n == "sigmatrace:poll_cq") {
            const auto& ids = e.seq("wr_id");
            const auto& status = e.seq("status");
            const auto& ops = e.seq("opcode");
            const auto& qpns = e.seq("qp_num");
            for (size_t k = 0; k < ids.size(); ++k) {
                auto it = p.qps.find(static_cast<uint32_t>(qpns[k]));
                if (it == p.qps.end()) {
                    ++p.unmatched_completions;
                    continue;
                }
                if (status[k] != IBV_WC_SUCCESS) {
                    ++it->second.error_completions;
                    continue;
                }
                if (ops[k] & IBV_WC_RECV) it->second.recv_completion_ids.insert(ids[k]);
                else it->second.send_completion_ids.insert(ids[k]);
            }
        }
    }
    return out;
}

std::map<std::string, const ProcessAccount*> by_host(const std::map<int64_t, ProcessAccount>& all,
                                                     const std::string& procname) {
    std::map<std::string, const ProcessAccount*> out;
    for (const auto& [vpid, p] : all)
        if (p.procname == procname && p.device_opens > 0) out[p.hostname] = &p;
    return out;
}

std::string describe(const ProcessAccount& p) {
    std::ostringstream s;
    s << p.procname << " vpid=" << p.vpid << " host=" << p.hostname << " qps=" << p.qps.size();
    for (const auto& [qpn, q] : p.qps) {
        s << "\n  qp " << qpn << ": posted";
        for (const auto& [op, count] : q.posted_by_opcode) s << " op" << op << "=" << count;
        s << " signaled=" << q.signaled_send_ids.size() << " unsignaled=" << q.unsignaled_sends
          << " recvs=" << q.recv_ids.size() << " send_cqes=" << q.send_completion_ids.size()
          << " recv_cqes=" << q.recv_completion_ids.size() << " error_cqes=" << q.error_completions;
    }
    return s.str();
}

}  // namespace sigmatrace::testing
