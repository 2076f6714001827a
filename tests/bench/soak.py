#!/usr/bin/python3
"""Soak test of corral: see README.md beside this file.

One `corral serve` per engine runs a fixed mix of calls (ok, error,
timeout, oom, output floods, shell, files in and out, sessions, jobs), a
few in flight at once. Every result is checked. At quiet points (pool back
at pool_min and idle, no session, no job) corral's RSS, descriptors, child
processes and containers are read from outside; after the first third
they must not grow. Exit 0 when every result was right and nothing grew,
1 otherwise, 2 on a usage error. Python 3 standard library only.
"""
import argparse, base64, json, os, subprocess, sys, tempfile, threading, time, urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Broken, Corral, engine_facts, engine_get  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
OUTPUT_LIMIT = 64 << 10
# corral's settings for the soak. A small memory limit makes the OOM calls
# cheap and a small output limit the floods; a short pool_idle_s and
# job_retention_s let every quiet point reach the same state (pool at
# pool_min, no kept job), so that the figures compare like with like.
CORRAL_ENV = {'CORRAL_MEMORY': '128m', 'CORRAL_OUTPUT_LIMIT': str(OUTPUT_LIMIT),
              'CORRAL_POOL_IDLE_S': '2', 'CORRAL_JOB_RETENTION_S': '1'}
QUIET_TIMEOUT = 90
SETTLE_S = 0.5
CHECKPOINTS = 6  # every sixth of the calls: the thirds are points 2, 4 and 6
# Idle engine connections corral's libcurl may keep (CURL_LOOP_IDLE_MAX in
# daemon/core/curl_loop.c): how many are idle at a quiet point depends on
# how many transfers overlapped last, so they are counted apart.
IDLE_CONNECTIONS_MAX = 8


def fail_unless(cond, what):
    return None if cond else what


# ------------------------------------------------------------------ mix --

class Mix:
    """Sends the calls of the mix and keeps, per kind, counts, latencies
    and the calls whose result was not what was expected."""

    def __init__(self, corral):
        self.c, self.lock = corral, threading.Lock()
        self.calls, self.by_kind, self.wrong = 0, {}, []

    def call(self, kind, tool, args, check, progress=None):
        """One tools/call; check(result, structuredContent) returns None or
        what was wrong. Returns (result, structuredContent)."""
        params = {'name': tool, 'arguments': args}
        if progress:
            params['_meta'] = {'progressToken': progress}
        msg, secs = self.c.request('tools/call', params)
        res = msg.get('result')
        sc = (res or {}).get('structuredContent') or {}
        try:
            problem = 'JSON-RPC error %s' % json.dumps(msg.get('error')) if res is None else check(res, sc)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            problem = 'unexpected shape (%s: %s)' % (type(e).__name__, e)
        with self.lock:
            self.calls += 1
            k = self.by_kind.setdefault(kind, {'calls': 0, 'wrong': 0, 'ms': []})
            k['calls'] += 1
            k['ms'].append(secs * 1000)
            if problem:
                k['wrong'] += 1
                self.wrong.append('%s (%s): %s; got %s' % (kind, tool, problem, json.dumps(res)[:400]))
        return res or {}, sc


def status_is(want, **fields):
    """A check: status, isError (true for all but ok and running) and fields."""
    def check(res, sc):
        if sc.get('status') != want:
            return 'status %r, expected %r' % (sc.get('status'), want)
        if res.get('isError') is not (want not in ('ok', 'running')):
            return 'isError %r with status %r' % (res.get('isError'), want)
        for k, v in fields.items():
            if sc.get(k) != v:
                return '%s %r, expected %r' % (k, sc.get(k), v)
        return None
    return check


def both(*checks):
    def check(res, sc):
        return next((p for p in (f(res, sc) for f in checks) if p), None)
    return check


def resource(res, suffix):
    """The embedded resource of a returned /workspace/out file."""
    for c in res.get('content') or []:
        r = c.get('resource') or {}
        if c.get('type') == 'resource' and r.get('uri', '').endswith(suffix):
            return r
    return {}


def item_ok(m, n):
    m.call('ok', 'run_python', {'code': 'print(6 * %d)' % n}, status_is('ok', stdout='%d\n' % (6 * n)))


def item_error(m, n):
    m.call('error', 'run_python', {'code': 'raise ValueError("soak %d")' % n}, both(
        status_is('error', exit_code=1),
        lambda r, sc: fail_unless(sc['error']['type'] == 'ValueError' and
                                  sc['error']['message'] == 'soak %d' % n, 'error.type/message')))


def item_shell(m, n):
    m.call('shell', 'run_shell', {'command': 'echo $((%d * 2)); echo warn >&2' % n},
           status_is('ok', stdout='%d\n' % (2 * n), stderr='warn\n'))


def item_shell_exit(m, n):
    m.call('shell_exit', 'run_shell', {'command': 'echo before; exit 3'},
           status_is('error', exit_code=3, stdout='before\n'))


def item_timeout(m, n):
    m.call('timeout', 'run_python', {'code': 'import time\nwhile True:\n    time.sleep(0.05)', 'timeout_s': 1},
           status_is('timeout', exit_code=None))


def item_timeout_shell(m, n):
    m.call('timeout_shell', 'run_shell', {'command': 'echo start; sleep 30', 'timeout_s': 1},
           status_is('timeout', exit_code=None, stdout='start\n'))


def item_oom(m, n):
    # 512 MiB touched page by page against a 128 MiB limit.
    m.call('oom', 'run_python', {'code': 'b = bytearray(512 * 1024**2)\nb[::4096] = b"x" * len(b[::4096])\n'
                                         'print("survived")', 'timeout_s': 30},
           both(status_is('oom'), lambda r, sc: fail_unless('survived' not in sc['stdout'], 'it survived')))


def item_flood(m, n):
    # 1 MiB of lines on stdout and 256 KiB on stderr, against a 64 KiB
    # output limit, with live progress asked for.
    code = ('import sys\nfor i in range(16384):\n    sys.stdout.write("%063d\\n" % i)\n'
            'sys.stderr.write("e" * 262144)\n')
    m.call('flood', 'run_python', {'code': code}, both(
        status_is('ok', stdout_bytes=MIB, stderr_bytes=256 << 10, stdout_truncated=True, stderr_truncated=True),
        lambda r, sc: fail_unless(0 < len(sc['stdout']) <= OUTPUT_LIMIT and sc['stdout'].startswith('0' * 63 + '\n'),
                                  'stdout not the first %d bytes' % OUTPUT_LIMIT)),
           progress='flood-%d' % n)


def file_content(n):
    text = ''.join('line %d of file %d\n' % (i, n) for i in range(n % 40 + 1))
    blob = bytes((i * 7 + n) & 0xff for i in range(4096 + n % 512))
    return text, blob


def item_files(m, n):
    """Files in with `files`, files out of /workspace/out, checked byte for byte."""
    text, blob = file_content(n)
    code = ('import os\nos.makedirs("out", exist_ok=True)\n'
            't = open("in/a.txt").read()\nb = open("in/b.bin", "rb").read()\n'
            'open("out/a.txt", "w").write(t.upper())\nopen("out/b.bin", "wb").write(b[::-1])\n'
            'print(len(t), len(b))')

    def check(res, sc):
        # Text comes embedded; bytes as a link (protocol 2025-06-18), read
        # back from what corral keeps of the run.
        paths = sorted((f['path'], f['size'], f['returned']) for f in sc['files'])
        if paths != [('out/a.txt', len(text), True), ('out/b.bin', len(blob), False)]:
            return 'files %r' % paths
        if resource(res, '/out/a.txt').get('text') != text.upper():
            return 'out/a.txt content differs'
        link = next((c for c in res.get('content') or [] if c.get('type') == 'resource_link'
                     and c.get('uri', '').endswith('/out/b.bin')), None)
        if not link:
            return 'out/b.bin is not a resource link'
        back, _ = m.c.request('resources/read', {'uri': link['uri']})
        contents = (back.get('result') or {}).get('contents') or [{}]
        if base64.b64decode(contents[0].get('blob', '')) != blob[::-1]:
            return 'out/b.bin read back differs (%s)' % json.dumps(back)[:200]
        return None
    m.call('files', 'run_python', {'code': code, 'files': [
        {'path': 'in/a.txt', 'content': text},
        {'path': 'in/b.bin', 'content': base64.b64encode(blob).decode(), 'encoding': 'base64'}]},
           both(status_is('ok', stdout='%d %d\n' % (len(text), len(blob))), check))


def item_job(m, n):
    """A call that outlives sync_wait_s becomes a job; job_result waits for it."""
    _, sc = m.call('job', 'run_python', {'code': 'import time\ntime.sleep(1.2)\nprint("late %d")' % n,
                                         'sync_wait_s': 0.3},
                   both(status_is('running'), lambda r, sc: fail_unless(sc.get('job_id'), 'no job_id')))
    if sc.get('job_id'):
        m.call('job', 'job_result', {'job_id': sc['job_id'], 'wait_s': 30},
               status_is('ok', stdout='late %d\n' % n, job_id=sc['job_id']))


def item_job_cancel(m, n):
    _, sc = m.call('job_cancel', 'run_python', {'code': 'import time\ntime.sleep(60)', 'sync_wait_s': 0.3,
                                                'timeout_s': 90},
                   both(status_is('running'), lambda r, sc: fail_unless(sc.get('job_id'), 'no job_id')))
    if sc.get('job_id'):
        jid = sc['job_id']
        m.call('job_cancel', 'job_cancel', {'job_id': jid},
               lambda r, sc: fail_unless(not r.get('isError') and sc.get('cancelled') is True, 'not cancelled'))
        m.call('job_cancel', 'job_result', {'job_id': jid, 'wait_s': 30}, status_is('cancelled', job_id=jid))


def item_session(m, n):
    """A session from open to close: files in, variables kept, a file
    written and read back, a shell in it, then a timeout (variables kept)
    or, every other time, an OOM (the interpreter is reset)."""
    s = 'soak-%d' % n
    text, _ = file_content(n)
    sess = lambda state: lambda r, sc: fail_unless(sc['session']['name'] == s and sc['session']['state'] == state,
                                                   'session %r' % sc.get('session'))
    m.call('session', 'run_python', {'session': s, 'files': [{'path': 'in/s.json', 'content': json.dumps({'n': n})}],
                                     'code': 'import json\nstate = json.load(open("in/s.json"))\nprint(state["n"])'},
           both(status_is('ok', stdout='%d\n' % n), sess('kept')))
    m.call('session', 'write_file', {'session': s, 'path': 'data.txt', 'content': text},
           lambda r, sc: fail_unless(not r.get('isError') and sc.get('bytes') == len(text), 'bytes'))
    m.call('session', 'run_python', {'session': s, 'code': (
        'state["n"] += 1\nimport os\nos.makedirs("out", exist_ok=True)\n'
        'open("out/r.txt", "w").write(open("data.txt").read()[::-1])\nprint(state["n"])')},
           both(status_is('ok', stdout='%d\n' % (n + 1)),
                lambda r, sc: fail_unless([f['path'] for f in sc['files']] == ['out/r.txt'], 'files')))
    m.call('session', 'read_file', {'session': s, 'path': 'out/r.txt'},
           lambda r, sc: fail_unless(not r.get('isError') and sc.get('size') == len(text) and
                                     r['content'][0]['text'] == text[::-1], 'read_file content'))
    m.call('session', 'list_files', {'session': s},
           lambda r, sc: fail_unless(sorted(e['path'] for e in sc['entries']) == ['data.txt', 'in', 'out'],
                                     'entries'))
    m.call('session', 'run_shell', {'session': s, 'command': 'wc -c < data.txt'},
           both(status_is('ok', stdout='%d\n' % len(text)), sess('kept')))
    if n % 2:
        m.call('session', 'run_python', {'session': s, 'code': (
            'b = bytearray(512 * 1024**2)\nb[::4096] = b"x" * len(b[::4096])')}, both(status_is('oom'), sess('reset')))
        m.call('session', 'run_python', {'session': s, 'code': 'print(state)'}, both(
            status_is('error'), lambda r, sc: fail_unless(sc['error']['type'] == 'NameError', 'not NameError')))
    else:
        m.call('session', 'run_python', {'session': s, 'timeout_s': 1,
                                         'code': 'import time\nwhile True:\n    time.sleep(0.05)'},
               both(status_is('timeout'), sess('kept')))
        m.call('session', 'run_python', {'session': s, 'code': 'print(state["n"])'},
               both(status_is('ok', stdout='%d\n' % (n + 1)), sess('kept')))
    m.call('session', 'session_close', {'session': s},
           lambda r, sc: fail_unless(not r.get('isError') and sc.get('closed') is True, 'not closed'))


# (item, calls it makes). One cycle: 35 calls, 16 containers (14 single-use,
# 2 sessions), each kind in proportion to how often an agent makes it.
CYCLE = [(item_ok, 1), (item_error, 1), (item_shell, 1), (item_flood, 1), (item_files, 1),
         (item_session, 9), (item_ok, 1), (item_timeout, 1), (item_shell_exit, 1), (item_oom, 1),
         (item_job, 2), (item_ok, 1), (item_files, 1), (item_session, 9), (item_timeout_shell, 1),
         (item_job_cancel, 3)]


def schedule(total):
    """The mix cut to exactly `total` calls (the tail filled with ok calls),
    split into CHECKPOINTS segments at item boundaries."""
    items, calls, i = [], 0, 0
    while calls < total:
        fn, k = CYCLE[i % len(CYCLE)]
        if calls + k > total:
            fn, k = item_ok, 1
        items.append((fn, i, calls))
        calls, i = calls + k, i + 1
    segs, start = [], 0
    for p in range(1, CHECKPOINTS + 1):
        end = next((j for j, (_, _, at) in enumerate(items) if at >= p * total / CHECKPOINTS), len(items))
        segs.append(items[start:end])
        start = end
    return segs


def run_segment(m, items, conc):
    """Runs the items with `conc` of them in flight; stops at the first Broken."""
    left, lock, errors = list(reversed(items)), threading.Lock(), []

    def worker():
        while True:
            with lock:
                if not left or errors:
                    return
                fn, n, _ = left.pop()
            try:
                fn(m, n + 1)
            except (Broken, OSError) as e:
                errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise Broken(str(errors[0]))


# --------------------------------------------------------- measurements --

def fd_kind(link):
    """A descriptor's kind, from its readlink: socket, pipe, anon_inode:[x], path."""
    if link.startswith(('socket:', 'pipe:')):
        return link.split(':', 1)[0]
    return link


def unix_peers():
    """socket inode -> path of the unix socket it is bound or connected to,
    from `ss` (iproute2). Without it every descriptor counts alike and the
    idle engine connections may look like growth."""
    try:
        out = subprocess.run(['ss', '-xan'], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        if not getattr(unix_peers, 'warned', False):
            print('  (no `ss`: engine connections are not told apart from other descriptors)', flush=True)
            unix_peers.warned = True
        return {}
    peers, path = {}, {}
    for line in out.splitlines()[1:]:
        f = line.split()
        if len(f) >= 8:
            # Netid State Recv-Q Send-Q Local-path Local-inode Peer-path Peer-inode
            path[f[5]] = f[4]
            peers[f[5]] = (f[6], f[7])
    return {ino: (lp if lp != '*' else path.get(pino, '*')) for ino, (lp, pino) in peers.items()}


def corral_containers(engine, pid):
    """(our containers by state, all io.corral.owner=corral containers on the engine)."""
    q = lambda label: urllib.parse.quote(json.dumps({'label': [label]}))
    _, ours = engine_get(engine, 'GET', '/containers/json?all=true&filters=' + q('io.corral.pid=%d' % pid))
    _, every = engine_get(engine, 'GET', '/containers/json?all=true&filters=' + q('io.corral.owner=corral'))
    states = {}
    for c in ours or []:
        states[c.get('State', '?')] = states.get(c.get('State', '?'), 0) + 1
    return states, len(every or [])


def dangling_volumes(engine):
    status, v = engine_get(engine, 'GET', '/volumes?filters=' + urllib.parse.quote('{"dangling":["true"]}'))
    return len((v or {}).get('Volumes') or []) if status == 200 else None


def engine_socket(engine):
    return engine[len('unix://'):] if engine.startswith('unix://') else engine if engine.startswith('/') else None


def sample(c, calls, t0):
    """corral's figures, read from outside in /proc and from the engine.
    Descriptors connected to the engine's socket are counted apart
    (`engine_conns`: one attach stream per container, the rest libcurl's idle
    connections); `fds_other` is everything else."""
    with open('/proc/%d/status' % c.pid) as f:
        kv = dict(line.split(':', 1) for line in f if ':' in line)
    kb = lambda k: int(kv[k].split()[0])
    fd_dir = '/proc/%d/fd' % c.pid
    fds = {}
    for fd in os.listdir(fd_dir):
        try:
            fds[int(fd)] = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            pass  # closed meanwhile
    children = []
    for tid in os.listdir('/proc/%d/task' % c.pid):
        with open('/proc/%d/task/%s/children' % (c.pid, tid)) as f:
            children += f.read().split()
    states, engine_wide = corral_containers(c.engine, c.pid)
    peers, path = unix_peers(), engine_socket(c.engine)
    engine_conns = sum(1 for v in fds.values()
                       if path and v.startswith('socket:[') and peers.get(v[8:-1]) == path)
    return {'calls': calls, 'elapsed_s': round(time.monotonic() - t0, 1), 'rss_kb': kb('VmRSS'),
            'rss_anon_kb': kb('RssAnon'), 'hwm_kb': kb('VmHWM'), 'threads': kb('Threads'),
            'fds': len(fds), 'fds_other': len(fds) - engine_conns, 'engine_conns': engine_conns,
            'fd_links': fds, 'children': len(children),
            'containers': sum(states.values()), 'container_states': states,
            'engine_corral_containers': engine_wide, 'dangling_volumes': dangling_volumes(c.engine)}


def tool_sc(c, name):
    msg, _ = c.request('tools/call', {'name': name, 'arguments': {}})
    return (msg.get('result') or {}).get('structuredContent') or {}


def wait_quiet(c):
    """Waits until corral is idle in the same state at every checkpoint:
    the demand forgotten (the pool's target back at pool.min, which takes
    up to pool_idle_s after the last call), pool.ready == pool.min, nothing
    starting, busy or queued, every container a ready one, no session, no
    job kept. Returns the pool."""
    deadline = time.monotonic() + QUIET_TIMEOUT
    while True:
        pool = tool_sc(c, 'sandbox_status').get('pool') or {}
        quiet = (pool.get('target') == pool.get('ready') == pool.get('min') == pool.get('containers') and
                 pool.get('starting') == pool.get('busy') == pool.get('queued') == 0 and
                 not tool_sc(c, 'session_list').get('sessions') and not tool_sc(c, 'job_list').get('jobs'))
        if quiet:
            time.sleep(SETTLE_S)  # the last removals' answers, read and freed
            return pool
        if time.monotonic() > deadline:
            raise Broken('corral never became quiet within %d s: pool %s' % (QUIET_TIMEOUT, json.dumps(pool)))
        time.sleep(0.1)


# ----------------------------------------------------------------- soak --

def soak(a, engine):
    """One engine: returns the result dict (with 'pass')."""
    kind, version = engine_facts(engine)
    R = {'engine': engine, 'engine_kind': kind, 'engine_version': version, 'calls': a.calls,
         'concurrency': a.concurrency, 'corral': a.corral, 'loadavg_start': os.getloadavg()[0]}
    print('\n== %s %s at %s: %d calls, %d in flight, corral %s' % (kind, version, engine, a.calls,
                                                                 a.concurrency, a.corral))
    c = Corral(a.corral, engine, CORRAL_ENV)
    m, points, problems, leaked, log = Mix(c), [], [], [], ''
    t0 = time.monotonic()
    try:
        c.initialize()
        wait_quiet(c)
        points.append(sample(c, 0, t0))
        segs = schedule(a.calls)
        for i, seg in enumerate(segs):
            t = time.monotonic()
            run_segment(m, seg, a.concurrency)
            busy_s = time.monotonic() - t
            wait_quiet(c)
            points.append(sample(c, m.calls, t0))
            points[-1]['segment_s'] = round(busy_s, 1)
            p = points[-1]
            print('  %4d calls  %6.1f s  RSS %6.2f MiB  fds %3d  children %d  containers %d  (%d wrong so far)'
                  % (p['calls'], p['elapsed_s'], p['rss_kb'] / 1024, p['fds'], p['children'], p['containers'],
                     len(m.wrong)), flush=True)
    except (Broken, OSError) as e:
        problems.append('broken: %s' % e)
    finally:
        R['wall_s'] = round(time.monotonic() - t0, 1)
        R['mix_s'] = round(sum(p.get('segment_s', 0) for p in points), 1)
        R['peers'] = unix_peers()
        code = c.proc.poll()
        with open(c.log.name, errors='replace') as f:
            leaked = c.close()  # removes the log file; f still reads it
            log = f.read()
    R.update(points=points, by_kind=m.by_kind, wrong=m.wrong, leftover_containers=leaked,
             loadavg_end=os.getloadavg()[0])
    if code is not None:
        problems.append('corral exited early with status %d' % code)
    if c.proc.returncode not in (0, None):
        problems.append('corral exited with status %d at the end' % c.proc.returncode)
    if m.wrong:
        problems.append('%d of %d results were not what was expected' % (len(m.wrong), m.calls))
    if leaked:
        problems.append('corral left containers behind (removed now): %s' % ' '.join(leaked))
    for marker in ('LeakSanitizer', 'AddressSanitizer', 'runtime error:'):
        if marker in log:
            problems.append('sanitizer report in corral\'s log (%s)' % marker)
    if len(points) == CHECKPOINTS + 1:
        problems += growth(a, R)
    R['problems'] = problems
    R['pass'] = not problems
    if problems:
        with tempfile.NamedTemporaryFile('w', prefix='corral-soak-', suffix='.log', delete=False) as f:
            f.write(log)
            R['log'] = f.name
    report(R)
    return R


def growth(a, R):
    """Growth from the first third to each later checkpoint, against the
    tolerances; returns the problems."""
    base = R['points'][CHECKPOINTS // 3]
    later = R['points'][CHECKPOINTS // 3 + 1:]
    limits = {'rss_kb': a.rss_tolerance_kib, 'fds_other': a.fd_tolerance, 'children': 0, 'containers': 0}
    R['growth'], out = {}, []
    for k, tol in limits.items():
        worst = max(p[k] - base[k] for p in later)
        R['growth'][k] = {'first_third': base[k], 'end': later[-1][k], 'worst': worst, 'tolerance': tol}
        if worst > tol:
            out.append('%s grew by %d after the first third (tolerance %d)' % (k, worst, tol))
    n = later[-1]['calls'] - base['calls']
    R['growth']['rss_bytes_per_call'] = (later[-1]['rss_kb'] - base['rss_kb']) * 1024 / n if n else 0
    for p in R['points']:
        idle = p['engine_conns'] - p['containers']
        if idle > IDLE_CONNECTIONS_MAX:
            out.append('%d idle engine connections at %d calls (at most %d may be kept)'
                       % (idle, p['calls'], IDLE_CONNECTIONS_MAX))
    if later[-1]['container_states'] != base['container_states']:
        out.append('container states changed: %s -> %s' % (base['container_states'], later[-1]['container_states']))
    return out


def pct(xs, p):
    s = sorted(xs)
    return s[max(0, -(-p * len(s) // 100) - 1)] if s else 0


def fd_diff(R, i, j):
    """Descriptors of checkpoint j against checkpoint i, by kind."""
    base, end = R['points'][i]['fd_links'], R['points'][j]['fd_links']
    count = lambda links: {k: sum(1 for v in links.values() if fd_kind(v) == k) for k in map(fd_kind, links.values())}
    b, e = count(base), count(end)
    return {k: e.get(k, 0) - b.get(k, 0) for k in sorted(set(b) | set(e)) if e.get(k, 0) != b.get(k, 0)}


def report(R):
    print('\n  %-14s %6s %6s %9s %9s' % ('kind', 'calls', 'wrong', 'p50 ms', 'p95 ms'))
    for k, v in sorted(R['by_kind'].items()):
        print('  %-14s %6d %6d %9.0f %9.0f' % (k, v['calls'], v['wrong'], pct(v['ms'], 50), pct(v['ms'], 95)))
    total = sum(v['calls'] for v in R['by_kind'].values())
    print('  %-14s %6d %6d' % ('all', total, len(R['wrong'])))
    for w in R['wrong'][:10]:
        print('    WRONG %s' % w)
    if R['points']:
        print('\n  %6s %8s %9s %9s %5s %6s %7s %8s %7s %10s %11s %8s' % (
            'calls', 'at s', 'RSS MiB', 'anon MiB', 'fds', 'other', 'engine', 'children', 'threads', 'containers',
            'engine-wide', 'volumes'))
        for i, p in enumerate(R['points']):
            mark = ' <- first third' if i == CHECKPOINTS // 3 else ''
            print('  %6d %8.1f %9.2f %9.2f %5d %6d %7d %8d %7d %10d %11d %8s%s' % (
                p['calls'], p['elapsed_s'], p['rss_kb'] / 1024, p['rss_anon_kb'] / 1024, p['fds'],
                p['fds_other'], p['engine_conns'], p['children'],
                p['threads'], p['containers'], p['engine_corral_containers'],
                '-' if p['dangling_volumes'] is None else p['dangling_volumes'], mark))
    g = R.get('growth')
    if g:
        print('\n  after the first third: RSS %+d KiB (worst %+d, tolerance %d), %.1f bytes/call;'
              ' descriptors other than engine connections %+d (worst %+d, tolerance %d); children %+d;'
              ' containers %+d' % (g['rss_kb']['end'] - g['rss_kb']['first_third'], g['rss_kb']['worst'],
                                   g['rss_kb']['tolerance'], g['rss_bytes_per_call'],
                                   g['fds_other']['end'] - g['fds_other']['first_third'], g['fds_other']['worst'],
                                   g['fds_other']['tolerance'], g['children']['worst'], g['containers']['worst']))
        print('  engine connections at each point: %s (one attach stream per container, the rest idle; at most %d'
              ' idle)' % (' '.join(str(p['engine_conns']) for p in R['points']), IDLE_CONNECTIONS_MAX))
        start = R['points'][0]
        print('  from the start: RSS %+d KiB, fds %+d (the first third is warm-up: caches, pool, allocator)'
              % (R['points'][-1]['rss_kb'] - start['rss_kb'], R['points'][-1]['fds'] - start['fds']))
        for label, i in (('start', 0), ('first third', CHECKPOINTS // 3)):
            d = fd_diff(R, i, -1)
            print('  descriptors %s -> end, by kind: %s' % (label, ', '.join('%s %+d' % kv for kv in d.items())
                                                           or 'the same'))
    if R.get('mix_s'):
        print('  time: %.1f s for the calls (%.2f calls/s), %.1f s in all with the quiet points; load %.2f -> %.2f'
              % (R['mix_s'], total / R['mix_s'], R['wall_s'], R['loadavg_start'], R['loadavg_end']))
    for p in R['problems']:
        print('  FAIL: %s' % p)
    if R['problems']:
        print('  corral\'s log: %s' % R['log'])
    print('  %s: %s' % (R['engine_kind'], 'PASS' if R['pass'] else 'FAIL'))


def main():
    ap = argparse.ArgumentParser(description='Soak test of corral: a long mix of calls, checked, '
                                             'and no growth in RSS, descriptors, children or containers.')
    ap.add_argument('--engine', action='append', help='unix:///path or tcp://host:port; repeat for several '
                    '(default: $CORRAL_ENGINE, else unix:///run/podman/podman.sock)')
    ap.add_argument('--corral', default=os.path.join(HERE, '..', '..', 'build', 'corral'))
    ap.add_argument('--calls', type=int, default=2000, help='tools/call requests per engine (default 2000)')
    ap.add_argument('--concurrency', type=int, default=3, help='items of the mix in flight at once (default 3)')
    ap.add_argument('--rss-tolerance-kib', type=int, default=1024,
                    help='RSS growth allowed after the first third (default 1024)')
    ap.add_argument('--fd-tolerance', type=int, default=0,
                    help='growth allowed after the first third in descriptors other than engine '
                         'connections (default 0)')
    ap.add_argument('--json', metavar='FILE', help='also write every figure there')
    a = ap.parse_args()
    if a.calls < 3 * len(CYCLE) or a.concurrency < 1:
        ap.error('--calls must be at least %d and --concurrency at least 1' % (3 * len(CYCLE)))
    if not os.access(a.corral, os.X_OK):
        print('soak: no corral binary at %s (build it, or pass --corral)' % a.corral, file=sys.stderr)
        return 2
    engines = a.engine or [os.environ.get('CORRAL_ENGINE', 'unix:///run/podman/podman.sock')]
    print('corral soak: nproc %d, load %.2f, %s' % (os.cpu_count(), os.getloadavg()[0],
                                                    time.strftime('%Y-%m-%d %H:%M:%S %z')))
    results = []
    for e in engines:
        try:
            results.append(soak(a, e))
        except (Broken, OSError) as err:
            print('  FAIL: %s: %s' % (e, err))
            results.append({'engine': e, 'pass': False, 'problems': [str(err)]})
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(results, f, indent=1)
    print('\nsoak: %s' % ', '.join('%s %s' % (r.get('engine_kind', r['engine']), 'PASS' if r['pass'] else 'FAIL')
                                   for r in results))
    return 0 if all(r['pass'] for r in results) else 1


if __name__ == '__main__':
    sys.exit(main())
