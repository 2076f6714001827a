#!/usr/bin/python3
"""Bursts: many run_python calls at once, as agents send them in parallel.
See README.md beside this file ("Bursts").

Python 3 standard library only. Prints, per burst size, the first, median,
p95 and last answer of a burst from idle after a warm-up that contains
such bursts, of a burst into a corral that has just started, and of the
engine's own `run --rm` of the same burst; then what the pool learned,
the host memory of its ready sandboxes against pool_memory, and how long
it took to shrink back. Exit 0 whatever the verdicts; 1 when a
measurement itself broke.
"""
import argparse, json, os, re, subprocess, sys, threading, time, urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  the Corral client, engine helpers, machine facts

SIZES = (4, 8, 16)
PACED = 20  # one-shot calls 0.5 s apart after the bursts, and session calls
TODAY_LAST_16_MS = 2031  # the figure for a burst of 16 before the pool learned


def burst(c, n):
    """n run_python calls written back to back on one connection; the
    seconds to each answer, sorted. Each is timed from its own request's
    write (the writes of a burst take microseconds), to its answer as the
    client's reader thread saw it."""
    waits = [(c.send('tools/call', {'name': 'run_python', 'arguments': {'code': bench.CODE}}),
              time.perf_counter()) for _ in range(n)]
    times = []
    for w, t0 in waits:
        msg, secs = w()
        sc = (msg.get('result') or {}).get('structuredContent') or {}
        if sc.get('status') == 'running' and sc.get('job_id'):
            # Still running after sync_wait_s (a loaded host): a job now.
            # Its end is the answer; the log says where the time went.
            c.jobs += 1
            while sc.get('status') == 'running':
                msg, _ = c.request('tools/call', {'name': 'job_result',
                                                  'arguments': {'job_id': sc['job_id'], 'wait_s': 60}})
                sc = (msg.get('result') or {}).get('structuredContent') or {}
            secs = time.perf_counter() - t0
        if sc.get('status') != 'ok' or sc.get('stdout') != '1\n':
            raise bench.Broken('a burst call did not answer ok: %s' % json.dumps(msg)[:400])
        times.append(secs)
    return sorted(times)


WAITED = re.compile(r'sandbox (\S+): the call waited (\d+) ms for its sandbox: (.*)')


def slowest_start(c):
    """From a corral's log: the call that waited longest for a sandbox
    started for it, as (ms, where the wait went), or None."""
    found = []
    with open(c.log.name, errors='replace') as f:
        for line in f:
            m = WAITED.search(line)
            if m:
                found.append((int(m.group(2)), m.group(3).strip()))
    return max(found) if found else None


# Podman 4.3's own race between `run --rm`, conmon and the cleanup: the
# program ran, but the client could not read its exit code (exit 127).
ENGINE_RACE = b'Cannot get exit code'


def engine_burst(engine, kind, n, image):
    """n `run --rm` of the same program at once; seconds to each end. A
    burst hit by the engine's own exit-code race is run again, once, and
    the output says so: it is the baseline, not corral, that failed."""
    cli = ['podman', '--url', engine] if kind == 'podman' else ['docker', '-H', engine]
    argv = cli + ['run', '--rm'] + bench.FLAGS + [image, 'python3', '-c', bench.CODE]
    for attempt in (1, 2):
        out = [None] * n
        t0 = time.perf_counter()

        def one(i):
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out[i] = (time.perf_counter() - t0, p.returncode, p.stdout, p.stderr[-300:])
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = [x for x in out if x[1] != 0 or x[2] != b'1\n']
        if bad and attempt == 1 and all(ENGINE_RACE in x[3] for x in bad):
            print('# %s run: %d of %d hit the engine\'s own exit-code race (%r): the burst is run again'
                  % (cli[0], len(bad), n, bad[0][3][-120:]))
            continue
        for secs, rc, so, se in bad:
            raise bench.Broken('%s run exited %d: %r' % (cli[0], rc, se))
        return sorted(x[0] for x in out)


def wait_quiet(c, timeout=120):
    """Until the pool holds its target, ready, and nothing else runs,
    starts or is being removed; returns the status."""
    deadline = time.monotonic() + timeout
    while True:
        st = c.status()
        p = st['pool']
        if p['ready'] >= p['target'] and p['containers'] == p['ready'] and p['starting'] == 0:
            return st
        if time.monotonic() > deadline:
            raise bench.Broken('the pool did not settle: %s' % json.dumps(p))
        time.sleep(0.05)


def learn_merged(c, n, idle):
    """With memory_merge: until the pool pays for n again (at most until
    10 s before it would forget the demand); the seconds it took.  It
    counts a ready sandbox at its merged cost once the merger has been
    through it twice (and measured one every 10 s); refills made by the
    last burst cost their full size until then."""
    t0 = time.monotonic()
    while c.status()['pool']['target'] < n and time.monotonic() - t0 < idle - 10:
        time.sleep(0.5)
    return time.monotonic() - t0


def ready_memory(engine, corral_pid):
    """Host memory (PSS, kB) of every running container of this corral:
    the monitor above each and everything under it (bench.container_memory)."""
    q = urllib.parse.quote(json.dumps({'label': ['io.corral.pid=%d' % corral_pid],
                                       'status': ['running']}))
    _, found = bench.engine_get(engine, 'GET', '/containers/json?filters=' + q)
    parent = bench.proc_parents()
    total, count = 0, 0
    for ct in found or []:
        m = bench.container_memory(engine, ct['Id'], parent)
        if m is not None:
            total += m['pss_kb']
            count += 1
    return total, count


def row(name, xs):
    return '| %-34s | %7.0f | %7.0f | %7.0f | %7.0f |' % (
        name, xs[0] * 1000, bench.pct(xs, 50), bench.pct(xs, 95), xs[-1] * 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--engine', default=os.environ.get('CORRAL_ENGINE', 'unix:///run/podman/podman.sock'))
    ap.add_argument('--corral', default='build/corral')
    ap.add_argument('--quick', action='store_true', help='one burst of each size (else 3)')
    ap.add_argument('--idle', type=float, help='pool_idle_s of the warm corral (default 20; 60 '
                    'on the data image, whose merged memory takes longer to learn)')
    ap.add_argument('--image', choices=('python', 'data'), default='python',
                    help='the small python image (default) or the data image users get by default, '
                    'with memory_merge on where the host runs its merger')
    ap.add_argument('--json', help='also write every figure here')
    a = ap.parse_args()
    reps = 1 if a.quick else 3
    kind, version = bench.engine_facts(a.engine)
    R = {'machine': bench.machine(a.engine), 'engine': [kind, version], 'bursts': {}}
    data = a.image == 'data'
    if a.idle is None:
        a.idle = 60 if data else 20
    image = bench.DATA_IMAGE if data else bench.IMAGE
    merge = data and bench.ksm_read('run') == 1
    print('# corral burst benchmark: %s %s at %s, image %s%s' % (
        kind, version, a.engine, image, ', memory_merge on' if merge else ''))
    print('# load average at start: %s' % ' '.join(open('/proc/loadavg').read().split()[:3]))
    env = {'CORRAL_IMAGE': image, 'CORRAL_POOL_IDLE_S': '%g' % a.idle,
           'CORRAL_MEMORY_MERGE': 'true' if merge else 'false'}
    R['image'], R['memory_merge'] = image, merge
    left = []

    # Warm: bursts of every size teach the pool; then each size from idle.
    jobs, slow = 0, {}
    c = bench.Corral(a.corral, a.engine, env)
    c.jobs = 0
    try:
        c.initialize()
        wait_quiet(c)
        for n in SIZES + SIZES:
            burst(c, n)
            wait_quiet(c)
        R['merge_learn_s'] = learn_merged(c, max(SIZES), a.idle) if merge else 0
        st = wait_quiet(c)
        pool = st['pool']
        mem_kb, n_ready = ready_memory(a.engine, c.pid)
        R['learned'] = {'target': pool['target'], 'reason': pool['target_reason'],
                        'demand': pool['demand'], 'memory': pool['memory'],
                        'ready': pool['ready'], 'host_pss_kb': mem_kb, 'containers_measured': n_ready}
        warm = {}
        for n in SIZES:
            runs = []
            for _ in range(reps):
                if merge:
                    learn_merged(c, n, a.idle)
                wait_quiet(c)
                runs.append(burst(c, n))
            runs.sort(key=lambda xs: xs[-1])
            warm[n] = runs[len(runs) // 2]  # the burst of median last answer
            R['bursts']['warm_%d' % n] = runs
        # Calls in an open session, then one-shot calls paced 0.5 s apart
        # (the pool has learned 16): what a warm call costs beyond a
        # session's while refills run beside it. The session goes first,
        # its calls are not the pool's. Its calls paced 0.5 s apart too,
        # the measure the one-shots are held to: back to back, every
        # process on the path is running and in cache, which calls half a
        # second apart never find (this VM's idle vCPUs take their time to
        # wake).
        ok = lambda sc: sc.get('status') == 'ok'
        c.tool('run_python', {'code': 'x = 0', 'session': 'paced'}, ok)
        session = [c.tool('run_python', {'code': bench.CODE, 'session': 'paced'}, ok) for _ in range(PACED)]
        session_paced = []
        time.sleep(0.5)  # the first one too
        for i in range(PACED):
            t0 = time.monotonic()
            session_paced.append(c.tool('run_python', {'code': bench.CODE, 'session': 'paced'}, ok))
            time.sleep(max(0.0, 0.5 - (time.monotonic() - t0)))
        c.tool('session_close', {'session': 'paced'}, lambda sc: sc.get('closed') is True)
        if merge:
            learn_merged(c, max(SIZES), a.idle)
        wait_quiet(c)
        paced = []
        for i in range(PACED):
            t0 = time.monotonic()
            paced.append(burst(c, 1)[0])
            if i < PACED - 1:  # the burst below follows at once
                time.sleep(max(0.0, 0.5 - (time.monotonic() - t0)))
        R['paced_0_5s'], R['session'], R['session_paced_0_5s'] = paced, session, session_paced
        # Shrinking back: no call for pool_idle_s after a burst (the 20 s
        # of paced calls above may have outlasted the bursts' demand),
        # timed from its calls, which is where pool_idle_s counts from.
        t0 = time.monotonic()
        burst(c, max(SIZES))
        while True:
            p = c.status()['pool']
            if p['target_reason'] == 'pool_min' and p['ready'] <= p['min'] and \
                    p['containers'] <= p['min']:
                break
            if time.monotonic() - t0 > a.idle * 3 + 30:
                raise bench.Broken('the pool did not shrink back: %s' % json.dumps(p))
            time.sleep(0.5)
        R['shrink_s'] = time.monotonic() - t0
        R['after_shrink'] = {'ready': p['ready'], 'target': p['target'], 'reason': p['target_reason']}
        # At info level a call that waited 5 s or more for its sandbox says why.
        slow['warm'] = slowest_start(c)
        jobs += c.jobs
    finally:
        left += c.close()

    # Cold: a corral that has just started gets the burst at once. Its
    # debug log says where each call's wait for its sandbox went.
    cold = {}
    for n in SIZES:
        c = bench.Corral(a.corral, a.engine, dict(env, CORRAL_LOG_LEVEL='debug'))
        c.jobs = 0
        try:
            c.initialize()
            cold[n] = burst(c, n)
            R['bursts']['cold_%d' % n] = [cold[n]]
            slow[n] = slowest_start(c)
            jobs += c.jobs
        finally:
            left += c.close()

    # The engine's own: `run --rm` of the same burst.
    eng = {n: engine_burst(a.engine, kind, n, image) for n in SIZES}
    for n in SIZES:
        R['bursts']['engine_%d' % n] = [eng[n]]

    print()
    print('| burst (ms from its start)          |   first |  median |     p95 |    last |')
    print('| ---------------------------------- | ------: | ------: | ------: | ------: |')
    for n in SIZES:
        print(row('corral, %d from idle after warm-up' % n, warm[n]))
        print(row('corral, %d into a fresh corral' % n, cold[n]))
        print(row('%s run --rm, %d at once' % (kind, n), eng[n]))
    print()
    print('the call of each corral that waited longest for a sandbox started for it (ms):')
    for key in SIZES + ('warm',):
        what = 'corral after warm-up (calls that waited 5 s or more)' if key == 'warm' \
            else 'fresh corral, burst of %d' % key
        got = slow.get(key)
        print('  %-52s %s' % (what, '%d: %s' % got if got else 'none'))
    R['slowest_start'] = {str(k): v for k, v in slow.items()}
    if jobs:
        print('%d call(s) ran past sync_wait_s and became jobs: counted until their end' % jobs)
    R['jobs'] = jobs
    paced_p50, session_p50 = bench.pct(R['paced_0_5s'], 50), bench.pct(R['session'], 50)
    spaced_p50 = bench.pct(R['session_paced_0_5s'], 50)
    print('one-shot calls 0.5 s apart after the bursts: p50 %.1f ms, p95 %.1f ms; a call in an open '
          'session 0.5 s apart: p50 %.1f ms, back to back: %.1f ms (one-shot %.2fx and %.2fx)' % (
              paced_p50, bench.pct(R['paced_0_5s'], 95), spaced_p50, session_p50,
              paced_p50 / spaced_p50, paced_p50 / session_p50))
    L = R['learned']
    print()
    if merge:
        print('memory_merge: the pool paid for %d after %.1f s of merging' % (L['target'], R['merge_learn_s']))
    print('pool after the warm-up: target %d (%s), demand peak %d, %d ready' % (
        L['target'], L['reason'], L['demand']['peak'], L['ready']))
    m = L['memory']
    print('memory: a ready sandbox costs %.1f MiB (%s, %d processes); budget %.0f MiB fits %d' % (
        m['sandbox_bytes'] / 2**20, 'measured by corral' if m['measured'] else 'corral\'s guess',
        m['sandbox_processes'], m['budget_bytes'] / 2**20, m['fits']))
    print('host memory of the %d ready sandboxes, read here from /proc: %.1f MiB (PSS)' % (
        L['containers_measured'], L['host_pss_kb'] / 1024))
    print('shrank back to pool_min (%d ready, target %d: %s) %.1f s after the last call '
          '(pool_idle_s %g)' % (R['after_shrink']['ready'], R['after_shrink']['target'],
                                R['after_shrink']['reason'], R['shrink_s'], a.idle))
    checks = [
        ('a burst of 8 from idle after warm-up: last answer <= 50 ms', warm[8][-1] * 1000 <= 50,
         '%.0f ms' % (warm[8][-1] * 1000)),
        ('a burst of 16 from idle after warm-up: last answer <= 200 ms', warm[16][-1] * 1000 <= 200,
         '%.0f ms' % (warm[16][-1] * 1000)) if data else
        ('a burst of 16 from idle after warm-up: last answer <= half of %d ms' % TODAY_LAST_16_MS,
         warm[16][-1] * 1000 <= TODAY_LAST_16_MS / 2, '%.0f ms' % (warm[16][-1] * 1000)),
        ('one-shot paced 0.5 s after the bursts: p50 <= 1.5x a session call\'s paced the same',
         paced_p50 <= 1.5 * spaced_p50, '%.1f / %.1f ms = %.2f' % (paced_p50, spaced_p50, paced_p50 / spaced_p50)),
        ('ready sandboxes within pool_memory', L['host_pss_kb'] * 1024 <= m['budget_bytes'],
         '%.1f of %.0f MiB' % (L['host_pss_kb'] / 1024, m['budget_bytes'] / 2**20)),
        ('shrinks back to pool_min after pool_idle_s', R['after_shrink']['reason'] == 'pool_min'
         and a.idle <= R['shrink_s'] <= a.idle * 3 + 30,
         '%.1f s' % R['shrink_s']),
    ]
    print()
    for name, ok, fig in checks:
        print('%s  %s (%s)' % ('PASS' if ok else 'FAIL', name, fig))
    print('# load average at end: %s' % ' '.join(open('/proc/loadavg').read().split()[:3]))
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(R, f, indent=1)
    if left:
        print('BROKEN: containers left behind (removed): %s' % ' '.join(left), file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except bench.Broken as e:
        print('BROKEN: %s' % e, file=sys.stderr)
        sys.exit(1)
