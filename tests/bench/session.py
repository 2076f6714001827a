#!/usr/bin/python3
"""Hibernation: how long a session takes to be saved to the store and to
come back, and what it costs on disk, against the size of its state. See
README.md beside this file ("Hibernation").

Python 3 standard library only. For DataFrames of 10,000, 100,000 and
1,000,000 rows (and a fitted model) in a session of the data image, on one
corral: the state's size in memory, the save's time and stored bytes
(session_save, which hibernates it now: the same save as an idle one), the
resume's time (session.resume_ms) and the whole call's; then the issue's
targets for the 1,000,000-row session. --quick: that session alone (what
tests/run runs). CRIU is reported as unavailable where `criu check`
fails. Exit 0 whatever the verdicts; 1 when a measurement itself broke.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  the Corral client, engine helpers, machine facts

ROWS = (10_000, 100_000, 1_000_000)
SETUP = '''import numpy as np, pandas as pd
from sklearn.linear_model import LinearRegression
rng = np.random.default_rng(3)
df = pd.DataFrame({"a": rng.random(%d), "b": rng.integers(0, 100, %d), "c": rng.choice(["x", "y", "z"], %d)})
model = LinearRegression().fit(df[["a"]].values[:1000], df["a"].values[:1000] * 2 + 1)
print(int(df.memory_usage(deep=True).sum()))'''
CHECK = 'print(df.shape[0], round(float(model.predict([[0.5]])[0]), 3))'


def call(c, code, session):
    msg, secs = c.request('tools/call', {'name': 'run_python', 'arguments': {
        'code': code, 'session': session, 'timeout_s': 300}})
    sc = (msg.get('result') or {}).get('structuredContent') or {}
    if sc.get('status') != 'ok':
        raise bench.Broken('%s: %s' % (session, json.dumps(sc)[:400]))
    return sc, secs


def hibernate(c, session):
    msg, _ = c.request('tools/call', {'name': 'session_save', 'arguments': {'session': session}})
    sc = (msg.get('result') or {}).get('structuredContent') or {}
    if sc.get('state') != 'hibernated' or not sc.get('stored_bytes'):
        raise bench.Broken('%s was not hibernated: %s' % (session, json.dumps(msg)[:400]))
    return sc


def criu_state():
    if not shutil.which('criu'):
        return 'criu is not installed'
    r = subprocess.run(['criu', 'check'], capture_output=True, text=True)
    return 'criu check passes' if r.returncode == 0 else 'criu check fails: %s' % (
        (r.stderr or r.stdout).strip().splitlines() or ['?'])[-1][:160]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--engine', default=os.environ.get('CORRAL_ENGINE', 'unix:///run/podman/podman.sock'))
    ap.add_argument('--corral', default='build/corral')
    ap.add_argument('--runtime', choices=('runc', 'runsc'), default='runc')
    ap.add_argument('--quick', action='store_true', help='the 1,000,000-row session alone')
    a = ap.parse_args()
    store = tempfile.mkdtemp(prefix='corral-bench-store-')
    env = {'CORRAL_IMAGE': bench.DATA_IMAGE, 'CORRAL_SESSION_STORE': store, 'CORRAL_POOL_MIN': '1'}
    if a.runtime == 'runsc':
        env['CORRAL_RUNTIME'] = 'runsc'
    print('# corral hibernation benchmark: %s, image %s, runtime %s' % (a.engine, bench.DATA_IMAGE, a.runtime))
    rows, leaked = [], []
    c = bench.Corral(a.corral, a.engine, env)
    try:
        c.initialize()
        for n in ROWS[-1:] if a.quick else ROWS:
            name = 'rows%d' % n
            sc, _ = call(c, SETUP % (n, n, n), name)
            in_memory = int(sc['stdout'])
            listed = hibernate(c, name)
            save = listed.get('save_ms')
            c.wait_ready(quiet=True)
            sc, secs = call(c, CHECK, name)
            s = sc.get('session') or {}
            if s.get('state') != 'resumed' or sc.get('stdout') != '%d 2.0\n' % n:
                raise bench.Broken('%s did not come back: %s' % (name, json.dumps(sc)[:400]))
            rows.append({'rows': n, 'memory': in_memory, 'stored': listed.get('stored_bytes'),
                         'save_ms': save, 'resume_ms': s.get('resume_ms'), 'call_ms': secs * 1000})
            c.request('tools/call', {'name': 'session_close', 'arguments': {'session': name}})
    except bench.Broken as e:
        print('BROKEN: %s' % e)
        leaked = c.close()
        shutil.rmtree(store, ignore_errors=True)
        return 1
    leaked = c.close()
    shutil.rmtree(store, ignore_errors=True)
    print('\n| rows | state in memory | stored | hibernate | resume | the resuming call |')
    print('| ---: | ---: | ---: | ---: | ---: | ---: |')
    for r in rows:
        print('| {rows:,} | {m:.1f} MiB | {s:.1f} MiB ({pct:.0f}%) | {h} ms | {resume_ms} ms | {call_ms:.0f} ms |'.format(
            m=r['memory'] / 2**20, s=(r['stored'] or 0) / 2**20,
            pct=100.0 * (r['stored'] or 0) / max(r['memory'], 1),
            h=r['save_ms'] if r['save_ms'] is not None else '?', **r))
    print('\npickle (inside the sandbox) is what corral uses; CRIU: %s' % criu_state())
    big = rows[-1]
    checks = [('resume of the 1,000,000-row session <= 2 s', big['resume_ms'] <= 2000, '%d ms' % big['resume_ms']),
              ('hibernate of the 1,000,000-row session <= 2 s', big['save_ms'] is not None and big['save_ms'] <= 2000,
               '%s ms' % big['save_ms'])]
    print()
    for label, good, got in checks:
        print('%s  %s (%s)' % ('PASS' if good else 'FAIL', label, got))
    if leaked:
        print('# removed %d container(s) corral left' % len(leaked))
    return 0


if __name__ == '__main__':
    sys.exit(main())
