#!/usr/bin/env python3
"""--perfetto FILE.pftrace (Perfetto's protobuf format) on the committed `mixed` trace, decoded with
python3-protobuf and the module protoc generated from src/analyzer/outputs/perfetto_trace.proto, against the
JSON timeline (--perfetto FILE.json) and the analysis document of the same trace:

1. tracks: a process track per process and a child QP track per QP, named as the JSON's process_name and
   thread_name entries (the last descriptor of a uuid is the one in force);
2. slices: one SLICE_BEGIN and one SLICE_END per operation (ops.total), each begin on a QP track;
3. flows: as many flow ids started and ended as the JSON's flow starts, each started and ended once;
   remote markers as many as the JSON's;
4. counters: a "link SRC -> DST bytes/s" track with each window's bytes_per_s at its start_ns, and
   "senders -> NIC" with each window's senders, "outstanding bytes: QP" and "receives posted: QP" with each
   window's max_bytes and recv_max_posted of timeline.windows[].qps, for every window of timeline.windows[];
5. size: without counters (--window off) at most 200 bytes per operation and under 40% of the JSON timeline;
6. sampling: --perfetto-max-ops 50 writes at most 50 operations, densely at the start and thinning to the trace's
   end (level of detail), and says how in a track name and on stderr;
7. format choice and errors: --perfetto-format json with a .pftrace name writes JSON; a path in a missing
   directory fails with a clear message.

perfetto_proto_test.py ANALYZER TRACE_DIR PYTHON_PROTO_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

analyzer, trace, proto_dir, work = sys.argv[1:5]
sys.path.insert(0, proto_dir)
import perfetto_trace_pb2 as pf  # noqa: E402  (generated at build time)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    return subprocess.run([analyzer, trace, "--quiet", *args], capture_output=True, text=True)


def packets(path):
    t = pf.Trace()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return list(t.packet)


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
p_proto, p_json, doc_path = (os.path.join(work, n) for n in ("t.pftrace", "t.json", "a.json"))
r = run("--json", doc_path, "--perfetto", p_proto)
check(r.returncode == 0, f"proto run rc={r.returncode}: {r.stderr}")
r = run("--perfetto", p_json)
check(r.returncode == 0, f"json run rc={r.returncode}: {r.stderr}")
doc = json.load(open(doc_path))
pj = json.load(open(p_json))
pk = packets(p_proto)
check(pk[0].sequence_flags & pf.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED, "first packet clears incremental state")
clocks = {c.clock_id: c.timestamp for c in pk[0].clock_snapshot.clocks}
check(clocks.get(64) == 0 and clocks.get(6, 0) > 0 and pk[0].trace_packet_defaults.timestamp_clock_id == 64,
      f"the file's clock 64 defined against BOOTTIME: {clocks}")


# 1. tracks
tracks = {}
for p in pk:
    if p.HasField("track_descriptor"):
        tracks[p.track_descriptor.uuid] = p.track_descriptor  # the last one in force
procs = {u: d for u, d in tracks.items() if d.HasField("process")}
qps = {u: d for u, d in tracks.items() if d.parent_uuid in procs}
jprocs = {e["pid"]: e["args"]["name"] for e in pj["traceEvents"] if e.get("name") == "process_name"}
jqps = {(jprocs[e["pid"]], e["args"]["name"]) for e in pj["traceEvents"] if e.get("name") == "thread_name"}
check(sorted(d.name for d in procs.values()) == sorted(jprocs.values()),
      f"process tracks {sorted(d.name for d in procs.values())} == {sorted(jprocs.values())}")
check({(procs[d.parent_uuid].name, d.name) for d in qps.values()} == jqps, "QP tracks under their processes as in JSON")
check(all(d.process.process_name == d.name and d.process.pid > 0 for d in procs.values()), "process descriptors")

# 2. slices; 3. flows
names = {}
for p in pk:
    for n in p.interned_data.event_names:
        names[n.iid] = n.name
begins = [p for p in pk if p.track_event.type == pf.TrackEvent.TYPE_SLICE_BEGIN]
ends = [p for p in pk if p.track_event.type == pf.TrackEvent.TYPE_SLICE_END]
instants = [p for p in pk if p.track_event.type == pf.TrackEvent.TYPE_INSTANT]
ops_total = doc["ops"]["total"]
check(len(begins) == ops_total and len(ends) == ops_total, f"slices {len(begins)}/{len(ends)} == ops {ops_total}")
check(all(p.track_event.track_uuid in qps for p in begins + ends), "slices on QP tracks")
by_name = {}
for p in begins:
    by_name[names[p.track_event.name_iid]] = by_name.get(names[p.track_event.name_iid], 0) + 1
check(by_name == {k: v["count"] for k, v in doc["ops"]["by_opcode"].items()},
      f"slices by opcode {by_name} == ops.by_opcode counts")
# Post and completion times: the JSON's are microseconds from the same base (a second before the first operation).
spans = [(pk[i].timestamp, pk[i + 1].timestamp) for i in range(len(pk) - 1)
         if pk[i].track_event.type == pf.TrackEvent.TYPE_SLICE_BEGIN and pk[i + 1].track_event.type == pf.TrackEvent.TYPE_SLICE_END]
jspans = [(e["ts"], e["dur"]) for e in pj["traceEvents"] if e["ph"] == "X" and e["cat"] != "remote"]
check(len(spans) == ops_total, "each begin followed by its end")
check(sorted((round(b / 1000, 3), round((e - b) / 1000, 3)) for b, e in spans) == sorted(jspans),
      "slice times and durations equal the JSON's")
starts, terms = {}, {}
for p in begins + instants:
    for f in p.track_event.flow_ids:
        starts.setdefault(f, []).append(p.track_event.track_uuid)
    for f in p.track_event.terminating_flow_ids:
        terms.setdefault(f, []).append(p.track_event.track_uuid)
pairs = set(starts) & set(terms)
jflows = sum(e["ph"] == "s" for e in pj["traceEvents"])
check(len(pairs) == jflows and jflows > 0, f"flow pairs {len(pairs)} == JSON flows {jflows}")
check(all(len(starts[f]) == 1 and len(terms[f]) == 1 for f in pairs), "each flow starts and ends once")
remote = [p for p in instants if names[p.track_event.name_iid].endswith(" (remote)")]
check(len(remote) == pj["otherData"]["remote_markers"] and remote, f"remote markers {len(remote)}")

# 4. counters
counters = {d.name: u for u, d in tracks.items() if d.HasField("counter")}
values = {}
for p in pk:
    if p.track_event.type == pf.TrackEvent.TYPE_COUNTER:
        check(p.timestamp_clock_id == 6, "counters on the trace clock")
        values[(p.track_event.track_uuid, p.timestamp)] = p.track_event.double_counter_value
windows = doc["timeline"]["windows"]
checked = 0
checked_qps = 0
for w in windows:
    for l in w["links"]:
        name = f"link {l['src']['node']}/{l['src']['device']} -> {l['dst']['node']}/{l['dst']['device']} bytes/s"
        check(name in counters and values.get((counters[name], w["start_ns"])) == l["bytes_per_s"],
              f"{name} at {w['start_ns']}: {values.get((counters.get(name), w['start_ns']))} == {l['bytes_per_s']}")
        checked += 1
    for rc in w["receivers"]:
        name = f"senders -> {rc['receiver']['node']}/{rc['receiver']['device']}"
        check(name in counters and values.get((counters[name], w["start_ns"])) == rc["senders"], f"{name} at {w['start_ns']}")
        checked += 1
    for q in w.get("qps", []):
        who = f"rank {q['rank']}" if q.get("rank") is not None and q["rank"] >= 0 else f"pid {q['pid']}"
        label = f"{who} ({q['node']}) QP {q['qp_num']}"
        if "max_bytes" in q:
            name = f"outstanding bytes: {label}"
            check(name in counters and values.get((counters[name], w["start_ns"])) == q["max_bytes"], f"{name} at {w['start_ns']}")
            checked_qps += 1
        if "recv_max_posted" in q:
            name = f"receives posted: {label}"
            check(name in counters and values.get((counters[name], w["start_ns"])) == q["recv_max_posted"], f"{name} at {w['start_ns']}")
            checked_qps += 1
check(checked > 0, "windows with links to check")
check(checked_qps > 0, "windows with QP series to check")

# 5. size
small = os.path.join(work, "nocounters.pftrace")
r = run("--window", "off", "--perfetto", small)
check(r.returncode == 0, "--window off run")
size_proto, size_json = os.path.getsize(small), os.path.getsize(p_json)
print(f"bytes/op: proto {size_proto / ops_total:.1f}, JSON {size_json / ops_total:.1f} ({ops_total} operations)")
check(size_proto <= 200 * ops_total and 10 * size_proto < 4 * size_json,
      f"proto {size_proto} B: at most 200 B/op and under 40% of JSON {size_json} B")

# 6. sampling
cut = os.path.join(work, "cut.pftrace")
r = run("--perfetto", cut, "--perfetto-max-ops", "50")
check(r.returncode == 0, "max-ops run")
pc = packets(cut)
begins = [p for p in pc if p.track_event.type == pf.TrackEvent.TYPE_SLICE_BEGIN]
stated = [p.track_descriptor.name for p in pc if p.track_descriptor.name.startswith("sampling:")]
check(len(stated) == 1 and stated[0].startswith(f"sampling: {len(begins)} of {ops_total} operations written (--perfetto-max-ops 50): every one up to #25, then 1 in 4 from #"),
      f"statement {stated} ({len(begins)} slices)")
check(40 <= len(begins) <= 50, f"{len(begins)} slices written, at most 50")
# Level of detail, not a cut: the sampled operations reach the end of the trace (its last tenth).
full_begins = [p.timestamp for p in packets(p_proto) if p.track_event.type == pf.TrackEvent.TYPE_SLICE_BEGIN]
span = max(full_begins) - min(full_begins)
check(max(p.timestamp for p in begins) - min(full_begins) >= 0.9 * span,
      f"the last sampled operation at {max(p.timestamp for p in begins) - min(full_begins)} ns of a {span} ns trace")
check(f"{len(begins)} of {ops_total} operations written" in r.stderr, f"stderr statement: {r.stderr}")

# 7. format choice and errors
forced = os.path.join(work, "forced.pftrace")
r = run("--perfetto", forced, "--perfetto-format", "json")
check(r.returncode == 0 and json.load(open(forced))["traceEvents"], "--perfetto-format json")
r = run("--perfetto", os.path.join(work, "missing", "t.pftrace"))
check(r.returncode != 0 and "Cannot write the timeline: path=" in r.stderr, f"unwritable path: rc={r.returncode} {r.stderr}")
r = run("--perfetto", forced, "--perfetto-format", "xml")
check(r.returncode != 0 and "--perfetto-format needs proto or json" in r.stderr, "bad --perfetto-format")

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
