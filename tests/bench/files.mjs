#!/usr/bin/env node
// Benchmark of files out of a sandbox: a 10 MB binary file read with
// read_file through corral (the sandbox's runtime reads it and sends it as
// base64 on the frame channel), against a GET /containers/{id}/archive of
// the same file on the same engine (the path corral took before: a tar
// stream from the engine), in one run.
//
//   CORRAL_ENGINE=unix:///run/corral-dev/podman.sock node tests/bench/files.mjs [--iterations 5] [--size 10000000] [--json FILE]
//
// The file is written once by run_python in a session (os.urandom, its
// sha256 printed); each side then reads it --iterations times and the
// medians are compared. Both sides are checked to give the file's very
// bytes. read_file's time is the whole tool call as an MCP client sees it
// (the request, the runtime's read, the base64 on two links, the JSON
// parse of the answer), and beside it the time until the answer's last byte
// (what the client's own parse and check of 13 MB adds is the difference);
// the archive's is the HTTP request on the engine's socket until its last
// byte (the tar's bytes are not unpacked). With CORRAL_BIN_OLD (a
// corral from before files went through the runtime: its read_file is the
// archive GET, the tar unpacked, the session frozen meanwhile) the same
// read through that binary too, in its own session, the ways taking turns
// read by read. The target (the issue's): the channel at least as fast as
// the old read_file, printed as a ratio; without CORRAL_BIN_OLD, as fast as
// the raw archive GET (a stricter bar: only the engine's part of the old
// path). A miss prints MISSED. Under gVisor (CORRAL_RUNTIME=runsc) the engine cannot
// reach the sandbox's /workspace, and the archive side says so.
// Exit status: 0 measured, 1 a measurement broke, 2 a usage error.
//
// Environment: CORRAL_ENGINE (required), CORRAL_BIN (default build/corral),
// CORRAL_BIN_OLD (optional, above; keep its file name `corral`), CORRAL_IMAGE
// and CORRAL_RUNTIME (passed on), CORRAL_POOL_MAX (default 0 here: no
// pool refilling beside the reads).

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { engineAndBin, facts, loadavg, median } from './common.mjs';

function usage(msg) {
  if (msg) console.error(`files.mjs: ${msg}`);
  console.error('usage: CORRAL_ENGINE=URL node tests/bench/files.mjs [--iterations N] [--size BYTES] [--json FILE]');
  process.exit(2);
}

const args = process.argv.slice(2);
const opt = { iterations: 5, size: 10_000_000, json: null };
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--iterations' || a === '--size') opt[a.slice(2)] = Number(args[++i]);
  else if (a === '--json') opt.json = args[++i];
  else usage(`unknown argument ${a}`);
}
if (!(opt.iterations >= 1) || !(opt.size >= 1) || opt.size > 16 * 2 ** 20) usage('--iterations >= 1, --size 1..16 MiB');

const { ENGINE, BIN } = engineAndBin(usage);
const OLD = process.env.CORRAL_BIN_OLD ? path.resolve(process.env.CORRAL_BIN_OLD) : null;
const sha256 = (b) => createHash('sha256').update(b).digest('hex');

// corral over stdio, spoken to in JSON lines (the SDK's own parse of a
// 13 MB answer would weigh on the channel's side only): call(name, args)
// gives the tool's result; log() the end of corral's stderr.
function corral(bin, env) {
  const child = spawn(bin, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let log = '', pending = [], size = 0, id = 0, arrived = 0n;
  const waiting = new Map();
  child.stderr.on('data', (d) => { log += d; if (log.length > 100000) log = log.slice(-50000); });
  child.stdout.on('data', (d) => {
    for (let at = d.indexOf(10); at >= 0; at = d.indexOf(10)) {
      pending.push(d.subarray(0, at));
      arrived = process.hrtime.bigint(); // the line's last byte, before the client's parse
      const line = Buffer.concat(pending, size + at).toString('utf8');
      pending = []; size = 0; d = d.subarray(at + 1);
      const m = JSON.parse(line);
      if (waiting.has(m.id)) { waiting.get(m.id)(m); waiting.delete(m.id); }
    }
    if (d.length) { pending.push(d); size += d.length; }
  });
  const closed = new Promise((resolve) => child.on('close', resolve));
  closed.then(() => { for (const f of waiting.values()) f({ error: { message: 'corral exited' } }); });
  const request = (method, params) => new Promise((resolve) => {
    waiting.set(++id, resolve);
    child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  });
  return {
    async start() {
      const r = await request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench-files', version: '1' } });
      if (!r.result) throw new Error(`initialize: ${JSON.stringify(r.error)}`);
      child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
    },
    async call(name, args) {
      const r = await request('tools/call', { name, arguments: args });
      if (!r.result) throw new Error(`${name}: ${JSON.stringify(r.error)}`);
      return r.result;
    },
    async close() { child.stdin.end(); await closed; },
    log: () => log,
    arrived: () => arrived,
  };
}

// GET on the engine's socket: { status, body (Buffer) }.
function engineGet(pathname) {
  const u = new URL(ENGINE);
  const where = u.protocol === 'unix:' ? { socketPath: u.pathname } : { host: u.hostname, port: u.port };
  return new Promise((resolve, reject) => {
    const req = http.request({ ...where, path: pathname, method: 'GET' }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

// The first regular file of a tar stream (ustar; a pax header is skipped).
function tarFile(tar) {
  for (let at = 0; at + 512 <= tar.length;) {
    const h = tar.subarray(at, at + 512);
    if (h.every((x) => x === 0)) break;
    const size = parseInt(h.subarray(124, 136).toString('latin1').replace(/\0.*$/, '').trim() || '0', 8);
    const type = String.fromCharCode(h[156] || 48);
    if (type === '0') return tar.subarray(at + 512, at + 512 + size);
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return null;
}

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

// One corral with a session holding the file: { c, id (its container), digest }.
async function side(bin, env) {
  const c = corral(bin, env);
  await c.start();
  const w = await c.call('run_python', { session: 'bench', code: `import hashlib, os\nb = os.urandom(${opt.size})\nopen("blob.bin", "wb").write(b)\nprint(hashlib.sha256(b).hexdigest())` });
  const digest = w.structuredContent?.stdout?.trim();
  if (w.structuredContent?.status !== 'ok' || !digest) throw new Error(`writing the file failed: ${JSON.stringify(w.structuredContent).slice(0, 400)}`);
  const list = await c.call('session_list', {});
  const id = list.structuredContent.sessions.find((s) => s.name === 'bench')?.container;
  if (!id) throw new Error('the session has no container');
  return { c, id, digest };
}

// One read_file of the blob, checked: { t: ms until the result is parsed,
// last: ms until the answer's last byte came }.
async function readOnce(s) {
  const t0 = process.hrtime.bigint();
  const r = await s.c.call('read_file', { session: 'bench', path: 'blob.bin', limit: opt.size });
  const t = { t: ms(t0), last: Number(s.c.arrived() - t0) / 1e6 };
  const blob = r.content.find((x) => x.type === 'resource')?.resource?.blob;
  if (r.isError || !blob || sha256(Buffer.from(blob, 'base64')) !== s.digest)
    throw new Error(`read_file did not give the file back: ${JSON.stringify(r.content[0]).slice(0, 300)}`);
  return t;
}

async function main() {
  const env = { ...process.env, CORRAL_ENGINE: ENGINE, CORRAL_FILE_MAX_BYTES: '16m', CORRAL_POOL_MAX: process.env.CORRAL_POOL_MAX ?? '0' };
  const report = { facts: facts(ENGINE, BIN, { corral_old: OLD, runtime: process.env.CORRAL_RUNTIME || 'default', size: opt.size, iterations: opt.iterations, load: loadavg() }) };
  const sides = [];
  try {
    sides.push({ name: 'channel', ...(await side(BIN, env)) });
    if (OLD) sides.push({ name: 'old', ...(await side(OLD, env)) });
    const times = { channel: [], old: [], archive: [] }, last = { channel: [], old: [] };
    let archiveWhy = null;
    // Round by round, each way in turn, so that the machine's load falls on
    // all alike; the first round warms every end up and is not counted.
    for (let i = 0; i < opt.iterations + 1; i++) {
      for (const s of sides) {
        const t = await readOnce(s);
        if (i > 0) times[s.name].push(t.t), last[s.name].push(t.last);
      }
      if (archiveWhy) continue;
      const t0 = process.hrtime.bigint();
      const r = await engineGet(`/containers/${sides[0].id}/archive?path=${encodeURIComponent('/workspace/blob.bin')}`);
      const t = ms(t0);
      if (r.status !== 200) {
        archiveWhy = `the engine answered HTTP ${r.status}: ${r.body.toString('utf8').slice(0, 200).trim()}`;
        continue;
      }
      const f = tarFile(r.body);
      if (!f || sha256(f) !== sides[0].digest) throw new Error('the archive did not hold the file');
      if (i > 0) times.archive.push(t);
    }
    report.channel_ms = { median: median(times.channel), all: times.channel, last_byte_median: median(last.channel) };
    if (OLD) report.old_ms = { median: median(times.old), all: times.old, last_byte_median: median(last.old) };
    report.archive_ms = archiveWhy ? { error: archiveWhy } : { median: median(times.archive), all: times.archive };
    report.load_end = loadavg();
  } catch (e) {
    throw new Error(`${e.message}\n# corral's log, its end:\n${sides.map((s) => s.c.log().slice(-3000)).join('\n# the other:\n')}`);
  } finally {
    for (const s of sides) await s.c.close().catch(() => {});
  }

  const f = report.facts;
  console.log(`# files: ${(opt.size / 1e6).toFixed(1)} MB binary, ${opt.iterations} reads a way (after one round to warm up), in turn; engine ${f.engine}, runtime ${f.runtime}, ${f.nproc} CPUs, load ${f.load} at start, ${report.load_end} at end`);
  const mbs = (t) => (opt.size / 1e6 / (t / 1000)).toFixed(0);
  const row = (label, x) => console.log(`${label}: median ${x.median.toFixed(1)} ms (${mbs(x.median)} MB/s); all ${x.all.map((v) => v.toFixed(1)).join(' ')}` +
    (x.last_byte_median !== undefined ? `; until the answer's last byte ${x.last_byte_median.toFixed(1)} ms (the rest: this client parsing and checking it)` : ''));
  row('read_file through corral (the channel)', report.channel_ms);
  if (OLD) row(`read_file through ${OLD} (its path: the engine's archive)`, report.old_ms);
  if (report.archive_ms.error) console.log(`GET /containers/{id}/archive: not available: ${report.archive_ms.error}`);
  else row('GET /containers/{id}/archive (the engine, raw)', report.archive_ms);
  const verdict = (r) => (r <= 1 ? '(target: at most 1: met)' : 'MISSED (target: at most 1)');
  if (!report.archive_ms.error) {
    report.ratio_archive = report.channel_ms.median / report.archive_ms.median;
    console.log(`ratio channel/archive GET: ${report.ratio_archive.toFixed(2)}${OLD ? '' : ` ${verdict(report.ratio_archive)}`}`);
    if (!OLD) console.log('(no CORRAL_BIN_OLD: the target is judged against the raw GET, which is only the engine\'s part of the old path: it leaves out the tar unpacked, the base64 and the MCP answer the old read_file paid too)');
  }
  if (OLD) {
    report.ratio_old = report.channel_ms.median / report.old_ms.median;
    if (!report.archive_ms.error) console.log(`ratio old read_file/archive GET: ${(report.old_ms.median / report.archive_ms.median).toFixed(2)}`);
    console.log(`ratio channel/old read_file: ${report.ratio_old.toFixed(2)} ${verdict(report.ratio_old)}`);
  }
  if (opt.json) writeFileSync(opt.json, JSON.stringify(report, null, 2) + '\n');
}

main().then(() => process.exit(0), (e) => { console.error(`files.mjs: ${e.stack || e}`); process.exit(1); });
