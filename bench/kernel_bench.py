#!/usr/bin/python3
"""Benchmark kernel/fleet_kernel.py over pipes, the way the host drives it.

Usage: /usr/bin/python3 bench/kernel_bench.py [--runs N]
Prints a table, then one JSON line with every number (milliseconds and KiB).
"""
import argparse
import json
import os
import select
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = os.path.join(ROOT, 'kernel', 'fleet_kernel.py')
PY = '/usr/bin/python3'
ENV = {'PATH': '/usr/bin:/bin'}
now = time.perf_counter


def spawn(args):
    return subprocess.Popen([PY, '-I', '-S', *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=ENV, cwd='/')


class Kernel:
    def __init__(self):
        self.t0 = now()
        self.p = spawn([KERNEL])
        self.buf = b''
        self.ready = self.next()
        self.t_ready = now()
        assert self.ready.get('event') == 'ready', self.ready
        self.n = 0

    def next(self, timeout=30):
        while b'\n' not in self.buf:
            if not select.select([self.p.stdout], [], [], timeout)[0]:
                raise TimeoutError('no event from the kernel')
            data = os.read(self.p.stdout.fileno(), 1 << 20)
            if not data:
                raise EOFError('kernel exited')
            self.buf += data
        line, self.buf = self.buf.split(b'\n', 1)
        return json.loads(line)

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg).encode() + b'\n')
        self.p.stdin.flush()

    def start(self, code):
        self.n += 1
        rid = 'c%d' % self.n
        self.send({'type': 'execute', 'id': rid, 'code': code})
        return rid

    def until(self, pred):
        while not pred(ev := self.next()):
            pass
        return ev

    def run(self, code):
        rid = self.start(code)
        return self.until(lambda e: e['event'] == 'done' and e['id'] == rid)

    def rss_kib(self):
        return rss_kib(self.p.pid)

    def close(self):
        self.send({'type': 'shutdown'})
        self.p.wait(10)


def rss_kib(pid):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def stats(xs, scale=1000.0):
    return {'median': round(pct(xs, 0.5) * scale, 3), 'p90': round(pct(xs, 0.9) * scale, 3),
            'n': len(xs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--runs', type=int, default=20)
    runs = ap.parse_args().runs

    base, first_line, ready, first_exec, rss, base_rss = [], [], [], [], [], []
    for _ in range(runs):   # interleaved, so drift hits both sides alike
        t0 = now()
        spawn(['-c', 'pass']).wait()
        base.append(now() - t0)
        t0 = now()
        p = spawn(['-c', 'import posix; posix.write(1, b"up\\n")'])
        p.stdout.readline()
        first_line.append(now() - t0)
        p.wait()
        k = Kernel()
        ready.append(k.t_ready - k.t0)
        k.run('pass')
        first_exec.append(now() - k.t0)
        rss.append(k.rss_kib())
        k.close()
        p = spawn(['-c', 'import os; os.write(1, b"r\\n"); os.read(0, 1)'])
        p.stdout.read(2)
        base_rss.append(rss_kib(p.pid))
        p.stdin.close()
        p.wait()

    k = Kernel()
    for _ in range(50):
        k.run('pass')
    rt = []
    for _ in range(runs * 25):
        t0 = now()
        k.run('pass')
        rt.append(now() - t0)
    intr = {}
    for name, code in (('busy', 'print("go")\nwhile True:\n    pass'),
                       ('sleep', 'import time\nprint("go")\ntime.sleep(100)')):
        lat = []
        for _ in range(runs):
            rid = k.start(code)
            k.until(lambda e: e['event'] == 'stdout' and e['id'] == rid)
            t0 = now()
            k.send({'type': 'interrupt', 'id': rid})
            done = k.until(lambda e: e['event'] == 'done' and e['id'] == rid)
            lat.append(now() - t0)
            assert done['status'] == 'error', done
        intr[name] = stats(lat)
    idle_rss = k.rss_kib()
    k.close()

    res = {
        'runs': runs,
        'python_start_ms': stats(base),
        'python_first_line_ms': stats(first_line),
        'kernel_ready_ms': stats(ready),
        'ready_ratio': round(pct(ready, 0.5) / pct(base, 0.5), 3),
        'ready_ratio_first_line': round(pct(ready, 0.5) / pct(first_line, 0.5), 3),
        'kernel_first_exec_ms': stats(first_exec),
        'exec_pass_ms': stats(rt),
        'interrupt_busy_ms': intr['busy'],
        'interrupt_sleep_ms': intr['sleep'],
        'rss_idle_kib': {'median': pct(rss, 0.5),
                         'after_%d_cells' % (len(rt) + 50 + 2 * runs): idle_rss},
        'python_rss_kib': pct(base_rss, 0.5),
    }
    rows = [
        ('python3 -I -S -c pass, spawn->exit', res['python_start_ms']),
        ('python3 -I -S, spawn->first line', res['python_first_line_ms']),
        ('kernel spawn->ready', res['kernel_ready_ms']),
        ('kernel spawn->first `pass` done', res['kernel_first_exec_ms']),
        ('execute `pass` round trip', res['exec_pass_ms']),
        ('interrupt busy loop -> done', res['interrupt_busy_ms']),
        ('interrupt time.sleep -> done', res['interrupt_sleep_ms']),
    ]
    print('%-36s %10s %10s %6s' % ('metric (ms)', 'median', 'p90', 'n'))
    for name, s in rows:
        print('%-36s %10.3f %10.3f %6d' % (name, s['median'], s['p90'], s['n']))
    print('%-36s %10.2f' % ('ready / python -c pass (medians)', res['ready_ratio']))
    print('%-36s %10.2f' % ('ready / python first line (medians)', res['ready_ratio_first_line']))
    print('%-36s %10d KiB (bare python: %d KiB, after %d cells: %d KiB)'
          % ('idle kernel VmRSS (median)', pct(rss, 0.5), res['python_rss_kib'],
             len(rt) + 50 + 2 * runs, idle_rss))
    print(json.dumps(res))


if __name__ == '__main__':
    sys.exit(main())
