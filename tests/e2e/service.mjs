#!/usr/bin/env node
// End-to-end check of corral as a service: one `corral serve --listen
// unix:...,tcp:127.0.0.1:PORT`, reached by the official SDK's streamable
// HTTP client (with the token) and by stdio hosts through `corral connect`.
// Prints TAP version 13.
//
//   CORRAL_ENGINE=unix:///run/corral-dev/podman.sock node service.mjs
//
// What it shows: the access checks (no token, a wrong token, a foreign
// Origin or Host, another uid on the unix socket), the MCP session rules
// (Mcp-Session-Id, MCP-Protocol-Version, DELETE), calls, progress,
// cancellation, tasks, sessions and files over both ways in, two
// clients at once that can neither see nor touch each other's sessions,
// jobs or tasks, and sessions saved on SIGTERM that the next service
// resumes for their client only.
//
// Environment: CORRAL_ENGINE (required; exit 77 without it), CORRAL_BIN
// (default ../../build/corral), CORRAL_IMAGE, E2E_ONLY (a regex of test
// names), E2E_VERBOSE=1. Exit status: 0 passed, 1 failed, 77 skipped.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './lib/net.mjs';
import { serverEntry } from './lib/servers.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ENGINE = process.env.CORRAL_ENGINE;
const BIN = path.resolve(HERE, process.env.CORRAL_BIN || '../../build/corral');
const VERBOSE = process.env.E2E_VERBOSE === '1';
const out = (line) => process.stdout.write(line + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (!ENGINE) {
  out('TAP version 13\n1..0 # SKIP CORRAL_ENGINE is not set');
  process.exit(77);
}

// ---------------------------------------------------------------- service

const ROOT = mkdtempSync(path.join(tmpdir(), 'corral-service-'));
chmodSync(ROOT, 0o755);
const RUNTIME_DIR = path.join(ROOT, 'run');
const CONFIG_HOME = path.join(ROOT, 'config');
mkdirSync(RUNTIME_DIR, { mode: 0o700 });
const SOCKET = path.join(RUNTIME_DIR, 'corral', 'corral.sock');

// `extra` may set CORRAL_TOKEN, and unset a variable with null.
function serviceEnv(extra = {}) {
  const env = { ...process.env, XDG_RUNTIME_DIR: RUNTIME_DIR, XDG_CONFIG_HOME: CONFIG_HOME, XDG_STATE_HOME: path.join(ROOT, 'state'),
    CORRAL_ENGINE: ENGINE, CORRAL_IMAGE: process.env.CORRAL_IMAGE || 'corral-python:latest',
    CORRAL_HOST_SERVERS: 'false', CORRAL_AUDIT_LOG: 'off', CORRAL_TOKEN: null, ...extra };
  for (const k of Object.keys(env)) if (env[k] === null) delete env[k];
  return env;
}

let services = 0;
class Service {
  // The first service is the suite's, at SOCKET; every other one gets a
  // runtime directory (and so a default socket) of its own.
  // `listen`: the value of --listen, or a function of the TCP port giving
  // it, or a list of them (--listen given once for each).
  constructor(extraEnv = {}, listen = null) {
    this.runtimeDir = RUNTIME_DIR;
    if (services++ > 0) {
      this.runtimeDir = path.join(ROOT, `run-${services}`);
      mkdirSync(this.runtimeDir, { mode: 0o700 });
    }
    this.extraEnv = { XDG_RUNTIME_DIR: this.runtimeDir, ...extraEnv };
    this.listen = listen;
    this.log = '';
  }

  async start() {
    this.port = await freePort();
    let listen = this.listen || `unix,tcp:127.0.0.1:${this.port}`;
    if (typeof listen === 'function') listen = listen(this.port);
    const flags = [listen].flat().flatMap((l) => ['--listen', l]);
    this.proc = spawn(BIN, ['serve', ...flags], { env: serviceEnv(this.extraEnv), stdio: ['ignore', 'ignore', 'pipe'] });
    this.proc.stderr.on('data', (d) => { this.log += d; });
    const deadline = Date.now() + 20000;
    while (!/listening on tcp:/.test(this.log) || !/listening on unix:/.test(this.log)) {
      if (this.proc.exitCode !== null) throw new Error(`corral serve exited: ${this.log}`);
      if (Date.now() > deadline) throw new Error(`corral serve did not listen: ${this.log}`);
      await sleep(50);
    }
    this.tokenFile = this.extraEnv.XDG_CONFIG_HOME === null
      ? path.join(this.extraEnv.HOME, '.config', 'corral', 'token')
      : path.join(this.extraEnv.XDG_CONFIG_HOME || CONFIG_HOME, 'corral', 'token');
    this.token = this.extraEnv.CORRAL_TOKEN || readFileSync(this.tokenFile, 'utf8').trim();
    this.url = `http://127.0.0.1:${this.port}/mcp`;
    return this;
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null) return this.proc?.exitCode;
    this.proc.kill('SIGTERM');
    const t = Date.now();
    while (this.proc.exitCode === null && Date.now() - t < 20000) await sleep(50);
    return this.proc.exitCode;
  }
}

async function httpClient(svc, name = 'http') {
  const c = new Client({ name, version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(svc.url),
    { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } });
  await c.connect(transport);
  c.transportRef = transport;
  return c;
}

async function connectClient(name = 'connect', svc = null) {
  const c = new Client({ name, version: '1' });
  const transport = new StdioClientTransport({ command: BIN, args: ['connect'],
    env: serviceEnv(svc ? svc.extraEnv : {}), stderr: 'pipe' });
  await c.connect(transport);
  return c;
}

// One raw HTTP request: {status, headers, body}. `fresh`: on a connection
// of its own; `timeoutMs`: refused past that.
function raw(svc, { method = 'POST', headers = {}, body = null, socketPath = null, pathName = '/mcp', fresh = false, timeoutMs = 0 } = {}) {
  return new Promise((resolve, reject) => {
    const opts = socketPath ? { socketPath, path: pathName, method } : { host: '127.0.0.1', port: svc.port, path: pathName, method };
    opts.headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers };
    if (fresh) opts.agent = false;
    const req = http.request(opts, (res) => {
      let data = '';
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
    });
    req.on('error', reject);
    if (timeoutMs) req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    if (body) req.write(typeof body === 'string' ? body : JSON.stringify(body));
    req.end();
  });
}

// Bytes written as they are on one TCP connection; the status of the
// answer (0: closed without one).
function rawBytes(svc, bytes) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: svc.port });
    let got = '';
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => { got += d; });
    s.on('error', () => {});
    s.on('close', () => resolve(Number((/^HTTP\/1\.1 (\d{3})/.exec(got) || [0, 0])[1])));
    s.setTimeout(5000, () => s.destroy());
  });
}

const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
const auth = (svc) => ({ Authorization: `Bearer ${svc.token}` });

async function rawSession(svc) {
  const r = await raw(svc, { headers: auth(svc), body: INIT });
  assert.equal(r.status, 200, r.body);
  const sid = r.headers['mcp-session-id'];
  assert.match(sid, /^[0-9a-f]{32}$/);
  return sid;
}

const text = (r) => (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');
const py = (c, code, extra = {}) => c.callTool({ name: 'run_python', arguments: { code, ...extra } }, CallToolResultSchema, { timeout: 60000 });

// ------------------------------------------------------------------ tests

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('access: no token, a wrong token: 401; the right one: 200', async (svc) => {
  let r = await raw(svc, { body: INIT });
  assert.equal(r.status, 401);
  assert.match(r.headers['www-authenticate'] || '', /Bearer/);
  assert.match(JSON.parse(r.body).error.message, /Authorization: Bearer/);
  r = await raw(svc, { headers: { Authorization: 'Bearer wrong-token-wrong-token' }, body: INIT });
  assert.equal(r.status, 401);
  r = await raw(svc, { headers: { Authorization: `Bearer ${svc.token}x` }, body: INIT });
  assert.equal(r.status, 401);
  r = await raw(svc, { headers: auth(svc), body: INIT });
  assert.equal(r.status, 200);
});

test('access: the 401 names the token file there is (with or without XDG_CONFIG_HOME), or the setting that gave the token', async (svc) => {
  const says = async (s) => JSON.parse((await raw(s, { body: INIT })).body).error.message;
  assert.ok((await says(svc)).includes(`the token is in ${path.join(CONFIG_HOME, 'corral', 'token')}`), await says(svc));
  const home = path.join(ROOT, 'home-401');
  mkdirSync(home);
  const bare = await new Service({ XDG_CONFIG_HOME: null, HOME: home, CORRAL_POOL_MAX: '0' }).start();
  try {
    const msg = await says(bare);
    assert.ok(msg.includes(`the token is in ${home}/.config/corral/token`), `without XDG_CONFIG_HOME: ${msg}`);
    assert.doesNotMatch(msg, /XDG_CONFIG_HOME/, 'and names no variable that is not set');
    const r = await raw(bare, { headers: auth(bare), body: INIT });
    assert.equal(r.status, 200, 'the token in that file is the one that works');
  } finally {
    await bare.stop();
  }
  const set = await new Service({ CORRAL_TOKEN: 'a-token-of-the-setting-0123', CORRAL_POOL_MAX: '0' }).start();
  try {
    assert.match(await says(set), /the token is the one set by CORRAL_TOKEN/);
  } finally {
    await set.stop();
  }
});

test('listen: --listen repeated keeps every listener (unix and tcp)', async () => {
  const run = path.join(ROOT, 'run-repeat');
  mkdirSync(run, { mode: 0o700 });
  const sock = path.join(run, 'repeat.sock');
  const s = await new Service({ CORRAL_POOL_MAX: '0' }, (port) => [`unix:${sock}`, `tcp:127.0.0.1:${port}`]).start();
  try {
    assert.match(s.log, /listening on unix:.*repeat\.sock/);
    assert.match(s.log, /listening on tcp:127\.0\.0\.1:/);
    assert.equal((await raw(null, { socketPath: sock, body: INIT })).status, 200, 'the unix listener answers');
    assert.equal((await raw(s, { headers: auth(s), body: INIT })).status, 200, 'and the TCP one');
  } finally {
    await s.stop();
  }
});

test('access: a foreign Origin: 403; a foreign Host (DNS rebinding): 403; loopback ones: 200', async (svc) => {
  let r = await raw(svc, { headers: { ...auth(svc), Origin: 'http://evil.example' }, body: INIT });
  assert.equal(r.status, 403);
  assert.match(JSON.parse(r.body).error.message, /Origin/);
  r = await raw(svc, { headers: { ...auth(svc), Host: `evil.example:${svc.port}` }, body: INIT });
  assert.equal(r.status, 403);
  assert.match(JSON.parse(r.body).error.message, /Host/);
  r = await raw(svc, { headers: { ...auth(svc), Origin: `http://localhost:${svc.port}`, Host: `localhost:${svc.port}` }, body: INIT });
  assert.equal(r.status, 200);
  // The unix socket needs no token, and still checks Origin.
  r = await raw(svc, { socketPath: SOCKET, body: INIT });
  assert.equal(r.status, 200);
  r = await raw(svc, { socketPath: SOCKET, headers: { Origin: 'http://evil.example' }, body: INIT });
  assert.equal(r.status, 403);
});

test('access: another uid on the unix socket is refused (mode 0600, and by SO_PEERCRED)', async (svc) => {
  const st = execFileSync('stat', ['-c', '%a', SOCKET]).toString().trim();
  assert.equal(st, '600');
  const curl = (sock) => {
    try {
      return execFileSync('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups', 'curl', '-s', '-o', '/dev/null',
        '-w', '%{http_code}', '--unix-socket', sock, '-H', 'Content-Type: application/json', '-H',
        'Accept: application/json, text/event-stream', '-d', JSON.stringify(INIT), 'http://localhost/mcp'],
      { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
    } catch (e) {
      return `exit ${e.status} ${e.stdout}`;
    }
  };
  // As made: the directory and socket are the user's alone.
  assert.match(curl(SOCKET), /^exit 7/);
  // Opened up on purpose: corral itself still refuses the peer.
  const open = path.join(ROOT, 'open');
  mkdirSync(open, { mode: 0o777 });
  chmodSync(open, 0o777);
  const svc2 = await new Service({}, `unix:${open}/corral.sock,tcp:127.0.0.1:0`).startUnixOnly(open);
  try {
    chmodSync(`${open}/corral.sock`, 0o777);
    // Whatever curl makes of a connection closed at once (no reply, a
    // failed send or receive), it never gets an HTTP answer, and corral
    // says why it closed it. A try that did not reach corral is tried again.
    for (let i = 0; i < 5 && !/refused a peer of uid/.test(svc2.log); i++) {
      const got = curl(`${open}/corral.sock`);
      assert.doesNotMatch(got, /^[1-5][0-9][0-9]$/, `nobody got an HTTP answer: ${got}`);
      const deadline = Date.now() + 1000;
      while (!/refused a peer of uid/.test(svc2.log) && Date.now() < deadline) await sleep(50);
    }
    assert.match(svc2.log, /refused a peer of uid \d+ \(only uid \d+ may connect\)/);
  } finally {
    await svc2.stop();
  }
});

Service.prototype.startUnixOnly = async function startUnixOnly() {
  this.proc = spawn(BIN, ['serve', '--listen', this.listen.split(',')[0]], { env: serviceEnv(this.extraEnv), stdio: ['ignore', 'ignore', 'pipe'] });
  this.proc.stderr.on('data', (d) => { this.log += d; });
  const deadline = Date.now() + 20000;
  while (!/listening on unix:/.test(this.log)) {
    if (this.proc.exitCode !== null || Date.now() > deadline) throw new Error(`corral serve: ${this.log}`);
    await sleep(50);
  }
  return this;
};

const PING = { jsonrpc: '2.0', id: 7, method: 'ping' };

test('door: 1,100 slow connections from another uid: the owner (unix) and a token holder (TCP) answered within 1 s each; the header deadline closes them', async () => {
  const svc = await new Service({ CORRAL_HTTP_HEADER_TIMEOUT_S: '3', CORRAL_POOL_MAX: '0' }).start();
  const sock = path.join(svc.runtimeDir, 'corral', 'corral.sock');
  // The flooder runs as nobody, who cannot read this tree: a copy in ROOT.
  const flooder = path.join(ROOT, 'flood.mjs');
  writeFileSync(flooder, readFileSync(path.join(HERE, 'lib', 'flood.mjs')));
  chmodSync(flooder, 0o644);
  let flood = null;
  try {
    const o = await raw(svc, { socketPath: sock, body: INIT });
    assert.equal(o.status, 200, o.body);
    const ownerSid = o.headers['mcp-session-id'];
    const holderSid = await rawSession(svc);
    // 1,100 sockets are more than a soft limit of 1,024 descriptors.
    flood = spawn('prlimit', ['--nofile=4096:4096', '--', 'setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
      process.execPath, flooder, String(svc.port), '1100', '12000', '6000'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let fout = '';
    let ferr = '';
    flood.stdout.on('data', (d) => { fout += d; });
    flood.stderr.on('data', (d) => { ferr += d; });
    const exited = new Promise((r) => flood.on('exit', r));
    const deadline = Date.now() + 15000;
    while (!/flooding/.test(fout)) {
      if (flood.exitCode !== null || Date.now() > deadline) throw new Error(`the flood did not start: ${fout} ${ferr}`);
      await sleep(50);
    }
    const ways = [['the owner on the unix socket', { socketPath: sock, headers: { 'Mcp-Session-Id': ownerSid } }],
      ['a token holder over TCP', { headers: { ...auth(svc), 'Mcp-Session-Id': holderSid } }]];
    let slowest = 0;
    for (let i = 0; i < 8; i++) {
      for (const [who, opts] of ways) {
        const t0 = performance.now();
        const r = await raw(svc, { ...opts, body: PING, fresh: true, timeoutMs: 1000 }).catch((e) => ({ status: 0, body: e.message }));
        const ms = performance.now() - t0;
        assert.equal(r.status, 200, `${who}, call ${i + 1} during the flood: ${r.body}`);
        assert.ok(ms < 1000, `${who}, call ${i + 1} during the flood: ${ms.toFixed(0)} ms`);
        slowest = Math.max(slowest, ms);
      }
      await sleep(500);
    }
    out(`# 16 calls during the flood, the slowest ${slowest.toFixed(0)} ms`);
    await exited;
    const f = JSON.parse(fout.trim().split('\n').pop());
    out(`# the flood: ${JSON.stringify(f)}`);
    assert.ok(f.opened >= 1100, JSON.stringify(f));
    assert.equal(f.stillOpen, 0, `slow connections corral left open: ${JSON.stringify(f)}`);
    assert.ok(f.maxLifeMs < 4500, `a slow connection lived ${f.maxLifeMs} ms (http_header_timeout_s 3)`);
    const m = await raw(svc, { method: 'GET', socketPath: sock, pathName: '/metrics' });
    const closed = (why) => Number((new RegExp(`corral_http_connections_closed_total\\{reason="${why}"\\} (\\d+)`).exec(m.body) || [0, -1])[1]);
    assert.ok(closed('header_timeout') > 0, m.body);
    assert.ok(closed('make_room') > 0, m.body);
  } finally {
    if (flood && flood.exitCode === null) flood.kill('SIGKILL');
    assert.equal(await svc.stop(), 0);
  }
});

test('door: Host is a loopback name or one in http_hosts, then nothing or a port: localhost:evil 403, localhost:8080 200', async (svc) => {
  for (const [host, want] of [['localhost:evil', 403], ['localhost:8080', 200], ['localhost', 200], ['[::1]:65535', 200],
    ['127.0.0.1:65536', 403], ['localhost:', 403], ['localhost.evil.example', 403]]) {
    const r = await raw(svc, { headers: { ...auth(svc), Host: host }, body: INIT });
    assert.equal(r.status, want, `Host: ${host}: ${r.body}`);
  }
});

test('door: a duplicate Content-Length, or Transfer-Encoding with Content-Length: 400', async (svc) => {
  const body = JSON.stringify(PING);
  const head = `POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${svc.token}\r\n` +
    'Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n';
  const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  // The control: one Content-Length is read (400 for want of a session).
  assert.equal(await rawBytes(svc, `${head}Content-Length: ${body.length}\r\n\r\n${body}`), 400);
  const sid = await rawSession(svc);
  const ok = `${head}Mcp-Session-Id: ${sid}\r\n`;
  assert.equal(await rawBytes(svc, `${ok}Content-Length: ${body.length}\r\n\r\n${body}`), 200);
  assert.equal(await rawBytes(svc, `${ok}Transfer-Encoding: chunked\r\n\r\n${chunked}`), 200);
  assert.equal(await rawBytes(svc, `${ok}Content-Length: ${body.length}\r\nContent-Length: ${body.length}\r\n\r\n${body}`), 400);
  assert.equal(await rawBytes(svc, `${ok}Content-Length: 2\r\nContent-Length: ${body.length}\r\n\r\n${body}`), 400);
  assert.equal(await rawBytes(svc, `${ok}Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}`), 400);
});

test('door: a taken port, a short token, an unusable socket path: exit 2 with one line, before any engine or pool', async () => {
  const taken = net.createServer();
  await new Promise((r) => taken.listen(0, '127.0.0.1', r));
  const port = taken.address().port;
  const rt = path.join(ROOT, 'run-refused');
  mkdirSync(rt, { mode: 0o700 });
  try {
    for (const [listen, extra, why] of [[`unix,tcp:127.0.0.1:${port}`, {}, new RegExp(`tcp:127\\.0\\.0\\.1:${port}: Address already in use`)],
      [`tcp:127.0.0.1:${port + 1}`, { CORRAL_TOKEN: 'too-short' }, /token: 16 to 64 characters/],
      ['unix:/proc/corral/corral.sock', {}, /\/proc\/corral\/corral\.sock/]]) {
      const p = spawn(BIN, ['serve', '--listen', listen], { env: { ...serviceEnv({ XDG_RUNTIME_DIR: rt }), ...extra }, stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      p.stderr.on('data', (d) => { err += d; });
      const code = await new Promise((r) => p.on('exit', r));
      assert.equal(code, 2, `${listen}: exit ${code}: ${err}`);
      assert.equal(err.trim().split('\n').length, 1, `${listen}: one line, not: ${err}`);
      assert.match(err, why);
      assert.doesNotMatch(err, /engine|pool|unexpected transition/);
    }
  } finally {
    taken.close();
  }
});

test('MCP sessions: no Mcp-Session-Id 400, unknown 404, bad MCP-Protocol-Version 400, DELETE ends it', async (svc) => {
  const ping = { jsonrpc: '2.0', id: 2, method: 'ping' };
  let r = await raw(svc, { headers: auth(svc), body: ping });
  assert.equal(r.status, 400);
  r = await raw(svc, { headers: { ...auth(svc), 'Mcp-Session-Id': '0'.repeat(32) }, body: ping });
  assert.equal(r.status, 404);
  const sid = await rawSession(svc);
  r = await raw(svc, { headers: { ...auth(svc), 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '1999-01-01' }, body: ping });
  assert.equal(r.status, 400);
  r = await raw(svc, { headers: { ...auth(svc), 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-11-25' }, body: ping });
  assert.equal(r.status, 200);
  assert.deepEqual(JSON.parse(r.body), { jsonrpc: '2.0', id: 2, result: {} });
  r = await raw(svc, { headers: { ...auth(svc), 'Mcp-Session-Id': sid }, body: { jsonrpc: '2.0', method: 'notifications/initialized' } });
  assert.equal(r.status, 202);
  r = await raw(svc, { headers: { ...auth(svc), Accept: 'application/json' }, body: INIT });
  assert.equal(r.status, 406);
  r = await raw(svc, { method: 'DELETE', headers: { ...auth(svc), 'Mcp-Session-Id': sid } });
  assert.equal(r.status, 200);
  r = await raw(svc, { headers: { ...auth(svc), 'Mcp-Session-Id': sid }, body: ping });
  assert.equal(r.status, 404);
});

// A call, progress, a cancellation, and the client still served after it.
async function callsProgressCancel(c) {
  const r = await py(c, 'print(6 * 7)');
  assert.equal(r.structuredContent.status, 'ok', JSON.stringify(r));
  assert.match(text(r), /42/);
  const seen = [];
  const p = await c.callTool({ name: 'run_python', arguments: { code: 'import time\nfor i in range(3):\n    print("step", i, flush=True)\n    time.sleep(0.6)' } },
    CallToolResultSchema, { timeout: 60000, onprogress: (n) => seen.push(n) });
  assert.equal(p.structuredContent.status, 'ok');
  assert.ok(seen.length >= 1, 'progress notifications arrived');
  const ac = new AbortController();
  const t0 = Date.now();
  const slow = c.callTool({ name: 'run_python', arguments: { code: 'import time; time.sleep(30)' } }, CallToolResultSchema, { signal: ac.signal, timeout: 60000 });
  await sleep(1500);
  ac.abort('changed my mind');
  await assert.rejects(slow);
  assert.ok(Date.now() - t0 < 10000);
  const after = await py(c, 'print("still here")');
  assert.match(text(after), /still here/);
}

test('HTTP client: a call, progress on its event stream, a cancellation', async (svc) => {
  const c = await httpClient(svc);
  try {
    await callsProgressCancel(c);
  } finally {
    await c.close();
  }
});

test('corral connect: a call, progress, a cancellation', async (svc) => {
  const c = await connectClient();
  try {
    await callsProgressCancel(c);
  } finally {
    await c.close();
  }
});

// /metrics through Debian's Prometheus text parser: {"name{labels}": value}.
function parseMetrics(text) {
  const py = 'import json, sys\nfrom prometheus_client.parser import text_string_to_metric_families\n' +
    'out = {}\nfor f in text_string_to_metric_families(sys.stdin.read()):\n' +
    '    for s in f.samples:\n' +
    '        out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value\n' +
    'print(json.dumps(out))';
  return JSON.parse(execFileSync('/usr/bin/python3', ['-c', py], { input: text }).toString());
}

test('HTTP client: tasks, and a session\'s files', async (svc) => {
  const c = await httpClient(svc);
  try {
    const types = await import('@modelcontextprotocol/sdk/types.js');
    const created = await c.request({ method: 'tools/call', params: { name: 'run_python', arguments: { code: 'print(6 * 7)' }, task: { ttl: 60000 } } },
      types.CreateTaskResultSchema);
    const taskId = created.task.taskId;
    assert.ok(taskId);
    const got = await c.request({ method: 'tasks/get', params: { taskId } }, types.GetTaskResultSchema);
    assert.equal(got.taskId, taskId);
    const res = await c.request({ method: 'tasks/result', params: { taskId } }, CallToolResultSchema, { timeout: 60000 });
    assert.match(text(res), /42/);
    const w = await c.callTool({ name: 'write_file', arguments: { session: 'h', path: 'a.txt', content: 'over http' } });
    assert.ok(!w.isError, JSON.stringify(w));
    const r = await c.callTool({ name: 'read_file', arguments: { session: 'h', path: 'a.txt' } });
    assert.match(JSON.stringify(r), /over http/);
    await c.callTool({ name: 'session_close', arguments: { session: 'h' } });
  } finally {
    await c.close();
  }
});

test('/health: 200 and why; /metrics: parses, and its counters move with calls', async (svc) => {
  const h = await raw(svc, { method: 'GET', headers: auth(svc), pathName: '/health' });
  assert.equal(h.status, 200, h.body);
  const health = JSON.parse(h.body);
  assert.equal(health.ready, true);
  assert.equal(health.engine.reachable, true);
  assert.equal(health.image.present, true);
  const noToken = await raw(svc, { method: 'GET', pathName: '/metrics' });
  assert.equal(noToken.status, 401, 'the same access checks');
  const before = parseMetrics((await raw(svc, { method: 'GET', headers: auth(svc), pathName: '/metrics' })).body);
  const c = await httpClient(svc);
  try {
    await py(c, 'print(1)');
    await py(c, 'raise SystemExit(3)');
  } finally {
    await c.close();
  }
  const m = await raw(svc, { method: 'GET', headers: auth(svc), pathName: '/metrics' });
  assert.match(m.headers['content-type'], /text\/plain; version=0\.0\.4/);
  const after = parseMetrics(m.body);
  const v = (x, k) => x[k] ?? 0;
  const ok = 'corral_runs_total{"status": "ok", "tool": "run_python"}';
  const err = 'corral_runs_total{"status": "error", "tool": "run_python"}';
  const calls = 'corral_tool_calls_total{"tool": "run_python"}';
  const hist = 'corral_run_duration_seconds_count{"tool": "run_python"}';
  assert.equal(v(after, ok) - v(before, ok), 1, 'one ok run more');
  assert.equal(v(after, err) - v(before, err), 1, 'one error run more');
  assert.equal(v(after, calls) - v(before, calls), 2, 'two run_python calls more');
  assert.equal(v(after, hist) - v(before, hist), 2, 'two more in the latency histogram');
  assert.ok(after['corral_clients{}'] >= 0 && 'corral_pool_target{}' in after && 'corral_resident_memory_bytes{}' in after);
});

test('corral connect: calls, a session and its files, through the unix socket', async (svc) => {
  const c = await connectClient();
  try {
    const r = await py(c, 'x = 41\nprint(x + 1)', { session: 'calc' });
    assert.match(text(r), /42/);
    const r2 = await py(c, 'print(x + 2)', { session: 'calc' });
    assert.match(text(r2), /43/);
    const w = await c.callTool({ name: 'write_file', arguments: { session: 'calc', path: 'in.txt', content: 'hello' } });
    assert.ok(!w.isError, JSON.stringify(w));
    const rd = await c.callTool({ name: 'read_file', arguments: { session: 'calc', path: 'in.txt' } });
    assert.match(JSON.stringify(rd), /hello/);
    const l = await c.callTool({ name: 'session_list', arguments: {} });
    assert.deepEqual(l.structuredContent.sessions.map((s) => s.name), ['calc']);
    await c.callTool({ name: 'session_close', arguments: { session: 'calc' } });
  } finally {
    await c.close();
  }
});

test('two clients at once: neither sees nor touches the other\'s sessions, jobs or tasks', async (svc) => {
  const a = await httpClient(svc, 'a');
  const b = await connectClient('b');
  try {
    // The same session name, two sessions.
    await py(a, 'v = "a"', { session: 'work' });
    await py(b, 'v = "b"', { session: 'work' });
    assert.match(text(await py(a, 'print(v)', { session: 'work' })), /^a/);
    assert.match(text(await py(b, 'print(v)', { session: 'work' })), /^b/);
    await py(a, 'pass', { session: 'only-a' });
    const la = (await a.callTool({ name: 'session_list', arguments: {} })).structuredContent.sessions.map((s) => s.name).sort();
    const lb = (await b.callTool({ name: 'session_list', arguments: {} })).structuredContent.sessions.map((s) => s.name).sort();
    assert.deepEqual(la, ['only-a', 'work']);
    assert.deepEqual(lb, ['work']);
    const closeOther = await b.callTool({ name: 'session_close', arguments: { session: 'only-a' } });
    assert.ok(closeOther.isError, 'b cannot close a\'s session');
    const readOther = await b.callTool({ name: 'list_files', arguments: { session: 'only-a' } });
    assert.ok(readOther.isError, 'b cannot reach a\'s files');
    // A job of a's: b can neither see, wait for nor cancel it.
    const job = await a.callTool({ name: 'run_python', arguments: { code: 'import time; time.sleep(4); print("done")', sync_wait_s: 0 } });
    const jobId = job.structuredContent.job_id;
    assert.ok(jobId, JSON.stringify(job));
    const jl = (await b.callTool({ name: 'job_list', arguments: {} })).structuredContent;
    assert.ok(!JSON.stringify(jl).includes(jobId));
    assert.ok((await b.callTool({ name: 'job_status', arguments: { job_id: jobId } })).isError);
    assert.ok((await b.callTool({ name: 'job_cancel', arguments: { job_id: jobId } })).isError);
    const res = await a.callTool({ name: 'job_result', arguments: { job_id: jobId, wait_s: 20 } }, CallToolResultSchema, { timeout: 30000 });
    assert.match(JSON.stringify(res), /done/);
    // A task of b's: a cannot get or cancel it.
    const created = await b.request({ method: 'tools/call', params: { name: 'run_python', arguments: { code: 'print(7)' }, task: { ttl: 60000 } } },
      (await import('@modelcontextprotocol/sdk/types.js')).CreateTaskResultSchema);
    const taskId = created.task.taskId;
    await assert.rejects(a.request({ method: 'tasks/get', params: { taskId } }, (await import('@modelcontextprotocol/sdk/types.js')).GetTaskResultSchema));
    await assert.rejects(a.request({ method: 'tasks/cancel', params: { taskId } }, (await import('@modelcontextprotocol/sdk/types.js')).CancelTaskResultSchema));
    // Both fast: the shared pool answers each.
    let st0;
    const deadline = Date.now() + 60000; // the pool refills after the calls above
    while ((st0 = (await a.callTool({ name: 'sandbox_status', arguments: {} })).structuredContent.pool).ready < 2 &&
      Date.now() < deadline) await sleep(250);
    const t0 = performance.now();
    await Promise.all([py(a, 'print(1)'), py(b, 'print(2)')]);
    const ms = performance.now() - t0;
    const st1 = (await a.callTool({ name: 'sandbox_status', arguments: {} })).structuredContent.pool;
    out(`# two clients' warm calls at once: ${ms.toFixed(1)} ms, ${st1.hits - st0.hits} of 2 from the shared pool`);
    assert.equal(st1.hits - st0.hits, 2, 'both calls took a ready sandbox of the one pool');
  } finally {
    await a.close();
    await b.close();
  }
});

test('a client that goes away: its sessions close and its MCP session ends when idle', async () => {
  const svc = await new Service({ CORRAL_CLIENT_IDLE_S: '2' }).start();
  try {
    const sid = await rawSession(svc);
    const call = { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'run_python', arguments: { code: 'pass', session: 'left' } } };
    const r = await raw(svc, { headers: { ...auth(svc), 'Mcp-Session-Id': sid }, body: call });
    assert.equal(r.status, 200, r.body);
    const deadline = Date.now() + 30000;
    while (!/client c1\) ended: idle/.test(svc.log) && Date.now() < deadline) await sleep(200);
    assert.match(svc.log, /ended: idle past client_idle_s/);
    assert.match(svc.log, /session left: closed with its client's MCP session/);
    const again = await raw(svc, { headers: { ...auth(svc), 'Mcp-Session-Id': sid }, body: { jsonrpc: '2.0', id: 6, method: 'ping' } });
    assert.equal(again.status, 404);
  } finally {
    assert.equal(await svc.stop(), 0);
  }
});

test('a client holds at most client_max_sandboxes; another client is still served', async () => {
  const svc = await new Service({ CORRAL_CLIENT_MAX_SANDBOXES: '1' }).start();
  const a = await httpClient(svc, 'a');
  const b = await httpClient(svc, 'b');
  try {
    const slow = py(a, 'import time; time.sleep(3)');
    await sleep(800);
    const refused = await py(a, 'print(1)');
    assert.equal(refused.structuredContent.status, 'busy', JSON.stringify(refused));
    assert.match(text(refused), /client_max_sandboxes/);
    const other = await py(b, 'print(2)');
    assert.equal(other.structuredContent.status, 'ok');
    assert.equal((await slow).structuredContent.status, 'ok');
  } finally {
    await a.close();
    await b.close();
    assert.equal(await svc.stop(), 0);
  }
});

test('SIGTERM drains: not ready, no new sessions, a running call ends; past drain_s the rest are ended', async () => {
  const svc = await new Service({ CORRAL_DRAIN_S: '4' }).start();
  const a = await httpClient(svc, 'a');
  const b = await httpClient(svc, 'b');
  try {
    const short = py(a, 'import time; time.sleep(1.5); print("finished")');
    const long = py(b, 'import time; time.sleep(30); print("never")').catch((e) => e);
    await sleep(700);
    const t0 = Date.now();
    svc.proc.kill('SIGTERM');
    await sleep(300);
    const h = await raw(svc, { method: 'GET', headers: auth(svc), pathName: '/health' });
    assert.equal(h.status, 503, h.body);
    assert.equal(JSON.parse(h.body).draining, true);
    const init = await raw(svc, { headers: auth(svc), body: INIT });
    assert.equal(init.status, 503, init.body);
    assert.match(JSON.parse(init.body).error.message, /draining/);
    // The sessions it holds are still served while it drains.
    await a.ping();
    const done = await short;
    assert.equal(done.structuredContent.status, 'ok', JSON.stringify(done));
    assert.match(text(done), /finished/);
    // The long call outlives drain_s: it is ended, and the service stops.
    const ended = await long;
    const ms = Date.now() - t0;
    assert.ok(!(ended && ended.structuredContent && ended.structuredContent.status === 'ok'), JSON.stringify(ended));
    while (svc.proc.exitCode === null && Date.now() - t0 < 20000) await sleep(50);
    assert.equal(svc.proc.exitCode, 0, svc.log.slice(-1500));
    assert.ok(ms >= 3500 && ms < 15000, `the long call ended ${ms} ms after SIGTERM (drain_s 4)`);
    assert.match(svc.log, /drain_s passed with calls running in 1 MCP session/);
  } finally {
    await a.close().catch(() => {});
    await b.close().catch(() => {});
    await svc.stop();
  }
});

// A client named with Corral-Client: its sessions belong to the name.
async function namedClient(svc, name) {
  const c = new Client({ name, version: '1' });
  await c.connect(new StreamableHTTPClientTransport(new URL(svc.url),
    { requestInit: { headers: { Authorization: `Bearer ${svc.token}`, 'Corral-Client': name } } }));
  return c;
}

test('sessions survive a restart: SIGTERM saves them, the next service resumes them for their client; another client cannot see, resume, fork or close them', async () => {
  const store = mkdtempSync(path.join(ROOT, 'store-'));
  const env = { CORRAL_SESSION_HIBERNATE: 'true', CORRAL_SESSION_STORE: store, CORRAL_DRAIN_S: '5' };
  const svc = await new Service(env).start();
  const alice = await namedClient(svc, 'alice');
  const anon = await httpClient(svc, 'anon');
  let svc2 = null;
  try {
    const set = await py(alice, 'import socket\nplan = {"rows": 3}\nsock = socket.socket()\nopen("notes.txt", "w").write("from before")\nprint("set")',
      { session: 'work' });
    assert.equal(set.structuredContent.status, 'ok', JSON.stringify(set));
    // An anonymous client's sessions end with its MCP session: not saved.
    await py(anon, 'y = 1', { session: 'scratch' });
    const refused = await anon.callTool({ name: 'session_save', arguments: { session: 'scratch' } });
    assert.ok(refused.isError && refused.structuredContent.error.type === 'NotSavable', JSON.stringify(refused.structuredContent));
    await anon.close();
    await alice.close();
    const t0 = Date.now();
    assert.equal(await svc.stop(), 0, svc.log.slice(-1500));
    out(`# SIGTERM to exit with one session saved: ${Date.now() - t0} ms`);
    assert.match(svc.log, /stopping: saving 1 session\(s\)/);
    assert.match(svc.log, /session work: saved as corral stopped/);

    svc2 = await new Service(env).start();
    // Another client: the session is not in its list, and it can neither
    // fork, save nor close it; a call with that name opens its own.
    const bob = await namedClient(svc2, 'bob');
    try {
      const list = (await bob.callTool({ name: 'session_list', arguments: {} })).structuredContent.sessions;
      assert.deepEqual(list, [], `bob sees none of alice's sessions (${JSON.stringify(list)})`);
      for (const [tool, args] of [['session_fork', { session: 'work', new_session: 'mine' }], ['session_save', { session: 'work' }],
        ['session_close', { session: 'work' }], ['read_file', { session: 'work', path: 'notes.txt' }]]) {
        const r = await bob.callTool({ name: tool, arguments: args });
        assert.ok(r.isError && /no session "work"/.test(text(r)),
          `bob's ${tool} of alice's session finds no such session: ${JSON.stringify(r.structuredContent)}`);
      }
      const own = await py(bob, 'print(globals().get("plan"))', { session: 'work' });
      assert.equal(own.structuredContent.stdout, 'None\n', 'bob\'s "work" is a new session of his own');
      assert.equal(own.structuredContent.session.state, 'kept');
      await bob.callTool({ name: 'session_close', arguments: { session: 'work' } });
    } finally {
      await bob.close();
    }
    const alice2 = await namedClient(svc2, 'alice');
    try {
      const listed = (await alice2.callTool({ name: 'session_list', arguments: {} })).structuredContent.sessions;
      assert.equal(listed.find((s) => s.name === 'work')?.state, 'hibernated', JSON.stringify(listed));
      const back = await py(alice2, 'print(plan["rows"], open("notes.txt").read())', { session: 'work' });
      assert.equal(back.structuredContent.status, 'ok', JSON.stringify(back));
      assert.equal(back.structuredContent.stdout, '3 from before\n', 'its globals and files are back');
      assert.equal(back.structuredContent.session.state, 'resumed');
      assert.deepEqual(back.structuredContent.session.not_restored, ['sock']);
      out(`# resumed after the restart in ${back.structuredContent.session.resume_ms} ms`);
      await alice2.callTool({ name: 'session_close', arguments: { session: 'work' } });
    } finally {
      await alice2.close();
    }
  } finally {
    await alice.close().catch(() => {});
    await anon.close().catch(() => {});
    await svc.stop();
    if (svc2) await svc2.stop();
  }
});

test('limits: a rootless engine on cgroup v1 is said to apply no memory or pids limit; any other is not', async (svc) => {
  // The engine's /info is read once, beside the first create (not before
  // it): the warning may come a moment after the first call's answer.
  // Here a rootless engine is one run by a user other than root
  // (tests/e2e/rootless.sh).
  const c = await httpClient(svc);
  try {
    assert.equal((await py(c, 'print(1)')).structuredContent.status, 'ok');
  } finally {
    await c.close();
  }
  let v2 = true;
  try { readFileSync('/sys/fs/cgroup/cgroup.controllers'); } catch { v2 = false; }
  const expected = process.getuid() !== 0 && !v2;
  const warned = () => /rootless on cgroup v1: it applies no memory or pids limit/.test(svc.log);
  for (const end = Date.now() + 5000; expected && !warned() && Date.now() < end;) await sleep(50);
  assert.equal(warned(), expected, svc.log.split('\n').filter((l) => /warn/.test(l)).join('\n'));
});

test('events: the pool failing reaches both kinds of client as notifications/message', async () => {
  // An engine that is not there: the pool's third failure in a row is an
  // event every client should see.
  const svc = await new Service({ CORRAL_ENGINE: `unix://${path.join(ROOT, 'no-engine.sock')}` }).start();
  const got = [];
  const { LoggingMessageNotificationSchema } = await import('@modelcontextprotocol/sdk/types.js');
  const a = new Client({ name: 'a', version: '1' });
  a.setNotificationHandler(LoggingMessageNotificationSchema, (n) => got.push(['http', n.params]));
  const b = new Client({ name: 'b', version: '1' });
  b.setNotificationHandler(LoggingMessageNotificationSchema, (n) => got.push(['connect', n.params]));
  try {
    await a.connect(new StreamableHTTPClientTransport(new URL(svc.url),
      { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
    await b.connect(new StdioClientTransport({ command: BIN, args: ['connect'], env: serviceEnv(svc.extraEnv), stderr: 'pipe' }));
    const deadline = Date.now() + 20000;
    while (got.length < 2 && Date.now() < deadline) await sleep(100);
    for (const who of ['http', 'connect']) {
      const m = got.find(([w]) => w === who);
      assert.ok(m, `${who} client got a notifications/message (${JSON.stringify(got).slice(0, 300)})`);
      assert.equal(m[1].level, 'error');
      assert.equal(m[1].logger, 'pool');
      assert.match(m[1].data, /failed to start a sandbox 3 times in a row/);
    }
  } finally {
    await a.close();
    await b.close();
    assert.equal(await svc.stop(), 0);
  }
});

test('bridge: code sent over HTTP and through connect calls the user\'s MCP server (server-everything)', async () => {
  // The service's own config names the server; each client's code reaches it.
  const entry = serverEntry('server-everything');
  const conf = path.join(ROOT, 'bridge-config.json');
  writeFileSync(conf, JSON.stringify({ servers: { everything: { command: process.execPath, args: [entry, 'stdio'] } } }));
  const svc = await new Service({ CORRAL_CONFIG: conf }).start();
  const a = await httpClient(svc, 'a');
  const b = await connectClient('b', svc);
  try {
    for (const [who, c] of [['http', a], ['connect', b]]) {
      const r = await py(c, `print(mcp_everything.echo(message="from ${who}").text)\nprint(mcp_everything.get_sum(a=2, b=3).text)`,
        { servers: ['everything'], timeout_s: 60 });
      assert.equal(r.structuredContent.status, 'ok', JSON.stringify(r).slice(0, 600));
      assert.match(text(r), new RegExp(`Echo: from ${who}`));
      assert.match(text(r), /\b5\b/);
    }
    const m = await raw(svc, { method: 'GET', headers: auth(svc), pathName: '/metrics' });
    assert.match(m.body, /corral_bridge_calls_total\{server="everything",decision="ok"\} 4/);
    assert.match(m.body, /corral_upstream_up\{server="everything",state="[a-z]+"\} [01]/);
  } finally {
    await a.close();
    await b.close();
    assert.equal(await svc.stop(), 0);
  }
});

test('ask over HTTP: the question reaches the HTTP client on its GET stream, its answer comes back as a POST', async () => {
  const entry = serverEntry('server-everything');
  const conf = path.join(ROOT, 'ask-config.json');
  const pol = path.join(ROOT, 'ask-policy.json');
  writeFileSync(conf, JSON.stringify({ servers: { everything: { command: process.execPath, args: [entry, 'stdio'] } } }));
  writeFileSync(pol, JSON.stringify({ version: 1, servers: { everything: { ask: ['echo'] } } }));
  const svc = await new Service({ CORRAL_CONFIG: conf, CORRAL_POLICY: pol }).start();
  const { ElicitRequestSchema } = await import('@modelcontextprotocol/sdk/types.js');
  const c = new Client({ name: 'asked', version: '1' }, { capabilities: { elicitation: { form: {} } } });
  const asked = [];
  let answer = 'accept';
  c.setRequestHandler(ElicitRequestSchema, async (req) => { asked.push(req.params.message); return { action: answer }; });
  await c.connect(new StreamableHTTPClientTransport(new URL(svc.url), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
  try {
    const code = 'import corral\ntry:\n    print(mcp_everything.echo(message="over http").text)\nexcept corral.PolicyDenied as e:\n    print("DENIED", e)';
    let r = await py(c, code, { servers: ['everything'], timeout_s: 60 });
    assert.equal(r.structuredContent.status, 'ok', JSON.stringify(r).slice(0, 600));
    assert.match(text(r), /Echo: over http/);
    assert.equal(asked.length, 1);
    assert.match(asked[0], /echo/);
    answer = 'decline';
    r = await py(c, code, { servers: ['everything'], timeout_s: 60 });
    assert.match(text(r), /DENIED .*declined/);
  } finally {
    await c.close();
    assert.equal(await svc.stop(), 0);
  }
});

test('corral connect with no service: a clear error, nothing started', async () => {
  const env = { ...serviceEnv(), XDG_RUNTIME_DIR: path.join(ROOT, 'nowhere') };
  mkdirSync(env.XDG_RUNTIME_DIR, { mode: 0o700 });
  const p = spawn(BIN, ['connect'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  // A host that sends nothing and closes: connect waits for no request
  // (cli.test.mjs checks the answer to an initialize).
  p.stdin.end();
  const code = await new Promise((r) => p.on('exit', r));
  assert.equal(code, 1);
  assert.match(err, /no corral service at .*corral\.sock: start it/);
});

test('systemd: the units pass systemd-analyze verify; socket activation works', async () => {
  const units = path.join(ROOT, 'units');
  mkdirSync(units, { recursive: true });
  for (const u of ['corral.socket', 'corral.service']) {
    const src = readFileSync(path.join(HERE, '../../contrib/systemd', u), 'utf8');
    writeFileSync(path.join(units, u), src.replaceAll('/usr/local/bin/corral', BIN));
  }
  const rt = path.join(ROOT, 'sd-run');
  mkdirSync(rt, { mode: 0o700, recursive: true });
  const v = execFileSync('systemd-analyze', ['--user', 'verify', path.join(units, 'corral.socket'), path.join(units, 'corral.service')],
    { env: { ...process.env, XDG_RUNTIME_DIR: rt }, stdio: ['ignore', 'pipe', 'pipe'] }).toString();
  assert.equal(v.trim(), '');
  const sock = path.join(ROOT, 'activated.sock');
  const env = serviceEnv();
  const p = spawn('systemd-socket-activate', ['-l', sock, '-E', `CORRAL_ENGINE=${ENGINE}`, '-E', `XDG_CONFIG_HOME=${CONFIG_HOME}`,
    '-E', 'CORRAL_HOST_SERVERS=false', '-E', 'CORRAL_AUDIT_LOG=off', '-E', `XDG_RUNTIME_DIR=${RUNTIME_DIR}`, BIN, 'serve'],
  { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  p.stderr.on('data', (d) => { log += d; });
  try {
    const deadline = Date.now() + 5000;
    while (!/Listening on/.test(log) && Date.now() < deadline) await sleep(50);
    const r = await raw(null, { socketPath: sock, body: INIT });
    assert.equal(r.status, 200, r.body);
    assert.match(JSON.parse(r.body).result.serverInfo.name, /corral/);
    assert.match(log, /listening on unix:.*activated\.sock \(from systemd\)/);
  } finally {
    p.kill('SIGTERM');
    await new Promise((r) => (p.exitCode !== null ? r() : p.on('exit', r)));
  }
});

// ------------------------------------------------------------------- main

const only = process.env.E2E_ONLY ? new RegExp(process.env.E2E_ONLY) : null;
const chosen = tests.filter((t) => !only || only.test(t.name));
out('TAP version 13');
out(`1..${chosen.length}`);
let failed = 0;
let svc = null;
try {
  svc = await new Service().start();
} catch (e) {
  out(`Bail out! ${e.message}`);
  process.exit(1);
}
for (const [i, t] of chosen.entries()) {
  try {
    await Promise.race([t.fn(svc), sleep(120000).then(() => { throw new Error('no end within 120 s'); })]);
    out(`ok ${i + 1} - ${t.name}`);
  } catch (e) {
    failed++;
    out(`not ok ${i + 1} - ${t.name}`);
    out(`  # ${String(e && e.stack || e).split('\n').slice(0, 6).join('\n  # ')}`);
    if (VERBOSE) out(`  # corral: ${svc.log.split('\n').slice(-30).join('\n  # ')}`);
  }
}
const code = await svc.stop();
if (code !== 0) {
  failed++;
  out(`not ok ${chosen.length + 1} - the service stops cleanly on SIGTERM (exit ${code})`);
}
rmSync(ROOT, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
