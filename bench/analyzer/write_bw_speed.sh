#!/usr/bin/env bash
# write_bw_speed.sh BASE_BUILD_DIR NEW_BUILD_DIR [OPS] [ROUNDS] [WORK_DIR]: the analyzer's throughput on a recorded
# small-message trace (docs/PERFORMANCE.md, "Throughput and memory"), two builds side by side.
#
# Records `ib_write_bw -d sfab_0 -s 64 -n OPS` (default 2000000) on the software fabric, server and client on two
# fabric nodes under one `sigmatrace record` (deferred records, the default), then runs both builds'
# `sigmatrace-analyze TRACE --quiet --json OUT` in interleaved rounds (default 21) and prints, per build, the user
# CPU time (median and minimum, from wait4()'s rusage: microseconds, where /usr/bin/time rounds to 10 ms) with the
# operations per second they mean, the peak RSS, the median of the per-round ratios NEW/BASE, and whether both
# wrote the same JSON. Every run is pinned to one CPU (PIN_CPU, default the last one: taskset) so that runs do
# not migrate between cores. Needs root (records inside tests/support/sandbox.sh --lttng), perftest and python3.
set -euo pipefail
base=$(cd "$1" && pwd); new=$(cd "$2" && pwd); ops=${3:-2000000}; rounds=${4:-21}
work=${5:-$(mktemp -d /tmp/write-bw-speed.XXXXXX)}
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v ib_write_bw >/dev/null || { echo "write_bw_speed.sh: needs ib_write_bw (Debian package perftest)" >&2; exit 2; }
if [[ ! -d $work/trace ]]; then
  st=$new/stage/bin/sigmatrace
  cat >"$work/record.sh" <<REC
#!/usr/bin/env bash
exec "$st" record -o "$work/trace" -- bash -c '
  "$st" fabric --node 0 -- ib_write_bw -d sfab_0 -s 64 -n $ops >"$work/server.log" 2>&1 &
  sleep 1
  "$st" fabric --node 1 -- ib_write_bw -d sfab_0 -s 64 -n $ops localhost >"$work/client.log" 2>&1
  wait'
REC
  chmod +x "$work/record.sh"
  "$root/tests/support/sandbox.sh" --lttng "$work/record.sh" >"$work/record.log" 2>&1 ||
    { echo "write_bw_speed.sh: recording failed: $work/record.log" >&2; exit 1; }
fi
pin=${PIN_CPU:-$(($(nproc) - 1))}
python3 - "$work" "$ops" "$rounds" "$pin" "$base/stage/bin/sigmatrace-analyze" "$new/stage/bin/sigmatrace-analyze" <<'PY'
import filecmp, os, statistics, subprocess, sys
work, ops, rounds, pin, builds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:7]
names = ("base", "new")
user = {n: [] for n in names}
rss = {n: [] for n in names}
for r in range(rounds):
    for n in (names if r % 2 == 0 else names[::-1]):
        b = builds[names.index(n)]
        p = subprocess.Popen(["taskset", "-c", pin, b, os.path.join(work, "trace"), "--quiet", "--json", os.path.join(work, n + ".json")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        if status != 0:
            sys.exit(f"write_bw_speed.sh: {b} failed (status {status})")
        user[n].append(ru.ru_utime)
        rss[n].append(ru.ru_maxrss)
for n in names:
    med, low = statistics.median(user[n]), min(user[n])
    print(f"{n}: user {med:.4f} s median ({ops / med / 1e6:.1f} M ops/s), {low:.4f} s minimum "
          f"({ops / low / 1e6:.1f} M ops/s), peak RSS {statistics.median(rss[n]) / 1024:.1f} MiB")
ratio = statistics.median(x / y for y, x in zip(user["base"], user["new"]))
same = filecmp.cmp(os.path.join(work, "base.json"), os.path.join(work, "new.json"), shallow=False)
print(f"new/base per-round median ratio {ratio:.3f}; JSON {'identical' if same else 'DIFFERENT'}; trace and outputs: {work}")
PY
