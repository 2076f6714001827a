// What the Node benchmarks share: where the tree is, the engine and the
// binary under test from the environment, the MCP SDK from the e2e
// suite's node_modules, and the median.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const require = createRequire(path.join(ROOT, 'tests/e2e/package.json'));

// CORRAL_ENGINE (required) and CORRAL_BIN (default build/corral), or
// usage(message) when the engine is not set.
export function engineAndBin(usage) {
  const engine = process.env.CORRAL_ENGINE;
  if (!engine) usage('CORRAL_ENGINE is not set (the engine socket, e.g. unix:///run/podman/podman.sock)');
  return { ENGINE: engine, BIN: path.resolve(ROOT, process.env.CORRAL_BIN || 'build/corral') };
}

// The SDK's client, stdio transport and result schema, or usage(message).
export function loadSdk(usage) {
  try {
    const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
    const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
    const { CallToolResultSchema } = require('@modelcontextprotocol/sdk/types.js');
    return { Client, StdioClientTransport, CallToolResultSchema };
  } catch (e) {
    return usage(`the MCP SDK is missing (cd tests/e2e && npm ci): ${e.message}`);
  }
}

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

export const loadavg = () => os.loadavg().map((x) => x.toFixed(2)).join(' ');

// The machine and the run, for the head of a benchmark's report.
export function facts(engine, bin, extra = {}) {
  let nproc = os.availableParallelism?.() ?? os.cpus().length;
  try { nproc = Number(execFileSync('nproc', { encoding: 'utf8' }).trim()) || nproc; } catch { /* os figure */ }
  return {
    nproc, cpu: os.cpus()[0]?.model ?? 'unknown', mem_gib: +(os.totalmem() / 2 ** 30).toFixed(1),
    kernel: os.release(), node: process.version, engine, corral: bin, ...extra, date: new Date().toISOString(),
  };
}

// An SDK client of a corral started over stdio; log() is the tail of its
// stderr, for a report when a measurement breaks.
export function stdioClient(sdk, bin, env, name) {
  const transport = new sdk.StdioClientTransport({ command: bin, args: [], env, stderr: 'pipe' });
  let log = '';
  transport.stderr?.on('data', (d) => { log += d; if (log.length > 100000) log = log.slice(-50000); });
  const client = new sdk.Client({ name, version: '1' }, { capabilities: {} });
  return { client, transport, log: () => log };
}
