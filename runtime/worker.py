# The worker: the process that runs one call's code (or a session's calls),
# forked by the supervisor; its set-up ahead of a call, the image's preloads,
# interrupts and the record it reports at the end.

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
            if _merge['asked']:
                try:
                    said = merge_heap()
                except Exception as e:  # no ctypes, say: the sandbox serves all the same
                    said = 'page merging: %s: %s' % (type(e).__name__, e)
                try:
                    os.write(set_w, (said + '\n').encode())
                except OSError:
                    pass
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
        if isinstance(request.get('network'), dict):  # a grant: the proxy's variables, pip's user site
            os.environ.update(request['network'])
            user_site()
        request = None
        signum, error = None, None
        if not keep:           # the last request: user code gets no handle on the pipe
            os.close(go_r)
        state = None
        if language == 'shell' and not keep:
            os.close(api_fd)   # exec would close it anyway: no API for shells
            exec_shell(code, report_w, token)
        elif language == 'shell':
            status, signum, error = run_shell(code, report_w, token)
        elif language == 'state':
            status, error, state = run_state(main, code)
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
                                 'error': error, 'globals': state})
        if keep and sent:
            continue           # the session goes on: fds 0-2 stay
        if sent and os.getpid() == me:
            # Single-use: the record ended the run. Exiting now would tear
            # this process down while the answer is on its way; the
            # supervisor kills it once the daemon has the answer.
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            while True:
                time.sleep(3600)
        # A session whose code broke the report socket, or a child that user
        # code forked: exit, so that the supervisor learns the end from the
        # kernel.
        os._exit(status)


def user_site():
    """The user site that `pip install` (PIP_USER, PYTHONUSERBASE) fills:
    made, and on sys.path ahead of the image's packages (as python3 without
    -I has it), so what the code installs imports at once, and in a
    session's later runs."""
    d = '%s/.local/lib/python%d.%d/site-packages' % ((WORKSPACE,) + sys.version_info[:2])
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        pass
    if d not in sys.path:
        sys.path.insert(next((i for i, x in enumerate(sys.path) if x.endswith('-packages')), len(sys.path)), d)


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
_merge = {'asked': False}  # CORRAL_MERGE=1: the daemon's memory_merge (merge_heap)


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
    _merge['asked'] = os.environ.pop('CORRAL_MERGE', '') == '1'
    if _merge['asked'] and not sys.flags.isolated:
        # The loader started us again for merging (assemble.py, loader()):
        # user code and its programs get the environment as it was.
        os.environ.pop('PYTHONHASHSEED', None)
        for k in [k for k in os.environ if k.startswith('CORRAL_KEPT_PYTHON')]:
            os.environ[k[12:]] = os.environ.pop(k)
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


def merge_heap(who='page merging'):
    """Offers this process's private anonymous memory (the worker's, then
    the supervisor's), as it is now, to the kernel's page merging (KSM,
    madvise MADV_MERGEABLE): what the preloaded modules built, the same in
    every pool sandbox of an image, is then kept once on the host (the
    merger must run: /sys/kernel/mm/ksm/run).  The
    mappings stay offered during the call, and what the call allocates may
    land in them (README.md, "Page merging": why memory_merge is opt-in).
    Returns a line for the log, starting with who."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    offered, refused = 0, {}
    try:
        with open('/proc/self/maps') as f:
            maps = f.read(1 << 20).splitlines()
    except OSError as e:
        return '%s: cannot read /proc/self/maps: %s' % (who, e)
    for line in maps:
        part = line.split(None, 5)
        name = part[5].strip() if len(part) > 5 else ''
        if len(part) < 5 or part[1] != 'rw-p' or (name and name != '[heap]' and not name.startswith('[anon:')):
            continue
        lo, _, hi = part[0].partition('-')
        lo, hi = int(lo, 16), int(hi, 16)
        if libc.madvise(lo, hi - lo, 12) == 0:  # MADV_MERGEABLE
            offered += hi - lo
        else:
            err = os.strerror(ctypes.get_errno())
            refused[err] = refused.get(err, 0) + 1
    said = '%s: %d KiB offered' % (who, offered >> 10)
    try:
        with open('/proc/self/personality') as f:
            fixed = int(f.read().strip() or '0', 16) & 0x40000
    except (OSError, ValueError):
        fixed = 0
    said += ', addresses %s' % ('fixed' if fixed and not sys.flags.hash_randomization else 'randomized')
    if refused:
        said += '; refused: %s' % ', '.join('%s (%d mappings)' % kv for kv in sorted(refused.items()))
    return said


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


# ---- a session's Python state, saved and loaded inside the sandbox

STATE_FILE = WORKSPACE + '/.corral/state'
TREE_FILE = WORKSPACE + '/.corral/tree.json'  # directories and links a save listed
TREE_CAP = 2 * 1024 * 1024   # bytes of it read
STATE_MAGIC = b'corral-state 1\n'
STATE_NAMES_MAX = 1000       # entries listed in each list of a report
STATE_NAME_CAP = 200         # chars of a name, of a type, of a reason
STATE_REPORT_CAP = 256 * 1024  # bytes of JSON a report's lists take, at most (REPORT_CAP is 1 MiB)
STATE_HEAD_CAP = 4096        # bytes of a record's header line
RUNTIME_NAMES = ('__builtins__', '__name__', '__doc__', '__loader__', '__spec__', '__package__')


def run_state(main, what):
    """A session's `sandbox/exec` of language "state": "save" writes main's
    globals to STATE_FILE, "load" puts them back in main.  Returns (exit
    status, error record or None, report).  The bytes never leave the
    sandbox as anything but a file: they are made and read only here."""
    report, status, record = None, 0, None
    try:
        arm_interrupt()
        report = state_save(main) if what == 'save' else state_load(main)
    except BaseException as e:  # noqa: B036  KeyboardInterrupt too: the session goes on
        disarm_interrupt()
        report, status = None, 1
        try:
            record = error_record(e)
        except BaseException:  # noqa: B036
            record = {'type': type(e).__name__, 'message': '', 'traceback': ''}
    finally:
        disarm_interrupt()
    return status, record, report


def state_pickler():
    """dill where the image has it (it keeps lambdas and what the session
    defined), pickle otherwise."""
    try:
        import dill
        return dill, 'dill'
    except Exception:  # noqa: BLE001  not there, or broken
        import pickle
        return pickle, 'pickle'


def state_reason(e):
    try:
        return ('%s: %s' % (type(e).__name__, e))[:STATE_NAME_CAP]
    except BaseException:  # noqa: B036  its __str__ raised
        return type(e).__name__[:STATE_NAME_CAP]


def state_entry(name, kind, reason):
    return {'name': str(name)[:STATE_NAME_CAP], 'type': str(kind)[:STATE_NAME_CAP],
            'reason': reason[:STATE_NAME_CAP]}


def state_report(op, how, size, **lists):
    """The answer's `globals`: each list kept while the whole stays within
    STATE_REPORT_CAP of JSON and STATE_NAMES_MAX entries; `counts` are
    their true lengths, in the order given."""
    out = {'op': op, 'pickler': how, 'bytes': size, 'counts': [len(v) for v in lists.values()]}
    room = STATE_REPORT_CAP
    for key, items in lists.items():
        kept = []
        for item in items[:STATE_NAMES_MAX]:
            item = item[:STATE_NAME_CAP] if isinstance(item, str) else item
            room -= len(json.dumps(item)) + 2
            if room < 0:
                break
            kept.append(item)
        out[key] = kept
    return out


class SessionDefined(Exception):
    pass


SESSION_DEFINED = ('defined in the session: pickle keeps only its name (dill, which keeps it '
                   'whole, is not in this image)')


def state_save(main):
    """Every global of main that pickles, each alone (so one that fails
    costs only itself), as records after STATE_MAGIC: an 8-byte length
    (little-endian) of the rest, a JSON line [name, module or null,
    type], and for a value its pickle.  Modules go by name, imported again
    on load.  Written to a temporary name and renamed: a save cut short
    leaves the last one."""
    pk, how = state_pickler()
    saved, modules, lost = [], [], []
    os.makedirs(os.path.dirname(STATE_FILE), mode=0o700, exist_ok=True)
    tmp = STATE_FILE + '.new'
    try:
        size = state_write(tmp, main, pk, how, saved, modules, lost)
        os.replace(tmp, STATE_FILE)
    except BaseException:  # noqa: B036  a full /workspace, an interrupt: no half file left
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return state_report('save', how, size, saved=saved, modules=modules, not_saved=lost)


class StateFile:
    """The file being written: a failed write is the save's failure, while
    an OSError that a value's own pickling raises is only that value's."""

    def __init__(self, f):
        self.f, self.failed = f, None

    def write(self, data):
        try:
            return self.f.write(data)
        except OSError as e:
            self.failed = e
            raise


def state_write(tmp, main, pk, how, saved, modules, lost):
    import pickle
    import types

    class Pickler(pickle.Pickler):
        # Under pickle, what the session defined (a function, a class, and
        # so any instance of one, wherever it sits) would come back as a
        # name that a new interpreter cannot find: refused here instead.
        def reducer_override(self, obj):
            if isinstance(obj, (type, types.FunctionType)) and \
                    getattr(obj, '__module__', None) == '__main__':
                raise SessionDefined(SESSION_DEFINED)
            return NotImplemented

    with open(tmp, 'wb') as f:
        out = StateFile(f)
        f.write(STATE_MAGIC)
        for name, value in list(main.__dict__.items()):
            if not isinstance(name, str):
                lost.append(state_entry(repr(name)[:STATE_NAME_CAP], '?', 'not a name (set through globals())'))
                continue
            if name in RUNTIME_NAMES or _api_globals.get(name) is value:
                continue  # the runtime's own: every run gets them anew
            at, kind = f.tell(), '?'
            try:
                kind = type(value).__name__[:STATE_NAME_CAP]
                module = value.__name__ if isinstance(value, types.ModuleType) else None
                if module is not None and not isinstance(module, str):
                    raise TypeError('a module whose __name__ is not a string')
                f.write(bytes(8))
                f.write(json.dumps([name, module, kind]).encode() + b'\n')
                if module is None and how == 'pickle':
                    Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
                elif module is None:
                    pk.dump(value, out, protocol=pickle.HIGHEST_PROTOCOL)
            except (KeyboardInterrupt, MemoryError):
                raise
            except BaseException as e:  # noqa: B036  whatever its __reduce__ raises
                if out.failed is not None:
                    raise out.failed
                f.seek(at)
                f.truncate()
                lost.append(state_entry(name, kind, str(e) if isinstance(e, SessionDefined)
                                        else state_reason(e)))
                continue
            end = f.tell()
            f.seek(at)
            f.write((end - at - 8).to_bytes(8, 'little'))
            f.seek(end)
            (saved if module is None else modules).append(name)
        f.flush()
        return f.tell()


def tree_load():
    """TREE_FILE's directories and symbolic links made again under
    WORKSPACE (the files came back as files): {dirs, links, failed}.  What
    would land outside WORKSPACE, or where something is already, is
    skipped; the file goes."""
    made = {'dirs': 0, 'links': 0, 'failed': 0}
    try:
        with open(TREE_FILE, 'rb') as f:
            data = f.read(TREE_CAP + 1)
        tree = json.loads(data) if len(data) <= TREE_CAP else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        tree = {}
    try:
        os.unlink(TREE_FILE)
    except OSError:
        pass

    def where(rel):
        full = os.path.normpath(os.path.join(WORKSPACE, rel)) if isinstance(rel, str) else ''
        return full if full.startswith(WORKSPACE + '/') else None

    if not isinstance(tree, dict):
        tree = {}
    for rel in tree.get('dirs') or []:
        full = where(rel)
        try:
            os.makedirs(full, exist_ok=True)
            made['dirs'] += 1
        except (OSError, TypeError):
            made['failed'] += 1
    for item in tree.get('links') or []:
        ok = isinstance(item, list) and len(item) == 2 and isinstance(item[1], str) and item[1]
        full = where(item[0]) if ok else None
        try:
            if not full or os.path.lexists(full):
                raise OSError('skipped')
            os.makedirs(os.path.dirname(full), exist_ok=True)
            os.symlink(item[1], full)
            made['links'] += 1
        except OSError:
            made['failed'] += 1
    return made


def state_load(main):
    """STATE_FILE's globals into main (merged with what is there): modules
    imported again, values unpickled one by one from their record's
    bytes; a value that fails is named, the rest come back.  A record
    whose frame is damaged ends the load with an error.  The directories
    and links of /workspace come back first (tree_load)."""
    import importlib
    tree_load()
    pk, how = state_pickler()
    restored, modules, lost = [], [], []
    with open(STATE_FILE, 'rb') as f:
        if f.read(len(STATE_MAGIC)) != STATE_MAGIC:
            raise ValueError('%s is not a saved session state' % STATE_FILE)
        total = os.fstat(f.fileno()).st_size
        while True:
            head = f.read(8)
            if not head:
                break
            n = int.from_bytes(head, 'little')
            at = f.tell()
            line = f.readline(min(n, STATE_HEAD_CAP)) if len(head) == 8 and n <= total - at else b''
            try:
                name, module, kind = json.loads(line.decode()) if line.endswith(b'\n') else (0, 0, 0)
            except ValueError:
                name = module = kind = 0
            if not isinstance(name, str) or not isinstance(kind, str) or \
                    not (module is None or isinstance(module, str)):
                raise ValueError('%s is damaged or cut short at byte %d' % (STATE_FILE, at - 8))
            try:
                if name in RUNTIME_NAMES:
                    raise ValueError('a name the runtime sets')
                if module is not None:
                    value = importlib.import_module(module)
                else:
                    value = pk.loads(f.read(at + n - f.tell()))
                main.__dict__[name] = value
                (restored if module is None else modules).append(name)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: B036  MemoryError too: this value's, not the load's
                lost.append(state_entry(name, kind, state_reason(e)))
            f.seek(at + n)
    # Loaded whole: the file goes (the next save writes it again), so the
    # session's /workspace is what it was before it was saved.
    try:
        os.unlink(STATE_FILE)
        os.rmdir(os.path.dirname(STATE_FILE))
    except OSError:
        pass
    return state_report('load', how, total, restored=restored, modules=modules, not_restored=lost)


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
