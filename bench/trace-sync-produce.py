#!/usr/bin/env python3
"""Where a replicated one-at-a-time produce spends its time, from runtime traces.

Usage: bench/trace-sync-produce.py PRIMARY.trace [FOLLOWER.trace ...]

Each trace is a node's /debug/pprof/trace (malachi serve --pprof) taken while
`malachi bench produce --sync` ran through the primary of the topic's segment.
The traces are read through `go tool trace -d=parsed`. Only goroutine state
transitions are used: the syscalls of the client connection's reads and
writes, the peer transport's writev and reads, and the node journal's
fdatasync (each on a goroutine the store's commit loop starts), which the
stack of each transition names.

For the primary it pairs, for every answer written to the client, the
request read before it, the fsync started within, the first peer writev after
the request and the last peer read before the answer. For a follower it pairs
every fsync with the peer read before it and the peer writev after it. It
prints percentiles in microseconds, and how long the peer writer goroutines
wait between being made runnable and running.
"""
import bisect
import collections
import re
import subprocess
import sys

HEADER = re.compile(r'^M=-?\d+ P=-?\d+ G=(-?\d+) (\w+) Time=(\d+)(.*)$')
TRANSITION = re.compile(r'GoID=(\d+) (\w+)->(\w+)')


def events(path):
    """Yields (time ns, actor, goroutine, from, to, transition stack, stack)."""
    out = subprocess.Popen(['go', 'tool', 'trace', '-d=parsed', path],
                           stdout=subprocess.PIPE, text=True, bufsize=1 << 20)
    cur, mode = None, None
    for line in out.stdout:
        m = HEADER.match(line)
        if m:
            if cur:
                yield cur
            cur, mode = None, None
            t = TRANSITION.search(m.group(4)) if m.group(2) == 'StateTransition' else None
            if t:
                cur = (int(m.group(3)), int(m.group(1)), int(t.group(1)), t.group(2), t.group(3), [], [])
            continue
        if cur is None:
            continue
        if line.startswith('TransitionStack='):
            mode = cur[5]
        elif line.startswith('Stack='):
            mode = cur[6]
        elif mode is not None and line.startswith('\t') and not line.startswith('\t\t'):
            mode.append(line.strip().split(' @ ')[0])
    if cur:
        yield cur
    if out.wait() != 0:
        sys.exit(f'go tool trace -d=parsed {path} failed')


def has(stack, s):
    return any(s in f for f in stack)


class Node:
    """The transitions of one trace that the tables need."""

    def __init__(self, path):
        self.client_reads, self.answers, self.peer_writes, self.peer_reads = [], [], [], []
        self.fsyncs = []  # (begin, end)
        fsync_goroutines, open_fsync = set(), {}
        self.writers, runnable, self.writer_waits = set(), {}, []
        for t, _, g, fr, to, ts, st in events(path):
            if fr == 'NotExist' and has(st, 'journalRound'):
                fsync_goroutines.add(g)
            if to == 'Syscall':
                if has(ts, 'server.(*conn).readFrame'):
                    self.client_reads.append(t)
                elif has(ts, 'server.(*conn).write'):
                    self.answers.append(t)
                elif has(ts, 'batchWriter).flush'):
                    self.peer_writes.append(t)
                    self.writers.add(g)
                elif has(ts, 'peer.readFrameWithin'):
                    self.peer_reads.append(t)
                elif g in fsync_goroutines and has(ts, 'Fdatasync'):
                    open_fsync[g] = t
            elif fr == 'Syscall' and g in open_fsync:
                self.fsyncs.append((open_fsync.pop(g), t))
            if to == 'Runnable':
                runnable[g] = t
            elif fr == 'Runnable' and to == 'Running' and g in runnable:
                begin = runnable.pop(g)
                if g in self.writers:
                    self.writer_waits.append(t - begin)
        self.fsyncs.sort()


def pct(values):
    v = sorted(values)
    if not v:
        return '-'
    q = lambda p: v[min(len(v) - 1, int(len(v) * p))] / 1000
    return f'p50 {q(.5):8.1f}  p25 {q(.25):8.1f}  p75 {q(.75):8.1f}  p90 {q(.9):8.1f}  (n={len(v)})'


def after(sorted_list, t, limit):
    i = bisect.bisect_right(sorted_list, t)
    return sorted_list[i] if i < len(sorted_list) and sorted_list[i] < limit else None


def primary(n):
    rows, order = collections.defaultdict(list), collections.Counter()
    begins = [b for b, _ in n.fsyncs]
    for prev, answer in zip(n.answers, n.answers[1:]):
        t0 = after(n.client_reads, prev, answer)
        w = t0 and after(n.peer_writes, t0, answer)
        i = bisect.bisect_right(begins, t0 or 0)
        if not w or i >= len(begins) or begins[i] > answer:
            continue
        fb, fe = n.fsyncs[i]
        last = n.peer_reads[bisect.bisect_left(n.peer_reads, answer) - 1]
        rows['request read -> local fsync begins'].append(fb - t0)
        rows['local fsync'].append(fe - fb)
        rows['request read -> local fsync returns'].append(fe - t0)
        rows['request read -> first peer writev (Append to followers)'].append(w - t0)
        rows['local fsync begins -> first peer writev'].append(w - fb)
        first = after(n.peer_reads, w, answer)
        if first:
            rows['first peer writev -> first peer read after it (an ack)'].append(first - w)
        rows['last peer read -> answer written'].append(answer - last)
        rows['request read -> answer written'].append(answer - t0)
        order['before' if w < fb else 'during' if w < fe else 'after'] += 1
    for k, v in rows.items():
        print(f'  {k:58s} {pct(v)}')
    total = sum(order.values()) or 1
    print('  first peer writev relative to the local fsync: ' +
          ', '.join(f'{k} {100 * c / total:.0f}%' for k, c in order.items()))


def follower(n):
    rows = collections.defaultdict(list)
    for b, e in n.fsyncs:
        i = bisect.bisect_left(n.peer_reads, b) - 1
        w = after(n.peer_writes, e, float('inf'))
        if i < 0 or w is None:
            continue
        rows['peer read (Append) -> fsync begins'].append(b - n.peer_reads[i])
        rows['fsync'].append(e - b)
        rows['fsync returns -> peer writev (Ack)'].append(w - e)
    for k, v in rows.items():
        print(f'  {k:58s} {pct(v)}')


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for i, path in enumerate(sys.argv[1:]):
        n = Node(path)
        print(f'{path} ({"primary" if i == 0 else "follower"}), microseconds:')
        (primary if i == 0 else follower)(n)
        print(f'  {"peer writer goroutines, runnable -> running":58s} {pct(n.writer_waits)}')


if __name__ == '__main__':
    main()
