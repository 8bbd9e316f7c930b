#!/usr/bin/env bash
# message_footprint_parser_test.sh PARSER: message_footprint.py on a hand-written lackey log whose counts are
# known: messages cut at marker stores, instructions and their lines (one straddling two) and data lines
# attributed to the instruction's object, a message with an LTTng emission left out, per-object means and
# per-message median totals.
set -euo pipefail
parser=$1
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/maps" <<'MAPS'
00001000-00002000 r-xp 00000000 fe:00 1 /x/libsigmatrace.so
00002000-00003000 r-xp 00000000 fe:00 2 /x/libfoo.so
00003000-00004000 r-xp 00000000 fe:00 3 /x/liblttng-ust.so.1.0.0
00010000-00020000 rw-p 00000000 00:00 0
MAPS
# Marker at 0x10000. Message 0: two libsigmatrace instructions (the second straddles code lines 0x40 and 0x41)
# with two data lines, one libfoo instruction reading a line libsigmatrace also read (counted for each object).
# Message 1 runs LTTng code: left out. Message 2: one libsigmatrace instruction, one data line (modify).
cat >"$work/log" <<'LOG'
==1== Lackey, an example Valgrind tool
I  00001000,4
 S 00010000,8
I  00001000,4
 L 00010040,8
I  0000103e,4
 S 00010080,4
I  00002000,3
 L 00010040,8
 S 00010000,8
I  00001000,4
I  00003000,2
 S 00010000,8
I  00001000,4
 M 00010100,8
 S 00010000,8
I  00001000,4
LOG
expected='libsigmatrace.so 1.5 1.5 1.5
libfoo.so 0.5 0.5 0.5
total 2.0 2.0 2.0
messages 2 left_out 1'
got=$(python3 "$parser" "$work/log" "$work/maps" 0x10000 0 3)
if [[ $got != "$expected" ]]; then
  echo "FAILED: message_footprint.py counted"
  echo "$got"
  echo "expected"
  echo "$expected"
  exit 1
fi
# No message in the range: a clear error, not an empty table.
if python3 "$parser" "$work/log" "$work/maps" 0x10000 10 5 >"$work/out" 2>&1; then
  echo "FAILED: a range with no message succeeded: $(cat "$work/out")"
  exit 1
fi
grep -q "no message 10..14" "$work/out" || { echo "FAILED: unclear error: $(cat "$work/out")"; exit 1; }
echo "message_footprint.py: counts as expected"
