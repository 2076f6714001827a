// The files of a client's sessions as MCP resources: what a session holds
// under /workspace/out (all of /workspace with resources_workspace) listed,
// read through read_file's path checks, completed, and announced with
// notifications/resources/list_changed; and, through the service, sessions
// kept under a client's name for its next MCP session, which is how the
// MCP Inspector CLI (one MCP session a process) reaches them.
//
//   node run.mjs resources        (resources:)

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ResourceListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import {
  BIN, clip, CONFIG_HOME, corralEnv, inspectorCli, run, sleep, startService, test, toolCall, waitFor,
} from './lib/harness.mjs';

const TEMPLATE = 'corral://session/{session}/{+path}';
// The guide to the tools heads every first page; the rest are files.
const GUIDE = 'corral://guide';
const files = (resources) => resources.filter((r) => r.uri !== GUIDE);
const BYTES = Buffer.from(Array.from({ length: 256 }, (_, i) => i));

// A session whose out/ holds a text file, a binary file in a directory,
// and three links: one inside out/, one to /workspace outside out/, one
// out of /workspace.
const FILES = `
import os
os.makedirs('/workspace/out/sub dir', exist_ok=True)
open('/workspace/out/report.csv', 'w').write('a,b\\n1,2\\n')
open('/workspace/out/sub dir/data.bin', 'wb').write(bytes(range(256)))
open('/workspace/secret.txt', 'w').write('not a resource')
os.symlink('/workspace/out/report.csv', '/workspace/out/same.csv')
os.symlink('/workspace/secret.txt', '/workspace/out/inner')
os.symlink('/etc/passwd', '/workspace/out/passwd')
print('made')`;

async function readError(d, uri) {
  try {
    await d.client.readResource({ uri });
  } catch (e) {
    return { code: e.code, message: e.message };
  }
  return null;
}

const complete = (d, name, value, context) => d.client.complete({
  ref: { type: 'ref/resource', uri: TEMPLATE }, argument: { name, value }, ...(context ? { context } : {}),
}).then((r) => r.completion);

// Waits until pred() holds, at most `ms`; fails with `what` if it never does.
async function until(what, pred, ms = 5000) {
  const v = await waitFor(() => ({ done: pred() }), { timeoutMs: ms });
  assert.ok(v.done, what);
}

function counting(counter) {
  return { setup: (client) => client.setNotificationHandler(ResourceListChangedNotificationSchema, () => { counter.n++; }) };
}

test('resources: a session\'s out/ files are listed, read and completed; links out of out/ are refused; list_changed follows what changes them', async (t) => {
  const changed = { n: 0 };
  const d = await t.daemon('resources', {}, counting(changed));
  const caps = d.client.getServerCapabilities();
  assert.deepEqual(caps.resources, { listChanged: true, subscribe: false }, 'resources offered, with list_changed');
  assert.deepEqual(caps.completions, {}, 'completions offered');
  const first = (await d.client.listResources()).resources;
  assert.deepEqual(first.map((r) => r.uri), [GUIDE], 'no session, no files: the guide alone');
  assert.equal(first[0].mimeType, 'text/markdown');
  const guide = (await d.client.readResource({ uri: GUIDE })).contents;
  assert.equal(guide.length, 1);
  assert.equal(guide[0].mimeType, 'text/markdown');
  assert.match(guide[0].text, /^# corral/, 'the guide reads');
  assert.match(guide[0].text, /## This corral\n\nImages: /, 'and ends with what this corral offers');
  const tpl = (await d.client.listResourceTemplates()).resourceTemplates;
  assert.deepEqual(tpl.map((x) => x.uriTemplate), [TEMPLATE, 'corral://run/{id}/{+stream}{?offset,limit}'],
    'a session\'s files, and a run\'s kept output');

  const made = await d.call(t, 'run_python', { session: 'rep', code: FILES });
  assert.equal(made.structuredContent.stdout, 'made\n', JSON.stringify(made.structuredContent));
  await until('list_changed when the session opened', () => changed.n >= 1);

  const list = files((await d.client.listResources()).resources);
  t.note('list', list);
  assert.deepEqual(list.map((r) => r.name).sort(), ['out/report.csv', 'out/sub dir/data.bin'],
    'the regular files of out/, not its links, not the rest of /workspace');
  const csv = list.find((r) => r.name === 'out/report.csv');
  assert.equal(csv.uri, 'corral://session/rep/out/report.csv');
  assert.equal(csv.mimeType, 'text/csv');
  assert.equal(csv.size, 8);
  const bin = list.find((r) => r.name === 'out/sub dir/data.bin');
  assert.equal(bin.uri, 'corral://session/rep/out/sub%20dir/data.bin', 'a space is percent-encoded');

  const text = (await d.client.readResource({ uri: csv.uri })).contents;
  assert.deepEqual(text, [{ uri: csv.uri, mimeType: 'text/csv', text: 'a,b\n1,2\n' }]);
  const blob = (await d.client.readResource({ uri: bin.uri })).contents[0];
  assert.equal(blob.mimeType, 'application/octet-stream');
  assert.deepEqual(Buffer.from(blob.blob, 'base64'), BYTES, 'binary content comes back as a base64 blob, exact');
  const same = (await d.client.readResource({ uri: 'corral://session/rep/out/same.csv' })).contents[0];
  assert.equal(same.text, 'a,b\n1,2\n', 'a link that stays inside out/ is followed, as read_file does');

  const passwd = await readError(d, 'corral://session/rep/out/passwd');
  t.note('passwd', passwd);
  assert.equal(passwd?.code, -32602, 'a link out of /workspace is refused');
  assert.match(passwd.message, /symbolic link to \/etc\/passwd, outside \/workspace/);
  const inner = await readError(d, 'corral://session/rep/out/inner');
  assert.equal(inner?.code, -32602, 'a link to /workspace outside out/ is refused');
  assert.match(inner.message, /leads to \/workspace\/secret\.txt, outside \/workspace\/out/);
  const outside = await readError(d, 'corral://session/rep/secret.txt');
  assert.equal(outside?.code, -32602, 'a file outside out/ is not a resource');
  assert.match(outside.message, /outside \/workspace\/out.*resources_workspace/);
  const dots = await readError(d, 'corral://session/rep/out/../secret.txt');
  assert.equal(dots?.code, -32602);
  assert.match(dots.message, /"\.\."/);
  const none = await readError(d, 'corral://session/nope/out/report.csv');
  assert.equal(none?.code, -32002, 'an unknown session: resource not found');
  const missing = await readError(d, 'corral://session/rep/out/gone.csv');
  assert.equal(missing?.code, -32002, 'an unknown file: resource not found');
  const foreign = await readError(d, 'file:///etc/passwd');
  assert.equal(foreign?.code, -32602);
  assert.match(foreign.message, /not one of corral's resources/);

  assert.deepEqual(await complete(d, 'session', 'r'), { values: ['rep'], total: 1, hasMore: false });
  assert.deepEqual((await complete(d, 'session', 'x')).values, []);
  assert.deepEqual(await complete(d, 'path', 'out/s', { arguments: { session: 'rep' } }),
    { values: ['out/sub dir/data.bin'], total: 1, hasMore: false }, 'paths of the named session');
  assert.deepEqual((await complete(d, 'path', 'out/')).values, [], 'no session given, no paths');
  await assert.rejects(d.client.complete({ ref: { type: 'ref/prompt', name: 'x' }, argument: { name: 'a', value: '' } }),
    /only its resource template/);

  // What changes the list, and what does not.
  let n = changed.n;
  await d.call(t, 'run_python', { session: 'rep', code: 'print(open("out/report.csv").read())' });
  await sleep(300);
  assert.equal(changed.n, n, 'a call that leaves out/ as it was sends no list_changed');
  await d.call(t, 'run_python', { session: 'rep', code: 'import os; os.remove("out/report.csv")' });
  await until('list_changed when a call removed a file of out/', () => changed.n > n);
  n = changed.n;
  await toolCall(t, d, 'write_file', { session: 'rep', path: 'out/new.txt', content: 'fresh' });
  await until('list_changed when write_file wrote into out/', () => changed.n > n);
  assert.deepEqual(files((await d.client.listResources()).resources).map((r) => r.name).sort(),
    ['out/new.txt', 'out/sub dir/data.bin'], 'a removed file leaves the list, a written one joins it');
  n = changed.n;
  await toolCall(t, d, 'write_file', { session: 'rep', path: 'notes.txt', content: 'not shown' });
  await sleep(300);
  assert.equal(changed.n, n, 'a file written outside out/ changes nothing shown');
  await toolCall(t, d, 'session_close', { session: 'rep' });
  await until('list_changed when the session closed', () => changed.n > n);
  assert.deepEqual(files((await d.client.listResources()).resources), [], 'a closed session\'s files are gone');
}, { timeoutMs: 120000 });

test('resources: resources_workspace shows all of /workspace, still not past it', async (t) => {
  const d = await t.daemon('resources-workspace', { CORRAL_RESOURCES_WORKSPACE: 'true' });
  const made = await d.call(t, 'run_python', { session: 'w', code: FILES });
  assert.equal(made.structuredContent.stdout, 'made\n');
  const names = files((await d.client.listResources()).resources).map((r) => r.name).sort();
  assert.deepEqual(names, ['out/report.csv', 'out/sub dir/data.bin', 'secret.txt']);
  const secret = (await d.client.readResource({ uri: 'corral://session/w/secret.txt' })).contents[0];
  assert.equal(secret.text, 'not a resource');
  const inner = (await d.client.readResource({ uri: 'corral://session/w/out/inner' })).contents[0];
  assert.equal(inner.text, 'not a resource', 'a link within /workspace is followed now');
  const passwd = await readError(d, 'corral://session/w/out/passwd');
  assert.equal(passwd?.code, -32602);
  assert.match(passwd.message, /outside \/workspace/);
  assert.match(await complete(d, 'path', 's', { arguments: { session: 'w' } }).then((c) => c.values.join()), /^secret\.txt$/);
}, { timeoutMs: 90000 });

test('resources: a named client keeps its sessions between MCP sessions; the Inspector CLI lists and reads them', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'corral-res-'));
  t.defer(() => rmSync(dir, { recursive: true, force: true }));
  const sock = path.join(dir, 'corral.sock');
  const svc = await startService(t, ['--listen', `unix:${sock}`], corralEnv(), sock);
  const connect = (name) => ['connect', '--socket', sock, ...(name ? ['--as', name] : [])];

  const a = await t.daemon('alice-1', {}, { args: connect('alice') });
  const made = await a.call(t, 'run_python', { session: 'work', code: `${FILES}\nopen('/workspace/out/result.json', 'w').write('{"answer": 42}')` });
  assert.equal(made.structuredContent.stdout, 'made\n');
  await a.close();
  assert.match(svc.log, /MCP session \w+\.\.\. opened for client n:alice/);

  // Each Inspector call is an MCP session of its own, under the name.
  const env = { XDG_CONFIG_HOME: CONFIG_HOME };
  const listed = await inspectorCli([BIN, ...connect('alice'), '--method', 'resources/list'], env);
  t.note('inspector_list', { code: listed.code, stdout: clip(listed.stdout, 1500), stderr: clip(listed.stderr, 1500) });
  assert.equal(listed.code, 0, 'inspector resources/list exits 0');
  const resources = files(JSON.parse(listed.stdout).resources);
  assert.deepEqual(resources.map((r) => r.uri).sort(), ['corral://session/work/out/report.csv',
    'corral://session/work/out/result.json', 'corral://session/work/out/sub%20dir/data.bin'],
  'the session outlived the MCP session that opened it');
  const read = await inspectorCli([BIN, ...connect('alice'), '--method', 'resources/read',
    '--uri', 'corral://session/work/out/result.json'], env);
  t.note('inspector_read', { code: read.code, stdout: clip(read.stdout, 1500), stderr: clip(read.stderr, 1500) });
  assert.equal(read.code, 0, 'inspector resources/read exits 0');
  assert.deepEqual(JSON.parse(read.stdout).contents,
    [{ uri: 'corral://session/work/out/result.json', mimeType: 'application/json', text: '{"answer": 42}' }]);
  const refused = await inspectorCli([BIN, ...connect('alice'), '--method', 'resources/read',
    '--uri', 'corral://session/work/out/passwd'], env);
  t.note('inspector_refused', { code: refused.code, stdout: clip(refused.stdout, 1500) });
  assert.notEqual(refused.code, 0, 'a link out of /workspace is refused through the Inspector too');
  assert.match(refused.stdout + refused.stderr, /symbolic link to \/etc\/passwd, outside \/workspace/);
  assert.doesNotMatch(refused.stdout + refused.stderr, /root:x:0:0/);

  for (const other of ['bob', null]) {
    const r = await inspectorCli([BIN, ...connect(other), '--method', 'resources/list'], env);
    assert.equal(r.code, 0);
    assert.deepEqual(files(JSON.parse(r.stdout).resources), [], `${other ?? 'an unnamed client'} sees none of alice's`);
  }
  const bad = await run(BIN, connect('no spaces'), { env: corralEnv() });
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /client name "no spaces" is not valid/);

  // The host comes back under its name: its Python state is there too.
  const a2 = await t.daemon('alice-2', {}, { args: connect('alice') });
  const again = await a2.call(t, 'run_python', { session: 'work', code: 'print(open("out/result.json").read(), "os" in globals())' });
  assert.equal(again.structuredContent.stdout, '{"answer": 42} True\n');
  await toolCall(t, a2, 'session_close', { session: 'work' });
  assert.deepEqual(files((await a2.client.listResources()).resources), []);
  await a2.close();
  const how = await svc.stop();
  t.note('service_log', clip(svc.log, 3000));
  assert.deepEqual(how, { code: 0, signal: null }, 'the service stops cleanly');
  assert.doesNotMatch(svc.log, /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: /);
}, { timeoutMs: 180000 });
