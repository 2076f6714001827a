// The code examples corral shows run as written: each is taken from where
// it is shown and run unmodified in a sandbox through corral, and must end
// with status ok.
//
// Where examples are, and how they are marked:
// - README.md: fenced blocks whose info string is `python sandbox` or
//   `sh sandbox` (other blocks are host-side: config, commands, SDK code);
// - the guide (resource corral://guide, daemon/mcp/guide.md): every
//   ```python and ```sh block;
// - the tools' descriptions (tools/list): code written as Example: `...`
//   (Python for run_python, a command line for run_shell).
// An info string may add `servers=a,b`: the MCP servers the example names
// in run_python's `servers`. This test configures them: `everything`
// (server-everything) and `fs` (server-filesystem on a directory holding
// hello.txt), with a policy that denies fs's write_* tools, as the README
// says.
//
//   node run.mjs examples        (examples:)

import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { clip, HERE, out, test } from './lib/harness.mjs';
import { bridgeSetup, everythingServer, filesystemServer } from './lib/bridge.mjs';

const README = path.resolve(HERE, '../../README.md');
const FENCE = /^```([^\n`]*)\n([\s\S]*?)^```[ \t]*$/gm;

// Fenced blocks of `text` as {lang, words, servers, code, line}.
function fenced(text) {
  const blocks = [];
  for (const m of text.matchAll(FENCE)) {
    const [lang = '', ...words] = m[1].trim().split(/\s+/);
    const servers = (words.find((w) => w.startsWith('servers=')) ?? 'servers=').slice(8).split(',').filter(Boolean);
    blocks.push({ lang, words, servers, code: m[2], line: text.slice(0, m.index).split('\n').length });
  }
  return blocks;
}

const runnable = (b) => b.lang === 'python' || b.lang === 'sh';

// Example: `...` in a description; the backticks hold the code.
function described(tools) {
  const found = [];
  for (const tool of tools)
    for (const m of (tool.description ?? '').matchAll(/Example: `([^`]+)`/g)) {
      assert.ok(['run_python', 'run_shell'].includes(tool.name),
        `${tool.name}'s description has an example, but only run_python and run_shell run code`);
      found.push({ lang: tool.name === 'run_python' ? 'python' : 'sh', servers: [], code: m[1], where: `${tool.name}'s description` });
    }
  return found;
}

test('examples: every code example of the README, the guide and the tool descriptions runs unmodified in a sandbox', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({ everything: everythingServer(root), fs: filesystemServer(path.join(root, 'files')) }),
    policy: { version: 1, servers: { fs: { deny: ['write_*'] } } },
  });
  mkdirSync(path.join(b.root, 'files'));
  writeFileSync(path.join(b.root, 'files', 'hello.txt'), 'hello\n');
  const d = await t.daemon('examples', b.env);

  const readme = fenced(readFileSync(README, 'utf8'));
  const marked = readme.filter((x) => x.words.includes('sandbox'));
  for (const x of marked)
    assert.ok(runnable(x), `README.md line ${x.line}: \`${x.lang} sandbox\`: only python and sh blocks run in a sandbox`);
  const guideText = (await d.client.readResource({ uri: 'corral://guide' })).contents[0].text;
  const guide = fenced(guideText).filter(runnable);
  const examples = [
    ...marked.map((x) => ({ ...x, where: `README.md line ${x.line}` })),
    ...guide.map((x) => ({ ...x, where: `the guide, line ${x.line}` })),
    ...described(d.tools),
  ];
  const count = (w) => examples.filter((x) => x.where.startsWith(w)).length;
  out(`# examples: ${count('README')} in README.md, ${count('the guide')} in the guide, ${examples.length - count('README') - count('the guide')} in descriptions`);
  // The extraction itself must find something, or this test would pass on nothing.
  assert.ok(count('README') >= 1, 'README.md has a block marked `python sandbox`');
  assert.ok(count('the guide') >= 5, 'the guide has its examples');
  assert.ok(guide.some((x) => x.lang === 'sh'), 'the guide has a shell example');

  const failed = [];
  for (const x of examples) {
    const r = x.lang === 'python'
      ? await d.call(t, 'run_python', { code: x.code, servers: x.servers, timeout_s: 60 })
      : await d.call(t, 'run_shell', { command: x.code, timeout_s: 60 });
    const sc = r.structuredContent;
    if (sc.status !== 'ok')
      failed.push(`${x.where} (${x.lang}${x.servers.length ? `, servers ${x.servers}` : ''}): status ${sc.status}` +
        `\n${clip(x.code, 400)}\nstdout: ${clip(sc.stdout, 400)}\nstderr: ${clip(sc.stderr, 800)}` +
        (sc.error ? `\nerror: ${clip(JSON.stringify(sc.error), 800)}` : ''));
  }
  t.note('examples', examples.map((x) => x.where));
  assert.deepEqual(failed, [], `examples that did not run as written:\n${failed.join('\n\n')}`);
}, { timeoutMs: 240000 });
