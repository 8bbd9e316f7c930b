#!/usr/bin/env bash
# message_footprint.sh [BUILD_DIR] [--classic]: instructions and cache lines a message's verbs calls execute and
# touch, untraced and traced, counted exactly under Valgrind (lackey) rather than timed.
#
# Runs bench/bin/message_footprint (ib_send_lat's calls for one message, in one process: post the SEND, poll its
# receive, repost the receive; see its header) untraced and under `sigmatrace record`, each under
# `valgrind --tool=lackey --trace-mem=yes`, and counts messages FIRST..FIRST+COUNT-1 (defaults 100 and 200;
# the first ones warm the caches of the tracer's state) with message_footprint.py. The traced run uses a long
# age bound (SIGMATRACE_DEFER_MAX_AGE_US=1000000): under Valgrind a message takes ~100x longer, and the default
# bound would drain the ring at nearly every message; messages with a drain are left out either way.
# Needs valgrind (apt-get install valgrind) and python3. Takes ~30 s; writes ~500 MB under a temporary
# directory, removed at the end (KEEP=1 keeps it).
#
# Runs itself inside tests/support/sandbox.sh (private /dev/shm for the fabric).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
api=${2:-}
[[ -z $api || $api == --classic ]] || { echo "usage: $0 [BUILD_DIR] [--classic]" >&2; exit 2; }
if [[ ${SIGMATRACE_SANDBOXED:-0} != 1 ]]; then
  exec "$here/tests/support/sandbox.sh" "$0" "$build" $api
fi
for tool in valgrind python3; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is needed (apt-get install $tool)" >&2; exit 1; }
done
sigmatrace=$build/stage/bin/sigmatrace
program=$build/bench/bin/message_footprint
[[ -x $program ]] || { echo "$0: $program is missing (build the benchmarks first)" >&2; exit 1; }
first=${FIRST:-100} count=${COUNT:-200}
iters=$((first + count + 1))
work=$(mktemp -d /tmp/message-footprint.XXXXXX)
[[ ${KEEP:-0} == 1 ]] && echo "keeping $work" || trap 'rm -rf "$work"' EXIT

# count MODE: runs the program under lackey (traced or untraced) and prints message_footprint.py's lines.
count() {
  local mode=$1 dir=$work/$1
  mkdir -p "$dir"
  local cmd=("$sigmatrace" fabric --name footprint --node 0 --
             valgrind --tool=lackey --trace-mem=yes --log-file="$dir/lackey.log"
             "$program" --iters "$iters" --maps "$dir/maps" $api)
  if [[ $mode == traced ]]; then
    SIGMATRACE_DEFER_MAX_AGE_US=1000000 "$sigmatrace" record -o "$dir/trace" -- "${cmd[@]}" >"$dir/out" 2>"$dir/err"
  else
    "${cmd[@]}" >"$dir/out" 2>"$dir/err"
  fi || { echo "$0: the $mode run failed:" >&2; cat "$dir/out" "$dir/err" >&2; exit 1; }
  local marker
  marker=$(sed -n 's/^marker=//p' "$dir/out")
  [[ -n $marker ]] || { echo "$0: the $mode run printed no marker" >&2; cat "$dir/out" >&2; exit 1; }
  python3 "$here/bench/interpose/message_footprint.py" "$dir/lackey.log" "$dir/maps" "$marker" "$first" "$count"
}

count plain >"$work/plain.txt"
count traced >"$work/traced.txt"
total() { awk -v col="$2" '$1 == "total" { print $col }' "$1"; }
echo "message_footprint ${api:-(ibv_wr_* posting)}, messages $first..$((first + count - 1)), per message:"
printf '%-34s %12s %8s %8s\n' "" instructions I-lines D-lines
printf '%-34s %12s %8s %8s\n' untraced "$(total "$work/plain.txt" 2)" "$(total "$work/plain.txt" 3)" "$(total "$work/plain.txt" 4)"
printf '%-34s %12s %8s %8s\n' traced "$(total "$work/traced.txt" 2)" "$(total "$work/traced.txt" 3)" "$(total "$work/traced.txt" 4)"
printf '%-34s %12s %8s %8s\n' "traced - untraced" \
  "$(awk -v a="$(total "$work/traced.txt" 2)" -v b="$(total "$work/plain.txt" 2)" 'BEGIN { print a - b }')" \
  "$(awk -v a="$(total "$work/traced.txt" 3)" -v b="$(total "$work/plain.txt" 3)" 'BEGIN { print a - b }')" \
  "$(awk -v a="$(total "$work/traced.txt" 4)" -v b="$(total "$work/plain.txt" 4)" 'BEGIN { print a - b }')"
awk '$1 == "libsigmatrace.so" { printf "%-34s %12s %8s %8s\n", "  of which in libsigmatrace.so", $2, $3, $4 }' "$work/traced.txt"
awk '$1 == "messages" { print "traced messages counted: " $2 ", left out (an emission ran): " $4 }' "$work/traced.txt"
