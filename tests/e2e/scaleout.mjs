#!/usr/bin/env node
// Past one machine, with hosts that fail: three corral services, each in a
// network namespace of its own, behind HAProxy with the shipped
// contrib/haproxy/corral.cfg, and SDK clients (streamable HTTP, with the
// token) through it. Prints TAP version 13 and the figures as comments.
//
//   CORRAL_ENGINE=unix:///run/corral-dev/podman.sock node scaleout.mjs   (as root)
//
// What it shows:
//   - haproxy -c accepts the shipped configuration;
//   - new MCP sessions spread over the three hosts, every later request of
//     a session reaches the host that holds it;
//   - one host SIGKILLed while every client keeps calling: its clients get
//     a clear error (404, no such MCP session) for the lost work, open new
//     sessions and land on the live hosts; no client of another host sees an
//     error or loses its sandbox session's file; once restarted, the killed
//     host's next corral removes every container the dead one left;
//   - one host drained (SIGTERM): a call running there finishes, new
//     sessions go elsewhere at once, its clients move, it stops with none
//     of its containers left; the other clients notice nothing; a named
//     client's session there is saved to the store the hosts share, and
//     resumed on another host by that client's next call.
//
// Environment: CORRAL_ENGINE (required), CORRAL_BIN, CORRAL_IMAGE,
// E2E_VERBOSE=1. Exit status: 0 passed, 1 failed, 77 skipped (not root, no
// haproxy or ip).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Cluster, HAPROXY_CFG, clusterMissing, engineGetter } from './lib/cluster.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ENGINE = process.env.CORRAL_ENGINE;
const BIN = path.resolve(HERE, process.env.CORRAL_BIN || '../../build/corral');
const IMAGE = process.env.CORRAL_IMAGE || 'corral-python:latest';
const VERBOSE = process.env.E2E_VERBOSE === '1';
const CLIENTS = 9;
const out = (line) => process.stdout.write(line + '\n');
const note = (line) => out(`# ${line}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const withTimeout = (p, ms, what) => {
  let timer;
  return Promise.race([p, new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: none within ${ms} ms`)), ms); })])
    .finally(() => clearTimeout(timer));
};

const missing = !ENGINE ? 'CORRAL_ENGINE is not set' : clusterMissing();
if (missing) {
  out(`TAP version 13\n1..0 # SKIP ${missing}`);
  process.exit(77);
}

// One client of the cluster: an MCP session through the balancer, which
// host answered it (X-Corral-Server, set by the balancer), and a sandbox
// session holding a file whose content only this client knows. On an
// error it records what it saw and opens a new MCP session.
class Worker {
  constructor(cluster, id) {
    this.cluster = cluster;
    this.id = id;
    this.host = null;
    this.hosts = [];
    this.ok = 0;
    this.oks = [];     // [time, host] of each answered call
    this.errors = [];  // { t, host, msg }
    this.lost = [];    // a file that came back wrong
    this.n = 0;
  }

  async open() {
    const { served, options } = this.cluster.clientOptions();
    const c = new Client({ name: `worker-${this.id}`, version: '1' });
    c.onerror = () => {};
    await c.connect(new StreamableHTTPClientTransport(this.cluster.url, options));
    this.client = c;
    this.served = served;
    this.host = served.host;
    this.hosts.push(this.host);
    this.secret = `worker ${this.id} on ${this.host} at ${Date.now()}`;
    const w = await c.callTool({ name: 'write_file', arguments: { session: 'w', path: 'state.txt', content: this.secret } },
      CallToolResultSchema, { timeout: 60000 });
    if (w.isError) throw new Error(`write_file: ${JSON.stringify(w).slice(0, 300)}`);
  }

  // Ends the MCP session (DELETE: its host closes its sandbox session);
  // one whose host is gone answers 404 elsewhere, which is fine here.
  async drop() {
    const c = this.client;
    this.client = null;
    if (!c) return;
    await c.transport?.terminateSession().catch(() => {});
    await c.close().catch(() => {});
  }

  // One step: a call that must print its number, and every third step the
  // session's file, which must be what was written.
  async step() {
    const k = ++this.n;
    const r = await this.client.callTool({ name: 'run_python', arguments: { code: `print(${k})` } },
      CallToolResultSchema, { timeout: 60000 });
    if (r.structuredContent?.status !== 'ok' || r.structuredContent.stdout !== `${k}\n`)
      throw new Error(`call ${k} answered ${JSON.stringify(r).slice(0, 300)}`);
    if (this.served.host !== this.host) throw new Error(`session of ${this.host} answered by ${this.served.host}`);
    if (k % 3 === 0) {
      const f = await this.client.callTool({ name: 'read_file', arguments: { session: 'w', path: 'state.txt' } },
        CallToolResultSchema, { timeout: 60000 });
      if (!JSON.stringify(f).includes(this.secret)) {
        this.lost.push({ t: Date.now(), host: this.host, got: JSON.stringify(f).slice(0, 200) });
        throw new Error(`the session's file came back wrong: ${JSON.stringify(f).slice(0, 200)}`);
      }
    }
    this.ok++;
    this.oks.push([Date.now(), this.host]);
  }

  // Steps until stop(); an error is recorded, then a new session (tried
  // until one opens).
  async run() {
    this.running = true;
    while (this.running) {
      if (this.pauseReq) {
        this.pauseReq();
        await this.resumed;
      }
      try {
        if (!this.client) await this.open();
        await this.step();
      } catch (e) {
        this.errors.push({ t: Date.now(), host: this.host, msg: String(e && e.message || e).slice(0, 300) });
        await this.drop();
        await sleep(100);
      }
      await sleep(30);
    }
  }

  // Holds run() between steps (so that the test may use the client), and
  // lets it go on.
  pause() {
    this.resumed = new Promise((r) => { this.resume = () => { this.pauseReq = null; r(); }; });
    return new Promise((r) => { this.pauseReq = r; });
  }

  // The first answered call after t on a host other than notHost.
  firstOkAfter(t, notHost = null) {
    const hit = this.oks.find(([at, host]) => at > t && host !== notHost);
    return hit ? hit : null;
  }
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
const counts = (ws) => ws.reduce((m, w) => ({ ...m, [w.host]: (m[w.host] || 0) + 1 }), {});

test('haproxy -c accepts contrib/haproxy/corral.cfg', async (cl) => {
  const outp = execFileSync('haproxy', ['-c', '-f', HAPROXY_CFG], { env: cl.lbEnv, stdio: ['ignore', 'pipe', 'pipe'] }).toString();
  assert.match(outp, /Configuration file is valid/);
});

test('new MCP sessions spread over the three hosts; each session stays on its host', async (cl, ctx) => {
  ctx.workers = [];
  for (let i = 0; i < CLIENTS; i++) {
    const w = new Worker(cl, i);
    await w.open();
    ctx.workers.push(w);
  }
  const spread = counts(ctx.workers);
  note(`sessions per host after ${CLIENTS} opened: ${JSON.stringify(spread)}`);
  // leastconn counts connections, and each session holds one for its GET
  // stream: the sessions spread, though not always three a host.
  for (const h of cl.hosts) {
    const n = spread[h.name] || 0;
    assert.ok(n >= 1 && n <= CLIENTS - 3, `${h.name} got ${n} of ${CLIENTS} sessions: ${JSON.stringify(spread)}`);
  }
  // Every step checks that the answer came from the session's host.
  for (const w of ctx.workers) for (let i = 0; i < 3; i++) await w.step();
  ctx.runs = ctx.workers.map((w) => w.run());
  await sleep(2000);
  for (const w of ctx.workers) assert.deepEqual(w.errors, [], `worker ${w.id} before any failure`);
});

test('a host SIGKILLed mid-run: its clients get a clear error and move; no other client notices; nothing left behind once it restarts', async (cl, ctx) => {
  const victim = cl.hosts[1];
  const hit = ctx.workers.filter((w) => w.host === victim.name);
  const others = ctx.workers.filter((w) => w.host !== victim.name);
  assert.ok(hit.length > 0, 'no session on the host to kill');
  const okBefore = ctx.workers.reduce((n, w) => n + w.ok, 0);
  const tKill = Date.now();
  const oldPid = victim.proc.pid;
  await cl.kill(1, 'SIGKILL');
  // Clients keep going: the balancer finds the host down (two failed
  // checks), the hit clients open new sessions elsewhere.
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline && hit.some((w) => !w.firstOkAfter(tKill, victim.name))) await sleep(100);
  await sleep(1500);
  const during = ctx.workers.reduce((n, w) => n + w.oks.filter(([t]) => t > tKill && t < tKill + 5000).length, 0);
  const recover = hit.map((w) => (w.firstOkAfter(tKill, victim.name)?.[0] ?? Infinity) - tKill);
  const noticed = hit.map((w) => (w.errors.find((e) => e.t > tKill)?.t ?? Infinity) - tKill);
  note(`SIGKILL of ${victim.name} (pid ${oldPid}): ${hit.length} client(s) on it, ${others.length} elsewhere; ${okBefore} calls answered before`);
  note(`calls answered in the 5 s after the kill: ${during}; affected clients got their error after ${noticed.map((ms) => `${ms} ms`).join(', ')} and answered again (new session, sandbox session and file remade) after ${recover.map((ms) => `${ms} ms`).join(', ')}`);
  note(`first error each affected client saw: ${JSON.stringify(hit.map((w) => w.errors[0]?.msg.slice(0, 160)))}`);
  note(`sessions per host now: ${JSON.stringify(counts(ctx.workers))}`);
  for (const w of hit) {
    assert.ok(w.errors.length >= 1, `worker ${w.id} on the dead host saw no error`);
    assert.match(w.errors[0].msg, /404|no such MCP session|initialize a new one/, `worker ${w.id}: ${w.errors[0].msg}`);
    assert.notEqual(w.host, victim.name, `worker ${w.id} is still on the dead host`);
    assert.ok(Number.isFinite(recover[hit.indexOf(w)]), `worker ${w.id} never answered again`);
  }
  for (const w of others) {
    assert.deepEqual(w.errors, [], `worker ${w.id} on ${w.host} noticed the kill`);
    assert.deepEqual(w.lost, []);
  }
  assert.ok(during > 0, 'no call answered while a host was dead');
  // The dead corral's containers: they exit when their stdin closes; the
  // next corral on that host removes them.
  const get = engineGetter(ENGINE);
  const left = await cl.containersOf(1, get);
  note(`containers the killed corral left on the engine: ${left}`);
  await cl.startHost(1);
  const t0 = Date.now();
  let now = left;
  while (now > 0 && Date.now() - t0 < 30000) {
    await sleep(250);
    now = await Cluster.containersOfPid(oldPid, get);
  }
  note(`after the restart: ${now} left, swept in ${Date.now() - t0} ms`);
  assert.equal(now, 0, 'containers of the killed corral left after its host restarted');
  await cl.waitStates({ [victim.name]: 'UP' });
});

test('a host drained (SIGTERM): a running call finishes, new sessions go elsewhere, its clients move, none of its containers stay; a named client\'s session there is resumed on another host', async (cl, ctx) => {
  const host = cl.hosts[2];
  const i = 2;
  let hit = ctx.workers.filter((w) => w.host === host.name);
  assert.ok(hit.length > 0, `no client on ${host.name}`);
  // A named client with a session there (named clients' sessions are
  // saved when their host stops): MCP sessions opened until one lands on
  // it, the others held open meanwhile (the balancer picks the host with
  // the fewest connections).
  let keeper = null;
  let keeperName = null;
  const tries = [];
  for (let k = 0; k < 30 && !keeper; k++) {
    const { served, options } = cl.clientOptions(`keeper-${k}`);
    const c = new Client({ name: `keeper-${k}`, version: '1' });
    c.onerror = () => {};
    await c.connect(new StreamableHTTPClientTransport(cl.url, options));
    if (served.host === host.name) {
      keeper = c;
      keeperName = `keeper-${k}`;
    } else {
      tries.push(c);
    }
  }
  for (const c of tries) {
    await c.transport?.terminateSession().catch(() => {});
    await c.close().catch(() => {});
  }
  assert.ok(keeper, `no named client landed on ${host.name}`);
  const secret = `kept on ${host.name} at ${Date.now()}`;
  const set = await keeper.callTool({ name: 'run_python', arguments: { session: 'notebook', code: `secret = ${JSON.stringify(secret)}` } },
    CallToolResultSchema, { timeout: 60000 });
  assert.equal(set.structuredContent?.status, 'ok', JSON.stringify(set).slice(0, 300));
  await keeper.close().catch(() => {});
  // One of its clients, held between steps, runs a 2 s call there.
  const own = hit[0];
  await own.pause();
  // Its code runs (its first output comes as progress) before the host
  // is told to stop: the drain must let it finish.
  let started;
  const begun = new Promise((res) => { started = res; });
  const running = own.client.callTool({ name: 'run_python', arguments: { code: 'import time; print("started", flush=True); time.sleep(2); print("done")' } },
    CallToolResultSchema, { timeout: 60000, onprogress: (e) => { if (/started/.test(e.message ?? '')) started(); } });
  await withTimeout(begun, 30000, 'the 2 s call running on the host');
  hit = ctx.workers.filter((w) => w.host === host.name);
  const others = ctx.workers.filter((w) => w.host !== host.name);
  const errsBefore = new Map(others.map((w) => [w, w.errors.length]));
  const tTerm = Date.now();
  host.proc.kill('SIGTERM');
  const down = cl.waitStates({ [host.name]: 'DOWN' }, 15000).then(() => Date.now() - tTerm);
  // New sessions at once: none on the drained host (a 503 from it is
  // retried elsewhere by the balancer).
  const fresh = [];
  for (let k = 0; k < 4; k++) {
    const w = new Worker(cl, 200 + k);
    await w.open();
    fresh.push(w.host);
    await w.drop();
  }
  const r = await running;
  const tDone = Date.now();
  own.resume();
  const ended = await host.exited;
  const tExit = Date.now();
  while (hit.some((w) => !w.firstOkAfter(tTerm, host.name)) && Date.now() - tTerm < 30000) await sleep(100);
  await sleep(1000);
  const moved = hit.filter((w) => w !== own);
  note(`SIGTERM of ${host.name}: the balancer took it out after ${await down} ms; the running call answered ${tDone - tTerm} ms after, the host exited after ${tExit - tTerm} ms (${JSON.stringify(ended)})`);
  note(`new sessions during the drain went to ${JSON.stringify(fresh)}; ${moved.length} other client(s) moved, answered again on another host after ${moved.map((w) => `${(w.firstOkAfter(tTerm, host.name)?.[0] ?? Infinity) - tTerm} ms`).join(', ')}`);
  assert.equal(r.structuredContent?.status, 'ok', JSON.stringify(r).slice(0, 300));
  assert.match(r.structuredContent.stdout, /done/);
  assert.ok(!fresh.includes(host.name), `a new session landed on the draining host: ${fresh}`);
  assert.equal(ended.code, 0, host.log.slice(-1500));
  assert.match(host.log, /stopping \(drained\)/);
  for (const w of hit) assert.notEqual(w.host, host.name, `worker ${w.id} is still on the drained host`);
  for (const w of others) assert.equal(w.errors.length, errsBefore.get(w), `worker ${w.id} on ${w.host} noticed the drain: ${JSON.stringify(w.errors.slice(-1))}`);
  assert.equal(await cl.containersOf(i, engineGetter(ENGINE)), 0, 'containers of the drained corral are left');
  // The named client's session was saved as the host stopped; its next
  // call, through the balancer to a live host, resumes it there.
  assert.match(host.log, /session notebook: saved as corral stopped/);
  const { served, options } = cl.clientOptions(keeperName);
  const back = new Client({ name: keeperName, version: '1' });
  back.onerror = () => {};
  await back.connect(new StreamableHTTPClientTransport(cl.url, options));
  try {
    const r2 = await back.callTool({ name: 'run_python', arguments: { session: 'notebook', code: 'print(secret)' } },
      CallToolResultSchema, { timeout: 60000 });
    note(`the drained host's named session resumed on ${served.host} in ${r2.structuredContent?.session?.resume_ms} ms`);
    assert.notEqual(served.host, host.name);
    assert.equal(r2.structuredContent?.stdout, `${secret}\n`, JSON.stringify(r2).slice(0, 300));
    assert.equal(r2.structuredContent.session.state, 'resumed');
    await back.callTool({ name: 'session_close', arguments: { session: 'notebook' } });
  } finally {
    await back.close().catch(() => {});
  }
});

test('after both failures: every client answered, no session file lost', async (cl, ctx) => {
  // Each client answers again on the hosts that are left.
  const t = Date.now();
  const deadline = t + 30000;
  while (ctx.workers.some((w) => !w.firstOkAfter(t)) && Date.now() < deadline) await sleep(200);
  for (const w of ctx.workers) w.running = false;
  await Promise.all(ctx.runs);
  const total = ctx.workers.reduce((n, w) => n + w.ok, 0);
  const errors = ctx.workers.reduce((n, w) => n + w.errors.length, 0);
  note(`${total} calls answered over the run, ${errors} error(s), all on the clients of the failed hosts; final spread ${JSON.stringify(counts(ctx.workers))}`);
  for (const w of ctx.workers) {
    assert.deepEqual(w.lost, [], `worker ${w.id}`);
    assert.ok(w.firstOkAfter(t), `worker ${w.id} answered no call at the end (${w.ok} in all; last error ${JSON.stringify(w.errors.slice(-1))})`);
  }
  for (const w of ctx.workers) await w.drop();
});

// ------------------------------------------------------------------- main

out('TAP version 13');
out(`1..${tests.length}`);
// The hosts share one session store, as the HAProxy recipe says.
const STORE = mkdtempSync(path.join(tmpdir(), 'corral-store-'));
const cluster = new Cluster({ bin: BIN, engine: ENGINE, image: IMAGE,
  env: { CORRAL_MAX_SESSIONS: '12', CORRAL_DRAIN_S: '20', CORRAL_SESSION_HIBERNATE: 'true', CORRAL_SESSION_STORE: STORE } });
let failed = 0;
try {
  await cluster.start();
} catch (e) {
  out(`Bail out! ${e.message}`);
  await cluster.stop().catch(() => {});
  process.exit(1);
}
const ctx = {};
let skipRest = false;
for (const [i, t] of tests.entries()) {
  if (skipRest) {
    out(`not ok ${i + 1} - ${t.name} # an earlier step failed`);
    failed++;
    continue;
  }
  try {
    await Promise.race([t.fn(cluster, ctx), sleep(180000).then(() => { throw new Error('no end within 180 s'); })]);
    out(`ok ${i + 1} - ${t.name}`);
  } catch (e) {
    failed++;
    skipRest = i > 0; // the steps after the first build on each other
    out(`not ok ${i + 1} - ${t.name}`);
    out(`  # ${String(e && e.stack || e).split('\n').slice(0, 6).join('\n  # ')}`);
    if (VERBOSE) for (const h of cluster.hosts) out(`  # ${h.name}: ${h.log.split('\n').slice(-20).join('\n  # ')}`);
  }
}
for (const w of ctx.workers || []) w.running = false;
await Promise.all(ctx.runs || []);
for (const w of ctx.workers || []) await w.drop();
await cluster.stop();
rmSync(STORE, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
