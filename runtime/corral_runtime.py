# corral sandbox runtime: see runtime/README.md for the processes and the
# frame protocol.  The daemon starts it as `python3 -I -S -c <this file>`, so
# it is standard library only, Python 3.8+, and never relies on __file__.
import codecs
import json
import os
import select
import signal
import sys
import time

PROTOCOL = 1
CHUNK = 64 * 1024                  # read size and max UTF-8 bytes of `data`
DEFAULT_OUTPUT_LIMIT = 1024 * 1024
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
MIN_MAX_FRAME = 64 * 1024
DRAIN_SECONDS = 0.2                # a background grandchild may hold the pipes forever
REPORT_CAP = 1024 * 1024           # untrusted: bound it (fits 72 Ki chars escaped 6x)
MESSAGE_CAP = 8 * 1024             # chars
TRACEBACK_CAP = 64 * 1024          # chars, the last ones are kept
FILENAME = '<corral>'
CO_COROUTINE = 0x80                # inspect.CO_COROUTINE, without importing inspect
OOM_FILES = ('/sys/fs/cgroup/memory.events',                # cgroup v2
             '/sys/fs/cgroup/memory/memory.oom_control')    # cgroup v1


def log(msg):
    try:
        os.write(2, ('corral-runtime: %s\n' % msg).encode('utf-8', 'replace'))
    except OSError:
        pass


def set_dumpable(flag):
    # A non-dumpable process has root-owned /proc/<pid> entries and cannot be
    # ptraced without CAP_SYS_PTRACE.  The worker runs as the same uid as the
    # supervisor, so without this user code could open /proc/1/fd/<frame fd>
    # and write forged frames.
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(4, flag, 0, 0, 0) == 0  # PR_SET_DUMPABLE
    except Exception:
        return False


def oom_kills():
    """The memory cgroup's OOM-kill counter, or None when there is none (host)."""
    for path in OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(' ')
                    if key == 'oom_kill':
                        return int(value)
        except (OSError, ValueError):
            pass
    return None


def error_record(e):
    """Type, message and traceback of an exception, user frames only."""
    import traceback
    t = type(e)
    name = t.__qualname__ if t.__module__ in ('builtins', '__main__') else t.__module__ + '.' + t.__qualname__
    try:
        message = str(e)
    except Exception:
        message = '<unprintable %s object>' % name
    # The runtime's own frames (worker code, asyncio.run plumbing) all come
    # before the first frame of the user's code: drop them.
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    text = ''.join(traceback.format_exception(t, e, tb))
    return {'type': name, 'message': message[:MESSAGE_CAP], 'traceback': tail(text, TRACEBACK_CAP)}


def tail(text, n):
    return text if len(text) <= n else '[traceback truncated]\n' + text[-n:]


def reject_constant(name):
    # NaN/Infinity are not JSON; accepting them could echo one back in an id
    raise ValueError(name)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------- worker --

def worker(sup, language, code, pipes, go_r=None):
    """Runs in the forked child; never returns.  With go_r (forked ahead, at
    start-up) it sets itself up first and then waits for the request there,
    so that a call pays for neither the fork nor the set-up."""
    out_w, err_w, report_w = pipes
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    # Frame fds first, explicitly, while we are still non-dumpable (inherited
    # from the supervisor) so nothing can grab them through /proc meanwhile.
    # Everything else but the report pipe goes too: user code must never hold
    # a descriptor of the supervisor's.
    for fd in (sup.frame_in, sup.frame_out):
        os.close(fd)
    set_dumpable(1)            # ordinary /proc/self for user code
    try:
        fds = [int(name) for name in os.listdir('/proc/self/fd')]
    except OSError:
        fds = range(3, 4096)
    for fd in fds:
        if fd > 2 and fd not in (report_w, go_r):
            try:
                os.close(fd)
            except OSError:
                pass
    try:
        os.setpgid(0, 0)       # lets the supervisor kill leftovers when not PID 1
    except OSError:
        pass
    try:                       # under memory pressure the kernel kills us, not PID 1
        with open('/proc/self/oom_score_adj', 'w') as f:
            f.write('1000')
    except OSError:
        pass
    # The daemon cannot set WorkingDir (Docker would make /workspace 0755
    # root-owned under the tmpfs), so the worker starts there itself.
    for d in ('/workspace', '/tmp'):
        try:
            os.chdir(d)
            break
        except OSError:
            pass
    if go_r is not None:
        data = bytearray()
        while True:
            chunk = os.read(go_r, 65536)
            if not chunk:
                break
            data += chunk
        os.close(go_r)
        try:
            request = json.loads(data.decode('utf-8'))
            language, code = request['language'], request['code']
        except Exception:
            os._exit(0)            # the supervisor went away or changed its mind
    if language == 'shell':
        # exec keeps ignored signals ignored: give sh the defaults Python took away
        for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execv('/bin/sh', ['/bin/sh', '-c', code])
        except Exception as e:  # OSError, or ValueError for a NUL in code
            report(report_w, {'type': type(e).__name__, 'message': str(e), 'traceback': ''})
        os._exit(127)
    os._exit(run_python(code, report_w))


def report(fd, record):
    try:
        write_all(fd, json.dumps(record).encode())
    except Exception:
        pass


_site_loaded = False


def load_site():
    """-S skipped site: give user code what `python3 -c` has (exit(), quit(),
    the image's dist-packages).  -I still keeps out user site dirs and
    PYTHON* variables.  Done once, by the supervisor before it says ready, so
    that a call taken from the warm pool does not pay for it."""
    global _site_loaded
    if _site_loaded:
        return
    _site_loaded = True
    try:
        import site
        site.main()
    except Exception:
        pass


def warm_up():
    """Import now what every run needs, before `sandbox/ready`."""
    load_site()
    import ast, asyncio, builtins, linecache, traceback, types  # noqa: F401,E401


def run_python(code, report_w):
    import ast
    import builtins
    import linecache
    import traceback  # noqa: F401  imported now: importing after a MemoryError may fail
    import types
    signal.signal(signal.SIGINT, signal.default_int_handler)
    load_site()
    sys.stdin = sys.__stdin__ = open(0, 'r', encoding='utf-8', closefd=False)
    sys.stdout = sys.__stdout__ = open(1, 'w', encoding='utf-8', buffering=1, closefd=False)
    sys.stderr = sys.__stderr__ = open(2, 'w', encoding='utf-8', errors='backslashreplace',
                                       buffering=1, closefd=False)
    # A fresh __main__ (pickle and multiprocessing look classes up there),
    # and the source in linecache so tracebacks show the user's lines.
    main = types.ModuleType('__main__')
    main.__dict__['__builtins__'] = builtins
    sys.modules['__main__'] = main
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    status = 0
    try:
        compiled = compile(code, FILENAME, 'exec', flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                           dont_inherit=True)
        result = eval(compiled, main.__dict__)
        if compiled.co_flags & CO_COROUTINE:
            import asyncio
            asyncio.run(result)
    except SystemExit as e:
        status = exit_status(e)
    except BaseException as e:  # noqa: B036  KeyboardInterrupt and friends too
        status = 1
        try:
            record = error_record(e)
        except BaseException:  # e.g. MemoryError again while formatting
            record = {'type': type(e).__name__, 'message': '', 'traceback': ''}
        report(report_w, record)
    # What interpreter shutdown would do: wait for non-daemon threads, run
    # atexit handlers, flush.  os._exit so we never return into the supervisor.
    try:
        if 'threading' in sys.modules:
            sys.modules['threading']._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    return status


def exit_status(e):
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)  # as the interpreter does for sys.exit('msg')
    except BaseException:
        pass
    return 1


# ------------------------------------------------------------ supervisor --

class Stream:
    """One of the worker's output pipes."""

    def __init__(self, sup, name, fd, limit):
        self.sup, self.name, self.fd, self.limit = sup, name, fd, limit
        self.total = self.sent = 0
        # per stream, so a character split across reads is decoded whole
        self.decoder = codecs.getincrementaldecoder('utf-8')(errors='replace')

    def feed(self, data):
        self.total += len(data)
        room = self.limit - self.sent
        if room > 0:
            part = data[:room]
            self.sent += len(part)
            self.emit(self.decoder.decode(part))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            if self.sent < self.limit:  # past the limit a cut character is just dropped
                self.emit(self.decoder.decode(b'', True))

    def emit(self, text):
        raw = text.encode('utf-8')
        while raw:
            n = min(len(raw), self.sup.out_chunk)
            while n < len(raw) and raw[n] & 0xC0 == 0x80:  # never split a character
                n -= 1
            self.sup.send({'jsonrpc': '2.0', 'method': 'sandbox/output',
                           'params': {'stream': self.name, 'data': raw[:n].decode('utf-8')}})
            raw = raw[n:]


class Job:
    def __init__(self, rid, pid, streams, report_fd, oom_before):
        self.rid, self.pid, self.streams = rid, pid, streams
        self.report_fd, self.report = report_fd, bytearray()
        self.oom_before = oom_before
        self.wait_status = None
        self.deadline = None

    def read_report(self):
        try:
            data = os.read(self.report_fd, CHUNK)
        except BlockingIOError:
            return
        if not data:
            os.close(self.report_fd)
            self.report_fd = None
        elif len(self.report) < REPORT_CAP:
            self.report += data

    def done(self):
        return self.wait_status is not None and (
            time.monotonic() >= self.deadline or all(s.fd is None for s in self.streams.values()))

    def error(self, budget):
        """The worker's report, checked: user code can write anything to that pipe."""
        try:
            rec = json.loads(self.report.decode('utf-8'))
        except (ValueError, RecursionError):
            return None
        if not isinstance(rec, dict) or not isinstance(rec.get('type'), str):
            return None
        text = lambda v: v if isinstance(v, str) else ''
        return {'type': rec['type'][:256], 'message': text(rec.get('message'))[:budget // 2],
                'traceback': tail(text(rec.get('traceback')), budget)}

    def result(self, budget):
        st = self.wait_status
        signum = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
        code = 128 + signum if signum is not None else os.WEXITSTATUS(st)
        after = oom_kills()
        oom_killed = None not in (self.oom_before, after) and after > self.oom_before
        error = self.error(budget)
        if error is not None and error['type'] == 'MemoryError':
            status = 'oom'
        elif signum is not None:
            status = 'oom' if oom_killed and signum == signal.SIGKILL else 'killed'
        elif code == 0 and error is None:
            status = 'ok'
        else:  # e.g. a shell whose child was OOM-killed exits 137
            status = 'oom' if oom_killed else 'error'
        return {'status': status, 'exit_code': code, 'signal': signum,
                'stdout_bytes': self.streams['stdout'].total,
                'stderr_bytes': self.streams['stderr'].total, 'error': error}


class Supervisor:
    def __init__(self):
        # Private close-on-exec copies of the channel; fd 0/1 become /dev/null
        # so nothing we start inherits the channel by accident.
        self.frame_in, self.frame_out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        os.set_blocking(self.frame_out, True)  # frames are written whole, in order
        if not set_dumpable(0):
            log('warning: cannot clear the dumpable flag; same-uid processes may reach /proc/%d/fd'
                % os.getpid())
        try:
            self.max_frame = int(os.environ.get('CORRAL_MAX_FRAME', ''))
        except ValueError:
            self.max_frame = 0
        if self.max_frame <= 0:
            self.max_frame = DEFAULT_MAX_FRAME
        self.max_frame = max(self.max_frame, MIN_MAX_FRAME)
        # Our own frames must fit the daemon's limit too.  JSON escapes a
        # control character as 6 bytes, so text gets at most 1/8 of a frame
        # (output data) or 1/16 + 1/32 (traceback + message).
        self.out_chunk = min(CHUNK, self.max_frame // 8)
        self.text_budget = min(TRACEBACK_CAP, self.max_frame // 16)
        self.inbuf, self.scanned, self.skipping, self.eof = bytearray(), 0, False, False
        self.job = None
        self.pre = None
        # PID 1 only gets signals it has handlers for; SIGINT's Python handler
        # would raise KeyboardInterrupt in here, so ignore it.  SIGCHLD wakes
        # poll() through the wakeup pipe.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_w = wake_w
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def send(self, obj):
        # One write loop per frame on a blocking fd, single thread: frames
        # never interleave.  json escapes control characters, so a frame is
        # exactly one line; 'replace' turns lone surrogates into '?'.
        line = json.dumps(obj, ensure_ascii=False, separators=(',', ':')) + '\n'
        try:
            write_all(self.frame_out, line.encode('utf-8', 'replace'))
        except OSError as e:
            log('frame channel lost (%s), exiting' % e)
            self.kill_leftovers()
            os._exit(1)

    def reply_error(self, rid, code, message):
        self.send({'jsonrpc': '2.0', 'id': rid, 'error': {'code': code, 'message': message}})

    def serve(self):
        warm_up()
        self.prefork()
        self.send({'jsonrpc': '2.0', 'method': 'sandbox/ready',
                   'params': {'protocol': PROTOCOL, 'runtime': 'corral-runtime',
                              'python': sys.version.split()[0]}})
        while True:
            self.reap()
            job = self.job
            if job is not None and job.done():
                return self.finish()
            if job is None and self.eof:
                return 0
            poller = select.poll()
            fds = [self.wake_r] + ([] if self.eof else [self.frame_in])
            if job is not None:
                fds += [s.fd for s in job.streams.values() if s.fd is not None]
                if job.report_fd is not None:
                    fds.append(job.report_fd)
            for fd in fds:
                poller.register(fd, select.POLLIN)
            if job is None:
                timeout = None
            elif job.deadline is None:
                timeout = 1000  # reap() fallback should a SIGCHLD wakeup get lost
            else:
                timeout = max(0, int((job.deadline - time.monotonic()) * 1000) + 1)
            for fd, _ in poller.poll(timeout):
                self.ready(fd)

    def ready(self, fd):
        job = self.job
        if fd == self.wake_r:
            try:
                while os.read(fd, 512):
                    pass
            except BlockingIOError:
                pass
        elif fd == self.frame_in:
            try:
                data = os.read(fd, CHUNK)
            except OSError:
                data = b''
            if not data:
                self.eof = True  # a running exec still completes and answers
            for line in self.lines(data):
                self.handle(line)
        elif job is not None and fd == job.report_fd:
            job.read_report()
        elif job is not None:
            for s in job.streams.values():
                if s.fd == fd:
                    try:
                        data = os.read(fd, CHUNK)
                    except BlockingIOError:
                        return
                    if data:
                        s.feed(data)
                    else:
                        s.close()

    def lines(self, data):
        """Complete lines from the frame channel; None for an over-long one."""
        buf = self.inbuf
        buf += data
        while True:
            i = buf.find(b'\n', self.scanned)  # only scan new bytes: lines may be huge
            if i < 0:
                self.scanned = len(buf)
                if not self.skipping and len(buf) > self.max_frame:
                    self.skipping = True  # answer now, the newline may never come
                    yield None
                if self.skipping:
                    del buf[:]
                    self.scanned = 0
                return
            line = bytes(buf[:i])
            del buf[:i + 1]
            self.scanned = 0
            if self.skipping:
                self.skipping = False
            elif len(line) > self.max_frame:
                yield None
            elif line.strip():
                yield line

    def handle(self, line):
        if line is None:
            log('dropped a frame longer than %d bytes' % self.max_frame)
            return self.reply_error(None, -32600, 'frame longer than %d bytes' % self.max_frame)
        try:
            msg = json.loads(line.decode('utf-8'), parse_constant=reject_constant)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return self.reply_error(None, -32700, 'parse error')
        if not isinstance(msg, dict):  # batches are not part of the protocol
            return self.reply_error(None, -32600, 'invalid request')
        rid = msg.get('id')
        id_ok = rid is None or (isinstance(rid, (str, int, float)) and not isinstance(rid, bool))
        if msg.get('jsonrpc') != '2.0' or not isinstance(msg.get('method'), str) or not id_ok:
            return self.reply_error(rid if id_ok else None, -32600, 'invalid request')
        method = msg['method']
        if 'id' not in msg:  # a notification: never answered
            log('ignored notification %r' % method[:100])
        elif method != 'sandbox/exec':
            self.reply_error(rid, -32601, 'method not found: %s' % method[:100])
        elif self.job is not None:
            self.reply_error(rid, -32000, 'an exec is already running')
        else:
            self.start(rid, msg.get('params'))

    def prefork(self):
        """Fork the worker now, before `sandbox/ready`: it sets itself up and
        waits for its request, so a call from the warm pool skips the fork.
        Failure is fine: start() then forks as before."""
        made = []
        try:
            for _ in range(4):
                made += os.pipe()
            pid = os.fork()
        except OSError as e:
            for fd in made:
                os.close(fd)
            log('cannot fork the worker ahead: %s' % e)
            return
        out_r, out_w, err_r, err_w, rep_r, rep_w, go_r, go_w = made
        if pid == 0:
            try:
                os.close(go_w)
                worker(self, None, None, (out_w, err_w, rep_w), go_r)
            finally:
                os._exit(127)
        for fd in (out_w, err_w, rep_w, go_r):
            os.close(fd)
        self.pre = (pid, out_r, err_r, rep_r, go_w)

    def start(self, rid, params):
        p = params if isinstance(params, dict) else {}
        language, code = p.get('language'), p.get('code')
        limit = p.get('output_limit', DEFAULT_OUTPUT_LIMIT)
        if language not in ('python', 'shell') or not isinstance(code, str) \
                or not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            return self.reply_error(rid, -32602, 'invalid params: want language "python"|"shell", '
                                    'code string, output_limit >= 0')
        pre, self.pre = self.pre, None
        if pre is not None:
            pid, out_r, err_r, rep_r, go_w = pre
            oom_before = oom_kills()
            try:
                write_all(go_w, json.dumps({'language': language, 'code': code}).encode())
                os.close(go_w)
            except OSError as e:       # it died waiting: fork afresh below
                log('the forked-ahead worker is gone (%s); forking again' % e)
                for fd in (out_r, err_r, rep_r, go_w):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            else:
                for fd in (out_r, err_r, rep_r):
                    os.set_blocking(fd, False)
                self.job = Job(rid, pid, {'stdout': Stream(self, 'stdout', out_r, limit),
                                          'stderr': Stream(self, 'stderr', err_r, limit)},
                               rep_r, oom_before)
                return
        made = []
        try:
            for _ in range(3):
                made += os.pipe()
            oom_before = oom_kills()
            # The only fork the supervisor ever makes: a fork bomb in user code
            # exhausting pids cannot starve it later.
            pid = os.fork()
        except OSError as e:
            for fd in made:
                os.close(fd)
            log('cannot start worker: %s' % e)
            return self.reply_error(rid, -32603, 'cannot start worker: %s' % e)
        out_r, out_w, err_r, err_w, rep_r, rep_w = made
        if pid == 0:
            try:
                worker(self, language, code, (out_w, err_w, rep_w))
            finally:
                os._exit(127)
        for fd in (out_w, err_w, rep_w):
            os.close(fd)
        for fd in (out_r, err_r, rep_r):
            os.set_blocking(fd, False)
        self.job = Job(rid, pid, {'stdout': Stream(self, 'stdout', out_r, limit),
                                  'stderr': Stream(self, 'stderr', err_r, limit)}, rep_r, oom_before)

    def reap(self):
        # PID 1 inherits every orphan: reap them all, remember the worker.
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.job
            if job is not None and pid == job.pid:
                job.wait_status = st
                job.deadline = time.monotonic() + DRAIN_SECONDS

    def finish(self):
        job = self.job
        while job.report_fd is not None:  # written before the worker exited
            before = len(job.report)
            job.read_report()
            if job.report_fd is not None and len(job.report) == before:
                os.close(job.report_fd)  # a user process still holds it: stop here
                job.report_fd = None
        for s in job.streams.values():
            s.close()
        self.send({'jsonrpc': '2.0', 'id': job.rid, 'result': job.result(self.text_budget)})
        self.kill_leftovers()
        return 0

    def kill_leftovers(self):
        # As PID 1 our exit kills the whole namespace; elsewhere (tests,
        # --init) kill the worker's process group so `sleep 100 &` goes too.
        if self.job is not None:
            try:
                os.killpg(self.job.pid, signal.SIGKILL)
            except OSError:
                pass


if __name__ == '__main__':
    sys.exit(Supervisor().serve())
