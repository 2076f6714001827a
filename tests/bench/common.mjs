// What the Node benchmarks share: where the tree is, the engine and the
// binary under test from the environment, the MCP SDK from the e2e
// suite's node_modules, and the median.
import { createRequire } from 'node:module';
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
