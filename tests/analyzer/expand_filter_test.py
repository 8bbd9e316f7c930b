#!/usr/bin/env python3
"""filter.sigmatrace.expand on the committed records trace (tests/data/analyzer/records: ib_send_bw -n 200 -s 64
between two fabric nodes, recorded by `sigmatrace record` with deferred emission, 3 deferred_records events):

1. text: sink.text.pretty shows one event per call (200 post_send, 200 post_recv, 15 poll_cq), the exact fields of
   a known call, each carrier after its calls emptied of its words, every other event exactly as without the
   filter, and each stream's timestamps non-decreasing with the capture time kept in `ts`;
2. copy: sigmatrace-analyze of the sink.ctf.fs copy gives the original's JSON, less the fields that count events
   or name the trace (listed in SAME_EXCEPT);
3. damage: a carrier whose words are overwritten from its middle on passes on unchanged after the calls that
   decoded, which equal the intact run's, with a warning; the graph does not fail;
4. classes: on the trace with its call event classes left out of the metadata, the filter's own classes print
   and analyze exactly as the tracer's;
5. salvage: the carrier marked as salvaged (origin_pid/origin_tid) gives calls of that process and thread, and
   the copy analyzes as the marked original.

The exact values (a handle, 15 polls) are those of the committed recording: re-recording it
(make_golden_traces.sh) means reading them again from its text output.

expand_filter_test.py PLUGIN_DIR ANALYZER TRACE_DIR WORK_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

plugin_dir, analyzer, trace, work = sys.argv[1:5]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def bt(*args):
    r = subprocess.run(["babeltrace2", "--plugin-path=" + plugin_dir, *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
    return r


def event_name(line):
    m = re.match(r"\[(\d+)\] \(\+[?\d]+\) \S+ (\S+): ", line)
    return (int(m.group(1)), m.group(2).rstrip(":")) if m else (None, None)


if shutil.which("babeltrace2") is None:
    print("babeltrace2 not installed: skipped")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

# ------------------------------------------------------------------ 1. text
plain = bt(trace, "-c", "sink.text.pretty", "-p", "clock-cycles=yes")
expanded = bt(trace, "-c", "filter.sigmatrace.expand", "-c", "sink.text.pretty", "-p", "clock-cycles=yes")
check(plain.returncode == 0 and expanded.returncode == 0, "babeltrace2 exits 0 with and without the filter")
check(expanded.stderr == "", "no warning on an intact trace: " + expanded.stderr)
lines = expanded.stdout.splitlines()
counts = {}
for line in lines:
    counts[event_name(line)[1]] = counts.get(event_name(line)[1], 0) + 1
check(counts.get("sigmatrace:post_send") == 200, f"200 post_send events: {counts}")
check(counts.get("sigmatrace:post_recv") == 200, f"200 post_recv events: {counts}")
check(counts.get("sigmatrace:poll_cq") == 15, f"15 poll_cq events: {counts}")
check(counts.get("sigmatrace:deferred_records") == 3, f"3 carriers: {counts}")
# Every element of every call is one element of its event: 200 completions on each side.
completions = sum(int(re.search(r" n = (\d+),", l).group(1)) for l in lines if "sigmatrace:poll_cq:" in l)
# 200 receives on the server, 2 signaled sends on the client (ib_send_bw signals one send in 100).
check(completions == 202, f"202 completions in the poll_cq events: {completions}")
carriers = [l for l in lines if "sigmatrace:deferred_records:" in l]
check(all("n = 0, _words_length = 0, words = [ ]" in l for l in carriers), "each carrier follows its calls without words")
calls = ("sigmatrace:post_send", "sigmatrace:post_recv", "sigmatrace:poll_cq", "sigmatrace:deferred_records")
others = [l for l in lines if event_name(l)[1] not in calls]
plain_others = [l for l in plain.stdout.splitlines() if event_name(l)[1] not in calls]
# The same events, their fields, contexts and timestamps (the (+delta) column depends on the event before).
strip = lambda ls: [re.sub(r"\(\+[?\d]+\) ", "", l) for l in ls]
check(strip(others) == strip(plain_others), "every other event passes through unchanged")
# A known call: the client's first post_send (ibv_wr_* API), one unsignaled SEND of 64 bytes.
first = next(l for l in lines if "sigmatrace:post_send:" in l)
ts = int(re.search(r"ts = \[ \[0\] = (\d+) \]", first).group(1))
check(event_name(first)[0] >= ts, "a post's event is not before its capture")
payload = first[first.index("{ qp = "):]
expected = ("{ qp = 0x557114D63A70, qp_num = 65539, ret = 0, bad_index = -1, api = 1, batch_offset = 0, n = 1, "
            "_wr_id_length = 1, wr_id = [ [0] = 0x0 ], _opcode_length = 1, opcode = [ [0] = 2 ], "
            "_send_flags_length = 1, send_flags = [ [0] = 0x0 ], _num_sge_length = 1, num_sge = [ [0] = 1 ], "
            "_bytes_length = 1, bytes = [ [0] = 64 ], _raddr_length = 1, raddr = [ [0] = 0x0 ], _rkey_length = 1, "
            "rkey = [ [0] = 0x0 ], _imm_length = 1, imm = [ [0] = 0x0 ], _remote_qpn_length = 1, "
            "remote_qpn = [ [0] = 0 ], _ah_length = 1, ah = [ [0] = 0x0 ], _ts_length = 1, ts = [ [0] = %d ] }" % ts)
check(payload == expected, "the first post_send's fields:\n  got      " + payload + "\n  expected " + expected)
sends = [l for l in lines if "sigmatrace:post_send:" in l]
signaled = [i for i, l in enumerate(sends) if "send_flags = [ [0] = 0x2 ]" in l]
check(signaled == [99, 199], f"the 100th and 200th sends are signaled: {signaled}")
first_recv = next(l for l in lines if "sigmatrace:post_recv:" in l)
recv_ts = int(re.search(r"ts = \[ \[0\] = (\d+) \]", first_recv).group(1))
check(event_name(first_recv)[0] == recv_ts, "an unclamped call's event is at its capture time")
# Each stream's timestamps never go back (cpu_id names the stream in this per-CPU trace).
last = {}
for line in lines:
    cpu = re.search(r"cpu_id = (\d+)", line).group(1)
    t = event_name(line)[0]
    check(t >= last.get(cpu, 0), "stream cpu " + cpu + " goes back in time at: " + line[:80])
    last[cpu] = t

# ------------------------------------------------------------------ 2. copy
copy = os.path.join(work, "copy")
r = bt(trace, "-c", "filter.sigmatrace.expand", "-c", "sink.ctf.fs", "-p", f'path="{copy}",assume-single-trace=yes')
check(r.returncode == 0, "sink.ctf.fs writes the expanded copy")


def analyze(path, out):
    r = subprocess.run([analyzer, path, "--json", out], capture_output=True, text=True)
    check(r.returncode == 0, f"sigmatrace-analyze {path} exits 0: {r.stderr}")
    with open(out) as f:
        return json.load(f)


orig = analyze(trace, os.path.join(work, "orig.json"))
again = analyze(copy, os.path.join(work, "copy.json"))
# Legitimately different: what counts events (the copy holds one per call besides its carriers), where the trace
# lies, and how far the reordering window widened (it follows how long after its capture an event came: calls now
# come at their capture time, unless held up by an event of their stream).
SAME_EXCEPT = {("trace", "events"), ("trace", "events_by_type"), ("trace", "paths"), ("trace", "reorder_window_ns")}
for key in SAME_EXCEPT:
    orig[key[0]].pop(key[1])
    again[key[0]].pop(key[1])
events = [p.pop("events") for p in orig["processes"]], [p.pop("events") for p in again["processes"]]
check(orig == again, "the copy analyzes to the original's JSON (" + os.path.join(work, "*.json") + ")")
check(sum(events[1]) - sum(events[0]) == 415, f"the copy has one event per call more: {events}")
check(orig["ops"]["total"] == 400 and orig["ops"]["in_flight_at_end"] == 0, "400 operations, all completed")

# ------------------------------------------------------------------ 3. damage
# The carrier of most words: its words from the middle on become 0xff bytes (a record of unknown kind).
carrier_lines = [(event_name(l)[0], [int(v) for v in re.findall(r"\[\d+\] = (\d+)", l)])
                 for l in plain.stdout.splitlines() if "sigmatrace:deferred_records:" in l]
victim_ts, victim = max(carrier_lines, key=lambda c: len(c[1]))
cut = len(victim) // 2
needle = b"".join(w.to_bytes(8, "little") for w in victim[cut:cut + 4])
damaged = os.path.join(work, "damaged")
shutil.copytree(trace, damaged)
hits = 0
for name in os.listdir(damaged):
    path = os.path.join(damaged, name)
    if not name.startswith("sigmatrace_"):
        continue
    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = data.find(needle)
    if at >= 0:
        hits += 1
        data[at:at + 8 * (len(victim) - cut)] = b"\xff" * (8 * (len(victim) - cut))
        with open(path, "wb") as f:
            f.write(bytes(data))
check(hits == 1, "the carrier's words are found once in the stream files")
d = bt(damaged, "-c", "filter.sigmatrace.expand", "-c", "sink.text.pretty", "-p", "clock-cycles=yes")
check(d.returncode == 0, "a damaged carrier does not fail the graph")
m = re.search(r"records stop decoding after (\d+) calls \(a record of unknown kind\)", d.stderr)
check(m is not None, "a warning names the damage: " + d.stderr)


def calls_before(ls, ts):
    """The call events right before the carrier at `ts` (a filter's calls precede their carrier)."""
    at = next(i for i, l in enumerate(ls) if "sigmatrace:deferred_records:" in l and event_name(l)[0] == ts)
    k = at
    while k > 0 and event_name(ls[k - 1])[1] in calls[:3]:
        k -= 1
    return ls[k:at], ls[at]


dlines = d.stdout.splitlines()
intact_calls, _ = calls_before(lines, victim_ts)
damaged_calls, kept = calls_before(dlines, victim_ts)
decoded = int(m.group(1)) if m else -1
check(len(damaged_calls) == decoded and 0 < decoded < len(intact_calls),
      f"part of the carrier decoded: {len(damaged_calls)} calls passed on, {decoded} said, of {len(intact_calls)}")
# The decoded calls are the intact run's, but for the last one, whose fields may run into the damage.
check(damaged_calls[:-1] == intact_calls[: len(damaged_calls) - 1], "the calls decoded before the damage are the intact run's")
check(f"n = {len(victim)}, _words_length = {len(victim)}," in kept, "the damaged carrier passes on with all its words")
# Everything else is as in the intact run.
rest = lambda ls, skip: [l for l in ls if l not in skip]
check(rest(dlines, damaged_calls + [kept]) == rest(lines, intact_calls + [calls_before(lines, victim_ts)[1]]),
      "the other events and carriers are as in the intact run")

# ------------------------------------------------------------------ 4. a trace that declares no call events
# The same trace with the four call event classes left out of its metadata (no event of theirs is in it): the
# filter builds them from the schema, and what comes out reads as with the tracer's own classes.
meta = subprocess.run(["babeltrace2", "-o", "ctf-metadata", trace], capture_output=True, text=True).stdout
bare_meta, removed = re.subn(r'event \{\n\tname = "sigmatrace:(post_send|post_recv|post_srq_recv|poll_cq)";.*?\n\};\n', "",
                             meta, flags=re.S)
check(removed == 4, f"the four call event classes are left out of the metadata: {removed}")
bare = os.path.join(work, "bare")
shutil.copytree(trace, bare)
with open(os.path.join(bare, "metadata"), "w") as f:
    f.write(bare_meta)
b = bt(bare, "-c", "filter.sigmatrace.expand", "-c", "sink.text.pretty", "-p", "clock-cycles=yes")
check(b.returncode == 0 and b.stdout.splitlines() == lines, "built call classes print as the tracer's do")
bare_copy = os.path.join(work, "bare-copy")
r = bt(bare, "-c", "filter.sigmatrace.expand", "-c", "sink.ctf.fs", "-p", f'path="{bare_copy}",assume-single-trace=yes')
check(r.returncode == 0, "sink.ctf.fs writes the copy with built call classes")
from_bare = analyze(bare_copy, os.path.join(work, "bare-copy.json"))
for key in SAME_EXCEPT:
    from_bare[key[0]].pop(key[1])
for p in from_bare["processes"]:
    p.pop("events")
check(from_bare == again, "the copy with built call classes analyzes as the other copy")

# ------------------------------------------------------------------ 5. salvaged records
# The same carrier marked as salvaged (origin_pid, origin_tid follow its words) on behalf of the other process:
# its calls belong to that process and thread, as the analyzer reads the carrier, and the copy analyzes as the
# marked original.
victim_line = next(l for l in plain.stdout.splitlines() if "sigmatrace:deferred_records:" in l and event_name(l)[0] == victim_ts)
victim_pid = int(re.search(r"vpid = (\d+)", victim_line).group(1))
origin = next(p["pid"] for p in orig["processes"] if p["pid"] != victim_pid)
salvaged = os.path.join(work, "salvaged")
shutil.copytree(trace, salvaged)
first_words = b"".join(w.to_bytes(8, "little") for w in victim[:4])
for name in os.listdir(salvaged):
    if not name.startswith("sigmatrace_"):
        continue
    path = os.path.join(salvaged, name)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    at = data.find(first_words)
    if at >= 0:
        end = at + 8 * len(victim)
        data[end:end + 8] = origin.to_bytes(4, "little") + (origin + 1).to_bytes(4, "little")
        with open(path, "wb") as f:
            f.write(bytes(data))
s_lines = bt(salvaged, "-c", "filter.sigmatrace.expand", "-c", "sink.text.pretty", "-p", "clock-cycles=yes").stdout.splitlines()
s_calls, s_carrier = calls_before(s_lines, victim_ts)
check(f"origin_pid = {origin}, origin_tid = {origin + 1}," in s_carrier, "the carrier is marked salvaged: " + s_carrier[:60])
check(len(s_calls) == len(intact_calls) and all(f'{{ vpid = {origin}, vtid = {origin + 1}, procname = "" }}' in l for l in s_calls),
      "the salvaged calls carry their origin's pid and thread")
salvaged_copy = os.path.join(work, "salvaged-copy")
r = bt(salvaged, "-c", "filter.sigmatrace.expand", "-c", "sink.ctf.fs", "-p", f'path="{salvaged_copy}",assume-single-trace=yes')
check(r.returncode == 0, "sink.ctf.fs writes the salvaged copy")
marked = analyze(salvaged, os.path.join(work, "salvaged.json"))
marked_copy = analyze(salvaged_copy, os.path.join(work, "salvaged-copy.json"))
check(marked["trace"]["salvaged_events"] == 1, "the analyzer counts the salvaged carrier")
for doc in (marked, marked_copy):
    for key in SAME_EXCEPT:
        doc[key[0]].pop(key[1])
    for p in doc["processes"]:
        p.pop("events")
check(marked == marked_copy, "the salvaged copy analyzes to the marked original's JSON")
check(marked != orig, "marking the carrier salvaged changes the analysis")

print(f"{len(others)} other events, damaged carrier: {decoded} of {len(intact_calls)} calls decoded; {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
