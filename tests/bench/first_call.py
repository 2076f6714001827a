#!/usr/bin/python3
"""The first call of a new stdio corral: see README.md beside this file,
"The first call".

Python 3 standard library only. Two figures, each against the warm call it
should come close to, measured in the same run:

  cold: a stdio corral that finds no engine socket and no service, so that
        it starts its own Podman service: from the process's start to its
        first `print(1)` result, beside a warm call on that corral once its
        pool is full;
  relay: with a `corral serve` running, a new stdio corral with no settings
        of its own (so that it relays to the service): its first call,
        beside the service's warm call through `corral connect`.

Exit 0 when measured (the verdicts are information), 1 when a measurement
broke, 2 on a usage error.
"""
import argparse, json, os, shutil, socket, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import Broken, engine_facts, leftovers, pct, stop_stdio  # noqa: E402

CODE = 'print(1)'
IMAGE = os.environ.get('CORRAL_IMAGE', 'corral-python:latest')
CALL_TIMEOUT = 120
# What decides which engine a corral finds: none of these may reach it.
ENGINE_VARS = ('CONTAINER_HOST', 'DOCKER_HOST')
SYSTEM_SOCKETS = ('/run/podman/podman.sock', '/var/run/docker.sock')


class Home:
    """A user of our own: HOME, config and runtime directories, empty."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix='corral-first-')
        for d in ('home', 'config', 'run'):
            os.mkdir(os.path.join(self.dir, d), 0o700)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('CORRAL_') and k not in ENGINE_VARS}
        env.update(HOME=os.path.join(self.dir, 'home'), XDG_CONFIG_HOME=os.path.join(self.dir, 'config'),
                   XDG_RUNTIME_DIR=os.path.join(self.dir, 'run'), **extra)
        return env

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Stdio:
    """A corral on a pipe (serve or connect): JSON lines, answers by id, and
    its log lines stamped with the seconds since it started."""

    def __init__(self, binary, args, env):
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([binary] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.pid, self.log, self.answers, self.cv = self.proc.pid, [], {}, threading.Condition()
        self.next_id = 0
        threading.Thread(target=self._out, daemon=True).start()
        threading.Thread(target=self._err, daemon=True).start()

    def _out(self):
        for line in self.proc.stdout:
            t = time.perf_counter()
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if isinstance(m, dict) and isinstance(m.get('id'), int) and ('result' in m or 'error' in m):
                with self.cv:
                    self.answers[m['id']] = (m, t)
                    self.cv.notify_all()
        with self.cv:
            self.answers[None] = None
            self.cv.notify_all()

    def _err(self):
        for line in self.proc.stderr:
            self.log.append('%8.3f %s' % (time.perf_counter() - self.t0,
                                          line.decode(errors='replace').rstrip()))

    def request(self, method, params=None):
        """(answer, seconds from the write to the answer)."""
        self.next_id += 1
        rid = self.next_id
        t = time.perf_counter()
        try:
            self.proc.stdin.write((json.dumps({'jsonrpc': '2.0', 'id': rid, 'method': method,
                                               'params': params or {}}) + '\n').encode())
            self.proc.stdin.flush()
        except OSError:
            pass
        with self.cv:
            self.cv.wait_for(lambda: rid in self.answers or None in self.answers, CALL_TIMEOUT)
            got = self.answers.pop(rid, None)
        if not got:
            raise Broken('%s: no answer from corral %d; its log ends:\n  %s' % (
                method, self.pid, '\n  '.join(self.log[-8:])))
        return got[0], got[1] - t

    def initialize(self):
        m, _ = self.request('initialize', {'protocolVersion': '2025-06-18', 'capabilities': {},
                                           'clientInfo': {'name': 'corral-bench-first', 'version': '1'}})
        if 'result' not in m:
            raise Broken('initialize failed: %s' % json.dumps(m)[:300])
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def run_python(self):
        m, secs = self.request('tools/call', {'name': 'run_python', 'arguments': {'code': CODE}})
        sc = (m.get('result') or {}).get('structuredContent') or {}
        if sc.get('status') != 'ok' or sc.get('stdout') != '1\n':
            raise Broken('run_python did not answer ok: %s' % json.dumps(m)[:400])
        return secs

    def wait_quiet(self, timeout=60):
        """Until the pool has a ready sandbox and every container corral
        holds is a ready one (nothing starting or being removed)."""
        deadline = time.monotonic() + timeout
        while True:
            m, _ = self.request('tools/call', {'name': 'sandbox_status', 'arguments': {}})
            pool = ((m.get('result') or {}).get('structuredContent') or {}).get('pool') or {}
            if pool.get('ready', 0) >= max(pool.get('min', 1), 1) and pool.get('containers') == pool.get('ready'):
                return
            if time.monotonic() > deadline:
                raise Broken('the pool never settled: %s' % json.dumps(pool))
            time.sleep(0.02)

    def said(self, text):
        return [l for l in self.log if text in l]

    def close(self):
        stop_stdio(self.proc)


def wait_socket(path, proc, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Broken('corral serve exited %d before listening' % proc.returncode)
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return
        except OSError:
            time.sleep(0.02)
        finally:
            s.close()
    raise Broken('corral serve did not listen on %s within %d s' % (path, timeout))


def measure_cold(a, R):
    """A stdio corral with no engine socket and no service: start to first result."""
    why = next(('%s exists: a new corral would use it instead of starting its own Podman' % p
                for p in SYSTEM_SOCKETS if os.path.exists(p)), None)
    if not why and not shutil.which('podman'):
        why = 'no podman binary: a corral without an engine socket cannot start its own'
    if why:
        print('  SKIPPED: %s' % why)
        return
    rows = []
    for i in range(a.runs):
        home = Home()
        c = Stdio(a.corral, [], home.env(CORRAL_IMAGE=IMAGE))
        try:
            c.initialize()
            t_init = time.perf_counter() - c.t0
            call = c.run_python()
            first = time.perf_counter() - c.t0
            if not c.said('started a private podman service'):
                raise Broken('the cold corral did not start its own Podman; its log:\n  %s' % '\n  '.join(c.log))
            warm = []
            for _ in range(a.warm):
                c.wait_quiet()
                warm.append(c.run_python())
            rows.append({'initialize_s': t_init, 'first_s': first, 'first_call_s': call,
                         'warm_p50_ms': pct(warm, 50)})
            print('  cold run %d: initialize answered at %.2f s, first result at %.2f s (the call '
                  'itself %.2f s); warm p50 %.1f ms' % (i + 1, t_init, first, call, pct(warm, 50)))
            if a.verbose:
                print('    ' + '\n    '.join(c.log))
        finally:
            c.close()
            home.remove()
    R['cold'] = rows


def measure_relay(a, R):
    """A running service; a new settings-less stdio corral's first call
    against the service's warm call (through `corral connect`)."""
    home = Home()
    svc_env = home.env(CORRAL_ENGINE=a.engine, CORRAL_IMAGE=IMAGE, CORRAL_IMAGES=IMAGE,
                       CORRAL_HOST_SERVERS='false', CORRAL_AUDIT_LOG='off')
    sock = os.path.join(home.dir, 'run', 'corral', 'corral.sock')
    svc = subprocess.Popen([a.corral, 'serve', '--listen', 'unix'], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=svc_env)
    conn, rows = None, []
    try:
        wait_socket(sock, svc)
        conn = Stdio(a.corral, ['connect'], home.env())
        conn.initialize()
        for _ in range(3):  # warm-up: the pool fills, the connection opens
            conn.wait_quiet()
            conn.run_python()
        warm = []
        for i in range(a.runs):
            for _ in range(a.warm):
                conn.wait_quiet()
                warm.append(conn.run_python())
            conn.wait_quiet()
            c = Stdio(a.corral, [], home.env())
            try:
                c.initialize()
                t_init = time.perf_counter() - c.t0
                call = c.run_python()
                first = time.perf_counter() - c.t0
                relayed = bool(c.said('relaying to the corral service'))
                if not relayed and not a.allow_standalone:
                    raise Broken('the new stdio corral did not relay to the service; its log:\n  %s'
                                 % '\n  '.join(c.log))
                rows.append({'initialize_s': t_init, 'first_s': first, 'first_call_ms': call * 1000,
                             'relayed': relayed})
                print('  relay run %d: %s; initialize answered at %.3f s, first call %.1f ms, '
                      'result at %.3f s from start' % (i + 1, 'relayed' if relayed else 'STANDALONE',
                                                        t_init, call * 1000, first))
            finally:
                c.close()
        R['relay'] = {'runs': rows, 'service_warm_ms': [round(1000 * x, 3) for x in warm]}
    finally:
        if conn:
            conn.close()
        svc.terminate()
        try:
            svc.wait(60)
        except subprocess.TimeoutExpired:
            svc.kill()
            svc.wait()
        gone = leftovers(a.engine, svc.pid)
        home.remove()
        if gone:
            raise Broken('the service left containers behind (removed now): %s' % ' '.join(gone))


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def main():
    ap = argparse.ArgumentParser(description='The first call of a new stdio corral.')
    ap.add_argument('--engine', default=os.environ.get('CORRAL_ENGINE', 'unix:///run/podman/podman.sock'),
                    help="the service's engine (the cold corral starts its own Podman)")
    ap.add_argument('--corral', default=os.path.join(HERE, '..', '..', 'build', 'corral'))
    ap.add_argument('--runs', type=int, default=3, help='new corrals per figure (default 3)')
    ap.add_argument('--warm', type=int, default=5, help='warm calls per run (default 5)')
    ap.add_argument('--only', choices=('cold', 'relay'), help='measure one figure')
    ap.add_argument('--allow-standalone', action='store_true',
                    help='measure the second figure even when the new corral does not relay')
    ap.add_argument('--verbose', action='store_true', help="print the cold corrals' logs, stamped")
    ap.add_argument('--json', metavar='FILE', help='also write the figures as JSON')
    a = ap.parse_args()
    a.corral = os.path.abspath(a.corral)
    if not os.access(a.corral, os.X_OK):
        print('no corral binary at %s (build it, or pass --corral)' % a.corral, file=sys.stderr)
        return 2
    R = {'image': IMAGE, 'loadavg_start': os.getloadavg()[0], 'nproc': os.cpu_count()}
    print('corral first-call benchmark: image %s, nproc %d, load %.2f at start'
          % (IMAGE, R['nproc'], R['loadavg_start']))
    try:
        if a.only != 'relay':
            print('no engine socket, no service (the corral starts its own Podman):')
            measure_cold(a, R)
        if a.only != 'cold':
            kind, version = engine_facts(a.engine)
            print('a running service (%s %s at %s), a new stdio corral with no settings:'
                  % (kind, version, a.engine))
            measure_relay(a, R)
    except (Broken, OSError) as e:
        print('\nBROKEN: %s' % e, file=sys.stderr)
        return 1
    R['loadavg_end'] = os.getloadavg()[0]
    print()
    if 'cold' in R:
        first = median([r['first_s'] for r in R['cold']])
        warm = median([r['warm_p50_ms'] for r in R['cold']])
        print('cold start to first result: %.2f s (median of %d), warm call on that corral: %.1f ms'
              ' (%.0fx)' % (first, len(R['cold']), warm, first * 1000 / warm))
    if 'relay' in R:
        rr = R['relay']
        firsts = [r['first_call_ms'] for r in rr['runs']]
        warm = pct([x / 1000 for x in rr['service_warm_ms']], 50)
        ratio = median(firsts) / warm
        print("relayed first call: %.1f ms (median of %d), the service's warm call: %.1f ms p50:"
              ' %.2fx, target within 2x: %s' % (median(firsts), len(firsts), warm, ratio,
                                               'PASS' if ratio <= 2 else 'MISSED'))
        print('  (from process start to that first result: %.0f ms median)'
              % (1000 * median([r['first_s'] for r in rr['runs']])))
        rr['ratio'] = ratio
    print('load: %.2f at end' % R['loadavg_end'])
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(R, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
