#!/usr/bin/env bash
# relay_collection_test.sh SIGMATRACE: 4 hosts (tests/support/hosts.sh), each with its own lttng-sessiond and 2
# fabric nodes, run st-alltoall as one 8-rank MPI job, recorded per rank with
#   mpirun ... sigmatrace record --relay net://RELAY -- sigmatrace fabric --node rank -- st-alltoall
# and again with `record -o DIR` (a local trace on each host). Both analyses must give the workload's designed
# counts, bytes, node matrix and skews, and the same ones; the relay holds one session per host (the ranks of a
# host share it: job_session.h). Then the bad inputs: a relay that is not there (the command is not run, the
# message names the URL and what to start), a relay that goes away mid-run (said, the run's status kept), and a
# host's trace missing (the analyzer names the missing ranks).
# Runs inside tests/support/sandbox.sh, as root; exits 77 (skip) when what it needs is missing.
tools="lttng-relayd"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
relay_out=$(hosts_relay_output)

iters=12 epochs=6
job=(--host h0:2,h1:2,h2:2,h3:2 -np 8)
workload=("$sigmatrace" fabric --node rank -- "$alltoall" --iters "$iters" --epochs "$epochs")

# 1. Collected by the relay.
hosts_mpirun h0 "${job[@]}" "$sigmatrace" record --relay "net://$HOSTS_RELAY_ADDR" -- "${workload[@]}" \
  >"$work/relay.out" 2>&1 || fail "the relayed run failed: $(cat "$work/relay.out")"
for h in h0 h1 h2 h3; do
  sessions=$(find "$relay_out/$h" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)
  [[ $sessions == 1 ]] || fail "the relay holds $sessions sessions for $h, not 1: $(find "$relay_out" -maxdepth 2)"
done
[[ $(grep -c "trace sent to the relay" "$work/relay.out") == 4 ]] \
  || fail "not one closing rank per host: $(cat "$work/relay.out")"
"$analyze" "$relay_out" --json "$work/relay.json" >"$work/relay.txt" 2>&1 || fail "analysis of the relay's output: $(cat "$work/relay.txt")"

# 2. The same job recorded into local directories (DIR/HOST on each host).
hosts_mpirun h0 "${job[@]}" "$sigmatrace" record -o "$work/local" -- "${workload[@]}" >"$work/local.out" 2>&1 \
  || fail "the local run failed: $(cat "$work/local.out")"
[[ $(find "$work/local" -mindepth 1 -maxdepth 1 -type d | wc -l) == 4 ]] || fail "not one local trace per host: $(ls "$work/local")"
"$analyze" "$work/local" --json "$work/local.json" >"$work/local.txt" 2>&1 || fail "analysis of the local traces: $(cat "$work/local.txt")"

python3 - "$work/relay.json" "$work/local.json" "$iters" "$epochs" <<'EOF' || fail "the analyses differ from the design or from each other"
import json, sys
relay, local = (json.load(open(p)) for p in sys.argv[1:3])
iters, epochs = int(sys.argv[3]), int(sys.argv[4])
ranks, slot, hot, hot_factor = 8, 65536, 1, 4
bad = []
def check(what, got, want):
    if got != want: bad.append(f"{what}: {got!r}, expected {want!r}")
for name, d in (("relay", relay), ("local", local)):
    check(f"{name} processes", d["trace"]["processes"], ranks)
    check(f"{name} nodes", d["trace"]["nodes"], ranks)
    check(f"{name} discarded", d["trace"]["discarded_events"], 0)
    check(f"{name} errors", d["ops"]["errors"], 0)
    check(f"{name} in flight", d["ops"]["in_flight_at_end"], 0)
    check(f"{name} unresolved", d["traffic"]["unresolved_ops"], 0)
    check(f"{name} hosts", sorted({p["host"] for p in d["processes"]}), ["h0", "h1", "h2", "h3"])
    check(f"{name} ranks per host", sorted((p["host"], p["rank"]) for p in d["processes"]),
          sorted((f"h{r // 2}", r) for r in range(ranks)))
    # Each rank writes iters slots to every other rank, hot_factor times as many to the hot rank.
    writes = sum(iters * (hot_factor if dst == hot else 1) for src in range(ranks) for dst in range(ranks) if src != dst)
    w = d["ops"]["by_opcode"]["RDMA_WRITE"]
    check(f"{name} WRITEs", (w["count"], w["bytes"]), (writes, writes * slot))
    check(f"{name} FETCH_AND_ADDs", d["ops"]["by_opcode"]["ATOMIC_FETCH_AND_ADD"]["count"], ranks * epochs)
    check(f"{name} barrier epochs", d["barriers"]["epochs"], epochs)
    check(f"{name} straggler", d["barriers"]["stragglers"][0]["rank"] if d["barriers"]["stragglers"] else None, ranks - 1)
    for c in d["traffic"]["node_matrix"]:
        s, t = int(c["src"][4:]), int(c["dst"][4:])
        if s == t or s == 0:   # rank 0's self QP and its barrier READs vary with timing
            continue
        n = iters * (hot_factor if t == hot else 1)
        check(f"{name} {c['src']}->{c['dst']}", (c["ops"], c["bytes"]),
              (n + (epochs if t == 0 else 0), n * slot + (8 * epochs if t == 0 else 0)))
inbound = [sum(iters * (hot_factor if t == hot else 1) * slot for s in range(ranks) if s != t) for t in range(ranks)]
check("inbound skew", round(relay["traffic"]["inbound_skew"], 3), round(max(inbound) / (sum(inbound) / ranks), 3))
# Relay and local: the same counts, bytes, matrix (timing-free cells) and skews.
def counts(d):
    return {op: (v["count"], v["bytes"]) for op, v in d["ops"]["by_opcode"].items() if op != "RDMA_READ"}
check("relay vs local opcodes", counts(relay), counts(local))
def cells(d):
    return {(c["src"], c["dst"]): (c["ops"], c["bytes"]) for c in d["traffic"]["node_matrix"] if c["src"] != "node0"}
check("relay vs local matrix", cells(relay), cells(local))
# The barrier READs (8 bytes each, their number timing-dependent) move the skews in the 6th digit.
check("relay vs local inbound skew", round(relay["traffic"]["inbound_skew"], 3), round(local["traffic"]["inbound_skew"], 3))
for b in bad: print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

# Read in shares (--jobs, one thread each: every share reads every host's set-up and its own hosts' data), merged:
# the same document as one read, but for the analyzer's own section and the late events (a read's own: each
# share's reordering stage holds its own hosts' data), floats within a relative 1e-9 (sums in another grouping);
# and, when either read left transfers in flight past 100 incast windows out of the incast analysis (a loaded
# run), the incast findings and that warning (each read cuts at its own latest completion).
"$analyze" "$relay_out" --jobs 4 --json "$work/relay4.json" >"$work/relay4.txt" 2>&1 || fail "analysis in 4 shares: $(cat "$work/relay4.txt")"
"$analyze" "$work/local" --jobs 3 --json "$work/local3.json" >"$work/local3.txt" 2>&1 || fail "analysis in 3 shares: $(cat "$work/local3.txt")"
# And as 4 MPI ranks, one on each host, each reading a share of the relay's output and sending it to rank 0.
if [[ $(ldd "$analyze") == *libmpi* ]]; then
  hosts_mpirun h0 --host h0:1,h1:1,h2:1,h3:1 -np 4 "$analyze" "$relay_out" --json "$work/relay-mpi.json" \
    >"$work/relay-mpi.txt" 2>"$work/relay-mpi.err" || fail "analysis by 4 ranks: $(cat "$work/relay-mpi.err")"
  grep -q "started as rank 0 of 4 (OMPI_COMM_WORLD_RANK): the ranks read the trace in shares" "$work/relay-mpi.err" \
    && ! grep -q "reading in one share" "$work/relay-mpi.err" || fail "4 ranks did not share the read: $(cat "$work/relay-mpi.err")"
else
  echo "note: sigmatrace-analyze was built without MPI: the ranks' read is not tested" >&2
  cp "$work/relay4.json" "$work/relay-mpi.json"
fi
# The ranks' shares are --jobs 4's: the same document, but for the analyzer's own section.
python3 - "$work/relay4.json" "$work/relay-mpi.json" <<'EOF' || fail "4 ranks' analysis differs from 4 threads'"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
if b["analyzer"].get("shares") != 4: sys.exit(f"the ranks' read is not in 4 shares: {b['analyzer']}")
a.pop("analyzer"), b.pop("analyzer")
if a != b:
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k): print(f"{k}: {json.dumps(a.get(k))[:300]} vs {json.dumps(b.get(k))[:300]}", file=sys.stderr)
    sys.exit(1)
EOF
[[ -z ${SIGMATRACE_KEEP_TRACE:-} ]] || cp -r "$work/local" "$SIGMATRACE_KEEP_TRACE"
python3 - "$work/relay.json" "$work/relay4.json" "$work/local.json" "$work/local3.json" "$work/relay.json" "$work/relay-mpi.json" <<'EOF' || fail "the analyses in shares differ from the whole reads"
import json, sys
def diff(a, b, path, out):
    if isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or abs(a - b) > 1e-9 * max(abs(b), 1.0):
            out.append(f"{path}: {a!r} vs {b!r}")
    elif isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'the shares' if k in a else 'the whole read'}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:200]} vs {json.dumps(b)[:200]}")
CLIPPED = "of transfers in flight longer than 100 incast windows were left out of the incast analysis"
def clipped(d):
    return any(CLIPPED in w for w in d["warnings"])
def without_read_figures(d, incast_cut):
    d["trace"].pop("late_events")
    d["findings"] = [f for f in d["findings"] if f["kind"] != "late_events"]
    if incast_cut:   # which bytes are cut depends on each read's order (docs/analyzer.md, "In shares")
        d["warnings"] = [w for w in d["warnings"] if CLIPPED not in w]
        d["findings"] = [f for f in d["findings"] if f["kind"] != "incast"]
        for p in d.get("phases", []):
            p["causes"] = [c for c in p.get("causes", []) if c["kind"] != "incast"]
bad = []
for whole, shares in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4]), (sys.argv[5], sys.argv[6])):
    w, s = json.load(open(whole)), json.load(open(shares))
    if s["analyzer"].get("shares") not in (3, 4):
        bad.append(f"{shares}: not read in shares: {s['analyzer']}")
    w.pop("analyzer"), s.pop("analyzer")
    incast_cut = clipped(w) or clipped(s)
    without_read_figures(w, incast_cut), without_read_figures(s, incast_cut)
    out = []
    diff(s, w, "", out)
    bad += [f"{shares}: {d}" for d in out[:20]]
for b in bad: print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

# 3. One host's trace missing: the analysis says which ranks it lacks.
rm -rf "${relay_out:?}/h3"
"$analyze" "$relay_out" --json "$work/missing.json" >"$work/missing.txt" 2>&1
grep -q "2 of 8 ranks are not in the trace (ranks 6, 7)" "$work/missing.txt" \
  || fail "no warning names the missing ranks: $(cat "$work/missing.txt")"

# 4. No relay daemon at the URL: the command is not run, and the message says what to start.
rc=0
host_run h1 "$sigmatrace" record --relay "net://$HOSTS_RELAY_ADDR:6342:6343" -- touch "$work/ran" >"$work/norelay.out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "record without a relay exited $rc, not 2: $(cat "$work/norelay.out")"
[[ ! -e $work/ran ]] || fail "the command ran although nothing could record it"
grep -q "Cannot reach lttng-relayd at net://$HOSTS_RELAY_ADDR:6342:6343.*lttng-relayd --daemonize" "$work/norelay.out" \
  || fail "the message does not name the URL and what to run: $(cat "$work/norelay.out")"

# 5. The relay goes away while a job records (the command kills it): said at the end; the command's status is kept.
relayd=$(_host_processes relay | tr '\n' ' ')
[[ -n $relayd ]] || fail "no lttng-relayd runs on the relay host"
rc=0
host_run h2 "$sigmatrace" record --relay "net://$HOSTS_RELAY_ADDR" -- bash -c "kill -KILL $relayd; sleep 0.2; exit 3" \
  >"$work/gone.out" 2>&1 || rc=$?
[[ $rc == 3 ]] || fail "record's status with the relay gone is $rc, not the command's 3: $(cat "$work/gone.out")"
grep -q "lttng-relayd at net://$HOSTS_RELAY_ADDR went away during the recording" "$work/gone.out" \
  || fail "the relay's loss is not said: $(cat "$work/gone.out")"
echo "PASS: 4 hosts x 2 nodes through one relay: the designed counts, matrix and skew, equal to local traces"
