// How corral ends and fails: stdin EOF and SIGTERM with calls running (the
// sandboxes removed, the exit prompt and clean), and an engine that does not
// answer (engine_error with advice; `corral doctor` fails with advice), and
// the files a corral keeps in the runtime directory, gone when it stops.
//
//   node run.mjs lifecycle     (stdin EOF:, SIGTERM:, runtime files:, engine down:)

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BIN, brief, corralContainers, corralEnv, ENGINE, removeContainers, run, startCall, test, waitFor, waitNoContainers, waitPool, withTimeout } from './lib/harness.mjs';

test('stdin EOF: corral removes a running sandbox and its ready ones, and exits promptly', async (t) => {
  const d = await t.daemon('eof');
  const { running } = startCall(d, 'run_python', { code: 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)' },
    { until: /sleeping/, timeoutMs: 90000 });
  // The call runs, and the pool (min 2) holds ready sandboxes beside it.
  const w = await waitPool(t, d, (p) => p.busy >= 1 && p.ready >= 1);
  t.note('status_before_eof', w.s.pool);
  assert.ok(w.done, 'a call is running and a ready sandbox waits');
  const instance = w.s.instance;
  const seen = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.instance=${instance}`);
    return { done: cs.filter((c) => c.state === 'running').length >= 2, cs };
  }, { timeoutMs: 20000 });
  t.note('before_eof', brief(seen.cs));
  assert.ok(seen.done, 'the call\'s container and a ready one are running');
  await withTimeout(running, 30000, 'the call\'s code running');
  const how = await d.close();
  t.note('close', how);
  assert.ok(how.ms < 2000, `corral exited within 2 s of stdin EOF, before the SDK's SIGTERM (took ${how.ms} ms)`);
  assert.equal(how.code, 0, 'corral exited with status 0');
  const gone = await waitNoContainers(`io.corral.instance=${instance}`, { timeoutMs: 10000 });
  t.note('left', brief(gone.cs));
  assert.ok(gone.done, 'no container of the daemon remains');
}, { timeoutMs: 60000 });

test('SIGTERM: corral answers the running call, removes its sandboxes and exits 0', async (t) => {
  const r = t.raw({});
  await r.initialize(0);
  await r.send({ jsonrpc: '2.0', id: 1, method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)' },
      _meta: { progressToken: 'p1' } } });
  const st = await waitFor(async () => {
    const s = await r.status();
    return { done: s.pool.busy >= 1, s };
  }, { timeoutMs: 20000, intervalMs: 250 });
  t.note('status_before_sigterm', st.s);
  assert.ok(st.done, 'sandbox_status shows the call busy');
  const instance = st.s.instance;
  const seen = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.instance=${instance}`);
    return { done: cs.some((c) => c.state === 'running'), cs };
  }, { timeoutMs: 20000 });
  t.note('before_sigterm', brief(seen.cs));
  assert.ok(seen.done, 'the daemon\'s containers are running');
  await r.next((m) => m.method === 'notifications/progress' && /sleeping/.test(m.params?.message ?? ''),
    30000, 'progress saying the code runs');
  const t0 = Date.now();
  r.child.kill('SIGTERM');
  const how = await withTimeout(r.exit, 15000, 'exit after SIGTERM');
  t.note('exit', { ...how, ms: Date.now() - t0 });
  assert.equal(how.code, 0, 'corral exited with status 0 after SIGTERM');
  const res = r.msgs.find((m) => m.id === 1);
  assert.ok(res, 'the running call was answered before exit');
  assert.equal(res.result?.structuredContent?.status, 'cancelled', 'and its status is cancelled');
  const gone = await waitNoContainers(`io.corral.instance=${instance}`, { timeoutMs: 10000 });
  t.note('left', brief(gone.cs));
  assert.ok(gone.done, 'no container of the daemon remains');
}, { timeoutMs: 60000 });

// The files of one corral in the runtime directory (status-PID.json, its
// private Podman's podman-PID.sock and podman-PID.log).
const ownFiles = (dir, pid) => readdirSync(dir).filter((f) => new RegExp(`^(status|podman)-${pid}\\.`).test(f));

test('runtime files: a stopped corral leaves none of its files (host close, with its own Podman when it can start one; after kill -9, the next start removes them)', async (t) => {
  const rt = mkdtempSync(path.join(tmpdir(), 'corral-e2e-rt-'));
  t.defer(() => rmSync(rt, { recursive: true, force: true }));
  const dir = path.join(rt, 'corral');
  // With a Podman engine and no engine socket to find, corral starts a
  // Podman service of its own, and its socket and log go in the runtime
  // directory too.
  const privateOk = /podman/.test(ENGINE) && !['/run/podman/podman.sock', '/var/run/docker.sock', '/run/docker.sock'].some((p) => existsSync(p));
  const d = await t.daemon('files', { XDG_RUNTIME_DIR: rt, HOME: rt, ...(privateOk ? { CORRAL_ENGINE: undefined, CONTAINER_HOST: undefined, DOCKER_HOST: undefined } : {}) });
  const r = await d.call(t, 'run_python', { code: 'print(1)' }, { timeoutMs: 90000 });
  assert.equal(r.structuredContent.status, 'ok', 'a call runs');
  const own = /started a private podman service/.test(d.log);
  t.note('private_podman', own);
  const want = own ? 3 : 1;
  const seen = await waitFor(async () => ({ done: ownFiles(dir, d.pid).length >= want, files: readdirSync(dir) }), { timeoutMs: 10000 });
  t.note('while_running', seen.files);
  assert.ok(seen.done, `its files are there while it runs (${seen.files.join(' ')})`);
  const how = await d.close();
  t.note('close', how);
  assert.deepEqual(ownFiles(dir, d.pid), [], 'after the host\'s close() none of its files is left');

  // kill -9 leaves them; the next corral's start removes them (a killed
  // corral's private Podman left its socket and log: stand-ins here).
  const k = await t.daemon('files-killed', { XDG_RUNTIME_DIR: rt, HOME: rt });
  const kseen = await waitFor(async () => ({ done: ownFiles(dir, k.pid).length >= 1 }), { timeoutMs: 10000 });
  assert.ok(kseen.done, 'the second corral has its status file');
  const proc = k.transport._process;
  const exited = new Promise((res) => proc.once('exit', res));
  proc.kill('SIGKILL');
  await withTimeout(exited, 10000, 'exit after SIGKILL');
  writeFileSync(path.join(dir, `podman-${k.pid}.log`), 'log\n');
  writeFileSync(path.join(dir, `podman-${k.pid}.sock`), '');
  assert.equal(ownFiles(dir, k.pid).length, 3, 'a killed corral leaves its files');
  const next = await t.daemon('files-next', { XDG_RUNTIME_DIR: rt, HOME: rt });
  const swept = await waitFor(async () => ({ done: ownFiles(dir, k.pid).length === 0 }), { timeoutMs: 10000 });
  assert.ok(swept.done, `the next corral removes them (left: ${ownFiles(dir, k.pid).join(' ')})`);
  assert.ok(ownFiles(dir, next.pid).length >= 1, '...and keeps its own');
}, { timeoutMs: 120000 });

// The engine's socket through a proxy that can hold back what corral sends
// (a slow engine): slow(ms) delays every byte from then on, in order.
function slowProxy(dir) {
  const target = ENGINE.replace(/^unix:\/\//, '');
  const sock = path.join(dir, 'slow-engine.sock');
  let delay = 0;
  const conns = new Set();
  const server = net.createServer((c) => {
    const u = net.connect(target);
    conns.add(c).add(u);
    c.on('data', (d) => { if (delay) setTimeout(() => u.write(d), delay); else u.write(d); });
    c.on('end', () => (delay ? setTimeout(() => u.end(), delay) : u.end()));
    u.pipe(c);
    for (const x of [c, u]) x.on('error', () => {});
  });
  return new Promise((resolve) => server.listen(sock, () => resolve({
    url: `unix://${sock}`,
    slow(ms) { delay = ms; },
    close() { server.close(); for (const x of conns) x.destroy(); },
  })));
}

test('runtime files: a host closes stdin, then signals a corral whose engine is slow to remove its sandboxes: it exits before the SIGKILL, its files gone', async (t) => {
  if (!ENGINE.startsWith('unix://')) return t.note('skipped', 'the engine is not on a unix socket');
  const rt = mkdtempSync(path.join(tmpdir(), 'corral-e2e-rt-'));
  const proxy = await slowProxy(rt);
  t.defer(() => { proxy.close(); rmSync(rt, { recursive: true, force: true }); });
  const dir = path.join(rt, 'corral');
  const d = await t.daemon('files-slow', { XDG_RUNTIME_DIR: rt, CORRAL_ENGINE: proxy.url });
  t.defer(async () => {
    const left = await corralContainers(`io.corral.pid=${d.pid}`);
    if (left.length) await removeContainers(left);
  });
  const r = await d.call(t, 'run_python', { code: 'print(1)' }, { timeoutMs: 60000 });
  assert.equal(r.structuredContent.status, 'ok');
  const seen = await waitFor(async () => ({ done: ownFiles(dir, d.pid).length >= 1 }), { timeoutMs: 10000 });
  assert.ok(seen.done, 'its status file is there');
  // Removing its sandboxes now takes 20 s: the SDK's close() sends SIGTERM
  // 2 s after closing stdin, and SIGKILL 2 s after that.
  proxy.slow(20000);
  const how = await d.close();
  t.note('close', how);
  assert.notEqual(how.signal, 'SIGKILL', `corral exited before the SIGKILL (${JSON.stringify(how)})`);
  assert.deepEqual(ownFiles(dir, d.pid), [], 'and left none of its files');
}, { timeoutMs: 90000 });

test('engine down: run_python says engine_error with advice; doctor fails with advice', async (t) => {
  const bad = 'unix:///nonexistent/engine.sock';
  const d = await t.daemon('down', { CORRAL_ENGINE: bad });
  const r = await d.call(t, 'run_python', { code: 'print(1)' }, { timeoutMs: 30000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'engine_error');
  assert.equal(r.isError, true);
  assert.match(sc.error?.message ?? '', /systemctl|podman/i, 'the message says how to start an engine');
  assert.match(r.content[0].text, /systemctl|podman/i, 'so does the text content');
  assert.ok(r.ms < 20000, `engine_error came quickly (${r.ms} ms)`);
  const doc = await run(BIN, ['doctor'], { env: corralEnv({ CORRAL_ENGINE: bad }), timeoutMs: 30000 });
  t.note('doctor', { code: doc.code, signal: doc.signal, stdout: doc.stdout, stderr: doc.stderr });
  assert.notEqual(doc.code, 0, 'corral doctor exits non-zero');
  assert.equal(doc.signal, null, 'corral doctor was not killed');
  assert.match(doc.stdout + doc.stderr, /systemctl|podman/i, 'doctor says how to start an engine');
  // No engine named, none found, no podman to start: `corral run` reports it
  // and exits 125 (this path once freed its sandbox twice).
  const alone = await run(BIN, ['run', '-c', 'print(1)'],
    { env: { HOME: tmpdir(), PATH: '/nonexistent', ASAN_OPTIONS: process.env.ASAN_OPTIONS ?? '' }, timeoutMs: 30000 });
  t.note('run_without_engine', alone);
  assert.equal(alone.signal, null, 'corral run was not killed');
  assert.equal(alone.code, 125, 'corral run exits 125 when no engine answers');
  assert.match(alone.stderr, /no container engine answered/, 'and says no engine answered');
  assert.doesNotMatch(alone.stderr, /Sanitizer|runtime error:/, 'with no sanitizer report');
});
