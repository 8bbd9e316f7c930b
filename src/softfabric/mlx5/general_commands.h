// mlx5dv_devx_general_cmd on a fabric device: the capability queries answered with one capability set (a
// ConnectX-6 restricted to what the fabric executes; docs/softfabric.md, "mlx5 DevX and direct verbs"), every
// other command refused as the device firmware refuses a command or a capability page it does not have.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softfabric::mlx5 {

// Command status codes of the PRM (the `status` byte of every `out` mailbox).
inline constexpr uint8_t kCmdStatusBadOp = 0x02;     // the device does not implement the opcode
inline constexpr uint8_t kCmdStatusBadParam = 0x03;  // an opcode it implements, with an argument it rejects

// Capability pages of QUERY_HCA_CAP (op_mod = page << 1 | current).
inline constexpr uint16_t kCapGeneral = 0x0;
inline constexpr uint16_t kCapOdp = 0x2;
inline constexpr uint16_t kCapAtomic = 0x3;
inline constexpr uint16_t kCapDeviceMemory = 0xf;

// Executes one general command. 0: `out` holds the answer (status 0). A command or capability page the device
// lacks: `out` holds the firmware's status (kCmdStatusBadOp / kCmdStatusBadParam) and a syndrome naming the
// reason, and the result is EOPNOTSUPP, as every mlx5 feature the fabric lacks is refused (programs that probe a
// feature, UCX and rdma-core's tests among them, take it for "unsupported" and go on without). A mailbox too
// short for the command's fields: EINVAL, `out` untouched. errno is set to any nonzero result.
int general_command(const void* in, size_t inlen, void* out, size_t outlen);

}  // namespace softfabric::mlx5
