#!/usr/bin/env bash
# make_ctf_seeds.sh TRACE_DIR OUT_DIR: the ctf_fuzzer seeds (input layout in ctf_fuzzer.cpp) from one committed
# trace (metadata + its first stream file): intact, metadata cut inside a packet, the stream cut inside its
# packet header, and the stream with flipped bytes in its event data.
set -euo pipefail
python3 - "$1" "$2" <<'PY'
import os, struct, sys
src, out = sys.argv[1], sys.argv[2]
meta = open(os.path.join(src, "metadata"), "rb").read()
stream = open(os.path.join(src, sorted(f for f in os.listdir(src) if f.startswith("ch_"))[0]), "rb").read()
def seed(name, m, s):
    open(os.path.join(out, name), "wb").write(struct.pack("<I", len(m)) + m + s)
seed("intact", meta, stream)
seed("metadata_cut", meta[:16000], stream)
seed("stream_cut", meta, stream[:31])
flipped = bytearray(stream)
for off in (120, 400, 1000):
    flipped[off] ^= 0x5a
seed("stream_flipped", meta, bytes(flipped))
PY
