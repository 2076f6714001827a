#!/usr/bin/python3
"""corral in a container against corral on the host: warm latency on one
engine, in one run. See README.md beside this file ("corral in a
container").

Python 3 standard library only. Starts two stdio corrals on the same
engine: the host binary, and the image corral:latest as an MCP host starts
it (`docker run -i --rm -v SOCKET:/var/run/docker.sock corral:latest`, or
`podman run ...` with `/run/podman/podman.sock`).
Both use the same sandbox image and pool settings. It times each one's
start (to its answer to initialize), then alternates warm print(1) calls
between them, each after its pool is full and quiet, and prints p50 and
p95 of both, the difference, and the target (container p50 within 1 ms of
the host's). --quick: fewer calls (what tests/run runs). Exit 0 whatever
the verdict; 1 when a measurement itself broke.
"""
import argparse, json, os, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  the Corral client, engine helpers, machine facts


class ContainerCorral(bench.Corral):
    """The same client, talking to `ENGINE-CLI run -i --rm ... corral:latest`."""

    def __init__(self, argv, engine):
        self.cfgdir = tempfile.TemporaryDirectory(prefix='corral-bench-')
        self.log = tempfile.NamedTemporaryFile(prefix='corral-bench-', suffix='.log', delete=False)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log)
        self.pid, self.engine, self.closed = self.proc.pid, engine, False
        self.next_id, self.pending, self.lock = 0, {}, threading.Lock()
        threading.Thread(target=self._reader, daemon=True).start()

    def close(self, keep_log=False):
        # Its sandboxes are labelled with pid 1 of its own namespace: what it
        # leaves is checked by name below, not by bench.leftovers.
        if self.closed:
            return []
        self.closed = True
        bench.stop_stdio(self.proc)
        self.cfgdir.cleanup()
        if not keep_log:
            os.unlink(self.log.name)
        return []


def engine_kind(url):
    _, v = bench.engine_get(url, 'GET', '/version')
    names = ' '.join(c.get('Name', '') for c in (v or {}).get('Components') or [])
    return 'podman' if 'Podman' in names else 'docker'


def container_argv(url, kind, image, name):
    sock = url[len('unix://'):]
    if kind == 'podman':
        return ['podman', '--url', url, 'run', '-i', '--rm', '--name', name,
                '-v', sock + ':/run/podman/podman.sock', '-e', 'CORRAL_IMAGE=' + image, 'corral:latest']
    return ['docker', '-H', url, 'run', '-i', '--rm', '--name', name,
            '-v', sock + ':/var/run/docker.sock', '-e', 'CORRAL_IMAGE=' + image, 'corral:latest']


ECHO = 'import sys\nfor line in sys.stdin: sys.stdout.write(line); sys.stdout.flush()'


def relay_p50(argv, n):
    """p50 (ms) of one line's round trip through a line echo started by argv:
    the floor that an engine's stdio relay (`run -i`) puts under every call."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        lat = []
        for i in range(n + 3):
            t0 = time.perf_counter()
            p.stdin.write(b'{"jsonrpc":"2.0","id":%d}\n' % i)
            p.stdin.flush()
            if not p.stdout.readline():
                raise bench.Broken('the echo of %s ended' % argv[0])
            if i >= 3:
                lat.append(time.perf_counter() - t0)
        return bench.pct(lat, 50)
    finally:
        p.stdin.close()
        p.wait(30)


def started(c):
    t0 = time.perf_counter()
    c.initialize()
    return (time.perf_counter() - t0) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--engine', default=os.environ.get('CORRAL_ENGINE', 'unix:///run/podman/podman.sock'))
    ap.add_argument('--corral', default='build/corral')
    ap.add_argument('--calls', type=int, default=60)
    ap.add_argument('--quick', action='store_true', help='20 calls each')
    a = ap.parse_args()
    n = 20 if a.quick else a.calls
    if not a.engine.startswith('unix://'):
        print('container.py: the engine must be a unix socket to mount into corral\'s container')
        return 1
    kind = engine_kind(a.engine)
    if bench.engine_get(a.engine, 'GET', '/images/corral:latest/json')[0] != 200:
        print('container.py: no corral:latest on %s (`corral image build --profile corral`)' % a.engine)
        return 1
    print('# corral in a container against corral on the host: %s (%s), sandbox image %s, %d warm calls each'
          % (a.engine, kind, bench.IMAGE, n))
    name = 'corral-bench-%d' % os.getpid()
    host = bench.Corral(a.corral, a.engine, {'CORRAL_IMAGE': bench.IMAGE})
    boxed = ContainerCorral(container_argv(a.engine, kind, bench.IMAGE, name), a.engine)
    try:
        start = {'host': started(host), 'container': started(boxed)}
        lat = {'host': [], 'container': []}
        for _ in range(n):
            for label, c in (('host', host), ('container', boxed)):
                c.wait_ready(quiet=True)
                lat[label].append(c.run_python())
        cli = ['podman', '--url', a.engine] if kind == 'podman' else ['docker', '-H', a.engine]
        relay = {'host': relay_p50(['/usr/bin/python3', '-u', '-c', ECHO], n),
                 'container': relay_p50(cli + ['run', '-i', '--rm', '--network', 'none', bench.IMAGE,
                                               'python3', '-u', '-c', ECHO], n)}
    except bench.Broken as e:
        print('container.py: broken: %s' % e)
        print('host corral: %s' % host.tail())
        print('corral in a container: %s' % boxed.tail())
        return 1
    finally:
        host.close()
        boxed.close()
        subprocess.run([('podman' if kind == 'podman' else 'docker'),
                        '--url' if kind == 'podman' else '-H', a.engine, 'rm', '-f', name],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    for label in ('host', 'container'):
        rows.append((label, start[label], bench.pct(lat[label], 50), bench.pct(lat[label], 95)))
    print('%-10s %14s %10s %10s' % ('corral', 'start (init)', 'warm p50', 'warm p95'))
    for label, s, p50, p95 in rows:
        print('%-10s %11.1f ms %7.2f ms %7.2f ms' % (label, s, p50, p95))
    diff = rows[1][2] - rows[0][2]
    print('container p50 - host p50: %+.2f ms (ratio %.2f)' % (diff, rows[1][2] / rows[0][2]))
    print('of which the engine\'s stdio relay (a line echoed by python3 under `run -i` against '
          'one on the host): %+.2f ms (%.2f against %.2f ms)'
          % (relay['container'] - relay['host'], relay['container'], relay['host']))
    print('target: container warm p50 within 1 ms of the host\'s: %s' % ('PASS' if diff <= 1.0 else 'FAIL'))
    print(json.dumps({'engine': kind, 'calls': n, 'start_ms': start, 'relay_p50_ms': relay,
                      'p50_ms': {r[0]: round(r[2], 3) for r in rows},
                      'p95_ms': {r[0]: round(r[3], 3) for r in rows}}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
