#!/usr/bin/env node
// The service's cost, measured in one run (tests/bench/README.md,
// "The service"):
//   1. warm calls (run_python print(1), and ping) through the three ways in,
//      interleaved call by call so that the machine's noise falls on all of
//      them alike: stdio (a corral of its own, what hosts start today),
//      streamable HTTP over loopback TCP (the SDK's client, with the token),
//      and `corral connect` (stdio relayed over the service's unix socket);
//      p50 and p95 of each, and the difference to stdio (target: within 1 ms);
//      then the same with lean clients (JSON lines on a pipe, HTTP/1.1
//      written on one kept-alive socket), which leave out any client
//      library and show corral's own cost; the SDK's HTTP row is judged
//      without what its client costs by itself (its ping less the lean
//      ping, against stdio's);
//   2. one service holding 100 MCP sessions at once (no sandboxes open): its
//      RSS before, with them, and after they ended.
//
//   CORRAL_ENGINE=unix:///path node tests/bench/service.mjs [--calls N] [--sessions N]
//
// The SDK client comes from tests/e2e/node_modules. Exit status 0 when it
// ran (the figures are for people: a target missed prints MISSED, not a
// failure), 1 when something broke.

import { spawn } from 'node:child_process';
import net from 'node:net';
import readline from 'node:readline';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../e2e/lib/net.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');
const require = createRequire(path.join(ROOT, 'tests/e2e/package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { CallToolResultSchema } = require('@modelcontextprotocol/sdk/types.js');

const argv = process.argv.slice(2);
let CALLS = 30;
let SESSIONS = 100;
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--calls') CALLS = Number(argv[++i]);
  else if (argv[i] === '--sessions') SESSIONS = Number(argv[++i]);
  else {
    process.stderr.write(`service.mjs: unknown argument ${argv[i]}\n`);
    process.exit(2);
  }
}
const ENGINE = process.env.CORRAL_ENGINE;
if (!ENGINE) {
  process.stderr.write('service.mjs: CORRAL_ENGINE is not set\n');
  process.exit(2);
}
const BIN = path.resolve(ROOT, process.env.CORRAL_BIN || 'build/corral');
const IMAGE = process.env.CORRAL_IMAGE || 'corral-python:latest';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const dir = mkdtempSync(path.join(os.tmpdir(), 'corral-bench-service-'));
const runDir = path.join(dir, 'run');
mkdirSync(runDir, { mode: 0o700 });
const env = { ...process.env, XDG_RUNTIME_DIR: runDir, XDG_CONFIG_HOME: path.join(dir, 'config'),
  CORRAL_ENGINE: ENGINE, CORRAL_IMAGE: IMAGE, CORRAL_IMAGES: IMAGE, CORRAL_HOST_SERVERS: 'false',
  CORRAL_AUDIT_LOG: 'off', CORRAL_LOG_LEVEL: 'warning', CORRAL_MAX_CLIENTS: String(SESSIONS + 16) };
delete env.CORRAL_TOKEN;

const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length - 1) * p))];
};

// Lean clients: JSON-RPC without the SDK, so that what is measured is
// corral's transport and not the client's. Lines on a child's stdio (corral
// serve, corral connect), or POSTs on one kept-alive HTTP connection.
function lineClient(args) {
  const child = spawn(BIN, args, { env, stdio: ['pipe', 'pipe', 'ignore'] });
  const waiting = new Map();
  readline.createInterface({ input: child.stdout }).on('line', (l) => {
    let m;
    try { m = JSON.parse(l); } catch { return; }
    const w = waiting.get(m.id);
    if (w) { waiting.delete(m.id); w(m); }
  });
  let id = 0;
  const send = (method, params) => new Promise((resolve) => {
    const rid = ++id;
    waiting.set(rid, resolve);
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: rid, method, params }) + '\n');
  });
  const init = async () => {
    await send('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'lean', version: '1' } });
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
  };
  return { send, init, close: () => { child.stdin.end(); return new Promise((r) => (child.exitCode !== null ? r() : child.on('exit', r))); } };
}

// HTTP/1.1 written and read on one kept-alive socket, as the line client
// writes lines on a pipe: no HTTP library between the bench and corral.
// Answers are JSON with Content-Length (corral's answer to a request that
// asked for no progress); anything else is an error here.
function httpLean(port, token) {
  const sock = net.connect(port, '127.0.0.1');
  sock.setNoDelay(true);
  let buf = Buffer.alloc(0);
  let waiter = null;
  let sid = null;
  const fail = (e) => { if (waiter) { const w = waiter; waiter = null; w.reject(e); } };
  sock.on('error', fail);
  sock.on('close', () => fail(new Error('the service closed the connection')));
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0 || !waiter) return;
    const head = buf.subarray(0, end).toString('latin1');
    if (/^transfer-encoding:/im.test(head)) return fail(new Error(`not a plain JSON answer: ${head}`));
    const len = Number(/^content-length: *(\d+)/im.exec(head)?.[1] ?? 0);
    if (buf.length < end + 4 + len) return;
    const body = buf.subarray(end + 4, end + 4 + len).toString('utf8');
    buf = buf.subarray(end + 4 + len);
    const s = /^mcp-session-id: *(\S+)/im.exec(head);
    if (s) sid = s[1];
    const w = waiter;
    waiter = null;
    const status = Number(head.split(' ')[1]);
    if (status >= 300) w.reject(new Error(`HTTP ${status}: ${body}`));
    else w.resolve(body ? JSON.parse(body) : null);
  });
  const post = (msg) => new Promise((resolve, reject) => {
    waiter = { resolve, reject };
    const b = JSON.stringify(msg);
    const session = sid ? `Mcp-Session-Id: ${sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n` : '';
    sock.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n` +
      `Accept: application/json, text/event-stream\r\nAuthorization: Bearer ${token}\r\n${session}` +
      `Content-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`);
  });
  let id = 0;
  const send = (method, params) => post({ jsonrpc: '2.0', id: ++id, method, params });
  const init = async () => {
    await send('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'lean', version: '1' } });
    await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  };
  return { send, init, close: async () => { sock.end(); } };
}

async function main() {
  const port = await freePort();
  const svc = spawn(BIN, ['serve', '--listen', `unix,tcp:127.0.0.1:${port}`], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  svc.stderr.on('data', (d) => { log += d; });
  const clients = [];
  try {
    for (let i = 0; i < 200 && !/listening on tcp:/.test(log); i++) await sleep(50);
    // The log level hides "listening": wait for the token file instead.
    const tokenFile = path.join(dir, 'config', 'corral', 'token');
    for (let i = 0; i < 200; i++) {
      try { readFileSync(tokenFile); break; } catch { await sleep(50); }
    }
    const token = readFileSync(tokenFile, 'utf8').trim();
    const url = new URL(`http://127.0.0.1:${port}/mcp`);

    const ways = {};
    ways.stdio = new Client({ name: 'bench-stdio', version: '1' });
    await ways.stdio.connect(new StdioClientTransport({ command: BIN, args: ['serve'], env, stderr: 'ignore' }));
    ways.http = new Client({ name: 'bench-http', version: '1' });
    await ways.http.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    ways.connect = new Client({ name: 'bench-connect', version: '1' });
    await ways.connect.connect(new StdioClientTransport({ command: BIN, args: ['connect'], env, stderr: 'ignore' }));
    clients.push(...Object.values(ways));

    const call = async (c) => {
      const t0 = performance.now();
      const r = await c.callTool({ name: 'run_python', arguments: { code: 'print(1)' } }, CallToolResultSchema, { timeout: 60000 });
      const ms = performance.now() - t0;
      if (r.structuredContent?.status !== 'ok') throw new Error(`a call answered ${JSON.stringify(r).slice(0, 300)}`);
      return ms;
    };
    const ping = async (c) => {
      const t0 = performance.now();
      await c.ping();
      return performance.now() - t0;
    };
    // Before each round: both pools full again and nothing starting, so
    // that every call meets a ready sandbox and no container start (a
    // second of CPU on this kind of machine) runs beside the calls.
    // poolOf: a way's pool (sandbox_status), for the ways that have their
    // own corral (stdio) and for the service.
    const sdkPool = async (c) => (await c.callTool({ name: 'sandbox_status', arguments: {} })).structuredContent?.pool || {};
    const settle = async (pools) => {
      const deadline = Date.now() + 15000;
      for (const poolOf of pools) {
        for (;;) {
          const pool = await poolOf();
          if ((pool.ready >= 2 && pool.starting === 0) || Date.now() > deadline) break;
          await sleep(50);
        }
      }
      await sleep(100); // the last removals
    };
    // Warm-up: the pools fill, the connections open.
    for (const c of Object.values(ways)) for (let i = 0; i < 5; i++) await call(c);
    await sleep(2000);
    // CALLS rounds, each way once a round after the pools settled, in an
    // order that turns (none is always first after the settle): the call
    // and ping times of each way.
    const rounds = async (clients, callOf, pingOf, pools) => {
      const t = Object.fromEntries(Object.keys(clients).map((w) => [w, []]));
      const p = Object.fromEntries(Object.keys(clients).map((w) => [w, []]));
      for (let i = 0; i < CALLS; i++) {
        const order = Object.keys(clients);
        for (let k = 0; k < i % order.length; k++) order.push(order.shift());
        for (const w of order) {
          await settle(pools);
          t[w].push(await callOf(clients[w]));
          p[w].push(await pingOf(clients[w]));
        }
      }
      return { t, p };
    };
    // A row per way, each against stdio's call p50; how many missed. For
    // the SDK rows, `client` is what the SDK's HTTP client costs by itself
    // beyond its stdio client: the HTTP row is judged on what is left,
    // corral's part.
    const table = ({ t, p }, client = 0) => {
      const base = pct(t.stdio, 0.5);
      let missed = 0;
      for (const w of Object.keys(t)) {
        const d = pct(t[w], 0.5) - base;
        const own = w === 'http' ? client : 0;
        const sign = (x) => `${x >= 0 ? '+' : ''}${x.toFixed(2)} ms`;
        let verdict = '';
        if (w !== 'stdio') {
          verdict = `${sign(d)}${own ? `, corral's part ${sign(d - own)}` : ''} ${d - own <= 1 ? 'ok' : 'MISSED'} (target: within 1 ms)`;
          if (d - own > 1) missed++;
        }
        console.log(`  ${w.padEnd(9)} ${pct(t[w], 0.5).toFixed(2).padStart(7)} ms ${pct(t[w], 0.95).toFixed(2).padStart(7)} ms ${pct(p[w], 0.5).toFixed(2).padStart(7)} ms   ${verdict}`);
      }
      return missed;
    };
    const sdk = await rounds(ways, call, ping, [() => sdkPool(ways.stdio), () => sdkPool(ways.http)]);

    // The same, with lean clients: corral's own cost of each way in.
    const lean = { stdio: lineClient(['serve']), http: httpLean(port, token), connect: lineClient(['connect']) };
    for (const c of Object.values(lean)) await c.init();
    const leanCall = async (c) => {
      const t0 = performance.now();
      const m = await c.send('tools/call', { name: 'run_python', arguments: { code: 'print(1)' } });
      const ms = performance.now() - t0;
      if (m?.result?.structuredContent?.status !== 'ok') throw new Error(`a lean call answered ${JSON.stringify(m).slice(0, 300)}`);
      return ms;
    };
    const leanPing = async (c) => {
      const t0 = performance.now();
      await c.send('ping', {});
      return performance.now() - t0;
    };
    for (const c of Object.values(lean)) for (let i = 0; i < 3; i++) await leanCall(c);
    const leanPool = async (c) => (await c.send('tools/call', { name: 'sandbox_status', arguments: {} }))?.result?.structuredContent?.pool || {};
    const leanTimes = await rounds(lean, leanCall, leanPing, [() => leanPool(lean.stdio), () => leanPool(lean.http)]);
    // What the SDK's HTTP client costs by itself beyond its stdio client,
    // against this same corral: a ping is answered at once, so the SDK's
    // ping less the lean client's ping is the client's cost a request.
    const p50 = (xs) => pct(xs, 0.5);
    const own = (p50(sdk.p.http) - p50(leanTimes.p.http)) - (p50(sdk.p.stdio) - p50(leanTimes.p.stdio));
    console.log(`corral service bench: ${CALLS} warm run_python print(1) calls and pings per way, interleaved, each after both pools refilled; nproc ${os.cpus().length}, load ${os.loadavg()[0].toFixed(2)}`);
    console.log('  way        call p50   call p95   ping p50   vs stdio (call p50)');
    let missed = table(sdk, own);
    console.log(`  the SDK's HTTP client costs ${own.toFixed(2)} ms a request more than its stdio client by itself (its ping less the lean client's ping, HTTP against stdio)`);
    console.log('  the same with lean clients (JSON lines on a pipe; HTTP/1.1 written on one kept-alive socket):');
    missed += table(leanTimes);
    for (const c of Object.values(lean)) await c.close();

    // 100 MCP sessions at once, none with a sandbox.
    const before = rssKiB(svc.pid);
    const many = [];
    const t0 = performance.now();
    for (let i = 0; i < SESSIONS; i++) {
      const c = new Client({ name: `bench-${i}`, version: '1' });
      await c.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
      many.push(c);
    }
    const opened = performance.now() - t0;
    const pings = await Promise.all(many.map((c) => ping(c)));
    const during = rssKiB(svc.pid);
    const status = await ways.http.callTool({ name: 'sandbox_status', arguments: {} });
    for (const c of many) await c.transport.terminateSession().catch(() => {});
    for (const c of many) await c.close();
    await sleep(500);
    const after = rssKiB(svc.pid);
    console.log(`  ${SESSIONS} MCP sessions (GET streams open, no sandboxes): opened in ${opened.toFixed(0)} ms, a ping from each at once p50 ${pct(pings, 0.5).toFixed(1)} ms, p95 ${pct(pings, 0.95).toFixed(1)} ms`);
    console.log(`  service RSS: ${(before / 1024).toFixed(1)} MiB before, ${(during / 1024).toFixed(1)} MiB with them (${((during - before) / SESSIONS).toFixed(1)} KiB a session), ${(after / 1024).toFixed(1)} MiB after they ended`);
    console.log(`  pool: ${JSON.stringify({ ready: status.structuredContent?.pool?.ready, containers: status.structuredContent?.pool?.containers })}`);
    console.log(missed ? `  ${missed} row(s) MISSED the 1 ms target in this run` : '  every way met the 1 ms target in this run');
  } finally {
    for (const c of clients) await c.close().catch(() => {});
    svc.kill('SIGTERM');
    await new Promise((r) => (svc.exitCode !== null ? r() : svc.on('exit', r)));
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`service.mjs: ${e.stack || e}`);
  process.exit(1);
});
