// Results sized for a model: a result's text stays within result_max_chars
// (the first and last bytes of each stream, with a line saying how much was
// left out and where the whole is), and the whole output is kept on the
// host, read back in pieces with read_file and resources/read, byte for
// byte; a result's files are named by URIs that resources/read reads back.
//
//   node run.mjs results        (results:)

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  BIN, clip, CONFIG_HOME, corralEnv, inspectorCli, startService, test, toolCall,
} from './lib/harness.mjs';

const LIMIT = 20000; // result_max_chars's default
const LINE = 'x'.repeat(99) + '\n';

// `mb` MB of stdout and `emb` of stderr, 100-byte lines, each stream with
// a last line of its own.
const bigCode = (outLines, errLines) => `
import sys
o, e = sys.stdout.write, sys.stderr.write
line = 'x' * 99 + '\\n'
chunk = line * 1000
for i in range(${outLines} // 1000): o(chunk)
for i in range(${errLines} // 1000): e(chunk)
o('END\\n')
e('ERR-END\\n')
`;

function expected(lines, last) {
  const h = createHash('sha256');
  const chunk = LINE.repeat(1000);
  for (let i = 0; i < lines / 1000; i++) h.update(chunk);
  h.update(last);
  return { sha: h.digest('hex'), size: lines * LINE.length + Buffer.byteLength(last) };
}

const textOf = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');

// The whole of a kept stream through read_file, `limit` bytes a call.
async function readAll(t, d, uri, limit) {
  const h = createHash('sha256');
  let offset = 0, size = 0, calls = 0;
  for (;;) {
    const r = await d.client.callTool({ name: 'read_file', arguments: { path: uri, offset, limit } },
      undefined, { timeout: 60000 });
    assert.notEqual(r.isError, true, `read_file ${uri} at ${offset}: ${r.content?.[0]?.text?.slice(0, 300)}`);
    const sc = r.structuredContent;
    assert.equal(sc.offset, offset, 'each piece starts where the last ended');
    assert.ok(sc.length <= limit && sc.length <= 1 << 20, `a piece is at most limit and 1 MiB (${sc.length} <= ${limit})`);
    const text = r.content[0].text;
    const piece = text.slice(0, text.lastIndexOf('\n['));
    assert.equal(Buffer.byteLength(piece), sc.length, 'the text holds the piece, then its one footer line');
    h.update(piece);
    size = sc.size;
    calls++;
    if (sc.next_offset === null) break;
    offset = sc.next_offset;
  }
  return { sha: h.digest('hex'), size, calls };
}

// The same through resources/read, ?offset=N&limit=M.
async function readResourceAll(d, uri, limit) {
  const h = createHash('sha256');
  let offset = 0, size = 0, calls = 0;
  for (;;) {
    const r = await d.client.readResource({ uri: `${uri}?offset=${offset}&limit=${limit}` }, { timeout: 60000 });
    const c = r.contents[0];
    assert.equal(c._meta.offset, offset, 'a piece starts where asked');
    h.update(c.text);
    size = c._meta.size;
    calls++;
    offset += Buffer.byteLength(c.text);
    if (offset >= size || c.text.length === 0) break;
  }
  return { sha: h.digest('hex'), size, calls };
}

// A result of long output: within the limit, the last lines shown, and
// the whole of both streams given back.
async function checkBig(t, d, r, out, err, { pieces = 1 << 20 } = {}) {
  const sc = r.structuredContent;
  const text = textOf(r);
  t.note('result', { chars: text.length, stdout_bytes: sc.stdout_bytes, stderr_bytes: sc.stderr_bytes,
    stdout_uri: sc.stdout_uri, stderr_uri: sc.stderr_uri, head: text.slice(0, 200), tail: text.slice(-900) });
  assert.ok(text.length <= LIMIT, `the result's text is ${text.length} characters, at most ${LIMIT}`);
  assert.ok(JSON.stringify(sc).length <= 2 * LIMIT, 'structuredContent is bounded as well');
  assert.match(text, /END\n[^]*--- stderr ---/, 'stdout\'s last line is shown');
  assert.match(text, /ERR-END\n/, 'stderr\'s last line is shown');
  assert.equal(sc.stdout_bytes, out.size, 'stdout_bytes counts all of stdout');
  assert.equal(sc.stderr_bytes, err.size, 'stderr_bytes counts all of stderr');
  assert.equal(sc.stdout_truncated, true);
  assert.match(sc.stdout_uri, /^corral:\/\/run\/[0-9a-f]{8}\/stdout$/);
  assert.match(sc.stderr_uri, /^corral:\/\/run\/[0-9a-f]{8}\/stderr$/);
  assert.ok(text.includes(`read_file path "${sc.stdout_uri}"`), 'the marker names the path of the whole stdout');
  const wholeOut = await readAll(t, d, sc.stdout_uri, pieces);
  t.note('read_file stdout', wholeOut);
  assert.equal(wholeOut.size, out.size);
  assert.equal(wholeOut.sha, out.sha, 'read_file gives back stdout byte for byte');
  const wholeErr = await readResourceAll(d, sc.stderr_uri, pieces);
  t.note('resources/read stderr', wholeErr);
  assert.equal(wholeErr.sha, err.sha, 'resources/read gives back stderr byte for byte');
  return sc;
}

test('results: 50 MB of stdout and 5 MB of stderr come back as a result within result_max_chars with the last lines; read_file and resources/read give back both streams byte for byte', async (t) => {
  const d = await t.daemon('results-big');
  const r = await d.call(t, 'run_python', { code: bigCode(500000, 50000), timeout_s: 300, sync_wait_s: 300 },
    { timeoutMs: 330000 });
  assert.equal(r.structuredContent.status, 'ok', r.content[0].text.slice(-500));
  const out = expected(500000, 'END\n'), err = expected(50000, 'ERR-END\n');
  const sc = await checkBig(t, d, r, out, err, { pieces: 1 << 20 });
  // stdout through resources/read too, and a small window's characters.
  // A limit over 1 MiB is read as 1 MiB, so that no answer passes what
  // clients take in one message.
  const viaRes = await readResourceAll(d, sc.stdout_uri, 16 << 20);
  assert.equal(viaRes.sha, out.sha, 'resources/read gives back stdout byte for byte');
  assert.ok(viaRes.calls >= 48, `in pieces of at most 1 MiB (${viaRes.calls} reads)`);
  const whole = await d.client.readResource({ uri: sc.stderr_uri }).catch((e) => e);
  assert.match(String(whole.message), /in pieces/, 'a whole read over file_max_bytes says to read in pieces');
});

test('results: a session\'s and a job\'s long output are kept the same way; a call may ask for a smaller result', async (t) => {
  const d = await t.daemon('results-session');
  const out = expected(60000, 'END\n'), err = expected(20000, 'ERR-END\n');
  const s = await d.call(t, 'run_python', { session: 'long', code: bigCode(60000, 20000), timeout_s: 120 });
  assert.equal(s.structuredContent.status, 'ok');
  await checkBig(t, d, s, out, err);

  const job = await d.call(t, 'run_python', { code: bigCode(60000, 20000), sync_wait_s: 0, timeout_s: 120 });
  assert.equal(job.structuredContent.status, 'running');
  const done = await d.client.callTool({ name: 'job_result', arguments: { job_id: job.structuredContent.job_id, wait_s: 120 } },
    undefined, { timeout: 130000 });
  assert.equal(done.structuredContent.status, 'ok', done.content[0].text.slice(-300));
  await checkBig(t, d, done, out, err);

  const small = await d.call(t, 'run_shell', { command: 'seq 1 100000', result_max_chars: 2000 });
  const text = textOf(small);
  assert.ok(text.length <= 2000, `result_max_chars 2000: ${text.length} characters`);
  assert.match(text, /\n100000\n/, 'the last line is there');
  assert.match(text, /^1\n2\n3\n/, 'and the first');
  const bad = await d.call(t, 'run_shell', { command: 'true', result_max_chars: 10 });
  assert.equal(bad.structuredContent.status, 'invalid_arguments');
  assert.match(bad.content[0].text, /result_max_chars/);
});

test('results: files a result embeds or links are named by URIs resources/read gives back; unknown runs are refused; the run template is listed', async (t) => {
  const d = await t.daemon('results-uris');
  const code = "import os\nos.makedirs('/workspace/out', exist_ok=True)\n" +
    "open('/workspace/out/notes v1.txt', 'w').write('hello from a run\\n')\nprint('ok')";
  const one = await d.call(t, 'run_python', { code });
  const item = one.content.find((c) => c.type === 'resource');
  assert.ok(item, 'the file comes back embedded');
  assert.match(item.resource.uri, /^corral:\/\/run\/[0-9a-f]{8}\/out\/notes%20v1\.txt$/);
  const back = await d.client.readResource({ uri: item.resource.uri });
  assert.equal(back.contents[0].text, 'hello from a run\n', 'a single-use run\'s file is read back');

  const ses = await d.call(t, 'run_python', { code, session: 'u' });
  const sitem = ses.content.find((c) => c.type === 'resource');
  assert.equal(sitem.resource.uri, 'corral://session/u/out/notes%20v1.txt');
  const sback = await d.client.readResource({ uri: sitem.resource.uri });
  assert.equal(sback.contents[0].text, 'hello from a run\n', 'a session\'s file is read back');

  const stdout = await d.client.readResource({ uri: one.content[0].text.includes('ok') ? item.resource.uri.replace(/out\/.*/, 'stdout') : '' });
  assert.equal(stdout.contents[0].text, 'ok\n', 'a short run\'s stdout is kept too');

  // A text file longer than the result's room is a link, read back whole.
  const big = await d.call(t, 'run_python', { code: "open('/workspace/out/big.csv', 'w').write('n\\n' + ''.join(f'{i}\\n' for i in range(30000)))" });
  const link = big.content.find((c) => c.type === 'resource_link');
  t.note('link', link);
  assert.ok(link, 'a long text file comes back as a resource link');
  assert.match(link.uri, /^corral:\/\/run\/[0-9a-f]{8}\/out\/big\.csv$/);
  assert.ok(textOf(big).length <= LIMIT, 'the result stays within result_max_chars');
  const file = big.structuredContent.files[0];
  assert.deepEqual([file.returned, file.uri], [false, link.uri], 'files says where it is');
  const bigBack = await d.client.readResource({ uri: link.uri });
  assert.equal(bigBack.contents[0].text, 'n\n' + Array.from({ length: 30000 }, (_, i) => `${i}\n`).join(''));

  const gone = await d.client.readResource({ uri: 'corral://run/00000000/stdout' }).catch((e) => e);
  assert.equal(gone.code, -32002, 'an unknown run is "resource not found"');
  const rf = await toolCall(t, d, 'read_file', { path: 'corral://run/00000000/stdout' });
  assert.equal(rf.isError, true, 'read_file of an unknown run is an error');
  const tpl = (await d.client.listResourceTemplates()).resourceTemplates.map((x) => x.uriTemplate);
  assert.ok(tpl.includes('corral://run/{id}/{+stream}{?offset,limit}'), JSON.stringify(tpl));
});

test('results: the kept output lives in the process\'s own directory, gone when corral exits; one left by a killed corral goes when the next starts', async (t) => {
  const base = path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'corral', 'results');
  const dirOf = (pid) => readdirSync(base).filter((n) => n.startsWith(`${pid}-`)).map((n) => path.join(base, n));
  const a = await t.daemon('results-exit');
  await a.call(t, 'run_shell', { command: 'echo kept' });
  const [dirA] = dirOf(a.pid);
  assert.ok(dirA && existsSync(path.join(dirA, 'lock')), `${dirA} holds the run's output, and a lock`);
  await a.close();
  assert.ok(!existsSync(dirA), 'gone at exit');

  const b = await t.daemon('results-killed');
  await b.call(t, 'run_shell', { command: 'echo kept' });
  const [dirB] = dirOf(b.pid);
  assert.ok(dirB && existsSync(dirB));
  process.kill(Number(b.pid), 'SIGKILL');
  await b.close();
  assert.ok(existsSync(dirB), 'a killed corral leaves its directory');
  const c = await t.daemon('results-next');
  await c.call(t, 'run_shell', { command: 'echo next' });
  assert.ok(!existsSync(dirB), 'the next corral removed it (its lock was free)');
  assert.equal(dirOf(c.pid).length, 1, 'and keeps its own');
});

test('results: the Inspector CLI, each command an MCP session of a named client, lists the tools (--strict), runs code and reads its whole stdout back', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'corral-results-'));
  t.defer(() => rmSync(dir, { recursive: true, force: true }));
  const sock = path.join(dir, 'corral.sock');
  const svc = await startService(t, ['--listen', `unix:${sock}`], corralEnv(), sock);
  const target = [BIN, 'connect', '--socket', sock, '--as', 'inspector'];
  const env = { XDG_CONFIG_HOME: CONFIG_HOME };
  // --strict: the Inspector's schema portability check, which it runs
  // with tools/list only (exit 6 on an error-severity problem).
  const cli = async (what, args) => {
    const r = await inspectorCli([...target, ...args], env);
    t.note(what, { code: r.code, stdout: clip(r.stdout, 1200), stderr: clip(r.stderr, 1200) });
    assert.equal(r.code, 0, `${what} exits 0`);
    return JSON.parse(r.stdout);
  };
  const list = await cli('tools/list', ['--method', 'tools/list', '--strict']);
  t.note('tools/list bytes', JSON.stringify(list.tools).length);
  assert.ok(list.tools.some((x) => x.name === 'run_python'));
  const res = await cli('run_python', ['--method', 'tools/call', '--tool-name', 'run_python',
    '--tool-arg', 'code=for i in range(100000): print(i)']);
  const sc = res.structuredContent;
  assert.equal(sc.status, 'ok');
  assert.ok(res.content[0].text.length <= LIMIT, `within result_max_chars (${res.content[0].text.length})`);
  assert.match(res.content[0].text, /\n99999\n/, 'the last line is shown');
  assert.match(sc.stdout_uri, /^corral:\/\/run\/[0-9a-f]{8}\/stdout$/);
  const read = await cli('resources/read', ['--method', 'resources/read', '--uri', sc.stdout_uri]);
  const want = Array.from({ length: 100000 }, (_, i) => `${i}\n`).join('');
  assert.equal(read.contents[0].text.length, want.length, 'the whole stdout, in the next MCP session');
  assert.equal(read.contents[0].text, want);
  assert.deepEqual(await svc.stop(), { code: 0, signal: null }, 'the service stops cleanly');
}, { timeoutMs: 240000 });
