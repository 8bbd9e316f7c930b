// Writes seed inputs for the fuzzers from the same layouts the unit tests use (a WQE of every opcode and
// transport; every PRM command). Run once to (re)create tests/gpumem/corpus/*/seed-*; the fuzzers grow it.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../prm_test_util.h"
#include "../wqe_builder.h"

using namespace sigmatrace::gpumem::test;

static void write(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

static std::vector<uint8_t> wqe_input(uint8_t transport, uint8_t log_ring, uint16_t slot, WqeImage img) {
    const uint32_t wqebbs = 1u << log_ring;
    std::vector<uint8_t> ring(size_t{wqebbs} * 64, 0);
    place(ring.data(), wqebbs, slot, img.finish());
    std::vector<uint8_t> in(4 + ring.size());
    in[0] = transport;
    in[1] = log_ring;
    in[2] = static_cast<uint8_t>(slot);
    in[3] = static_cast<uint8_t>(slot >> 8);
    std::copy(ring.begin(), ring.end(), in.begin() + 4);
    return in;
}

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s WQE_CORPUS_DIR PRM_CORPUS_DIR\n", argv[0]);
        return 2;
    }
    const std::string wd = argv[1], pd = argv[2];
    const uint32_t v = 0xdeadbeef;
    int n = 0;
    auto w = [&](std::vector<uint8_t> in) { write(wd + "/seed-" + std::to_string(n++), in); };
    w(wqe_input(0, 4, 3, WqeImage(0x08, 3, 1).raddr(0x1000, 2).data(64, 3, 4)));
    w(wqe_input(0, 4, 15, WqeImage(0x09, 15, 1, 8, 0, 7).raddr(0x1000, 2).inline_data(&v, 4)));
    w(wqe_input(0, 2, 3, WqeImage(0x0a, 3, 1).data(1, 1, 1).data(2, 1, 1).data(3, 1, 1).data(4, 1, 1).data(5, 1, 1)));
    w(wqe_input(0, 4, 0, WqeImage(0x11, 0, 1).raddr(8, 9).atomic(1, 2).data(8, 1, 1)));
    w(wqe_input(0, 4, 0, WqeImage(0x15, 0, 1, 8, 0x08).raddr(8, 9).masked_args(4, {1, 0}).data(4, 1, 1)));
    w(wqe_input(0, 4, 0, WqeImage(0x14, 0, 1).raddr(8, 9).masked_args(8, {1, 2, 3, 4}).data(8, 1, 1)));
    w(wqe_input(0, 4, 0, WqeImage(0x00, 0, 1)));
    w(wqe_input(0, 4, 0, WqeImage(0x23, 0, 1).data(1, 2, 3)));
    w(wqe_input(2, 4, 0, WqeImage(0x0a, 0, 1).av(5, true).data(7, 1, 1)));
    w(wqe_input(4, 4, 15, WqeImage(0x08, 15, 1).av(5, true).raddr(1, 2).data(7, 1, 1)));
    w(wqe_input(4, 4, 1, WqeImage(0x08, 1, 1).av(5, false).raddr(1, 2).data(7, 1, 1)));
    w(wqe_input(3, 4, 1, WqeImage(0x10, 1, 1).xrc(4).raddr(1, 2).data(7, 1, 1)));
    std::vector<uint8_t> big(300, 0x5a);
    w(wqe_input(0, 3, 6, WqeImage(0x08, 6, 1).raddr(1, 2).inline_data(big.data(), 300)));
    w(wqe_input(0, 4, 7, WqeImage(0x0f, 7, 1, 8, 0x01).data(0x1234, 0x77, 0xfeed0000).data(0, 0, 0)));  // WAIT on data

    n = 0;
    auto p = [&](uint8_t selector, std::vector<uint8_t> box) {
        box.insert(box.begin(), selector);
        write(pd + "/seed-" + std::to_string(n++), box);
    };
    p(0, build_create_qp({}));
    CreateQpSpec mori;
    mori.rq_type = 0;
    mori.log_rq_size = 8;
    mori.log_rq_stride = 2;
    p(0, build_create_qp(mori));
    p(1, build_create_cq({}));
    CreateCqSpec normal;
    normal.collapsed = false;
    normal.log_cq_size = 10;
    p(1, build_create_cq(normal));
    const uint8_t gid[16] = {0xfe, 0x80};
    p(2, build_init2rtr(1, 2, 3, gid));
    p(2, build_qp_command(0x507, 4, 16));
    p(3, build_create_out(0x1234));
    p(4, build_create_qp({}));
    p(5, build_create_cq({}));
    p(6, build_create_dct({}));
    std::printf("wrote %d PRM seeds\n", n);
    return 0;
}
