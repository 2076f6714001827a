#!/usr/bin/env node
// Aggregate throughput of three corral services behind HAProxy against one
// (tests/bench/README.md, "Scale-out"), in one run: the cluster of
// tests/e2e/scaleout.mjs (three services in network namespaces of their
// own, the shipped contrib/haproxy/corral.cfg), and CLIENTS SDK clients
// through the balancer calling run_python print(1) back to back. "One" is
// the same cluster with two servers put in maintenance on HAProxy's admin
// socket, so the path (balancer, network) is the same. The phases take
// turns, twice each.
//
//   CORRAL_ENGINE=unix:///path node tests/bench/scaleout.mjs [--clients 6] [--seconds 6]   (as root)
//
// On this machine every service shares one engine and two cores: the
// figure says what spreading costs or gains when the engine and the CPU
// are the limit, not what three machines would give (there each host has
// its own engine and cores). Exit 0 when it ran, 1 when something broke,
// 77 when the machine lacks root, ip or haproxy.

import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Cluster, clusterMissing } from '../e2e/lib/cluster.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');
const require = createRequire(path.join(ROOT, 'tests/e2e/package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { CallToolResultSchema } = require('@modelcontextprotocol/sdk/types.js');

const argv = process.argv.slice(2);
let CLIENTS = 6;
let SECONDS = 6;
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--clients') CLIENTS = Number(argv[++i]);
  else if (argv[i] === '--seconds') SECONDS = Number(argv[++i]);
  else {
    process.stderr.write(`scaleout.mjs: unknown argument ${argv[i]}\n`);
    process.exit(2);
  }
}
const ENGINE = process.env.CORRAL_ENGINE;
const missing = !ENGINE ? 'CORRAL_ENGINE is not set' : clusterMissing();
if (missing) {
  console.log(`scaleout.mjs: skipped: ${missing}`);
  process.exit(77);
}
const BIN = path.resolve(ROOT, process.env.CORRAL_BIN || 'build/corral');
const IMAGE = process.env.CORRAL_IMAGE || 'corral-python:latest';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function client(cl) {
  const { served, options } = cl.clientOptions();
  const c = new Client({ name: 'bench', version: '1' });
  await c.connect(new StreamableHTTPClientTransport(cl.url, options));
  c.served = served;
  return c;
}

// CLIENTS clients calling back to back for SECONDS: calls a second, and
// how the sessions spread.
async function phase(cl) {
  const cs = [];
  for (let i = 0; i < CLIENTS; i++) cs.push(await client(cl));
  const spread = {};
  for (const c of cs) spread[c.served.host] = (spread[c.served.host] || 0) + 1;
  // A warm-up call each, then the timed run.
  await Promise.all(cs.map((c) => c.callTool({ name: 'run_python', arguments: { code: 'print(1)' } }, CallToolResultSchema, { timeout: 60000 })));
  let calls = 0;
  let bad = 0;
  const end = Date.now() + SECONDS * 1000;
  await Promise.all(cs.map(async (c) => {
    while (Date.now() < end) {
      const r = await c.callTool({ name: 'run_python', arguments: { code: 'print(1)' } }, CallToolResultSchema, { timeout: 60000 });
      if (r.structuredContent?.status === 'ok') calls++;
      else bad++;
    }
  }));
  for (const c of cs) {
    await c.transport.terminateSession().catch(() => {});
    await c.close().catch(() => {});
  }
  if (bad) throw new Error(`${bad} call(s) did not answer ok`);
  return { rate: calls / SECONDS, spread };
}

async function setServers(cl, up) {
  for (const h of cl.hosts) {
    const state = up.includes(h.name) ? 'ready' : 'maint';
    await cl.adminCmd(`set server corral/${h.name} state ${state}`);
  }
  await cl.waitStates(Object.fromEntries(cl.hosts.map((h) => [h.name, up.includes(h.name) ? 'UP' : 'MAINT'])));
  await sleep(3000); // pools refilled after the last phase
}

const cl = new Cluster({ bin: BIN, engine: ENGINE, image: IMAGE, prefix: 'crb' });
try {
  await cl.start();
  const three = [];
  const one = [];
  for (let round = 0; round < 2; round++) {
    await setServers(cl, cl.hosts.map((h) => h.name));
    three.push(await phase(cl));
    await setServers(cl, [cl.hosts[0].name]);
    one.push(await phase(cl));
  }
  const avg = (xs) => xs.reduce((a, x) => a + x.rate, 0) / xs.length;
  console.log(`corral scale-out bench: ${CLIENTS} SDK clients through HAProxy, run_python print(1) back to back for ${SECONDS} s a phase, phases in turn; nproc ${os.cpus().length}, load ${os.loadavg()[0].toFixed(2)}`);
  console.log(`  three services: ${three.map((p) => `${p.rate.toFixed(1)}/s ${JSON.stringify(p.spread)}`).join(', ')}`);
  console.log(`  one service:    ${one.map((p) => `${p.rate.toFixed(1)}/s ${JSON.stringify(p.spread)}`).join(', ')}`);
  console.log(`  three against one: ${(avg(three) / avg(one)).toFixed(2)}x (one engine and ${os.cpus().length} cores shared by all: see the header)`);
} catch (e) {
  console.error(`scaleout.mjs: ${e.stack || e}`);
  process.exitCode = 1;
} finally {
  await cl.stop().catch(() => {});
}
