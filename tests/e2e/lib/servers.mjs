// The reference MCP servers pinned in tests/e2e/package.json, as installed
// in tests/e2e/node_modules (npm ci): where their entry scripts are. No
// side effects on import, so the service suite, the bridge helpers and the
// benchmarks share it.

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const MCP_MODULES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../node_modules/@modelcontextprotocol');

// An installed server package: its entry script (package.json "bin") and
// version. Throws, naming the package, when it declares no bin.
export function serverPackage(pkgName) {
  const dir = path.join(MCP_MODULES, pkgName);
  const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const bin = typeof pkg.bin === 'string' ? pkg.bin : Object.values(pkg.bin ?? {})[0];
  if (!bin) throw new Error(`${pkgName} declares no bin (npm ci in tests/e2e)`);
  return { entry: path.join(dir, bin), version: pkg.version };
}

export const serverEntry = (pkgName) => serverPackage(pkgName).entry;

// server-everything over streamable HTTP on `port`, started with this Node:
// resolves once it listens to { child, log(), stop() } (stop resolves once
// it has exited, and so let its port go); rejects, with the end of its
// output, if it exits first or does not listen within timeoutMs (then it
// is killed).
export function startEverythingHttp(port, timeoutMs = 20000) {
  const child = spawn(process.execPath, [serverEntry('server-everything'), 'streamableHttp'], {
    env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise((r) => child.once('exit', r));
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server-everything (streamable HTTP) did not listen within ${timeoutMs} ms: ${log.slice(-800)}`));
    }, timeoutMs);
    const seen = (d) => {
      log += d;
      if (!/listening on port/i.test(log)) return;
      clearTimeout(timer);
      resolve({ child, log: () => log, stop: () => { child.kill('SIGKILL'); return exited; } });
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server-everything exited (${code}): ${log.slice(-800)}`));
    });
  });
}
