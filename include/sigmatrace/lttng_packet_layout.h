// The byte layout of a packet of the traces `sigmatrace record` writes: lttng-ust 2.13's per-uid packet header
// (32 bytes) and packet context (52 bytes), byte-aligned, in the recording host's byte order. The analyzer's
// metadata check (src/analyzer/decode/lttng_tsdl.cpp) accepts a trace only when its metadata declares exactly
// these fields; record's recovery of undelivered buffers (tools/record/crash_recovery.h) patches them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sigmatrace::lttng_packet {

inline constexpr uint32_t kMagic = 0xC1FC1FC1;
inline constexpr std::size_t kOffMagic = 0, kOffUuid = 4, kOffStreamId = 20, kOffInstance = 24, kOffTsBegin = 32,
                             kOffTsEnd = 40, kOffContent = 48, kOffPacketSize = 56, kOffSeqNum = 64,
                             kOffDiscarded = 72, kOffCpuId = 80;
inline constexpr std::size_t kHeaderBytes = 84;  // header and context: the first event follows

}  // namespace sigmatrace::lttng_packet
