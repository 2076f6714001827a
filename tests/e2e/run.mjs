#!/usr/bin/env node
// End-to-end suite for corral: the official MCP TypeScript SDK client (and
// the MCP Inspector CLI) drive the real corral binary against a real
// container engine. Prints TAP version 13 on stdout.
//
//   CORRAL_ENGINE=unix:///run/corral-dev/podman.sock node run.mjs
//   CORRAL_ENGINE=... node run.mjs sessions          only sessions.test.mjs
//   CORRAL_ENGINE=... node run.mjs sessions,files    (or: sessions files)
//   node run.mjs --list                              the files and their tests
//
// The tests live in one file per feature (*.test.mjs, in the order of
// FEATURES below) around a shared harness (lib/harness.mjs; the bridge's
// helpers are in lib/bridge.mjs); see README.md for the index. Every run,
// whole or by name, is one process and one TAP stream, and ends with
// cleanup.test.mjs (no corral container left on the engine).
//
// Environment:
//   CORRAL_ENGINE  engine endpoint (unix:///path or tcp://host:port); when it
//                  is unset the suite is skipped with exit code 77
//   CORRAL_BIN     corral binary (default ../../build/corral from this file)
//   CORRAL_IMAGE   sandbox image (passed on to corral; default corral's own)
//   E2E_ONLY       run only the tests whose name matches this regex (also
//                  within the files named on the command line)
//   E2E_SKIP       leave out the tests whose name matches this regex (after
//                  E2E_ONLY); each is named in a TAP comment
//   E2E_VERBOSE=1  print corral's stderr of failing tests in full
//
// Exit code: 0 when every test passed, 1 when one failed (or a name on the
// command line is not a feature file), 77 when skipped.

import { rmSync } from 'node:fs';
import { CONFIG_HOME, loadFeature, registered, runSuite } from './lib/harness.mjs';

// The feature files, in the order they run. cleanup runs last, always.
const FEATURES = ['basics', 'limits', 'hardening', 'jobs', 'protocol', 'pool', 'lifecycle', 'cli', 'sessions',
  'files', 'images', 'tasks', 'bridge', 'ask', 'network', 'resources', 'results', 'examples'];
const LAST = 'cleanup';

const args = process.argv.slice(2);
const list = args.includes('--list');
const named = args.filter((a) => a !== '--list').flatMap((a) => a.split(',')).map((a) => a.trim()
  .replace(/\.test\.mjs$/, '')).filter(Boolean);
const unknown = named.filter((n) => n !== LAST && !FEATURES.includes(n));
if (unknown.length) {
  process.stdout.write('TAP version 13\n');
  process.stdout.write(`Bail out! no feature file ${unknown.map((n) => `"${n}"`).join(', ')}; ` +
    `the files are: ${[...FEATURES, LAST].join(', ')}\n`);
  rmSync(CONFIG_HOME, { recursive: true, force: true });
  process.exit(1);
}
// Named files run in the fixed order, not the order given.
const chosen = [...FEATURES.filter((f) => !named.length || named.includes(f)), LAST];
for (const f of chosen) await loadFeature(`${f}.test.mjs`);

if (list) {
  let file = null;
  for (const t of registered()) {
    if (t.file !== file) process.stdout.write(`${(file = t.file)}\n`);
    process.stdout.write(`  ${t.name}\n`);
  }
  rmSync(CONFIG_HOME, { recursive: true, force: true });
  process.exit(0);
}
await runSuite();
