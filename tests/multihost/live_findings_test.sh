#!/usr/bin/env bash
# live_findings_test.sh SIGMATRACE: `sigmatrace-analyze --live` follows a job's sessions through lttng-relayd
# while it records, and reports a gray link within 5 s of its start.
# st-linkload runs on 4 fabric nodes, ranks 0-1 on h1 and 2-3 on h2 (one mpirun; each rank's `sigmatrace record
# --relay`, so one session per host): a ring of 256 KiB WRITEs over links of 1 Gbit/s from fabric time 3 s to
# 11 s; the fabric slows node0/sfab_0 -> node1/sfab_0 4x from 6 s to 9 s. From h0, started before the job,
# `sigmatrace-analyze --live net://RELAY/host/h1 --live net://RELAY/host/h2 --json-stream` waits for both hosts'
# sessions and prints each finding as one JSON line. Expected: exactly one gray_link, on that link, its start
# within 150 ms of the fault's, reported less than 5 s after it (report_latency_ns, the analyzer's wall clock
# against the event's trace time: one clock on this machine); the sessions' end ends the read, and the final
# JSON holds the same gray link and both hosts' processes. While the job runs, the relay's URL alone lists its
# sessions. Then the bad inputs: a malformed URL, and no relay at the URL (exit 2, a message naming it).
# Runs inside tests/support/sandbox.sh, as root; exits 77 (skip) when what it needs is missing.
tools=""
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
linkload=$(dirname "$bindir")/libexec/sigmatrace/st-linkload
[[ -x $linkload ]] || skip "st-linkload is not built (no MPI development files)"

cat >"$work/gray.conf" <<'CONF'
bandwidth 1Gbit/s
slow node0/0 -> node1/0 factor 4 from 6000ms to 9000ms
CONF

host_run h0 timeout 150 "$analyze" --live "net://$HOSTS_RELAY_ADDR/host/h1" --live "net://$HOSTS_RELAY_ADDR/host/h2" \
  --json-stream --json "$work/live.json" >"$work/live.out" 2>"$work/live.err" &
analyzer=$!
hosts_mpirun h1 --host h1:2,h2:2 -np 4 "$sigmatrace" record --relay "net://$HOSTS_RELAY_ADDR" -- \
  "$sigmatrace" fabric --node rank --rails 2 --config "$work/gray.conf" -- \
  "$linkload" --start-at-fabric 3000 --phase ring:8000 --rails-used 1 --size 262144 --depth 8 --truth "$work/truth.json" \
  >"$work/run.log" 2>&1 &
job=$!
# While it records, the relay's URL alone lists its sessions as live URLs (exit 2: it names no session).
for _ in $(seq 100); do grep -q "follow it live" "$work/run.log" && break; sleep 0.1; done
host_run h0 "$analyze" --live "net://$HOSTS_RELAY_ADDR" >"$work/list.out" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "the relay has:" "$work/list.out" && grep -q "^  net://$HOSTS_RELAY_ADDR/host/h1/sigmatrace-" "$work/list.out" \
  || fail "the relay's URL alone: exit $rc, $(cat "$work/list.out")"
wait "$job" || fail "the job failed: $(cat "$work/run.log")"
wait "$analyzer" || fail "the live analysis failed (exit $?): $(cat "$work/live.err")"
grep -q "follow it live with \`sigmatrace-analyze --live net://$HOSTS_RELAY_ADDR/host/h1/" "$work/run.log" \
  || fail "record does not say how to follow its session live: $(cat "$work/run.log")"

python3 - "$work" <<'PY' || fail "the live findings are not as designed: $(cat "$work/live.out" "$work/live.err")"
import json, sys
work = sys.argv[1]
truth = json.load(open(f"{work}/truth.json"))
fault = truth["fabric_start_unix_ns"] + 6000 * 1_000_000
lines = [json.loads(l) for l in open(f"{work}/live.out") if l.strip()]
gray = [f for f in lines if f["kind"] == "gray_link"]
bad = []
ring = truth["phases"][0]["begin_unix_ns"] - truth["fabric_start_unix_ns"]
if ring > 5_000_000_000: bad.append(f"the job's set-up ended at fabric time {ring / 1e9:.1f} s, too late for the fault at 6 s")
if len(gray) != 1: bad.append(f"{len(gray)} live gray_link findings, expected 1: {[g['summary'] for g in gray]}")
for g in gray:
    link = g["evidence"]["link"]
    if (link["src"]["node"], link["dst"]["node"]) != ("node0", "node1"): bad.append(f"the wrong link: {link}")
    if abs(g["event_unix_ns"] - fault) > 150_000_000: bad.append(f"began {(g['event_unix_ns'] - fault) / 1e6:.0f} ms off the fault's start")
    if not 0 < g["report_latency_ns"] < 5_000_000_000: bad.append(f"reported {g['report_latency_ns'] / 1e9:.2f} s after it began")
    if g["reported_unix_ns"] - g["event_unix_ns"] != g["report_latency_ns"]: bad.append("latency is not reported - event")
final = json.load(open(f"{work}/live.json"))
if [f["kind"] for f in final["findings"]].count("gray_link") != 1: bad.append("the final analysis lacks the gray link")
if final["ops"]["total"] < 1000: bad.append(f"the final analysis holds {final['ops']['total']} operations")
hosts = sorted({p["host"] for p in final["processes"] if p.get("ops", 0) > 0})
if hosts != ["h1", "h2"]: bad.append(f"the final analysis holds processes of {hosts}, expected h1 and h2")
for b in bad: print(b, file=sys.stderr)
if gray: print(f"gray link reported {gray[0]['report_latency_ns'] / 1e9:.2f} s after it began "
               f"({(gray[0]['event_unix_ns'] - fault) / 1e6:+.0f} ms from the fault); {final['ops']['total']} operations in the end")
sys.exit(1 if bad else 0)
PY

# Bad inputs: exit 2 and a message, at once.
"$analyze" --live "http://$HOSTS_RELAY_ADDR/h1" >"$work/bad.out" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "Malformed live URL" "$work/bad.out" || fail "a malformed URL: exit $rc, $(cat "$work/bad.out")"
host_run h0 timeout 20 "$analyze" --live "net://10.231.0.99/host/h1" >"$work/bad.out" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "Cannot reach lttng-relayd at net://10.231.0.99" "$work/bad.out" \
  || fail "no relay at the URL: exit $rc, $(cat "$work/bad.out")"
echo "PASS: the gray link reported live within 5 s of its start, from two hosts' sessions"
