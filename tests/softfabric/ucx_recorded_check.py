#!/usr/bin/env python3
"""Checks one traced UCX run of ucx_recorded_test.sh (see there for the layout of DIR).

  ucx_recorded_check.py perftest DIR ITERS EXPECT
  ucx_recorded_check.py mpi DIR NP

Every failed check prints one line "FAILED: <case>: <what>: expected <x>, got <y>"; exit 1 if any failed.
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

CLIENT, SERVER = "node1", "node0"
ATOMICS = {"ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"}
# Opcodes that move data across the fabric (RECV is the receiving side of a SEND: not counted again).
DATA_OPS = {"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ"} | ATOMICS

failures = []


def fail(case, what, expected, got):
    failures.append(f"FAILED: {case}: {what}: expected {expected}, got {got}")


def node_of(nic):
    return nic.split("/")[0]


def fabric_links(stats_file):
    """(from node, to node) -> (bytes, ops) delivered, from `sigmatrace fabric --stats --json`."""
    links = {}
    for link in json.loads(Path(stats_file).read_text()).get("links", []):
        key = (node_of(link["from"]), node_of(link["to"]))
        cur = links.setdefault(key, [0, 0])
        cur[0] += link["bytes"]
        cur[1] += link["ops"]
    return {k: tuple(v) for k, v in links.items() if v != [0, 0]}


def fabric_lost(stats_file):
    """Transmission attempts the fabric counted lost, all links (a UD message the receiver had no buffer for)."""
    return sum(l.get("lost", 0) for l in json.loads(Path(stats_file).read_text()).get("links", []))


def project(op, who, peer, count, size):
    """The fabric's counters for `count` OPs of `size` bytes posted by `who` to `peer` (docs/softfabric.md,
    Counters): READ data moves peer -> who; an atomic counts 8 bytes and one message each way."""
    out = Counter()
    if op == "RDMA_READ":
        out[(peer, who, "b")] += count * size
        out[(peer, who, "o")] += count
    elif op in ATOMICS:
        for a, b in ((who, peer), (peer, who)):
            out[(a, b, "b")] += count * 8
            out[(a, b, "o")] += count
    else:
        out[(who, peer, "b")] += count * size
        out[(who, peer, "o")] += count
    return out


def links_of_counter(c):
    links = {}
    for key, v in c.items():
        if len(key) != 3:
            continue
        a, b, kind = key
        cur = links.setdefault((a, b), [0, 0])
        cur[0 if kind == "b" else 1] += v
    return {k: tuple(v) for k, v in links.items() if v != [0, 0]}


def check_analysis(case, analysis, fabric, lost=0):
    """What every traced run must show: the analyzer's operations are exactly what the fabric executed, per link
    and in total, none failed or stayed in flight, no GPU poster, and no warning or error finding."""
    ops = analysis["ops"]
    by_op = ops.get("by_opcode", {})
    total_bytes = total_msgs = 0
    for op, e in by_op.items():
        if op not in DATA_OPS:
            continue
        mult = 2 if op in ATOMICS else 1
        total_msgs += e["count"] * mult
        total_bytes += e["bytes"] * mult
        if e.get("gpu", 0):
            fail(case, f"{op} posted by a GPU (UCX posts from the CPU)", 0, e["gpu"])
    fab_bytes = sum(b for b, _ in fabric.values())
    fab_msgs = sum(o for _, o in fabric.values())
    if lost == 0 and (total_bytes, total_msgs) != (fab_bytes, fab_msgs):
        fail(case, "trace vs fabric, all links (bytes, messages)", (fab_bytes, fab_msgs), (total_bytes, total_msgs))
    # An unreliable message the fabric dropped was posted (in the trace) but not delivered; a reliable one is
    # retransmitted, each attempt counted lost, and delivered once.
    if lost and not fab_msgs <= total_msgs <= fab_msgs + lost:
        fail(case, f"trace vs fabric, all links (messages; {lost} attempts lost)",
             f"{fab_msgs} .. {fab_msgs + lost}", total_msgs)
    for key in ("errors", "in_flight_at_end", "lost"):
        if ops.get(key, 0):
            fail(case, f"ops.{key}", 0, ops[key])
    matrix = {}
    for m in analysis.get("traffic", {}).get("node_matrix", []):
        matrix[(m["src"], m["dst"])] = m["bytes"]
    fab_matrix = {k: v[0] for k, v in fabric.items()}
    # The analyzer's matrix counts an atomic once, initiator -> target (docs/analyzer.md, "Traffic and rails");
    # the fabric's reverse link also carries its 8-byte reply. These runs post atomics one way only.
    atomic_bytes = sum(e["bytes"] for op, e in by_op.items() if op in ATOMICS)
    if atomic_bytes and len(matrix) == 1:
        (src, dst), = matrix
        rest = fab_matrix.get((dst, src), 0) - atomic_bytes
        if rest > 0:
            fab_matrix[(dst, src)] = rest
        elif rest == 0:
            fab_matrix.pop((dst, src), None)
    if lost == 0 and matrix != fab_matrix:
        fail(case, "traffic.node_matrix bytes per (src, dst) vs the fabric's links", fab_matrix, matrix)
    bad = [f"{f.get('severity')}/{f.get('kind')}: {f.get('summary')}" for f in analysis.get("findings", [])
           if f.get("severity") in ("warning", "error", "critical")]
    if bad:
        fail(case, "findings of severity warning or error", "none", bad)
    # Four warnings report a timing race, not a wrong count (the checks above still hold): a CQE the application
    # consumed before the watcher read it (counted, its operation still counted), and, rarely under load, one event
    # of a direct queue ordered after its QP's destroy, one CQE (of a WQE that moves no data, such as the NOP
    # UCX posts to flush) whose WQE was not decoded, or a transfer whose CQE was read more than 100 incast windows
    # (100 ms) after its post (the watcher thread or the process kept off the CPU of a saturated machine), whose
    # early part the incast analysis leaves out (its bytes are still in the traffic matrix). Printed, not failed;
    # every other warning fails.
    tolerated = ("completions of directly driven queues were consumed by the application",
                 "events named a QP whose creation is not in the trace",
                 "1 completions matched no posted work request",
                 "incast windows were left out of the incast analysis")
    warnings = [w for w in analysis.get("warnings", []) if not any(t in w for t in tolerated)]
    for w in analysis.get("warnings", []):
        if w not in warnings:
            print(f"  note: {case}: {w}")
    if warnings:
        fail(case, "analysis warnings", "none", warnings)
    if analysis["trace"].get("discarded_events", 0):
        fail(case, "trace.discarded_events", 0, analysis["trace"]["discarded_events"])


def normalized_output(path):
    """ucx_perftest's output without its timing figures: the final row keeps its iteration count, the periodic
    rows (printed once a second, so their number depends on speed) are dropped."""
    out = []
    for line in Path(path).read_text(errors="replace").splitlines():
        if line.startswith("Final:"):
            out.append(" ".join(line.split()[:2]))
        elif re.match(r"^\s+\d+\s", line):
            continue
        else:
            # The client's TCP port differs from run to run.
            out.append(re.sub(r"(Accepted connection from [^ ]+):\d+", r"\1:PORT", line))
    return out


def perftest(d, iters, expect):
    d = Path(d)
    case = d.name
    n = int(iters)
    plain_rc = (d / "plain/rc").read_text().split()
    rec_rc = (d / "recorded/rc").read_text().split()
    if plain_rc != ["0", "0"]:
        fail(case, "untraced exit statuses (client server)", "0 0",
             f"{' '.join(plain_rc)}; client output ends: {normalized_output(d / 'plain/client.log')[-2:]}")
        return
    if rec_rc != plain_rc:
        fail(case, "recorded exit statuses (client server)", " ".join(plain_rc), " ".join(rec_rc))
    for f in ("record.rc", "analyze.rc"):
        rc = (d / f).read_text().strip()
        if rc != "0":
            fail(case, f"{f.split('.')[0]} exit status", 0, f"{rc} ({(d / (f.split('.')[0] + '.log')).name})")
    for side in ("client", "server"):
        a, b = normalized_output(d / f"plain/{side}.log"), normalized_output(d / f"recorded/{side}.log")
        if a != b:
            only_a = [l for l in a if l not in b]
            only_b = [l for l in b if l not in a]
            fail(case, f"{side} output, timing aside (lines only in one run)", only_a, only_b)
    if not any(l == f"Final: {n}" for l in normalized_output(d / "recorded/client.log")):
        fail(case, "ucx_perftest's reported iterations", n, normalized_output(d / "recorded/client.log"))

    # What UCX posts, from EXPECT.
    exact = True
    want_ops = {}
    want_links = Counter()
    want_side = Counter()  # operations per posting node
    side_at_least = set()
    for item in expect.split():
        who, op, count, size = item.split(":")
        at_least = count.endswith("+")
        exact &= not at_least
        c = eval(count.rstrip("+"), {"__builtins__": {}}, {"n": n})
        posted_by = CLIENT if who == "c" else SERVER
        peer = SERVER if who == "c" else CLIENT
        want_links += project(op, posted_by, peer, c, int(size))
        want_side[posted_by] += c
        if at_least:
            side_at_least.add(posted_by)
        w = want_ops.setdefault(op, [0, 0, at_least])
        w[0] += c
        w[1] += c * int(size)
        w[2] |= at_least
    want_links = links_of_counter(want_links)

    plain = fabric_links(d / "plain/stats.json")
    recorded = fabric_links(d / "recorded/stats.json")
    for label, got in (("untraced", plain), ("recorded", recorded)):
        if exact and got != want_links:
            fail(case, f"fabric links (bytes, messages), {label} run", want_links, got)
        if not exact:
            short = {k: (v, got.get(k)) for k, v in want_links.items()
                     if got.get(k, (0, 0))[0] < v[0] or got.get(k, (0, 0))[1] < v[1]}
            if short:
                fail(case, f"fabric links at least (bytes, messages), {label} run", want_links, got)

    if not (d / "analysis.json").exists():
        fail(case, "analysis.json", "written", "missing")
        return
    analysis = json.loads((d / "analysis.json").read_text())
    check_analysis(case, analysis, recorded, fabric_lost(d / "recorded/stats.json"))
    by_op = analysis["ops"].get("by_opcode", {})
    for op, (count, nbytes, at_least) in want_ops.items():
        e = by_op.get(op, {"count": 0, "bytes": 0})
        got = (e["count"], e["bytes"])
        if (not at_least and got != (count, nbytes)) or (at_least and (got[0] < count or got[1] < nbytes)):
            fail(case, f"ops.by_opcode.{op} (count, bytes){' at least' if at_least else ''}", (count, nbytes), got)
    # Who posted them: the analyzer's per-process operation counts (one ucx_perftest per node), which need no
    # peer resolution.
    got_side = Counter()
    for p in analysis.get("processes", []):
        got_side[p.get("node")] += p.get("ops", 0)
    for node in (CLIENT, SERVER):
        w, g = want_side[node], got_side[node]
        if (node not in side_at_least and g != w) or (node in side_at_least and g < w):
            fail(case, f"operations posted by {node} (processes[].ops){' at least' if node in side_at_least else ''}",
                 w, g)
    extra = sorted(op for op in by_op if op in DATA_OPS and op not in want_ops)
    if extra:
        fail(case, "opcodes UCX does not post in this test", "none", {op: by_op[op]["count"] for op in extra})


def mpi(d, np_):
    d = Path(d)
    case = f"mpi np{np_}"
    rc = (d / "record.rc").read_text().strip()
    log = (d / "mpirun.log").read_text(errors="replace")
    if rc != "0":
        fail(case, "sigmatrace record -- mpirun exit status", 0, rc)
    np_ = int(np_)
    want = (np_ - 1) * 2 + np_ * 2
    got = len(re.findall(r"^rank \d+: (pingpong with \d+: 4 x 1048576 bytes, 0 wrong|allreduce of 4096 int64: "
                         r"0 wrong|barrier passed)$", log, re.M))
    if got != want:
        fail(case, "the program's checks that passed", want, got)
    if (d / "analyze.rc").read_text().strip() != "0":
        fail(case, "sigmatrace-analyze exit status", 0, (d / "analyze.rc").read_text().strip())
        return
    check_analysis(case, json.loads((d / "analysis.json").read_text()), fabric_links(d / "stats.json"),
                   fabric_lost(d / "stats.json"))


def main():
    mode = sys.argv[1]
    if mode == "perftest":
        perftest(*sys.argv[2:5])
        name = Path(sys.argv[2]).name
    else:
        mpi(*sys.argv[2:4])
        name = "mpi"
    for f in failures:
        print(f)
    if failures:
        return 1
    print(f"OK: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
