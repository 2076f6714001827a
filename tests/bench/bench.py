#!/usr/bin/python3
"""Benchmark of corral's warm sandbox pool: see README.md beside this file.

Python 3 standard library only. Prints machine facts, a latency table,
throughput, corral's own RSS and CPU, and PASS/FAIL against the targets.
Exit 0 whatever the verdicts; 1 when a measurement itself broke.
"""
import argparse, datetime, http.client, json, math, os, platform, socket
import subprocess, sys, tempfile, threading, time, urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
CODE = 'print(1)'
FLAGS = ['--network', 'none', '--read-only', '--cap-drop', 'all',
         '--security-opt', 'no-new-privileges', '--user', '65534:65534',
         '--memory', '512m', '--memory-swap', '512m', '--pids-limit', '128', '--cpus', '1',
         '--tmpfs', '/tmp:rw,nosuid,nodev,size=64m',
         '--tmpfs', '/workspace:rw,nosuid,nodev,size=256m',
         '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=4096:4096', '--ulimit', 'core=0:0',
         '--ipc', 'private']
IMAGE = os.environ.get('CORRAL_IMAGE', 'corral-python:latest')  # of the print(1) rows, for corral too
COLD_ENV = {'CORRAL_POOL_MAX': '0', 'CORRAL_IMAGE': IMAGE}
# The data image's rows: a program that imports numpy, pandas and
# matplotlib and saves one plot.
DATA_IMAGE = 'corral-data:latest'
DATA_CODE = ('import numpy as np, pandas as pd, matplotlib.pyplot as plt\n'
             'df = pd.DataFrame({"x": np.arange(50), "y": np.arange(50) ** 0.5})\n'
             'df.plot(x="x", y="y")\n'
             'plt.savefig("/workspace/out/plot.png")\n'
             'print(len(df))')
# `podman run` gets what corral's runtime does before the code: out/, and
# matplotlib's font cache copied where matplotlib may write.
DATA_PRELUDE = ('import os, shutil\nos.makedirs("/workspace/out", exist_ok=True)\n'
                'shutil.copytree("/usr/share/corral/tmp/matplotlib", "/tmp/matplotlib")\n')
CALL_TIMEOUT = 120
READY_TIMEOUT = 60


class Broken(Exception):
    """The measurement itself failed (not a missed target)."""


# ---------------------------------------------------------------- engine --

class UnixHTTP(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def engine_get(url, method, path):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.netloc, timeout=10) if u.scheme == 'tcp' else UnixHTTP('d', timeout=10)
    conn.unix_path = u.path
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, (json.loads(body) if body.strip() else None)
    finally:
        conn.close()


def engine_facts(url):
    try:
        status, v = engine_get(url, 'GET', '/version')
    except OSError as e:
        raise Broken('cannot reach the engine at %s: %s' % (url, e))
    if status != 200:
        raise Broken('GET /version on %s answered %d' % (url, status))
    podman = any('Podman' in c.get('Name', '') for c in v.get('Components') or [])
    return ('podman' if podman else 'docker'), v.get('Version', '?')


def leftovers(url, pid):
    """Remove and return the containers a corral process of ours left behind."""
    q = urllib.parse.quote(json.dumps({'label': ['io.corral.pid=%d' % pid]}))
    _, found = engine_get(url, 'GET', '/containers/json?all=true&filters=' + q)
    for c in found or []:
        engine_get(url, 'DELETE', '/containers/%s?force=true&v=true' % c['Id'])
    return [c['Id'][:12] for c in found or []]


# ---------------------------------------------------------------- corral --

def proc_stats(pid):
    """(VmRSS kB, VmHWM kB, utime+stime ms) of one process, read from outside."""
    with open('/proc/%d/status' % pid) as f:
        kv = dict(line.split(':', 1) for line in f if ':' in line)
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return (int(kv['VmRSS'].split()[0]), int(kv['VmHWM'].split()[0]),
            ticks * 1000 / os.sysconf('SC_CLK_TCK'))


def stop_stdio(proc, timeout=30):
    """A stdio corral stops the way hosts stop one: stdin closed, then a
    kill if it is still there after `timeout` seconds."""
    if proc.poll() is not None:
        return
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Corral:
    """One `corral serve` over stdio; responses are matched to requests by id."""

    def __init__(self, binary, engine, extra_env):
        env = {k: v for k, v in os.environ.items() if k != 'CORRAL_CONFIG'}
        self.cfgdir = tempfile.TemporaryDirectory(prefix='corral-bench-')
        # Its own store of hibernated sessions, gone with it.
        env.update(CORRAL_ENGINE=engine, XDG_CONFIG_HOME=self.cfgdir.name,
                   XDG_STATE_HOME=os.path.join(self.cfgdir.name, 'state'), **extra_env)
        self.log = tempfile.NamedTemporaryFile(prefix='corral-bench-', suffix='.log', delete=False)
        self.proc = subprocess.Popen([binary, 'serve'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env)
        self.pid, self.engine, self.closed = self.proc.pid, engine, False
        self.next_id, self.pending, self.lock = 0, {}, threading.Lock()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        for line in self.proc.stdout:
            t = time.perf_counter()
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            rid = msg.get('id') if isinstance(msg, dict) else None
            slot = self.pending.get(rid) if isinstance(rid, int) else None
            if slot is not None and ('result' in msg or 'error' in msg):
                slot.append((msg, t))
                slot[0].set()
        for slot in list(self.pending.values()):  # EOF: wake every waiter
            slot[0].set()

    def send(self, method, params=None):
        """Sends a request; returns a wait() that gives (message, seconds)."""
        with self.lock:
            self.next_id += 1
            rid, slot = self.next_id, [threading.Event()]
            self.pending[rid] = slot
            msg = {'jsonrpc': '2.0', 'id': rid, 'method': method, 'params': params or {}}
            t0 = time.perf_counter()
            try:
                self.proc.stdin.write((json.dumps(msg) + '\n').encode())
                self.proc.stdin.flush()
            except OSError:
                pass  # corral is gone: wait() says so

        def wait():
            if not slot[0].wait(CALL_TIMEOUT) or len(slot) < 2:
                code = self.proc.poll()
                raise Broken('%s: no answer from corral (%s); its log ends: %s' % (
                    method, 'it exited %d' % code if code is not None else 'still running', self.tail()))
            del self.pending[rid]
            return slot[1][0], slot[1][1] - t0
        return wait

    def request(self, method, params=None):
        return self.send(method, params)()

    def initialize(self):
        msg, _ = self.request('initialize', {'protocolVersion': '2025-06-18', 'capabilities': {},
                                             'clientInfo': {'name': 'corral-bench', 'version': '1'}})
        if 'result' not in msg:
            raise Broken('initialize failed: %s' % msg)
        with self.lock:
            self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            self.proc.stdin.flush()

    def run_python(self):
        """Seconds of one call, checked."""
        msg, secs = self.request('tools/call', {'name': 'run_python', 'arguments': {'code': CODE}})
        sc = (msg.get('result') or {}).get('structuredContent') or {}
        if sc.get('status') != 'ok' or sc.get('stdout') != '1\n':
            raise Broken('run_python did not answer ok: %s' % json.dumps(msg)[:500])
        return secs

    def tool(self, name, args, check):
        """Seconds of one tools/call whose structuredContent passes check()."""
        msg, secs = self.request('tools/call', {'name': name, 'arguments': args})
        sc = (msg.get('result') or {}).get('structuredContent') or {}
        if not check(sc):
            raise Broken('%s did not answer as expected: %s' % (name, json.dumps(msg)[:500]))
        return secs

    def status(self):
        """sandbox_status's structuredContent, or None when corral has no such tool."""
        msg, _ = self.request('tools/call', {'name': 'sandbox_status', 'arguments': {}})
        return (msg.get('result') or {}).get('structuredContent')

    def wait_ready(self, poll_s=0.005, quiet=False):
        """Waits until pool.ready >= pool.min (and, quiet, until every container
        corral holds is a ready one: nothing starting, running or being
        removed); returns the status (None: no sandbox_status)."""
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            st = self.status()
            if st is None or (st['pool']['ready'] >= max(st['pool']['min'], 1) and
                              (not quiet or st['pool']['containers'] == st['pool']['ready'])):
                return st
            if time.monotonic() > deadline:
                raise Broken('pool never reached ready >= min: %s' % json.dumps(st['pool']))
            time.sleep(poll_s)

    def tail(self):
        with open(self.log.name, errors='replace') as f:
            return ' | '.join(f.read().splitlines()[-5:]) or 'no log'

    def close(self, keep_log=False):
        """Close stdin, wait, then kill; remove containers it left. Returns those."""
        if self.closed:
            return []
        self.closed = True
        stop_stdio(self.proc)
        self.cfgdir.cleanup()
        if keep_log:
            print('corral %d log: %s' % (self.pid, self.log.name), file=sys.stderr)
        else:
            os.unlink(self.log.name)
        try:
            return leftovers(self.engine, self.pid)
        except OSError as e:
            return ['(could not list containers: %s)' % e]


# ----------------------------------------------------------- measurements --

def pct(xs, p):
    """Nearest-rank percentile of seconds, in ms."""
    s = sorted(xs)
    return 1000 * s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def timed_cmd(argv, n, want=b'1\n'):
    subprocess.run(argv, capture_output=True)  # warm-up, not counted
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = subprocess.run(argv, capture_output=True)
        out.append(time.perf_counter() - t)
        if r.returncode != 0 or r.stdout != want:
            raise Broken('%s: exit %d, %r' % (argv[0], r.returncode, (r.stdout + r.stderr)[-300:]))
    return out


def throughput(c, calls, conc):
    """Fresh sandboxes per second, `conc` calls in flight on one connection."""
    left, lock, errors = [calls], threading.Lock(), []

    def worker():
        while True:
            with lock:
                if left[0] == 0 or errors:
                    return
                left[0] -= 1
            try:
                c.run_python()
            except Broken as e:
                errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return calls / (time.perf_counter() - t)


def machine(engine):
    with open('/proc/cpuinfo') as f:
        model = next((l.split(':', 1)[1].strip() for l in f if l.startswith('model name')), '?')
    with open('/proc/meminfo') as f:
        mem_kb = int(next(l.split()[1] for l in f if l.startswith('MemTotal')))
    kind, version = engine_facts(engine)
    return {'date': datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
            'nproc': int(subprocess.run(['nproc'], capture_output=True, text=True).stdout),
            'cpu': model, 'mem_gib': round(mem_kb / 2**20, 1), 'kernel': platform.release(),
            'engine': engine, 'engine_kind': kind, 'engine_version': version,
            'loadavg_start': os.getloadavg()[0], 'corral_env': {
                k: v for k, v in os.environ.items() if k.startswith('CORRAL_') and k != 'CORRAL_ENGINE'}}


def measure_cold(c, n, R):
    c.run_python()  # warm-up, not counted
    cpu0 = proc_stats(c.pid)[2]
    lat = [c.run_python() for _ in range(n)]
    R['cpu_ms_per_call'] = {'cold': (proc_stats(c.pid)[2] - cpu0) / n}
    st = c.status()
    if st is not None and (st.get('pool') or {}).get('max', 0) != 0:
        raise Broken('CORRAL_POOL_MAX=0 did not disable the pool: %s' % json.dumps(st['pool']))
    return lat


def measure_warm(c, n, R, cold_p50_ms):
    """Paced latency, then throughput at concurrency 1 and 4; fills R."""
    R['rss_kb'] = {'idle_after_initialize': proc_stats(c.pid)[0]}
    st = c.status()
    if st is None:
        print('\nWARNING: corral has no sandbox_status tool: the pool cannot be verified;'
              ' "warm" calls are paced by a sleep of 2x the cold p50 instead.')
        R['pool'] = None
    else:
        R['pool_at_initialize'] = st['pool']
        st = c.wait_ready()
        R['pool'] = {k: st['pool'][k] for k in ('min', 'max')}
        R['rss_kb']['idle_pool_full'] = proc_stats(c.pid)[0]

    def hits_since(before):
        after = c.wait_ready(0.05)  # refills that the calls started are their cost too
        return after and {k: after['pool'][k] - before['pool'][k] for k in ('hits', 'misses')}
    lat = []
    for _ in range(n):
        if st is None:
            time.sleep(2 * cold_p50_ms / 1000)
        else:
            c.wait_ready(quiet=True)
        lat.append(c.run_python())
    R['pool_hits'] = {'paced': hits_since(st)}
    R['rss_kb']['pool_full_after_paced'] = proc_stats(c.pid)[0]
    for conc in (1, 4):
        before, cpu0 = c.wait_ready(), proc_stats(c.pid)[2]
        R['rate']['c%d' % conc] = throughput(c, n, conc)
        R['pool_hits']['c%d' % conc] = hits_since(before)
        R['cpu_ms_per_call']['warm_c%d' % conc] = (proc_stats(c.pid)[2] - cpu0) / n
    R['rss_kb']['peak_vmhwm'] = proc_stats(c.pid)[1]
    R['final_status'] = c.status()
    with open('/proc/%d/task/%d/children' % (c.pid, c.pid)) as f:
        R['corral_children'] = f.read().split()
    return lat


def measure_session(c, n):
    """A session: calls in it once open (no container per call), and a
    1 MiB file written and read back through the engine's archive
    endpoints. Latencies in seconds."""
    ok = lambda sc: sc.get('status') == 'ok' and sc.get('stdout') == '1\n'
    c.tool('run_python', {'code': 'x = 0', 'session': 'bench'}, lambda sc: sc.get('status') == 'ok')
    calls = [c.tool('run_python', {'code': CODE, 'session': 'bench'}, ok) for _ in range(n)]
    data = 'x' * (1 << 20)
    m = max(3, n // 4)
    writes = [c.tool('write_file', {'session': 'bench', 'path': 'f.txt', 'content': data},
                     lambda sc: sc.get('bytes') == len(data)) for _ in range(m)]
    reads = [c.tool('read_file', {'session': 'bench', 'path': 'f.txt'},
                    lambda sc: sc.get('size') == len(data)) for _ in range(m)]
    c.tool('session_close', {'session': 'bench'}, lambda sc: sc.get('closed') is True)
    return {'session': calls, 'write_1m': writes, 'read_1m': reads}


def sandbox_pss(engine, corral_pid):
    """Host memory of one ready sandbox of corral's: PSS and RSS (kB) of
    the engine's monitor above its first process (conmon, containerd-shim)
    and of everything under that monitor (the container's processes, and
    under gVisor its kernel, gofer and stubs), from /proc/PID/smaps_rollup."""
    q = urllib.parse.quote(json.dumps({'label': ['io.corral.pid=%d' % corral_pid], 'status': ['running']}))
    _, found = engine_get(engine, 'GET', '/containers/json?filters=' + q)
    if not found:
        return None
    return container_memory(engine, found[0]['Id'], proc_parents())


def proc_parents():
    """{pid: ppid} of every process on the host, from /proc/PID/stat."""
    parent = {}
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                with open('/proc/%s/stat' % name) as f:
                    parent[int(name)] = int(f.read().rsplit(')', 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return parent


def container_memory(engine, cid, parent):
    """PSS and RSS (kB) of one running container's first process's parent
    (the engine's monitor) and everything under it; None when the engine
    gives no pid."""
    _, info = engine_get(engine, 'GET', '/containers/%s/json' % cid)
    init = (info or {}).get('State', {}).get('Pid')
    if not init:
        return None
    top = parent.get(init) or init
    pids, todo = [top], [top]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        pids += kids
        todo += kids
    pss = rss = 0
    for p in pids:
        try:
            with open('/proc/%d/smaps_rollup' % p) as f:
                kv = dict(line.split(':', 1) for line in f if ':' in line)
            pss += int(kv['Pss'].split()[0])
            rss += int(kv['Rss'].split()[0])
        except (OSError, KeyError, ValueError):
            pass
    return {'pss_kb': pss, 'rss_kb': rss, 'processes': len(pids)}


KSM = '/sys/kernel/mm/ksm/'
MERGE_POOL = 8  # ready data sandboxes whose memory is measured, merged and not


def ksm_read(name):
    try:
        with open(KSM + name) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def ksmd_cpu_s():
    """CPU seconds the kernel's merger thread has used, or None."""
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                with open('/proc/%s/stat' % name) as f:
                    st = f.read()
            except OSError:
                continue
            if st.split('(', 1)[1].startswith('ksmd)'):
                fields = st.rsplit(')', 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
    return None


def pool_memory(a, start, merge):
    """MERGE_POOL ready data sandboxes of one corral (memory_merge on or
    off): PSS per sandbox (all of them, with their monitors, over their
    number); with merging, once the merger has settled (two full scans
    since all were ready, then pages_sharing still for 3 s; at most 90 s):
    how long that took, whether the bound cut it short, and the CPU the
    merger's thread used meanwhile."""
    c = start({'CORRAL_IMAGE': DATA_IMAGE, 'CORRAL_POOL_MIN': str(MERGE_POOL),
               'CORRAL_POOL_MEMORY': '4g', 'CORRAL_MEMORY_MERGE': 'true' if merge else 'false'})
    out, leaked = {}, []
    try:
        c.wait_ready(quiet=True)
        t0, cpu0, scans0 = time.monotonic(), ksmd_cpu_s(), ksm_read('full_scans')
        if merge and ksm_read('run') == 1 and scans0 is not None:
            last, still = ksm_read('pages_sharing'), time.monotonic()
            while time.monotonic() - t0 < 90:
                time.sleep(0.5)
                now = ksm_read('pages_sharing')
                if now != last:
                    last, still = now, time.monotonic()
                if (ksm_read('full_scans') or 0) >= scans0 + 2 and time.monotonic() - still >= 3:
                    break
            out['settle_s'] = time.monotonic() - t0
            out['cut_short'] = time.monotonic() - t0 >= 90
            cpu1 = ksmd_cpu_s()
            out['ksmd_cpu_s'] = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        q = urllib.parse.quote(json.dumps({'label': ['io.corral.pid=%d' % c.pid], 'status': ['running']}))
        _, found = engine_get(a.engine, 'GET', '/containers/json?filters=' + q)
        parent = proc_parents()
        mems = [m for m in (container_memory(a.engine, x['Id'], parent) for x in found or []) if m]
        if mems:
            out['sandboxes'] = len(mems)
            out['pss_kb'] = sum(m['pss_kb'] for m in mems) / len(mems)
            out['rss_kb'] = sum(m['rss_kb'] for m in mems) / len(mems)
    finally:
        leaked = c.close()
    return out, leaked


def measure_data(a, n, R, lat, cli, start):
    """The data image: warm (paced) and cold calls of DATA_CODE, the same
    program under `podman run --rm`, and the host memory of one ready
    sandbox. Skipped (with a note) when the engine lacks the image.
    Returns the containers the corrals left (removed)."""
    status, _ = engine_get(a.engine, 'GET', '/images/%s/json' % DATA_IMAGE)
    if status != 200:
        print('\n(no %s on the engine: `corral image build --profile data` makes it; data rows skipped)'
              % DATA_IMAGE)
        return []
    ok = lambda sc: (sc.get('status') == 'ok' and sc.get('stdout') == '50\n' and
                     [f.get('path') for f in sc.get('files') or []] == ['out/plot.png'])
    args = {'code': DATA_CODE}
    warm = start({'CORRAL_IMAGE': DATA_IMAGE})
    warm.wait_ready(quiet=True)
    R['data_sandbox'] = sandbox_pss(a.engine, warm.pid)
    warm.tool('run_python', args, ok)  # warm-up, not counted
    lat['data_warm'] = []
    for _ in range(n['data_warm']):
        warm.wait_ready(quiet=True)
        lat['data_warm'].append(warm.tool('run_python', args, ok))
    leaked = warm.close()  # before the cold runs: its pool would take CPU from them
    cold = start(dict(COLD_ENV, CORRAL_IMAGE=DATA_IMAGE))
    lat['data_cold'] = [cold.tool('run_python', args, ok) for _ in range(n['data_cold'] + 1)][1:]
    leaked += cold.close()
    R['merge'] = {'ksm_run': ksm_read('run')}
    for key, merge in (('off', False), ('on', True)):
        R['merge'][key], more = pool_memory(a, start, merge)
        leaked += more
    lat['data_podman'] = timed_cmd(cli + ['run', '--rm', '-e', 'MPLBACKEND=Agg', '-e', 'MPLCONFIGDIR=/tmp/matplotlib']
                                   + FLAGS + [DATA_IMAGE, 'python3', '-c', DATA_PRELUDE + DATA_CODE],
                                   n['data_podman'], want=b'50\n')
    return leaked


def paced_1s(c, n):
    """n calls one second apart (from one call's start to the next), on a
    corral whose pool has filled: the pace an agent keeps, under which a
    slow refill (gVisor's) would leave the pool empty."""
    c.wait_ready(quiet=True)
    lat = []
    for _ in range(n):
        t = time.monotonic()
        lat.append(c.run_python())
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))
    return lat


def measure_runsc(a, n, R, lat):
    """The same cold and warm rows, throughput and host memory of a ready
    sandbox, with CORRAL_RUNTIME=runsc against --runsc-engine."""
    out, leaked = {'rate': {}}, []

    def start(extra_env):
        c = Corral(a.corral, a.runsc_engine, dict(extra_env, CORRAL_RUNTIME='runsc'))
        c.initialize()
        return c
    cold = start(COLD_ENV)
    try:
        lat['runsc_cold'] = measure_cold(cold, n['cold'], out)
    finally:
        leaked += cold.close()
    warm = start({'CORRAL_IMAGE': IMAGE})
    try:
        warm.wait_ready(quiet=True)
        out['sandbox'] = sandbox_pss(a.runsc_engine, warm.pid)
        lat['runsc_warm'] = measure_warm(warm, n['warm'], out, pct(lat['runsc_cold'], 50))
    finally:
        leaked += warm.close()
    # One call a second, runc then runsc, each on a corral of its own.
    for key, engine, env in (('paced_1s', a.engine, {}), ('runsc_paced_1s', a.runsc_engine,
                                                            {'CORRAL_RUNTIME': 'runsc'})):
        c = Corral(a.corral, engine, dict(env, CORRAL_IMAGE=IMAGE))
        try:
            c.initialize()
            lat[key] = paced_1s(c, n['paced'])
            st = c.status()['pool']
            out.setdefault('paced', {})[key] = {'hits': st['hits'], 'misses': st['misses'],
                                                'target': st['target'], 'reason': st['target_reason']}
        finally:
            leaked += c.close()
    R['runsc'] = {'rate': out['rate'], 'sandbox': out.get('sandbox'), 'pool_hits': out.get('pool_hits'),
                  'paced': out.get('paced')}
    return leaked


def main():
    ap = argparse.ArgumentParser(description="Benchmark corral's warm sandbox pool.")
    ap.add_argument('--engine', default=os.environ.get('CORRAL_ENGINE', 'unix:///run/podman/podman.sock'))
    ap.add_argument('--corral', default=os.path.join(HERE, '..', '..', 'build', 'corral'))
    ap.add_argument('--calls', type=int, help='warm paced and throughput calls (default 200, --quick 20)')
    ap.add_argument('--quick', action='store_true', help='few samples, for a CI smoke run')
    ap.add_argument('--json', metavar='FILE', help='also write the results as JSON')
    ap.add_argument('--runsc-engine', metavar='URL',
                    help='also measure gVisor (CORRAL_RUNTIME=runsc) against this engine: Docker '
                         'Engine with corral-runsc, or a Podman service run with --runtime corral-runsc')
    a = ap.parse_args()
    n = dict(cold=10, podman=5, host=10, warm=20, data_warm=10, data_cold=3, data_podman=3, paced=60) if a.quick \
        else dict(cold=30, podman=20, host=50, warm=200, data_warm=50, data_cold=10, data_podman=10, paced=60)
    n['warm'] = a.calls or n['warm']
    lat, corrals, leaked, broken = {}, [], [], False

    def start(extra_env):
        c = Corral(a.corral, a.engine, extra_env)
        corrals.append(c)
        c.initialize()
        return c
    try:
        if not os.access(a.corral, os.X_OK):
            raise Broken('no corral binary at %s (build it, or pass --corral)' % a.corral)
        R = {'machine': machine(a.engine), 'samples': n}
        m = R['machine']
        cli = ['podman', '--url', a.engine] if m['engine_kind'] == 'podman' else ['docker', '-H', a.engine]
        print('corral pool benchmark, %s' % m['date'])
        print('machine: nproc %d, %s, %.1f GiB, kernel %s' % (m['nproc'], m['cpu'], m['mem_gib'], m['kernel']))
        print('engine:  %s %s at %s; baseline: %s run' % (m['engine_kind'], m['engine_version'], a.engine,
                                                            ' '.join(cli)))
        print('load:    %.2f at start (1-minute load average; anything else running skews the numbers)'
              % m['loadavg_start'])
        lat['host'] = timed_cmd(['/usr/bin/python3', '-c', CODE], n['host'])
        lat['podman'] = timed_cmd(cli + ['run', '--rm'] + FLAGS + [IMAGE, 'python3', '-c', CODE], n['podman'])
        R['rate'] = {'podman_sequential': 1000 / pct(lat['podman'], 50)}
        cold = start(COLD_ENV)
        lat['cold'] = measure_cold(cold, n['cold'], R)
        leaked += cold.close()
        warm = start({'CORRAL_IMAGE': IMAGE})
        lat['warm'] = measure_warm(warm, n['warm'], R, pct(lat['cold'], 50))
        lat.update(measure_session(warm, n['warm']))
        leaked += warm.close()
        leaked += measure_data(a, n, R, lat, cli, start)
        # The runc sandbox's memory, measured the same way as runsc's.
        w = start({'CORRAL_IMAGE': IMAGE})
        w.wait_ready(quiet=True)
        R['sandbox'] = sandbox_pss(a.engine, w.pid)
        leaked += w.close()
        if a.runsc_engine:
            leaked += measure_runsc(a, n, R, lat)
    except (Broken, OSError) as e:
        print('\nBROKEN: %s' % e, file=sys.stderr)
        broken = True
        return 1
    finally:
        for c in corrals:
            leaked += c.close(keep_log=broken)
        if leaked:
            print('LEAK: corral left containers behind (removed now): %s' % ' '.join(leaked))
    m['loadavg_end'] = os.getloadavg()[0]
    report(R, lat)
    if a.json:
        R['latency_ms'] = {k: [round(1000 * x, 3) for x in v] for k, v in lat.items()}
        with open(a.json, 'w') as f:
            json.dump(R, f, indent=1)
    return 1 if leaked else 0


def report(R, lat):
    p50 = R['p50_ms'] = {k: pct(v, 50) for k, v in lat.items()}
    p95 = R['p95_ms'] = {k: pct(v, 95) for k, v in lat.items()}
    pool, r, kind = R['pool'], R['rate'], R['machine']['engine_kind']
    print('\n%-50s %5s %9s %9s' % ('latency of print(1)', 'n', 'p50 ms', 'p95 ms'))
    for k, label in (('host', "host /usr/bin/python3 -c 'print(1)'"),
                     ('podman', '%s run --rm, same image and flags' % kind),
                     ('cold', 'corral run_python, cold (CORRAL_POOL_MAX=0)'),
                     ('warm', 'corral run_python, warm, paced' + ('' if pool else ' [no pool seen]')),
                     ('session', 'corral run_python in an open session'),
                     ('write_1m', 'corral write_file, 1 MiB, in that session'),
                     ('read_1m', 'corral read_file, 1 MiB, in that session')):
        print('%-50s %5d %9.1f %9.1f' % (label, len(lat[k]), p50[k], p95[k]))
    print('a warm call / a call in an open session: %.2f' % (p50['warm'] / p50['session']))
    if 'data_warm' in lat:
        print('\n%-50s %5s %9s %9s' % ('the data image: numpy, pandas, matplotlib, one plot', 'n', 'p50 ms', 'p95 ms'))
        for k, label in (('data_podman', '%s run --rm, same image, flags and program' % kind),
                         ('data_cold', 'corral run_python, cold (CORRAL_POOL_MAX=0)'),
                         ('data_warm', 'corral run_python, warm (modules preloaded), paced')):
            print('%-50s %5d %9.1f %9.1f' % (label, len(lat[k]), p50[k], p95[k]))
        ds = R.get('data_sandbox')
        if ds:
            print('one ready data sandbox on the host: PSS %.1f MiB (RSS %.1f MiB), %d processes with its monitor'
                  % (ds['pss_kb'] / 1024, ds['rss_kb'] / 1024, ds['processes']))
        mg = R.get('merge') or {}
        off, on = mg.get('off') or {}, mg.get('on') or {}
        if off.get('pss_kb') and on.get('pss_kb'):
            run = mg.get('ksm_run')
            print('%d ready data sandboxes, PSS per sandbox: %.1f MiB with memory_merge off, %.1f MiB on%s'
                  % (on.get('sandboxes', 0), off['pss_kb'] / 1024, on['pss_kb'] / 1024,
                     '' if run == 1 else ' (the host\'s merger is %s: nothing merges)'
                     % ('stopped' if run == 0 else 'missing')))
            if 'settle_s' in on:
                print('  the merger settled %.1f s after the last was ready%s, its thread using %s of CPU; '
                      'target: at most 30 MiB merged: %s'
                      % (on['settle_s'], ' (cut short: still merging)' if on.get('cut_short') else '',
                         '%.2f s' % on['ksmd_cpu_s'] if on.get('ksmd_cpu_s') is not None else 'n/a',
                         'PASS' if on['pss_kb'] <= 30 * 1024 else 'MISSED'))
    hits = lambda k: '   (pool hits %(hits)d, misses %(misses)d)' % R['pool_hits'][k] if R['pool_hits'][k] else ''
    if pool:
        print('pool: min %d, max %d; paced calls %s' % (pool['min'], pool['max'], hits('paced').strip()))
    print('\nfresh sandboxes per second (%d calls each, back to back)' % len(lat['warm']))
    row = lambda label, value: print('  %-52s %s' % (label, value))
    row('%s run, sequential (1000 / p50)' % kind, '%7.1f /s' % r['podman_sequential'])
    for conc in (1, 4):
        row('corral warm, concurrency %d' % conc, '%7.1f /s%s' % (r['c%d' % conc], hits('c%d' % conc)))
    print("\ncorral's own process (/proc/PID; the engine's processes are not counted)")
    mib = lambda kb: '%.1f MiB' % (kb / 1024) if kb is not None else 'n/a'
    rss, at_init = R['rss_kb'], R.get('pool_at_initialize')
    row('RSS idle, right after initialize' + (' (pool ready %d of %d)' % (
        at_init['ready'], at_init['min']) if at_init else ''), mib(rss['idle_after_initialize']))
    row('RSS idle, pool full', mib(rss.get('idle_pool_full')))
    row('RSS after the paced calls', mib(rss['pool_full_after_paced']))
    row('peak RSS (VmHWM) after all runs', mib(rss['peak_vmhwm']))
    for k, v in R['cpu_ms_per_call'].items():
        row('CPU per call (utime+stime), ' + k.replace('_c', ', concurrency '), '%.2f ms' % v)
    f = R['final_status']
    if f:
        fp = f.get('pool') or {}
        print('  sandbox_status: rss %s, cpu %s ms, %s calls; pool failures %s, refill p50/p95 %s/%s ms%s'
              % (mib(f.get('rss_kb')), f.get('cpu_ms'), f.get('calls'), fp.get('failures'),
                 fp.get('refill_p50_ms'), fp.get('refill_p95_ms'),
                 '; last error: %s' % fp['last_error'] if fp.get('last_error') else ''))
    if R['corral_children']:
        print('  corral has child processes (%s), not counted above' % ' '.join(R['corral_children']))
    checks = [('warm p50 / %s run p50' % kind, p50['warm'] / p50['podman'], '<=', 1 / 15, '%.4f'),
              ('warm p50 (ms)', p50['warm'], '<=', 10, '%.2f'),
              ('cold p50 / %s run p50' % kind, p50['cold'] / p50['podman'], '<=', 0.8, '%.3f'),
              ('concurrency-4 rate / %s run rate' % kind, r['c4'] / r['podman_sequential'], '>=', 2, '%.2f'),
              ('warm p50 / session call p50', p50['warm'] / p50['session'], '<=', 1.5, '%.2f')]
    if 'data_warm' in lat:
        checks.append(('data warm p50, plot saved (ms)', p50['data_warm'], '<=', 100, '%.1f'))
    print('\n%-40s %10s %12s' % ('target', 'measured', 'target'))
    R['targets'] = {}
    for name, val, op, want, fmt in checks:
        ok = (val <= want if op == '<=' else val >= want) and (pool is not None or 'cold' in name)
        R['targets'][name] = {'value': val, 'target': op + ' ' + fmt % want, 'pass': ok}
        print('%-40s %10s %12s  %s' % (name, fmt % val, op + ' ' + fmt % want, 'PASS' if ok else 'FAIL'))
    if not pool:
        print('(without sandbox_status no pool was seen: the warm targets count as FAIL)')
    if 'runsc_warm' in lat:
        report_runsc(R, lat, p50, p95, kind, checks)
    print('\nload average at the end: %.2f' % R['machine']['loadavg_end'])


def report_runsc(R, lat, p50, p95, kind, checks):
    """runc beside runsc (gVisor), from the same run, and the issue's targets."""
    g = R['runsc']
    mib = lambda s: '%.1f MiB PSS (RSS %.1f), %d processes' % (
        s['pss_kb'] / 1024, s['rss_kb'] / 1024, s['processes']) if s else 'n/a'
    print('\n%-44s %16s %16s' % ('runc and gVisor (runsc), same run', 'runc', 'runsc'))
    line = lambda label, x, y: print('%-44s %16s %16s' % (label, x, y))
    line('warm p50 / p95 (ms)', '%.1f / %.1f' % (p50['warm'], p95['warm']),
         '%.1f / %.1f' % (p50['runsc_warm'], p95['runsc_warm']))
    line('cold p50 (ms)', '%.1f' % p50['cold'], '%.1f' % p50['runsc_cold'])
    for conc in (1, 4):
        line('sandboxes per second, concurrency %d' % conc, '%.1f /s' % R['rate']['c%d' % conc],
             '%.1f /s' % g['rate']['c%d' % conc])
    print('memory of one ready sandbox on the host, all its processes with the monitor:')
    print('  runc:  %s' % mib(R.get('sandbox')))
    print('  runsc: %s' % mib(g.get('sandbox')))
    pc = g.get('paced') or {}
    if 'runsc_paced_1s' in lat:
        for key, label in (('paced_1s', 'runc'), ('runsc_paced_1s', 'runsc')):
            h = pc.get(key) or {}
            print('one call a second for %d s, %-5s: p50 %.1f ms, p95 %.1f ms (pool hits %s, misses %s; '
                  'target %s: %s)' % (len(lat[key]), label, p50[key], p95[key], h.get('hits'), h.get('misses'),
                                      h.get('target'), h.get('reason')))
    rows = [('runsc warm p50 (ms)', p50['runsc_warm'], '<=', 10, '%.2f'),
            ('runsc warm p50 / runc warm p50', p50['runsc_warm'] / p50['warm'], '<=', 2, '%.2f'),
            ('runsc cold p50 / %s run --rm (runc) p50' % kind, p50['runsc_cold'] / p50['podman'], '<=', 1,
             '%.3f')]
    if 'runsc_paced_1s' in lat:
        rows.append(('runsc / runc p50, one call a second', p50['runsc_paced_1s'] / p50['paced_1s'], '<=', 2,
                     '%.2f'))
    print('\n%-40s %10s %12s' % ('gVisor target', 'measured', 'target'))
    for name, val, op, want, fmt in rows:
        ok = val <= want if op == '<=' else val >= want
        R['targets'][name] = {'value': val, 'target': op + ' ' + fmt % want, 'pass': ok}
        print('%-40s %10s %12s  %s' % (name, fmt % val, op + ' ' + fmt % want, 'PASS' if ok else 'FAIL'))


if __name__ == '__main__':
    sys.exit(main())
