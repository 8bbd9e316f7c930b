#!/usr/bin/env bash
# record_synth.sh OUT_DIR [--subbuf SIZE] [--num-subbuf N] [--discard] -- ST_SYNTH ARGS...
#
# Records a st-synth run into OUT_DIR as the tracer's sessions do: one UST channel with per-uid buffers, every
# sigmatrace event, and the vpid/vtid/procname contexts. Run it inside tests/support/sandbox.sh --lttng (its
# own session daemon). The channel blocks instead of discarding (LTTNG_UST_ALLOW_BLOCKING), so the trace holds
# exactly what st-synth emitted, which its --truth describes; with --discard it drops events when full, as
# a default LTTng channel does (tests of discarded-event reporting).
set -euo pipefail
out=$1; shift
subbuf=1M; nsub=8; blocking=(--blocking-timeout=inf); allow=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --subbuf) subbuf=$2; shift 2 ;;
    --num-subbuf) nsub=$2; shift 2 ;;
    --discard) blocking=(); allow=0; shift ;;
    --) shift; break ;;
    *) echo "record_synth.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
session=synth$$
rm -rf "$out"
lttng create "$session" --output="$out" >/dev/null
trap 'lttng destroy "$session" >/dev/null 2>&1 || true' EXIT
lttng enable-channel -u --buffers-uid --subbuf-size "$subbuf" --num-subbuf "$nsub" "${blocking[@]}" ch >/dev/null
lttng enable-event -u -c ch 'sigmatrace:*' >/dev/null
lttng add-context -u -c ch -t vpid -t vtid -t procname >/dev/null
lttng start "$session" >/dev/null
set +e
LTTNG_UST_ALLOW_BLOCKING=$allow "$@"
status=$?
set -e
lttng stop "$session" >/dev/null
lttng destroy "$session" >/dev/null
trap - EXIT
exit $status
