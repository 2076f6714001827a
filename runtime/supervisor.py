# The supervisor: PID 1 of the container, the only holder of the frame
# channel. It forks the worker, relays its output and its MCP requests, holds
# the time limit and the interrupts, and answers the daemon.

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
            self.stamps[1] = time.monotonic()
            # The record is the end of the run: a session's worker lives on,
            # and a single-use one has nothing left to do but exit.
            self.ended()

    def ended(self):
        """The run is done: the worker sent its end record, or it exited or
        died without one (the kernel says so).  One-shot: wait
        DRAIN_SECONDS at most for its pipes to close.  A session's worker
        keeps them open: what it wrote before its record is in them already,
        so drain them now and be done."""
        if self.deadline is not None:
            return
        # What the code sent on its API socket before it ended (a
        # corral.progress() report, say) goes before the answer.
        self.relay.drain()
        self.drain()  # a single-use worker's pipes may be at EOF already: done now
        if self.keep and self.worker.alive():
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
        if rec is not None and st is None:
            # Ended on its record: a session's worker lives on, a single-use
            # one is still exiting (its pipes are closed: all it wrote is in).
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
        out = {'status': status, 'exit_code': code, 'signal': signum,
               'stdout_bytes': self.streams['stdout'].total,
               'stderr_bytes': self.streams['stderr'].total, 'error': error}
        if self.language == 'state':
            # what the worker says it saved or loaded (the daemon checks it)
            said = rec.get('globals') if rec is not None else None
            out['globals'] = said if isinstance(said, dict) else None
        return out

    def oom_killed(self):
        after = oom_kills()
        return None not in (self.oom_before, after) and after > self.oom_before


class LineReader:
    """Splits a byte stream into lines of at most max_line bytes (newline
    excluded).  feed() gives a list: a line (bytes, no newline), or None
    for a line over max_line (once, as soon as it passes the limit; it is
    skipped up to its newline); blank lines are dropped.  With data_frames
    (the daemon's frames on our stdin, after the key) it also takes data
    frames, a tagged line "#CONN SIZE", SIZE raw bytes and a second tag
    (runtime/README.md, "Frame protocol"): ('head', line) as soon as the
    line is in (so that its tag is checked before its bytes are waited
    for), then ('data', line, bytes, tag) once they are.  A line that
    starts with '#' but announces no data frame (a bad SIZE) is handed on
    as a plain line."""

    def __init__(self, max_line, data_frames=False):
        self.max_line, self.data_frames = max_line, data_frames
        self.buf, self.scanned, self.skipping = bytearray(), 0, False
        self.head, self.want = None, 0  # a data frame's line, its bytes awaited

    def feed(self, data):
        buf, pos, out = self.buf, 0, []
        buf += data
        while True:
            if self.head is not None:
                if len(buf) - pos < self.want:
                    break
                end = pos + self.want
                out.append(('data', self.head, bytes(buf[pos:end - TAG_HEX]), bytes(buf[end - TAG_HEX:end])))
                pos, self.head = end, None
                continue
            i = buf.find(b'\n', max(pos, self.scanned))  # only new bytes: a line may be huge
            if i < 0:
                self.scanned = len(buf)
                if not self.skipping and len(buf) - pos > self.max_line:
                    self.skipping = True  # answer now, the newline may never come
                    out.append(None)
                if self.skipping:
                    pos = self.scanned = len(buf)
                break
            line, start, pos, self.scanned = bytes(buf[pos:i]), pos, i + 1, 0
            if self.skipping:
                self.skipping = False
            elif i - start > self.max_line:
                out.append(None)
            elif self.data_frames and len(line) > TAG_HEX + 1 and line[TAG_HEX + 1] == 0x23:  # '#'
                size = data_size(line[TAG_HEX + 2:])
                if size:
                    self.head, self.want = line, size + TAG_HEX
                    out.append(('head', line))
                else:
                    out.append(line)
            elif line.strip():
                out.append(line)
        del buf[:pos]
        if self.scanned:
            self.scanned -= pos
        return out


def data_size(head):
    """The SIZE of a data frame's line "CONN SIZE" (after its '#'): 1 to
    NET_DATA_MAX, decimal without leading zeros; 0 when it is not one."""
    conn, sp, size = head.partition(b' ')
    if not sp or not (0 < len(conn) <= 16 and 0 < len(size) <= 6) or not conn.isdigit() \
            or not size.isdigit() or conn[0] == 0x30 or size[0] == 0x30:
        return 0
    n = int(size)
    return n if n <= NET_DATA_MAX else 0


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


# The network proxy (runtime/README.md, "Network"): a loopback HTTP proxy
# whose connections the daemon makes.  The runtime only reads each request's
# head, then relays bytes both ways as net/* frames, with a window of
# NET_WINDOW un-acked bytes per connection and direction.
NET_CONN_MAX = 256       # local connections at once; past it a local 503
NET_LINGER = 2.0         # seconds a locally answered client has to read it
TCHARS = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
VCHARS = bytes(range(33, 127))
ERR = select.POLLERR | select.POLLHUP | select.POLLNVAL


def proxy_head(buf):
    """Where the request head ends in a client's first bytes: (0, 0) when
    more is needed, (200, n) for a head of n bytes (its request line through
    the first CRLFCRLF, n <= NET_HEAD_MAX), (400, 0) for a malformed one and
    (431, 0) for one longer than NET_HEAD_MAX."""
    buf = bytes(buf)
    end = buf.find(b'\r\n\r\n', 0, NET_HEAD_MAX)
    first = buf.find(b'\r\n', 0, NET_HEAD_MAX)
    if first >= 0:
        p = buf[:first].split(b' ')
        if len(p) != 3 or not p[0] or p[0].translate(None, TCHARS) or not p[1] \
                or p[1].translate(None, VCHARS) or p[2][:7] != b'HTTP/1.' or len(p[2]) != 8 \
                or not p[2][7:].isdigit():
            return 400, 0
    if end < 0:
        return (431 if len(buf) >= NET_HEAD_MAX else 0), 0
    for line in buf[first + 2:end + 2].split(b'\r\n')[:-1]:
        name, colon, value = line.partition(b':')
        if not colon or not name or name.translate(None, TCHARS) or b'\r' in value \
                or b'\n' in value or b'\0' in value:
            return 400, 0
    return 200, end + 4


def proxy_answer(code, reason):
    """The proxy's own answer (400, 431, 503), in the daemon's format."""
    body = 'corral: %s\n' % reason
    return ('HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d'
            '\r\n\r\n%s' % (code, {400: 'Bad Request', 431: 'Request Header Fields Too Large',
                                   503: 'Service Unavailable'}[code], len(body), body)).encode()


class Conn:
    """A client of the proxy.  id is 0 until its head went out as net/open;
    head gathers it.  sent: our bytes the daemon has not acked; out: the
    daemon's bytes for the client, written: those written but not acked yet
    (so len(out) + written is what the daemon has un-acked)."""

    def __init__(self, sock, turn):
        self.sock, self.fd, self.born = sock, sock.fileno(), turn
        self.id = self.sent = self.written = 0
        self.head, self.out = bytearray(), bytearray()
        self.eof = self.ending = False  # the client's EOF said; the daemon's net/eof
        self.linger = None  # answered locally: read and dropped until EOF or then

    def reading(self):
        return self.linger is not None or not self.id or (not self.eof and self.sent < NET_WINDOW)


class Proxy:
    """The listener (127.0.0.1, a port of the kernel's) and its clients; they
    join the supervisor's poll, which is rebuilt each turn (events())."""

    def __init__(self, sup):
        import _socket
        self.sup, self.turn, self.next_id, self.conns, self.ids = sup, 0, 1, {}, {}
        self.sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.fd, self.port = self.sock.fileno(), self.sock.getsockname()[1]
        # what a net/data frame carries, so that its base64 fits a frame
        self.chunk = min(NET_DATA_MAX, (sup.max_frame - 128) // 4 * 3)

    def events(self):
        self.turn += 1
        now, fds = time.monotonic(), [(self.fd, select.POLLIN)]
        for c in list(self.conns.values()):
            if c.linger is not None and now >= c.linger:
                self.drop(c)
            else:
                fds.append((c.fd, (select.POLLIN if c.reading() else 0) | (select.POLLOUT if c.out else 0)))
        return fds

    def deadline(self):
        t = [c.linger for c in self.conns.values() if c.linger is not None]
        return min(t) if t else None

    def ready(self, fd, ev):
        if fd == self.fd:
            return self.accept()
        c = self.conns.get(fd)
        if c is None or c.born == self.turn:  # gone, or a new one on a number reused this turn
            return
        if ev & select.POLLOUT or (c.out and ev & ERR):
            self.write(c)
        if c.sock is not None and (ev & select.POLLIN or (ev & ERR and c.reading())):
            self.read(c)
        elif c.sock is not None and ev & ERR:
            self.drop(c, True)

    def accept(self):
        import _socket
        for _ in range(64):
            try:
                fd = self.sock._accept()[0]
            except OSError:
                return
            s = _socket.socket(fileno=fd)
            s.setblocking(False)
            # a relay's small writes (a TLS handshake's) go at once
            s.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            c = self.conns[fd] = Conn(s, self.turn)
            job = self.sup.job
            if job is None or job.deadline is not None:
                self.answer(c, 503, 'no run is under way')
            elif len(self.conns) > NET_CONN_MAX:
                self.answer(c, 503, 'too many connections')

    def answer(self, c, code, reason):
        c.head = None
        try:
            c.sock.send(proxy_answer(code, reason))
            c.sock.shutdown(1)  # SHUT_WR; read on, so that closing sends no reset
        except OSError:
            return self.drop(c)
        if len(self.conns) > NET_CONN_MAX:  # a flood: no lingering
            return self.drop(c)
        c.linger = time.monotonic() + NET_LINGER

    def send(self, c, method, **params):
        self.sup.send({'jsonrpc': '2.0', 'method': method, 'params': dict(conn=c.id, **params)})

    def read(self, c):
        n = CHUNK if c.linger is not None else min(self.chunk, NET_WINDOW - c.sent) if c.id \
            else NET_HEAD_MAX - len(c.head)
        if n <= 0:  # recv(0) would look like EOF
            return
        try:
            data = c.sock.recv(n)
        except BlockingIOError:
            return
        except OSError:
            return self.drop(c, True)
        if c.linger is not None:
            return None if data else self.drop(c)
        if not data:
            if c.id:
                c.eof = True
                return self.send(c, 'net/eof')
            return self.answer(c, 400, 'bad request') if c.head else self.drop(c)
        if c.id:
            c.sent += len(data)
            return self.send(c, 'net/data', data=b64(data))
        c.head += data
        status, n = proxy_head(c.head)
        if status == 200:
            c.id, self.next_id = self.next_id, self.next_id + 1
            self.ids[c.id] = c
            head, rest, c.head = bytes(c.head[:n]), bytes(c.head[n:]), None
            self.send(c, 'net/open', head=b64(head))
            if rest:
                c.sent = len(rest)
                self.send(c, 'net/data', data=b64(rest))
        elif status:
            self.answer(c, status, 'bad request' if status == 400 else 'request head too big')

    def write(self, c, fresh=None):
        """Writes what the client is owed: c.out, or when that is empty the
        bytes of a data frame just come (fresh), keeping what the socket
        does not take."""
        try:
            n = c.sock.send(c.out if fresh is None else fresh)
        except BlockingIOError:
            n = 0
        except OSError:
            return self.drop(c, True)
        if fresh is None:
            del c.out[:n]
        elif n < len(fresh):
            c.out += memoryview(fresh)[n:]
        if not n:
            return
        c.written += n
        if c.written >= NET_ACK_EVERY or not c.out:
            self.send(c, 'net/ack', bytes=c.written)
            c.written = 0
        if c.ending and not c.out:
            self.drop(c, True)

    def drop(self, c, tell=False):
        """Closes a client; tell: net/close for it (not when the daemon closed it)."""
        if c.sock is None:
            return
        c.sock.close()
        c.sock = None
        self.conns.pop(c.fd, None)
        if c.id:
            self.ids.pop(c.id, None)
            if tell:
                self.send(c, 'net/close')

    def data(self, conn, data):
        """The bytes of a data frame of the daemon's, for client conn."""
        c = self.ids.get(conn)
        if c is None:  # gone already: it crossed our net/close, or the run ended
            return
        # past its window, or after its net/eof: the daemon is wrong
        if c.ending or len(c.out) + c.written + len(data) > NET_WINDOW:
            return self.drop(c, True)
        if c.out:
            c.out += data
            self.write(c)
        else:
            self.write(c, data)

    def frame(self, method, p):
        """A net/* notification of the daemon's."""
        c = self.ids.get(p.get('conn')) if isinstance(p, dict) and type(p.get('conn')) is int else None
        if c is None:  # gone already: it crossed our net/close, or the run ended
            return
        if method == 'net/ack' and type(p.get('bytes')) is int:
            c.sent = max(0, c.sent - p['bytes'])
        elif method == 'net/eof':
            c.ending = True
            if not c.out:
                self.drop(c, True)
        elif method == 'net/close':
            self.drop(c)

    def end_run(self):
        """The run ended: its connections go (the daemon forgets them)."""
        for c in list(self.conns.values()):
            if c.linger is None:
                self.drop(c, True)


def net_env(port):
    """What the code of a run with a grant gets in its environment."""
    url, local = 'http://127.0.0.1:%d' % port, 'localhost,127.0.0.1,::1'
    env = {'PIP_USER': '1', 'PYTHONUSERBASE': WORKSPACE + '/.local', 'PIP_BREAK_SYSTEM_PACKAGES': '1',
           'PIP_DISABLE_PIP_VERSION_CHECK': '1', 'PIP_NO_INPUT': '1', 'PIP_CACHE_DIR': '/tmp/.pip-cache'}
    for k in ('HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY'):
        env[k] = env[k.lower()] = local if k == 'NO_PROXY' else url
    return env


def b64(data):
    return binascii.b2a_base64(data, newline=False).decode('ascii')


class Supervisor:
    def __init__(self):
        # Private close-on-exec copies of the channel; fd 0/1 become /dev/null
        # so nothing we start inherits the channel by accident.
        self.frame_in, self.frame_out = os.dup(0), os.dup(1)
        # The daemon's key for our frames (sandbox/key, read in the frame loop
        # after the worker is forked ahead), the next frame's number, and
        # whether sandbox/ready (the one frame without a tag) went out.
        self.key, self.seq, self.said_ready = None, 0, False
        # Until the key comes, stdin is read into this buffer (read_key).
        self.key_buf, self.key_fill, self.key_skip = bytearray(KEY_LINE_MAX), 0, False
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
        # The daemon's lines carry a tag too: TAG_HEX digits and a space.
        self.lines, self.eof = LineReader(self.max_frame + TAG_HEX + 1, data_frames=True), False
        self.in_seq = 0       # the number the daemon's next line carries
        self.job = None
        self.pre = None       # the worker forked ahead, waiting for its first request
        self.parked = None    # the same, set aside while PID 1 rehearses an exec
        self.forked = None    # while it does: the workers forked for it
        self.worker = None    # a session's worker, kept between runs
        self.lost = False     # a session's worker ended: its next run starts afresh
        self.spent = None     # a single-use run answered: its worker, left for kill_leftovers
        self.pooled = None  # the modules a pool sandbox's worker preloads
        self.out_inline = 0
        self.proxy = None   # the network proxy, opened at the first exec with "network"
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
        """Every frame we write goes here: after sandbox/ready each carries
        its tag, HMAC-SHA256(key, 8-byte big-endian number || JSON) in hex,
        and a space ahead of the JSON (runtime/README.md, "Frame protocol")."""
        if self.said_ready:
            if self.key is None:
                return log('a frame before sandbox/key: not sent')
            # hmac.digest is OpenSSL's one call on every Python 3.8+ and
            # leaves no copy of the key behind (hmac.new pads copies of it
            # in Python before 3.10, in memory a later worker inherits).
            tag = hmac.digest(self.key, self.seq.to_bytes(8, 'big') + line[:-1], 'sha256')
            self.seq += 1
            line = tag.hex().encode('ascii') + b' ' + line
        self.said_ready = True
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
        if self.pooled is not None and self.pre is not None and self.key is None:
            self.rehearse()
        if _merge['asked'] and self.pooled is not None and self.pre is not None:
            # Our own heap too, once rehearsed: the same in every pool
            # sandbox of the image but for the frames' key, and no longer
            # shared with the worker's once the merger took the worker's copy.
            try:
                log(merge_heap('page merging (supervisor)'))
            except Exception as e:
                log('page merging (supervisor): %s: %s' % (type(e).__name__, e))
        self.send({'jsonrpc': '2.0', 'method': 'sandbox/ready',
                   'params': {'protocol': PROTOCOL, 'runtime': 'corral-runtime',
                              'python': sys.version.split()[0]}})
        while True:
            self.reap()
            job = self.job
            if job is not None and self.eof:
                # The daemon is gone (killed, crashed, cut off): nobody will
                # take the answer or stop the code, so stop it now.  PID 1's
                # exit ends the container, and every process in it.
                log('stdin closed while an exec runs: ending it and exiting')
                self.kill_leftovers()
                return EXIT_INPUT_LOST
            if job is not None and job.limit_at is not None and job.deadline is None \
                    and time.monotonic() >= job.limit_at:
                self.over_time(job)
            if job is not None and job.kill_at is not None and job.deadline is None \
                    and time.monotonic() >= job.kill_at:
                self.kill_worker(job.worker)
                job.kill_at = None
            if job is not None and job.kill_at is not None and job.deadline is None \
                    and time.monotonic() >= job.next_sigint:
                self.sigint(job)
            if job is not None and job.done():
                self.finish()
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
            if self.proxy is not None:  # the listener and its clients
                for fd, events in self.proxy.events():
                    poller.register(fd, events)
            timeout = None
            if job is not None:
                end = job.deadline if job.deadline is not None else \
                    job.next_sigint if job.kill_at is not None else job.limit_at
                # 1 s: reap() fallback should a SIGCHLD wakeup get lost
                timeout = 1000 if end is None else max(0, int((end - time.monotonic()) * 1000) + 1)
            until = self.proxy and self.proxy.deadline()
            if until is not None:
                left = max(0, int((until - time.monotonic()) * 1000) + 1)
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
        elif fd == self.frame_in and self.key is None:
            self.read_key()
        elif fd == self.frame_in:
            try:
                data = os.read(fd, FRAME_READ)
            except OSError:
                data = b''
            if not data:
                self.eof = True  # a running exec is ended: serve() sees to it
            for frame in self.lines.feed(data):
                self.handle(frame)
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
        elif self.proxy is not None:
            self.proxy.ready(fd, events)

    def read_key(self):
        """Stdin until the key has come.  Its lines are read into a buffer of
        our own, and the key's digits are decoded where they lie and then
        zeroed, so that no copy of them (bytes, text, JSON, or what freed
        memory keeps of them) is left for a worker forked later to find.
        Lines before the key are logged and ignored; what follows it goes
        to the frame loop."""
        kb = self.key_buf
        try:
            n = os.readv(self.frame_in, [memoryview(kb)[self.key_fill:]])
        except OSError:
            n = 0
        if not n:
            self.eof = True
            return
        self.key_fill += n
        start = 0
        while self.key is None:
            nl = kb.find(b'\n', start, self.key_fill)
            if nl < 0:
                break
            if self.key_skip:
                self.key_skip = False
            elif any(kb[k] not in b' \t\r' for k in range(start, nl)):
                self.take_key(start, nl)
            start = nl + 1
        fill, self.key_fill = self.key_fill, 0
        if self.key is not None:
            rest = bytes(kb[start:fill])
            kb[:] = bytes(len(kb))
            self.key_buf = None
            for frame in self.lines.feed(rest):
                self.handle(frame)
            return
        if start == 0 and fill == len(kb):  # too long to be the key
            if not self.key_skip:
                log('a frame before sandbox/key: ignored')
            self.key_skip, start = True, fill
        view = memoryview(kb)
        view[:fill - start] = view[start:fill]  # a partial line to the front, in place
        view[fill - start:fill] = bytes(start)
        self.key_fill = fill - start

    def take_key(self, start, nl):
        """The line kb[start:nl], if it is sandbox/key with 64 lower-case hex
        digits: the key, decoded in place, and its digits overwritten."""
        kb = self.key_buf
        at = kb.find(b'"key"', start, nl)
        d = at + 5 if at >= 0 else nl
        while d < nl and kb[d] in b' \t':
            d += 1
        colon = d < nl and kb[d] == 0x3a
        d += 1
        while d < nl and kb[d] in b' \t':
            d += 1
        if not colon or d + 65 >= nl or kb[d] != 0x22 or kb[d + 65] != 0x22:
            return log('a frame before sandbox/key: ignored')
        d += 1
        key = bytearray(32)
        for j in range(64):
            v = HEX_VALUE.get(kb[d + j])
            if v is None:
                key[:] = bytes(32)
                return log('a frame before sandbox/key: ignored')
            key[j >> 1] |= v << (4 * (1 - (j & 1)))
            kb[d + j] = 0x30  # '0'
        try:  # the rest of the frame, its key now zeros
            msg = json.loads(bytes(kb[start:nl]).decode('utf-8'), parse_constant=reject_constant)
            ok = isinstance(msg, dict) and msg.get('jsonrpc') == '2.0' and 'id' not in msg \
                and msg.get('method') == 'sandbox/key' and isinstance(msg.get('params'), dict) \
                and msg['params'].get('key') == '0' * 64
        except (ValueError, RecursionError):
            ok = False
        if not ok:
            key[:] = bytes(32)
            return log('a frame before sandbox/key: ignored')
        self.key = key

    def untag(self, line, advance=True):
        """The JSON of one of the daemon's lines after sandbox/key: each is
        TAG SP JSON, TAG the hex HMAC-SHA256(key, 8-byte big-endian
        (FROM_DAEMON | n) || JSON) of its n-th frame since the key (a data
        frame's line too; its number moves on with its bytes).  A line
        without it was written into our stdin by someone else (gVisor lets
        code reopen /proc/1/fd/0): corral is told, and the sandbox ends."""
        if line is not None and len(line) > TAG_HEX and line[TAG_HEX] == 0x20:
            body = line[TAG_HEX + 1:]
            tag = hmac.digest(self.key, (FROM_DAEMON | self.in_seq).to_bytes(8, 'big') + body, 'sha256')
            if hmac.compare_digest(tag.hex().encode('ascii'), line[:TAG_HEX]):
                self.in_seq += advance
                return body
        self.forged('a line over the frame limit' if line is None else 'a line without its tag')

    def data_frame(self, line, data, tag):
        """A data frame's bytes and their tag, HMAC-SHA256(key, its number
        || its line || LF || the bytes): the bytes for the proxy."""
        head = line[TAG_HEX + 1:]
        want = hmac.digest(self.key, (FROM_DAEMON | self.in_seq).to_bytes(8, 'big') + head + b'\n' + data,
                           'sha256')
        if not hmac.compare_digest(want.hex().encode('ascii'), tag):
            self.forged('data frame bytes without their tag')
        self.in_seq += 1
        if self.proxy is not None:
            self.proxy.data(int(head[1:head.index(b' ')]), data)

    def forged(self, what):
        log('%s on stdin, not written by corral: ending the sandbox' % what)
        self.send({'jsonrpc': '2.0', 'method': 'sandbox/forged', 'params': {'what': what}})
        self.kill_leftovers()
        os._exit(1)

    def handle(self, frame):
        if type(frame) is tuple:  # a data frame: net/data's bytes as they are
            if frame[0] == 'head':  # checked before its bytes are waited for
                return self.untag(frame[1], advance=False)
            return self.data_frame(*frame[1:])
        line = self.untag(frame)  # a line over max_frame with its tag never gets here
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
            if method == 'sandbox/key':
                log('a second sandbox/key: ignored')
            elif method == 'notifications/cancelled':
                params = msg.get('params')
                self.interrupt(params.get('requestId') if isinstance(params, dict) else None)
            elif method.startswith('net/'):
                if self.proxy is not None:
                    self.proxy.frame(method, msg.get('params'))
            else:
                log('ignored notification %r' % method[:100])
        elif method == 'sandbox/list':
            result, problem = list_dir(msg.get('params'), self.max_frame // 2)
            if problem is not None:
                self.reply_error(rid, -32602, problem)
            else:
                self.send({'jsonrpc': '2.0', 'id': rid, 'result': result})
        elif method in ('sandbox/file/read', 'sandbox/file/write'):
            self.file_request(rid, method, msg.get('params'))
        elif method == 'sandbox/memory':
            kb, n = memory_pss()
            if n == 0:
                self.reply_error(rid, -32000, 'no process memory to read here')
            else:
                self.send({'jsonrpc': '2.0', 'id': rid, 'result': {'pss_kb': kb, 'processes': n}})
        elif method != 'sandbox/exec':
            self.reply_error(rid, -32601, 'method not found: %s' % method[:100])
        elif self.job is not None:
            self.reply_error(rid, -32000, 'an exec is already running')
        elif self.spent is not None:
            self.reply_error(rid, -32000, 'this sandbox was single-use and has run its exec')
        else:
            self.start(rid, msg.get('params'))

    def file_request(self, rid, method, params):
        # sandbox/file/*: the daemon's read_file, write_file, files
        # arguments and /workspace/out (runtime/files.py).  A failure is an
        # error with data {kind, at?, target?, size?} for the daemon's words.
        try:
            if method == 'sandbox/file/read':
                result = file_read(params, self.max_frame)
            else:
                result = file_write(params)
        except FileFailure as e:
            data = dict(e.data, kind=e.kind)
            return self.send({'jsonrpc': '2.0', 'id': rid, 'error': {
                'code': FILE_FAILED, 'message': str(e), 'data': data}})
        except OSError as e:  # /workspace itself cannot be opened
            return self.send({'jsonrpc': '2.0', 'id': rid, 'error': {
                'code': FILE_FAILED, 'message': e.strerror or str(e), 'data': {'kind': 'EIO'}}})
        try:
            line = file_answer(rid, result)
        except ValueError as e:  # not JSON (an id of inf cannot come: handle() refuses it)
            return log('cannot encode a frame: %s' % e)
        self.send_line(line)

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
        elif method.startswith(('sandbox/', 'net/')):  # the daemon's and the proxy's only
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

    def rehearse(self):
        """A pool sandbox walks an exec's path once, here in PID 1, with a
        worker of its own, before it says ready.  The fork of the worker
        ahead left every page of ours shared with it, and the first write
        to a shared page makes the kernel copy it: an exec writes a few
        hundred (the reference counts and caches of what it runs through),
        which are copied now instead of during the call.  A trap each, far
        slower under gVisor, where the sentry handles every fault.  Its
        frames are encoded, tagged and dropped; none reaches the daemon."""
        pre, self.pre = self.pre, None
        self.parked = pre  # reap() still knows it
        self.forked = []
        out_was = os.path.isdir(OUT_DIR)
        # The frames' path too, under a key of its own: the daemon's comes
        # in the frame loop, after this (no worker forked here holds it).
        seq, self.key = self.in_seq, bytearray(os.urandom(32))
        # The instance's send_line: every frame is encoded and tagged, none sent.
        self.send_line = lambda line: hmac.digest(self.key, bytes(8) + line[:-1], 'sha256')
        end = time.monotonic() + REHEARSAL_WAIT
        try:
            body = encode({'jsonrpc': '2.0', 'id': REHEARSAL, 'method': 'sandbox/exec',
                           'params': {'language': 'python', 'code': 'pass'}})[:-1]
            tag = hmac.digest(self.key, (FROM_DAEMON | self.in_seq).to_bytes(8, 'big') + body, 'sha256')
            self.handle(tag.hex().encode('ascii') + b' ' + body)
            while self.job is not None and time.monotonic() < end:
                self.reap()
                job = self.job
                if job.done():
                    rec = job.record
                    self.finish()
                    if not isinstance(rec, dict) or rec.get('end') != 0:
                        log('the rehearsed exec failed: its worker ended without a clean record')
                    break
                poller = select.poll()
                for fd in [self.wake_r] + job.worker.open_fds():
                    poller.register(fd, select.POLLIN)
                stop = job.deadline if job.deadline is not None else end
                for fd, events in poller.poll(max(0, int((stop - time.monotonic()) * 1000) + 1)):
                    self.ready(fd, events)
            if self.job is not None:
                log('the rehearsed exec failed: not done in %g s' % REHEARSAL_WAIT)
        except Exception as e:  # the sandbox serves all the same, at the old cost
            log('the rehearsed exec failed: %s: %s' % (type(e).__name__, e))
        finally:
            del self.send_line
            self.key[:] = bytes(32)
            self.key, self.in_seq = None, seq
            self.job, self.spent, self.lost = None, None, False
            for w in self.forked:  # its group only: the worker forked ahead lives on
                for kill in (os.killpg, os.kill):
                    try:
                        kill(w.pid, signal.SIGKILL)
                        break
                    except OSError:
                        pass
                try:
                    os.waitpid(w.pid, 0)
                except OSError:
                    pass
                w.close()
            self.forked = None
            if not out_was:  # as in a sandbox made for a call: no out/ before the exec
                try:
                    os.rmdir(OUT_DIR)
                except OSError:
                    pass
            if pre is not None:  # what the rehearsal may have set off counts for nobody
                pre.oom_before = oom_kills()
            self.pre, self.parked = pre, None

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
            # A worker runs user code: it must not hold the frames' key.
            if self.key is not None:
                self.key[:] = bytes(len(self.key))
            try:
                os.close(go_w)
                worker(self, (out_w, err_w, rep_w), api_w, go_r, set_w)
            finally:
                os._exit(127)
        for fd in (out_w, err_w, rep_w, go_r, api_w) + ((set_w,) if ahead else ()):
            os.close(fd)
        w = Worker(self, pid, out_r, err_r, rep_r, go_w, api_r, oom_before)
        w.set_r = set_r
        if self.forked is not None:
            self.forked.append(w)
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
        if language not in ('python', 'shell', 'state') or not isinstance(code, str) \
                or (language == 'state' and (code not in ('save', 'load') or not keep)) \
                or not isinstance(limit, int) or isinstance(limit, bool) or limit < 0 \
                or not isinstance(keep, bool) or not (time_limit is None or (
                    isinstance(time_limit, int) and not isinstance(time_limit, bool)
                    and 0 < time_limit <= TIME_LIMIT_MAX_S * 1000)):
            return self.reply_error(rid, -32602, 'invalid params: want language "python"|"shell" '
                                    'and code string, or language "state", code "save"|"load" '
                                    'and keep true; output_limit >= 0, keep boolean, '
                                    'time_limit_ms 1..%d' % (TIME_LIMIT_MAX_S * 1000))
        if language == 'state' and code == 'save' and self.worker is None:
            # only a session's worker has state: a fresh one would save nothing
            return self.reply_error(rid, -32000, 'no session state to save: this sandbox has no '
                                    'session worker%s' % (' (it was lost)' if self.lost else ''))
        servers = check_servers(p.get('servers'))
        if servers is None:
            return self.reply_error(rid, -32602, 'invalid params: want servers a list of '
                                    '{"name": string, "alias": Python identifier}, names and aliases unique')
        token = os.urandom(16).hex()
        request = {'language': language, 'code': code, 'servers': servers, 'keep': keep, 'token': token}
        net = p.get('network')
        if net is not None:  # a grant: the proxy and its variables for the code
            env = net.get('env', {}) if isinstance(net, dict) else None
            if not isinstance(env, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) and k and '=' not in k and '\0' not in k + v
                    for k, v in env.items()):
                return self.reply_error(rid, -32602, 'invalid params: want network {"env": {name: string}}')
            if self.proxy is None:
                try:
                    self.proxy = Proxy(self)
                except OSError as e:
                    log('cannot open the network proxy: %s' % e)
                    return self.reply_error(rid, -32603, 'cannot open the network proxy')
            request['network'] = dict(net_env(self.proxy.port), **env)
        run = (token, None if time_limit is None else time_limit / 1000.0)
        # /workspace/out exists when the code starts, as the tools promise
        try:
            os.makedirs(OUT_DIR, exist_ok=True)
        except OSError:
            pass
        # taken before the worker has the request: it may be done at once
        out_before = out_scan() if os.path.isdir(OUT_DIR) else {}
        # A session's worker, else the one forked ahead, else a new one;
        # a save only the session's (a fresh one would save nothing over
        # the last good state).
        save = language == 'state' and code == 'save'
        for w in (self.worker,) if save else (self.worker, self.pre):
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
        if save:
            return self.reply_error(rid, -32000, 'no session state to save: the session worker is gone')
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
        self.job.stamps = [time.monotonic(), None, None]  # started; record; exit
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
            for w in (job.worker if job is not None else None, self.worker, self.pre, self.parked):
                if w is not None and w.pid == pid:
                    w.wait_status = st
            if job is not None and pid == job.pid:
                job.stamps[2] = time.monotonic()
                job.ended()
            elif self.worker is not None and pid == self.worker.pid:
                # a session's worker died between runs (OOM killer, a thread
                # calling os._exit): its state is gone; the next run says so
                log('the session worker ended between runs')
                self.worker.close()
                self.worker = None
                self.lost = True

    def finish(self):
        """Answers the exec."""
        job, self.job = self.job, None
        w = job.worker
        if self.proxy is not None:
            self.proxy.end_run()
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
        result['out_files'], result['out_removed'] = out_files(job.out_before)
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
            if result['out_files'] and job.out_inline > 0:
                # What the frame has room for, a margin kept for escaping.
                room = self.max_frame - len(encode(result)) - 65536
                inline_out_files(result, min(job.out_inline, room))
        # Where the time went, for the daemon's log: record, exit, answer.
        t0 = job.stamps[0]
        result['us'] = [-1 if t is None else int((t - t0) * 1e6)
                        for t in job.stamps[1:] + [time.monotonic()]]
        self.send({'jsonrpc': '2.0', 'id': job.rid, 'result': result})
        if keep or job.keep:
            return  # a session: wait for the next exec
        # Single-use: stay until the daemon closes stdin or removes us. It
        # may fetch files through the engine, which needs the container
        # (and its tmpfs); and the container's end, with the engine's work
        # it sets off, comes once the caller has its answer, not during.
        # Its code's processes go with the container, or at stdin's EOF.
        self.spent = w

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
        for x in (w, self.worker, self.job.worker if self.job is not None else None, self.spent):
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
    """Pids of root's descendants, from /proc (the sweep of a run's
    leftovers outside a container, and memory_pss)."""
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
