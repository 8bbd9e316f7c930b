#!/usr/bin/env python3
"""message_footprint.py LACKEY_LOG MAPS MARKER FIRST COUNT: what each message of message_footprint executes.

Reads a `valgrind --tool=lackey --trace-mem=yes` log of message_footprint, cuts it into messages at each store
to the marker variable, and for messages FIRST .. FIRST+COUNT-1 counts the instructions executed, the distinct
64-byte lines of code they came from (I-lines) and the distinct lines of data they read or wrote (D-lines),
each attributed to the object (from MAPS, the program's /proc/self/maps) that holds the instruction.

Messages during which the tracer emitted LTTng events (an instruction inside liblttng-ust) are left out: the
emission runs at idle points, off a message's path (docs/interpose.md); the rest is the path itself.
Prints one line per object (mean per message) and a total line (median per message), as
`object instructions i_lines d_lines`, then `messages N left_out M`.
"""
import bisect
import collections
import statistics
import sys

EMISSION_OBJECT = 'liblttng-ust.so'


def read_maps(path):
    maps = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split('-'))
            name = fields[5].rsplit('/', 1)[-1] if len(fields) > 5 else '[anonymous]'
            maps.append((lo, hi, name))
    maps.sort()
    return maps


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    log, maps_path, marker_s, first_s, count_s = sys.argv[1:]
    marker, first, count = int(marker_s, 16), int(first_s), int(count_s)
    maps = read_maps(maps_path)
    starts = [m[0] for m in maps]
    page_object = {}

    def object_of(addr):
        page = addr >> 12
        name = page_object.get(page)
        if name is None:
            i = bisect.bisect_right(starts, addr) - 1
            name = maps[i][2] if i >= 0 and addr < maps[i][1] else '?'
            page_object[page] = name
        return name

    kept = []  # per message: {object: [instructions, set(I-lines), set(D-lines)]}
    left_out = 0
    message = -1
    current = None
    obj = '?'
    with open(log) as f:
        for line in f:
            if line.startswith('=='):
                continue
            kind = line[:2]
            addr_s, _, size_s = line[3:].strip().partition(',')
            try:
                addr = int(addr_s, 16)
            except ValueError:
                continue
            if kind == 'I ':
                obj = object_of(addr)
                if current is not None:
                    entry = current[obj]
                    entry[0] += 1
                    entry[1].add(addr >> 6)
                    last = addr + int(size_s) - 1
                    if last >> 6 != addr >> 6:
                        entry[1].add(last >> 6)
                continue
            if kind[1] in 'SM' and addr == marker:
                if current is not None:
                    if any(EMISSION_OBJECT in name for name in current):
                        left_out += 1
                    else:
                        kept.append(current)
                message += 1
                current = (collections.defaultdict(lambda: [0, set(), set()])
                           if first <= message < first + count else None)
                if message >= first + count:
                    break
                continue
            if current is not None:
                current[obj][2].add(addr >> 6)
    if not kept:
        sys.exit(f'message_footprint.py: no message {first}..{first + count - 1} without an emission in {log}')
    sums = collections.defaultdict(lambda: [0, 0, 0])
    for m in kept:
        for name, (ins, il, dl) in m.items():
            s = sums[name]
            s[0] += ins
            s[1] += len(il)
            s[2] += len(dl)
    n = len(kept)
    for name, (ins, il, dl) in sorted(sums.items(), key=lambda kv: -kv[1][0]):
        print(f'{name} {ins / n:.1f} {il / n:.1f} {dl / n:.1f}')
    total = [(sum(v[0] for v in m.values()), sum(len(v[1]) for v in m.values()), sum(len(v[2]) for v in m.values()))
             for m in kept]
    print('total {} {} {}'.format(*(statistics.median(t[i] for t in total) for i in range(3))))
    print(f'messages {n} left_out {left_out}')


if __name__ == '__main__':
    main()
