// libFuzzer target: the PRM command parser and field accessor on arbitrary mailboxes. Byte 0 selects what to
// parse; the rest is the mailbox, passed with its exact length in an exact-size allocation (ASan catches any
// read past it). Also reads arbitrary (offset, width) fields taken from the input.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "mlx5_format/prm_bits.h"
#include "mlx5_format/prm_commands.h"

using namespace sigmatrace::gpumem::prm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t selector = data[0];
    std::vector<uint8_t> box(data + 1, data + size);
    const Mailbox m(box.data(), box.size());
    ParseError err;
    switch (selector % 7) {
    case 0: {
        CreateQp q;
        if (parse_create_qp(m, q, err)) {
            (void)q.rq_bytes();
            (void)q.sq_umem_offset();
            (void)q.sq_wqebbs();
        } else if (!err.what) {
            std::abort();  // a failure must say why
        }
        break;
    }
    case 1: {
        CreateCq c;
        if (parse_create_cq(m, c, err)) (void)(c.ncqe() + c.cqe_bytes());
        else if (!err.what) std::abort();
        break;
    }
    case 2: {
        ModifyQp mq;
        if (parse_modify_qp(m, mq, err)) (void)(mq.rgid_prefix() ^ mq.rgid_iid());
        else if (!err.what) std::abort();
        break;
    }
    case 3: {
        uint32_t n = 0;
        if (!parse_create_out(m, n, err) && !err.what) std::abort();
        QueryQpOut qo;
        if (!parse_query_qp_out(m, qo, err) && !err.what) std::abort();
        break;
    }
    case 4: {
        // Arbitrary fields: offsets and widths from the input itself.
        for (size_t i = 0; i + 3 <= box.size() && i < 96; i += 3) {
            const Field f{static_cast<uint32_t>(box[i]) << 4 | box[i + 1] >> 4, static_cast<uint32_t>(box[i + 2] % 70)};
            if (auto v = m.get(f); v && f.width < 64 && (*v >> f.width) != 0) std::abort();  // value wider than field
            (void)m.bytes(f.bit_offset, f.width);
        }
        break;
    }
    case 6: {
        CreateDct d;
        if (parse_create_dct(m, d, err)) (void)(d.dc_access_key ^ d.cqn);
        else if (!err.what) std::abort();
        break;
    }
    default: {
        // The writer, on a private copy.
        std::vector<uint8_t> copy = box;
        for (size_t i = 0; i + 3 <= box.size() && i < 48; i += 3) {
            const Field f{static_cast<uint32_t>(box[i]) << 3, static_cast<uint32_t>(box[i + 1] % 70)};
            if (set_field(copy.data(), copy.size(), f, box[i + 2]) &&
                Mailbox(copy.data(), copy.size()).get(f) !=
                    (f.width == 64 ? uint64_t{box[i + 2]} : uint64_t{box[i + 2]} & ((uint64_t{1} << f.width) - 1)))
                std::abort();  // what was written must read back
        }
        (void)command_name(command_opcode(m));
        break;
    }
    }
    return 0;
}
