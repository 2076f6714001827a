# corral sandbox runtime: see runtime/README.md for the processes and the
# frame protocol.  runtime/assemble.py joins this file and the others of
# runtime/ into the program the daemon sends the container's loader (see
# runtime/README.md and assemble.py), run as if by `python3 -I -S -c <it>`, so
# it is standard library only, Python 3.8+, and never relies on __file__.
# The constants it shares with the daemon come from runtime/protocol.h, put
# in ahead of this by the assembler.
#
# This part: the imports, the constants, the log, frame encoding, and the
# descriptors the processes talk over.
import binascii
import codecs
import hmac
import json
import os
import select
import signal
import sys
import time

CHUNK = 64 * 1024                  # read size and max UTF-8 bytes of `data`
FRAME_READ = 1 << 20               # read size of the frame channel
EXIT_INPUT_LOST = 75               # PID 1's status when stdin ends in the middle of a run (never 0 then)
FROM_DAEMON = 1 << TO_RUNTIME_SEQ_BIT  # the bit set in the numbers of the daemon's tags
KEY_LINE_MAX = 4096                # bytes of a line before sandbox/key: longer ones are not it
HEX_VALUE = {c: i for i, c in enumerate(b'0123456789abcdef')}
DEFAULT_OUTPUT_LIMIT = 1024 * 1024
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
OUT_SCAN_MAX = 4096                # entries looked at, at most
OUT_DEPTH_MAX = 8
LIST_DEPTH_MAX = 32
INTERRUPT_GRACE = 1.0              # seconds a session's run has to stop after SIGINT
INTERRUPT_REPEAT = 0.1             # seconds between SIGINTs until the run ends
ID_RANGE = 1 << 63                 # integer ids of worker requests: int64
PREFORK_WAIT = 10.0                # seconds for the forked-ahead worker to set up
REHEARSAL_WAIT = 5.0               # seconds for a pool sandbox's rehearsed exec (Supervisor.rehearse)
REHEARSAL = 'rehearsal'            # its request id: never a frame's
PROGRESS_INTERVAL = 0.02           # seconds between corral.progress() frames
PROGRESS_MESSAGE_CAP = 1000        # chars
LIMIT_GRACE = 1.0                  # seconds past a run's time limit before the runtime stops it itself


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
