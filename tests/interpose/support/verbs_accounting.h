// What a recorded trace says each traced process did with its QPs: the WRs it posted (successfully, per
// opcode, signaled or not) and the completions it polled, with their wr_ids, so tests can compare them with
// what the program is known to have done and with each other (every completion matches a posted WR).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/trace_reader.h"

namespace sigmatrace::testing {

struct QpAccount {
    uint32_t qp_num = 0;
    bool sq_sig_all = false;
    std::map<uint32_t, uint64_t> posted_by_opcode;     // enum ibv_wr_opcode -> WRs posted successfully
    std::multiset<uint64_t> signaled_send_ids;         // wr_ids of signaled send WRs (a completion is owed)
    uint64_t unsignaled_sends = 0;
    std::multiset<uint64_t> recv_ids;                  // wr_ids of receive WRs posted
    std::multiset<uint64_t> send_completion_ids;       // successful completions with a send-side opcode
    std::multiset<uint64_t> recv_completion_ids;       // successful completions of receives
    uint64_t error_completions = 0;
    std::set<uint32_t> post_apis;                      // 0 ibv_post_send, 1 ibv_wr_*
};

struct ProcessAccount {
    int64_t vpid = -1;
    std::string procname;   // of the process's last process_info (after exec: the program's name)
    std::string hostname;   // from process_info (the fabric node)
    int32_t ppid = -1;
    uint64_t process_infos = 0;
    uint64_t device_opens = 0;
    std::map<uint32_t, QpAccount> qps;  // by QP number
    uint64_t unmatched_completions = 0;  // completions whose qp_num is none of this process's QPs

    uint64_t posted(uint32_t opcode) const;
    uint64_t posted_recvs() const;
    uint64_t send_completions() const;
    uint64_t recv_completions() const;
    uint64_t unsignaled_sends() const;
};

// Accounts every process of the trace, by vpid.
std::map<int64_t, ProcessAccount> account_processes(const Trace& trace);

// The processes named `procname` that opened a device, by fabric node name.
std::map<std::string, const ProcessAccount*> by_host(const std::map<int64_t, ProcessAccount>& all,
                                                     const std::string& procname);

// Human-readable summary, for failure messages.
std::string describe(const ProcessAccount& p);

}  // namespace sigmatrace::testing
