r"""fleet kernel: a Python REPL speaking newline-delimited JSON on stdio (protocol 1).

Run as `/usr/bin/python3 -I -S fleet_kernel.py`; standard library only. Requests arrive on stdin,
events leave on stdout, one UTF-8 JSON object per line. The first line is
{"event":"ready","protocol":1,"python":"3.11.2","pid":N}.

Requests: execute {id, code} and bind {id, variables} are queued and run one at a time in one
persistent namespace; interrupt {id?}, host_reply {id, ok, result | error} and shutdown are
handled on arrival. Events: stdout/stderr {id, text}, result {id, text}, error {id, ename, evalue,
traceback}, host_request {id, cell, method, params}, and exactly one done {id, status} per request,
last ("ok", "error", or "submitted" with "outputs"). A bad line gets an error with id null and
ename ProtocolError. Output of a cell (stdout + stderr + result) is capped at
$FLEET_KERNEL_OUTPUT_CAP bytes (default 1 MiB): the head streams, then only a rolling tail of a
quarter of the cap is kept and sent at the end after "\n[... N bytes cut ...]\n".

File descriptors: the original fd 0 and fd 1 are duplicated into private, non-inheritable request
and event channels before anything else happens. fd 0 then becomes an empty pipe (input() sees EOF).
fd 1 and fd 2 become pipes that pump threads turn into stdout/stderr events, attributed to the
cell running when the bytes are read. Before each `done`, unless both pipes are empty and their
pumps idle, a random fence marker is pushed through both and awaited, so every byte a cell wrote
synchronously (os.write, C code, finished subprocesses) precedes its `done`. Python-level writes
to sys.stdout/sys.stderr bypass the pipes.
"""
import sys
import posix
import _signal
import _thread

# Boot: claim the fds and say ready before importing anything (posix, not os: under -I -S even
# os is not loaded yet).
_EV = posix.dup(1)
_IN = posix.dup(0)
_r, _w = posix.pipe()
posix.close(_w)
posix.dup2(_r, 0)
posix.close(_r)
_OUT_R, _OUT_W = posix.pipe()
_ERR_R, _ERR_W = posix.pipe()
posix.dup2(_OUT_W, 1)
posix.dup2(_ERR_W, 2)
posix.write(_EV, b'{"event":"ready","protocol":1,"python":"%d.%d.%d","pid":%d}\n'
            % (*sys.version_info[:3], posix.getpid()))

# Python never caches a script's bytecode, and compiling the ~600 lines below took 4 ms of a 9 ms
# boot, so they are a string compiled only after ready. The leading newlines keep line numbers
# (tracebacks of kernel bugs) true to this file.
_BODY_LINE = sys._getframe().f_lineno
_BODY = r'''
import _ast
import builtins
import codecs
import io
import json
import keyword
import linecache
import os
import select
import time
from collections import deque


def _env_int(name, default):
    try:
        v = int(os.environ.get(name, ''))
    except ValueError:
        return default
    return v if v > 0 else default


CAP = _env_int('FLEET_KERNEL_OUTPUT_CAP', 1 << 20)  # bytes of stdout+stderr+result per cell
TAIL = max(CAP // 4, 1)                               # rolling tail kept once over the cap
FRAME = 1 << 16                                       # max bytes of text per stdout/stderr event
COALESCE = 1 << 15                                    # write pending output at once above this
FLUSH_DELAY = 0.002                                   # otherwise within this many seconds
MAX_LINE = 64 << 20
MAX_ID = 256
CUT = '\n[... %d bytes cut ...]\n'
FENCE = b'\0\xfffleet-fence-' + os.urandom(8).hex().encode() + b'\xff\0'
MAIN = _thread.get_ident()
KFILE = (lambda: 0).__code__.co_filename  # frames from this file are hidden in tracebacks
PPID = os.getppid()
RESERVED = frozenset(('llm_query', 'llm_query_batched', 'rlm_query', 'SUBMIT'))

_enc = json.JSONEncoder(ensure_ascii=False).encode
_enc_strict = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
_enc_lossy = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str).encode
_get_ident = _thread.get_ident


class _St:
    armed = False     # main thread runs user code: SIGINT raises KeyboardInterrupt
    crit = 0          # main thread is inside the event writer: SIGINT is deferred
    deferred = False
    current = None    # request owned by the main thread
    shutdown = False
    eof = False
    ncell = 0
    hseq = 0


st = _St()


def _on_sigint(signum, frame):
    if st.armed:
        if st.crit:
            st.deferred = True
        else:
            raise KeyboardInterrupt


class _Crit:
    """Entered around every event write so an interrupt never cuts a line in half."""

    def __enter__(self):
        if _get_ident() == MAIN:
            st.crit += 1

    def __exit__(self, *exc):
        if _get_ident() == MAIN:
            st.crit -= 1
            if st.deferred and not st.crit and st.armed:
                st.deferred = False
                raise KeyboardInterrupt


_CRIT = _Crit()

# ---- output: accounting, capping, coalescing, framing. Everything below runs under _wlock.

# Reentrant: a finalizer run by the garbage collector inside a locked section may print.
_wlock = _thread.RLock()


class _Seg:
    """Output of one cell (or of the idle time between cells, id null)."""
    __slots__ = ('idj', 'used', 'total', 'over', 'tail', 'tail_n')

    def __init__(self, idj):
        self.idj = idj
        self.used = self.total = self.tail_n = 0
        self.over = False
        self.tail = deque()   # (stream, text, nbytes)


class _Out:
    seg = _Seg('null')
    pending = []          # (stream, text) of seg, accounted but not yet written
    pending_n = 0
    flush_armed = False
    flush_wake = _thread.allocate_lock()
    writing = False       # inside _write (re-entry only queues, so lines never interleave)
    later = []


out = _Out()
out.flush_wake.acquire()


def _nbytes(t):
    return len(t) if t.isascii() else len(t.encode('utf-8', 'replace'))


def _head(t, k):
    if t.isascii():
        return t[:k]
    return t.encode('utf-8', 'replace')[:k].decode('utf-8', 'ignore')


def _tail(t, k):
    if k <= 0:
        return ''
    if t.isascii():
        return t[-k:]
    return t.encode('utf-8', 'replace')[-k:].decode('utf-8', 'ignore')


def _cap(text, head, tail):
    """text if it fits in head bytes, else its head, the cut marker and its tail."""
    n = _nbytes(text)
    if n <= head:
        return text
    h = _head(text, head)
    t = _tail(text, min(tail, n - _nbytes(h)))
    cut = n - _nbytes(h) - _nbytes(t)
    return h + CUT % cut + t if cut else text


def _write(data):
    if out.writing:
        out.later.append(data)
        return
    out.writing = True
    try:
        while True:
            n = os.write(_EV, data)
            if n < len(data):
                mv = memoryview(data)
                while n < len(mv):
                    n += os.write(_EV, mv[n:])
            if not out.later:
                break
            data = out.later.pop(0)
    except OSError:   # the host is gone
        os._exit(1)
    finally:
        out.writing = False


def _frames(text):
    if len(text) <= FRAME // 4:
        return (text,)
    if text.isascii():
        return [text[i:i + FRAME] for i in range(0, len(text), FRAME)]
    b = text.encode('utf-8', 'replace')
    res, i = [], 0
    while i < len(b):
        j = min(i + FRAME, len(b))
        while j < len(b) and b[j] & 0xC0 == 0x80:
            j -= 1
        res.append(b[i:j].decode('utf-8'))
        i = j
    return res


def _emit_chunks(idj, chunks, prefix=''):
    """Write (stream, text, ...) chunks, merging neighbours of the same stream."""
    lines, i = [], 0
    while i < len(chunks):
        s, j = chunks[i][0], i + 1
        while j < len(chunks) and chunks[j][0] == s:
            j += 1
        text = prefix + ''.join(c[1] for c in chunks[i:j])
        prefix = ''
        head = '{"event":"%s","id":%s,"text":' % (s, idj)
        lines += [head + _enc(f) + '}\n' for f in _frames(text)]
        i = j
    if prefix:
        lines.append('{"event":"stdout","id":%s,"text":%s}\n' % (idj, _enc(prefix)))
    if lines:
        _write(''.join(lines).encode('utf-8', 'replace'))


def _flush():
    if out.pending:
        p, out.pending, out.pending_n = out.pending, [], 0
        _emit_chunks(out.seg.idj, p)


def _account(stream, text):
    seg = out.seg
    n = _nbytes(text)
    seg.total += n
    if not seg.over:
        room = CAP - seg.used
        if n <= room:
            seg.used += n
            out.pending.append((stream, text))
            out.pending_n += n
            if out.pending_n >= COALESCE:
                _flush()
            elif not out.flush_armed:
                out.flush_armed = True
                out.flush_wake.release()
            return
        head = _head(text, room)
        hn = _nbytes(head)
        if head:
            seg.used += hn
            out.pending.append((stream, head))
        _flush()
        seg.over = True
        text = _tail(text, min(n - hn, TAIL))
        n = _nbytes(text)
    elif n > TAIL:
        text = _tail(text, TAIL)
        n = _nbytes(text)
    seg.tail.append((stream, text, n))
    seg.tail_n += n
    while seg.tail_n > TAIL:
        s, t, k = seg.tail[0]
        excess = seg.tail_n - TAIL
        if k <= excess:
            seg.tail.popleft()
            seg.tail_n -= k
        else:
            t = _tail(t, k - excess)
            seg.tail[0] = (s, t, _nbytes(t))
            seg.tail_n -= k - seg.tail[0][2]


def _switch(idj):
    """Close the current output segment (pending output, cut marker, tail); start a new one."""
    seg = out.seg
    _flush()
    cut = seg.total - seg.used - seg.tail_n
    if seg.tail or cut:
        _emit_chunks(seg.idj, list(seg.tail), CUT % cut if cut else '')
    out.seg = _Seg(idj)
    return seg


def _output(stream, text):
    with _CRIT, _wlock:
        _account(stream, text)


def _emit(line):
    data = line.encode('utf-8', 'replace')
    with _CRIT, _wlock:
        if out.pending:
            _flush()
        _write(data)


def _flusher():
    while True:
        out.flush_wake.acquire()
        time.sleep(FLUSH_DELAY)
        with _wlock:
            out.flush_armed = False
            _flush()


class _Pump:
    """Turns the bytes written to fd 1 or fd 2 into stdout/stderr events."""

    def __init__(self, fd, stream):
        self.fd, self.stream = fd, stream
        self.busy = False   # from seeing bytes in the pipe until they are accounted
        self.ack = _thread.allocate_lock()
        self.ack.acquire()

    def run(self):
        fd, m = self.fd, len(FENCE)
        dec = codecs.getincrementaldecoder('utf-8')('replace')
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        carry = b''
        while True:
            poller.poll()   # wait without consuming, so `busy` is set before bytes leave the pipe
            self.busy = True
            data = os.read(fd, 1 << 16)
            if carry:
                data, carry = carry + data, b''
            while (i := data.find(FENCE)) >= 0:
                self.emit(dec.decode(data[:i], True))
                data = data[i + m:]
                try:
                    self.ack.release()
                except RuntimeError:   # a fence that already timed out
                    pass
            # Hold back a suffix that may be the start of a marker split across reads.
            k = data.find(FENCE[:1], max(len(data) - m + 1, 0))
            while k >= 0 and not FENCE.startswith(data[k:]):
                k = data.find(FENCE[:1], k + 1)
            if k >= 0:
                data, carry = data[:k], data[k:]
            self.emit(dec.decode(data))
            self.busy = bool(carry or dec.getstate()[0])   # held-back bytes need a fence

    def emit(self, text):
        if text:
            _output(self.stream, text)


_pumps = (_Pump(_OUT_R, 'stdout'), _Pump(_ERR_R, 'stderr'))


def _fence():
    """Make sure every byte written to fd 1/2 so far has been accounted."""
    # Checking the pipes before the flags is what makes the shortcut safe: a pump raises `busy`
    # before it takes bytes out of its pipe and lowers it only once they are accounted.
    if not select.select((_OUT_R, _ERR_R), (), (), 0)[0] and not any(p.busy for p in _pumps):
        return
    os.write(_OUT_W, FENCE)
    os.write(_ERR_W, FENCE)
    for p in _pumps:
        p.ack.acquire(timeout=10)


class _Stream(io.TextIOBase):
    """sys.stdout / sys.stderr: writes become events of the running cell."""
    encoding = 'utf-8'
    errors = 'replace'

    def __init__(self, stream, fd):
        self._stream, self._fd, self._buffer = stream, fd, None

    @property
    def name(self):
        return '<%s>' % self._stream

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    def flush(self):
        with _CRIT, _wlock:
            _flush()

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError('write() argument must be str, not %s' % type(s).__name__)
        if s:
            with _CRIT, _wlock:
                _account(self._stream, s)
        return len(s)

    @property
    def buffer(self):
        if self._buffer is None:
            self._buffer = _Buffer(self)
        return self._buffer


class _Buffer(io.BufferedIOBase):
    def __init__(self, text):
        self._text = text
        self._dec = codecs.getincrementaldecoder('utf-8')('replace')

    def writable(self):
        return True

    def fileno(self):
        return self._text.fileno()

    def flush(self):
        self._text.flush()

    def write(self, b):
        mv = memoryview(b)
        self._text.write(self._dec.decode(mv.tobytes()))
        return mv.nbytes


# ---- requests

class _Req:
    __slots__ = ('id', 'idj', 'kind', 'payload', 'interrupted', 'submitted')

    def __init__(self, rid, kind, payload):
        self.id, self.idj, self.kind, self.payload = rid, _enc(rid), kind, payload
        self.interrupted = False
        self.submitted = None   # JSON text of SUBMIT's outputs


_q = deque()
_qlock = _thread.allocate_lock()
_inflight = set()
_wake = _thread.allocate_lock()   # released by the reader when the main thread has work
_wake.acquire()


def _wake_main():
    try:
        _wake.release()
    except RuntimeError:
        pass


def _error_line(idj, ename, evalue, tb):
    return '{"event":"error","id":%s,"ename":%s,"evalue":%s,"traceback":%s}\n' % (
        idj, _enc(ename), _enc(evalue), _enc(tb))


def _done(req, status, outputs=None):
    with _qlock:
        _inflight.discard(req.id)
        if st.current is req:
            st.current = None
    extra = ',"outputs":' + outputs if outputs is not None else ''
    _emit('{"event":"done","id":%s,"status":"%s"%s}\n' % (req.idj, status, extra))


def _fail(req, ename, evalue):
    _emit(_error_line(req.idj, ename, evalue, '%s: %s\n' % (ename, evalue)))
    _done(req, 'error')


# ---- host requests and the built-ins

class _Submit(BaseException):
    """Raised by SUBMIT; a BaseException so `except Exception` in user code cannot swallow it."""


class _Waiter:
    __slots__ = ('lock', 'ok', 'value')


_waiters = {}
_hlock = _thread.allocate_lock()


def _host_call(method, params_json):
    w = _Waiter()
    w.lock = _thread.allocate_lock()
    w.lock.acquire()
    w.ok, w.value = False, None
    with _hlock:
        if st.eof:
            raise RuntimeError('the host closed the kernel input; %s cannot be answered' % method)
        st.hseq += 1
        hid = 'h%d' % st.hseq
        _waiters[hid] = w
    cur = st.current
    cell = cur.idj if cur is not None else 'null'
    try:
        _emit('{"event":"host_request","id":"%s","cell":%s,"method":"%s","params":%s}\n'
              % (hid, cell, method, params_json))
        w.lock.acquire()
    finally:
        with _hlock:
            _waiters.pop(hid, None)
    if not w.ok:
        raise RuntimeError(w.value)
    return w.value


def llm_query(prompt):
    """Ask the sub-LM one prompt; returns its answer (str)."""
    if not isinstance(prompt, str):
        raise TypeError('llm_query() prompt must be str, not %s' % type(prompt).__name__)
    return _host_call('llm_query', '{"prompt":%s}' % _enc(prompt))


def llm_query_batched(prompts):
    """Ask the sub-LM several prompts concurrently; returns the answers in order (list of str)."""
    if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
        raise TypeError('llm_query_batched() prompts must be a list of str')
    res = _host_call('llm_query_batched', '{"prompts":%s}' % _enc(list(prompts)))
    if not isinstance(res, list):
        raise RuntimeError('llm_query_batched: the host returned %s, not a list'
                           % type(res).__name__)
    return res


def rlm_query(task, context=None):
    """Run a child RLM on task (with optional JSON-serialisable context); returns its answer."""
    if not isinstance(task, str):
        raise TypeError('rlm_query() task must be str, not %s' % type(task).__name__)
    try:
        cj = _enc_strict(context)
    except (TypeError, ValueError, RecursionError):
        cj = _enc(str(context))
    return _host_call('rlm_query', '{"task":%s,"context":%s}' % (_enc(task), cj))


def _jsonable(v):
    try:
        return _enc_lossy(v)
    except (TypeError, ValueError, RecursionError):
        return _enc(str(v))


def SUBMIT(*args, **outputs):
    """End the cell and the turn with these outputs: SUBMIT(answer=...) or SUBMIT(value)."""
    if args:
        if len(args) > 1 or 'answer' in outputs:
            raise TypeError('SUBMIT() takes keyword outputs, or a single positional answer')
        outputs['answer'] = args[0]
    if not outputs:
        raise TypeError('SUBMIT() needs at least one output, e.g. SUBMIT(answer=...)')
    enc = '{%s}' % ','.join('%s:%s' % (_enc(k), _jsonable(v)) for k, v in outputs.items())
    cur = st.current
    if cur is not None and cur.submitted is None:
        cur.submitted = enc
    raise _Submit


_user_main = type(sys)('__main__')
NS = _user_main.__dict__
NS.update(__builtins__=builtins, llm_query=llm_query, llm_query_batched=llm_query_batched,
          rlm_query=rlm_query, SUBMIT=SUBMIT)


# ---- running requests (main thread)

def _describe(e):
    import traceback
    te = traceback.TracebackException(type(e), e, e.__traceback__, compact=True)
    todo, seen = [te], set()
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if f.filename != KFILE])
        todo += [t.__cause__, t.__context__, *(t.exceptions or ())]
    try:
        evalue = str(e)
    except Exception:
        evalue = '<unprintable %s>' % type(e).__name__
    return type(e).__name__, evalue, ''.join(te.format())


def _user(req, code, fn):
    """Everything that may run user code (exec, repr, exception __str__); interruptible."""
    st.deferred = False
    st.armed = True
    try:
        try:
            if req.interrupted:
                raise KeyboardInterrupt
            tree = compile(code, fn, 'exec', _ast.PyCF_ONLY_AST)
            last = None
            if tree.body and isinstance(tree.body[-1], _ast.Expr):
                last = compile(_ast.Expression(tree.body.pop().value), fn, 'eval')
            exec(compile(tree, fn, 'exec'), NS)
            if last is not None:
                v = eval(last, NS)
                if v is not None:
                    NS['_'] = v
                    return repr(v), None
            return None, None
        except _Submit:
            return None, None
        except BaseException as e:
            return None, _describe(e)
    finally:
        st.armed = False


def _execute(req):
    st.ncell += 1
    fn = '<cell-%d>' % st.ncell
    code = req.payload
    linecache.cache[fn] = (len(code), None, code.splitlines(True), fn)
    with _CRIT, _wlock:
        _switch(req.idj)
    _signal.signal(_signal.SIGINT, _on_sigint)   # user code may have replaced it
    try:
        rtext, err = _user(req, code, fn)
    except BaseException as e:   # interrupted while describing an error
        rtext, err = None, (type(e).__name__, '', type(e).__name__ + '\n')
    _fence()
    with _CRIT, _wlock:
        seg = _switch('null')
    if rtext is not None:
        budget = 0 if seg.over else CAP - seg.used
        _emit('{"event":"result","id":%s,"text":%s}\n' % (req.idj, _enc(_cap(rtext, budget, TAIL))))
    if err is not None:
        ename, evalue, tb = err
        _emit(_error_line(req.idj, ename, _cap(evalue, FRAME, FRAME), _cap(tb, CAP - TAIL, TAIL)))
    if req.submitted is not None:
        _done(req, 'submitted', req.submitted)
    else:
        _done(req, 'error' if err is not None else 'ok')


def _bindable(name):
    return (name.isidentifier() and not name.startswith('_') and not keyword.iskeyword(name)
            and name not in RESERVED)


def _bind(req):
    bad = sorted(k for k in req.payload if not _bindable(k))
    if bad:
        _fail(req, 'ValueError', 'cannot bind %s: names must be identifiers not starting with "_" '
              'and not one of %s' % (', '.join(map(repr, bad)), ', '.join(sorted(RESERVED))))
    else:
        NS.update(req.payload)
        _done(req, 'ok')


def _next():
    while True:
        with _qlock:
            if _q:
                st.current = _q.popleft()
                return st.current
            if st.shutdown:
                return None
        _wake.acquire()


def _main():
    while (req := _next()) is not None:
        try:
            (_execute if req.kind == 'execute' else _bind)(req)
        except BaseException as e:   # a kernel bug: report it and keep serving
            with _CRIT, _wlock:
                _switch('null')
            if st.current is req:
                _fail(req, 'KernelError', '%s: %s' % (type(e).__name__, e))
    with _wlock:
        _switch('null')
        os._exit(0)


# ---- the reader thread: parses requests, handles out-of-band ones at once

def _perr(msg):
    _emit(_error_line('null', 'ProtocolError', msg, ''))


def _shutdown(eof):
    with _qlock:
        st.shutdown = True
        dropped = list(_q)
        _q.clear()
        for r in dropped:
            _inflight.discard(r.id)
    for r in dropped:
        _fail(r, 'RuntimeError', 'the kernel is shutting down')
    if eof:
        with _hlock:
            st.eof = True
            waiting = list(_waiters.values())
            _waiters.clear()
        for w in waiting:
            w.value = 'the host closed the kernel input'
            w.lock.release()
    _wake_main()


def _interrupt(rid):
    cancel = None
    with _qlock:
        cur = st.current
        if cur is not None and (rid is None or rid == cur.id):
            cur.interrupted = True
            _signal.pthread_kill(MAIN, _signal.SIGINT)
        elif _q and (rid is None or rid == _q[0].id):
            cancel = _q.popleft()
        elif rid is not None:
            for r in _q:
                if r.id == rid:
                    cancel = r
                    _q.remove(r)
                    break
        if cancel is not None:
            _inflight.discard(cancel.id)
    if cancel is not None:
        _emit(_error_line(cancel.idj, 'KeyboardInterrupt', 'interrupted before it started',
                          'KeyboardInterrupt: interrupted before it started\n'))
        _done(cancel, 'error')


def _handle(line):
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as e:
        return _perr('invalid JSON: %s' % e)
    if not isinstance(msg, dict):
        return _perr('a request must be a JSON object')
    t = msg.get('type')
    rid = msg.get('id')
    if rid is not None and (not isinstance(rid, str) or not rid or len(rid) > MAX_ID):
        return _perr('"id" must be a non-empty string of at most %d characters' % MAX_ID)
    if t in ('execute', 'bind'):
        field, typ = ('code', str) if t == 'execute' else ('variables', dict)
        payload = msg.get(field)
        if rid is None:
            return _perr('%s: missing "id"' % t)
        if not isinstance(payload, typ):
            what = 'a string' if typ is str else 'an object'
            return _perr('%s: "%s" must be %s' % (t, field, what))
        req = _Req(rid, t, payload)
        with _qlock:
            dup, closed = rid in _inflight, st.shutdown
            if not dup and not closed:
                _inflight.add(rid)
                _q.append(req)
        if dup:
            return _perr('%s: id %s is already in flight' % (t, req.idj))
        if closed:
            return _fail(req, 'RuntimeError', 'the kernel is shutting down')
        _wake_main()
    elif t == 'interrupt':
        _interrupt(rid)
    elif t == 'host_reply':
        ok = msg.get('ok')
        err = msg.get('error', 'host request failed')
        if rid is None or not isinstance(ok, bool) or (not ok and not isinstance(err, str)):
            return _perr('host_reply needs "id" (string), "ok" (boolean) and, if not ok, '
                         '"error" (string)')
        with _hlock:
            w = _waiters.pop(rid, None)
        if w is not None:
            w.ok, w.value = ok, msg.get('result') if ok else err
            w.lock.release()
    elif t == 'shutdown':
        _shutdown(False)
    elif t is None:
        _perr('missing "type"')
    else:
        _perr('unknown request type %s' % _enc(t)[:80])


def _read_chunk():
    try:
        return os.read(_IN, 1 << 20)
    except OSError:
        return b''


def _reader():
    buf, size, skipping = [], 0, False
    while chunk := _read_chunk():
        start = 0
        while True:
            i = chunk.find(b'\n', start)
            part = chunk[start:] if i < 0 else chunk[start:i]
            if not skipping:
                size += len(part)
                if size > MAX_LINE:
                    skipping, buf, size = True, [], 0
                    _perr('request line longer than %d bytes' % MAX_LINE)
                else:
                    buf.append(part)
            if i < 0:
                break
            start = i + 1
            if skipping:
                skipping = False
                continue
            line = b''.join(buf)
            buf, size = [], 0
            if line and not line.isspace():
                try:
                    _handle(line)
                except Exception as e:   # never let one line kill the reader
                    _perr('%s: %s' % (type(e).__name__, e))
    _shutdown(True)
    # The current cell still runs to its end; give up if our parent disappears meanwhile.
    while os.getppid() == PPID:
        time.sleep(0.25)
    os._exit(1)


sys.stdout = _Stream('stdout', 1)
sys.stderr = _Stream('stderr', 2)
sys.argv = ['']
sys.modules['__main__'] = _user_main
_signal.signal(_signal.SIGINT, _on_sigint)
_thread.start_new_thread(_flusher, ())
for _p in _pumps:
    _thread.start_new_thread(_p.run, ())
_thread.start_new_thread(_reader, ())
_main()
'''
exec(compile('\n' * _BODY_LINE + _BODY, __file__, 'exec'))
