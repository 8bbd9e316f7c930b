// mlx5 address vectors (struct mlx5_wqe_av: the 16-byte base, or 48 bytes with the GRH part), in the two
// directions the fabric needs: the one mlx5dv_init_obj(MLX5DV_OBJ_AH) hands out for a verbs address handle, and
// the destination a UD or DCI WQE names in the AV that follows its control segment.
#pragma once

#include <cstdint>

#include "core/engine.h"
#include "mlx5_format/mlx5_layout.h"

namespace softfabric::mlx5 {

// The AV of an address handle: destination LID (or GID, with the GRH part), SL; the QPN and key are left for the
// WQE writer, as libmlx5 does (its extended bit set only when the AV carries a GRH).
void av_of_destination(const engine::UdDestination& dest, sigmatrace::gpumem::mlx5::Av& out);

// Where the AV at `av` (48 bytes readable; a DCI's may hold only the 16-byte base, its extended bit clear) sends:
// the NIC named by the GID (GRH bit set) or the LID, the destination QPN / DCT number, and the key (UD: Q_Key,
// DC: the low 32 bits of the DC access key). False when it names no fabric NIC.
bool destination_of_av(const uint8_t* av, bool ud, engine::UdDestination& out);

}  // namespace softfabric::mlx5
