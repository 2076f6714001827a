// Helpers of the bridge tests (bridge.test.mjs, and hardening.test.mjs's
// confinement test): sandboxed code calls the host's MCP servers.
//
// Upstream servers are the reference servers pinned in package.json, run
// with our own node. Each test gets its own temporary root holding corral's
// config directory (XDG_CONFIG_HOME), HOME, XDG_STATE_HOME, the audit log
// and the files the servers see; nothing of the host's MCP configuration
// can leak in. The root's path is in every upstream command line (an
// ignored extra argument for server-everything, the allowed directory for
// server-filesystem), so the processes of one test are found by it in /proc.

import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { clip, isInt } from './harness.mjs';
import { serverEntry } from './servers.mjs';

export { serverEntry };

// server-everything takes its transport as the first argument ("stdio", the
// default); later arguments are ignored, so `tag` marks the process.
export function everythingServer(tag, extra = {}) {
  return { command: process.execPath, args: [serverEntry('server-everything'), 'stdio', `--e2e-tag=${tag}`], ...extra };
}

// server-filesystem takes its allowed directories as arguments.
export function filesystemServer(...dirs) {
  return { command: process.execPath, args: [serverEntry('server-filesystem'), ...dirs] };
}

// A private configuration for one test: corral/config.json (and policy.json)
// under <root>/cfg, HOME <root>/home, state <root>/state, audit log
// <root>/audit.jsonl. `env` is what ctx.daemon needs.
export function bridgeSetup(t, { servers = {}, policy, hostServers = false, config = {} } = {}) {
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
    // The calls; readAuditStarts: the header record each corral writes
    // when it opens the log (the policy in force, its pid, its config).
    readAudit: () => readAudit(audit).filter((l) => l.event === undefined),
    readAuditStarts: () => readAudit(audit).filter((l) => l.event === 'start'),
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
export function checkAuditLine(l, t0 = 0) {
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
  assert.ok(typeof l.policy === 'string' && l.policy.length > 0, `${what}: policy names the policy in force`);
  assert.ok(l.error === null || typeof l.error === 'string', `${what}: error is null or a string`);
  if (l.decision === 'denied') assert.ok(typeof l.error === 'string' && l.error.length > 0, `${what}: a denial says why`);
}

// Tool names compared the way corral resolves them (get_sum finds get-sum).
export const normTool = (s) => String(s).toLowerCase().replace(/[-_]/g, '');

// Live processes whose command line contains `needle` (zombies have none).
// A process's state letter from /proc/PID/stat (Z: a zombie, whose files
// are closed), or null once it is reaped.
export function procState(pid) {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st.slice(st.lastIndexOf(')') + 2).split(' ')[0];
  } catch { return null; }
}
// Threads of `pid` still listed: a killed process's leader shows Z while
// its other threads are still exiting, and its files (its stdout) close
// only when the last of them has.
export function procThreads(pid) {
  try { return readdirSync(`/proc/${pid}/task`).length; } catch { return 0; }
}
export const procParent = (pid) => {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
};
// Dead as far as anyone can tell: a zombie or reaped. (An empty cmdline is
// not enough: the kernel drops it before it closes the process's files.)
export const procDead = (pid) => [null, 'Z', 'X'].includes(procState(pid));

export function procsWith(needle) {
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
export async function bridgeRun(t, d, body, servers, { timeoutS = 60, timeoutMs = 120000, expectOk = true } = {}) {
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
export async function hostTool(t, d, name, args = {}, timeoutMs = 60000) {
  const t0 = Date.now();
  const r = await d.client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: timeoutMs });
  t.last = { tool: name, arguments: args, ms: Date.now() - t0, result: r };
  assert.notEqual(r.isError, true, `${name} is not an error (${clip(JSON.stringify(r.content), 600)})`);
  assert.ok(Array.isArray(r.content) && r.content[0]?.type === 'text', `${name} has text content`);
  assert.ok(r.structuredContent && typeof r.structuredContent === 'object', `${name} has structuredContent`);
  return r.structuredContent;
}

const LIST_STATUSES = ['idle', 'starting', 'connected', 'error', 'disabled', 'skipped'];
export function checkServerEntry(s) {
  const what = `list_servers entry ${clip(JSON.stringify(s), 400)}`;
  assert.equal(typeof s.name, 'string', `${what}: name`);
  assert.ok(s.description === null || typeof s.description === 'string', `${what}: description is a string or null`);
  assert.ok(['stdio', 'http'].includes(s.transport), `${what}: transport`);
  assert.ok(LIST_STATUSES.includes(s.status), `${what}: status is one of ${LIST_STATUSES}`);
  assert.ok(s.tools === null || (isInt(s.tools) && s.tools >= 0), `${what}: tools is a count or null`);
  assert.ok(s.error === null || typeof s.error === 'string', `${what}: error is a string or null`);
  assert.equal(typeof s.source, 'string', `${what}: source is a string`);
  if (s.status === 'skipped') assert.equal(typeof s.reason, 'string', `${what}: a skipped server says why`);
}

export async function listServers(t, d) {
  const sc = await hostTool(t, d, 'list_servers', {});
  assert.ok(Array.isArray(sc.servers), 'list_servers gives servers[]');
  for (const s of sc.servers) checkServerEntry(s);
  return Object.fromEntries(sc.servers.map((s) => [s.name, s]));
}

// The exception dict catch() made, checked against corral's error types.
export function assertRaised(got, cls, what) {
  assert.equal(got?.ok, false, `${what}: raised (got ${clip(JSON.stringify(got), 500)})`);
  assert.equal(got.cls, cls, `${what}: raised ${cls} (got ${got.cls}: ${clip(got.msg, 400)})`);
  assert.equal(got.mcp, true, `${what}: ${cls} is a corral.McpError`);
  assert.equal(got.type, cls, `${what}: .type is ${cls}`);
  assert.ok(got.msg.length > 0, `${what}: the exception has a message`);
}

export const ERROR_CODES = { PolicyDenied: -32001, ServerUnavailable: -32002, Timeout: -32003, TooLarge: -32004,
  TooManyCalls: -32005, ToolNotFound: -32006 };
