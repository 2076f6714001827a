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
TOP_LEVEL_AWAIT = 0x2000           # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, without importing ast
OOM_FILES = ('/sys/fs/cgroup/memory.events',                # cgroup v2
             '/sys/fs/cgroup/memory/memory.oom_control')    # cgroup v1
MEMORY_FILES = ('/sys/fs/cgroup/memory.current',             # cgroup v2
                '/sys/fs/cgroup/memory/memory.usage_in_bytes')  # cgroup v1
WORKSPACE = os.environ.get('CORRAL_WORKSPACE') or '/workspace'  # tests set another
OUT_DIR = WORKSPACE + '/out'       # files the code writes here come back with the result
IMAGE_DIR = os.environ.get('CORRAL_IMAGE_DIR') or '/usr/share/corral'  # images/build.sh: profile.json, tmp/ (tests set another)
OUT_FILES_MAX = 64                 # files reported per run
OUT_SCAN_MAX = 4096                # entries looked at, at most
OUT_DEPTH_MAX = 8
LIST_MAX = 10000                   # entries of one sandbox/list
LIST_DEPTH_MAX = 32
INTERRUPT_GRACE = 1.0              # seconds a session's run has to stop after SIGINT
INTERRUPT_REPEAT = 0.1             # seconds between SIGINTs until the run ends
FREEZE_MAX = 30.0                  # seconds a sandbox/freeze lasts without a sandbox/thaw
ID_RANGE = 1 << 63                 # integer ids of worker requests: int64
PREFORK_WAIT = 10.0                # seconds for the forked-ahead worker to set up
PROGRESS_INTERVAL = 0.02           # seconds between corral.progress() frames
PROGRESS_MESSAGE_CAP = 1000        # chars
LIMIT_GRACE = 1.0                  # seconds past a run's time limit before the runtime stops it itself
TIME_LIMIT_MAX = 2 * 86400         # seconds: a longer time_limit_ms is refused


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
    cut_api_frames(e)
    text = ''.join(traceback.format_exception(t, e, tb))
    return {'type': name, 'message': message[:MESSAGE_CAP], 'traceback': tail(text, TRACEBACK_CAP)}


def cut_api_frames(e):
    """End each traceback of e's chain where user code called into the corral
    API (runtime code, so `<string>` frames without source): the user's line
    is the interesting one."""
    ours = globals()
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        tb = x.__traceback__
        while tb is not None and tb.tb_next is not None:
            if tb.tb_frame.f_globals is not ours and tb.tb_next.tb_frame.f_globals is ours:
                tb.tb_next = None  # writable since Python 3.7
                break
            tb = tb.tb_next
        stack += [x.__cause__, x.__context__]


def tail(text, n):
    return text if len(text) <= n else '[traceback truncated]\n' + text[-n:]


def reject_constant(name):
    # NaN/Infinity are not JSON; accepting them could echo one back in an id
    raise ValueError(name)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def encode(obj):
    """One frame: compact JSON and a newline.  json escapes control
    characters, so it is exactly one line; 'replace' turns lone surrogates
    into '?'.  ValueError for NaN/Infinity, which are not JSON."""
    line = json.dumps(obj, ensure_ascii=False, separators=(',', ':'), allow_nan=False) + '\n'
    return line.encode('utf-8', 'replace')


def one_way_pair():
    """(reader, writer): a socket pair whose bytes go one way only.  The
    writer's end cannot receive (a read gives EOF) and the reader's cannot
    send (a write fails with EPIPE), whoever holds them."""
    import _socket
    a, b = socket_pair()
    s = _socket.socket(fileno=b)
    try:
        s.shutdown(_socket.SHUT_RD)  # b's receive side, and so a's send side
    finally:
        s.detach()
    return a, b


def socket_pair():
    """Two connected AF_UNIX stream sockets as raw descriptors, both
    close-on-exec (Python makes every new descriptor non-inheritable)."""
    import _socket  # socket.py would cost a cold sandbox ~5 ms
    a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    return a.detach(), b.detach()


# ---------------------------------------------------------------- worker --

def worker(sup, pipes, api_fd, go_r, set_w=None):
    """Runs in the forked child; never returns.  It sets itself up, then
    reads its requests, one JSON line each, on go_r: forked ahead (at
    start-up, set_w given) a call pays for neither the fork nor the set-up.
    api_fd is its end of the API socket (close-on-exec: a shell or any
    program user code execs never holds it).  Closing set_w tells the
    supervisor it is set up.  A request with "keep" (a session) leaves the
    worker waiting for the next one, its Python globals intact."""
    out_w, err_w, report_w = pipes
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    # Frame fds first, explicitly, while we are still non-dumpable (inherited
    # from the supervisor) so nothing can grab them through /proc meanwhile.
    # Everything else but the report pipe and the API socket goes too: user
    # code must never hold a descriptor of the supervisor's.
    for fd in (sup.frame_in, sup.frame_out):
        os.close(fd)
    set_dumpable(1)            # ordinary /proc/self for user code
    try:
        fds = [int(name) for name in os.listdir('/proc/self/fd')]
    except OSError:
        fds = range(3, 4096)
    for fd in fds:
        if fd > 2 and fd not in (report_w, go_r, api_fd, set_w):
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
    for d in (WORKSPACE, '/tmp'):
        try:
            os.chdir(d)
            break
        except OSError:
            pass
    main = prepare_python()    # before the request: a warm call skips it
    if set_w is not None:
        if sup.pooled is not None:  # else the request is due now: nothing to win
            for line in preload(sup.pooled):
                try:  # the supervisor logs it
                    os.write(set_w, (line + '\n').encode('utf-8', 'replace')[:2048])
                except OSError:
                    pass
            rehearse(main, api_fd, sup.max_frame)
        os.close(set_w)
    me = os.getpid()
    pending = bytearray()
    while True:
        request = next_request(go_r, pending)
        if request is None:    # the supervisor went away or changed its mind
            os._exit(0)
        _interrupt['pending'] = False  # meant for an earlier run (repeats reach this one)
        language, code, servers = request['language'], request['code'], request['servers']
        keep = request.get('keep') is True
        # The run's token: the supervisor takes only the record that carries
        # it (runtime/README.md, "Records user code cannot forge").  It lives
        # in this frame only, never on a descriptor.
        token = request.pop('token', None)
        request = None
        signum, error = None, None
        if not keep:           # the last request: user code gets no handle on the pipe
            os.close(go_r)
        if language == 'shell' and not keep:
            os.close(api_fd)   # exec would close it anyway: no API for shells
            exec_shell(code, report_w, token)
        elif language == 'shell':
            status, signum, error = run_shell(code, report_w, token)
        else:
            status, error = run_python(main, code, (api_fd, sup.max_frame, servers), keep)
        if keep and os.getpid() != me:
            # A child that user code forked without exec came back through
            # here: it is not the session's interpreter.
            os._exit(status)
        if not keep:
            # Output first, so that EOF on the pipes is on its way while the
            # kernel tears this process down.  The supervisor learns the end
            # and the status from the kernel (waitpid), not from us.
            for fd in (0, 1, 2):
                try:
                    os.close(fd)
                except OSError:
                    pass
        sent = report(report_w, {'end': status, 'signal': signum, 'pid': os.getpid(), 'token': token,
                                 'error': error})
        if keep and sent:
            continue           # the session goes on: fds 0-2 stay
        # Single-use, or a session whose code broke the report socket: exit,
        # so that the supervisor learns the end from the kernel.
        os._exit(status)


def next_request(fd, pending):
    """The next request line on the go pipe, parsed; None at EOF or on a
    line that is not one (only the supervisor writes there).  `pending`
    (a bytearray) keeps what was read past that line."""
    start = 0
    while True:
        i = pending.find(b'\n', start)  # only new bytes: a request may be megabytes
        if i >= 0:
            break
        start = len(pending)
        try:
            chunk = os.read(fd, 1 << 20)
        except InterruptedError:
            continue
        except BlockingIOError:  # an earlier run's code made it non-blocking
            select.select([fd], [], [])
            continue
        if not chunk:
            return None
        pending += chunk
    line = bytes(pending[:i])
    del pending[:i + 1]
    try:
        request = json.loads(line.decode('utf-8'))
        return request if isinstance(request, dict) else None
    except ValueError:
        return None


def exec_shell(code, report_w, token):
    """A one-shot shell: the worker becomes /bin/sh -c code."""
    # exec keeps ignored signals ignored: give sh the defaults Python took away
    for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execv('/bin/sh', ['/bin/sh', '-c', code])
    except Exception as e:  # OSError, or ValueError for a NUL in code
        report(report_w, {'end': 127, 'signal': None, 'pid': os.getpid(), 'token': token,
                          'error': {'type': type(e).__name__, 'message': str(e), 'traceback': ''}})
    os._exit(127)


def run_shell(code, report_w, token):
    """A shell in a session: /bin/sh -c code as a child in a process group of
    its own, so that an interrupt (SIGINT to the worker) kills all of it and
    leaves the worker, and the session's Python state, alone.  Returns
    (exit status, signal or None, error record or None)."""
    try:
        pid = os.fork()
    except OSError as e:
        return 127, None, {'type': 'OSError', 'message': str(e), 'traceback': ''}
    if pid == 0:
        try:
            os.setpgid(0, 0)
            exec_shell(code, report_w, token)
        finally:
            os._exit(127)
    try:
        os.setpgid(pid, pid)   # either side may win the race; both set the same
    except OSError:
        pass
    st = None
    try:
        while st is None:
            try:
                arm_interrupt()
                st = os.waitpid(pid, 0)[1]
            except KeyboardInterrupt:  # interrupted: the whole group goes
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            except ChildProcessError:
                break
    finally:
        disarm_interrupt()
    if st is None:
        return 127, None, None
    if os.WIFSIGNALED(st):
        return 128 + os.WTERMSIG(st), os.WTERMSIG(st), None
    return os.WEXITSTATUS(st), None, None


# SIGINT in the worker: an interrupt (a session's time limit, a cancelled
# call) raises KeyboardInterrupt only while a run is armed; one that comes
# before the run has begun waits for it, and the supervisor repeats it
# until the run ends, so none is lost or hits the wrong run.
_interrupt = {'armed': False, 'pending': False}


def on_sigint(signum, frame):
    if _interrupt['armed']:
        raise KeyboardInterrupt
    _interrupt['pending'] = True


def arm_interrupt():
    """At the start of a run (inside its try): from now on SIGINT raises."""
    signal.signal(signal.SIGINT, on_sigint)  # an earlier run's code may have replaced it
    _interrupt['armed'] = True
    if _interrupt['pending']:
        _interrupt['pending'] = False
        raise KeyboardInterrupt


def disarm_interrupt():
    _interrupt['armed'] = False


def report(fd, record):
    """The run's one record on the report socket, as a JSON line: {end:
    status, signal, pid, token, error: {type, message, traceback} or
    null}.  False if it could not be written (user code closed or broke
    the descriptor)."""
    try:
        view = memoryview(json.dumps(record).encode() + b'\n')
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:  # user code made it non-blocking
                select.select([], [fd], [])
        return True
    except Exception:
        return False


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
    """Import now what every run needs, before `sandbox/ready`.  A sandbox
    made for the warm pool (CORRAL_PRELOAD=1) also imports asyncio, which
    top-level await and the API's awaitables use: ~70 ms that a pool sandbox
    pays before any call, and a sandbox made for a call waiting now should
    pay only if its code needs it.  Returns the modules its worker preloads
    (None: not a pool sandbox)."""
    load_site()
    import builtins, linecache, traceback, types  # noqa: F401,E401
    set_thread_counts()
    modules = apply_image_profile()
    if os.environ.pop('CORRAL_PRELOAD', '') != '1':
        return None
    import asyncio  # noqa: F401
    return modules


def cpu_limit():
    """The CPUs the sandbox may use (its cgroup's CFS quota), at least 1;
    None when there is no quota (outside a container)."""
    for path, parse in (('/sys/fs/cgroup/cpu.max', lambda t: t.split()),  # v2: "quota period"
                        ('/sys/fs/cgroup/cpu/cpu.cfs_quota_us', None)):   # v1
        try:
            with open(path) as f:
                text = f.read()
            if parse:
                quota, period = parse(text)
            else:
                quota = text.strip()
                with open('/sys/fs/cgroup/cpu/cpu.cfs_period_us') as f:
                    period = f.read().strip()
            if quota in ('max', '-1'):
                return None
            return max(1, int(quota) // int(period))
        except (OSError, ValueError):
            continue
    return None


def set_thread_counts():
    """Numeric libraries start a thread per host CPU; in a sandbox held to
    fewer CPUs the spare ones spin on the CPU quota and the kernel throttles
    the code (measured: a matplotlib savefig 85 ms instead of 37).  As many
    threads as the sandbox has CPUs, unless the container says otherwise."""
    n = cpu_limit()
    if n is not None:
        for var in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'NUMEXPR_NUM_THREADS'):
            os.environ.setdefault(var, str(n))


def apply_image_profile():
    """What an image built by corral asks for at start (IMAGE_DIR/profile.json):
    its variables, unless the container has them already, and its files for
    /tmp (matplotlib's font cache: /tmp is the only writable place it may
    use).  Returns the modules a pool sandbox preloads: CORRAL_PRELOAD_MODULES
    (the daemon's `preload` setting, comma-separated) when set, else the
    profile's list."""
    try:
        with open(IMAGE_DIR + '/profile.json', encoding='utf-8') as f:
            profile = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        profile = {}
    if not isinstance(profile, dict):
        profile = {}
    env = profile.get('env')
    for k, v in (env.items() if isinstance(env, dict) else ()):
        if isinstance(k, str) and isinstance(v, str) and k and '=' not in k and '\0' not in k + v:
            os.environ.setdefault(k, v)
    skel = IMAGE_DIR + '/tmp'
    for d, dirs, files in os.walk(skel):
        to = '/tmp' + d[len(skel):]
        try:
            os.makedirs(to, exist_ok=True)
            for name in files:
                with open(os.path.join(d, name), 'rb') as src, open(os.path.join(to, name), 'wb') as dst:
                    dst.write(src.read())
        except OSError as e:
            log('cannot copy %s into /tmp: %s' % (d, e))
    asked = os.environ.pop('CORRAL_PRELOAD_MODULES', None)
    if asked is not None:
        return [m for m in asked.split(',') if m]
    modules = profile.get('preload')
    modules = [m for m in modules if isinstance(m, str)] if isinstance(modules, list) else []
    warm = profile.get('warm')
    if isinstance(warm, str) and warm.strip():
        modules.append(Warm(warm))
    return modules


class Warm(str):
    """The profile's warm-up code, in the preload list after the modules."""


def preload(modules):
    """Import the image's heavy modules in a pool sandbox's worker while it
    waits, so that its call does not pay for them.  A module that fails to
    import is skipped (the call will see the same error itself); returns
    what to log about the failures (the worker's stderr is the code's)."""
    failed = []
    for name in modules:
        try:
            if isinstance(name, Warm):
                exec(compile(name, '<image warm-up>', 'exec'), {'__name__': '__warm__'})
            else:
                __import__(name)
        except BaseException as e:  # SystemExit from a module is no reason to stop
            what = 'the warm-up' if isinstance(name, Warm) else name
            failed.append('preloading %s failed: %s: %s' % (what, type(e).__name__, str(e)[:200]))
    if modules:
        # What the imports made lives as long as the worker: out of the
        # collector's reach, a collection during the call does not walk the
        # millions of objects numpy, pandas and matplotlib leave.
        import gc
        gc.collect()
        gc.freeze()
    return failed


def prepare_python():
    """The part of a Python run that does not depend on the code: streams and
    a fresh __main__ (pickle and multiprocessing look classes up there).  A
    forked-ahead worker does it while it waits for its request."""
    import builtins
    import linecache  # noqa: F401
    import traceback  # noqa: F401  imported now: importing after a MemoryError may fail
    import types
    signal.signal(signal.SIGINT, on_sigint)
    load_site()
    sys.stdin = sys.__stdin__ = open(0, 'r', encoding='utf-8', closefd=False)
    sys.stdout = sys.__stdout__ = open(1, 'w', encoding='utf-8', buffering=1, closefd=False)
    sys.stderr = sys.__stderr__ = open(2, 'w', encoding='utf-8', errors='backslashreplace',
                                       buffering=1, closefd=False)
    main = types.ModuleType('__main__')
    main.__dict__['__builtins__'] = builtins
    sys.modules['__main__'] = main
    return main


def rehearse(main, api_fd, max_frame):
    """Walk a run's path once with nothing to run, while waiting.  A forked
    child copies each page it writes, and CPython writes reference counts
    into every object it touches: doing it now, not after the request came,
    takes about a millisecond per call off a slow machine."""
    try:
        request = json.loads('{"language": "python", "code": "pass", "servers": '
                             '[{"name": "n", "alias": "a"}]}')
        scratch = {'__builtins__': main.__dict__['__builtins__']}
        install_api(scratch, api_fd, max_frame, check_servers(request['servers']))
        eval(compile(request['code'], FILENAME, 'exec', dont_inherit=True), scratch)
        json.dumps({'end': 0, 'signal': None, 'pid': 1, 'token': 'f' * 32, 'error': None})
        if 'threading' in sys.modules:
            sys.modules['threading'].enumerate()
    except Exception:
        pass
    sys.modules.pop('corral', None)


def run_python(main, code, api, keep=False):
    """Runs code as __main__; returns (exit status, error record or None).
    keep (a session): main's globals, threads and atexit handlers stay for
    the next run."""
    import linecache
    install_api(main.__dict__, *api)
    # The source in linecache so tracebacks show the user's lines.
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    status, record = 0, None
    try:
        arm_interrupt()  # an interrupt ends the run
        compiled = compile(code, FILENAME, 'exec', flags=TOP_LEVEL_AWAIT,
                           dont_inherit=True)
        result = eval(compiled, main.__dict__)
        if compiled.co_flags & CO_COROUTINE:
            import asyncio
            asyncio.run(result)
    except SystemExit as e:
        disarm_interrupt()
        status = exit_status(e)
    except BaseException as e:  # noqa: B036  KeyboardInterrupt and friends too
        disarm_interrupt()  # a repeated interrupt must not cut the report short
        status = 1
        try:
            record = error_record(e)
        except BaseException:  # e.g. MemoryError again while formatting
            record = {'type': type(e).__name__, 'message': '', 'traceback': ''}
    disarm_interrupt()  # between runs an interrupt only waits
    if keep:
        if api_channel is not None:  # the daemon forgets this run's calls
            api_channel.fail_pending('the run that made this MCP call has ended')
    else:
        # What interpreter shutdown would do: wait for non-daemon threads,
        # run atexit handlers, flush.  os._exit so we never return into the
        # supervisor.
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
    return status, record


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


# ------------------------------------------------------------ worker API --
# What user code sees as module `corral` (runtime/README.md, "Python API").
# Defined here so a pooled sandbox compiles it before `sandbox/ready`; the
# worker only builds the module object, and nothing runs until user code
# calls it (the reader thread starts on first use).  The classes name
# `corral` as their module: tracebacks say corral.ToolError, pickle finds them.

def check_servers(servers):
    """`servers` of sandbox/exec as [[name, alias], ...], or None if malformed."""
    if servers is None:
        return []
    if not isinstance(servers, list):
        return None
    out, names, aliases = [], set(), set()
    for s in servers:
        if not isinstance(s, dict):
            return None
        name, alias = s.get('name'), s.get('alias')
        if not isinstance(name, str) or not name or name in names \
                or not isinstance(alias, str) or not alias.isidentifier() or alias in aliases:
            return None
        names.add(name)
        aliases.add(alias)
        out.append([name, alias])
    return out


class McpError(Exception):
    """An MCP call failed.  .server and .tool say which; .code is the
    JSON-RPC error code (or None), .type the daemon's error type
    ("PolicyDenied", ...), .data the error's data."""
    __module__ = 'corral'

    def __init__(self, message='', server=None, tool=None, code=None, type=None, data=None):
        super().__init__(message)
        self.server, self.tool, self.code, self.type, self.data = server, tool, code, type, data


class ToolError(McpError):
    """The tool ran and reported an error (`isError`): the message is its
    text, .result the whole ToolResult."""
    __module__ = 'corral'

    def __init__(self, message='', result=None, **kw):
        super().__init__(message, **kw)
        self.result = result


class PolicyDenied(McpError):
    """The policy denies this server or tool, or the server is not one of this run's."""
    __module__ = 'corral'


class ServerUnavailable(McpError):
    """The MCP server cannot be started or died."""
    __module__ = 'corral'


class ToolTimeout(McpError, TimeoutError):
    """The call took longer than the policy allows (or than .result(timeout))."""
    __module__ = 'corral'


class TooLarge(McpError):
    """The arguments or the result are over the size limit."""
    __module__ = 'corral'


class TooManyCalls(McpError):
    """This run used up its call budget, or has too many calls in flight."""
    __module__ = 'corral'


class ToolNotFound(McpError):
    """The server has no such tool."""
    __module__ = 'corral'


class ProtocolError(McpError):
    """A malformed frame, or the channel to the daemon is gone."""
    __module__ = 'corral'


ERROR_TYPES = {'PolicyDenied': PolicyDenied, 'ServerUnavailable': ServerUnavailable,
               'Timeout': ToolTimeout, 'TooLarge': TooLarge, 'TooManyCalls': TooManyCalls,
               'ToolNotFound': ToolNotFound, 'ProtocolError': ProtocolError}
ERROR_CODES = {-32001: 'PolicyDenied', -32002: 'ServerUnavailable', -32003: 'Timeout',
               -32004: 'TooLarge', -32005: 'TooManyCalls', -32006: 'ToolNotFound',
               -32600: 'ProtocolError', -32700: 'ProtocolError'}


def mcp_error(err, server=None, tool=None):
    """The exception for a JSON-RPC error object: by data.type, or by code
    when data has no type."""
    if not isinstance(err, dict):
        err = {}
    code, data, message = err.get('code'), err.get('data'), err.get('message')
    kind = data.get('type') if isinstance(data, dict) else None
    if not isinstance(kind, str):
        kind = ERROR_CODES.get(code) if isinstance(code, int) else None
    return ERROR_TYPES.get(kind, McpError)(message if isinstance(message, str) else 'MCP call failed',
                                           server=server, tool=tool, code=code, type=kind, data=data)


class TextContent:
    __module__ = 'corral'
    __slots__ = ('text', 'raw')
    type = 'text'

    def __init__(self, text, raw=None):
        self.text, self.raw = text, raw

    def __str__(self):
        return self.text

    def __repr__(self):
        return 'TextContent(%r)' % (self.text if len(self.text) <= 60 else self.text[:57] + '...')


class BinaryContent:
    """Image or audio: .data the decoded bytes, .mime_type e.g. "image/png"."""
    __module__ = 'corral'
    __slots__ = ('data', 'mime_type', 'raw')

    def __init__(self, data, mime_type, raw=None):
        self.data, self.mime_type, self.raw = data, mime_type, raw

    def __repr__(self):
        return '%s(%d bytes, %r)' % (type(self).__name__, len(self.data), self.mime_type)


class ImageContent(BinaryContent):
    __module__ = 'corral'
    __slots__ = ()
    type = 'image'


class AudioContent(BinaryContent):
    __module__ = 'corral'
    __slots__ = ()
    type = 'audio'


def content_item(item):
    """A content item of a tool result as an object; unknown kinds (and
    undecodable data) stay the dict they were."""
    if not isinstance(item, dict):
        return item
    kind = item.get('type')
    if kind == 'text' and isinstance(item.get('text'), str):
        return TextContent(item['text'], item)
    if kind in ('image', 'audio') and isinstance(item.get('data'), str):
        import binascii  # built in, and already loaded
        try:
            data = binascii.a2b_base64(item['data'])
        except ValueError:  # binascii.Error, or a non-ASCII str
            return item
        mime = item.get('mimeType')
        return (ImageContent if kind == 'image' else AudioContent)(
            data, mime if isinstance(mime, str) else None, item)
    return item


class ToolResult:
    """A tool's result: .content (TextContent, ImageContent, AudioContent, or
    the item's dict for other kinds), .text (the text items joined with
    newlines), .images, .structured (structuredContent or None), .raw (the
    result as received), .is_error.  str() gives .text; `await` gives itself."""
    __module__ = 'corral'

    def __init__(self, raw, server=None, tool=None, is_error=False):
        content = raw.get('content')
        self.raw, self.server, self.tool, self.is_error = raw, server, tool, is_error
        self.content = [content_item(c) for c in content] if isinstance(content, list) else []
        self.structured = raw.get('structuredContent')

    @property
    def text(self):
        return '\n'.join(c.text for c in self.content if isinstance(c, TextContent))

    @property
    def images(self):
        return [c for c in self.content if isinstance(c, ImageContent)]

    def __str__(self):
        return self.text

    def __repr__(self):
        return '<ToolResult %s.%s: %d content items%s>' % (
            self.server, self.tool, len(self.content), ', error' if self.is_error else '')

    def __await__(self):  # so that `await` is always right
        yield from ()
        return self


class AwaitableList(list):
    """The discovery calls' lists: `await` gives the list itself."""
    __module__ = 'corral'

    def __await__(self):
        yield from ()
        return self


class AwaitableStr(str):
    """tool_docs()'s text: `await` gives the text itself."""
    __module__ = 'corral'

    def __await__(self):
        yield from ()
        return str(self)


def tool_result(msg, server, tool):
    if 'error' in msg:
        raise mcp_error(msg['error'], server, tool)
    raw = msg.get('result')
    if not isinstance(raw, dict):
        raise ProtocolError('malformed tools/call result', server=server, tool=tool, type='ProtocolError')
    if raw.get('isError') is True:
        result = ToolResult(raw, server, tool, True)
        raise ToolError(result.text or 'the tool reported an error', result=result,
                        server=server, tool=tool, type='ToolError')
    return ToolResult(raw, server, tool)


def wake(fut):
    if not fut.done():
        fut.set_result(None)


class Waiter:
    """One request in flight: the reader thread hands it the response."""
    __slots__ = ('ch', 'rid', 'server', 'tool', 'msg', 'event', 'futures')

    def __init__(self, ch, rid, server=None, tool=None):
        import threading
        self.ch, self.rid, self.server, self.tool = ch, rid, server, tool
        self.msg, self.event, self.futures = None, threading.Event(), []

    def finish(self, msg):
        with self.ch.lock:
            if self.msg is not None:
                return
            self.msg = msg
            futures, self.futures = self.futures, []
        self.event.set()
        for loop, fut in futures:
            try:
                loop.call_soon_threadsafe(wake, fut)
            except RuntimeError:  # that loop is closed
                pass

    def future(self, loop):
        """A future of `loop` done when the response is in; None if it is."""
        with self.ch.lock:
            if self.msg is not None:
                return None
            fut = loop.create_future()
            self.futures.append((loop, fut))
            return fut

    def wait(self, timeout=None):
        try:
            done = self.event.wait(timeout)
        except BaseException:  # KeyboardInterrupt: withdraw the call
            self.cancel()
            raise
        if not done:
            raise ToolTimeout('no response within %s s' % timeout, server=self.server, tool=self.tool,
                              type='Timeout')
        return self.msg

    def cancel(self):
        """Withdraws the call: the daemon is told, a late response dropped."""
        with self.ch.lock:
            if self.msg is not None:
                return False
            self.ch.pending.pop(self.rid, None)
        self.finish({'error': {'code': None, 'message': 'call cancelled', 'data': {'type': 'Cancelled'}}})
        try:
            self.ch.send(encode({'jsonrpc': '2.0', 'method': 'notifications/cancelled',
                                 'params': {'requestId': self.rid}}))
        except OSError:
            pass
        return True


class PendingCall:
    """A tool call made while an asyncio loop runs in this thread: the request
    is already sent.  `await` it, or call .result(timeout=None), for the
    ToolResult; any other attribute waits for the result and reads it there."""
    __module__ = 'corral'
    __slots__ = ('_waiter', '_outcome')

    def __init__(self, waiter):
        self._waiter, self._outcome = waiter, None

    def done(self):
        return self._waiter.event.is_set()

    def cancel(self):
        """Withdraws the call; False if it had completed already."""
        return self._waiter.cancel()

    def result(self, timeout=None):
        if self._outcome is None:
            w = self._waiter
            msg = w.wait(timeout)
            try:
                self._outcome = (True, tool_result(msg, w.server, w.tool))
            except McpError as e:
                self._outcome = (False, e)
        ok, value = self._outcome
        if ok:
            return value
        raise value.with_traceback(None)

    def __await__(self):
        w = self._waiter
        if not w.event.is_set():
            import asyncio
            fut = w.future(asyncio.get_running_loop())
            if fut is not None:
                try:
                    yield from fut.__await__()
                except BaseException:  # cancelled (asyncio.wait_for timed out...)
                    w.cancel()
                    raise
        return self.result()

    def __getattr__(self, name):
        if name.startswith('__'):  # copy, pickle, inspect: no blocking call
            raise AttributeError(name)
        return getattr(self.result(), name)

    def __str__(self):
        return str(self.result())

    def __repr__(self):
        w = self._waiter
        return '<PendingCall %s.%s %s>' % (w.server, w.tool, 'done' if self.done() else 'pending')


class Channel:
    """The worker's end of the API socket.  Requests are written whole under
    a lock; one reader thread, started on first use, routes responses by id."""

    def __init__(self, fd, max_frame, servers):
        import _thread
        self.fd, self.max_frame, self.servers = fd, max_frame, servers
        self.pid = os.getpid()
        self.lock = _thread.allocate_lock()   # pending, orphans, reader, closed
        self.wlock = _thread.allocate_lock()  # whole lines on the socket
        self.pending, self.orphans, self.next_id = {}, [], 0
        self.reader, self.closed = None, None
        self.tools = {}                       # tools/list per server, for this run
        self.skipped = set()                  # servers search_tools said it skipped

    def start(self):
        if os.getpid() != self.pid:  # a forked child would steal the parent's responses
            raise McpError('the MCP bridge is not available in a forked child process')
        with self.lock:
            if self.reader is None and self.closed is None:
                import threading
                self.reader = threading.Thread(target=self.read_loop, name='corral-reader', daemon=True)
                self.reader.start()

    def read_loop(self):
        reason = 'the channel to the corral supervisor closed'
        buf, scanned = bytearray(), 0
        try:
            while True:
                data = os.read(self.fd, 1 << 20)
                if not data:
                    break
                buf += data
                while True:
                    i = buf.find(b'\n', scanned)
                    if i < 0:
                        scanned = len(buf)
                        break
                    line = bytes(buf[:i])
                    del buf[:i + 1]
                    scanned = 0
                    self.dispatch(line)
        except BaseException as e:  # noqa: B036  never die silently with calls waiting
            reason = 'the channel to the corral supervisor failed: %s' % e
        self.close(reason)

    def dispatch(self, line):
        try:
            msg = json.loads(line.decode('utf-8'))
        except (ValueError, RecursionError):
            return
        if not isinstance(msg, dict):
            return
        rid = msg.get('id')
        with self.lock:
            if rid is None:  # the supervisor's answer to a malformed line
                self.orphans.append(msg)
                del self.orphans[:-64]
                return
            w = self.pending.pop(rid, None) if isinstance(rid, (str, int)) else None
        if w is not None:
            w.finish(msg)  # else a cancelled call's late response

    def close(self, reason):
        with self.lock:
            if self.closed is None:
                self.closed = reason
        self.fail_pending(reason)

    def fail_pending(self, reason):
        """Every call still waiting fails (a late response is dropped)."""
        with self.lock:
            pending, self.pending = self.pending, {}
        for w in pending.values():
            w.finish({'error': {'code': None, 'message': reason, 'data': {'type': 'ProtocolError'}}})

    def new_run(self, servers):
        """A session's next run: its own servers, nothing cached."""
        self.servers, self.tools, self.skipped = servers, {}, set()

    def send(self, data):
        with self.wlock:
            write_all(self.fd, data)

    def request(self, method, params, server=None, tool=None):
        """Sends a request; the Waiter that will get its response."""
        self.start()
        with self.lock:
            self.next_id += 1
            rid = self.next_id
        line = encode({'jsonrpc': '2.0', 'id': rid, 'method': method, 'params': params})
        if len(line) > self.max_frame + 1:
            raise TooLarge('request of %d bytes, over the %d-byte frame limit' % (len(line) - 1, self.max_frame),
                           server=server, tool=tool, type='TooLarge')
        w = Waiter(self, rid, server, tool)
        with self.lock:
            if self.closed is not None:
                raise ProtocolError(self.closed, server=server, tool=tool, type='ProtocolError')
            self.pending[rid] = w
        try:
            self.send(line)
        except OSError as e:
            with self.lock:
                self.pending.pop(rid, None)
            raise ProtocolError('cannot reach the corral supervisor: %s' % e, server=server, tool=tool,
                                type='ProtocolError') from None
        return w

    def call(self, method, params, server=None):
        """A request answered before it returns: the result object."""
        msg = self.request(method, params, server).wait()
        if 'error' in msg:
            raise mcp_error(msg['error'], server)
        if not isinstance(msg.get('result'), dict):
            raise ProtocolError('malformed %s result' % method, server=server, type='ProtocolError')
        return msg['result']

    def server_name(self, server):
        """A server of this run by name, or by alias."""
        if not isinstance(server, str):
            raise TypeError('server must be a string, not %s' % type(server).__name__)
        for name, alias in self.servers:
            if server == name:
                return name
        for name, alias in self.servers:
            if server == alias:
                return name
        return server  # the daemon denies servers that are not this run's

    def alias(self, server):
        for name, alias in self.servers:
            if name == server:
                return alias
        return None

    def tool_list(self, server, msg=None):
        """tools/list of a server (cached for the run): the tool dicts with a name."""
        if server not in self.tools:
            if msg is None:
                result = self.call('tools/list', {'server': server}, server)
            elif 'error' in msg:
                raise mcp_error(msg['error'], server)
            else:
                result = msg.get('result')
            tools = result.get('tools') if isinstance(result, dict) else None
            if not isinstance(tools, list):
                raise ProtocolError('malformed tools/list result', server=server, type='ProtocolError')
            self.tools[server] = [t for t in tools if isinstance(t, dict) and isinstance(t.get('name'), str)]
        return self.tools[server]


api_channel = None  # the worker's Channel


def channel():
    if api_channel is None:
        raise McpError('the MCP bridge is only available in Python runs of corral')
    return api_channel


def running_loop():
    asyncio = sys.modules.get('asyncio')
    if asyncio is None:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_tool(server, tool, arguments=None):
    """Calls `tool` of MCP server `server` (its name or alias) with
    `arguments`, a dict.  Without a running asyncio loop in this thread it
    waits and returns a ToolResult; with one it returns a PendingCall to
    await.  A tool reporting an error raises ToolError; other failures raise
    the McpError subclass of the daemon's error type."""
    ch = channel()
    server = ch.server_name(server)
    if not isinstance(tool, str):
        raise TypeError('tool must be a string, not %s' % type(tool).__name__)
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        raise TypeError('arguments must be a dict, not %s' % type(arguments).__name__)
    call = PendingCall(ch.request('tools/call', {'server': server, 'name': tool, 'arguments': arguments},
                                  server, tool))
    return call if running_loop() is not None else call.result()


def list_servers():
    """This run's MCP servers: dicts with name, alias, description, status,
    tools (a count or None) and error."""
    servers = channel().call('servers/list', {}).get('servers')
    if not isinstance(servers, list):
        raise ProtocolError('malformed servers/list result', type='ProtocolError')
    return AwaitableList(servers)


def list_tools(server):
    """The tools of `server`: dicts with name and description."""
    ch = channel()
    server = ch.server_name(server)
    return AwaitableList({'name': t['name'], 'description': text_of(t.get('description'))}
                         for t in ch.tool_list(server))


def text_of(value):
    return value if isinstance(value, str) else ''


def flat(s):
    return s.lower().replace('-', '').replace('_', '')


def search_tools(query, limit=20):
    """Tools of this run's servers whose name or description contains
    `query` (or all of its words), case-insensitive, best first: dicts with
    server, name and description.  A server that cannot be listed is skipped
    with a note on stderr."""
    if not isinstance(query, str):
        raise TypeError('query must be a string')
    ch = channel()
    names = [name for name, _ in ch.servers]
    # the servers not listed yet are asked all at once (the daemon may have to start them)
    asked = [(name, ch.request('tools/list', {'server': name}, name)) for name in names if name not in ch.tools]
    for name, w in asked:
        try:
            ch.tool_list(name, w.wait())
        except McpError as e:
            if name not in ch.skipped:  # asked again next time: it may come back
                ch.skipped.add(name)
                sys.stderr.write('corral: search_tools: skipped server %s: %s\n' % (name, e))
    q = query.lower().strip()
    terms = q.split()
    found = []
    for order, server in enumerate(names):
        for i, t in enumerate(ch.tools.get(server, ())):
            name, desc = t['name'], text_of(t.get('description'))
            score = match_score(q, terms, name.lower(), desc.lower())
            if score:  # ties: in the order of the servers and of their tools
                found.append((-score, order, i, server, name, desc))
    found.sort()
    if limit is not None:
        found = found[:max(0, limit)]
    return AwaitableList({'server': server, 'name': name, 'description': desc}
                         for _, _, _, server, name, desc in found)


def match_score(q, terms, name, desc):
    """0 for no match; more for a better one (the name counts most)."""
    if not q:
        return 1
    hay = name + '\n' + desc
    if q not in hay and flat(q) not in flat(name) and not all(t in hay for t in terms):
        return 0
    score = 100 if flat(q) == flat(name) else 40 if q in name or flat(q) in flat(name) else 0
    score += 10 if q in desc else 0
    for t in terms:
        score += 5 if t in name else 1 if t in desc else 0
    return score or 1


def find_tool(tools, tool, server):
    """As the daemon resolves names: exact, else the one tool equal after
    lowercasing and dropping '-' and '_'."""
    for t in tools:
        if t['name'] == tool:
            return t
    like = [t for t in tools if flat(t['name']) == flat(tool)]
    if len(like) == 1:
        return like[0]
    names = ', '.join(sorted(t['name'] for t in tools))
    raise ToolNotFound('no tool %r on server %r (tools: %s)' % (tool, server, names or 'none'),
                       server=server, tool=tool, type='ToolNotFound')


def schema_type(s, depth=0):
    """A JSON schema's type in a few words: "string", "array of integer", "a | b"."""
    if not isinstance(s, dict) or depth > 4:
        return 'any'
    if isinstance(s.get('enum'), list):
        return 'one of ' + ', '.join(json.dumps(v, ensure_ascii=False) for v in s['enum'][:20])
    if 'const' in s:
        return 'constant ' + json.dumps(s['const'], ensure_ascii=False)
    t = s.get('type')
    if isinstance(t, list):
        return ' | '.join(str(x) for x in t)
    if t == 'array' and isinstance(s.get('items'), dict):
        return 'array of ' + schema_type(s['items'], depth + 1)
    if isinstance(t, str):
        return t
    for key in ('anyOf', 'oneOf'):
        if isinstance(s.get(key), list):
            return ' | '.join(schema_type(x, depth + 1) for x in s[key])
    if isinstance(s.get('$ref'), str):
        return s['$ref'].rsplit('/', 1)[-1]
    return 'any'


def tool_docs(server, tool):
    """How to call `tool` of `server`: its description, parameters (type,
    required or not, description) and, at the end, its input schema as JSON."""
    import keyword
    ch = channel()
    server = ch.server_name(server)
    t = find_tool(ch.tool_list(server), tool, server)
    name = t['name']
    schema = t.get('inputSchema') if isinstance(t.get('inputSchema'), dict) else {}
    props = schema.get('properties') if isinstance(schema.get('properties'), dict) else {}
    required = schema.get('required') if isinstance(schema.get('required'), list) else []
    lines = ['%s (server %s)' % (name, server)]
    desc = text_of(t.get('description')).strip()
    if desc:
        lines += ['', desc]
    # how to call it: mcp_<alias>.<name> when both are identifiers
    # (the daemon finds get-sum for get_sum), else call_tool
    must = [p for p in props if p in required]
    attr = name.replace('-', '_')
    plain = all(p.isidentifier() and not keyword.iskeyword(p) for p in must)
    alias = ch.alias(server)
    if alias and attr.isidentifier() and not keyword.iskeyword(attr):
        args = ', '.join('%s=...' % p for p in must) if plain \
            else '{%s}' % ', '.join('%s: ...' % json.dumps(p) for p in must)
        lines += ['', 'Call: mcp_%s.%s(%s)' % (alias, attr, args)]
    else:
        lines += ['', 'Call: call_tool(%s, %s, {%s})' % (json.dumps(server), json.dumps(name),
                                                         ', '.join('%s: ...' % json.dumps(p) for p in must))]
    lines += ['', 'Parameters:' if props else 'Parameters: none']
    for p, s in props.items():
        s = s if isinstance(s, dict) else {}
        head = '  %s (%s%s' % (p, schema_type(s), ', required' if p in required else ', optional')
        if 'default' in s:
            head += ', default %s' % json.dumps(s['default'], ensure_ascii=False)
        head += ')'
        pdesc = text_of(s.get('description')).strip()
        lines.append(head + (': ' + pdesc.replace('\n', '\n    ') if pdesc else ''))
    lines += ['', 'Input schema:', json.dumps(schema, indent=2, ensure_ascii=False)]
    if isinstance(t.get('outputSchema'), dict):
        lines += ['', 'Output schema:', json.dumps(t['outputSchema'], indent=2, ensure_ascii=False)]
    return AwaitableStr('\n'.join(lines))


class McpTool:
    """`mcp_<alias>.<tool>`: call it with the tool's arguments as keywords
    (or one dict, for names that are not identifiers)."""
    __module__ = 'corral'
    __slots__ = ('server', 'name')

    def __init__(self, server, name):
        self.server, self.name = server, name

    def __call__(self, *args, **kwargs):
        if len(args) > 1 or (args and not isinstance(args[0], dict)):
            raise TypeError('%s takes keyword arguments, or one dict' % self.name)
        arguments = dict(args[0]) if args else {}
        arguments.update(kwargs)
        return call_tool(self.server, self.name, arguments)

    def __repr__(self):
        return '<MCP tool %s.%s>' % (self.server, self.name)


class McpServer:
    """`mcp_<alias>`: any attribute is a tool of that server, passed on by
    the name as written (the daemon also finds get-sum for get_sum)."""
    __module__ = 'corral'
    __slots__ = ('_corral_server', '_corral_alias')

    def __init__(self, name, alias):
        self._corral_server, self._corral_alias = name, alias

    def __getattr__(self, tool):
        if tool.startswith('__'):  # copy, pickle, inspect
            raise AttributeError(tool)
        return McpTool(self._corral_server, tool)

    def __repr__(self):
        return '<MCP server %s: mcp_%s.<tool>(**arguments)>' % (self._corral_server, self._corral_alias)


def _raw_send(line):
    """Tests: writes bytes to the channel as they are."""
    ch = channel()
    ch.start()
    ch.send(line.encode('utf-8') if isinstance(line, str) else bytes(line))


def _raw_request(obj, timeout=10.0):
    """Tests: sends obj (a dict, as one line; bytes or str as they are) and
    returns the response dict: the one with the id of obj (of bytes: of
    their last line that parses and has one), else the next one with id
    null (the supervisor's answer to a malformed line).  None after
    `timeout` seconds (notifications are never answered)."""
    ch = channel()
    ch.start()
    if isinstance(obj, (bytes, bytearray, str)):
        data = obj.encode('utf-8') if isinstance(obj, str) else bytes(obj)
        msgs = []
        for line in data.split(b'\n'):
            try:
                msgs.append(json.loads(line.decode('utf-8')))
            except (ValueError, RecursionError):
                pass
    else:
        data = json.dumps(obj).encode('utf-8') + b'\n'
        msgs = [obj]
    w = None
    for msg in msgs:
        rid = msg.get('id') if isinstance(msg, dict) else None
        if isinstance(rid, (str, int)) and not isinstance(rid, bool):
            w = Waiter(ch, rid)
    if w is not None:
        with ch.lock:
            ch.pending[w.rid] = w
    with ch.lock:
        del ch.orphans[:]
    ch.send(data)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if w is not None and w.event.is_set():
            return w.msg
        with ch.lock:
            if ch.orphans:
                return ch.orphans.pop(0)
        time.sleep(0.005)
    if w is not None:
        with ch.lock:
            ch.pending.pop(w.rid, None)
    return None


_progress_sent = [0.0]


def progress(done, total=None, message=None):
    """Report this run's progress to the MCP host (as notifications/progress,
    when the host asked for them with a progressToken; otherwise dropped).
    done and total are numbers (total optional), message a short text.
    Reports closer than 20 ms to the previous one are dropped, except one
    with done >= total.  Never raises for a lost report."""
    for v in (done, total):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or v != v or v in (float('inf'), float('-inf'))):
            raise TypeError('corral.progress(): done and total must be finite numbers')
    now = time.monotonic()
    final = total is not None and done >= total
    if not final and now - _progress_sent[0] < PROGRESS_INTERVAL:
        return
    _progress_sent[0] = now
    params = {'progress': done}
    if total is not None:
        params['total'] = total
    if message is not None:
        params['message'] = str(message)[:PROGRESS_MESSAGE_CAP]
    try:
        channel().send(encode({'jsonrpc': '2.0', 'method': 'corral/progress', 'params': params}))
    except (OSError, McpError, ValueError):
        pass


progress.__module__ = 'corral'
API_FUNCTIONS = (call_tool, list_servers, list_tools, search_tools, tool_docs)
API_CLASSES = (ToolResult, TextContent, ImageContent, AudioContent, BinaryContent, PendingCall,
               McpError, ToolError, PolicyDenied, ServerUnavailable, ToolTimeout, TooLarge,
               TooManyCalls, ToolNotFound, ProtocolError, AwaitableList, AwaitableStr, McpServer, McpTool)
for _f in API_FUNCTIONS + (_raw_send, _raw_request):
    _f.__module__ = 'corral'
del _f


def install_api(main, fd, max_frame, servers):
    """Module `corral` and the globals of the user's __main__: the functions
    and mcp_<alias> per server.  Cheap: no thread, no import."""
    global api_channel
    import types
    if api_channel is not None and api_channel.fd == fd and api_channel.pid == os.getpid():
        api_channel.new_run(servers)  # a session: one reader thread per socket
    else:
        api_channel = Channel(fd, max_frame, servers)
    mod = types.ModuleType('corral', 'MCP tools of this corral run: call_tool(), mcp_<alias>.<tool>(), '
                           'list_servers(), list_tools(), search_tools(), tool_docs().')
    for obj in API_FUNCTIONS + API_CLASSES + (progress, _raw_send, _raw_request):
        setattr(mod, obj.__name__, obj)
    for name, alias in servers:
        setattr(mod, 'mcp_' + alias, McpServer(name, alias))
    sys.modules['corral'] = mod
    # A session's globals may still hold the proxies of an earlier run's
    # servers: those go, unless user code rebound the name.
    for key, obj in _api_globals.items():
        if main.get(key) is obj:
            del main[key]
    _api_globals.clear()
    for f in API_FUNCTIONS:
        _api_globals[f.__name__] = main[f.__name__] = f
    for name, alias in servers:
        _api_globals['mcp_' + alias] = main['mcp_' + alias] = getattr(mod, 'mcp_' + alias)


_api_globals = {}  # what install_api put in __main__, by name


# ------------------------------------------------------------ supervisor --

class Stream:
    """One of the worker's output streams as one run sees it: what it
    forwarded and counted.  The pipe itself is the Worker's (in a session it
    outlives the run)."""

    def __init__(self, sup, name, limit):
        self.sup, self.name, self.limit = sup, name, limit
        self.total = self.sent = 0
        self.ended = False
        # per stream, so a character split across reads is decoded whole
        self.decoder = codecs.getincrementaldecoder('utf-8')(errors='replace')

    def feed(self, data):
        self.total += len(data)
        room = self.limit - self.sent
        if room > 0:
            part = data[:room]
            self.sent += len(part)
            self.emit(self.decoder.decode(part))

    def end(self):
        if not self.ended:
            self.ended = True
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


class Worker:
    """A forked worker and the supervisor's ends of its pipes: stdout,
    stderr, the report pipe (non-blocking), the go pipe its requests go down
    (blocking: a request is written whole), and the API socket's relay.  In
    a session it serves one run after another."""

    def __init__(self, sup, pid, out_r, err_r, rep_r, go_w, api_r, oom_before):
        self.pid = pid
        self.fds = {'stdout': out_r, 'stderr': err_r, 'report': rep_r}
        for fd in self.fds.values():
            os.set_blocking(fd, False)
        self.go = go_w
        os.set_blocking(api_r, False)
        self.relay = Relay(sup, api_r)
        self.oom_before = oom_before   # taken at fork time, for its first run
        self.wait_status = None        # from waitpid: it is gone
        self.runs = 0

    def open_fds(self):
        return [fd for fd in self.fds.values() if fd is not None]

    def name_of(self, fd):
        for name, f in self.fds.items():
            if f == fd:
                return name
        return None

    def read(self, name):
        """A chunk from one of its pipes: bytes, b'' at EOF (the pipe is then
        closed), None when nothing is there now."""
        fd = self.fds[name]
        if fd is None:
            return b''
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return None
        except OSError:
            data = b''
        if not data:
            os.close(fd)
            self.fds[name] = None
        return data

    def send(self, request):
        """Hands it a request; False when it is gone."""
        try:
            write_all(self.go, json.dumps(request).encode() + b'\n')
            return True
        except OSError:
            return False

    def alive(self):
        return self.wait_status is None

    def close(self):
        for name, fd in self.fds.items():
            if fd is not None:
                os.close(fd)
                self.fds[name] = None
        if self.go is not None:
            os.close(self.go)
            self.go = None
        self.relay.close()


class Job:
    """One sandbox/exec: its request id, the worker running it, what it
    printed and reported."""

    out_inline = 0  # bytes of base64 of /workspace/out files its result may carry

    def __init__(self, sup, rid, worker, language, limit, oom_before, keep, restarted, out_before,
                 token, time_limit):
        self.sup, self.rid, self.worker = sup, rid, worker
        self.language, self.keep, self.restarted = language, keep, restarted
        self.streams = {'stdout': Stream(sup, 'stdout', limit), 'stderr': Stream(sup, 'stderr', limit)}
        # The report pipe is reachable by user code (a Python run shares the
        # worker's process): only the line with this run's token counts.
        self.token, self.tag = token, b'"token": "%s"' % token.encode()
        self.reports = LineReader(REPORT_CAP)
        self.record = None         # the worker's own end record, checked
        self.oom_before = oom_before
        self.deadline = None
        self.kill_at = None        # an interrupt not heeded by then: kill
        self.next_sigint = None    # and until then it is repeated
        self.interrupted = False
        # The run's own time limit, enforced here too: the daemon acts at the
        # limit, this is for when it cannot (killed, stopped, cut off).
        self.limit_at = None if time_limit is None else time.monotonic() + time_limit + LIMIT_GRACE
        self.timed_out = False
        self.out_before = out_before  # /workspace/out before: what differs after is its own

    @property
    def pid(self):
        return self.worker.pid

    @property
    def relay(self):
        return self.worker.relay

    def feed_report(self, data):
        """Report pipe bytes: every complete line is looked at, and kept only
        if it is the worker's end record for this run (its token, its pid: a
        child forked without exec has both, but not the pid).  Forged lines
        cost their writer CPU, never the record a bounded buffer's room."""
        for line in self.reports.feed(data):
            if self.record is not None or line is None or self.tag not in line:
                continue
            try:
                rec = json.loads(line.decode('utf-8'))
            except (ValueError, RecursionError):
                continue
            if not isinstance(rec, dict) or rec.get('token') != self.token or rec.get('pid') != self.pid:
                continue
            code = rec.get('end')
            if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 255:
                continue
            self.record = rec
            # A session's worker lives on: its record is the end of the run.
            # A single-use worker's end is its exit, which only the kernel tells.
            if self.keep:
                self.ended()

    def ended(self):
        """The worker is done: a single-use one exited (the kernel says so),
        a session's sent its end record, or it died.  One-shot: wait
        DRAIN_SECONDS at most for its pipes to close.  A session's worker
        keeps them open: what it wrote before its record is in them already,
        so drain them now and be done."""
        if self.deadline is not None:
            return
        # What the code sent on its API socket before it ended (a
        # corral.progress() report, say) goes before the answer.
        self.relay.drain()
        if self.keep and self.worker.alive():
            self.drain()
            self.deadline = time.monotonic()
        else:
            self.deadline = time.monotonic() + DRAIN_SECONDS
        if self.relay is not None and not self.keep:  # late responses are dropped from now on
            self.relay.close()

    def drain(self):
        """Reads what the output pipes hold now (bounded: a background process
        may keep writing)."""
        for name in ('stdout', 'stderr'):
            for _ in range(64):
                data = self.worker.read(name)
                if not data:
                    break
                self.streams[name].feed(data)

    def done(self):
        if self.deadline is None:
            return False
        w = self.worker
        return time.monotonic() >= self.deadline or (
            w.fds['stdout'] is None and w.fds['stderr'] is None)

    def error(self, rec, budget):
        """The error of the worker's end record, checked and cut to fit."""
        e = rec.get('error') if rec is not None else None
        if not isinstance(e, dict) or not isinstance(e.get('type'), str):
            return None
        text = lambda v: v if isinstance(v, str) else ''
        return {'type': e['type'][:256], 'message': text(e.get('message'))[:budget // 2],
                'traceback': tail(text(e.get('traceback')), budget)}

    def result(self, budget):
        rec, st = self.record, self.worker.wait_status
        if self.keep and rec is not None and st is None:
            # A session's run that ended in a worker that lives on.
            code, signum = rec['end'], rec.get('signal')
            if not isinstance(signum, int) or isinstance(signum, bool) or not 0 < signum < 65:
                signum = None
        elif st is not None:  # the kernel's word
            signum = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
            code = 128 + signum if signum is not None else os.WEXITSTATUS(st)
            if rec is not None and (rec['end'] != code or signum is not None):
                rec = None  # its record is not how it ended
        else:  # neither a record nor a wait status: it vanished
            signum, code, rec = None, 1, None
        error = self.error(rec, budget) if code != 0 else None
        if self.timed_out:
            status = 'timeout'
        elif error is not None and error['type'] == 'MemoryError':
            status = 'oom'
        elif signum is not None:
            status = 'oom' if signum == signal.SIGKILL and self.oom_killed() else 'killed'
        elif code == 0:
            status = 'ok'
        else:  # e.g. a shell whose child was OOM-killed exits 137
            status = 'oom' if self.oom_killed() else 'error'
        return {'status': status, 'exit_code': code, 'signal': signum,
                'stdout_bytes': self.streams['stdout'].total,
                'stderr_bytes': self.streams['stderr'].total, 'error': error}

    def oom_killed(self):
        after = oom_kills()
        return None not in (self.oom_before, after) and after > self.oom_before


def memory_bytes():
    """The container's memory use (its cgroup's), or None outside one."""
    for path in MEMORY_FILES:
        try:
            with open(path) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return None


def out_scan():
    """Regular files under /workspace/out: {path: (mtime_ns, size, inode)},
    paths relative to /workspace.  Bounded, symlinks not followed, names
    that are not UTF-8 skipped."""
    found, stack, seen = {}, [(OUT_DIR, 0)], 0
    while stack and seen < OUT_SCAN_MAX:
        path, depth = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            seen += 1
            try:
                name = e.path.encode('utf-8').decode('utf-8')
                st = e.stat(follow_symlinks=False)
            except (UnicodeError, OSError):
                continue
            if e.is_dir(follow_symlinks=False):
                if depth < OUT_DEPTH_MAX:
                    stack.append((e.path, depth + 1))
            elif e.is_file(follow_symlinks=False):
                found[name[len(WORKSPACE) + 1:]] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return found


def out_files(before):
    """The files under /workspace/out that are new or changed since the scan
    `before` (a run's own: compared by content stamps, not clocks), for the
    daemon to fetch: [{path, size}], at most OUT_FILES_MAX."""
    if not os.path.isdir(OUT_DIR):
        return []
    now = out_scan()
    changed = sorted(p for p, stamp in now.items() if before.get(p) != stamp)
    return [{'path': p, 'size': now[p][1]} for p in changed[:OUT_FILES_MAX]]


def read_out_file(rel, most):
    """The bytes of WORKSPACE/rel, a regular file of at most `most` bytes,
    or None.  Opened a component at a time with O_NOFOLLOW, so that no
    symlink on the path is followed (this process is PID 1: through /proc/1
    a link could reach its own descriptors)."""
    parts = rel.split('/')
    if not parts or any(p in ('', '.', '..') for p in parts):
        return None
    fd = None
    try:
        fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY)
        for p in parts[:-1]:
            nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        if fd is not None:
            os.close(fd)
    try:
        import stat
        if not stat.S_ISREG(os.fstat(ffd).st_mode):
            return None
        data = bytearray()
        while len(data) <= most:
            chunk = os.read(ffd, min(CHUNK, most + 1 - len(data)))
            if not chunk:
                return bytes(data)
            data += chunk
        return None
    except OSError:
        return None
    finally:
        os.close(ffd)


def inline_out_files(result, budget):
    """Put what fits of the run's /workspace/out files into its result, as
    base64 `data`, in order, within `budget` bytes of base64: the daemon then
    need not fetch them through the engine (a round trip each).  For a
    single-use run, once every process of its code is gone: nothing can
    change a file while it is read."""
    import binascii
    for f in result.get('out_files') or ():
        size = f.get('size', 0)
        if 4 * ((size + 2) // 3) > budget:
            continue
        data = read_out_file(f['path'], size)
        if data is None or len(data) != size:
            continue
        f['data'] = binascii.b2a_base64(data, newline=False).decode('ascii')
        budget -= len(f['data'])


def list_dir(params, max_bytes=DEFAULT_MAX_FRAME // 2):
    """sandbox/list: the entries of a directory under /workspace (lstat: a
    symlink is listed, not followed), at most `limit` of them and about
    max_bytes of JSON (names may escape to six bytes a byte).  Returns
    (result, None) or (None, message)."""
    p = params if isinstance(params, dict) else {}
    path, recursive, limit = p.get('path', WORKSPACE), p.get('recursive', False), p.get('limit', 1000)
    if not isinstance(path, str) or not isinstance(recursive, bool) or not isinstance(limit, int) \
            or isinstance(limit, bool) or not 1 <= limit <= LIST_MAX:
        return None, 'invalid params: want path string, recursive boolean, limit 1..%d' % LIST_MAX
    real = os.path.realpath(path)
    if real != WORKSPACE and not real.startswith(WORKSPACE + '/'):
        return None, '%s resolves to %s, outside %s' % (path, real, WORKSPACE)
    try:
        st = os.stat(real)
    except OSError as e:
        return None, '%s: %s' % (path, e.strerror)
    if not os.path.isdir(real):
        return {'path': real, 'entries': [entry(real, st, os.path.basename(real))],
                'truncated': False}, None
    entries, stack, truncated, size = [], [(real, 0)], False, 0
    while stack and not truncated:
        d, depth = stack.pop()
        try:
            items = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for e in items:
            try:
                rel = e.path[len(real) + 1:].encode('utf-8').decode('utf-8')
                est = e.stat(follow_symlinks=False)
            except (UnicodeError, OSError):
                continue
            ent = entry(e.path, est, rel)
            size += len(encode(ent))
            if len(entries) >= limit or size > max_bytes:
                truncated = True
                break
            entries.append(ent)
            if recursive and e.is_dir(follow_symlinks=False) and depth < LIST_DEPTH_MAX:
                subdirs.append((e.path, depth + 1))
        stack += reversed(subdirs)
    return {'path': real, 'entries': entries, 'truncated': truncated}, None


def entry(path, st, rel):
    import stat as s
    kind = 'dir' if s.S_ISDIR(st.st_mode) else 'file' if s.S_ISREG(st.st_mode) \
        else 'symlink' if s.S_ISLNK(st.st_mode) else 'other'
    e = {'path': rel, 'type': kind, 'size': st.st_size, 'mode': '%04o' % s.S_IMODE(st.st_mode),
         'mtime': int(st.st_mtime)}
    if kind == 'symlink':
        try:
            e['target'] = os.readlink(path)
        except OSError:
            pass
    return e


class LineReader:
    """Splits a byte stream into lines of at most max_frame bytes (newline
    excluded); an over-long line gives None once, as soon as it passes the
    limit, and is skipped up to its newline.  Blank lines are dropped."""

    def __init__(self, max_frame):
        self.max_frame = max_frame
        self.buf, self.scanned, self.skipping = bytearray(), 0, False

    def feed(self, data):
        buf = self.buf
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


class Relay:
    """The supervisor's end of the worker's API socket.  What comes in is
    user code's (untrusted): lines bounded by max_frame, checked, and only
    requests for the daemon go on.  What goes out (daemon responses, our
    errors) waits in a queue of at most 2 * max_frame bytes: the socket is
    non-blocking and PID 1 never waits for the worker; past the bound,
    whole lines are dropped."""

    def __init__(self, sup, fd):
        self.sup, self.fd = sup, fd
        self.lines = LineReader(sup.max_frame)
        self.out = bytearray()
        self.cap = 2 * sup.max_frame
        self.dropped = 0

    def queue(self, data):
        if self.fd is None:
            return
        if len(self.out) + len(data) > self.cap:
            self.dropped += 1
            if self.dropped == 1:
                log('the worker does not read its API socket: dropping frames toward it')
            return
        self.out += data
        self.flush()

    def flush(self):
        while self.out and self.fd is not None:
            try:
                n = os.write(self.fd, self.out)
            except BlockingIOError:
                return
            except OSError:  # the worker and all its children are gone
                return self.close()
            del self.out[:n]

    def error(self, rid, code, message):
        self.queue(encode({'jsonrpc': '2.0', 'id': rid, 'error': {
            'code': code, 'message': message, 'data': {'type': 'ProtocolError'}}}))

    def read(self):
        """One chunk from the worker; False when there was nothing to read."""
        try:
            data = os.read(self.fd, CHUNK)
        except BlockingIOError:
            return False
        except OSError:
            data = b''
        if not data:
            self.close()
            return False
        for line in self.lines.feed(data):
            self.sup.from_worker(self, line)
            if self.fd is None:
                return False
        return True

    def drain(self):
        """What the socket holds now (bounded: a background thread may keep
        sending)."""
        for _ in range(64):
            if self.fd is None or not self.read():
                return

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.dropped:
            log('dropped %d frames toward the worker (queue full)' % self.dropped)
            self.dropped = 0
        self.out = bytearray()


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
        self.lines, self.eof = LineReader(self.max_frame), False
        self.job = None
        self.pre = None       # the worker forked ahead, waiting for its first request
        self.worker = None    # a session's worker, kept between runs
        self.lost = False     # a session's worker ended: its next run starts afresh
        self.spent = False    # a single-use run answered: only waiting to be removed
        self.frozen_until = None  # sandbox/freeze: when it ends by itself
        self.pooled = None  # the modules a pool sandbox's worker preloads
        self.out_inline = 0
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
        try:
            line = encode(obj)
        except ValueError as e:  # not JSON (inf); our frames never are
            return log('cannot encode a frame: %s' % e)
        self.send_line(line)

    def send_line(self, line):
        # One write loop per frame on a blocking fd, single thread: frames
        # never interleave.
        try:
            write_all(self.frame_out, line)
        except OSError as e:
            log('frame channel lost (%s), exiting' % e)
            self.kill_leftovers()
            os._exit(1)

    def reply_error(self, rid, code, message):
        self.send({'jsonrpc': '2.0', 'id': rid, 'error': {'code': code, 'message': message}})

    def serve(self):
        self.pooled = warm_up()
        self.prefork()
        self.send({'jsonrpc': '2.0', 'method': 'sandbox/ready',
                   'params': {'protocol': PROTOCOL, 'runtime': 'corral-runtime',
                              'python': sys.version.split()[0]}})
        while True:
            self.reap()
            if self.frozen_until is not None and time.monotonic() >= self.frozen_until:
                log('a freeze was not lifted in %g s: continuing the processes' % FREEZE_MAX)
                self.freeze(False)
            job = self.job
            if job is not None and self.eof:
                # The daemon is gone (killed, crashed, cut off): nobody will
                # take the answer or stop the code, so stop it now.  PID 1's
                # exit ends the container, and every process in it.
                log('stdin closed while an exec runs: ending it and exiting')
                self.kill_leftovers()
                return 0
            if job is not None and job.limit_at is not None and job.deadline is None \
                    and time.monotonic() >= job.limit_at:
                self.over_time(job)
            if job is not None and job.kill_at is not None and job.deadline is None \
                    and time.monotonic() >= job.kill_at and self.frozen_until is None:
                self.kill_worker(job.worker)
                job.kill_at = None
            if job is not None and job.kill_at is not None and job.deadline is None \
                    and time.monotonic() >= job.next_sigint:
                self.sigint(job)
            if job is not None and job.done():
                if self.finish():
                    return 0
                continue
            if job is None and self.eof:
                self.kill_leftovers()
                return 0
            poller = select.poll()
            fds = [self.wake_r] + ([] if self.eof else [self.frame_in])
            # the running worker's pipes, or between a session's runs the
            # kept worker's (drained: a background thread may still print)
            w = job.worker if job is not None else self.worker
            if w is not None:
                fds += w.open_fds()
                relay = w.relay
                if relay.fd is not None:
                    poller.register(relay.fd, select.POLLIN | (select.POLLOUT if relay.out else 0))
            for fd in fds:
                poller.register(fd, select.POLLIN)
            timeout = None
            if job is not None:
                end = job.deadline if job.deadline is not None else \
                    job.next_sigint if job.kill_at is not None else job.limit_at
                # 1 s: reap() fallback should a SIGCHLD wakeup get lost
                timeout = 1000 if end is None else max(0, int((end - time.monotonic()) * 1000) + 1)
            if self.frozen_until is not None:
                left = max(0, int((self.frozen_until - time.monotonic()) * 1000) + 1)
                timeout = left if timeout is None else min(timeout, left)
            for fd, events in poller.poll(timeout):
                self.ready(fd, events)

    def ready(self, fd, events):
        job = self.job
        w = job.worker if job is not None else self.worker
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
                self.eof = True  # a running exec is ended: serve() sees to it
            for line in self.lines.feed(data):
                self.handle(line)
        elif w is not None and fd == w.relay.fd:
            if events & select.POLLOUT:
                w.relay.flush()
            if w.relay.fd is not None and events & ~select.POLLOUT:
                w.relay.read()
        elif w is not None and w.name_of(fd) is not None:
            name = w.name_of(fd)
            data = w.read(name)
            if not data or job is None:
                return  # between a session's runs output has no run to go to
            if name == 'report':
                job.feed_report(data)
            else:
                job.streams[name].feed(data)

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
        if msg.get('jsonrpc') == '2.0' and 'method' not in msg and 'id' in msg \
                and ('result' in msg or 'error' in msg):
            return self.to_worker(line)
        id_ok = rid is None or (isinstance(rid, (str, int, float)) and not isinstance(rid, bool))
        if isinstance(rid, float) and rid - rid != 0:  # 1e400 parses as inf: cannot be sent back
            id_ok = False
        if msg.get('jsonrpc') != '2.0' or not isinstance(msg.get('method'), str) or not id_ok:
            return self.reply_error(rid if id_ok else None, -32600, 'invalid request')
        method = msg['method']
        if 'id' not in msg:  # a notification: never answered
            if method == 'notifications/cancelled':
                params = msg.get('params')
                self.interrupt(params.get('requestId') if isinstance(params, dict) else None)
            else:
                log('ignored notification %r' % method[:100])
        elif method == 'sandbox/list':
            result, problem = list_dir(msg.get('params'), self.max_frame // 2)
            if problem is not None:
                self.reply_error(rid, -32602, problem)
            else:
                self.send({'jsonrpc': '2.0', 'id': rid, 'result': result})
        elif method in ('sandbox/freeze', 'sandbox/thaw'):
            self.freeze(method == 'sandbox/freeze')
            self.send({'jsonrpc': '2.0', 'id': rid, 'result': {'frozen': self.frozen_until is not None}})
        elif method != 'sandbox/exec':
            self.reply_error(rid, -32601, 'method not found: %s' % method[:100])
        elif self.job is not None:
            self.reply_error(rid, -32000, 'an exec is already running')
        elif self.spent:
            self.reply_error(rid, -32000, 'this sandbox was single-use and has run its exec')
        else:
            self.start(rid, msg.get('params'))

    def interrupt(self, rid):
        """notifications/cancelled for the running exec (a session's time
        limit or cancellation): SIGINT to the worker, which ends the run
        with KeyboardInterrupt (a shell: its process group is killed) and
        keeps the session's state; if the run has not ended INTERRUPT_GRACE
        later, the worker is killed."""
        job = self.job
        if job is None or rid is None or isinstance(rid, bool) or rid != job.rid \
                or job.interrupted or job.deadline is not None:
            return
        job.interrupted = True
        job.kill_at = time.monotonic() + INTERRUPT_GRACE
        self.sigint(job)

    def over_time(self, job):
        """The run passed its time limit and LIMIT_GRACE, and the daemon has
        not stopped it: stop it as the daemon would.  A session's run is
        interrupted (its state may live on); a single-use one is killed."""
        job.limit_at = None
        job.timed_out = True
        log('the run passed its time limit: stopping it')
        if job.keep:
            self.interrupt(job.rid)
        else:
            self.kill_worker(job.worker)

    def sigint(self, job):
        """SIGINT to the worker, repeated every INTERRUPT_REPEAT until its
        run ends (one that came before the run began is kept for it, but a
        worker may also clear it as a leftover of an earlier run)."""
        job.next_sigint = time.monotonic() + INTERRUPT_REPEAT
        try:
            os.kill(job.pid, signal.SIGINT)
        except OSError:
            pass

    def freeze(self, on):
        """Stops (SIGSTOP) or continues every other process of the container
        while the daemon reads or writes files through the engine: the
        engine resolves paths as root, so no process of the code may swap a
        checked directory for a symlink meanwhile.  Outside a container,
        only the workers' process groups.  A freeze ends by itself after
        FREEZE_MAX seconds."""
        sig = signal.SIGSTOP if on else signal.SIGCONT
        self.frozen_until = time.monotonic() + FREEZE_MAX if on else None
        job = self.job
        if not on and job is not None and job.kill_at is not None:
            # a stopped worker could not heed an interrupt: its grace starts now
            job.kill_at = max(job.kill_at, time.monotonic() + INTERRUPT_GRACE)
        try:
            if os.getpid() == 1:
                os.kill(-1, sig)
                return
        except OSError:
            return
        for w in (self.worker, self.job.worker if self.job is not None else None, self.pre):
            if w is not None:
                try:
                    os.killpg(w.pid, sig)
                except OSError:
                    pass

    def kill_worker(self, w):
        # As PID 1 every other process of the container goes (a session's
        # shell runs in a process group of its own); elsewhere (tests) the
        # worker's group.
        try:
            if os.getpid() == 1:
                os.kill(-1, signal.SIGKILL)
            else:
                os.killpg(w.pid, signal.SIGKILL)
        except OSError:
            pass

    def to_worker(self, line):
        """A daemon response to a request of the worker's: passed on as it
        came while the worker runs, dropped otherwise (it ended, or a shell)."""
        job = self.job
        if job is not None and job.deadline is None and job.language == 'python':
            job.relay.queue(line + b'\n')

    def from_worker(self, relay, line):
        """A line from user code: requests other than sandbox/* and
        notifications/cancelled go to the daemon, re-encoded; everything
        else is answered with an error (when it has an id) or dropped."""
        if line is None:
            return relay.error(None, -32600, 'frame longer than %d bytes' % self.max_frame)
        try:
            msg = json.loads(line.decode('utf-8'), parse_constant=reject_constant)
        except (ValueError, RecursionError):
            return relay.error(None, -32700, 'parse error')
        if not isinstance(msg, dict):
            return relay.error(None, -32600, 'invalid request')
        rid, method = msg.get('id'), msg.get('method')
        # ids the daemon can take back as they are: strings and int64s
        id_ok = isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)
                                         and -ID_RANGE <= rid < ID_RANGE)
        if msg.get('jsonrpc') != '2.0' or not isinstance(method, str) or ('id' in msg and not id_ok):
            return relay.error(rid if id_ok else None, -32600, 'invalid request')
        if 'id' not in msg:
            if method not in ('notifications/cancelled', 'corral/progress'):
                return  # notifications are never answered
        elif method.startswith('sandbox/'):
            return relay.error(rid, -32600, 'method not allowed: %s' % method[:100])
        frame = {'jsonrpc': '2.0', 'method': method}
        if 'id' in msg:
            frame['id'] = rid
        if 'params' in msg:
            frame['params'] = msg['params']
        try:
            data = encode(frame)
        except (ValueError, RecursionError):  # e.g. 1e400 parsed as inf
            data = None
        if data is None or len(data) > self.max_frame + 1:
            if 'id' in msg:
                relay.error(rid, -32600, 'invalid request' if data is None
                            else 'frame longer than %d bytes' % self.max_frame)
            return
        self.send_line(data)

    def prefork(self):
        """Fork the worker now, before `sandbox/ready`: it sets itself up and
        waits for its request, so a call from the warm pool skips the fork.
        Failure is fine: start() then forks as before."""
        w = self.fork_worker(ahead=True)
        if w is None:
            return
        # Say ready only once the worker is: a call that came sooner would
        # wait for its set-up anyway, while the pool believed it ready.
        set_r = w.set_r
        end = time.monotonic() + PREFORK_WAIT
        said = b''
        try:  # until the worker closes it: what it wrote is for the log
            while time.monotonic() < end and select.select([set_r], [], [], end - time.monotonic())[0]:
                chunk = os.read(set_r, 4096)
                if not chunk:
                    break
                said = (said + chunk)[-8192:]
        except OSError:
            pass
        for line in said.decode('utf-8', 'replace').splitlines():
            log(line)
        os.close(set_r)
        self.pre = w

    def fork_worker(self, ahead=False):
        """A new worker (a Worker), or None when the fork failed (logged)."""
        made = []
        try:
            for _ in range(3 if ahead else 2):
                made += os.pipe()
            # The report and go channels are one-way sockets, not pipes: a
            # pipe can be reopened for the other direction through
            # /proc/self/fd (a socket cannot), so user code could have put a
            # request in the go pipe or taken the worker's record out of the
            # report pipe.
            made += one_way_pair()  # report: worker -> supervisor
            go_r, go_w = one_way_pair()
            made += [go_r, go_w]
            made += socket_pair()
            oom_before = oom_kills()  # nothing runs until the request: as good as later
            # The only fork the supervisor makes per worker: a fork bomb in
            # user code exhausting pids cannot starve it later.
            pid = os.fork()
        except OSError as e:
            for fd in made:
                os.close(fd)
            log('cannot fork the worker%s: %s' % (' ahead' if ahead else '', e))
            return None
        out_r, out_w = made[:2]
        err_r, err_w = made[2:4]
        set_r, set_w = made[4:6] if ahead else (None, None)
        rep_r, rep_w, go_r, go_w = made[-6:-2]
        api_r, api_w = made[-2:]
        if pid == 0:
            try:
                os.close(go_w)
                worker(self, (out_w, err_w, rep_w), api_w, go_r, set_w)
            finally:
                os._exit(127)
        for fd in (out_w, err_w, rep_w, go_r, api_w) + ((set_w,) if ahead else ()):
            os.close(fd)
        w = Worker(self, pid, out_r, err_r, rep_r, go_w, api_r, oom_before)
        w.set_r = set_r
        return w

    def start(self, rid, params):
        p = params if isinstance(params, dict) else {}
        language, code = p.get('language'), p.get('code')
        limit = p.get('output_limit', DEFAULT_OUTPUT_LIMIT)
        keep = p.get('keep', False)
        time_limit = p.get('time_limit_ms')
        out_inline = p.get('out_inline_max', 0)
        if not isinstance(out_inline, int) or isinstance(out_inline, bool) or out_inline < 0:
            out_inline = 0
        self.out_inline = out_inline  # for the Job made below
        if language not in ('python', 'shell') or not isinstance(code, str) \
                or not isinstance(limit, int) or isinstance(limit, bool) or limit < 0 \
                or not isinstance(keep, bool) or not (time_limit is None or (
                    isinstance(time_limit, int) and not isinstance(time_limit, bool)
                    and 0 < time_limit <= TIME_LIMIT_MAX * 1000)):
            return self.reply_error(rid, -32602, 'invalid params: want language "python"|"shell", '
                                    'code string, output_limit >= 0, keep boolean, '
                                    'time_limit_ms 1..%d' % (TIME_LIMIT_MAX * 1000))
        servers = check_servers(p.get('servers'))
        if servers is None:
            return self.reply_error(rid, -32602, 'invalid params: want servers a list of '
                                    '{"name": string, "alias": Python identifier}, names and aliases unique')
        token = os.urandom(16).hex()
        request = {'language': language, 'code': code, 'servers': servers, 'keep': keep, 'token': token}
        run = (token, None if time_limit is None else time_limit / 1000.0)
        if self.frozen_until is not None:
            # the daemon waits for its file operations first; should it not,
            # a stopped worker would never take the request
            log('an exec came while frozen: thawing first')
            self.freeze(False)
        # /workspace/out exists when the code starts, as the tools promise
        try:
            os.makedirs(OUT_DIR, exist_ok=True)
        except OSError:
            pass
        # taken before the worker has the request: it may be done at once
        out_before = out_scan() if os.path.isdir(OUT_DIR) else {}
        # A session's worker, else the one forked ahead, else a new one.
        for w in (self.worker, self.pre):
            if w is None:
                continue
            if w is self.worker:
                self.worker = None
            else:
                self.pre = None
            if w.alive() and w.send(request):
                oom_before = oom_kills() if w.runs else w.oom_before
                return self.started(rid, w, language, limit, oom_before, keep, out_before, run)
            # it died waiting: fork afresh below (a session's state is gone)
            log('the waiting worker is gone; forking again')
            self.lost = self.lost or w.runs > 0
            if w.alive():
                self.kill_worker(w)
            w.close()
        w = self.fork_worker()
        if w is None or not w.send(request):
            if w is not None:
                w.close()
            return self.reply_error(rid, -32603, 'cannot start worker')
        self.started(rid, w, language, limit, w.oom_before, keep, out_before, run)

    def started(self, rid, w, language, limit, oom_before, keep, out_before, run):
        restarted, self.lost = self.lost, False
        w.runs += 1
        self.job = Job(self, rid, w, language, limit, oom_before, keep, restarted, out_before, *run)
        self.job.out_inline = self.out_inline

    def reap(self):
        # PID 1 inherits every orphan: reap them all, note the workers'.
        while True:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.job
            for w in (job.worker if job is not None else None, self.worker, self.pre):
                if w is not None and w.pid == pid:
                    w.wait_status = st
            if job is not None and pid == job.pid:
                job.ended()
            elif self.worker is not None and pid == self.worker.pid:
                # a session's worker died between runs (OOM killer, a thread
                # calling os._exit): its state is gone; the next run says so
                log('the session worker ended between runs')
                self.worker.close()
                self.worker = None
                self.lost = True

    def finish(self):
        """Answers the exec.  True when the runtime is done (single-use)."""
        job, self.job = self.job, None
        w = job.worker
        while w.fds['report'] is not None:  # written before the worker ended
            data = w.read('report')
            if data is None:
                if job.keep and w.alive():
                    break
                os.close(w.fds['report'])  # a user process still holds it: stop here
                w.fds['report'] = None
            elif data:
                job.feed_report(data)
        for st in job.streams.values():
            st.end()
        result = job.result(self.text_budget)
        result['memory_bytes'] = memory_bytes()
        result['out_files'] = out_files(job.out_before)
        keep = job.keep and w.alive()
        if job.keep:
            result['state'] = 'kept' if keep else 'lost'
            result['restarted'] = job.restarted
        if keep:
            self.worker = w
        else:
            w.close()
            self.lost = job.keep
        if not job.keep:
            self.kill_leftovers(w)  # single-use: nothing of the code's outlives its run
            if result['out_files'] and job.out_inline > 0:
                # What the frame has room for, a margin kept for escaping.
                room = self.max_frame - len(encode(result)) - 65536
                inline_out_files(result, min(job.out_inline, room))
        self.send({'jsonrpc': '2.0', 'id': job.rid, 'result': result})
        if keep or job.keep:
            return False  # a session: wait for the next exec
        if any('data' not in f for f in result['out_files']):
            # The daemon fetches them through the engine, which needs the
            # container (and its tmpfs) still there: stay until it is done
            # and closes stdin or removes us.
            self.spent = True
            return False
        return True

    def kill_leftovers(self, w=None):
        # As PID 1 every other process of the container goes (our exit
        # would do the same); elsewhere (tests, --init) the workers' process
        # groups, so `sleep 100 &` goes too.
        if os.getpid() == 1:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            return
        # Found first: once the worker is dead, a session's shell (a group of
        # its own) is no longer our descendant.
        rest = descendants(os.getpid())
        for x in (w, self.worker, self.job.worker if self.job is not None else None):
            if x is not None:
                try:
                    os.killpg(x.pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in rest:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def descendants(root):
    """Pids of root's descendants, from /proc (outside a container only)."""
    parent = {}
    try:
        names = os.listdir('/proc')
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            try:
                with open('/proc/%s/stat' % name, 'rb') as f:
                    parent[int(name)] = int(f.read().rsplit(b')', 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


if __name__ == '__main__':
    sys.exit(Supervisor().serve())
