#!/usr/bin/env bash
# make_golden_traces.sh BUILD_DIR: re-records the small committed traces under tests/data/analyzer/ (run it
# only when the schema or st-synth changes; then run update_golden.sh to refresh the expected outputs).
# Needs root (tests/support/sandbox.sh --lttng).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
synth=$build/stage/libexec/sigmatrace/st-synth
data=$root/tests/data/analyzer
record() {  # record NAME RECORD_OPTIONS -- SYNTH ARGS
  local name=$1; shift
  local tmp; tmp=$(mktemp -d)
  "$root/tests/support/sandbox.sh" --lttng "$here/record_synth.sh" "$tmp/t" "$@" || true
  rm -rf "${data:?}/$name"
  mkdir -p "$data/$name"
  cp -r "$tmp/t/ust/uid/0/64-bit/." "$data/$name/"
  rm -rf "$tmp"
}
# Everything the analyzer knows, small: traffic, a barrier with a late rank, an error and its flushes, GPU WQEs,
# UD sends, SRQ receives.
record mixed --subbuf 4096 --num-subbuf 8 -- "$synth" mixed --ranks 4 --iters 8 --epochs 5 --delay-rank 3 \
  --delay-us 1500 --period-us 4000
# Ring buffers too small: discarded events.
record discarded --subbuf 4096 --num-subbuf 2 --discard -- "$synth" bench --ranks 2 --iters 3000
# A rank that aborts with work requests in flight.
record crash --subbuf 4096 --num-subbuf 8 -- "$synth" crash --ranks 2 --iters 12
# Deferred emission's records (filter.sigmatrace.expand's test): ib_send_bw between two fabric nodes, recorded
# by the tracer itself.
record_fabric() {  # record_fabric NAME SCRIPT
  local name=$1 tmp; tmp=$(mktemp -d)
  printf '%s\n' "$2" > "$tmp/run.sh"
  "$root/tests/support/sandbox.sh" bash "$tmp/run.sh" "$tmp/t" || true
  rm -rf "${data:?}/$name"
  mkdir -p "$data/$name"
  cp -r "$tmp/t/ust/uid/0/64-bit/." "$data/$name/"
  rm -rf "$tmp"
}
st=$build/stage/bin/sigmatrace
record_fabric records "$st record -o \"\$1\" -- bash -c '$st fabric --node 0 -- ib_send_bw -d sfab_0 -s 64 -n 200 >/dev/null & sleep 1; $st fabric --node 1 -- ib_send_bw -d sfab_0 -s 64 -n 200 localhost >/dev/null; wait'"
du -sh "$data"/*
