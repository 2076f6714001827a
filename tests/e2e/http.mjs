#!/usr/bin/env node
// End-to-end check of streamable HTTP upstream servers: the official MCP
// SDK client drives build/corral over stdio; corral's config names MCP
// servers reached over HTTP; sandboxed code calls them. Prints TAP version 13.
//
//   CORRAL_ENGINE=unix:///run/corral-dev/podman.sock node http.mjs
//
// The servers:
//   remote    server-everything's streamableHttp transport (event-stream
//             answers, sessions), as a user would configure it
//   proxied   the same server behind a recording proxy in this file, which
//             shows what corral sends and can make requests fail
//   json      a small server in this file that keeps no session and answers
//             with application/json (a batch for tools/call "add"), or with
//             an event stream (tools/call "streamed_add": a comment, a
//             notification, a ping request it waits to have answered, then
//             the response over several data lines and writes, CRLF ends)
//   moved     the json server behind a same-origin 307 redirect
//   offsite   the json server behind a 307 to another host name (refused)
//   down      a port where nothing listens
//
// Environment: CORRAL_ENGINE (required; exit 77 without it), CORRAL_BIN
// (default ../../build/corral), CORRAL_IMAGE, E2E_ONLY (run only the tests
// whose name matches this regex), E2E_VERBOSE=1 (what each test saw, and
// corral's whole stderr on failure). Exit status: 0 passed, 1 failed, 77 skipped.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { inspect } from 'node:util';
import { freePort } from './lib/net.mjs';
import { startEverythingHttp } from './lib/servers.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ENGINE = process.env.CORRAL_ENGINE;
const BIN = path.resolve(HERE, process.env.CORRAL_BIN || '../../build/corral');
const VERBOSE = process.env.E2E_VERBOSE === '1';
const SECRET = 'secret-token-123';
const PROTOCOL = '2025-06-18'; // what corral asks for in initialize

const out = (line) => process.stdout.write(line + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const clip = (s, n = 1500) => (String(s).length > n ? String(s).slice(0, n) + '...' : String(s));

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

// ---------------------------------------------------------------- servers


// Listen on 127.0.0.1:port and keep the sockets, so that stop() is abrupt.
async function listen(handler, port = 0) {
  const server = http.createServer(handler);
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    server,
    port: server.address().port,
    stop: () => new Promise((r) => { server.close(r); server.closeAllConnections(); }),
  };
}

function readBody(req) {
  return new Promise((resolve) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
  });
}

// A recording proxy in front of `targetPort`. Each request is logged with
// its method, headers and JSON-RPC message; rules (first match wins) answer
// in the target's place.
class Proxy {
  constructor(targetPort) {
    this.target = targetPort;
    this.log = [];
    this.rules = [];
  }

  async start(port = 0) {
    this.http = await listen((req, res) => this.handle(req, res), port);
    this.port = this.http.port;
    return this;
  }

  stop() { return this.http.stop(); }

  async handle(req, res) {
    const body = await readBody(req);
    let msg = null;
    try { msg = body.length ? JSON.parse(body) : null; } catch { /* not JSON */ }
    const rec = { method: req.method, headers: { ...req.headers }, msg };
    this.log.push(rec);
    const i = this.rules.findIndex((r) => r.match(rec));
    if (i >= 0) {
      const rule = this.rules[i];
      if (rule.once) this.rules.splice(i, 1);
      rec.status = rule.status;
      res.writeHead(rule.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(rule.body ?? {}));
      return;
    }
    const up = http.request({ host: '127.0.0.1', port: this.target, method: req.method, path: req.url, headers: req.headers }, (ur) => {
      rec.status = ur.statusCode;
      rec.session = ur.headers['mcp-session-id'];
      res.writeHead(ur.statusCode, ur.headers);
      ur.pipe(res);
    });
    up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
    up.end(body);
  }

  posts(method) { return this.log.filter((r) => r.method === 'POST' && r.msg?.method === method); }
}

// A minimal streamable HTTP MCP server without sessions: initialize,
// tools/list, ping, and two tools: "add" answers with application/json (a
// batch: a log notification, then the result), "streamed_add" with an event
// stream (see the top of this file). /old redirects (307) to /mcp on the
// same origin, /offsite to the same port under another host name.
async function startJsonServer() {
  const log = [];
  const waiting = new Map(); // id of a request of ours -> resolve(its response)
  const tools = [
    { name: 'add', description: 'Adds two numbers (JSON answers)', inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } },
    { name: 'streamed_add', description: 'Adds two numbers (event stream answers)', inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } },
    { name: 'big', description: 'Answers with n bytes of text (event stream, in 64 KiB writes)', inputSchema: { type: 'object', properties: { n: { type: 'number' } }, required: ['n'] } },
  ];
  const answer = (m) => {
    if (m.method === 'initialize')
      return { protocolVersion: m.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'json-fake', version: '1.0.0' } };
    if (m.method === 'tools/list') return { tools };
    if (m.method === 'tools/call' && m.params?.name === 'add')
      return { content: [{ type: 'text', text: `sum=${m.params.arguments.a + m.params.arguments.b}` }] };
    if (m.method === 'ping') return {};
    return null;
  };
  const srv = await listen(async (req, res) => {
    const body = await readBody(req);
    const rec = { method: req.method, url: req.url, headers: { ...req.headers } };
    log.push(rec);
    if (req.url === '/old' || req.url === '/offsite') {
      const host = req.url === '/old' ? '127.0.0.1' : 'localhost';
      res.writeHead(307, { location: `http://${host}:${srv.port}/mcp` });
      res.end();
      return;
    }
    if (req.method !== 'POST' || req.url !== '/mcp') {
      res.writeHead(405);
      res.end();
      return;
    }
    let m;
    try { m = JSON.parse(body); } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
      return;
    }
    rec.msg = m;
    if (m.id === undefined || m.method === undefined) { // a notification or a response: taken
      if (m.method === undefined && waiting.has(m.id)) waiting.get(m.id)(m);
      res.writeHead(202);
      res.end();
      return;
    }
    if (m.method === 'tools/call' && m.params?.name === 'big') {
      const text = 'abcdefghijklmnopqrstuvwxyz0123456789'.repeat(Math.ceil(m.params.arguments.n / 36)).slice(0, m.params.arguments.n);
      const event = `data: ${JSON.stringify({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text }] } })}\n\n`;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let i = 0; i < event.length; i += 65536) res.write(event.slice(i, i + 65536));
      res.end();
      return;
    }
    if (m.method === 'tools/call' && m.params?.name === 'streamed_add') {
      const { a, b } = m.params.arguments;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(': a comment, as keep-alives are\r\n\r\n');
      res.write(`event: message\r\nid: 1\r\nretry: 500\r\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'streaming' } })}\r\n\r\n`);
      const pingId = `srv-ping-${m.id}`;
      const answered = new Promise((resolve) => waiting.set(pingId, resolve));
      res.write(`data: ${JSON.stringify({ jsonrpc: '2.0', id: pingId, method: 'ping' })}\r\n\r\n`);
      const pong = await withTimeout(answered, 5000, 'the answer to our ping').catch(() => null);
      const reply = { jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: `streamed sum=${a + b}; ping ${pong ? 'answered' : 'unanswered'}` }] } };
      const event = `data: ${JSON.stringify(reply, null, 1).split('\n').join('\r\ndata: ')}\r\n\r\n`;
      res.write(event.slice(0, 25));
      await sleep(50);
      res.end(event.slice(25));
      return;
    }
    const result = answer(m);
    const reply = result ? { jsonrpc: '2.0', id: m.id, result } : { jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'Method not found' } };
    const payload = m.method === 'tools/call'
      ? [{ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'adding' } }, reply]
      : reply;
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
    res.end(JSON.stringify(payload));
  });
  return { ...srv, log };
}

// A server that echoes the request in its errors, headers and all, as some
// frameworks' debug pages do. tools/call of "echo_text" answers 500 with a
// text/plain body (the arguments, then every header, authorization first);
// "echo_json" answers 500 with a JSON-RPC error whose message quotes the
// arguments, then the headers. POST /init/N refuses initialize with a text body of N dots and
// then the headers, the authorization header first.
async function startEchoServer() {
  const tools = ['echo_text', 'echo_json'].map((name) => ({ name, description: 'Fails, echoing the request',
    inputSchema: { type: 'object', properties: { pad: { type: 'string' } } } }));
  const headerText = (h) => Object.entries(h).map(([k, v]) => `${k}: ${v}`).join('\n');
  return listen(async (req, res) => {
    const body = (await readBody(req)).toString('utf8');
    let m = null;
    try { m = JSON.parse(body); } catch { /* not JSON */ }
    const init = /^\/init\/(\d+)$/.exec(req.url);
    const { authorization, ...rest } = req.headers;
    if (init) {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(`refused: ${'.'.repeat(Number(init[1]))} authorization: ${authorization}\n${headerText(rest)}`);
      return;
    }
    if (!m || m.id === undefined) { res.writeHead(202); res.end(); return; }
    if (m.method === 'initialize' || m.method === 'tools/list' || m.method === 'ping') {
      const result = m.method === 'initialize'
        ? { protocolVersion: m.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'echo', version: '1' } }
        : m.method === 'tools/list' ? { tools } : {};
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: m.id, result }));
      return;
    }
    if (m.params?.name === 'echo_json') {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: m.id, error: { code: -32603,
        message: `bad request ${JSON.stringify(m.params.arguments)} from ${JSON.stringify({ authorization, ...rest })}` } }));
      return;
    }
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end(`bad request: ${JSON.stringify(m.params?.arguments)}\nauthorization: ${authorization}\n${headerText(rest)}`);
  });
}

// ---------------------------------------------------------------- corral

class Corral {
  constructor(env) { this.env = env; this.log = ''; this.results = []; }

  async start() {
    this.transport = new StdioClientTransport({ command: BIN, args: [], env: this.env, stderr: 'pipe' });
    this.transport.stderr.on('data', (d) => { this.log += d.toString('utf8'); });
    this.stderrEnd = new Promise((r) => this.transport.stderr.once('end', r));
    this.client = new Client({ name: 'corral-e2e-http', version: '1.0.0' }, { capabilities: {} });
    await withTimeout(this.client.connect(this.transport), 15000, 'initialize');
    return this;
  }

  async tool(name, args, timeoutMs = 90000) {
    const r = await this.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: timeoutMs });
    this.results.push(r);
    return r;
  }

  // run_python; returns the structuredContent, and the object the code
  // printed after @@ when it did.
  // The record line is for the test to parse, whole: the result may carry
  // up to output_limit (1 MiB), not the 20,000 characters a model gets.
  async python(code, servers, timeoutS = 60) {
    const r = await this.tool('run_python', { code, servers, timeout_s: timeoutS, result_max_chars: 1 << 20 });
    const sc = r.structuredContent;
    const line = (sc?.stdout ?? '').split('\n').find((l) => l.startsWith('@@'));
    return { sc, out: line ? JSON.parse(line.slice(2)) : null };
  }

  async servers() {
    const r = await this.tool('list_servers', {});
    return Object.fromEntries(r.structuredContent.servers.map((s) => [s.name, s]));
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    const proc = this.transport?._process;
    const exited = proc && proc.exitCode === null ? new Promise((r) => proc.once('exit', r)) : Promise.resolve();
    await withTimeout(this.client.close(), 8000, 'close').catch(() => {});
    await withTimeout(exited, 5000, 'exit').catch(() => {});
    // The last of its log, written as it exited.
    await withTimeout(this.stderrEnd, 5000, 'the end of its stderr').catch(() => {});
  }
}

// Sandboxed code that records what happened and prints it as one line.
const PRELUDE = String.raw`
import asyncio, json
_out = {}
def rec(k, v):
    _out[k] = v
def catch(fn):
    try:
        r = fn()
        return {"ok": True, "text": r.text}
    except Exception as e:
        return {"ok": False, "cls": type(e).__name__, "code": getattr(e, "code", None), "msg": str(e)}
`;
const py = (body) => `${PRELUDE}\n${body}\nprint("@@" + json.dumps(_out))\n`;

// ---------------------------------------------------------------- the tests

const tests = [];
const ONLY = process.env.E2E_ONLY ? new RegExp(process.env.E2E_ONLY) : null;
const test = (name, fn, timeoutMs = 120000) => { if (!ONLY || ONLY.test(name)) tests.push({ name, fn, timeoutMs }); };
const S = {}; // shared by the tests, which run in order

test('search_tools finds remote\'s echo (server-everything over streamable HTTP)', async (t) => {
  const r = await S.corral.tool('search_tools', { query: 'echo' });
  t.result = r.structuredContent;
  assert.notEqual(r.isError, true, 'search_tools is not an error');
  const hits = r.structuredContent.tools.map((x) => `${x.server}.${x.name}`);
  assert.ok(hits.includes('remote.echo'), `remote.echo is found (${hits.join(', ')})`);
  assert.ok(hits.includes('proxied.echo'), 'and proxied.echo');
});

test('run_python: mcp_remote.echo(message="over http") prints its text', async (t) => {
  const r = await S.corral.tool('run_python', { code: 'print(mcp_remote.echo(message="over http").text)', servers: ['remote'] });
  t.result = r.structuredContent;
  assert.equal(r.structuredContent.status, 'ok', 'run_python is ok');
  assert.equal(r.structuredContent.stdout, 'Echo: over http\n', 'it printed the echo');
});

test('list_servers: remote is connected over http with its tools', async (t) => {
  const s = await S.corral.servers();
  t.result = s;
  assert.equal(s.remote?.transport, 'http', 'transport http');
  assert.equal(s.remote.status, 'connected', 'status connected');
  assert.ok(Number.isInteger(s.remote.tools) && s.remote.tools > 5, `it has tools (${s.remote.tools})`);
  assert.equal(s.remote.error, null, 'no error');
});

test('concurrent calls, and a long call', async (t) => {
  const { sc, out: o } = await S.corral.python(py(`
async def main():
    rs = await asyncio.gather(*[mcp_proxied.get_sum(a=i, b=100) for i in range(12)])
    rec("sums", [r.text for r in rs])
    r = await mcp_proxied.trigger_long_running_operation(duration=1, steps=3)
    rec("long", r.text)
asyncio.run(main())
`), ['proxied']);
  t.result = sc;
  assert.equal(sc.status, 'ok', `run_python is ok (${clip(JSON.stringify(sc.error))}; ${clip(sc.stderr)})`);
  assert.equal(o.sums.length, 12);
  o.sums.forEach((s, i) => assert.match(s, new RegExp(`\\b${i + 100}\\b`), `sum ${i}`));
  assert.match(o.long, /Long running operation completed/, 'the long operation completed');
});

test('the wire: headers, session id and protocol version as the transport requires', async (t) => {
  const log = S.proxy.log;
  t.result = log.map((r) => ({ method: r.method, rpc: r.msg?.method ?? (r.msg?.id !== undefined ? 'response' : null), session: r.headers['mcp-session-id'], version: r.headers['mcp-protocol-version'], status: r.status }));
  const init = S.proxy.posts('initialize');
  assert.equal(init.length, 1, 'one initialize so far');
  const h = init[0].headers;
  assert.equal(h.authorization, `Bearer ${SECRET}`, 'the configured Authorization header is sent');
  assert.equal(h['content-type'], 'application/json');
  assert.ok(/application\/json/.test(h.accept) && /text\/event-stream/.test(h.accept), `Accept names both (${h.accept})`);
  assert.equal(h['mcp-session-id'], undefined, 'initialize carries no session id');
  assert.equal(h['mcp-protocol-version'], undefined, 'nor a protocol version');
  const session = init[0].session;
  assert.ok(session, 'the server gave a session id');
  const later = log.slice(log.indexOf(init[0]) + 1).filter((r) => r.method === 'POST');
  assert.ok(later.some((r) => r.msg?.method === 'notifications/initialized'), 'notifications/initialized was sent');
  assert.ok(later.some((r) => r.msg?.method === 'tools/call'), 'tools/call was sent');
  for (const r of later) {
    const what = `${r.msg?.method ?? 'response'}`;
    assert.equal(r.headers['mcp-session-id'], session, `${what} carries the session id`);
    assert.equal(r.headers['mcp-protocol-version'], PROTOCOL, `${what} carries MCP-Protocol-Version`);
    assert.equal(r.headers.authorization, `Bearer ${SECRET}`, `${what} carries the configured header`);
  }
  const gets = log.filter((r) => r.method === 'GET');
  assert.ok(gets.length >= 1, 'corral opened the GET stream for the server\'s own messages');
  assert.equal(gets[0].headers.accept, 'text/event-stream', 'GET accepts text/event-stream');
  assert.equal(gets[0].headers['mcp-session-id'], session, 'GET carries the session id');
  assert.equal(gets[0].headers.authorization, `Bearer ${SECRET}`, 'and the configured header');
  S.session = session;
});

test('the GET stream brings what the server sends unasked (simulated logging)', async (t) => {
  const { sc, out: o } = await S.corral.python(py(`
rec("r", catch(lambda: mcp_remote.toggle_simulated_logging()))
`), ['remote']);
  t.result = sc;
  assert.equal(sc.status, 'ok');
  assert.match(o.r.text ?? '', /Started simulated/, `logging started (${JSON.stringify(o.r)})`);
  const seen = () => /upstream remote: "[A-Za-z]+[- ]level[- ]message/.test(S.corral.log);
  for (let i = 0; i < 80 && !seen(); i++) await sleep(100);
  assert.ok(seen(), 'a log message from remote reached corral\'s log');
});

test('an expired session (HTTP 404) fails that call, and the next call starts a new session', async (t) => {
  const old = S.session;
  S.proxy.rules.push({ once: true, status: 404, match: (r) => r.headers['mcp-session-id'] === old && r.msg?.method === 'tools/call',
    body: { jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } } });
  const { sc, out: o } = await S.corral.python(py(`
rec("first", catch(lambda: mcp_proxied.echo(message="one")))
rec("second", catch(lambda: mcp_proxied.echo(message="two")))
`), ['proxied']);
  t.result = { sc, inits: S.proxy.posts('initialize').map((r) => r.session) };
  assert.equal(sc.status, 'ok');
  assert.equal(o.first.ok, false, 'the call that met the 404 failed');
  assert.equal(o.first.cls, 'ServerUnavailable', `as ServerUnavailable (${o.first.cls})`);
  assert.match(o.first.msg, /session/i, `its message says the session is gone: ${o.first.msg}`);
  assert.equal(o.second.ok, true, `the next call works (${clip(JSON.stringify(o.second))})`);
  assert.equal(o.second.text, 'Echo: two');
  const inits = S.proxy.posts('initialize');
  assert.equal(inits.length, 2, 'corral initialized again');
  assert.equal(inits[1].headers['mcp-session-id'], undefined, 'without the old session id');
  assert.ok(inits[1].session && inits[1].session !== old, 'and got a new session');
  const after = S.proxy.log.slice(S.proxy.log.indexOf(inits[1]) + 1).filter((r) => r.method === 'POST');
  assert.ok(after.length > 0 && after.every((r) => r.headers['mcp-session-id'] === inits[1].session), 'later POSTs carry the new session id');
  S.session = inits[1].session;
});

test('HTTP 500 on a call fails only that call, naming the URL', async (t) => {
  S.proxy.rules.push({ once: true, status: 500, match: (r) => r.msg?.method === 'tools/call',
    body: { jsonrpc: '2.0', id: null, error: { code: -32603, message: 'upstream exploded' } } });
  const inits = S.proxy.posts('initialize').length;
  const { sc, out: o } = await S.corral.python(py(`
rec("first", catch(lambda: mcp_proxied.echo(message="one")))
rec("second", catch(lambda: mcp_proxied.echo(message="two")))
`), ['proxied']);
  t.result = sc;
  assert.equal(sc.status, 'ok');
  assert.equal(o.first.ok, false, 'the call failed');
  assert.match(o.first.msg, /HTTP 500/, `its message has the status: ${o.first.msg}`);
  assert.match(o.first.msg, /upstream exploded/, 'and the server\'s message');
  assert.ok(o.first.msg.includes(`http://127.0.0.1:${S.proxy.port}/mcp`), 'and the URL');
  assert.equal(o.second.text, 'Echo: two', 'the next call works');
  assert.equal(S.proxy.posts('initialize').length, inits, 'on the same session (no new initialize)');
});

test('application/json answers (a batch for tools/call) from a server without sessions', async (t) => {
  const { sc, out: o } = await S.corral.python(py(`
rec("add", catch(lambda: mcp_json.add(a=2, b=40)))
rec("moved", catch(lambda: mcp_moved.add(a=1, b=1)))
`), ['json', 'moved']);
  t.result = { sc, log: S.json.log.map((r) => `${r.method} ${r.url} ${r.msg?.method ?? ''}`) };
  assert.equal(sc.status, 'ok');
  assert.deepEqual(o.add, { ok: true, text: 'sum=42' }, 'json.add answered');
  assert.deepEqual(o.moved, { ok: true, text: 'sum=2' }, 'moved.add answered after the same-origin redirect');
  const posts = S.json.log.filter((r) => r.url === '/mcp');
  assert.ok(posts.every((r) => r.headers['mcp-session-id'] === undefined), 'no session id is invented');
  assert.ok(posts.filter((r) => r.msg?.method !== 'initialize').every((r) => r.headers['mcp-protocol-version'] === PROTOCOL),
    'MCP-Protocol-Version after initialize');
});

test('an event stream with a comment, a notification and a server request before the response', async (t) => {
  const { sc, out: o } = await S.corral.python(py(`
rec("r", catch(lambda: mcp_json.streamed_add(a=20, b=22)))
`), ['json']);
  const pong = S.json.log.find((r) => r.msg?.id?.startsWith?.('srv-ping-'));
  t.result = { sc, pong };
  assert.equal(sc.status, 'ok');
  assert.deepEqual(o.r, { ok: true, text: 'streamed sum=42; ping answered' }, 'the response came, after corral answered the ping');
  assert.deepEqual(pong.msg.result, {}, 'corral answered ping with an empty result');
  assert.equal(pong.headers['mcp-protocol-version'], PROTOCOL, 'in a POST like any other');
  assert.match(S.corral.log, /upstream json: "streaming"/, 'the notification before it reached corral\'s log');
});

test('a 5 MiB result arrives whole; over the message limit it is TooLarge and the server stays usable', async (t) => {
  const { sc, out: o } = await S.corral.python(py(`
import hashlib
r = mcp_json.big(n=5 * 1024 * 1024).text
rec("big", [len(r), hashlib.sha256(r.encode()).hexdigest()])
`), ['json']);
  assert.equal(sc.status, 'ok', `run_python is ok (${clip(JSON.stringify(sc.error))})`);
  const { createHash } = await import('node:crypto');
  const n = 5 * 1024 * 1024;
  const want = 'abcdefghijklmnopqrstuvwxyz0123456789'.repeat(Math.ceil(n / 36)).slice(0, n);
  assert.deepEqual(o.big, [n, createHash('sha256').update(want).digest('hex')], 'the text is intact');

  // A second corral whose frames (so upstream messages: twice a frame)
  // hold 64 KiB.
  const small = await new Corral({ ...S.env, CORRAL_MAX_FRAME: '64k' }).start();
  try {
    const r = await small.python(py(`
rec("over", catch(lambda: mcp_json.big(n=200000)))
rec("after", catch(lambda: mcp_json.big(n=1000)))
`), ['json']);
    t.result = r;
    assert.equal(r.sc.status, 'ok');
    assert.equal(r.out.over.cls, 'TooLarge', `over the limit: TooLarge (${JSON.stringify(r.out.over)})`);
    assert.match(r.out.over.msg, /over 131072 bytes/, 'the message gives the limit');
    assert.equal(r.out.after.text?.length, 1000, `the next call works (${JSON.stringify(r.out.after).slice(0, 300)})`);
  } finally {
    await small.close();
  }
});

test('a redirect to another host is not followed; an unreachable server fails with its URL', async (t) => {
  const { sc, out: o } = await S.corral.python(py(`
rec("offsite", catch(lambda: mcp_offsite.add(a=1, b=1)))
rec("down", catch(lambda: mcp_down.add(a=1, b=1)))
`), ['offsite', 'down']);
  const s = await S.corral.servers();
  t.result = { sc, offsite: s.offsite, down: s.down };
  assert.equal(sc.status, 'ok');
  assert.equal(o.offsite.cls, 'ServerUnavailable', `offsite: ServerUnavailable (${JSON.stringify(o.offsite)})`);
  assert.match(o.offsite.msg, /redirects to http:\/\/localhost:\d+\/mcp/, `offsite: the message names the redirect: ${o.offsite.msg}`);
  assert.ok(!S.json.log.some((r) => /^localhost/.test(r.headers.host ?? '')), 'no request went to the other host');
  assert.equal(o.down.cls, 'ServerUnavailable', `down: ServerUnavailable (${JSON.stringify(o.down)})`);
  assert.ok(o.down.msg.includes(`127.0.0.1:${S.downPort}/mcp`), `down: the message names the URL: ${o.down.msg}`);
  assert.match(o.down.msg, /connect/i, 'and says it cannot connect');
  assert.equal(s.down.status, 'error', 'list_servers shows down as error');
  assert.ok(s.down.error.includes(`127.0.0.1:${S.downPort}`), `with the URL in its error: ${s.down.error}`);
  assert.equal(s.offsite.status, 'error');
});

test('the server goes away and comes back: calls fail clearly, then work again', async (t) => {
  await S.proxy.stop();
  const first = await S.corral.python(py('rec("r", catch(lambda: mcp_proxied.echo(message="gone")))'), ['proxied']);
  await S.proxy.start(S.proxy.port);
  const second = await S.corral.python(py('rec("r", catch(lambda: mcp_proxied.echo(message="back")))'), ['proxied']);
  t.result = { first: first.out, second: second.out };
  assert.equal(first.out.r.cls, 'ServerUnavailable', 'while it is down: ServerUnavailable');
  assert.ok(first.out.r.msg.includes(`127.0.0.1:${S.proxy.port}/mcp`), `naming the URL: ${first.out.r.msg}`);
  assert.equal(second.out.r.text, 'Echo: back', `once it is back the call works (${JSON.stringify(second.out.r)})`);
  const inits = S.proxy.posts('initialize');
  S.session = inits[inits.length - 1].session;
}, 180000);

test('server-everything restarts: corral notices the unknown session and starts a new one', async (t) => {
  await S.everything.stop();
  S.everything = await startEverythingHttp(S.everythingPort);
  // Either the GET stream (reopened a second after it broke) or the first
  // call meets the unknown session (HTTP 400 "No valid session ID" here).
  const { sc, out: o } = await S.corral.python(py(`
rec("first", catch(lambda: mcp_remote.echo(message="one")))
rec("second", catch(lambda: mcp_remote.echo(message="two")))
`), ['remote']);
  t.result = sc;
  assert.equal(sc.status, 'ok');
  if (!o.first.ok) {
    assert.equal(o.first.cls, 'ServerUnavailable', `the first call failed as ServerUnavailable (${JSON.stringify(o.first)})`);
    assert.match(o.first.msg, /session/i, 'saying the session is gone');
  } else {
    assert.equal(o.first.text, 'Echo: one');
  }
  assert.equal(o.second.text, 'Echo: two', `the second works (${JSON.stringify(o.second)})`);
  assert.match(S.corral.log, /server 'remote': http:\/\/127\.0\.0\.1:\d+\/mcp no longer knows the session/,
    'corral\'s log says the session was gone');
}, 180000);

test('an upstream that echoes request headers in its errors: no 4 bytes of the secret reach the sandbox, list_servers or the log, over 300 paddings', async (t) => {
  // The attack: the code chooses the length of its arguments, so it can
  // make corral's cut of the echo land anywhere inside the header value.
  const secret = 'Zq7xK9mWv2Lp4Rt8Hs3N';
  const windows = [...Array(secret.length - 3).keys()].map((i) => secret.slice(i, i + 4));
  const leaks = (text) => windows.filter((w) => text.includes(w));
  const echo = await startEchoServer();
  const root = mkdtempSync(path.join(tmpdir(), 'corral-echo-'));
  mkdirSync(path.join(root, 'cfg/corral'), { recursive: true });
  // /init/N: the secret starts N + 32 bytes into the body; the excerpt is
  // cut at 200 bytes, so N from 140 to 175 moves the cut across all of it.
  const pads = [...Array(36).keys()].map((i) => 140 + i);
  const servers = { echo: { type: 'http', url: `http://127.0.0.1:${echo.port}/mcp`, headers: { Authorization: `Bearer ${secret}` } } };
  for (const n of pads)
    servers[`init-${n}`] = { type: 'http', url: `http://127.0.0.1:${echo.port}/init/${n}`, headers: { Authorization: `Bearer ${secret}` } };
  writeFileSync(path.join(root, 'cfg/corral/config.json'), JSON.stringify({ servers, host_servers: false, audit_log: 'off' }));
  const c = await new Corral({ ...S.env, XDG_CONFIG_HOME: path.join(root, 'cfg'), HOME: root }).start();
  try {
    for (const tool of ['echo_text', 'echo_json']) {
      const { sc, out: o } = await c.python(py(`
msgs = []
for n in range(300):
    try:
        mcp_echo.${tool}(pad="." * n)
        msgs.append("no error")
    except Exception as e:
        msgs.append(str(e))
rec("msgs", msgs)
`), ['echo'], 120);
      assert.equal(sc.status, 'ok', `${tool}: the run ended ok (${clip(sc.stderr, 300)})`);
      assert.equal(o.msgs.length, 300, `${tool}: 300 calls`);
      assert.ok(o.msgs.every((m) => /HTTP 500/.test(m)), `${tool}: every call failed with the server's 500: ${clip(o.msgs[0], 300)}`);
      const leaked = o.msgs.map((m, n) => ({ pad: n, m, pieces: leaks(m) })).filter((x) => x.pieces.length);
      t.result = { tool, leaked: leaked.length, examples: leaked.slice(0, 3) };
      assert.equal(leaked.length, 0, `${tool}: no 4-byte piece of the secret in what the sandbox saw`);
      const masked = o.msgs.filter((m) => m.includes('***')).length;
      t.result = { tool, masked, first: o.msgs[0], last: o.msgs[299] };
      assert.ok(masked >= 100, `${tool}: the secret, or its start, was in the excerpt and masked in many of them (${masked})`);
    }
    // search_tools starts every server: each init-N fails with the echo.
    await c.tool('search_tools', { query: 'nothing-matches-this' });
    const ls = await c.servers();
    const errors = pads.map((n) => ls[`init-${n}`]?.error ?? '');
    t.result = { errors: errors.slice(0, 3) };
    assert.ok(errors.every((e) => /HTTP 500/.test(e)), `every init-N failed with the echo: ${clip(errors[0], 300)}`);
    assert.ok(errors.filter((e) => e.includes('***')).length >= 20, 'the secret, or its start, was masked in most');
    assert.deepEqual(errors.filter((e) => leaks(e).length), [], 'no 4-byte piece of the secret in list_servers');
    assert.deepEqual(leaks(JSON.stringify(c.results)), [], 'nor in any tool result');
  } finally {
    await c.close();
    await echo.stop();
    rmSync(root, { recursive: true, force: true });
  }
  assert.deepEqual(leaks(c.log), [], 'nor in corral\'s log (debug level)');
}, 240000);

test('shutdown ends the session with DELETE; the secret shows nowhere', async (t) => {
  const before = S.proxy.log.length;
  await S.corral.close();
  const del = S.proxy.log.slice(before).filter((r) => r.method === 'DELETE');
  const audit = existsSync(S.audit) ? readFileSync(S.audit, 'utf8') : '';
  t.result = { del: del.map((r) => r.headers['mcp-session-id']), stderr_tail: S.corral.log.slice(-1500) };
  assert.equal(del.length, 1, 'one DELETE reached the proxied server');
  assert.equal(del[0].headers['mcp-session-id'], S.session, 'for the live session');
  assert.equal(del[0].headers.authorization, `Bearer ${SECRET}`, 'with the configured header');
  assert.match(S.corral.log, /upstream remote: session ended/, 'corral ended remote\'s session too');
  assert.ok(S.corral.log.length > 0, 'corral wrote a log');
  assert.doesNotMatch(S.corral.log, /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: /, 'no sanitizer report');
  assert.ok(!S.corral.log.includes(SECRET), 'the secret is not in corral\'s stderr (debug level)');
  assert.ok(!JSON.stringify(S.corral.results).includes(SECRET), 'nor in any tool result');
  assert.ok(!audit.includes(SECRET), 'nor in the audit log');
  assert.ok(audit.includes('"remote"'), 'the audit log has the calls to remote');
});

// ---------------------------------------------------------------- main

async function setup() {
  const root = mkdtempSync(path.join(tmpdir(), 'corral-http-'));
  S.root = root;
  mkdirSync(path.join(root, 'cfg/corral'), { recursive: true });
  mkdirSync(path.join(root, 'state'), { recursive: true });
  S.audit = path.join(root, 'audit.jsonl');
  S.everything = await startEverythingHttp(await freePort());
  const everythingPort = Number(/listening on port (\d+)/i.exec(S.everything.log())[1]);
  S.everythingPort = everythingPort;
  S.proxy = await new Proxy(everythingPort).start();
  S.json = await startJsonServer();
  S.downPort = await freePort();
  const auth = { Authorization: `Bearer ${SECRET}` };
  const config = {
    servers: {
      remote: { type: 'http', url: `http://127.0.0.1:${everythingPort}/mcp`, headers: auth },
      proxied: { type: 'http', url: `http://127.0.0.1:${S.proxy.port}/mcp`, headers: auth },
      json: { type: 'http', url: `http://127.0.0.1:${S.json.port}/mcp`, headers: { 'X-Api-Key': SECRET } },
      moved: { type: 'http', url: `http://127.0.0.1:${S.json.port}/old`, headers: { 'X-Api-Key': SECRET } },
      offsite: { type: 'http', url: `http://127.0.0.1:${S.json.port}/offsite`, headers: { 'X-Api-Key': SECRET } },
      down: { type: 'http', url: `http://127.0.0.1:${S.downPort}/mcp`, headers: auth },
    },
    host_servers: false,
    audit_log: S.audit,
  };
  writeFileSync(path.join(root, 'cfg/corral/config.json'), JSON.stringify(config, null, 2));
  const env = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('CORRAL_') || k === 'CORRAL_IMAGE') env[k] = v;
  Object.assign(env, { XDG_CONFIG_HOME: path.join(root, 'cfg'), XDG_STATE_HOME: path.join(root, 'state'), HOME: root,
    CORRAL_ENGINE: ENGINE, CORRAL_LOG_LEVEL: 'debug', CORRAL_POOL_MIN: '1' });
  S.env = env;
  S.corral = await new Corral(env).start();
}

async function teardown() {
  await S.corral?.close().catch(() => {});
  await S.proxy?.stop().catch(() => {});
  await S.json?.stop().catch(() => {});
  S.everything?.stop();
  if (S.root) rmSync(S.root, { recursive: true, force: true });
}

async function main() {
  out('TAP version 13');
  if (!ENGINE) {
    out('1..0 # SKIP CORRAL_ENGINE is not set (e.g. CORRAL_ENGINE=unix:///run/podman/podman.sock)');
    process.exit(77);
  }
  if (!existsSync(BIN)) {
    out(`Bail out! corral binary not found at ${BIN} (build it, or set CORRAL_BIN)`);
    process.exit(1);
  }
  out(`# corral ${BIN}, engine ${ENGINE}, node ${process.version}`);
  out(`1..${tests.length}`);
  let failed = 0;
  try {
    await setup();
  } catch (e) {
    out(`Bail out! setup failed: ${e?.stack ?? e}`);
    await teardown();
    process.exit(1);
  }
  let n = 0;
  for (const t of tests) {
    n++;
    const ctx = {};
    const t0 = Date.now();
    try {
      await withTimeout(t.fn(ctx), t.timeoutMs, t.name);
      out(`ok ${n} - ${t.name} (${Date.now() - t0} ms)`);
      if (VERBOSE && ctx.result !== undefined)
        for (const l of inspect(ctx.result, { depth: 5, breakLength: 110 }).split('\n')) out(`# ${clip(l, 400)}`);
    } catch (e) {
      failed++;
      out(`not ok ${n} - ${t.name}`);
      out('  ---');
      out(`  message: ${JSON.stringify(String(e?.message ?? e).split('\n')[0])}`);
      if (ctx.result !== undefined)
        for (const l of inspect(ctx.result, { depth: 5, breakLength: 110 }).split('\n')) out(`  # ${clip(l, 400)}`);
      const log = S.corral?.log ?? '';
      for (const l of (VERBOSE ? log : log.slice(-2500)).split('\n')) out(`  # corral: ${l}`);
      out('  ...');
    }
  }
  await teardown();
  if (failed) out(`# ${failed} of ${tests.length} failed`);
  process.exit(failed ? 1 : 0);
}

process.on('unhandledRejection', (e) => out(`# unhandled rejection: ${clip(e?.stack ?? e, 500)}`));
await main();
