#!/usr/bin/env node
// Benchmark of the bridge: what a call from sandboxed code to a host MCP
// server costs, and whether twenty calls under asyncio.gather overlap.
//
//   CORRAL_ENGINE=unix:///run/corral-dev/podman.sock node tests/bench/bridge.mjs
//
// corral (the official SDK client from tests/e2e/node_modules drives it)
// gets a private config directory with one server, "everything" (the pinned
// @modelcontextprotocol/server-everything), and, after a warm-up run, one
// measured run_python call whose code times, with time.perf_counter:
//   - single:   10 sequential `await mcp_everything.echo(...)`; median
//   - gather20: 20 echo calls under asyncio.gather, 5 times; median
// and prints both, gather20 / single, and whether that ratio is well under
// 20 (twenty calls in parallel cost about one, not twenty).
//
// Environment: CORRAL_ENGINE (required), CORRAL_BIN (default build/corral),
// CORRAL_IMAGE (passed on). Options: --json FILE (write the figures there).
// Exit status: 0 measured, 1 a measurement broke, 2 usage.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { engineAndBin, facts, loadavg, loadSdk, median, stdioClient, ROOT } from './common.mjs';
import { serverPackage } from '../e2e/lib/servers.mjs';

const E2E = path.join(ROOT, 'tests/e2e');

const SINGLE_N = 10;
const GATHER_WIDTH = 20;
const GATHER_RUNS = 5;
// "Well under 20x": twenty calls in flight cost at most half of twenty
// sequential ones.
const WELL_UNDER = 10;

function usage(msg) {
  process.stderr.write(`bridge.mjs: ${msg}\nusage: CORRAL_ENGINE=unix:///path node tests/bench/bridge.mjs [--json FILE]\n`);
  process.exit(2);
}

const argv = process.argv.slice(2);
let jsonOut = null;
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--json' && i + 1 < argv.length) jsonOut = argv[++i];
  else usage(`unknown argument ${argv[i]}`);
}
const { ENGINE, BIN } = engineAndBin(usage);

const sdk = loadSdk(usage);

const fmt = (ms) => `${ms.toFixed(2)} ms`;


// The measured code. Top-level await: the code runs in an event loop.
const MEASURE = `
import asyncio, json, statistics, time
await mcp_everything.echo(message="warm")
single = []
for i in range(${SINGLE_N}):
    t0 = time.perf_counter()
    r = await mcp_everything.echo(message="s%d" % i)
    single.append((time.perf_counter() - t0) * 1000)
    assert r.text == "Echo: s%d" % i, r.text
gather = []
for k in range(${GATHER_RUNS}):
    t0 = time.perf_counter()
    rs = await asyncio.gather(*[mcp_everything.echo(message="g%d-%d" % (k, i)) for i in range(${GATHER_WIDTH})])
    gather.append((time.perf_counter() - t0) * 1000)
    assert [x.text for x in rs] == ["Echo: g%d-%d" % (k, i) for i in range(${GATHER_WIDTH})]
print("@@" + json.dumps({"single_ms": single, "gather_ms": gather}))
`;

async function main() {
  const everything = serverPackage('server-everything');
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'corral-bench-bridge-'));
  const cfg = path.join(tmp, 'cfg');
  mkdirSync(path.join(cfg, 'corral'), { recursive: true });
  mkdirSync(path.join(tmp, 'home'));
  writeFileSync(path.join(cfg, 'corral/config.json'), JSON.stringify({
    servers: { everything: { command: process.execPath, args: [everything.entry, 'stdio'] } },
    host_servers: false,
    audit_log: path.join(tmp, 'audit.jsonl'),
  }));
  const env = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('CORRAL_') || k === 'CORRAL_IMAGE') env[k] = v;
  Object.assign(env, { CORRAL_ENGINE: ENGINE, XDG_CONFIG_HOME: cfg, HOME: path.join(tmp, 'home'),
    XDG_STATE_HOME: path.join(tmp, 'state') });

  const f = facts(ENGINE, BIN);
  console.log('# corral bridge benchmark');
  for (const [k, v] of Object.entries(f)) console.log(`${k.padEnd(10)} ${v}`);
  console.log(`${'upstream'.padEnd(10)} @modelcontextprotocol/server-everything ${everything.version}`);
  const loadStart = loadavg();
  console.log(`${'load'.padEnd(10)} ${loadStart} (1, 5, 15 min) at start`);

  const { client, transport, log } = stdioClient(sdk, BIN, env, 'corral-bench-bridge');
  let failed = null;
  let figures = null;
  try {
    await client.connect(transport);
    const run = async (code) => {
      const r = await client.callTool({ name: 'run_python', arguments: { code, servers: ['everything'], timeout_s: 120 } },
        sdk.CallToolResultSchema, { timeout: 180000 });
      const sc = r.structuredContent ?? {};
      if (sc.status !== 'ok')
        throw new Error(`run_python status ${sc.status}: ${JSON.stringify(sc.error)} ${String(sc.stderr ?? '').slice(-1500)}`);
      return sc.stdout;
    };
    // Warm-up: starts the upstream server and fills the pool.
    for (let i = 0; i < 2; i++) await run('mcp_everything.echo(message="warm-up")\nprint("ok")');
    const out = await run(MEASURE);
    const line = out.split('\n').find((l) => l.startsWith('@@'));
    if (!line) throw new Error(`no result line in ${out.slice(0, 500)}`);
    const { single_ms: single, gather_ms: gather } = JSON.parse(line.slice(2));
    const s = median(single);
    const g = median(gather);
    const ratio = g / s;
    const verdict = ratio < WELL_UNDER ? `well under ${GATHER_WIDTH}x` : `NOT well under ${GATHER_WIDTH}x`;
    figures = { single_median_ms: s, gather20_median_ms: g, ratio, verdict, single_ms: single, gather20_ms: gather };
    const row = (label, value) => console.log(`${label.padEnd(64)} ${value}`);
    console.log('');
    row(`single call (median of ${SINGLE_N} sequential echo, timed in the sandbox)`, fmt(s));
    console.log(`  samples: ${single.map((x) => x.toFixed(2)).join(' ')}`);
    row(`${GATHER_WIDTH} echo calls under asyncio.gather (median of ${GATHER_RUNS})`, fmt(g));
    console.log(`  samples: ${gather.map((x) => x.toFixed(2)).join(' ')}`);
    row(`ratio gather${GATHER_WIDTH} / single`, `${ratio.toFixed(2)}x: ${verdict} (in sequence: ${GATHER_WIDTH}x)`);
  } catch (e) {
    failed = e;
    console.log(`\nMEASUREMENT FAILED: ${e.message}`);
    console.log(`corral's log (tail):\n${log().slice(-3000)}`);
  } finally {
    await client.close().catch(() => {});
    const loadEnd = loadavg();
    console.log(`${'load'.padEnd(10)} ${loadEnd} (1, 5, 15 min) at end`);
    if (jsonOut) writeFileSync(jsonOut, JSON.stringify({ facts: f, load_start: loadStart, load_end: loadEnd,
      upstream: everything.version, ...figures, error: failed?.message ?? null }, null, 2));
    rmSync(tmp, { recursive: true, force: true });
  }
  process.exit(failed ? 1 : 0);
}

main();
