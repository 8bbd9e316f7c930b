#!/usr/bin/env python3
"""damaged_corpus.py --analyzer A (--trace DIR | --record SIGMATRACE --sandbox SANDBOX) --work DIR [--seeds N]

Damaged-trace corpus (docs/analyzer.md, "Damaged traces"): records one small fabric run (two ib_write_bw
processes on two fabric nodes, immediate emission: an event per call, and a 32 KiB channel, so the stream has
many packets) unless --trace is
given, then runs sigmatrace-analyze on damaged copies of it, two at a time, each under a timeout:
truncations of the metadata and of every stream and index file at many sizes, every file zeroed, every file
missing, the index directory missing, and byte flips (1 to 4 bytes of one file) over N seeds.

Each case must end with exit 0, 1 or 2 (never a signal, never the timeout); exit 2 must say why on stderr; and
an analysis that read fewer events than the undamaged trace's, or of a case that truncated, zeroed or removed
a file Babeltrace reads, must say `complete: false`; byte flips may leave out at most one byte range per flipped
byte (the packet it damaged, not the innocent ones after it). The watchdog runs with SIGMATRACE_ANALYZE_STALL_S=1. Prints one line per failing case and a tally; exit 0 when
every case passed, 1 otherwise, 77 when no trace could be recorded here.
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys
import time

TIMEOUT_S = 30


def record(args, out):
    b = args.record
    script = (
        f"set -e; SIGMATRACE_DEFER=0 {b} record --channel-size 32K --blocking -o {out} -- bash -c '"
        f"{b} fabric --node 0 -- ib_write_bw -d sfab_0 -s 4096 -n 2000 >/dev/null & sleep 1; "
        f"{b} fabric --node 1 -- ib_write_bw -d sfab_0 -s 4096 -n 2000 localhost >/dev/null; wait'\n")
    path = os.path.join(args.work, "record.sh")
    with open(path, "w") as f:
        f.write(script)
    r = subprocess.run([args.sandbox, "bash", path], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(f"damaged_corpus: skipped: recording failed (exit {r.returncode}): {r.stdout}{r.stderr}")
        sys.exit(77)


def analyze(analyzer, trace, out_json):
    t0 = time.monotonic()
    try:
        r = subprocess.run([analyzer, trace, "--quiet", "--json", out_json], capture_output=True, text=True,
                           timeout=TIMEOUT_S, env=dict(os.environ, SIGMATRACE_ANALYZE_STALL_S="1"))
    except subprocess.TimeoutExpired:
        return None, "", time.monotonic() - t0
    return r.returncode, r.stderr, time.monotonic() - t0


def trace_files(root):
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def make_cases(clean, seeds):
    files = trace_files(clean)
    sizes = {f: os.path.getsize(os.path.join(clean, f)) for f in files}
    cases = []  # (name, function(dir), damages_read_bytes, most byte ranges it may leave out: None for no bound)
    for f in files:
        n = sizes[f]
        cuts = {0, 1, 31, 36, 37, 83, 84, 85, 100, 2000, 4095, 4096, 4097, 8192, 16000, n // 2, n - 1, n - 4096}
        for c in sorted(x for x in cuts if 0 <= x < n):
            def trunc(d, f=f, c=c):
                os.truncate(os.path.join(d, f), c)
            cases.append((f"truncate {f} {c}", trunc, not f.startswith("index") and "index/" not in f, None))
        def zero(d, f=f, n=n):
            with open(os.path.join(d, f), "r+b") as h:
                h.write(bytes(n))
        cases.append((f"zero {f}", zero, "index/" not in f, None))
        def missing(d, f=f):
            os.remove(os.path.join(d, f))
        cases.append((f"missing {f}", missing, "index/" not in f, None))
    idx_dirs = sorted({os.path.dirname(f) for f in files if os.path.basename(os.path.dirname(f)) == "index"})
    for i in idx_dirs:
        cases.append((f"missing {i}/", lambda d, i=i: shutil.rmtree(os.path.join(d, i)), False, None))
    total = sum(sizes.values())
    for seed in range(seeds):
        rng = random.Random(seed)
        # A file chosen by its size (flips land where the bytes are), 1 to 4 bytes of it.
        pick = rng.randrange(total)
        for f in files:
            if pick < sizes[f]:
                break
            pick -= sizes[f]
        flips = [(rng.randrange(sizes[f]), rng.randrange(1, 256)) for _ in range(rng.randint(1, 4))]
        def flip(d, f=f, flips=flips):
            with open(os.path.join(d, f), "r+b") as h:
                for off, mask in flips:
                    h.seek(off)
                    b = h.read(1)[0]
                    h.seek(off)
                    h.write(bytes([b ^ mask]))
        # A flipped byte damages the packet it is in: the innocent packets around it are read.
        cases.append((f"flip seed {seed}: {f} at {[o for o, _ in flips]}", flip, False, len(flips)))
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--analyzer", required=True)
    ap.add_argument("--trace")
    ap.add_argument("--record")
    ap.add_argument("--sandbox")
    ap.add_argument("--work", required=True)
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    clean = args.trace
    if clean is None:
        clean = os.path.join(args.work, "trace")
        record(args, clean)
    rc, err, _ = analyze(args.analyzer, clean, os.path.join(args.work, "clean.json"))
    if rc != 0:
        print(f"damaged_corpus: the undamaged trace does not analyze (exit {rc}): {err}")
        return 1
    with open(os.path.join(args.work, "clean.json")) as f:
        base = json.load(f)
    if not base["trace"]["complete"] or base["trace"]["events"] == 0:
        print("damaged_corpus: the undamaged trace reads as incomplete or empty")
        return 1
    cases = make_cases(clean, args.seeds)

    def run(i):
        name, damage, damages_read, max_skips = cases[i]
        d = os.path.join(args.work, f"case{i}")
        shutil.copytree(clean, d, symlinks=True)
        damage(d)
        out = os.path.join(args.work, f"case{i}.json")
        rc, err, dt = analyze(args.analyzer, d, out)
        verdict = None
        if rc is None:
            verdict = f"timeout ({TIMEOUT_S} s)"
        elif rc < 0 or rc >= 128:
            verdict = f"crash (exit {rc})"
        elif rc == 2:
            if "sigmatrace-analyze: " not in err:
                verdict = "exit 2 without a message"
        elif rc in (0, 1):
            with open(out) as f:
                doc = json.load(f)
            t = doc["trace"]
            # CTF has no checksum: a flipped value inside an event that still decodes is read as written (fewer
            # operations may then match), but an event not read is something skipped.
            fewer = t["events"] < base["trace"]["events"]
            skipped = sum(1 for w in doc["warnings"] if w.startswith("Skipped damaged bytes"))
            if (fewer or damages_read) and t["complete"]:
                verdict = (f"complete: true with {t['events']}/{base['trace']['events']} events, "
                           f"{doc['ops']['total']}/{base['ops']['total']} operations")
            elif max_skips is not None and skipped > max_skips:
                verdict = f"{skipped} byte ranges left out for {max_skips} damaged bytes"
        else:
            verdict = f"unexpected exit {rc}"
        if verdict is None:
            shutil.rmtree(d)
        return name, rc, verdict, dt, err

    t0 = time.monotonic()
    failed = 0
    tally = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for name, rc, verdict, dt, err in ex.map(run, range(len(cases))):
            tally[rc] = tally.get(rc, 0) + 1
            if verdict:
                failed += 1
                last = err.strip().splitlines()[-3:] if err else []
                print(f"FAIL {name}: {verdict} ({dt:.1f} s) {' | '.join(last)[:600]}")
            elif dt > 5:
                print(f"slow {name}: {dt:.1f} s")
    print(f"damaged_corpus: {len(cases)} cases, {failed} failed, exit statuses {dict(sorted(tally.items(), key=str))}, "
          f"{time.monotonic() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
