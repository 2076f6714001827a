// The reference MCP servers pinned in tests/e2e/package.json, as installed
// in tests/e2e/node_modules (npm ci): where their entry scripts are. No
// side effects on import, so the service suite, the bridge helpers and the
// benchmarks share it.

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
