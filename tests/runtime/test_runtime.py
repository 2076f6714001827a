#!/usr/bin/env python3
"""Host-side test of runtime/corral_runtime.py, printing TAP.

Usage: test_runtime.py [NAME_OR_REGEX ...]
       test_runtime.py --list
(CORRAL_RUNTIME_PYTHON=/path/to/python3 runs the runtime on another interpreter.)
The runtime is assembled from runtime/*.py as the build does
(runtime/assemble.py), so the program tested is the one the daemon sends.

The checks are grouped in named cases: functions registered with @case, run
in the order they are defined, each printing its checks as TAP points (a
"# case NAME" line before them).  With arguments, only the cases whose name
is one of them or matches one of them as a regular expression run
(`test_runtime.py session_list_bytes`, `test_runtime.py '^bridge_'`); --list
prints the names.  A case that raises counts as a failed point.

Each case starts the runtime the way the daemon does (python3 -I -S -B -c
<loader>, then the runtime's bytes and the frames' key on stdin) with pipes
for stdin/stdout, speaks frames to it and checks what comes back.  Run as root, the runtime is started as uid/gid 65534 with no
capabilities, like in the container.  Exits non-zero if any check fails.
"""
import ast
import base64
import hashlib
import hmac
import json
import os
import pickle
import re
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_DIR = os.path.join(HERE, '..', '..', 'runtime')
# the interpreter the runtime runs on (the container's python3); default: ours
PYTHON = os.environ.get('CORRAL_RUNTIME_PYTHON', sys.executable)
sys.path.insert(0, RUNTIME_DIR)
import assemble  # noqa: E402
SOURCE = assemble.assemble(os.path.join(RUNTIME_DIR, 'protocol.h'),
                           [os.path.join(RUNTIME_DIR, p) for p in assemble.PARTS])

results = []


def check(cond, name, detail=None):
    results.append(bool(cond))
    print('%s %d - %s' % ('ok' if cond else 'not ok', len(results), name))
    if not cond and detail is not None:
        for line in str(detail)[:3000].splitlines():
            print('#   ' + line)
    sys.stdout.flush()


CASES = []


def case(fn):
    """Registers fn as a case named fn.__name__, run in the order of definition."""
    CASES.append(fn)
    return fn


class Runtime:
    def __init__(self, env=None, source=SOURCE, nproc=None, key=True, runtime=None):
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
            [PYTHON, '-I', '-S', '-B', '-c', assemble.loader(source)], stdin=in_r, stdout=out_w,
            stderr=self.stderr, env=dict(os.environ, **(env or {})), **kw)
        os.close(in_r)
        os.close(out_w)
        self.stdin = os.fdopen(in_w, 'wb')
        self.stdout_fd = out_r
        self.buf = b''
        self.bad = []      # lines on stdout that were not a JSON object, or not tagged right
        self.frames = []   # every frame received, in order
        # As the daemon does: the runtime's bytes first on its stdin (the
        # loader checks and runs them), then the key for the runtime's frames.
        self.key = os.urandom(32)
        self.seq = None    # the next frame's number, once sandbox/ready came
        self.keyed = False  # our lines carry tags once the key was sent
        self.out_seq = 0    # the number of our next tagged line
        self.send_raw(source.encode('utf-8') if runtime is None else runtime)
        if key:
            self.send({'jsonrpc': '2.0', 'method': 'sandbox/key', 'params': {'key': self.key.hex()}})

    def untag(self, line):
        """The JSON of a runtime line: sandbox/ready comes bare, every later
        line as TAG SP JSON, TAG the hex HMAC-SHA256 of the frame's 8-byte
        big-endian number and the JSON.  None if the tag is not right."""
        if self.seq is None:
            self.seq = 0
            return line
        tag, sp, body = line.partition(b' ')
        want = hmac.new(self.key, self.seq.to_bytes(8, 'big') + body, 'sha256').hexdigest().encode()
        if not sp or not hmac.compare_digest(tag, want):
            return None
        self.seq += 1
        return body

    def send_raw(self, data):
        try:
            self.stdin.write(data)
            self.stdin.flush()
        except BrokenPipeError:  # the runtime died: the checks will say so
            pass

    def tagged(self, body):
        """body (one line, no newline) as the daemon writes it after the key:
        its tag, HMAC-SHA256(key, 8-byte big-endian (2**63 | n) || body), a
        space, the body and a newline."""
        mac = hmac.new(self.key, ((1 << 63) | self.out_seq).to_bytes(8, 'big') + body, 'sha256')
        self.out_seq += 1
        return mac.hexdigest().encode() + b' ' + body + b'\n'

    def data_frame(self, conn, data, head=None):
        """A data frame as the daemon writes it: the line "#CONN SIZE" behind
        its tag, the bytes, then the tag of the line, LF and the bytes; both
        under the frame's one number."""
        head = head or b'#%d %d' % (conn, len(data))
        seq = ((1 << 63) | self.out_seq).to_bytes(8, 'big')
        self.out_seq += 1
        line_tag = hmac.new(self.key, seq + head, 'sha256').hexdigest().encode()
        data_tag = hmac.new(self.key, seq + head + b'\n' + data, 'sha256').hexdigest().encode()
        return line_tag + b' ' + head + b'\n' + data + data_tag

    def send_data(self, conn, data):
        self.send_raw(self.data_frame(conn, data))

    def send_line(self, body):
        """One line of ours (bytes, no newline), tagged once the key went."""
        self.send_raw(self.tagged(body) if self.keyed else body + b'\n')

    def send(self, obj):
        first_key = not self.keyed and obj.get('method') == 'sandbox/key'
        self.send_line(json.dumps(obj).encode())
        if first_key:
            self.keyed = True

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
        body = self.untag(line)
        if body is None:
            self.bad.append(b'untagged: ' + line[:200])
            return {}
        line = body
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


def proc_field(pid, name):
    """A field of /proc/PID/status ("State": its letter), or None when the
    process is gone."""
    try:
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                if line.startswith(name + ':'):
                    return line.split()[1]
    except OSError:
        return None
    return None


def wait_until(pred, what, timeout=10.0):
    """Waits (bounded) for a state a case needs before it goes on."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError('not within %g s: %s' % (timeout, what))
        time.sleep(0.02)


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
@case
def ready():
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
@case
def print_output():
    out, res, rt, _ = run("print('hello')")
    check(text(out, 'stdout') == 'hello\n' and text(out, 'stderr') == '', 'print output forwarded', out)
    mem = res.pop('memory_bytes', 'missing')
    us = res.pop('us', None)
    check(isinstance(us, list) and len(us) == 3 and all(isinstance(v, int) for v in us),
          'the runtime says where the time went: record, exit, answer (microseconds)', us)
    check(res == {'status': 'ok', 'exit_code': 0, 'signal': None, 'stdout_bytes': 6,
                  'stderr_bytes': 0, 'error': None, 'out_files': [], 'out_removed': False},
          'ok result fields', res)
    check(mem is None or (isinstance(mem, int) and mem > 0), 'memory_bytes: the cgroup\'s figure or null', mem)
    check(clean(rt), 'runtime exits 0 after the response', (rt.rc, rt.err, rt.bad))
    check(all(o['stream'] in ('stdout', 'stderr') and isinstance(o['data'], str) for o in out),
          'output notifications well formed', out)


# --- stderr --------------------------------------------------------------
@case
def stderr():
    out, res, rt, _ = run("import sys\nsys.stderr.write('oops\\n')\nprint('o')")
    check(text(out, 'stderr') == 'oops\n' and text(out, 'stdout') == 'o\n'
          and res.get('stderr_bytes') == 5 and res.get('stdout_bytes') == 2 and res.get('status') == 'ok',
          'stderr forwarded separately', (out, res))


# --- exceptions ----------------------------------------------------------
@case
def exception():
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


@case
def async_exception():
    out, res, rt, _ = run("import asyncio\nasync def g():\n    raise KeyError('k')\nawait g()")
    tb = (res.get('error') or {}).get('traceback') or ''
    check((res.get('error') or {}).get('type') == 'KeyError' and 'asyncio' not in tb
          and 'File "<corral>", line 4, in <module>' in tb and tb.count('File "') == 2,
          'async exception: only user frames', tb)


@case
def chained_exception():
    out, res, rt, _ = run("class Boom(Exception): pass\nimport json\ntry:\n    json.loads('{')\n"
                          "except ValueError as x:\n    raise Boom('bad') from x")
    e = res.get('error') or {}
    check(e.get('type') == 'Boom' and e.get('message') == 'bad'
          and 'json.decoder.JSONDecodeError' in (e.get('traceback') or '')
          and 'direct cause' in (e.get('traceback') or ''), 'chained user exception type and cause', e)


@case
def syntax_error():
    out, res, rt, _ = run("x = (")
    e = res.get('error') or {}
    check(res.get('status') == 'error' and e.get('type') == 'SyntaxError' and '<corral>' in (e.get('traceback') or ''),
          'syntax error reported', res)


# --- SystemExit ----------------------------------------------------------
@case
def system_exit():
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
@case
def memory_error_and_sigkill():
    out, res, rt, _ = run("b = bytearray(1 << 62)")
    check(res.get('status') == 'oom' and (res.get('error') or {}).get('type') == 'MemoryError',
          'MemoryError -> oom', res)
    out, res, rt, _ = run("import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)")
    check(res.get('status') == 'killed' and res.get('exit_code') == 137 and res.get('signal') == 9
          and text(out, 'stdout') == 'x\n', 'SIGKILL (no cgroup OOM) -> killed, 137, signal 9', res)


# OOM kills: the cgroup counter file is swapped for one the user code bumps.
@case
def oom_counter():
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
@case
def fork_bomb():
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
@case
def top_level_await():
    out, res, rt, _ = run("import asyncio\nawait asyncio.sleep(0)\nprint('x')")
    check(text(out, 'stdout') == 'x\n' and res.get('status') == 'ok', 'top-level await', (out, res))


# --- preload: pool sandboxes import asyncio ahead, call sandboxes do not ---
@case
def preload():
    probe = "import os, sys\nprint('asyncio' in sys.modules, 'CORRAL_PRELOAD' in os.environ)"
    out, res, rt, _ = run(probe)
    check(text(out, 'stdout') == 'False False\n' and res.get('status') == 'ok',
          "no CORRAL_PRELOAD: asyncio is not imported before the code asks", (out, res))
    out, res, rt, _ = run(probe, env={'CORRAL_PRELOAD': '1'})
    check(text(out, 'stdout') == 'True False\n' and res.get('status') == 'ok',
          'CORRAL_PRELOAD=1: asyncio already imported, and the variable is gone', (out, res))
    out, res, rt, _ = run("import asyncio\nawait asyncio.sleep(0)\n"
                          "print(__name__, sorted(k for k in globals() if not k.startswith('__')))",
                          env={'CORRAL_PRELOAD': '1'})
    check(text(out, 'stdout') == "__main__ ['asyncio', 'call_tool', 'corral', 'list_servers', 'list_tools', "
          "'search_tools', 'tool_docs']\n" and res.get('status') == 'ok',
          'preloaded worker: top-level await, a clean __main__ (the rehearsal left nothing)', (out, res))


# --- page merging: a pool sandbox's worker offers the mappings it holds
# before its call (VmFlags "mg" in smaps), not one the call maps later ----
MERGE_PROBE = """import mmap, os
def marked():
    n = 0
    for line in open('/proc/self/smaps'):
        if line.startswith('VmFlags:') and ' mg' in line:
            n += 1
    return n
before = marked()
m = mmap.mmap(-1, 1 << 20)
m.write(b'x' * (1 << 20))
import sys
fixed = int(open('/proc/self/personality').read(), 16) & 0x40000 != 0
print(before, marked() - before, 'CORRAL_MERGE' in os.environ, fixed, sys.flags.hash_randomization,
      os.environ.get('PYTHONKEPT'), 'PYTHONHASHSEED' in os.environ, sorted(k for k in os.environ if k.startswith('CORRAL_KEPT')))
"""


@case
def merge_heap():
    # The loader starts a merging sandbox again with addresses fixed and
    # hash seed 0 (the heaps then match across sandboxes); the interpreter's
    # PYTHON* variables come back for user code, PYTHONHASHSEED does not.
    env = {'CORRAL_PRELOAD': '1', 'CORRAL_MERGE': '1', 'PYTHONKEPT': 'k'}
    out, res, rt, _ = run(MERGE_PROBE, env=env)
    got = text(out, 'stdout').split()
    check(res.get('status') == 'ok' and len(got) == 8 and int(got[0]) > 0
          and got[1:] == ['0', 'False', 'True', '0', 'k', 'False', '[]']
          and 'page merging:' in rt.err and 'KiB offered, addresses fixed' in rt.err
          and 'page merging (supervisor): ' in rt.err,
          'CORRAL_MERGE=1: addresses fixed, hash seed 0, the worker (and the supervisor) offer their '
          'mappings before the call, not a new one the call makes; the environment as it was; the '
          'log says how much', 
          (out, res, rt.err[-500:]))
    out, res, rt, _ = run(MERGE_PROBE, env={'CORRAL_PRELOAD': '1', 'PYTHONKEPT': 'k'})
    check(text(out, 'stdout') == "0 0 False False 1 k False []\n" and 'page merging' not in rt.err,
          'without CORRAL_MERGE nothing is offered, addresses randomized', (out, res, rt.err[-300:]))
    out, res, rt, _ = run(MERGE_PROBE, env={'CORRAL_MERGE': '1'})
    check(text(out, 'stdout') == '0 0 False True 0 None False []\n' and 'page merging' not in rt.err,
          'a sandbox made for a call (no CORRAL_PRELOAD) offers nothing', (out, res, rt.err[-300:]))


# --- sandbox/memory: the sandbox's PSS as the runtime reads it (the daemon
# cannot read a non-dumpable supervisor's smaps) ---------------------------
@case
def memory_report():
    rt = Runtime({'CORRAL_PRELOAD': '1'})
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 'ask-1', 'method': 'sandbox/memory'})
    _, resp = rt.response('ask-1')
    res = (resp or {}).get('result') or {}
    mine = 0
    for pid in [rt.proc.pid] + [int(p) for p in open('/proc/%d/task/%d/children' % (rt.proc.pid, rt.proc.pid))
                                .read().split()]:
        for line in open('/proc/%d/smaps_rollup' % pid):
            if line.startswith('Pss:'):
                mine += int(line.split()[1])
    rt.close()
    check(isinstance(res.get('pss_kb'), int) and isinstance(res.get('processes'), int)
          and res['processes'] >= 2 and mine * 0.8 <= res['pss_kb'] <= mine * 1.5 + 4096,
          'sandbox/memory: the PSS of the supervisor and its worker (%s kB; read here: %d kB)'
          % (res.get('pss_kb'), mine), resp)


# --- a pool sandbox rehearses an exec in PID 1 before it says ready ------
def minor_faults(pid):
    return int(open('/proc/%d/stat' % pid).read().rsplit(')', 1)[1].split()[7])


@case
def exec_rehearsed():
    faults, kids = {}, {}
    for pooled, env in ((True, {'CORRAL_PRELOAD': '1'}), (False, None)):
        rt = Runtime(env)
        first = rt.ready()
        pid = rt.proc.pid
        kids[pooled] = open('/proc/%d/task/%d/children' % (pid, pid)).read().split()
        before = minor_faults(pid)
        rt.send({'jsonrpc': '2.0', 'id': 1, 'method': 'sandbox/exec',
                 'params': {'language': 'python', 'code': 'print(6 * 7)'}})
        out, resp = rt.response(1)
        faults[pooled] = minor_faults(pid) - before
        rc, err = rt.close()
        res = (resp or {}).get('result') or {}
        ids = [f.get('id') for f in rt.frames if 'id' in f]
        check(first.get('method') == 'sandbox/ready' and text(out, 'stdout') == '42\n'
              and res.get('exit_code') == 0 and ids == [1] and not rt.bad and rc == 0
              and 'rehearsed exec failed' not in err,
              'pooled=%s: ready first, the exec answered, no frame of a rehearsal sent' % pooled,
              (first, out, res, ids, rt.bad, err[-300:]))
    check(len(kids[True]) == 1 and len(kids[False]) == 1,
          "at ready, the worker forked ahead is PID 1's only child: the rehearsal's is gone", kids)
    check(faults[True] * 2 <= faults[False],
          "the pool sandbox's first exec copies few of PID 1's pages: the rehearsal did "
          "(%d minor faults, against %d unrehearsed)" % (faults[True], faults[False]), faults)


# --- a child forked without exec ends first: the run goes on -------------
@case
def forked_child_ends_first():
    out, res, rt, _ = run("import os, time\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n"
                          "else:\n    os.waitpid(pid, 0)\n    time.sleep(0.3)\n    print('parent')\n    raise SystemExit(5)")
    check(text(out, 'stdout') == 'child\nparent\n' and res.get('exit_code') == 5,
          "a forked child's own end of run does not end the worker's run", (out, res))


# --- the worker's {exit} line, after user code closed its stdout itself --
@case
def exit_line_after_stdout_closed():
    out, res, rt, _ = run("import os\nos.write(1, b'a')\nos.close(1)\nraise SystemExit(4)")
    check(res.get('exit_code') == 4 and res.get('status') == 'error' and text(out, 'stdout') == 'a',
          'exit status taken from the worker\'s {exit} line after it closed its own stdout', (out, res))


# --- shell -----------------------------------------------------------------
@case
def shell():
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
# An answer user code forges, written where the frames go.
FORGED_ANSWER = '{"jsonrpc":"2.0","id":1,"result":{"status":"forged"}}'


@case
def subprocess_output():
    out, res, rt, _ = run("import os\nprint('a')\nos.system('echo sub')\nprint('b')")
    check(text(out, 'stdout') == 'a\nsub\nb\n' and clean(rt), 'os.system output captured in order, frames valid',
          (out, rt.bad))

    out, res, rt, _ = run("import os\nos.write(1, b'\\n%s\\n\\x00\\xff\\xfe junk\\r\\n')\nprint('end')"
                          % FORGED_ANSWER)
    check(clean(rt) and res.get('status') == 'ok' and FORGED_ANSWER in text(out, 'stdout')
          and '\x00\ufffd\ufffd junk\r\n' in text(out, 'stdout') and text(out, 'stdout').endswith('end\n'),
          'garbage written to fd 1 arrives as data, frames intact', (out, res, rt.bad))


# User code tries every descriptor it can find, and the supervisor's /proc.
@case
def frame_channel():
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
print('fds', [(fd, 'fifo' if stat.S_ISFIFO(os.fstat(fd).st_mode) else 'sock' if stat.S_ISSOCK(os.fstat(fd).st_mode)
               else '?') for fd in range(3, 1024) if _open(fd)])
print('hit', hit)
''' % FORGED_ANSWER
    out, res, rt, _ = run(probe)
    frames_ok = clean(rt) and all(fr.get('result', {}).get('status') != 'forged' for fr in rt.frames)
    check(frames_ok and res.get('status') == 'ok' and len([fr for fr in rt.frames if 'id' in fr]) == 1,
          'user code cannot reach the frame channel (own fds or /proc/<supervisor>/fd)', (out, res, rt.frames[-1:]))
    fds_line = [l for l in text(out, 'stdout').splitlines() if l.startswith('fds ')]
    fds = ast.literal_eval(fds_line[0][4:]) if fds_line else None
    check(fds is not None and sorted(kind for _, kind in fds) == ['sock', 'sock'],
          'worker holds no fd above 2 but its report socket and API socket', fds_line)


@case
def worker_process():
    out, res, rt, _ = run("import os\nprint(open('/proc/self/oom_score_adj').read().strip())\n"
                          "print(os.getpgid(0) == os.getpid())")
    check(text(out, 'stdout') == '1000\nTrue\n', 'worker: oom_score_adj 1000, own process group', out)


# --- output limits and encoding ----------------------------------------------
@case
def output_limit():
    out, res, rt, _ = run("import sys\nfor i in range(3072):\n    sys.stdout.write('x' * 1023 + '\\n')\n"
                          "sys.stderr.write('e' * 10)", limit=1 << 20)
    so = text(out, 'stdout')
    check(len(so.encode()) == 1 << 20 and so == ('x' * 1023 + '\n') * 1024, 'stdout forwarding stops at the limit',
          len(so))
    check(res.get('stdout_bytes') == 3 * (1 << 20) and res.get('stderr_bytes') == 10 and text(out, 'stderr') == 'e' * 10,
          'true byte counts past the limit', res)
    check(all(len(o['data'].encode()) <= 65536 for o in out) and len(out) >= 16, 'output frames carry <= 64 KiB', len(out))


@case
def output_encoding():
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
@case
def protocol_errors():
    rt = Runtime()
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 7, 'method': 'sandbox/nope'})
    f = rt.frame()
    check(f and f.get('id') == 7 and f.get('error', {}).get('code') == -32601, 'unknown method -> -32601', f)
    # sandbox/freeze and sandbox/thaw were served once (SIGSTOP to the code);
    # files move through sandbox/file/* now and nothing sends them
    gone = []
    for k, m in enumerate(('sandbox/freeze', 'sandbox/thaw')):
        rt.send({'jsonrpc': '2.0', 'id': 'g%d' % k, 'method': m, 'params': {}})
        gone.append(rt.frame())
    check(all(g and g.get('id') == 'g%d' % k and g.get('error', {}).get('code') == -32601
              and m in g['error'].get('message', '')
              for k, (g, m) in enumerate(zip(gone, ('sandbox/freeze', 'sandbox/thaw')))),
          'sandbox/freeze and sandbox/thaw are unknown methods -> -32601', gone)
    rt.send_line(b'this is not json')
    f = rt.frame()
    check(f and f.get('id') is None and 'id' in f and f.get('error', {}).get('code') == -32700,
          'non-JSON line -> -32700', f)
    rt.send_line(b'[' * 200000)
    f = rt.frame()
    check(f and f.get('error', {}).get('code') == -32700, 'deeply nested JSON -> -32700', f)
    rt.send_line(b'{"jsonrpc":"2.0","id":NaN,"method":"sandbox/nope"}')
    f = rt.frame()
    check(f and f.get('id') is None and f.get('error', {}).get('code') == -32700, 'NaN (not JSON) -> -32700', f)
    rt.send_raw(b'\n')
    rt.send_line(b'{"jsonrpc":"2.0","id":8}')
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
    check(rc == 0 and not rt.bad and len(rt.frames) == 12, 'no extra frames (notification unanswered)', rt.frames)


@case
def over_long_frames():
    rt = Runtime(env={'CORRAL_MAX_FRAME': '1000'})  # raised to the 64 KiB minimum
    rt.ready()
    code = 'print("' + 'z' * 65000 + '")'
    rt.send({'jsonrpc': '2.0', 'id': 2, 'method': 'sandbox/exec', 'params': {'language': 'python', 'code': code}})
    out, resp = rt.response(2)
    check(resp and resp.get('result', {}).get('status') == 'ok' and text(out, 'stdout') == 'z' * 65000 + '\n',
          'a frame of nearly the limit, tagged, is taken', (resp, rt.frames[-3:]))
    check(all(len(o['data'].encode()) <= 8192 for o in out) and len(out) >= 8,
          'small CORRAL_MAX_FRAME: output data <= 1/8 of a frame', [len(o['data']) for o in out])
    # A line over the limit cannot be the daemon's (it bounds its own): the
    # runtime says so as soon as it passes the limit, without its newline.
    rt.send_raw(b'x' * 70000)
    f = rt.frame()
    rc, err = rt.close()
    check(f and f.get('method') == 'sandbox/forged' and 'over the frame limit' in f['params'].get('what', '')
          and rc == 1 and not rt.bad, 'an over-long line on stdin: sandbox/forged, tagged, and the runtime ends',
          (f, rc, rt.bad, err[-300:]))


# Every line of the daemon after the key carries its tag, numbered on its
# own (top bit set). A line someone else wrote into the runtime's stdin (under
# gVisor code can reopen /proc/1/fd/0), a replay, one out of order, or one
# with the runtime's own numbering is not acted on: the runtime says
# sandbox/forged, tagged, and ends, with every process.
@case
def daemon_frames_tagged():
    probe = {'jsonrpc': '2.0', 'id': 5, 'method': 'sandbox/list', 'params': {'path': ''}}
    body = json.dumps(probe).encode()

    def forged_by(what, send):
        rt = Runtime()
        rt.ready()
        rt.send({'jsonrpc': '2.0', 'id': 1, 'method': 'sandbox/list', 'params': {'path': ''}})
        first = rt.frame()
        send(rt)
        f = rt.frame()
        rc, err = rt.close()
        check(first and first.get('id') == 1 and f and f.get('method') == 'sandbox/forged' and rc == 1
              and not rt.bad and 'not written by corral' in err,
              '%s: sandbox/forged, nothing answered, the runtime ends' % what, (first, f, rc, rt.bad, err[-300:]))

    forged_by('a bare JSON line', lambda rt: rt.send_raw(body + b'\n'))
    forged_by('a made-up tag', lambda rt: rt.send_raw(b'%064x ' % 1 + body + b'\n'))
    forged_by('upper-case hex of the right tag', lambda rt: rt.send_raw(rt.tagged(body).upper()[:64] + b' ' + body + b'\n'))

    def replay(rt):
        line = rt.tagged(body)
        rt.send_raw(line)
        check(rt.frame() is not None, 'the first copy is answered')
        rt.send_raw(line)
    forged_by('a replayed line', replay)

    def skipped(rt):
        rt.tagged(body)  # a number the runtime never sees
        rt.send_raw(rt.tagged(body))
    forged_by('a line out of order', skipped)

    def runtime_numbering(rt):
        mac = hmac.new(rt.key, rt.out_seq.to_bytes(8, 'big') + body, 'sha256').hexdigest().encode()
        rt.send_raw(mac + b' ' + body + b'\n')
    forged_by('the tag of the runtime\'s direction', runtime_numbering)

    def flipped(rt):
        line = bytearray(rt.tagged(body))
        line[70] ^= 1
        rt.send_raw(bytes(line))
    forged_by('a flipped bit in the JSON', flipped)

    # Data frames (net/data's bytes): the line's tag is checked at once,
    # the bytes' tag (over the line, LF and the bytes) once they are in.
    def data_frame(rt, data=b'x' * 100, head=None, flip=None):
        frame = bytearray(rt.data_frame(1, data, head))
        if flip is not None:
            frame[flip] ^= 1
        rt.send_raw(bytes(frame))
    forged_by('a flipped bit in a data frame\'s bytes', lambda rt: data_frame(rt, flip=-100))
    forged_by('a flipped bit in a data frame\'s second tag', lambda rt: data_frame(rt, flip=-1))
    forged_by('a data frame whose bytes are tagged as a line\'s', lambda rt: rt.send_raw(
        rt.tagged(b'#1 100') + b'x' * 100 + rt.tagged(b'#1 100\n' + b'x' * 100)[:64]))
    forged_by('a bare data frame', lambda rt: rt.send_raw(b'#1 3\nabc'))

    # A forged line announcing a data frame is caught at once, not after
    # the 64 KiB it announces (which may never come).
    def forged_head(rt):
        rt.send_raw(b'%064x #1 65536\n' % 7)
    forged_by('a forged data frame line, its bytes never sent', forged_head)

    # Honest data frames, for no connection, in pieces and between lines: taken in step.
    rt = Runtime()
    rt.ready()
    ok = True
    for k, size in enumerate((1, 7, 65536, 300)):
        # newlines: the bytes are never scanned for lines
        frame = rt.data_frame(k + 1, bytes([10]) * size) + rt.tagged(body)
        for cut in range(0, len(frame), 40000 if size > 1000 else 5):
            rt.send_raw(frame[cut:cut + (40000 if size > 1000 else 5)])
        f = rt.frame()
        ok = ok and f is not None and f.get('id') == 5
    rc, err = rt.close()
    check(ok and rc == 0 and not rt.bad, 'data frames of 1 byte to 64 KiB of newlines, cut anywhere: the lines '
          'after them are taken, in step', (rc, rt.bad, err[-300:]))

    # A running exec's code is killed with the rest.
    rt = Runtime()
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 1, 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': 'import time\nprint("up", flush=True)\ntime.sleep(30)'}})
    up = rt.frame()
    rt.send_raw(body + b'\n')
    f = rt.frame()
    rc, err = rt.close()
    check(up and up.get('method') == 'sandbox/output' and f and f.get('method') == 'sandbox/forged' and rc == 1,
          'during a run: sandbox/forged and the end, no result', (up, f, rc, err[-300:]))



# every frame fits CORRAL_MAX_FRAME, even all control characters or a huge traceback
@case
def frames_fit_max_frame():
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


# The loader: it runs the runtime it was built for, whatever its size, and
# nothing else (a short read, other bytes: one line on stderr, status 70).
@case
def loader():
    big = assemble.pad(SOURCE, 200 * 1024)
    out, res, rt, _ = run('import sys\nprint(sys.argv, __name__)', source=big)
    check(len(big) == 200 * 1024 and res.get('status') == 'ok' and text(out, 'stdout') == "['-c'] __main__\n"
          and clean(rt), 'a runtime padded to 200 KiB is read whole and runs', (res, out, rt.err[-300:]))
    cmd = assemble.loader(big)
    check(len(cmd) < 1024 and str(len(big)) in cmd, 'its loader is %d bytes and embeds its length' % len(cmd))
    for what, data in (('short', SOURCE.encode()[:-1]), ('other', SOURCE.encode()[:-1] + b' '),
                       ('empty', b'')):
        rt = Runtime(runtime=data, key=False)
        if what != 'other':
            rt.stdin.close()
        none = rt.frame(5)
        rc, err = rt.close()
        want = 'short' if what != 'other' else "not this build's"
        check(none is None and rc == 70 and err == 'corral-loader: the runtime on stdin is %s\n' % want,
              'loader: a runtime %s -> nothing runs, exit 70 and why' % what, (none, rc, err[-300:]))
    # The runtime runs as it did as the -c argument: its classes in
    # __main__, its frames named <string>, the loader gone from its globals.
    out, res, rt, _ = run("import gc, sys\nsup = [o for o in gc.get_objects() if type(o).__name__ == 'Supervisor'][0]\n"
                          "g = sup.send.__globals__\n"
                          "print(type(sup).__module__, sup.send.__code__.co_filename, '_l' in g, 'Supervisor' in g)")
    check(text(out, 'stdout') == '__main__ <string> False True\n', 'loader: the runtime runs in __main__, named <string>',
          (out, res))


# The frames' key: every frame after sandbox/ready carries its tag (Runtime
# checks each one); frames before sandbox/key, and a second key, are ignored.
@case
def frame_key():
    rt = Runtime(key=False)
    ready = rt.ready()
    exec_ = {'jsonrpc': '2.0', 'id': 1, 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': 'print(1)'}}
    rt.send(exec_)
    rt.send({'jsonrpc': '2.0', 'id': 2, 'method': 'sandbox/list', 'params': {'path': ''}})
    early = rt.frame(0.5)
    rt.send({'jsonrpc': '2.0', 'method': 'sandbox/key', 'params': {'key': rt.key.hex()}})
    rt.send({'jsonrpc': '2.0', 'method': 'sandbox/key', 'params': {'key': os.urandom(32).hex()}})
    rt.send(dict(exec_, id=3))
    out, resp = rt.response(3)
    rc, err = rt.close()
    check(ready.get('method') == 'sandbox/ready' and early is None,
          'frames before sandbox/key are not acted on or answered', early)
    check(resp and resp['result']['status'] == 'ok' and text(out, 'stdout') == '1\n' and not rt.bad
          and rt.seq == len(rt.frames) - 1 and rc == 0,
          'after the key every frame carries its tag, in order; a second key changes nothing',
          (resp, rt.bad, rt.seq, len(rt.frames)))
    check(err.count('a frame before sandbox/key: ignored') == 2 and 'a second sandbox/key: ignored' in err,
          'both are logged', err[-500:])

    rt = Runtime(key=False)
    rt.ready()
    for bad in ({'key': rt.key.hex().upper()}, {'key': rt.key.hex()[:62]}, {'key': 7}, []):
        rt.send({'jsonrpc': '2.0', 'method': 'sandbox/key', 'params': bad})
    rt.send(exec_)
    none = rt.frame(0.5)
    rc, err = rt.close()
    check(none is None and err.count('a frame before sandbox/key: ignored') == 5,
          'a key that is not 64 lower-case hex digits is no key', (none, err[-500:]))

    # Read in pieces: a long line ahead of the key, the key a byte at a
    # time, an exec right behind it in the same write.
    rt = Runtime(key=False)
    rt.ready()
    rt.send_raw(b'{"x": "' + b'y' * 10000 + b'"}\n')
    line = json.dumps({'jsonrpc': '2.0', 'method': 'sandbox/key', 'params': {'key': rt.key.hex()}}).encode() + b'\n'
    for i in range(len(line) - 1):
        rt.send_raw(line[i:i + 1])
        time.sleep(0.001)
    rt.keyed = True
    rt.send_raw(line[-1:] + rt.tagged(json.dumps(exec_).encode()))
    out, resp = rt.response(1)
    rc, err = rt.close()
    check(resp and resp['result']['status'] == 'ok' and text(out, 'stdout') == '1\n' and not rt.bad and rc == 0
          and err.count('a frame before sandbox/key: ignored') == 1,
          'the key taken in pieces, after a long line, with a frame behind it', (resp, rt.bad, err[-300:]))

    # A worker never holds the key: the one forked ahead was forked before
    # it came; one forked later (a session's replacement) zeroes it at once.
    ses = Session()
    probe = ("import gc\nsup = [o for o in gc.get_objects() if type(o).__name__ == 'Supervisor'][0]\n"
             "print(None if sup.key is None else bytes(sup.key).hex())")
    o1, _, r1, _ = ses.run(probe)
    ses.run('import os\nos._exit(0)')
    o2, _, r2, _ = ses.run(probe)
    key = ses.rt.key.hex()
    check(o1 == 'None\n' and o2 == '00' * 32 + '\n' and r2.get('restarted') is True and key not in o1 + o2,
          'the worker forked ahead has no key; a replacement worker has it zeroed', (o1, o2, r2))
    # Nor anywhere in its memory: not in hex (the key frame as it came,
    # its copies and what they left in freed memory), not in bytes.
    o3, _, r3, _ = ses.run(MEMORY_SCAN % ([key[:32], key[32:]],))
    check(o3 == 'scanned False False\n', "a replacement worker's memory holds the key in no form", (o3, r3))
    end(ses)


# Reads the process's own writable memory (/proc/self/mem) and says
# whether the key's hex digits or its bytes are in it. It gets each in two
# halves, apart, and looks for one half right after the other: no whole
# copy of its own is ever in memory to be found.
MEMORY_SCAN = '''
halves = %r
hx = [h.encode() for h in halves]
raw = [bytes.fromhex(h) for h in halves]
found, total = [False, False], 0
def whole(chunk, a, b):
    at = chunk.find(a)
    while at >= 0:
        if chunk[at + len(a):at + len(a) + len(b)] == b:
            return True
        at = chunk.find(a, at + 1)
    return False
with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', buffering=0) as mem:
    for line in maps.read().splitlines():
        addr, perms = line.split()[:2]
        if not perms.startswith('rw'):
            continue
        lo, hi = (int(x, 16) for x in addr.split('-'))
        try:
            mem.seek(lo)
            chunk = mem.read(hi - lo)
        except (OSError, OverflowError, ValueError):
            continue
        total += len(chunk)
        found = [found[0] or whole(chunk, *hx), found[1] or whole(chunk, *raw)]
        del chunk
print('scanned' if total > 1 << 20 else 'scanned too little', *found)
'''


# stdin closed while an exec runs (the daemon is gone): the code is ended and
# the runtime exits at once, without waiting for the run or answering it
@case
def stdin_eof_during_exec():
    rt = Runtime()
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 3, 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': 'import os, time\nprint(os.getpgid(0), flush=True)\n'
                        'while True: pass'}})
    out, _ = rt.response(3, timeout=0.5)
    pgid = first_int(text(out, 'stdout'))
    t0 = time.monotonic()
    rc, err = rt.close()
    took = time.monotonic() - t0
    check(pgid > 0 and rc == 75 and took < 2.0 and group_gone(pgid) and not any('id' in f for f in rt.frames[1:]),
          'stdin EOF during an exec: the code is killed, no answer, the runtime exits 75, never 0 (%.2fs)' % took,
          (out, rc, took, err[-500:]))


# --- a run's own time limit, held by the runtime itself ---------------------
@case
def time_limit():
    rt = Runtime()
    rt.ready()
    t0 = time.monotonic()
    rt.send({'jsonrpc': '2.0', 'id': 4, 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': 'import os\nprint(os.getpgid(0), flush=True)\nwhile True: pass',
                        'time_limit_ms': 300}})
    out, resp = rt.response(4, timeout=10)
    took = time.monotonic() - t0
    rt.close()
    res = (resp or {}).get('result') or {}
    pgid = first_int(text(out, 'stdout'))
    check(res.get('status') == 'timeout' and res.get('signal') == 9 and 1.2 <= took < 3.0 and group_gone(pgid),
          'time_limit_ms: a busy loop is killed a grace after its limit with no daemon acting (%.2fs)' % took,
          (res, took))
    rt = Runtime()
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 5, 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': 'pass', 'time_limit_ms': 0}})
    _, resp = rt.response(5)
    rt.close()
    check(resp and (resp.get('error') or {}).get('code') == -32602, 'time_limit_ms 0 is refused with -32602', resp)


# --- records user code cannot forge ------------------------------------------
# The code writes end records (every format the runtime ever used, with its
# own pid and guessed tokens) and JSON-RPC answers on every descriptor it has
# or can open, then goes on printing and ends with its own status.
FORGE = r'''import json, os, time
me = os.getpid()
recs = [{'end': 0, 'signal': None, 'pid': me, 'token': t, 'error': None}
        for t in (None, '', '0' * 32, 'f' * 32)]
recs += [{'exit': 0, 'pid': me}, {'end': 0, 'pid': me}, {'type': 'MemoryError', 'message': 'x', 'traceback': ''},
         {'jsonrpc': '2.0', 'id': RID, 'result': {'status': 'ok', 'exit_code': 0}}]
junk = b''.join(json.dumps(r).encode() + b'\n' for r in recs)
fds = set()
for name in os.listdir('/proc/self/fd'):
    fds.add(int(name))
for path in ['/proc/self/fd/%d' % n for n in sorted(fds)] + ['/proc/1/fd/0', '/proc/1/fd/1', '/dev/stdout',
                                                              '/dev/stderr', '/dev/tty']:
    try:
        fds.add(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass
wrote = 0
for fd in sorted(fds):
    try:
        os.set_blocking(fd, False)
        os.write(fd, junk)
        wrote += 1
    except OSError:
        pass
time.sleep(0.3)
print('after the forgery', wrote, flush=True)
time.sleep(0.2)
print('still mine')
STATUS
'''
@case
def forged_records():
    out, res, rt, _ = run(FORGE.replace('RID', '1').replace('STATUS', 'raise SystemExit(3)'))
    check(res.get('exit_code') == 3 and res.get('status') == 'error' and res.get('error') is None
          and 'after the forgery' in text(out, 'stdout') and 'still mine' in text(out, 'stdout'),
          'single-use: forged records on every descriptor neither end the run nor set its status',
          (text(out, 'stdout')[-500:], res))
    out, res, rt, _ = run(FORGE.replace('RID', '1').replace('STATUS', 'raise ValueError("real")'))
    check(res.get('status') == 'error' and (res.get('error') or {}).get('type') == 'ValueError'
          and (res.get('error') or {}).get('message') == 'real' and 'still mine' in text(out, 'stdout'),
          'single-use: a forged error record is not the error the code raised', res)


# --- MCP bridge: the worker's `corral` API, relayed through the supervisor ---
# A fake daemon answers the requests the runtime forwards: servers/list,
# tools/list and tools/call of three servers (one of which cannot start).
PNG = b'\x89PNG\r\n\x1a\n' + bytes(range(256))
WAV = b'RIFF\x00\x01fake wav'
SERVERS = [{'name': 'fake', 'alias': 'fake'}, {'name': 'my-tools', 'alias': 'my_tools'},
           {'name': 'broken', 'alias': 'broken'}]
TOOLS = {
    'fake': [
        {'name': 'echo', 'description': 'Echoes its arguments back as JSON text.',
         'inputSchema': {'type': 'object', 'properties': {'text': {'type': 'string'}}}},
        {'name': 'picture', 'description': 'Returns a tiny picture and a sound.',
         'inputSchema': {'type': 'object', 'properties': {}}},
        {'name': 'fail', 'description': 'Always reports an error.', 'inputSchema': {'type': 'object'}},
        {'name': 'slow', 'description': 'Never answers.', 'inputSchema': {'type': 'object'}}],
    'my-tools': [
        {'name': 'get-sum', 'description': 'Returns the sum of two numbers.',
         'inputSchema': {'type': 'object', 'properties': {
             'a': {'type': 'number', 'description': 'First number'},
             'b': {'type': 'number', 'description': 'Second number'},
             'round': {'type': 'boolean', 'default': False},
             'tags': {'type': 'array', 'items': {'type': 'string'}}}, 'required': ['a', 'b']}},
        {'name': 'reverse', 'description': 'Reverses a text.',
         'inputSchema': {'type': 'object', 'properties': {'text': {'type': 'string'}}, 'required': ['text']}}],
}
ERROR_CODES = {'PolicyDenied': -32001, 'ServerUnavailable': -32002, 'Timeout': -32003, 'TooLarge': -32004,
               'TooManyCalls': -32005, 'ToolNotFound': -32006, 'ProtocolError': -32600,
               'InvalidParams': -32602, 'Weird': -32099}


def b64(data):
    import base64
    return base64.b64encode(data).decode()


def fake_call(p):
    name, args = p.get('name'), p.get('arguments') or {}
    text = lambda t: {'type': 'text', 'text': t}
    if name == 'echo':
        return {'result': {'content': [text(json.dumps(args, sort_keys=True))]}}
    if name in ('get-sum', 'get_sum'):  # the daemon's name resolution
        return {'result': {'content': [text(str(args['a'] + args['b']))],
                           'structuredContent': {'sum': args['a'] + args['b']}}}
    if name == 'picture':
        return {'result': {'content': [
            text('a picture'), {'type': 'image', 'data': b64(PNG), 'mimeType': 'image/png'},
            {'type': 'audio', 'data': b64(WAV), 'mimeType': 'audio/wav'},
            {'type': 'resource', 'resource': {'uri': 'file:///x', 'text': 'x'}}, text('and a sound')],
            'structuredContent': {'width': 1}}}
    if name == 'fail':
        return {'result': {'content': [text('it broke')], 'isError': True}}
    if name == 'err_nodata':
        return {'error': {'code': -32002, 'message': 'no data'}}
    if name.startswith('err_'):
        kind = name[4:]
        return {'error': {'code': ERROR_CODES[kind], 'message': 'fake %s' % kind, 'data': {'type': kind}}}
    return {'error': {'code': -32006, 'message': 'no tool %s' % name, 'data': {'type': 'ToolNotFound'}}}


def fake_daemon(f):
    """The answer (result or error) to a forwarded request; None: never answered."""
    m, p = f['method'], f.get('params') or {}
    if m == 'servers/list':
        return {'result': {'servers': [dict(s, description='the %s server' % s['name'], status='idle',
                                             tools=None, error=None) for s in SERVERS]}}
    if m == 'tools/list':
        if p.get('server') == 'broken':
            return {'error': {'code': -32002, 'message': 'broken: exec failed',
                              'data': {'type': 'ServerUnavailable'}}}
        return {'result': {'tools': TOOLS.get(p.get('server'), [])}}
    if m == 'tools/call':
        return None if p.get('name') == 'slow' else fake_call(p)
    return {'error': {'code': -32601, 'message': 'method not found', 'data': {'type': 'MethodNotFound'}}}


def answer_each(f, requests, rt):
    if 'id' not in f:
        return []
    a = fake_daemon(f)
    return [] if a is None else [dict({'jsonrpc': '2.0', 'id': f['id']}, **a)]


def bridge(code, servers=SERVERS, answer=answer_each, env=None, language='python', before=None, timeout=10):
    """Runs code with a fake daemon answering: (outputs, result, requests, runtime)."""
    rt = Runtime(env)
    rt.ready()
    if before:
        before(rt)
    rt.send({'jsonrpc': '2.0', 'id': 'exec', 'method': 'sandbox/exec',
             'params': {'language': language, 'code': code, 'servers': servers}})
    outputs, requests, resp = [], [], None
    while True:
        f = rt.frame(timeout)
        if f is None:
            break
        if f.get('method') == 'sandbox/output':
            outputs.append(f['params'])
        elif 'method' in f:
            requests.append(f)
            for reply in answer(f, requests, rt):
                rt.send(reply)
        elif f.get('id') == 'exec':
            resp = f
            break
    rt.rc, rt.err = rt.close()
    return outputs, (resp or {}).get('result') or {}, requests, rt


def calls(requests, method='tools/call'):
    return [r.get('params') for r in requests if r.get('method') == method]


# API present but unused: no thread, no request, globals in place
@case
def bridge_idle():
    out, res, reqs, rt = bridge("import sys, threading\nprint('corral' in sys.modules, threading.active_count())\n"
                                "print(sorted(k for k in globals() if not k.startswith('__')))")
    check(text(out, 'stdout') == "True 1\n['call_tool', 'corral', 'list_servers', 'list_tools', 'mcp_broken', 'mcp_fake', "
          "'mcp_my_tools', 'search_tools', 'sys', 'threading', 'tool_docs']\n" and not reqs and clean(rt),
          'bridge: API installed but idle (module, globals, no thread, no request)', (out, reqs, rt.err))


# `corral` is a global: no import needed for progress or the exception classes
@case
def bridge_corral_global():
    code = '''import sys
print(corral is sys.modules['corral'])
corral.progress(1, 1)
try:
    call_tool('fake', 'err_PolicyDenied')
except corral.PolicyDenied as e:
    print('denied', e.type)
'''
    out, res, reqs, rt = bridge(code)
    prog = [r['params'] for r in reqs if r.get('method') == 'corral/progress']
    check(text(out, 'stdout') == 'True\ndenied PolicyDenied\n' and prog == [{'progress': 1, 'total': 1}]
          and res.get('status') == 'ok' and clean(rt),
          'bridge: corral.progress() and corral.PolicyDenied without an import', (out, res, reqs))


# a call without a running loop blocks and returns a ToolResult
@case
def bridge_sync_call():
    out, res, reqs, rt = bridge("import corral\nr = mcp_fake.echo(text='hi')\n"
                                "print(type(r).__name__, isinstance(r, corral.ToolResult), r.text, str(r) == r.text,\n"
                                "      r.is_error, r.structured, r.content)")
    check(text(out, 'stdout') == 'ToolResult True {"text": "hi"} True False None [TextContent(\'{"text": "hi"}\')]\n'
          and calls(reqs) == [{'server': 'fake', 'name': 'echo', 'arguments': {'text': 'hi'}}]
          and isinstance(reqs[0].get('id'), (int, str)) and res.get('status') == 'ok' and clean(rt),
          'bridge: sync call returns a ToolResult', (out, reqs, res))


# with a running loop: PendingCall to await; `await` of anything the API returns works
@case
def bridge_await():
    code = '''import asyncio, corral
p = mcp_fake.echo(text='a')
print(type(p).__name__, isinstance(p, corral.PendingCall))
r = await p
print(type(r).__name__, r.text, (await r) is r)
print((await corral.call_tool('fake', 'echo', {'text': 'b'})).text)
print(mcp_fake.echo(text='c').text)
print(len(await list_servers()), len(list_servers()), (await tool_docs('fake', 'echo')).split()[0])
def in_thread():  # no loop in that thread: a blocking call
    return mcp_fake.echo(text='d')
r = await asyncio.get_running_loop().run_in_executor(None, in_thread)
print(type(r).__name__, r.text)
'''
    out, res, reqs, rt = bridge(code)
    check(text(out, 'stdout') == 'PendingCall True\nToolResult {"text": "a"} True\n{"text": "b"}\n{"text": "c"}\n'
          '3 3 echo\nToolResult {"text": "d"}\n' and res.get('status') == 'ok',
          'bridge: await works (PendingCall, ToolResult, lists, other threads)', (out, res))


@case
def bridge_gather():
    def answer_gathered(f, requests, rt):
        """Holds tools/call until 20 are in flight, then answers all, last first."""
        if f.get('method') != 'tools/call':
            return answer_each(f, requests, rt)
        pending = [r for r in requests if r.get('method') == 'tools/call']
        if len(pending) < 20:
            return []
        return [dict({'jsonrpc': '2.0', 'id': r['id']}, **fake_daemon(r)) for r in reversed(pending)]

    code = '''import asyncio
async def one(i):
    r = await mcp_fake.echo(text=str(i))
    return r.text
texts = await asyncio.gather(*[one(i) for i in range(20)])
print(texts == ['{"text": "%d"}' % i for i in range(20)])
'''
    out, res, reqs, rt = bridge(code, answer=answer_gathered)
    ids = [r.get('id') for r in reqs]
    check(text(out, 'stdout') == 'True\n' and len(calls(reqs)) == 20 and len(set(ids)) == 20 and clean(rt),
          'bridge: 20 calls under asyncio.gather in flight at once, routed by id', (out, reqs, rt.err))


@case
def bridge_content():
    code = '''import corral
r = mcp_fake.picture()
img = r.images[0]
print(type(img).__name__, isinstance(img, corral.ImageContent), img.mime_type, img.data == %r)
snd = r.content[2]
print(type(snd).__name__, snd.mime_type, snd.data == %r)
print([type(c).__name__ for c in r.content], r.content[3]['resource']['uri'], r.structured)
print(repr(r.text))
''' % (PNG, WAV)
    out, res, reqs, rt = bridge(code)
    check(text(out, 'stdout') == "ImageContent True image/png True\nAudioContent audio/wav True\n"
          "['TextContent', 'ImageContent', 'AudioContent', 'dict', 'TextContent'] file:///x {'width': 1}\n"
          "'a picture\\nand a sound'\n", 'bridge: image/audio content decoded to bytes with mime type', (out, res))


@case
def bridge_tool_error():
    code = '''import corral
try:
    mcp_fake.fail(why='x')
except corral.ToolError as e:
    print(type(e).__name__, e, e.result.is_error, e.result.text, e.server, e.tool, isinstance(e, corral.McpError))
mcp_fake.fail()
'''
    out, res, reqs, rt = bridge(code)
    e = res.get('error') or {}
    tb = e.get('traceback') or ''
    check(text(out, 'stdout') == 'ToolError it broke True it broke fake fail True\n'
          and e.get('type') == 'corral.ToolError' and e.get('message') == 'it broke',
          'bridge: isError -> corral.ToolError (.result, uncaught: type corral.ToolError)', (out, res))
    check(tb.count('File "') == 1 and 'File "<corral>", line 6, in <module>' in tb and '<string>' not in tb,
          'bridge: traceback ends at the user line calling the API', tb)


@case
def bridge_error_classes():
    code = '''import corral
for kind in ['PolicyDenied', 'ServerUnavailable', 'Timeout', 'TooLarge', 'TooManyCalls', 'ToolNotFound',
             'ProtocolError', 'InvalidParams', 'Weird', 'nodata']:
    try:
        call_tool('fake', 'err_' + kind)
    except corral.McpError as e:
        print(kind, type(e).__name__, e.code, e.type, e.server, e.tool, e)
try:
    mcp_fake.err_Timeout()
except TimeoutError as e:
    print('TimeoutError catches', type(e).__name__)
'''
    out, res, reqs, rt = bridge(code)
    want = '''PolicyDenied PolicyDenied -32001 PolicyDenied fake err_PolicyDenied fake PolicyDenied
ServerUnavailable ServerUnavailable -32002 ServerUnavailable fake err_ServerUnavailable fake ServerUnavailable
Timeout ToolTimeout -32003 Timeout fake err_Timeout fake Timeout
TooLarge TooLarge -32004 TooLarge fake err_TooLarge fake TooLarge
TooManyCalls TooManyCalls -32005 TooManyCalls fake err_TooManyCalls fake TooManyCalls
ToolNotFound ToolNotFound -32006 ToolNotFound fake err_ToolNotFound fake ToolNotFound
ProtocolError ProtocolError -32600 ProtocolError fake err_ProtocolError fake ProtocolError
InvalidParams McpError -32602 InvalidParams fake err_InvalidParams fake InvalidParams
Weird McpError -32099 Weird fake err_Weird fake Weird
nodata ServerUnavailable -32002 ServerUnavailable fake err_nodata no data
TimeoutError catches ToolTimeout
'''
    check(text(out, 'stdout') == want, 'bridge: error data.type -> exception class (code when no type)',
          (text(out, 'stdout'), text(out, 'stderr')))


# Malformed frames from user code, answered by the supervisor: corral._raw_request
# returns the response dict (the one with its id, else the next with id null).
@case
def bridge_malformed_frames():
    code = '''import corral, json
def show(x, **kw):
    r = corral._raw_request(x, **kw)
    print(json.dumps(r and (r.get('id'), r.get('error', {}).get('code'), r.get('error', {}).get('data'),
                            'result' in r)))
show(b'this is not json\\n')
show(b'[1, 2]\\n')
show(b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}\\n')
show(b'{"jsonrpc":"2.0","id":NaN,"method":"tools/list"}\\n')
show(b'{"jsonrpc":"2.0","id":"inf","method":"tools/call","params":{"x":1e400}}\\n')
show({'jsonrpc': '2.0', 'id': 's1', 'method': 'sandbox/exec', 'params': {}})
show({'jsonrpc': '2.0', 'id': 's2', 'result': {}})
show({'jsonrpc': '2.0', 'method': 'notifications/other'}, timeout=0.3)
show({'jsonrpc': '2.0', 'id': 's3', 'method': 'tools/list', 'params': {'server': 'fake'}, 'extra': 1})
try:
    corral.call_tool('fake', 'echo', {'bad': float('nan')})
except ValueError:
    print('NaN refused')
print(mcp_fake.echo(text='still').text)
'''
    out, res, reqs, rt = bridge(code)
    PE = {'type': 'ProtocolError'}
    want = [[None, -32700, PE, False], [None, -32600, PE, False], [None, -32600, PE, False],
            [None, -32700, PE, False], ['inf', -32600, PE, False], ['s1', -32600, PE, False],
            ['s2', -32600, PE, False], None, ['s3', None, None, True]]
    lines = text(out, 'stdout').splitlines()
    check([json.loads(l) for l in lines[:9]] == want and lines[9:] == ['NaN refused', '{"text": "still"}'],
          'bridge: malformed worker frames answered -32700/-32600 (ProtocolError), worker keeps going',
          (lines, text(out, 'stderr')))
    check([r.get('method') for r in reqs] == ['tools/list', 'tools/call'] and reqs[0] == {
          'jsonrpc': '2.0', 'id': 's3', 'method': 'tools/list', 'params': {'server': 'fake'}} and clean(rt),
          'bridge: only requests reach the daemon, re-encoded (no sandbox/*, responses, other notifications)', reqs)


@case
def bridge_api_socket():
    out, res, reqs, rt = bridge("ls /proc/self/fd", language='shell')
    check(text(out, 'stdout') == '0\n1\n2\n3\n' and res.get('status') == 'ok',
          'bridge: a shell run holds no API socket (ls sees 0-2 and its own dir fd)', out)
    out, res, reqs, rt = bridge("import os\nmcp_fake.echo()\nos.system('ls /proc/self/fd')")
    check(text(out, 'stdout') == '0\n1\n2\n3\n' and len(calls(reqs)) == 1,
          'bridge: the API socket is close-on-exec (os.system after a call)', out)


@case
def bridge_lists():
    code = '''import json
print(json.dumps([(s['name'], s['alias'], s['status']) for s in list_servers()]))
print(json.dumps(list_tools('my_tools')))
print(json.dumps(search_tools('SUM')))
print(json.dumps(search_tools('text', limit=2)))
print(json.dumps([t['name'] for t in search_tools('')]))
print(json.dumps(search_tools('get_sum')))
print('---')
print(tool_docs('my-tools', 'get_sum'))
'''
    out, res, reqs, rt = bridge(code)
    so = text(out, 'stdout')
    head, _, docs = so.partition('---\n')
    head = [json.loads(l) for l in head.splitlines()]
    gs = {'server': 'my-tools', 'name': 'get-sum', 'description': 'Returns the sum of two numbers.'}
    check(head == [
        [['fake', 'fake', 'idle'], ['my-tools', 'my_tools', 'idle'], ['broken', 'broken', 'idle']],
        [{'name': 'get-sum', 'description': 'Returns the sum of two numbers.'},
         {'name': 'reverse', 'description': 'Reverses a text.'}],
        [gs],
        [{'server': 'fake', 'name': 'echo', 'description': 'Echoes its arguments back as JSON text.'},
         {'server': 'my-tools', 'name': 'reverse', 'description': 'Reverses a text.'}],
        ['echo', 'picture', 'fail', 'slow', 'get-sum', 'reverse'],
        [gs]], 'bridge: list_servers, list_tools, search_tools', (so, text(out, 'stderr')))
    check('corral: search_tools: skipped server broken: broken: exec failed\n' == text(out, 'stderr')
          and [p['server'] for p in calls(reqs, 'tools/list')].count('my-tools') == 1
          and [p['server'] for p in calls(reqs, 'tools/list')].count('broken') == 4,
          'bridge: search_tools skips an unavailable server (noted once), asks it again; tools/list cached',
          (text(out, 'stderr'), reqs))
    want = '''get-sum (server my-tools)

Returns the sum of two numbers.

Call: mcp_my_tools.get_sum(a=..., b=...)

Parameters:
  a (number, required): First number
  b (number, required): Second number
  round (boolean, optional, default false)
  tags (array of string, optional)

Input schema:
''' + json.dumps(TOOLS['my-tools'][0]['inputSchema'], indent=2) + '\n'
    check(docs == want, 'bridge: tool_docs text', docs)


@case
def bridge_alias():
    code = '''print(mcp_my_tools.get_sum(a=2, b=3).text, mcp_my_tools.get_sum({'a': 1}, b=1).structured)
print(call_tool('my_tools', 'get-sum', {'a': 1, 'b': 2}).text)
print(repr(mcp_my_tools), repr(mcp_my_tools.get_sum))'''
    out, res, reqs, rt = bridge(code)
    check(text(out, 'stdout') == "5 {'sum': 2}\n3\n<MCP server my-tools: mcp_my_tools.<tool>(**arguments)> "
          "<MCP tool my-tools.get_sum>\n"
          and calls(reqs) == [{'server': 'my-tools', 'name': 'get_sum', 'arguments': {'a': 2, 'b': 3}},
                              {'server': 'my-tools', 'name': 'get_sum', 'arguments': {'a': 1, 'b': 1}},
                              {'server': 'my-tools', 'name': 'get-sum', 'arguments': {'a': 1, 'b': 2}}],
          'bridge: mcp_<alias>.<attr> sends the server name and the attribute as written', (out, reqs))


# cancellation: asyncio.wait_for withdraws the call; .result(timeout) raises ToolTimeout
@case
def bridge_cancel():
    code = '''import asyncio, corral
try:
    await asyncio.wait_for(mcp_fake.slow(), 0.2)
except asyncio.TimeoutError:
    print('wait_for timed out')
p = mcp_fake.slow()
try:
    p.result(timeout=0.1)
except corral.ToolTimeout as e:
    print('ToolTimeout', isinstance(e, TimeoutError), p.done())
print(p.cancel(), p.done(), mcp_fake.echo(text='after').text)
'''
    out, res, reqs, rt = bridge(code)
    slow = [r['id'] for r in reqs if r.get('method') == 'tools/call' and r['params']['name'] == 'slow']
    cancelled = [r['params'] for r in reqs if r.get('method') == 'notifications/cancelled']
    check(text(out, 'stdout') == 'wait_for timed out\nToolTimeout True False\nTrue True {"text": "after"}\n'
          and len(slow) == 2 and cancelled == [{'requestId': slow[0]}, {'requestId': slow[1]}]
          and all('id' not in r for r in reqs if r.get('method') == 'notifications/cancelled'),
          'bridge: cancelled calls send notifications/cancelled with their id', (out, reqs))


# corral.progress(): relayed as corral/progress notifications, throttled
@case
def progress():
    code = '''import corral, time
corral.progress(1, 10, 'one')
corral.progress(2, 10, 'dropped: within 20 ms')
corral.progress(10, 10, 'final: always sent')
time.sleep(0.05)
corral.progress(11, message='x' * 5000)
try:
    corral.progress(float('nan'))
except TypeError as e:
    print('TypeError')
'''
    out, res, reqs, rt = bridge(code)
    prog = [r for r in reqs if r.get('method') == 'corral/progress']
    check(text(out, 'stdout') == 'TypeError\n' and res.get('status') == 'ok'
          and [r['params'] for r in prog[:3]] == [{'progress': 1, 'total': 10, 'message': 'one'},
                                                  {'progress': 10, 'total': 10, 'message': 'final: always sent'},
                                                  {'progress': 11, 'message': 'x' * 1000}]
          and len(prog) == 3 and all('id' not in r for r in prog),
          'corral.progress(): notifications to the daemon, throttled, message capped, NaN refused',
          (out, res, prog))


# responses nobody waits for: before the exec, and after the worker ended
# (a background sleep holds its pipes, so the runtime is still draining)
@case
def bridge_late_responses():
    late = json.dumps({'jsonrpc': '2.0', 'id': 'late', 'method': 'tools/call',
                       'params': {'server': 'fake', 'name': 'echo', 'arguments': {}}})

    def answer_late(f, requests, rt):
        if f.get('id') == 'late':
            time.sleep(0.1)  # the worker has exited by now
        return answer_each(f, requests, rt)

    out, res, reqs, rt = bridge("import os, corral\nos.system('sleep 1 &')\ncorral._raw_send(%r)" % (late + '\n').encode(),
                                answer=answer_late,
                                before=lambda rt: rt.send({'jsonrpc': '2.0', 'id': 99, 'result': {}}))
    check(res.get('status') == 'ok' and [r.get('id') for r in reqs] == ['late'] and clean(rt)
          and 'Traceback' not in rt.err and not any(f.get('id') == 99 for f in rt.frames),
          'bridge: daemon responses without a worker to take them are dropped', (res, reqs, rt.err))


# an over-long line from user code: -32600 (id null) as it passes max_frame
@case
def bridge_over_long_line():
    code = '''import corral, json
r1 = corral._raw_request(b'{"a":"' + b'x' * 70000 + b'"}\\n')
r2 = corral._raw_request(b'y' * 70000)
r3 = corral._raw_request(b'z\\n{"jsonrpc":"2.0","id":"ok","method":"servers/list","params":{}}\\n')
print(json.dumps([(r['id'], r['error']['code']) for r in (r1, r2)]), r3['id'], len(r3['result']['servers']))
try:
    mcp_fake.echo(text='z' * 70000)
except corral.TooLarge as e:
    print('TooLarge', e.type, e.tool)
'''
    out, res, reqs, rt = bridge(code, env={'CORRAL_MAX_FRAME': '65536'})
    check(text(out, 'stdout') == '[[null, -32600], [null, -32600]] ok 3\nTooLarge TooLarge echo\n'
          and [r.get('id') for r in reqs] == ['ok'] and clean(rt),
          'bridge: over-long worker line -> -32600 (id null), stream resyncs; API refuses big requests',
          (out, reqs, rt.err))


# A worker that floods requests and never reads: PID 1's queue toward it stays bounded.
@case
def bridge_flood():
    flood = 300
    big = 'b' * 60000
    hwm = {}

    def rss(pid, key):
        with open('/proc/%d/status' % pid) as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])  # kB
        return 0

    def answer_big(f, requests, rt):
        if f.get('id') == 'done':
            time.sleep(0.3)  # let it take in all the big answers
            hwm['after'] = rss(rt.proc.pid, 'VmHWM')
        return [{'jsonrpc': '2.0', 'id': f['id'], 'result': {'content': [{'type': 'text', 'text': big}]}}]

    code = '''import os, socket, stat, time


def api_socket(f):  # the report socket is a socket too, but one that cannot receive (EOF)
    try:
        socket.socket(fileno=os.dup(f)).recv(1, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        pass
    return False


fd = [f for f in range(3, 64) if os.path.exists('/proc/self/fd/%%d' %% f) and stat.S_ISSOCK(os.fstat(f).st_mode)
      and api_socket(f)][0]
for i in range(%d):
    os.write(fd, b'{"jsonrpc":"2.0","id":%%d,"method":"tools/call","params":{}}\\n' %% i)
time.sleep(0.5)
os.write(fd, b'{"jsonrpc":"2.0","id":"done","method":"tools/call","params":{}}\\n')
time.sleep(0.5)
''' % flood
    out, res, reqs, rt = bridge(code, answer=answer_big, env={'CORRAL_MAX_FRAME': '65536'},
                                before=lambda rt: hwm.__setitem__('before', rss(rt.proc.pid, 'VmRSS')))
    grew = hwm.get('after', 1 << 30) - hwm.get('before', 0)
    check(res.get('status') == 'ok' and len(reqs) == flood + 1 and grew < 6000 and clean(rt)
          and 'dropping frames toward it' in rt.err and 'frames toward the worker (queue full)' in rt.err,
          'bridge: a flooding worker that never reads: PID 1 grew %d kB (answers %d kB)' % (grew, flood * 60),
          (res, len(reqs), hwm, rt.err[-500:]))


# a daemon frame whose id is not JSON once parsed (1e400 -> inf): answered with id null
@case
def daemon_id_inf():
    rt = Runtime()
    rt.ready()
    rt.send_line(b'{"jsonrpc":"2.0","id":1e400,"method":"sandbox/nope"}')
    f = rt.frame()
    rt.send({'jsonrpc': '2.0', 'id': 2, 'method': 'sandbox/nope'})
    f2 = rt.frame()
    rc, err = rt.close()
    check(f and f.get('id') is None and f.get('error', {}).get('code') == -32600 and f2 and f2.get('id') == 2
          and rc == 0, 'id 1e400 from the daemon -> -32600 with id null, runtime keeps going', (f, f2, err))


# exec params: servers checked
@case
def bridge_servers_params():
    rt = Runtime()
    rt.ready()
    bad = [{'name': 'x'}, [{'name': 'x', 'alias': '1x'}], [{'name': 'x', 'alias': 'a-b'}], [{'alias': 'x'}],
           [{'name': '', 'alias': 'x'}], [{'name': 'a', 'alias': 'x'}, {'name': 'b', 'alias': 'x'}], ['x'],
           [{'name': 'a', 'alias': 'a'}, {'name': 'a', 'alias': 'b'}]]
    for i, servers in enumerate(bad):
        rt.send({'jsonrpc': '2.0', 'id': i, 'method': 'sandbox/exec',
                 'params': {'language': 'python', 'code': 'print(1)', 'servers': servers}})
    got = [rt.frame() for _ in bad]
    rt.send({'jsonrpc': '2.0', 'id': 'ok', 'method': 'sandbox/exec', 'params': {
        'language': 'python', 'code': 'print(mcp__9x)', 'servers': [{'name': '9x', 'alias': '_9x'}]}})
    out, resp = rt.response('ok')
    rt.close()
    check(all(f and f.get('id') == i and f.get('error', {}).get('code') == -32602 for i, f in enumerate(got))
          and text(out, 'stdout') == '<MCP server 9x: mcp__9x.<tool>(**arguments)>\n',
          'bridge: malformed servers params -> -32602', (got, out))


# --- sessions: "keep" leaves the worker waiting with its globals -----------
_workspace = []


def workspace():
    """The /workspace of the session runtimes: one directory for the whole
    run (as the original single script had), made on first use."""
    if not _workspace:
        ws = tempfile.mkdtemp(prefix='corral-ws-')
        os.chmod(ws, 0o1777)
        _workspace.append(ws)
    return _workspace[0]


class Session:
    """One runtime serving several execs with keep (as a session sandbox)."""

    def __init__(self, env=None):
        self.rt = Runtime(dict({'CORRAL_WORKSPACE': workspace()}, **(env or {})))
        self.rt.ready()
        self.rid = 0

    def send_exec(self, code, language='python', keep=True, servers=None, **extra):
        self.rid += 1
        params = dict({'language': language, 'code': code, 'keep': keep}, **extra)
        if servers is not None:
            params['servers'] = servers
        self.rt.send({'jsonrpc': '2.0', 'id': self.rid, 'method': 'sandbox/exec', 'params': params})
        return self.rid

    def run(self, code, language='python', timeout=10.0, **kw):
        """(stdout, stderr, result, seconds)"""
        t0 = time.monotonic()
        rid = self.send_exec(code, language, **kw)
        out, resp = self.rt.response(rid, timeout)
        return text(out, 'stdout'), text(out, 'stderr'), (resp or {}).get('result') or {}, time.monotonic() - t0

    def cancel(self, rid):
        self.rt.send({'jsonrpc': '2.0', 'method': 'notifications/cancelled', 'params': {'requestId': rid}})

    def interrupted(self, code, language='python', stray=False):
        """Runs code, cancels it once its first output came (so it has got
        that far; after a cancel for another id when stray): (outputs,
        result, seconds from the cancel)."""
        rid = self.send_exec(code, language)
        early = []
        while not early:  # bounded: frame() gives None after 10 s
            f = self.rt.frame(10)
            if f is None or f.get('id') == rid:
                return early, ((f or {}).get('result') or {'status': 'ended before its output'}), 0.0
            if f.get('method') == 'sandbox/output':
                early.append(f['params'])
        t0 = time.monotonic()
        if stray:
            self.cancel(rid + 100)  # not the running exec: ignored
        self.cancel(rid)
        out, resp = self.rt.response(rid, 10)
        return early + out, (resp or {}).get('result') or {}, time.monotonic() - t0

    def request(self, method, params, rid='r'):
        self.rt.send({'jsonrpc': '2.0', 'id': rid, 'method': method, 'params': params})
        return self.rt.response(rid)[1]

    def close(self):
        return self.rt.close()


def end(ses):
    """Closes a session a case is done with.  Its runtime must exit 0 having
    sent nothing but JSON frames, as 'session: stdin EOF while idle ends the
    runtime with 0' checks for its own session; a case whose session does not
    raises, which counts as a failed point."""
    rc, err = ses.close()
    if rc != 0 or ses.rt.bad:
        raise AssertionError('the session runtime exited %r; non-JSON lines: %r\n%s' % (rc, ses.rt.bad, err[-800:]))


@case
def session_state():
    ses = Session()
    o1, _, r1, _ = ses.run("x = 41\nimport json\nprint('one')")
    o2, _, r2, _ = ses.run("print(x + 1, 'json' in globals())")
    check(o1 == 'one\n' and r1.get('status') == 'ok' and r1.get('state') == 'kept' and r1.get('restarted') is False
          and o2 == '42 True\n' and r2.get('status') == 'ok' and r2.get('state') == 'kept',
          'session: globals and imports of one run are there in the next', (o1, r1, o2, r2))
    o3, e3, r3, _ = ses.run("echo shell $x; echo err >&2; exit 3", language='shell')
    o4, _, r4, _ = ses.run("print(x)")
    check(o3 == 'shell\n' and e3 == 'err\n' and r3.get('status') == 'error' and r3.get('exit_code') == 3
          and r3.get('state') == 'kept' and o4 == '41\n',
          'session: a shell run between Python runs leaves the globals alone', (o3, e3, r3, o4))
    o5, e5, r5, _ = ses.run("1/0")
    o6, _, r6, _ = ses.run("print(x)")
    check(r5.get('status') == 'error' and (r5.get('error') or {}).get('type') == 'ZeroDivisionError'
          and r5.get('state') == 'kept' and o6 == '41\n', 'session: an exception ends the run, not the session',
          (r5, o6))
    o7, _, r7, _ = ses.run("raise SystemExit(4)")
    o8, _, r8, _ = ses.run("print(x)")
    check(r7.get('exit_code') == 4 and r7.get('state') == 'kept' and o8 == '41\n',
          'session: SystemExit ends the run with its status, the interpreter stays', (r7, o8))

    # output of a background thread between runs goes nowhere; the next run's is its own
    o9, e9, r9, _ = ses.run("import os, threading, time\n"
                           "threading.Thread(target=lambda: (time.sleep(0.3), print('late', flush=True)), daemon=True).start()\n"
                           "print('now')\nprint(os.getpid(), file=__import__('sys').stderr)")
    wait_until(lambda: proc_field(first_int(e9), 'Threads') == '1',
               'the thread has printed and ended, between the runs')
    o10, _, r10, _ = ses.run("print('next')")
    check(o9 == 'now\n' and r9.get('status') == 'ok' and o10 == 'next\n',
          'session: a run returns without waiting for its threads; their output between runs is dropped', (o9, o10))

    # interrupt: SIGINT ends the run, the state stays
    out, res, took = ses.interrupted("import time\ny = 1\nprint('go', flush=True)\ntime.sleep(30)", stray=True)
    o11, _, r11, _ = ses.run("print(x, y)")
    check(res.get('status') == 'error' and (res.get('error') or {}).get('type') == 'KeyboardInterrupt'
          and res.get('state') == 'kept' and took < 1.0 and o11 == '41 1\n',
          'session: notifications/cancelled interrupts the run in %.2fs and keeps the state' % took, (res, o11))

    # a run that ignores SIGINT is killed after the grace: the state is lost
    out, res, took = ses.interrupted("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                     "print('go', flush=True)\ntime.sleep(30)")
    o12, e12, r12, _ = ses.run("print('x' in globals())")
    check(res.get('status') == 'killed' and res.get('signal') == 9 and res.get('state') == 'lost'
          and 0.8 < took < 3 and o12 == 'False\n' and r12.get('restarted') is True and r12.get('state') == 'kept',
          'session: a run that ignores the interrupt is killed after %.2fs; the next starts afresh' % took,
          (res, o12, r12))
    end(ses)


# a session shell interrupted: its process group is killed, the worker stays
@case
def session_shell_interrupt_and_exit():
    ses = Session()
    ses.run("z = 5")
    out, res, took = ses.interrupted("echo $$; sleep 30; echo never", language='shell')
    sh_pid = first_int(text(out, 'stdout'))
    o1, _, _, _ = ses.run("print(z)")
    check(res.get('status') == 'killed' and res.get('signal') == 9 and res.get('state') == 'kept'
          and took < 1.0 and o1 == '5\n' and 'never' not in text(out, 'stdout') and sh_pid > 0 and group_gone(sh_pid),
          'session: an interrupted shell is killed with its group in %.2fs; Python state kept' % took,
          (res, text(out, 'stdout'), o1))

    # the worker dies by its own hand: that run says lost, the next restarted
    o2, _, r2, _ = ses.run("import os\nprint('bye', flush=True)\nos._exit(5)")
    o3, _, r3, _ = ses.run("print('z' in globals())")
    check(o2 == 'bye\n' and r2.get('exit_code') == 5 and r2.get('state') == 'lost'
          and o3 == 'False\n' and r3.get('restarted') is True,
          'session: os._exit() ends the interpreter; the next run starts afresh and says so', (r2, o3, r3))
    end(ses)


# ... or dies between runs
@case
def session_dies_between_runs():
    ses = Session()
    o0, _, _, _ = ses.run("import os, threading, time\nw = 1\n"
                          "threading.Thread(target=lambda: (time.sleep(0.3), os._exit(7)), daemon=True).start()\n"
                          "print(os.getpid())")
    wait_until(lambda: proc_field(first_int(o0), 'State') in (None, 'Z'), 'the worker died between the runs')
    o1, _, r1, _ = ses.run("print('w' in globals())")
    check(o1 == 'False\n' and r1.get('restarted') is True and r1.get('state') == 'kept',
          'session: a worker that died between runs is replaced; the run says restarted', (o1, r1))
    end(ses)


# servers of an earlier run do not linger as globals
@case
def session_servers():
    ses = Session()
    S1 = [{'name': 'everything', 'alias': 'everything'}]
    o1, _, _, _ = ses.run("print('mcp_everything' in globals(), 'call_tool' in globals())", servers=S1)
    o2, _, _, _ = ses.run("print('mcp_everything' in globals(), 'call_tool' in globals())")
    check(o1 == 'True True\n' and o2 == 'False True\n', "session: an earlier run's mcp_* proxies are gone", (o1, o2))
    o3, _, r3, _ = ses.run("import sys\nprint(corral is sys.modules['corral'], corral.PolicyDenied.__name__)")
    o4, _, _, _ = ses.run("corral = 'mine'")
    o5, _, _, _ = ses.run("print(corral)")
    check(o3 == 'True PolicyDenied\n' and r3.get('status') == 'ok' and o5 == "<module 'corral'>\n",
          "session: `corral` is each run's module (as call_tool, put back if a run rebound it)", (o3, r3, o5))
    end(ses)


# files written under /workspace/out during a run come back listed; earlier ones do not
@case
def session_out_files_and_list():
    ws = workspace()
    ses = Session()
    o1, _, r1, _ = ses.run("import os\nos.makedirs('out/sub', exist_ok=True)\n"
                           "open('out/a.png', 'wb').write(b'x' * 10)\nopen('out/sub/b.txt', 'w').write('hi')\n"
                           "os.symlink('/etc/passwd', 'out/link')\nopen('notout.txt', 'w').write('n')")
    o2, _, r2, _ = ses.run("open('out/c.txt', 'w').write('c')")
    check(r1.get('out_files') == [{'path': 'out/a.png', 'size': 10}, {'path': 'out/sub/b.txt', 'size': 2}]
          and r2.get('out_files') == [{'path': 'out/c.txt', 'size': 1}],
          'out_files: regular files under out/ written by this run, symlinks skipped', (r1, r2))

    # sandbox/list: entries by lstat, confined to the workspace
    os.symlink('/etc', os.path.join(ws, 'etc-link'))
    lst = ses.request('sandbox/list', {'path': ws})
    res = (lst or {}).get('result') or {}
    names = {e['path']: e for e in res.get('entries', [])}
    check(res.get('path') == os.path.realpath(ws) and names.get('out', {}).get('type') == 'dir'
          and names.get('notout.txt', {}).get('type') == 'file' and names['notout.txt'].get('size') == 1
          and names.get('etc-link', {}).get('type') == 'symlink' and names['etc-link'].get('target') == '/etc'
          and 'out/a.png' not in names and res.get('truncated') is False,
          'sandbox/list: one level, lstat types, symlink targets', res)
    lst = ses.request('sandbox/list', {'path': ws + '/out', 'recursive': True, 'limit': 2}, rid='r2')
    res = (lst or {}).get('result') or {}
    check([e['path'] for e in res.get('entries', [])] == ['a.png', 'c.txt'] and res.get('truncated') is True,
          'sandbox/list: recursive, bounded by limit', res)
    bad = [ses.request('sandbox/list', p, rid='b%d' % i) for i, p in enumerate([
        {'path': ws + '/etc-link'}, {'path': '/etc'}, {'path': ws + '/out/link'}, {'path': ws, 'limit': 0},
        {'path': 1}])]
    check(all(b and b.get('error', {}).get('code') == -32602 for b in bad)
          and 'outside' in bad[0]['error']['message'],
          'sandbox/list: symlink escapes, paths outside and bad params refused', bad)
    lst = ses.request('sandbox/list', {'path': ws + '/nope'}, rid='r3')
    check(lst and lst.get('error', {}).get('code') == -32602 and 'No such file' in lst['error']['message'],
          'sandbox/list: a missing path is an error naming it', lst)
    _, _, r3, _ = ses.run("import os\nos.remove('out/a.png')")
    _, _, r4, _ = ses.run("print(sorted(os.listdir('out')))")
    check(r1.get('out_removed') is False and r2.get('out_removed') is False
          and r3.get('out_files') == [] and r3.get('out_removed') is True
          and r4.get('out_files') == [] and r4.get('out_removed') is False,
          'out_removed: a file of out/ gone since the run began, and only then', (r1, r2, r3, r4))
    end(ses)


# a child forked without exec does not take the session's place
@case
def session_fork():
    ses = Session()
    o1, _, r1, t1 = ses.run("import os, time\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n"
                            "else:\n    os.waitpid(pid, 0)\n    print('parent', flush=True)\nkept_after_fork = 1")
    o2, _, r2, _ = ses.run("print(kept_after_fork)")
    check('parent' in o1 and 'child' in o1 and r1.get('status') == 'ok' and r1.get('state') == 'kept'
          and t1 < 3 and o2 == '1\n',
          'session: a child forked without exec ends with its run; the interpreter serves the next', (o1, r1, o2))
    end(ses)


# an interrupt sent right after the exec is not lost
@case
def session_early_interrupt():
    ses = Session()
    rid = ses.send_exec("import time\nq = 7\ntime.sleep(30)")
    ses.cancel(rid)
    t0 = time.monotonic()
    out, resp = ses.rt.response(rid, 10)
    took = time.monotonic() - t0
    res = (resp or {}).get('result') or {}
    check(res.get('state') == 'kept' and res.get('status') in ('error', 'ok') and took < 1.0,
          'session: an interrupt that comes as the run starts still stops it (%.2fs), state kept' % took, res)
    end(ses)


# sandbox/list is bounded in bytes too
@case
def session_list_bytes():
    ws = workspace()
    ses = Session()
    ses.run("import os\nos.makedirs('many', exist_ok=True)\n"
            "for i in range(7000):\n    open('many/' + '\\x01' * 250 + str(i), 'w').close()")
    lst = ses.request('sandbox/list', {'path': ws + '/many', 'limit': 10000}, rid='big')
    res = (lst or {}).get('result') or {}
    frame = len(json.dumps(lst or {}).encode())
    check(res.get('truncated') is True and 0 < len(res.get('entries', [])) < 7000 and frame < (16 << 20) // 2 + 65536,
          'sandbox/list stops at about max_frame/2 bytes of JSON (%d bytes, %d entries)'
          % (frame, len(res.get('entries', []))), (frame, res.get('truncated')))

    rc, err = ses.close()
    check(rc == 0 and not ses.rt.bad, 'session: stdin EOF while idle ends the runtime with 0', (rc, err[-800:]))


# --- sessions: records user code cannot forge; limits without the daemon -----
@case
def session_forged_records():
    ses = Session()
    ses.run("x = 7")
    o1, _, r1, _ = ses.run(FORGE.replace('RID', str(ses.rid + 1)).replace('STATUS', 'x = 8'))
    o2, e2, r2, _ = ses.run("print('second', x)")
    check(r1.get('status') == 'ok' and r1.get('state') == 'kept' and 'after the forgery' in o1
          and o1.endswith('still mine\n') and o2 == 'second 8\n' and e2 == '' and r2.get('status') == 'ok',
          'session: forged records on every descriptor do not end the run; the next run sees only its own output',
          (o1[-300:], r1, o2, e2, r2))
    ses.close()


# A session is one principal: code of an earlier run can take over the later
# runs of its session (runtime/README.md, "What this does not cover").  It
# walks the frames up to the worker's loop, reads the current run's token
# there, and wraps the function that reads each request: every later run's
# code, servers and token pass through it, and it swaps in code of its own,
# which the worker runs and reports under the real token.  The daemon fixes
# the servers a session may call for this reason (README, Sessions).  These
# checks document the limit: if the runtime ever walls the code off from its
# own frames, they fail and the docs must change.
TAKEOVER = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'takeover.py')).read() + r'''FORGER = """import json
last = _seen[-1]
print('FORGED', json.dumps({'code': last['code'], 'servers': last['servers'],
                            'token': len(last['token'] or ''), 'mcp': sorted(k for k in globals() if k.startswith('mcp_'))}))
"""
'''


@case
def session_takeover():
    ses = Session()
    o1, e1, r1, _ = ses.run(TAKEOVER, servers=[{'name': 'everything', 'alias': 'everything'}])
    check(r1.get('status') == 'ok' and o1 == 'token of this run: 32\nplanted True\n',
          "session (stated limit): a run's code finds its token in the worker's frame and hooks the loop",
          (o1, e1, r1))
    real = "print('the real code ran')\nraise SystemExit(3)"
    two = [{'name': 'everything', 'alias': 'everything'}, {'name': 'fs', 'alias': 'fs'}]
    o2, e2, r2, _ = ses.run(real, servers=two)
    line = [l for l in o2.splitlines() if l.startswith('FORGED ')]
    got = json.loads(line[0][7:]) if line else {}
    check(r2.get('status') == 'ok' and r2.get('exit_code') == 0 and 'the real code ran' not in o2.splitlines()
          and got == {'code': real, 'servers': ['everything', 'fs'], 'token': 32,
                      'mcp': ['mcp_everything', 'mcp_fs']},
          'session (stated limit): the earlier code answers the next run itself: ok, its output, '
          'the real code never runs; it read that code and token and holds its servers', (o2, e2, r2))
    o3, _, r3, _ = ses.run("echo shell", language='shell')
    check(r3.get('status') == 'ok' and o3.startswith('FORGED ') and 'echo shell' in o3,
          'session (stated limit): a later shell run is taken over too', (o3, r3))
    end(ses)


# The same takeover planted in a single-use run reaches nothing: no later run
# exists (the go socket is closed before the code runs and a second exec is
# refused), and the result is the code's own.
@case
def single_use_takeover():
    rt = Runtime()
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 1, 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': TAKEOVER + 'raise SystemExit(3)\n'}})
    out, resp = rt.response(1)
    res = (resp or {}).get('result') or {}
    rt.send({'jsonrpc': '2.0', 'id': 2, 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': 'print("second")'}})
    out2, resp2 = rt.response(2)
    rc, err = rt.close()
    check(res.get('status') == 'error' and res.get('exit_code') == 3 and 'planted True' in text(out, 'stdout')
          and (resp2 or {}).get('error', {}).get('code') == -32000 and not text(out2, 'stdout')
          and rc == 0 and not rt.bad,
          'single-use: a takeover planted in the run forges nothing: its result is its own, no later run exists',
          (text(out, 'stdout'), res, resp2, out2, err[-500:]))


@case
def session_time_limits():
    ses = Session()
    t0 = time.monotonic()
    rid = ses.send_exec("x = 9\nwhile True: pass", time_limit_ms=300)
    _, resp = ses.rt.response(rid, 10)
    took = time.monotonic() - t0
    r1 = (resp or {}).get('result') or {}
    o1, _, _, _ = ses.run("print(x)")
    check(r1.get('status') == 'timeout' and r1.get('state') == 'kept' and 1.2 <= took < 3.0 and o1 == '9\n',
          'session: time_limit_ms interrupts a busy loop with no daemon acting, and the session lives (%.2fs)' % took,
          (r1, took, o1))
    t0 = time.monotonic()
    rid = ses.send_exec("trap '' INT TERM HUP; while :; do :; done", language='shell', time_limit_ms=300)
    _, resp = ses.rt.response(rid, 10)
    took = time.monotonic() - t0
    r2 = (resp or {}).get('result') or {}
    check(r2.get('status') == 'timeout' and r2.get('state') == 'kept' and took < 3.0,
          'session: a shell that traps INT, TERM and HUP is stopped at its time limit (%.2fs)' % took, (r2, took))
    rid = ses.send_exec("trap '' INT TERM HUP; echo $$; while :; do :; done", language='shell')
    out, _ = ses.rt.response(rid, timeout=1)
    pgid = first_int(text(out, 'stdout'))
    t0 = time.monotonic()
    rc, err = ses.close()
    took = time.monotonic() - t0
    check(pgid > 0 and took < 2.0 and group_gone(pgid),
          'session: stdin EOF while a shell that traps signals runs kills it and ends the runtime (%.2fs)' % took,
          (out, rc, took, err[-500:]))


# --- a session's globals saved to /workspace/.corral/state and loaded back ---
STATE_SETUP = """
import json as j, socket, threading
rows = [{'id': i, 'v': i * 0.5} for i in range(1000)]
blob = bytes(range(256)) * 4
shared = {'rows': rows}
label = 'spring'
f = lambda x: x + 1
def g(): return 1
class Foo: pass
foo = Foo()
items = [1, Foo()]
fh = open('/dev/null')
sock = socket.socket()
gen = (i for i in range(3))
lock = threading.Lock()
print('set')
"""


def state_names(res, key):
    return sorted(e['name'] if isinstance(e, dict) else e for e in ((res.get('globals') or {}).get(key) or []))


@case
def session_globals_saved():
    ws = workspace()
    ses = Session()
    o1, _, r1, _ = ses.run(STATE_SETUP)
    _, _, rs, _ = ses.run('save', language='state')
    g = rs.get('globals') or {}
    lost = {e['name']: e['reason'] for e in g.get('not_saved') or []}
    check(o1 == 'set\n' and rs.get('status') == 'ok' and rs.get('state') == 'kept'
          and state_names(rs, 'saved') == ['blob', 'label', 'rows', 'shared']
          and state_names(rs, 'modules') == ['j', 'socket', 'threading']
          and sorted(lost) == ['Foo', 'f', 'fh', 'foo', 'g', 'gen', 'items', 'lock', 'sock']
          and 'defined in the session' in lost['f'] and 'defined in the session' in lost['items']
          and 'TextIOWrapper' in lost['fh'] and 'generator' in lost['gen'] and 'socket' in lost['sock']
          and g.get('pickler') == 'pickle' and g.get('counts') == [4, 3, 9]
          and os.path.getsize(os.path.join(ws, '.corral', 'state')) == g.get('bytes'),
          'state: save pickles every global that pickles (inside the sandbox), names the rest and why', (o1, rs))
    o2, _, r2, _ = ses.run("print(label, len(rows), foo.__class__.__name__)")
    check(o2 == 'spring 1000 Foo\n' and r2.get('state') == 'kept',
          'state: the session goes on after a save, every global still there', (o2, r2))
    end(ses)
    # A new sandbox on the same /workspace: what a resume does.
    ses = Session()
    _, _, rl, _ = ses.run('load', language='state')
    o3, _, r3, _ = ses.run("print(label, len(rows), rows[999]['v'], blob[-1], j.dumps(shared['rows'][1]), "
                           "'f' in globals(), 'foo' in globals())")
    check(rl.get('status') == 'ok' and rl.get('state') == 'kept'
          and state_names(rl, 'restored') == ['blob', 'label', 'rows', 'shared']
          and state_names(rl, 'modules') == ['j', 'socket', 'threading'] and state_names(rl, 'not_restored') == []
          and o3 == 'spring 1000 499.5 255 {"id": 1, "v": 0.5} False False\n'
          and not os.path.exists(os.path.join(ws, '.corral')),
          'state: load in a fresh runtime brings the saved globals back and imports the modules again, '
          'and removes the state file', (rl, o3, r3))
    end(ses)


@case
def session_globals_refused():
    ses = Session()
    _, _, r1, _ = ses.run('print(1)')
    bad = []
    for params in ({'language': 'state', 'code': 'save', 'keep': False},
                   {'language': 'state', 'code': 'drop', 'keep': True},
                   {'language': 'state', 'code': 1, 'keep': True}):
        resp = ses.request('sandbox/exec', params, rid='bad')
        bad.append(((resp or {}).get('error') or {}).get('code'))
    o2, _, r2, _ = ses.run('print(2)')
    check(bad == [-32602] * 3 and o2 == '2\n' and r2.get('state') == 'kept',
          'state: save without keep, an unknown op or a non-string one -> -32602, the session goes on', (bad, r2))
    end(ses)
    fresh = Session()
    resp = fresh.request('sandbox/exec', {'language': 'state', 'code': 'save', 'keep': True}, rid='s')
    err = (resp or {}).get('error') or {}
    check(err.get('code') == -32000 and 'no session state' in err.get('message', ''),
          'state: save in a sandbox with no session worker -> -32000 (a fresh worker would save nothing)', resp)
    end(fresh)


@case
def session_tree_load():
    """The directories and links a save listed come back before the
    globals, confined to /workspace; the file goes."""
    ws = workspace()
    corral_dir = os.path.join(ws, '.corral')
    os.makedirs(corral_dir, exist_ok=True)
    os.chmod(corral_dir, 0o777)
    tree = {'dirs': ['empty', 'a/b', '../outside'],
            'links': [['ln', 'notes.txt'], ['a/b/abs', '/etc/hostname'], ['../escape', 'x'],
                      ['ln', 'again'], ['bad'], ['empty2/deep', '../ln']]}
    with open(os.path.join(corral_dir, 'tree.json'), 'w') as f:
        json.dump(tree, f)
    os.chmod(os.path.join(corral_dir, 'tree.json'), 0o666)
    ses = Session()
    _, _, rl, _ = ses.run('load', language='state')  # no state file: the load fails, the tree comes back
    parent = os.path.dirname(ws)
    check(os.path.isdir(os.path.join(ws, 'empty')) and os.path.isdir(os.path.join(ws, 'a', 'b'))
          and os.readlink(os.path.join(ws, 'ln')) == 'notes.txt'
          and os.readlink(os.path.join(ws, 'a', 'b', 'abs')) == '/etc/hostname'
          and os.readlink(os.path.join(ws, 'empty2', 'deep')) == '../ln'
          and not os.path.lexists(os.path.join(parent, 'outside')) and not os.path.lexists(os.path.join(parent, 'escape'))
          and not os.path.exists(os.path.join(corral_dir, 'tree.json')) and rl.get('status') == 'error',
          'state: a load makes the saved directories and links again under /workspace, none outside, '
          'and removes the tree file, even when the globals cannot load', rl)
    end(ses)
    import shutil
    for name in ('empty', 'a', 'empty2'):
        shutil.rmtree(os.path.join(ws, name), ignore_errors=True)
    os.unlink(os.path.join(ws, 'ln'))


@case
def session_globals_damaged():
    ws = workspace()
    path = os.path.join(ws, '.corral', 'state')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.chmod(os.path.dirname(path), 0o777)

    def record(head, body):
        rest = (json.dumps(head) + '\n').encode() + body
        return len(rest).to_bytes(8, 'little') + rest
    good = pickle.dumps([1, 2, 3])
    with open(path, 'wb') as fp:  # a value that does not unpickle between two that do
        fp.write(b'corral-state 1\n' + record(['a', None, 'list'], good)
                 + record(['b', None, 'Gone'], b'\x80\x04cnowhere\nGone\n.') + record(['c', None, 'list'], good))
    os.chmod(path, 0o666)
    ses = Session()
    _, _, rl, _ = ses.run('load', language='state')
    o1, _, _, _ = ses.run("print(a, c, 'b' in globals())")
    lost = (rl.get('globals') or {}).get('not_restored') or [{}]
    check(rl.get('status') == 'ok' and state_names(rl, 'restored') == ['a', 'c'] and o1 == '[1, 2, 3] [1, 2, 3] False\n'
          and lost[0].get('name') == 'b' and lost[0].get('type') == 'Gone' and 'nowhere' in lost[0].get('reason', ''),
          'state: a value that does not unpickle is named in not_restored, the others come back', (rl, o1))
    for data, what in ((b'not a state file', 'is not a saved session state'),
                       (b'corral-state 1\n' + (1 << 40).to_bytes(8, 'little') + b'x', 'cut short')):
        with open(path, 'wb') as fp:
            fp.write(data)
        _, _, rb, _ = ses.run('load', language='state')
        o2, _, r2, _ = ses.run('print(a)')
        check(rb.get('status') == 'error' and what in ((rb.get('error') or {}).get('message') or '')
              and rb.get('globals') is None and o2 == '[1, 2, 3]\n' and r2.get('state') == 'kept',
              'state: a load of a damaged file (%s) fails with the reason, the session goes on' % what, (rb, o2))
    with open(path, 'wb') as fp:  # the runtime's own name, then a good one
        fp.write(b'corral-state 1\n' + record(['__builtins__', None, 'list'], good) + record(['a', None, 'list'], good))
    _, _, rh, _ = ses.run('load', language='state')
    o3, _, r3, _ = ses.run('print(a, len("ok"))')
    lost = (rh.get('globals') or {}).get('not_restored') or [{}]
    check(rh.get('status') == 'ok' and lost[0].get('name') == '__builtins__' and 'runtime sets' in lost[0].get('reason', '')
          and o3 == '[1, 2, 3] 2\n' and r3.get('status') == 'ok',
          'state: a saved name the runtime sets (__builtins__) is not loaded, later runs work', (rh, o3, r3))
    with open(path, 'wb') as fp:  # zero-length records: damaged, not a million lost names
        fp.write(b'corral-state 1\n' + bytes(1 << 20))
    t0 = time.monotonic()
    _, _, rz, _ = ses.run('load', language='state')
    took = time.monotonic() - t0
    check(rz.get('status') == 'error' and 'damaged' in ((rz.get('error') or {}).get('message') or '') and took < 2,
          'state: a file of empty records ends the load at once as damaged (%.2fs)' % took, (rz, took))
    end(ses)
    os.unlink(path)


@case
def session_globals_bounds():
    ws = workspace()
    path = os.path.join(ws, '.corral', 'state')
    ses = Session()
    _, _, r1, _ = ses.run("for i in range(1100): globals()['n%04d_' % i + '\u00e9' * 400] = i\nok = 1")
    _, _, rs, took = ses.run('save', language='state', timeout=20)
    g = rs.get('globals') or {}
    names = g.get('saved') or []
    check(rs.get('status') == 'ok' and g.get('counts', [0])[0] == 1102 and 0 < len(names) <= 1000
          and all(len(n) <= 200 for n in names) and len(json.dumps(rs)) < 512 * 1024,
          'state: 1,102 globals with long non-ASCII names: the report is bounded, counts are true (%d listed, %.1fs)'
          % (len(names), took), (r1, {k: v for k, v in g.items() if k != 'saved'}, len(json.dumps(rs))))
    with open(path, 'rb') as fp:
        before = fp.read()
    o2, _, r2, _ = ses.run("import copyreg, fractions\n"
                           "def stop(x): raise KeyboardInterrupt\n"
                           "copyreg.pickle(fractions.Fraction, stop)\n"
                           "half = fractions.Fraction(1, 2)\nprint('armed')")
    _, _, rb, _ = ses.run('save', language='state')
    with open(path, 'rb') as fp:
        after = fp.read()
    o3, _, r3, _ = ses.run('print(ok, half)')
    check(o2 == 'armed\n' and rb.get('status') == 'error' and (rb.get('error') or {}).get('type') == 'KeyboardInterrupt'
          and rb.get('state') == 'kept' and after == before and not os.path.exists(path + '.new')
          and o3 == '1 1/2\n' and r3.get('state') == 'kept',
          'state: a save cut short (an interrupt while pickling) keeps the last state file, leaves no half one, '
          'and the session goes on', (o2, rb, len(before), len(after), o3, r3))
    end(ses)
    os.unlink(path)


# a one-shot exec (no keep) after nothing: the runtime still ends after it
@case
def no_keep():
    s2 = Session()
    o, _, r, _ = s2.run("print(1)", keep=False)
    rc, err = s2.close()
    check(o == '1\n' and 'state' not in r and rc == 0, 'no keep: one run, no session fields, then exit', (r, rc, err))


# --- network: the proxy (runtime/README.md, "Network") ---------------------
# The daemon's side of the proxy is played by the test (class Net): it reads
# the runtime's net/* frames, answers with its own, and connects to the
# proxy itself as a client where that is simpler than code in the sandbox.
NET = {'env': {'PIP_INDEX_URL': 'http://index.test/simple'}}
WINDOW, HEAD_MAX = 262144, 16384
WAIT = "import os, time\nprint(os.environ['HTTP_PROXY'], flush=True)\ntime.sleep(60)"


class Net:
    """A session whose runs have a grant, and the daemon's side of its proxy."""

    def __init__(self):
        self.ses = Session()
        self.rt = self.ses.rt
        self.opened, self.data, self.acks, self.eofs, self.closes = {}, {}, {}, [], []
        self.log, self.answers, self.out, self.port, self.n = [], {}, '', None, 0

    def take(self, f):
        m, p = f.get('method'), f.get('params') or {}
        self.log.append(f)
        if m == 'net/open':
            self.opened[p['conn']] = base64.b64decode(p['head'])
            self.data[p['conn']] = b''
        elif m == 'net/data':
            raw = base64.b64decode(p['data'])
            if len(raw) > 65536:
                raise AssertionError('a net/data frame of %d bytes' % len(raw))
            self.data[p['conn']] += raw
        elif m == 'net/ack':
            self.acks[p['conn']] = self.acks.get(p['conn'], 0) + p['bytes']
        elif m == 'net/eof':
            self.eofs.append(p['conn'])
        elif m == 'net/close':
            self.closes.append(p['conn'])
        elif m == 'sandbox/output':
            self.out += p['data']
        elif 'id' in f:
            self.answers[f['id']] = f

    def pump(self, until, what, timeout=10.0):
        """Takes frames until until() holds (bounded)."""
        end = time.monotonic() + timeout
        while not until():
            f = self.rt.frame(max(0.0, end - time.monotonic()))
            if f is None:
                raise AssertionError('not within %g s: %s' % (timeout, what))
            self.take(f)

    def barrier(self):
        """A round trip through the runtime's loop: what it sent before is in."""
        self.n += 1
        rid = 'barrier%d' % self.n
        self.rt.send({'jsonrpc': '2.0', 'id': rid, 'method': 'test/barrier'})
        self.pump(lambda: rid in self.answers, 'the answer to ' + rid)

    def send(self, method, **params):
        self.rt.send({'jsonrpc': '2.0', 'method': method, 'params': params})

    def start(self, code=WAIT, network=NET, **kw):
        """Starts a run; with WAIT, returns once its code has printed the proxy's URL."""
        rid = self.ses.send_exec(code, network=network, **kw) if network else self.ses.send_exec(code, **kw)
        if code == WAIT:
            self.pump(lambda: 'http://127.0.0.1:' in self.out, "the code's HTTP_PROXY")
            self.port = int(self.out.split('http://127.0.0.1:')[-1].split()[0])
            self.out = ''
        return rid

    def result(self, rid):
        self.pump(lambda: rid in self.answers, 'the result of run %s' % rid)
        return self.answers[rid].get('result') or {}

    def stop(self, rid):
        """Ends a WAIT run (an interrupt)."""
        self.ses.cancel(rid)
        return self.result(rid)

    def client(self, data=b''):
        s = socket.create_connection(('127.0.0.1', self.port), timeout=10)
        if data:
            s.sendall(data)
        return s


def read_to_eof(s, timeout=10.0):
    """What a client reads until the proxy closes (None: not within timeout)."""
    s.settimeout(timeout)
    got = b''
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return got
            got += chunk
    except ConnectionResetError:
        return got
    except socket.timeout:
        return None


def local_answer(data):
    """(status, reason line, headers, body) of one of the proxy's own answers."""
    head, _, body = (data or b'').partition(b'\r\n\r\n')
    lines = head.decode('latin-1').split('\r\n')
    headers = dict(l.split(': ', 1) for l in lines[1:] if ': ' in l)
    status = lines[0].split(' ', 2)
    return (int(status[1]) if len(status) > 1 and status[1].isdigit() else 0), lines[0], headers, body


def well_formed(data, code, reason):
    status, line, headers, body = local_answer(data)
    return status == code and line.startswith('HTTP/1.1 %d ' % code) and body == b'corral: %s\n' % reason.encode() \
        and headers == {'Content-Type': 'text/plain', 'Connection': 'close', 'Content-Length': str(len(body))}


# The variables of a run with a grant, and the user site pip --user fills.
@case
def net_env():
    names = ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy', 'NO_PROXY', 'no_proxy', 'PIP_USER',
             'PYTHONUSERBASE', 'PIP_BREAK_SYSTEM_PACKAGES', 'PIP_DISABLE_PIP_VERSION_CHECK', 'PIP_NO_INPUT',
             'PIP_CACHE_DIR', 'PIP_INDEX_URL']
    ws = workspace()
    site = '%s/.local/lib/python%s/site-packages' % (ws, '.'.join(subprocess.check_output(
        [PYTHON, '-c', 'import sys; print(*sys.version_info[:2])']).decode().split()))
    shutil.rmtree(os.path.join(ws, '.local'), ignore_errors=True)
    net = Net()
    # pip installs a package while the code runs: a module that was looked
    # for in vain before (so the directory's listing was cached) imports at once
    code = '''import json, os, sys
print(json.dumps({k: os.environ.get(k) for k in %r}))
try:
    import netmod_a
except ImportError:
    pass
site = [p for p in sys.path if p.startswith(os.environ['PYTHONUSERBASE'])]
print(json.dumps([site, os.path.isdir(site[0]) if site else None,
                  sys.path.index(site[0]) < min(i for i, p in enumerate(sys.path) if p.endswith('-packages') and p != site[0])]))
for m in ('netmod_a', 'netmod_b'):
    with open(os.path.join(site[0], m + '.py'), 'w') as f:
        f.write('NAME = %%r\\n' %% m)
import netmod_a
print(netmod_a.NAME)
''' % names
    r1 = net.result(net.start(code))
    lines = net.out.splitlines()
    env = json.loads(lines[0]) if lines else {}
    url = env.get('HTTP_PROXY') or ''
    check(re.match(r'^http://127\.0\.0\.1:\d+$', url) and env == {
        'HTTP_PROXY': url, 'HTTPS_PROXY': url, 'http_proxy': url, 'https_proxy': url,
        'NO_PROXY': 'localhost,127.0.0.1,::1', 'no_proxy': 'localhost,127.0.0.1,::1', 'PIP_USER': '1',
        'PYTHONUSERBASE': ws + '/.local', 'PIP_BREAK_SYSTEM_PACKAGES': '1', 'PIP_DISABLE_PIP_VERSION_CHECK': '1',
        'PIP_NO_INPUT': '1', 'PIP_CACHE_DIR': '/tmp/.pip-cache', 'PIP_INDEX_URL': 'http://index.test/simple'},
        'network: a run with a grant has the proxy, NO_PROXY, pip and the daemon\'s variables', (env, r1))
    check(r1.get('status') == 'ok' and lines[1:] == [json.dumps([[site], True, True]), 'netmod_a'],
          'network: the user site exists, is on sys.path once, ahead of the image\'s packages, '
          'and a module put there by the code imports at once', (lines, r1))
    net.out = ''
    r2 = net.result(net.start('echo "$HTTP_PROXY|$PIP_USER|$PIP_INDEX_URL|$PYTHONUSERBASE"', language='shell'))
    check(r2.get('status') == 'ok' and net.out == '%s|1|http://index.test/simple|%s/.local\n' % (url, ws),
          'network: a shell run has the variables too, and the proxy keeps its port', (net.out, r2))
    net.out = ''
    r3 = net.result(net.start('import netmod_b, sys, os\n'
                              'print(netmod_b.NAME, sum(p.startswith(os.environ["PYTHONUSERBASE"]) for p in sys.path))',
                              network=None))
    check(r3.get('status') == 'ok' and net.out == 'netmod_b 1\n',
          'network: a later run of the session imports what an earlier one installed', (net.out, r3))
    end(net.ses)
    out, res, rt, _ = run("import json, os, sys\nprint(json.dumps([{k: os.environ.get(k) for k in %r}, "
                          "[p for p in sys.path if '.local' in p]]))" % names)
    check(res.get('status') == 'ok' and json.loads(text(out, 'stdout') or 'null') == [
        {k: os.environ.get(k) for k in names}, []] and not any(
        f.get('method', '').startswith('net/') for f in rt.frames),
        'network: a run without a grant has none of it', (out, res))


# Code that makes a request through the proxy with an ordinary client
# (urllib, from HTTP_PROXY), a body larger than a frame; the daemon answers.
@case
def net_relay():
    net = Net()
    body = bytes(range(256)) * 400  # 102400 bytes: two frames at least
    answer = b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\nContent-Type: text/plain\r\n\r\nhello world'
    rid = net.start("import urllib.request\n"
                    "r = urllib.request.urlopen(urllib.request.Request('http://files.test/up', data=bytes(range(256)) * 400))\n"
                    "print(r.status, r.read().decode())")
    net.pump(lambda: 1 in net.opened, 'net/open')
    head = net.opened[1]
    net.pump(lambda: len(net.data[1]) >= len(body), 'the body')
    sent_frames = sum(1 for f in net.log if f.get('method') == 'net/data')
    net.send('net/ack', conn=1, bytes=len(body))
    net.rt.send_data(1, answer)
    net.send('net/eof', conn=1)
    res = net.result(rid)
    check(head.startswith(b'POST http://files.test/up HTTP/1.1\r\n') and b'\r\nHost: files.test\r\n' in head
          and b'\r\nContent-Length: 102400\r\n' in head and head.endswith(b'\r\n\r\n') and head.count(b'\r\n\r\n') == 1,
          'network: net/open carries the request head, request line through the blank line', head)
    check(net.data[1] == body and sent_frames >= 2, 'network: the body follows as net/data, at most 64 KiB a frame',
          (len(net.data[1]), sent_frames))
    check(res.get('status') == 'ok' and net.out == '200 hello world\n',
          "network: the client gets the daemon's bytes, then EOF", (net.out, res))
    names = [f.get('method') for f in net.log if f.get('method', '').startswith('net/')]
    check(net.acks.get(1) == len(answer) and names[-1] == 'net/close' and names.index('net/ack') < names.index('net/close')
          and list(net.opened) == [1] and net.closes == [1],
          'network: the runtime acks what it wrote to the client, then closes after the daemon\'s net/eof (conn 1)',
          (names, net.acks))
    end(net.ses)


# The client's bytes stop at the window while the daemon does not ack, and
# go on by what it acks; a daemon past its own window is cut off.
@case
def net_flow_control():
    import threading
    net = Net()
    rid = net.start()
    c = net.client(b'PUT http://files.test/big HTTP/1.1\r\nHost: files.test\r\n\r\n')
    sent = []

    def flood():  # until the runtime closes the socket
        try:
            while True:
                c.sendall(b'z' * 65536)
                sent.append(65536)
        except OSError:
            pass
    t = threading.Thread(target=flood, daemon=True)
    t.start()
    net.pump(lambda: len(net.data.get(1, b'')) >= WINDOW, 'a window of the client\'s bytes')
    net.barrier()
    net.barrier()
    at_window = len(net.data[1])
    check(at_window == WINDOW and sum(sent) >= WINDOW + 65536,
          'network: without acks the runtime stops at exactly 262144 un-acked bytes (the client sent more)',
          (at_window, sum(sent)))
    net.send('net/ack', conn=1, bytes=100000)
    net.pump(lambda: len(net.data[1]) >= WINDOW + 100000, 'what the ack let through')
    net.barrier()
    net.barrier()
    check(len(net.data[1]) == WINDOW + 100000, 'network: an ack of 100000 lets exactly 100000 more through',
          len(net.data[1]))
    net.send('net/close', conn=1)
    net.barrier()
    t.join(10)
    check(not t.is_alive() and 1 not in net.closes, "network: the daemon's net/close ends the client at once, "
          'and nothing more is sent for it', (t.is_alive(), net.closes))
    c.close()

    # The daemon's direction: the client does not read; an honest daemon
    # sends while its window lets it, until the client's socket is full.
    c = net.client(b'GET http://files.test/ HTTP/1.1\r\nHost: files.test\r\n\r\n')
    net.pump(lambda: 2 in net.opened, 'net/open of the second connection')
    given, stuck = 0, 0
    for _ in range(2000):
        room = WINDOW - (given - net.acks.get(2, 0))
        if room > 0:
            net.rt.send_data(2, b'y' * min(room, 65536))
            given += min(room, 65536)
        net.barrier()
        stuck = stuck + 1 if given - net.acks.get(2, 0) == WINDOW else 0
        if stuck == 3 or 2 in net.closes:
            break
    check(stuck == 3 and 2 not in net.closes,
          'network: a daemon that keeps to its window is never cut off; acks stop when the client stops reading',
          (given, net.acks.get(2), net.closes))
    net.rt.send_data(2, b'!')
    net.barrier()
    check(net.closes == [2], 'network: one byte past the window: net/close', net.closes)
    got = read_to_eof(c)
    check(got is not None and net.acks[2] <= len(got) < net.acks[2] + 65536 and set(got) <= {ord('y')},
          'network: and its client is closed, having got what was acked (and at most 64 KiB written since)',
          (None if got is None else len(got), net.acks[2]))
    # the whole window in frames of the largest size at once, to a client
    # that reads: all of it arrives
    c3 = net.client(b'GET http://files.test/ HTTP/1.1\r\nHost: files.test\r\n\r\n')
    net.pump(lambda: 3 in net.opened, 'net/open of the third connection')
    for k in range(WINDOW // 65536):
        net.rt.send_data(3, bytes([k]) * 65536)
    net.send('net/eof', conn=3)
    got = read_to_eof(c3)
    net.pump(lambda: 3 in net.closes, 'net/close of the third connection')
    check(got == b''.join(bytes([k]) * 65536 for k in range(WINDOW // 65536)) and net.acks.get(3) == WINDOW,
          'network: the whole window in data frames of 64 KiB is taken, written in order and acked',
          (len(got or b''), net.acks.get(3)))
    net.stop(rid)
    end(net.ses)


# What the proxy answers itself: heads it will not pass on.
@case
def net_local_answers():
    net = Net()
    rid = net.start()
    big = b'GET http://files.test/ HTTP/1.1\r\nX: ' + b'a' * (HEAD_MAX - 40)
    big += b'b' * (HEAD_MAX - 4 - len(big)) + b'\r\n\r\n'
    cases = [
        (b'GET http://files.test/ HTTP/1.1\r\nX: ' + b'a' * HEAD_MAX, 431, 'request head too big'),
        (b'GET /x\r\n\r\n', 400, 'bad request'),
        (b'GET  http://x/ HTTP/1.1\r\n\r\n', 400, 'bad request'),
        (b'GET http://x/ HTTP/2.0\r\n\r\n', 400, 'bad request'),
        (b'GET http://x/ HTTP/1.1\r\nno colon here\r\n\r\n', 400, 'bad request'),
        (b'GET http://x/ HTTP/1.1\r\n: empty name\r\n\r\n', 400, 'bad request'),
        (b'GET http://x/ HTTP/1.1\r\nHost: x\r\nX: a\nb\r\n\r\n', 400, 'bad request'),
        (b'GE\x01T http://x/ HTTP/1.1\r\n', 400, 'bad request'),
    ]
    got = []
    for data, code, reason in cases:
        c = net.client(data)
        got.append((data[:40], code, well_formed(read_to_eof(c), code, reason)))
        c.close()
    check(all(ok for _, _, ok in got), 'network: 431 for a head over 16384 bytes, 400 for a bad request line or '
          'header, in the format the daemon uses', got)
    c = net.client(b'GET http://x/ HTTP/1.1\r\nHost')
    c.shutdown(socket.SHUT_WR)
    check(well_formed(read_to_eof(c), 400, 'bad request'), 'network: EOF in the middle of a head: 400')
    c.close()
    c = net.client(big)
    net.pump(lambda: 1 in net.opened, 'net/open of a head of exactly 16384 bytes')
    check(len(big) == HEAD_MAX and net.opened == {1: big},
          'network: a head of exactly 16384 bytes goes on, and none of the refused ones did', list(net.opened))
    c.close()
    net.stop(rid)
    end(net.ses)


# Connections between runs, the end of a run, and the bound on connections.
@case
def net_runs():
    net = Net()
    r1 = net.start("import os\nprint(os.environ['HTTP_PROXY'])")
    net.result(r1)
    net.port, net.out = int(net.out.split(':')[-1]), ''
    c = net.client(b'GET http://files.test/ HTTP/1.1\r\nHost: files.test\r\n\r\n')
    check(well_formed(read_to_eof(c), 503, 'no run is under way') and not net.opened,
          'network: a connection between runs gets 503 from the proxy itself', net.opened)
    c.close()
    rid = net.start()
    a = net.client(b'GET http://files.test/a HTTP/1.1\r\nHost: files.test\r\n\r\n')
    b = net.client()
    net.pump(lambda: 1 in net.opened, 'net/open')
    res = net.stop(rid)
    at = [i for i, f in enumerate(net.log) if f.get('id') == rid][0]
    closed = [f['params']['conn'] for f in net.log[:at] if f.get('method') == 'net/close']
    check(closed == [1] and read_to_eof(a) == b'' and read_to_eof(b) == b'' and res.get('status') == 'error',
          "network: a run's end closes its connections (net/close before the result)", (closed, res))
    net.rt.send_data(1, b'late')
    net.send('net/eof', conn=1)
    net.barrier()
    rid = net.start()
    c = net.client(b'GET http://files.test/c HTTP/1.1\r\nHost: files.test\r\n\r\n')
    net.pump(lambda: 2 in net.opened, 'net/open of the next run')
    check(list(net.opened) == [1, 2] and net.closes == [1],
          'network: frames for a connection of an ended run are dropped; ids are not reused', (net.opened, net.closes))
    c.close()
    net.pump(lambda: 2 in net.eofs, 'net/eof')
    net.send('net/close', conn=2)
    net.barrier()
    idle = [net.client() for _ in range(256)]
    over = net.client()
    check(well_formed(read_to_eof(over), 503, 'too many connections'),
          'network: past 256 connections at once the proxy answers 503 itself')
    for s in idle + [over]:
        s.close()
    net.stop(rid)
    end(net.ses)


# User code cannot speak for the proxy: net/* from the worker's API socket
# is refused (a request) or dropped (a notification).
@case
def net_worker_refused():
    rt = Runtime({'CORRAL_WORKSPACE': workspace()})
    rt.ready()
    code = '''import json
for m in ('net/open', 'net/data', 'net/close'):
    r = corral._raw_request({'jsonrpc': '2.0', 'id': 7, 'method': m, 'params': {'conn': 1, 'head': 'R0VUIA=='}})
    print(m, (r or {}).get('error', {}).get('code'))
for m in ('net/data', 'net/eof', 'net/close', 'net/ack', 'net/open'):
    corral._raw_send(json.dumps({'jsonrpc': '2.0', 'method': m, 'params': {'conn': 1, 'data': 'eA=='}}).encode() + b'\\n')
print(len(list_servers()))
'''
    rt.send({'jsonrpc': '2.0', 'id': 'x', 'method': 'sandbox/exec',
             'params': {'language': 'python', 'code': code, 'servers': SERVERS, 'network': NET}})
    frames = []
    while True:
        f = rt.frame()
        if f is None or f.get('id') == 'x':
            break
        frames.append(f)
        if f.get('method') == 'servers/list':
            rt.send(dict({'jsonrpc': '2.0', 'id': f['id']}, **fake_daemon(f)))
    rt.rc, rt.err = rt.close()
    out = ''.join(f['params']['data'] for f in frames if f.get('method') == 'sandbox/output')
    check(out == 'net/open -32600\nnet/data -32600\nnet/close -32600\n%d\n' % len(SERVERS)
          and not any(f.get('method', '').startswith('net/') for f in frames) and (f or {}).get('result', {}).get('status') == 'ok',
          'network: the worker cannot send net/* (requests refused, notifications dropped)', (out, frames))


# --- images: profile.json, preloading, /workspace/out, files in the result --
def owned_dir(prefix):
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, 0o755)
    if os.geteuid() == 0:
        os.chown(d, 65534, 65534)
    return d


# The image's /tmp skeleton, copied to /tmp of the sandbox.
SKEL = 'corral-rt-skel-%d' % os.getpid()


def image_dir():
    """An image directory (CORRAL_IMAGE_DIR): a profile.json (variables, preloads) and a /tmp skeleton."""
    img = tempfile.mkdtemp(prefix='corral-image-')
    os.chmod(img, 0o755)
    os.makedirs(os.path.join(img, 'tmp', SKEL))
    with open(os.path.join(img, 'tmp', SKEL, 'cache.json'), 'w') as f:
        f.write('{"fonts": 1}')
    with open(os.path.join(img, 'profile.json'), 'w') as f:
        json.dump({'profile': 'test', 'preload': ['colorsys', 'no_such_module_xyz'],
                   'env': {'CORRAL_T_FROM_PROFILE': 'yes', 'PATH': '/nowhere', 'BAD=NAME': 'x'}}, f)
    for root, dirs, files in os.walk(img):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
    return img


@case
def image_profile():
    img = image_dir()
    probe = ("import os, sys\nprint(os.environ.get('CORRAL_T_FROM_PROFILE'), os.environ['PATH'] != '/nowhere', "
             "'BAD=NAME' in os.environ, 'colorsys' in sys.modules, "
             "open('/tmp/%s/cache.json').read(), 'CORRAL_PRELOAD_MODULES' in os.environ)" % SKEL)
    out, res, rt, _ = run(probe, env={'CORRAL_IMAGE_DIR': img, 'CORRAL_PRELOAD': '1'})
    check(text(out, 'stdout') == 'yes True False True {"fonts": 1} False\n' and res.get('status') == 'ok',
          "image profile: its variables (never over the container's own, never a bad name), its /tmp files, "
          "its modules preloaded in a pool sandbox", (out, res, rt.err[-500:]))
    check('preloading no_such_module_xyz failed: ModuleNotFoundError' in rt.err,
          'a module that cannot be preloaded is logged and skipped', rt.err[-500:])
    out, res, rt, _ = run(probe, env={'CORRAL_IMAGE_DIR': img})
    check(text(out, 'stdout').split()[3] == 'False', 'a sandbox made for a waiting call preloads nothing', (out, res))
    out, res, rt, _ = run(probe, env={'CORRAL_IMAGE_DIR': img, 'CORRAL_PRELOAD': '1', 'CORRAL_PRELOAD_MODULES': ''})
    check(text(out, 'stdout').split()[3] == 'False' and text(out, 'stdout').split()[-1] == 'False',
          "the daemon's `preload` (here none) replaces the image's list, and is not left for the code", (out, res))
    out, res, rt, _ = run("import sys\nprint('colorsys' in sys.modules)",
                          env={'CORRAL_IMAGE_DIR': img, 'CORRAL_PRELOAD': '1', 'CORRAL_PRELOAD_MODULES': 'colorsys'})
    check(text(out, 'stdout') == 'True\n', "`preload` modules are imported ahead", (out, res))
    shutil.rmtree('/tmp/' + SKEL, ignore_errors=True)
    shutil.rmtree(img, ignore_errors=True)


@case
def image_warmup():
    img = image_dir()
    for warm, want, logged in (("import sys\nsys.modules['colorsys'] = 'rehearsed'", 'rehearsed\n', None),
                               ("raise ValueError('no fonts')", 'absent\n',
                                'preloading the warm-up failed: ValueError: no fonts')):
        with open(os.path.join(img, 'profile.json'), 'w') as f:
            json.dump({'preload': [], 'warm': warm}, f)
        out, res, rt, _ = run("import sys\nprint(sys.modules.get('colorsys', 'absent'))",
                              env={'CORRAL_IMAGE_DIR': img, 'CORRAL_PRELOAD': '1'})
        check(text(out, 'stdout') == want and res.get('status') == 'ok' and (logged is None or logged in rt.err),
              "image warm-up: run in a pool sandbox's worker after its preloads%s" % (
                  '' if logged is None else '; one that fails is logged and the sandbox serves'), (out, res, rt.err[-300:]))
    shutil.rmtree('/tmp/' + SKEL, ignore_errors=True)
    shutil.rmtree(img, ignore_errors=True)


@case
def workspace_out():
    ws = owned_dir('corral-ws-out-')
    out, res, rt, _ = run("import os\nprint(os.path.isdir(os.environ['CORRAL_WORKSPACE'] + '/out'))",
                          env={'CORRAL_WORKSPACE': ws})
    check(text(out, 'stdout') == 'True\n', '/workspace/out exists when the code starts', (out, res))


# A single-use run's out files ride in its result, within out_inline_max.
@case
def out_files_inline():
    ws = owned_dir('corral-ws-inline-')
    rt = Runtime({'CORRAL_WORKSPACE': ws})
    rt.ready()
    rt.send({'jsonrpc': '2.0', 'id': 7, 'method': 'sandbox/exec', 'params': {
        'language': 'python', 'output_limit': 1 << 20, 'out_inline_max': 16,
        'code': "import os\nopen('out/a.txt', 'w').write('hello')\nopen('out/b.bin', 'wb').write(b'x' * 40)\n"
                "os.symlink('/etc/passwd', 'out/link')"}})
    _, resp = rt.response(7)
    rc, err = rt.close()
    files = {f['path']: f for f in ((resp or {}).get('result') or {}).get('out_files') or []}
    check(files.get('out/a.txt', {}).get('data') == 'aGVsbG8=' and 'data' not in files.get('out/b.bin', {'data': 1})
          and 'out/link' not in files and rc == 0,
          'out files: what fits in out_inline_max comes inline (base64), the rest is listed for the daemon to fetch',
          (resp, err[-300:]))


# sandbox/file/read and sandbox/file/write: chunks of a binary file in and
# out, symlinks inside the workspace followed, every way out refused with a
# kind the daemon turns into its words.
@case
def file_frames():
    ws = owned_dir('corral-ws-file-')
    rt = Runtime({'CORRAL_WORKSPACE': ws})
    rt.ready()
    n = [0]

    def ask(method, params):
        n[0] += 1
        rt.send({'jsonrpc': '2.0', 'id': 'f%d' % n[0], 'method': 'sandbox/file/' + method, 'params': params})
        return rt.response('f%d' % n[0])[1] or {}

    def kind(resp):
        e = resp.get('error') or {}
        return e.get('code') == -32001 and (e.get('data') or {}).get('kind')

    blob = os.urandom(300000) + bytes(range(256))
    answers = [ask('write', {'path': 'new/dir/blob.bin', 'offset': off, 'data': b64(blob[off:off + 100000])})
               for off in range(0, len(blob), 100000)]
    check(all(a.get('result', {}).get('path') == ws + '/new/dir/blob.bin' for a in answers)
          and answers[-1]['result'].get('size') == len(blob),
          'file/write: chunks at their offsets, missing directories made', answers[-1])
    got, off, size = b'', 0, None
    while True:
        r = ask('read', {'path': 'new/dir/blob.bin', 'offset': off, 'length': 70000, 'max': 1 << 20}).get('result') or {}
        chunk = base64.b64decode(r.get('data', ''))
        size = r.get('size')
        got += chunk
        off += len(chunk)
        if len(chunk) < 70000:
            break
    check(hashlib.sha256(got).hexdigest() == hashlib.sha256(blob).hexdigest() and size == len(blob),
          'file/read: the same bytes back, chunk by chunk, with the size', (len(got), size))
    with open(os.path.join(ws, 'new', 'dir', 'blob.bin'), 'rb') as f:
        check(f.read() == blob, 'file/write: the file holds exactly what was written')
    st = os.stat(os.path.join(ws, 'new', 'dir'))
    check(oct(st.st_mode & 0o777) == '0o755', 'file/write: directories it makes are 0755', oct(st.st_mode))
    small = ask('write', {'path': 'new/dir/blob.bin', 'offset': 0, 'data': b64(b'short')})
    with open(os.path.join(ws, 'new', 'dir', 'blob.bin'), 'rb') as f:
        check(small.get('result', {}).get('size') == 5 and f.read() == b'short',
              'file/write at offset 0 replaces a file', small)
    check(kind(ask('write', {'path': 'new/dir/blob.bin', 'offset': 9, 'data': b64(b'x')})) == 'EIO',
          'file/write: a chunk not where the file ends is refused')

    os.makedirs(os.path.join(ws, 'real'))
    with open(os.path.join(ws, 'real', 'ok.txt'), 'w') as f:
        f.write('inside')
    if os.geteuid() == 0:
        os.chown(os.path.join(ws, 'real'), 65534, 65534)
    escape = 'corral-escape-%d' % os.getpid()
    os.symlink('real/ok.txt', os.path.join(ws, 'alias.txt'))
    os.symlink('/etc/passwd', os.path.join(ws, 'pw'))
    os.symlink('/etc', os.path.join(ws, 'etc-link'))
    os.symlink('../../tmp', os.path.join(ws, 'real', 'up'))
    os.symlink('/proc/1/fd/1', os.path.join(ws, 'proc-link'))
    os.symlink(ws + '/real', os.path.join(ws, 'abs-link'))
    os.symlink('loop-b', os.path.join(ws, 'loop-a'))
    os.symlink('loop-a', os.path.join(ws, 'loop-b'))
    os.mkfifo(os.path.join(ws, 'fifo'))
    alias = ask('read', {'path': 'alias.txt', 'length': 100, 'max': 100}).get('result') or {}
    check(base64.b64decode(alias.get('data', '')) == b'inside' and alias.get('path') == ws + '/real/ok.txt',
          'file/read: a symlink inside the workspace is followed and the real path said', alias)
    via = ask('write', {'path': 'abs-link/new.txt', 'data': b64(b'v')}).get('result') or {}
    check(via.get('path') == ws + '/real/new.txt' and os.path.exists(os.path.join(ws, 'real', 'new.txt')),
          'file/write: through an absolute link that stays inside', via)
    pw = ask('read', {'path': 'pw', 'length': 100, 'max': 100})
    el = ask('read', {'path': 'etc-link/passwd', 'length': 100, 'max': 100})
    check(kind(pw) == 'EPERM' and pw['error']['data'].get('target') == '/etc/passwd'
          and pw['error']['data'].get('at') == ws + '/pw'
          and kind(el) == 'EPERM' and el['error']['data'].get('target') == '/etc'
          and el['error']['data'].get('at') == ws + '/etc-link',
          'file/read: a symlink out of the workspace is refused, naming it and its target', (pw, el))
    outs = [ask('write', {'path': p, 'data': b64(b'x')}) for p in ('etc-link/' + escape, 'real/up/' + escape, 'proc-link')]
    outs.append(ask('read', {'path': 'proc-link', 'length': 10, 'max': 10}))
    check(all(kind(o) == 'EPERM' for o in outs) and not os.path.exists('/tmp/' + escape),
          'file/write and read: no way out through links, /proc/1 included', outs)
    cases = {
        'missing': (ask('read', {'path': 'nope/x', 'length': 1, 'max': 1}), 'ENOENT'),
        'notdir': (ask('read', {'path': 'real/ok.txt/x', 'length': 1, 'max': 1}), 'ENOTDIR'),
        'isdir': (ask('read', {'path': 'real', 'length': 1, 'max': 1}), 'EISDIR'),
        'write isdir': (ask('write', {'path': 'real', 'data': ''}), 'EISDIR'),
        'fifo': (ask('read', {'path': 'fifo', 'length': 1, 'max': 1}), 'EINVAL'),
        'write fifo': (ask('write', {'path': 'fifo', 'data': b64(b'x')}), 'EINVAL'),
        'loop': (ask('read', {'path': 'loop-a', 'length': 1, 'max': 1}), 'ELOOP'),
        'dotdot': (ask('read', {'path': 'real/../pw', 'length': 1, 'max': 1}), 'EINVAL'),
        'bad base64': (ask('write', {'path': 'b.txt', 'data': '!!!'}), 'EINVAL'),
        'bad params': (ask('read', {'path': 3}), 'EINVAL'),
    }
    check(all(kind(r) == k for r, k in cases.values()),
          'file requests: missing, not a directory, a directory, a FIFO, a loop, "..", bad params',
          {n: r for n, (r, k) in cases.items() if kind(r) != k})
    big = ask('read', {'path': 'alias.txt', 'length': 100, 'max': 3})
    check(kind(big) == 'EFBIG' and big['error']['data'].get('size') == 6,
          'file/read: a file over max is refused with its size', big)
    rc, err = rt.close()
    check(rc == 0 and not rt.bad, 'file requests: the runtime served them all and exits 0', err[-500:])
    shutil.rmtree(ws, ignore_errors=True)


# read_out_file, called in the runtime's own code: no link on the path is
# followed, nothing but a regular file within the size is read.
def runtime_namespace(workspace_prefix):
    """The assembled runtime's globals, and a fresh directory for its
    WORKSPACE (the caller sets it)."""
    ns = {'__name__': 'corral_runtime_test'}
    exec(compile(SOURCE, 'corral_runtime.py', 'exec'), ns)
    return ns, tempfile.mkdtemp(prefix=workspace_prefix)


@case
def read_out_file():
    ns, rd = runtime_namespace('corral-read-')
    os.makedirs(os.path.join(rd, 'out', 'dir'))
    with open(os.path.join(rd, 'out', 'dir', 'f.txt'), 'w') as f:
        f.write('data')
    os.symlink(os.path.join(rd, 'out', 'dir'), os.path.join(rd, 'out', 'dirlink'))
    os.symlink(os.path.join(rd, 'out', 'dir', 'f.txt'), os.path.join(rd, 'out', 'filelink'))
    os.mkfifo(os.path.join(rd, 'out', 'fifo'))
    ns['WORKSPACE'] = rd
    reads = {p: ns['read_out_file'](p, 100) for p in
             ('out/dir/f.txt', 'out/dirlink/f.txt', 'out/filelink', 'out/fifo', 'out/../out/dir/f.txt', 'out/dir')}
    reads['too big'] = ns['read_out_file']('out/dir/f.txt', 3)
    check(reads == {'out/dir/f.txt': b'data', 'out/dirlink/f.txt': None, 'out/filelink': None, 'out/fifo': None,
                    'out/../out/dir/f.txt': None, 'out/dir': None, 'too big': None},
          'read_out_file: a regular file within the size, never through a link, a FIFO or ".."', reads)
    shutil.rmtree(rd, ignore_errors=True)


# sandbox/list resolves the path once, then follows nothing: a component
# swapped for a link after the check (to /proc/1, whose entries PID 1 could
# read) is an error, not a listing of where it leads. The swap is played by
# a realpath that answers with the path as it was checked.
@case
def list_no_follow():
    ns, rd = runtime_namespace('corral-list-')
    os.makedirs(os.path.join(rd, 'a', 'sub'))
    open(os.path.join(rd, 'a', 'f.txt'), 'w').write('x')
    os.symlink('f.txt', os.path.join(rd, 'a', 'ln'))
    ns['WORKSPACE'] = rd
    ok_res, ok_err = ns['list_dir']({'path': os.path.join(rd, 'a'), 'recursive': True})
    got = sorted((e['path'], e['type'], e.get('target')) for e in ok_res['entries']) if ok_res else None
    check(ok_err is None and got == [('f.txt', 'file', None), ('ln', 'symlink', 'f.txt'), ('sub', 'dir', None)],
          'list_dir: entries by open directories, links listed with their targets, not followed', (ok_res, ok_err))
    one, _ = ns['list_dir']({'path': os.path.join(rd, 'a', 'f.txt')})
    check(one and [e['path'] for e in one['entries']] == ['f.txt'], 'a file is listed alone', one)
    outside = tempfile.mkdtemp(prefix='corral-outside-')
    open(os.path.join(outside, 'secret'), 'w').write('s')
    shutil.rmtree(os.path.join(rd, 'a', 'sub'))
    os.symlink(outside, os.path.join(rd, 'a', 'sub'))  # swapped after the check
    real = ns['os'].path.realpath
    try:
        ns['os'].path.realpath = lambda p: p
        res, err = ns['list_dir']({'path': os.path.join(rd, 'a', 'sub'), 'recursive': True})
        mid, mid_err = ns['list_dir']({'path': os.path.join(rd, 'a', 'sub', 'secret')})
    finally:
        ns['os'].path.realpath = real
    check(res and [(e['path'], e['type']) for e in res['entries']] == [('sub', 'symlink')] and 'secret' not in str(res),
          'the last component swapped for a link out after the check: the link itself, not where it leads', (res, err))
    check(mid is None and bool(mid_err) and ('Too many levels' in mid_err or 'Not a directory' in mid_err),
          'a component on the way swapped: an error, nothing listed', (mid, mid_err))
    shutil.rmtree(rd, ignore_errors=True)
    shutil.rmtree(outside, ignore_errors=True)


# What a data frame's line may announce (the daemon's frame_data_size says
# the same: tests/unit/test-frame-auth.c).
@case
def data_size_grammar():
    ns, rd = runtime_namespace('corral-size-')
    shutil.rmtree(rd, ignore_errors=True)
    size = ns['data_size']
    cases = {b'1 1': 1, b'12 65536': 65536, b'9999999999999999 5': 5, b'1 65537': 0, b'1 0': 0,
             b'0 1': 0, b'01 1': 0, b'1 01': 0, b'1  1': 0, b'1 1 ': 0, b' 1 1': 0, b'1': 0,
             b'12345678901234567 1': 0, b'1 1234567': 0, b'1 +1': 0, b'1 \xd9\xa1': 0}
    got = {k: size(k) for k in cases}
    check(got == cases, 'data frames: SIZE 1 to 65536 and CONN of at most 16 digits, no leading zeros, '
          'one space, nothing else', got)


def main(argv):
    if argv == ['--list']:
        print('\n'.join(c.__name__ for c in CASES))
        return 0
    chosen = [c for c in CASES if not argv or any(p == c.__name__ or re.search(p, c.__name__) for p in argv)]
    if not chosen:
        print('Bail out! no case matches %s (--list shows the names)' % ' '.join(argv))
        return 1
    for c in chosen:
        print('# case %s' % c.__name__)
        try:
            c()
        except Exception:
            check(False, '%s: the case raised an exception' % c.__name__, traceback.format_exc())
    print('1..%d' % len(results))
    return 0 if all(results) else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

