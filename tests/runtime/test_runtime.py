#!/usr/bin/env python3
"""Host-side test of runtime/corral_runtime.py, printing TAP.

Usage: test_runtime.py [path/to/corral_runtime.py]
(CORRAL_RUNTIME_PYTHON=/path/to/python3 runs the runtime on another interpreter.)

Each case starts the runtime the way the daemon does (python3 -I -S -c
<source>) with pipes for stdin/stdout, speaks frames to it and checks what
comes back.  Run as root, the runtime is started as uid/gid 65534 with no
capabilities, like in the container.  Exits non-zero if any check fails.
"""
import ast
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', '..', 'runtime', 'corral_runtime.py')
# the interpreter the runtime runs on (the container's python3); default: ours
PYTHON = os.environ.get('CORRAL_RUNTIME_PYTHON', sys.executable)
with open(RUNTIME, encoding='utf-8') as f:
    SOURCE = f.read()

results = []


def check(cond, name, detail=None):
    results.append(bool(cond))
    print('%s %d - %s' % ('ok' if cond else 'not ok', len(results), name))
    if not cond and detail is not None:
        for line in str(detail)[:3000].splitlines():
            print('#   ' + line)
    sys.stdout.flush()


class Runtime:
    def __init__(self, env=None, source=SOURCE, nproc=None):
        self.stderr = tempfile.TemporaryFile()
        kw = {}
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        if os.geteuid() == 0:
            # The container runs it as nobody with no capabilities; the channel
            # pipes are made nobody's too, the worst case for /proc/<pid>/fd.
            kw = dict(user=65534, group=65534, extra_groups=[], cwd='/')
            if nproc:
                kw['preexec_fn'] = lambda: resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            for fd in (in_r, out_w):
                os.fchown(fd, 65534, 65534)
        self.proc = subprocess.Popen(
            [PYTHON, '-I', '-S', '-c', source], stdin=in_r, stdout=out_w,
            stderr=self.stderr, env=dict(os.environ, **(env or {})), **kw)
        os.close(in_r)
        os.close(out_w)
        self.stdin = os.fdopen(in_w, 'wb')
        self.stdout_fd = out_r
        self.buf = b''
        self.bad = []      # lines on stdout that were not a JSON object
        self.frames = []   # every frame received, in order

    def send_raw(self, data):
        try:
            self.stdin.write(data)
            self.stdin.flush()
        except BrokenPipeError:  # the runtime died: the checks will say so
            pass

    def send(self, obj):
        self.send_raw(json.dumps(obj).encode() + b'\n')

    def frame(self, timeout=10.0):
        """Next frame, or None on EOF/timeout."""
        end = time.monotonic() + timeout
        fd = self.stdout_fd
        while b'\n' not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            data = os.read(fd, 1 << 20)
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b'\n', 1)
        try:
            obj = json.loads(line.decode('utf-8'))
            if not isinstance(obj, dict):
                raise ValueError
        except ValueError:
            self.bad.append(line[:200])
            return {}
        self.frames.append(obj)
        return obj

    def ready(self):
        return self.frame()

    def response(self, rid, timeout=10.0):
        """Frames up to the response with id rid: (outputs, response)."""
        outputs = []
        while True:
            f = self.frame(timeout)
            if f is None:
                return outputs, None
            if f.get('method') == 'sandbox/output':
                outputs.append(f['params'])
            elif 'id' in f and f.get('id') == rid:
                return outputs, f

    def close(self):
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            rc = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        os.close(self.stdout_fd)
        self.stderr.seek(0)
        return rc, self.stderr.read().decode('utf-8', 'replace')


def text(outputs, stream):
    return ''.join(o['data'] for o in outputs if o['stream'] == stream)


def run(code, language='python', limit=1 << 20, env=None, rid=1, **kw):
    """Start a runtime, run one exec: (outputs, result, runtime, seconds)."""
    rt = Runtime(env, **kw)
    rt.ready()
    t0 = time.monotonic()
    rt.send({'jsonrpc': '2.0', 'id': rid, 'method': 'sandbox/exec',
             'params': {'language': language, 'code': code, 'output_limit': limit}})
    outputs, resp = rt.response(rid)
    took = time.monotonic() - t0
    rc, err = rt.close()
    result = (resp or {}).get('result') or {}
    rt.rc, rt.err = rc, err
    return outputs, result, rt, took


def clean(rt):
    """No non-JSON frame was seen and the runtime exited 0."""
    return not rt.bad and rt.rc == 0


BOMB = '''import os, time
print(os.getpgid(0), flush=True)
if os.fork() == 0:
    while True:  # forks forever, retrying at the limit: never dies on its own
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
time.sleep(0.5)
print('alive')
'''


def first_int(s):
    try:
        return int(s.split()[0])
    except (IndexError, ValueError):
        return 0


def group_gone(pgid):
    for _ in range(50):  # killed ones are zombies until the host's init reaps them
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.killpg(pgid, 9)  # don't leave anything behind on the host
    return False


# --- ready ---------------------------------------------------------------
rt = Runtime()
f = rt.ready()
check(f and f.get('jsonrpc') == '2.0' and f.get('method') == 'sandbox/ready' and 'id' not in f
      and f['params'].get('protocol') == 1 and f['params'].get('runtime') == 'corral-runtime'
      and f['params'].get('python') == subprocess.check_output(
          [PYTHON, '-c', 'import platform; print(platform.python_version())']).decode().strip(),
      'ready frame', f)
rc, err = rt.close()
check(rc == 0, 'stdin EOF with no exec: exits 0', (rc, err))

# --- print ---------------------------------------------------------------
out, res, rt, _ = run("print('hello')")
check(text(out, 'stdout') == 'hello\n' and text(out, 'stderr') == '', 'print output forwarded', out)
check(res == {'status': 'ok', 'exit_code': 0, 'signal': None, 'stdout_bytes': 6,
              'stderr_bytes': 0, 'error': None}, 'ok result fields', res)
check(clean(rt), 'runtime exits 0 after the response', (rt.rc, rt.err, rt.bad))
check(all(o['stream'] in ('stdout', 'stderr') and isinstance(o['data'], str) for o in out),
      'output notifications well formed', out)

# --- stderr --------------------------------------------------------------
out, res, rt, _ = run("import sys\nsys.stderr.write('oops\\n')\nprint('o')")
check(text(out, 'stderr') == 'oops\n' and text(out, 'stdout') == 'o\n'
      and res.get('stderr_bytes') == 5 and res.get('stdout_bytes') == 2 and res.get('status') == 'ok',
      'stderr forwarded separately', (out, res))

# --- exceptions ----------------------------------------------------------
out, res, rt, _ = run("print('before')\ndef f():\n    return 1/0\nf()")
e = res.get('error') or {}
tb = e.get('traceback') or ''
check(res.get('status') == 'error' and res.get('exit_code') == 1 and e.get('type') == 'ZeroDivisionError'
      and e.get('message') == 'division by zero', 'exception: status, type, message', res)
check(tb.startswith('Traceback (most recent call last):') and 'File "<corral>", line 4, in <module>' in tb
      and 'File "<corral>", line 3, in f' in tb and 'return 1/0' in tb
      and tb.rstrip().endswith('ZeroDivisionError: division by zero'), 'exception: user traceback', tb)
check('<string>' not in tb and 'run_python' not in tb and 'corral_runtime' not in tb
      and tb.count('File "') == 2, 'exception: no runtime frames in traceback', tb)
check(text(out, 'stdout') == 'before\n' and 'Traceback' not in text(out, 'stderr'),
      'exception: output before it kept, traceback not on stderr', out)

out, res, rt, _ = run("import asyncio\nasync def g():\n    raise KeyError('k')\nawait g()")
tb = (res.get('error') or {}).get('traceback') or ''
check((res.get('error') or {}).get('type') == 'KeyError' and 'asyncio' not in tb
      and 'File "<corral>", line 4, in <module>' in tb and tb.count('File "') == 2,
      'async exception: only user frames', tb)

out, res, rt, _ = run("class Boom(Exception): pass\nimport json\ntry:\n    json.loads('{')\n"
                      "except ValueError as x:\n    raise Boom('bad') from x")
e = res.get('error') or {}
check(e.get('type') == 'Boom' and e.get('message') == 'bad'
      and 'json.decoder.JSONDecodeError' in (e.get('traceback') or '')
      and 'direct cause' in (e.get('traceback') or ''), 'chained user exception type and cause', e)

out, res, rt, _ = run("x = (")
e = res.get('error') or {}
check(res.get('status') == 'error' and e.get('type') == 'SyntaxError' and '<corral>' in (e.get('traceback') or ''),
      'syntax error reported', res)

# --- SystemExit ----------------------------------------------------------
out, res, rt, _ = run("print('a')\nraise SystemExit(3)")
check(res.get('status') == 'error' and res.get('exit_code') == 3 and res.get('error') is None
      and text(out, 'stdout') == 'a\n', 'SystemExit(3): error, exit 3, no error record', res)
out, res, rt, _ = run("import sys\nsys.exit(0)")
check(res.get('status') == 'ok' and res.get('exit_code') == 0 and res.get('error') is None,
      'sys.exit(0): ok', res)
out, res, rt, _ = run("exit(2)")
check(res.get('exit_code') == 2 and res.get('error') is None, 'exit() builtin available', res)
out, res, rt, _ = run("import sys\nsys.exit('bye')")
check(res.get('exit_code') == 1 and text(out, 'stderr') == 'bye\n', "sys.exit('bye'): message on stderr, exit 1",
      (out, res))

# --- MemoryError / signals -------------------------------------------------
out, res, rt, _ = run("b = bytearray(1 << 62)")
check(res.get('status') == 'oom' and (res.get('error') or {}).get('type') == 'MemoryError',
      'MemoryError -> oom', res)
out, res, rt, _ = run("import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)")
check(res.get('status') == 'killed' and res.get('exit_code') == 137 and res.get('signal') == 9
      and text(out, 'stdout') == 'x\n', 'SIGKILL (no cgroup OOM) -> killed, 137, signal 9', res)

# OOM kills: the cgroup counter file is swapped for one the user code bumps.
counter = tempfile.NamedTemporaryFile('w', delete=False)
os.chmod(counter.name, 0o666)
check(SOURCE.count("'/sys/fs/cgroup/memory.events'") == 1, 'runtime reads the cgroup v2 OOM counter')
oom_source = SOURCE.replace("'/sys/fs/cgroup/memory.events'", repr(counter.name))


def oom_run(code, language='python'):
    with open(counter.name, 'w') as f:
        f.write('low 0\noom 0\noom_kill 0\n')
    return run(code.replace('@PATH@', counter.name), language, source=oom_source)[1]


res = oom_run("import os\nopen('@PATH@', 'w').write('oom_kill 1\\n')\nos.kill(os.getpid(), 9)")
check(res.get('status') == 'oom' and res.get('exit_code') == 137 and res.get('signal') == 9,
      'SIGKILL while the cgroup counted an OOM kill -> oom', res)
res = oom_run("import os\nos.kill(os.getpid(), 9)")
check(res.get('status') == 'killed', 'SIGKILL, counter unchanged -> killed', res)
res = oom_run("echo 'oom_kill 2' > @PATH@; exit 137", 'shell')
check(res.get('status') == 'oom' and res.get('exit_code') == 137 and res.get('signal') is None,
      'shell child OOM-killed (exit 137, counter rose) -> oom', res)
res = oom_run("echo 'oom_kill 2' > @PATH@", 'shell')
check(res.get('status') == 'ok', 'counter rose but run succeeded -> ok', res)
os.unlink(counter.name)

# --- fork bomb -------------------------------------------------------------
if os.geteuid() == 0:  # needs an RLIMIT_NPROC of its own: runs as nobody
    # RLIMIT_NPROC counts all of nobody's processes: leave room for others'
    nobody = 0
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            nobody += os.stat('/proc/' + pid).st_uid == 65534
        except OSError:
            pass
    rt = Runtime(nproc=nobody + 40)
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 1, 'method': 'sandbox/exec', 'params': {
        'language': 'python', 'code': BOMB}})
    time.sleep(0.2)
    rt.send({'jsonrpc': '2.0', 'id': 2, 'method': 'sandbox/nope'})
    out, resp = rt.response(2, timeout=5)
    check(resp and resp['error']['code'] == -32601, 'fork bomb: supervisor keeps answering', resp)
    out2, resp = rt.response(1, timeout=10)
    out += out2
    check(resp and resp['result']['status'] == 'ok' and text(out, 'stdout').endswith('alive\n'),
          'fork bomb: exec completes', (resp, text(out, 'stdout')[-200:]))
    rc, err = rt.close()
    check(rc == 0 and not rt.bad, 'fork bomb: runtime exits 0', (rc, err))
    pgid = first_int(text(out, 'stdout'))
    check(pgid > 0 and group_gone(pgid), 'fork bomb: leftovers killed with the worker process group')
else:
    for name in ('supervisor keeps answering', 'exec completes', 'runtime exits 0', 'leftovers killed'):
        results.append(True)
        print('ok %d - fork bomb: %s # SKIP needs root for a private RLIMIT_NPROC' % (len(results), name))

# --- top-level await -------------------------------------------------------
out, res, rt, _ = run("import asyncio\nawait asyncio.sleep(0)\nprint('x')")
check(text(out, 'stdout') == 'x\n' and res.get('status') == 'ok', 'top-level await', (out, res))

# --- shell -----------------------------------------------------------------
out, res, rt, _ = run("echo hi; echo err >&2; exit 4", language='shell')
check(text(out, 'stdout') == 'hi\n' and text(out, 'stderr') == 'err\n' and res.get('status') == 'error'
      and res.get('exit_code') == 4 and res.get('error') is None and res.get('signal') is None,
      'shell: echo hi; exit 4', (out, res))
out, res, rt, _ = run("yes | head -n 2", language='shell')
check(text(out, 'stdout') == 'y\ny\n' and text(out, 'stderr') == '' and res.get('status') == 'ok',
      'shell: SIGPIPE default (yes | head quietly)',
      (out, res, rt.err))
out, res, rt, took = run("echo $$; sleep 100 &", language='shell')
pgid = first_int(text(out, 'stdout'))
check(pgid > 0 and res.get('status') == 'ok' and took < 1.0,
      'background sleep does not hang completion (%.2fs)' % took, (out, res))
check(pgid > 0 and group_gone(pgid), 'background sleep killed when the runtime is not PID 1')

# --- subprocess output and fd hygiene ----------------------------------------
out, res, rt, _ = run("import os\nprint('a')\nos.system('echo sub')\nprint('b')")
check(text(out, 'stdout') == 'a\nsub\nb\n' and clean(rt), 'os.system output captured in order, frames valid',
      (out, rt.bad))

forged = '{"jsonrpc":"2.0","id":1,"result":{"status":"forged"}}'
out, res, rt, _ = run("import os\nos.write(1, b'\\n%s\\n\\x00\\xff\\xfe junk\\r\\n')\nprint('end')" % forged)
check(clean(rt) and res.get('status') == 'ok' and forged in text(out, 'stdout')
      and '\x00\ufffd\ufffd junk\r\n' in text(out, 'stdout') and text(out, 'stdout').endswith('end\n'),
      'garbage written to fd 1 arrives as data, frames intact', (out, res, rt.bad))

# User code tries every descriptor it can find, and the supervisor's /proc.
probe = r'''
import os, glob
def _open(fd):
    try:
        os.fstat(fd); return True
    except OSError:
        return False
f = %r.encode() + b'\n'
hit = []
for fd in range(3, 256):
    try:
        os.write(fd, f); hit.append(fd)
    except OSError:
        pass
for p in glob.glob('/proc/%%d/fd/*' %% os.getppid()):
    try:
        fd = os.open(p, os.O_WRONLY); os.write(fd, f); os.close(fd); hit.append(p)
    except OSError:
        pass
import stat
print('fds', [(fd, stat.S_ISFIFO(os.fstat(fd).st_mode)) for fd in range(3, 1024) if _open(fd)])
print('hit', hit)
''' % forged
out, res, rt, _ = run(probe)
frames_ok = clean(rt) and all(fr.get('result', {}).get('status') != 'forged' for fr in rt.frames)
check(frames_ok and res.get('status') == 'ok' and len([fr for fr in rt.frames if 'id' in fr]) == 1,
      'user code cannot reach the frame channel (own fds or /proc/<supervisor>/fd)', (out, res, rt.frames[-1:]))
fds_line = [l for l in text(out, 'stdout').splitlines() if l.startswith('fds ')]
fds = ast.literal_eval(fds_line[0][4:]) if fds_line else None
check(fds is not None and len(fds) == 1 and fds[0][1], 'worker holds no fd above 2 but its report pipe', fds_line)

out, res, rt, _ = run("import os\nprint(open('/proc/self/oom_score_adj').read().strip())\n"
                      "print(os.getpgid(0) == os.getpid())")
check(text(out, 'stdout') == '1000\nTrue\n', 'worker: oom_score_adj 1000, own process group', out)

# --- output limits and encoding ----------------------------------------------
out, res, rt, _ = run("import sys\nfor i in range(3072):\n    sys.stdout.write('x' * 1023 + '\\n')\n"
                      "sys.stderr.write('e' * 10)", limit=1 << 20)
so = text(out, 'stdout')
check(len(so.encode()) == 1 << 20 and so == ('x' * 1023 + '\n') * 1024, 'stdout forwarding stops at the limit',
      len(so))
check(res.get('stdout_bytes') == 3 * (1 << 20) and res.get('stderr_bytes') == 10 and text(out, 'stderr') == 'e' * 10,
      'true byte counts past the limit', res)
check(all(len(o['data'].encode()) <= 65536 for o in out) and len(out) >= 16, 'output frames carry <= 64 KiB', len(out))

out, res, rt, _ = run("print('ab\u00e9\u20ac\U0001F600' * 3)", limit=10)
check(text(out, 'stdout') == 'ab\u00e9\u20ac' and res.get('stdout_bytes') == 34,
      'limit cutting a character drops it whole', (out, res))

s = 'caf\u00e9 \u20ac \U0001F600 \u4e2d\u6587'
out, res, rt, _ = run("import os, time\nb = %r.encode()\n" % s
                      + "for i in range(len(b)):\n    os.write(1, b[i:i+1]); time.sleep(0.003)\n"
                      "print(%r * 20000)" % s)
so = text(out, 'stdout')
check(so == s + (s * 20000) + '\n' and '\ufffd' not in so and len(out) >= 3,
      'multibyte UTF-8 survives byte-wise writes and 64 KiB chunking', (len(so), len(out)))
check(all(len(o['data'].encode()) <= 65536 for o in out), 'multibyte chunks <= 64 KiB', [len(o['data']) for o in out])

out, res, rt, _ = run("import os\nos.write(1, b'\\xe2\\x82')", limit=100)
check(text(out, 'stdout') == '\ufffd' and res.get('stdout_bytes') == 2, 'truncated character at EOF -> U+FFFD',
      (out, res))

# --- protocol errors -------------------------------------------------------
rt = Runtime()
rt.ready()
rt.send({'jsonrpc': '2.0', 'id': 7, 'method': 'sandbox/nope'})
f = rt.frame()
check(f and f.get('id') == 7 and f.get('error', {}).get('code') == -32601, 'unknown method -> -32601', f)
rt.send_raw(b'this is not json\n')
f = rt.frame()
check(f and f.get('id') is None and 'id' in f and f.get('error', {}).get('code') == -32700,
      'non-JSON line -> -32700', f)
rt.send_raw(b'[' * 200000 + b'\n')
f = rt.frame()
check(f and f.get('error', {}).get('code') == -32700, 'deeply nested JSON -> -32700', f)
rt.send_raw(b'{"jsonrpc":"2.0","id":NaN,"method":"sandbox/nope"}\n')
f = rt.frame()
check(f and f.get('id') is None and f.get('error', {}).get('code') == -32700, 'NaN (not JSON) -> -32700', f)
rt.send_raw(b'\n{"jsonrpc":"2.0","id":8}\n')
f = rt.frame()
check(f and f.get('id') == 8 and f.get('error', {}).get('code') == -32600, 'no method -> -32600', f)
rt.send({'jsonrpc': '2.0', 'id': 9, 'method': 'sandbox/exec', 'params': {'language': 'perl', 'code': ''}})
f = rt.frame()
check(f and f.get('id') == 9 and f.get('error', {}).get('code') == -32602, 'bad params -> -32602', f)
rt.send({'jsonrpc': '2.0', 'method': 'sandbox/whatever'})  # notification: no answer
rt.send({'jsonrpc': '2.0', 'id': 'x', 'method': 'sandbox/exec',
         'params': {'language': 'python', 'code': 'import time\ntime.sleep(0.3)\nprint(1)'}})
rt.send({'jsonrpc': '2.0', 'id': 10, 'method': 'sandbox/exec', 'params': {'language': 'shell', 'code': 'true'}})
f = rt.frame()
check(f and f.get('id') == 10 and f.get('error', {}).get('code') == -32000, 'second exec while running -> -32000', f)
out, resp = rt.response('x')
check(resp and resp.get('result', {}).get('status') == 'ok' and text(out, 'stdout') == '1\n',
      'runtime keeps serving after errors (exec after them works)', (out, resp))
rc, err = rt.close()
check(rc == 0 and not rt.bad and len(rt.frames) == 10, 'no extra frames (notification unanswered)', rt.frames)

rt = Runtime(env={'CORRAL_MAX_FRAME': '1000'})  # raised to the 64 KiB minimum
rt.ready()
rt.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"' + b'm' * 70000 + b'"}\n')
f = rt.frame()
check(f and f.get('id') is None and f.get('error', {}).get('code') == -32600, 'over-long frame -> -32600', f)
rt.send_raw(b'x' * 70000)  # an over-long line arriving in pieces, answered once
time.sleep(0.1)
rt.send_raw(b'y' * 70000 + b'\n')
f = rt.frame()
check(f and f.get('error', {}).get('code') == -32600, 'over-long partial line answered before its newline', f)
code = 'print("' + 'z' * 65000 + '")'
rt.send({'jsonrpc': '2.0', 'id': 2, 'method': 'sandbox/exec', 'params': {'language': 'python', 'code': code}})
out, resp = rt.response(2)
check(resp and resp.get('result', {}).get('status') == 'ok' and text(out, 'stdout') == 'z' * 65000 + '\n',
      'stream not lost after over-long frames', (out, resp, rt.frames))
rc, err = rt.close()
check(rc == 0 and not rt.bad and len([f for f in rt.frames if 'error' in f]) == 2,
      'exactly one error per over-long line', rt.frames)
check(all(len(o['data'].encode()) <= 8192 for o in out) and len(out) >= 8,
      'small CORRAL_MAX_FRAME: output data <= 1/8 of a frame', [len(o['data']) for o in out])

# every frame fits CORRAL_MAX_FRAME, even all control characters or a huge traceback
rt = Runtime(env={'CORRAL_MAX_FRAME': '65536'})
rt.ready()
rt.send({'jsonrpc': '2.0', 'id': 1, 'method': 'sandbox/exec', 'params': {'language': 'python', 'code':
         "import sys\nsys.stdout.write('\\x01' * 100000)\nraise ValueError('\\x02' * 100000)"}})
out, resp = rt.response(1)
rt.close()
sizes = [len(json.dumps(f, ensure_ascii=False).encode()) for f in rt.frames]
e = ((resp or {}).get('result') or {}).get('error') or {}
check(resp and max(sizes) < 65536 and text(out, 'stdout') == '\x01' * 100000 and e.get('type') == 'ValueError'
      and e.get('traceback', '').endswith('\x02\n'), 'frames fit CORRAL_MAX_FRAME (escaping, long traceback)',
      sizes)

# stdin closed right after the request: the exec still completes and answers
rt = Runtime()
rt.ready()
rt.send({'jsonrpc': '2.0', 'id': 3, 'method': 'sandbox/exec',
         'params': {'language': 'python', 'code': 'import time\ntime.sleep(0.2)\nprint(5)'}})
rt.stdin.close()
out, resp = rt.response(3)
check(resp and resp['result']['status'] == 'ok' and text(out, 'stdout') == '5\n',
      'exec completes after stdin EOF', (out, resp))
rt.close()

print('1..%d' % len(results))
sys.exit(0 if all(results) else 1)
