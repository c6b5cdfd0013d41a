#!/usr/bin/python3
# TAP tests for kernel/fleet_kernel.py, driven over pipes like the C host does.
import json
import os
import re
import select
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = os.path.join(ROOT, 'kernel', 'fleet_kernel.py')
PY = '/usr/bin/python3'
T = 10  # seconds to wait for any expected event

_n = _failed = 0


def ok(cond, name, diag=None):
    global _n, _failed
    _n += 1
    print('%s %d - %s' % ('ok' if cond else 'not ok', _n, name))
    if not cond:
        _failed += 1
        if diag is not None:
            for line in str(diag)[:4000].splitlines():
                print('#   ' + line)
    sys.stdout.flush()
    return cond


def is_(got, want, name):
    return ok(got == want, name, 'got:  %r\nwant: %r' % (got, want))


class Kernel:
    def __init__(self, env=None, pyargs=()):
        self.p = subprocess.Popen([PY, '-I', '-S', *pyargs, KERNEL], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd='/',
                                  env={'PATH': '/usr/bin:/bin', **(env or {})})
        self.buf = b''
        self.events = []      # every event, in order
        self.bad = []         # lines that were not JSON objects
        self.nbytes = 0       # bytes read from the event stream
        self.seq = 0

    def send(self, msg):
        data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
        self.p.stdin.write(data + b'\n')
        self.p.stdin.flush()

    def next(self, timeout=T):
        """The next event; {'event': 'TIMEOUT'} or {'event': 'EOF'} when there is none."""
        end = time.monotonic() + timeout
        while b'\n' not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                return {'event': 'TIMEOUT'}
            data = os.read(self.p.stdout.fileno(), 1 << 20)
            if not data:
                return {'event': 'EOF'}
            self.nbytes += len(data)
            self.buf += data
        line, self.buf = self.buf.split(b'\n', 1)
        try:
            ev = json.loads(line)
            assert isinstance(ev, dict)
        except Exception:
            self.bad.append(line[:200])
            ev = {'event': 'BAD'}
        self.events.append(ev)
        return ev

    def wait(self, pred, timeout=T):
        """Events up to and including the first matching pred, or TIMEOUT, or EOF."""
        seen = []
        end = time.monotonic() + timeout
        while True:
            ev = self.next(max(end - time.monotonic(), 0))
            seen.append(ev)
            if ev['event'] in ('TIMEOUT', 'EOF') or pred(ev):
                return seen

    def start(self, code, rid=None):
        if rid is None:
            self.seq += 1
            rid = 'c%d' % self.seq
        self.send({'type': 'execute', 'id': rid, 'code': code})
        return rid

    def done(self, rid, timeout=T):
        return self.wait(lambda e: e.get('event') == 'done' and e.get('id') == rid, timeout)

    def run(self, code, rid=None, timeout=T):
        return self.done(self.start(code, rid), timeout)

    def result(self, code):
        evs = self.run(code)
        r = [e['text'] for e in evs if e.get('event') == 'result']
        return r[0] if r else evs

    def exit_code(self, timeout=T):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return 'timeout'

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        # Whatever is still in flight must be well formed too.
        rest = self.buf + self.p.stdout.read()
        self.buf = b''
        for line in rest.split(b'\n')[:-1]:
            try:
                self.events.append(json.loads(line))
            except Exception:
                self.bad.append(line[:200])


def kinds(evs):
    return [(e.get('event'), e.get('id')) for e in evs]


def texts(evs, stream='stdout'):
    return ''.join(e['text'] for e in evs if e.get('event') == stream)


def last(evs):
    return evs[-1] if evs else {}


def check_stream(k, name):
    """Every line was JSON; every id'd request got exactly one done, after all its events."""
    ok(not k.bad, name + ': every event line is a JSON object', k.bad[:3])
    by_id = {}
    for i, e in enumerate(k.events):
        if e.get('id') is not None and e.get('event') != 'host_request':
            by_id.setdefault(e['id'], []).append(e)
    wrong = {i: [e['event'] for e in evs] for i, evs in by_id.items()
             if [e['event'] for e in evs].count('done') != 1 or evs[-1]['event'] != 'done'}
    ok(not wrong, name + ': exactly one done per request, and it is the last event', wrong)
    big = [len(e['text'].encode()) for e in k.events
           if e.get('event') in ('stdout', 'stderr') and len(e['text'].encode()) > 65536]
    ok(not big, name + ': stdout/stderr events carry at most 64 KiB of text', big[:5])


# ---- boot

k = Kernel(pyargs=('-X', 'importtime'))
first = k.next()
ok(isinstance(first, dict) and first.get('event') == 'ready', 'ready is the first event', first)
is_(first.get('protocol'), 1, 'ready.protocol is 1')
is_(first.get('python'), '%d.%d.%d' % sys.version_info[:3], 'ready.python is the interpreter version')
is_(first.get('pid'), k.p.pid, 'ready.pid is the kernel pid')
# fd 2 is redirected right before ready, so the original stderr only saw the pre-ready imports.
pre = set(re.findall(r'^import time:.*\|\s*(\S+)\s*$', k.p.stderr.read().decode(), re.M))
ok('encodings' in pre, 'importtime log of the pre-ready phase was captured', sorted(pre))
heavy = pre & {'json', 're', 'threading', 'asyncio', 'ast', 'traceback', 'inspect', 'os',
               'collections', 'enum', 'linecache'}
ok(not heavy, 'nothing heavy is imported before ready', sorted(heavy))
is_(k.result('import sys\nsorted(m for m in ("asyncio", "inspect", "ssl", "socket", "typing") '
             'if m in sys.modules)'), '[]', 'asyncio/inspect/... are never imported by the kernel')
k.close()

# ---- execute: output, result, errors, namespace

k = Kernel()
k.next()
evs = k.run('print("hello")\n1 + 1', 'a1')
is_([(e['event'], e.get('text') or e.get('status')) for e in evs],
    [('stdout', 'hello\n'), ('result', '2'), ('done', 'ok')], 'stdout, result, done in order')
evs = k.run('None')
is_(kinds(evs), [('done', 'c1')], 'a None trailing expression has no result')
evs = k.run('import sys\nprint("to err", file=sys.stderr)')
is_(texts(evs, 'stderr'), 'to err\n', 'sys.stderr writes become stderr events')
evs = k.run('x = 1\n1/0', 'z')
err = [e for e in evs if e.get('event') == 'error']
ok(len(err) == 1 and err[0]['ename'] == 'ZeroDivisionError'
   and err[0]['evalue'] == 'division by zero', 'error event names the exception', evs)
tb = err[0]['traceback'] if err else ''
ok(re.search(r'File "<cell-\d+>", line 2, in <module>\n\s+1/0\n', tb),
   'traceback shows the cell source line', tb)
ok('fleet_kernel' not in tb, 'traceback hides the kernel frames', tb)
is_(last(evs).get('status'), 'error', 'done status is error after an exception')
evs = k.run('def f(:\n  pass')
ok([e.get('ename') for e in evs if e.get('event') == 'error'] == ['SyntaxError']
   and last(evs).get('status') == 'error', 'syntax error is reported', evs)
evs = k.run('def g():\n    raise KeyError("deep")\ndef f():\n    g()\nf()')
tb = ''.join(e.get('traceback', '') for e in evs)
ok('in f' in tb and 'in g' in tb and 'raise KeyError("deep")' in tb and 'fleet_kernel' not in tb,
   'nested user frames keep their source lines', tb)
k.run('counter = 41\ndef bump(v):\n    return v + 1')
is_(k.result('bump(counter)'), '42', 'namespace persists across cells')
is_(k.result('_'), '42', '_ holds the last result')
is_(k.result('__name__'), "'__main__'", '__name__ is __main__')
is_(k.result('import pickle\nclass P:\n    pass\ntype(pickle.loads(pickle.dumps(P()))).__name__'),
    "'P'", 'classes defined in cells pickle through __main__')
is_(k.result('try:\n    input()\nexcept EOFError:\n    r = "eof"\nr'), "'eof'", 'input() sees EOF')
evs = k.run('raise SystemExit(3)')
ok(any(e.get('ename') == 'SystemExit' for e in evs), 'SystemExit is an ordinary error', evs)
is_(k.result('"still alive"'), "'still alive'", 'kernel survives SystemExit')

# ---- bind
k.send({'type': 'bind', 'id': 'b1', 'variables': {'query': 'q?', 'context': {'k': [1, 2]},
                                                  'attachments': []}})
evs = k.done('b1')
is_(kinds(evs), [('done', 'b1')], 'bind replies with done only')
is_(last(evs).get('status'), 'ok', 'bind done is ok')
is_(k.result('(query, context["k"], attachments)'), "('q?', [1, 2], [])", 'bound variables are visible')
for i, bad in enumerate(('_private', '1abc', 'for', 'llm_query', 'a-b')):
    k.send({'type': 'bind', 'id': 'bad%d' % i, 'variables': {'fine_name': 1, bad: 2}})
    evs = k.done('bad%d' % i)
    ok([e.get('ename') for e in evs if e.get('event') == 'error'] == ['ValueError']
       and last(evs).get('status') == 'error', 'bind rejects the name %r' % bad, evs)
is_(k.result('"fine_name" in globals()'), 'False', 'a rejected bind binds nothing')

# ---- raw fds never corrupt the stream
evs = k.run('import os, subprocess\nos.write(1, b\'{"event":"done","id":"fake"}\\n\')\n'
            'os.write(2, b"raw err\\n")\nsubprocess.run(["echo", "from child"])\n'
            'os.write(1, b"no newline")')
out = texts(evs)
ok('{"event":"done","id":"fake"}\n' in out and 'from child\n' in out and out.endswith('no newline'),
   'os.write(1) and child output arrive as stdout text of the cell, before done', evs)
is_(texts(evs, 'stderr'), 'raw err\n', 'os.write(2) arrives as stderr text')
ok(not any(e.get('id') == 'fake' for e in k.events), 'raw JSON on fd 1 is not taken for an event')
bad = [i for i in range(200) if texts(k.run('os.write(1, b"r%d")' % i)) != 'r%d' % i]
ok(not bad, 'raw fd output always precedes done (200 cells)', bad[:5])
evs = k.run('import sys\nsys.stdout.buffer.write("ünï\\n".encode())\nsys.stdout.write("é" * 40000)')
is_(texts(evs), 'ünï\n' + 'é' * 40000, 'sys.stdout.buffer and multi-byte text survive framing')

# ---- streaming: a print is visible before a long sleep ends
t0 = time.monotonic()
rid = k.start('import time\nprint("early")\ntime.sleep(60)')
evs = k.wait(lambda e: e.get('event') in ('stdout', 'done'))
ok(last(evs).get('event') == 'stdout' and last(evs).get('text') == 'early\n',
   'output is streamed while the cell still runs', evs)

# ---- interrupts
k.send({'type': 'interrupt'})
evs = k.done(rid)
ok(any(e.get('ename') == 'KeyboardInterrupt' for e in evs) and last(evs).get('status') == 'error',
   'interrupt stops a sleeping cell with KeyboardInterrupt', evs)
ok(time.monotonic() - t0 < 30, 'the 60 s sleep was cut short')
rid = k.start('print("spinning")\nwhile True:\n    pass')
k.wait(lambda e: e.get('event') == 'stdout')
k.send({'type': 'interrupt', 'id': rid})
evs = k.done(rid)
tb = ''.join(e.get('traceback', '') for e in evs)
ok(any(e.get('ename') == 'KeyboardInterrupt' for e in evs) and last(evs).get('status') == 'error',
   'interrupt with id stops a busy loop', evs)
ok('<cell-' in tb, 'the KeyboardInterrupt traceback points into the cell', tb)
is_(k.result('6 * 7'), '42', 'kernel serves after interrupts')
k.run('import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)')
rid = k.start('print("spinning")\nwhile True:\n    pass')
k.wait(lambda e: e.get('event') == 'stdout')
k.send({'type': 'interrupt', 'id': rid})
is_(last(k.done(rid)).get('status'), 'error', 'interrupt works even after user code ignored SIGINT')

ra = k.start('import time\nprint("a started")\ntime.sleep(60)')
rb = k.start('ran_b = True')
k.wait(lambda e: e.get('event') == 'stdout' and e.get('id') == ra)
k.send({'type': 'interrupt', 'id': rb})
evs = k.done(rb)
ok(any(e.get('ename') == 'KeyboardInterrupt' for e in evs) and last(evs).get('status') == 'error',
   'interrupting a queued cell cancels it', evs)
ok(not any(e.get('event') == 'done' and e.get('id') == ra for e in evs),
   'the running cell is untouched meanwhile')
k.send({'type': 'interrupt', 'id': 'no-such-cell'})
k.send({'type': 'interrupt', 'id': ra})
evs = k.done(ra)
is_(last(evs).get('status'), 'error', 'then the running cell is interrupted')
is_(k.result('"ran_b" in globals()'), 'False', 'the cancelled cell never ran')
k.send({'type': 'interrupt'})   # idle: ignored
is_(kinds(k.run('1')), [('result', 'c%d' % k.seq), ('done', 'c%d' % k.seq)],
    'an interrupt while idle is ignored')
rid = k.start('try:\n    while True:\n        pass\nexcept Exception:\n    pass')
k.send({'type': 'interrupt', 'id': rid})
evs = k.done(rid)
is_(last(evs).get('status'), 'error', 'except Exception does not swallow the interrupt')
rid = k.start('import time\ntime.sleep(60)')
k.send({'type': 'interrupt', 'id': rid})   # may land before the cell starts running
is_(last(k.done(rid)).get('status'), 'error', 'execute immediately followed by interrupt')

# ---- host requests
rid = k.start('print("asking")\nr = llm_query("hello")\nprint(r)\nr')
evs = k.wait(lambda e: e.get('event') == 'host_request')
hr = last(evs)
is_(texts(evs), 'asking\n', 'output printed before a host_request precedes it')
ok(hr.get('method') == 'llm_query' and hr.get('params') == {'prompt': 'hello'}
   and hr.get('cell') == rid and isinstance(hr.get('id'), str), 'llm_query emits a host_request', hr)
k.send({'type': 'host_reply', 'id': hr.get('id'), 'ok': True, 'result': 'world'})
evs = k.done(rid)
is_([(e['event'], e.get('text') or e.get('status')) for e in evs],
    [('stdout', 'world\n'), ('result', "'world'"), ('done', 'ok')], 'llm_query returns the reply')
rid = k.start('llm_query_batched(["a", "b"])')
hr = last(k.wait(lambda e: e.get('event') == 'host_request'))
is_((hr.get('method'), hr.get('params')), ('llm_query_batched', {'prompts': ['a', 'b']}),
    'llm_query_batched request')
k.send({'type': 'host_reply', 'id': 'h-unknown', 'ok': True, 'result': 'ignored'})
k.send({'type': 'host_reply', 'id': hr.get('id'), 'ok': True, 'result': ['A', 'B']})
evs = k.done(rid)
is_(kinds(evs), [('result', rid), ('done', rid)], 'an unknown host_reply id is ignored')
is_(evs[0].get('text'), "['A', 'B']", 'llm_query_batched returns the list')
rid = k.start('try:\n    llm_query("x")\nexcept RuntimeError as e:\n    print("caught", e)\n'
              'llm_query("y")')
evs = []
for _ in range(2):
    evs += k.wait(lambda e: e.get('event') == 'host_request')
    k.send({'type': 'host_reply', 'id': last(evs).get('id'), 'ok': False, 'error': 'quota exceeded'})
evs += k.done(rid)
err = [e for e in evs if e.get('event') == 'error']
ok(texts(evs) == 'caught quota exceeded\n' and err and err[0]['ename'] == 'RuntimeError'
   and err[0]['evalue'] == 'quota exceeded', 'ok:false raises RuntimeError(error)', evs)
rid = k.start('rlm_query("sub task", context={"n": 1}), rlm_query("t2", context=object())')
hr1 = last(k.wait(lambda e: e.get('event') == 'host_request'))
k.send({'type': 'host_reply', 'id': hr1.get('id'), 'ok': True, 'result': 'r1'})
hr2 = last(k.wait(lambda e: e.get('event') == 'host_request'))
k.send({'type': 'host_reply', 'id': hr2.get('id'), 'ok': True, 'result': 'r2'})
evs = k.done(rid)
ok(hr1.get('method') == 'rlm_query' and hr1.get('params') == {'task': 'sub task', 'context': {'n': 1}}
   and str(hr2.get('params', {}).get('context')).startswith('<object object'),
   'rlm_query sends task and context (str()ed when not JSON)', (hr1, hr2))
is_(evs[0].get('text'), "('r1', 'r2')", 'rlm_query returns the reply')
rid = k.start('from concurrent.futures import ThreadPoolExecutor\n'
              'list(ThreadPoolExecutor(3).map(llm_query, ["p1", "p2", "p3"]))')
hrs = [last(k.wait(lambda e: e.get('event') == 'host_request')) for _ in range(3)]
for hr in reversed(hrs):
    k.send({'type': 'host_reply', 'id': hr.get('id'), 'ok': True,
            'result': hr.get('params', {}).get('prompt', '').upper()})
is_(k.done(rid)[0].get('text'), "['P1', 'P2', 'P3']",
    'concurrent llm_query calls from threads are matched by id')
is_(len({hr.get('id') for hr in hrs}), 3, 'host_request ids are distinct')
for code, what in (('llm_query(3)', 'llm_query'), ('llm_query_batched("ab")', 'llm_query_batched'),
                   ('llm_query_batched(["a", 1])', 'llm_query_batched items'),
                   ('rlm_query(None)', 'rlm_query')):
    evs = k.run(code)
    is_([e.get('ename') for e in evs if e.get('event') == 'error'], ['TypeError'],
        '%s rejects a wrong argument type' % what)
rid = k.start('llm_query("never answered")')
hr = last(k.wait(lambda e: e.get('event') == 'host_request'))
k.send({'type': 'interrupt', 'id': rid})
evs = k.done(rid)
ok(any(e.get('ename') == 'KeyboardInterrupt' for e in evs),
   'interrupt frees a cell blocked on llm_query', evs)
k.send({'type': 'host_reply', 'id': hr.get('id'), 'ok': True, 'result': 'late'})
is_(kinds(k.run('2')), [('result', 'c%d' % k.seq), ('done', 'c%d' % k.seq)],
    'a late host_reply is ignored')

# ---- SUBMIT
evs = k.run('SUBMIT(answer=42, notes=["a", 1.5], obj=object(), nan=float("nan"))\nprint("not reached")')
d = last(evs)
is_(d.get('status'), 'submitted', 'SUBMIT gives status submitted')
ok(d.get('outputs', {}).get('answer') == 42 and d['outputs'].get('notes') == ['a', 1.5]
   and d['outputs'].get('obj', '').startswith('<object object') and d['outputs'].get('nan') == 'nan',
   'outputs are JSON-safe (str() of the rest)', d)
is_(texts(evs), '', 'SUBMIT ends the cell at once')
evs = k.run('try:\n    SUBMIT(answer="x")\nexcept Exception:\n    print("swallowed")')
is_((texts(evs), last(evs).get('status'), last(evs).get('outputs')), ('', 'submitted', {'answer': 'x'}),
    'except Exception cannot swallow SUBMIT')
d = last(k.run('def go():\n    SUBMIT("positional")\ngo()'))
is_(d.get('outputs'), {'answer': 'positional'}, 'a single positional argument is the answer')
evs = k.run('SUBMIT()')
ok([e.get('ename') for e in evs if e.get('event') == 'error'] == ['TypeError']
   and last(evs).get('status') == 'error', 'SUBMIT() without outputs is a TypeError', evs)
evs = k.run('SUBMIT(1, 2)')
is_(last(evs).get('status'), 'error', 'SUBMIT with two positionals is an error')

# ---- malformed requests
for raw in (b'garbage', b'[1, 2]', b'"str"', b'{"type": "nope", "id": "q"}', b'{"id": "q"}',
            b'{"type": "execute", "code": "1"}', b'{"type": "execute", "id": 5, "code": "1"}',
            b'{"type": "execute", "id": "", "code": "1"}', b'{"type": "execute", "id": "q", "code": 5}',
            b'{"type": "bind", "id": "q", "variables": [1]}', b'\xff\xfe{}',
            b'{"type": "host_reply", "id": "h1"}', b'{"type": "interrupt", "id": 7}',
            b'{"type": "execute", "id": "' + b'i' * 300 + b'", "code": "1"}', b'[' * 100000):
    k.send(raw)
    evs = k.wait(lambda e: True)
    e = last(evs)
    ok(e.get('event') == 'error' and e.get('ename') == 'ProtocolError' and 'id' in e
       and e['id'] is None and e.get('traceback') == '', 'ProtocolError for %r' % raw[:40], evs)
rid = k.start('import time\nprint("dup")\ntime.sleep(60)', 'dup')
k.wait(lambda e: e.get('event') == 'stdout')
k.start('1', 'dup')
e = last(k.wait(lambda e: True))
ok(e.get('ename') == 'ProtocolError' and e.get('id') is None,
   'duplicate in-flight id is a ProtocolError', e)
k.send({'type': 'interrupt', 'id': 'dup'})
k.done('dup')
is_(k.result('"dup" + "!"'), "'dup!'", 'an id can be reused after its done')
t0 = time.monotonic()
k.p.stdin.write(b'{"type":"execute","id":"long","code":"' + b'x' * (64 << 20) + b'"}\n')
k.p.stdin.flush()
e = last(k.wait(lambda e: True, 60))
ok(e.get('ename') == 'ProtocolError' and 'longer' in e.get('evalue', ''),
   'a line over 64 MiB is rejected', e)
is_(k.result('"after long line"'), "'after long line'", 'kernel serves after malformed input')
check_stream(k, 'session 1')

# ---- output cap (default 1 MiB)
CAP, TAIL = 1 << 20, 1 << 18
before = k.nbytes
evs = k.run('print("x" * 50_000_000)', timeout=60)
out = texts(evs)
cut = 50_000_001 - CAP - TAIL
is_(out, 'x' * CAP + '\n[... %d bytes cut ...]\n' % cut + 'x' * (TAIL - 1) + '\n',
    'printing 50 MB keeps the 1 MiB head, the cut marker and a 256 KiB tail')
got = k.nbytes - before
ok(got < CAP + TAIL + 100_000, 'the host received bounded bytes (%d)' % got)
is_(last(evs).get('status'), 'ok', 'the huge print cell still ends ok')
evs = k.run('for i in range(300_000):\n    print(i)', timeout=60)
out = texts(evs)
ok(re.search(r'\n\[\.\.\. \d+ bytes cut \.\.\.\]\n', out) and out.endswith('\n299999\n')
   and len(out) < CAP + TAIL + 100, 'many small prints are capped too, tail kept', len(out))
evs = k.run('import subprocess\nsubprocess.run("yes | head -c 30000000", shell=True)', timeout=60)
out = texts(evs)
ok('bytes cut ...]' in out and len(out) < CAP + TAIL + 100,
   'raw fd output from a child is capped', len(out))
is_(k.result('"small again"'), "'small again'", 'the cap is per cell')
check_stream(k, 'session 1 after output')
k.send({'type': 'shutdown'})
is_(k.exit_code(), 0, 'shutdown while idle exits 0')
k.close()

k = Kernel(env={'FLEET_KERNEL_OUTPUT_CAP': '1000'})
k.next()
evs = k.run('print("a" * 1500)')
is_(texts(evs), 'a' * 1000 + '\n[... 251 bytes cut ...]\n' + 'a' * 249 + '\n',
    'FLEET_KERNEL_OUTPUT_CAP sets the cap')
evs = k.run('print("a" * 600)\n"b" * 5000')
res = [e['text'] for e in evs if e.get('event') == 'result']
is_(res, ["'" + 'b' * 398 + '\n[... 4353 bytes cut ...]\n' + 'b' * 249 + "'"],
    'the result gets what is left of the per-cell budget, then marker and tail')
k.p.stdin.close()
is_(k.exit_code(), 0, 'stdin EOF exits 0')
k.close()
check_stream(k, 'small cap')

# ---- shutdown semantics
k = Kernel()
k.next()
ra = k.start('import time\nprint("working")\ntime.sleep(0.3)\nprint("finished")')
rb = k.start('print("queued")')
k.wait(lambda e: e.get('event') == 'stdout')
k.send({'type': 'shutdown'})
evs = k.wait(lambda e: False)
ok(texts(evs).endswith('finished\n') and 'queued' not in texts(evs) and last(evs).get('event') == 'EOF',
   'shutdown lets the running cell finish and drops the queued one', evs)
ok(any(e.get('id') == rb and e.get('event') == 'done' and e.get('status') == 'error'
       for e in evs), 'the dropped cell still gets its done', evs)
is_(k.exit_code(), 0, 'shutdown exits 0 after the cell')
k.close()
check_stream(k, 'shutdown')

k = Kernel()
k.next()
rid = k.start('llm_query("pending")')
k.wait(lambda e: e.get('event') == 'host_request')
k.p.stdin.close()
evs = k.done(rid)
ok(any(e.get('ename') == 'RuntimeError' for e in evs), 'EOF fails a pending llm_query', evs)
is_(k.exit_code(), 0, 'EOF exits 0')
k.close()

print('1..%d' % _n)
sys.exit(1 if _failed else 0)
