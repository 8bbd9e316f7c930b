#include "mlx5/address_vector.h"

#include <cstring>

namespace softfabric::mlx5 {
namespace layout = sigmatrace::gpumem::mlx5;

namespace {
constexpr uint32_t kAvGrhBit = 1u << 30;  // grh_gid_fl: the AV carries a GRH (remote GID valid)
}

void av_of_destination(const engine::UdDestination& dest, layout::Av& out) {
    std::memset(&out, 0, sizeof out);
    layout::store_be32(out.base.dqp_dct, dest.has_grh ? layout::kExtendedAvFlag : 0);
    out.base.stat_rate_sl = static_cast<uint8_t>(dest.sl & 0xf);
    layout::store_be16(out.base.rlid, lid_of(dest.nic));
    if (dest.has_grh) {
        out.hop_limit = 64;
        layout::store_be32(out.grh_gid_fl, kAvGrhBit);
        std::memcpy(out.rgid, dest.dgid.raw, sizeof out.rgid);
    }
}

bool destination_of_av(const uint8_t* av, bool ud, engine::UdDestination& out) {
    layout::Av a;
    std::memcpy(&a, av, sizeof a);
    out = engine::UdDestination{};
    out.qpn = a.base.remote_qpn();
    out.qkey = layout::load_be32(ud ? a.base.key : a.base.key + 4);  // UD: qkey first; DC: a big-endian 64-bit key
    out.sl = a.base.stat_rate_sl & 0xf;
    const bool extended = ud || a.base.extended();
    out.has_grh = extended && (layout::load_be32(a.grh_gid_fl) & kAvGrhBit) != 0;
    std::optional<NicId> nic;
    if (out.has_grh) {
        std::memcpy(out.dgid.raw, a.rgid, sizeof out.dgid.raw);
        nic = nic_from_gid(out.dgid);
    } else {
        nic = nic_from_lid(layout::load_be16(a.base.rlid));
    }
    if (!nic) return false;
    out.nic = *nic;
    return true;
}

}  // namespace softfabric::mlx5
