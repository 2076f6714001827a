// Files: write_file, read_file and list_files, files given with a call, what
// the code writes under /workspace/out coming back (a PNG as image content),
// a file of file_max_bytes as base64, names with control characters shown
// escaped, path escapes refused, and host directories mounted read-only.
//
//   node run.mjs files         (files:, mounts:)

import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BIN, clip, corralEnv, GVISOR, MiB, run, sha256, test, toolCall } from './lib/harness.mjs';

// A PNG made with the standard library only: 4x3 pixels of one colour.
const PNG_CODE = [
  'import hashlib, os, struct, zlib',
  'def chunk(kind, data):',
  '    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))',
  'raw = b"".join(b"\\x00" + bytes([200, 30, 60]) * 4 for _ in range(3))',
  'png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, 8, 2, 0, 0, 0))',
  '       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))',
  'os.makedirs("out", exist_ok=True)',
  'open("out/plot.png", "wb").write(png)',
  'print(hashlib.sha256(png).hexdigest())',
].join('\n');

test('files: write_file then run_python reads it; a PNG under /workspace/out comes back as image content; read_file and list_files', async (t) => {
  const d = await t.daemon('files');
  const w = await toolCall(t, d, 'write_file', { session: 'f', path: 'data/in.csv', content: 'a,b\n1,2\n3,4\n' });
  assert.equal(w.isError, false, 'write_file succeeds (and opens the session)');
  assert.deepEqual(w.structuredContent, { session: 'f', path: '/workspace/data/in.csv', bytes: 12 });
  const r = await d.call(t, 'run_python', { session: 'f', code: [
    'import csv',
    'rows = list(csv.DictReader(open("data/in.csv")))',
    'print(sum(int(r["a"]) + int(r["b"]) for r in rows))',
    PNG_CODE,
  ].join('\n') });
  assert.equal(r.structuredContent.status, 'ok', 'the code ran');
  const [sum, digest] = r.structuredContent.stdout.trim().split('\n');
  assert.equal(sum, '10', 'the code read the file written by write_file');
  const img = r.content.find((c) => c.type === 'image');
  assert.ok(img, 'the result carries image content');
  assert.equal(img.mimeType, 'image/png', 'with MIME type image/png');
  const bytes = Buffer.from(img.data, 'base64');
  assert.equal(sha256(bytes), digest, 'the very bytes the code wrote');
  assert.deepEqual(r.structuredContent.files, [{ path: 'out/plot.png', size: bytes.length, mime_type: 'image/png', returned: true, uri: 'corral://session/f/out/plot.png' }]);
  assert.match(r.content[0].text, /\[file out\/plot\.png: \d+ bytes, returned as an image\]/);
  // The next call returns only what it writes itself.
  const r2 = await d.call(t, 'run_python', { session: 'f', code: 'open("out/data.json", "w").write("{\\"n\\": 1}")' });
  assert.deepEqual(r2.structuredContent.files.map((f) => f.path), ['out/data.json'], 'only the new file comes back');
  const res = r2.content.find((c) => c.type === 'resource');
  assert.equal(res?.resource?.uri, 'corral://session/f/out/data.json', 'as an embedded resource the session\'s URI names');
  assert.equal(res?.resource?.text, '{"n": 1}', 'text files as text');

  // One-shot calls: files in through `files`, files out the same way.
  const one = await d.call(t, 'run_python', {
    files: [{ path: 'in/x.txt', content: 'from the host' }, { path: 'in/b.bin', content: Buffer.from([0, 1, 2, 255]).toString('base64'), encoding: 'base64' }],
    code: 'print(open("in/x.txt").read(), list(open("in/b.bin", "rb").read()))\n' + PNG_CODE,
  });
  assert.equal(one.structuredContent.status, 'ok');
  assert.equal(one.structuredContent.stdout.split('\n')[0], 'from the host [0, 1, 2, 255]', 'a one-shot call gets its files');
  assert.equal(one.content.filter((c) => c.type === 'image').length, 1, 'and returns its PNG as an image');
  assert.equal(one.structuredContent.session, undefined, 'no session there');

  // read_file: text whole and in windows; binary; images as images.
  const rt = await toolCall(t, d, 'read_file', { session: 'f', path: '/workspace/data/in.csv' });
  assert.equal(rt.content[0].text, 'a,b\n1,2\n3,4\n', 'read_file returns the text');
  assert.equal(rt.structuredContent.encoding, 'utf-8');
  assert.equal(rt.structuredContent.next_offset, null, 'nothing more to read');
  const win = await toolCall(t, d, 'read_file', { session: 'f', path: 'data/in.csv', offset: 4, limit: 4 });
  assert.equal(win.content[0].text, '1,2\n', 'offset and limit give a window');
  assert.deepEqual([win.structuredContent.offset, win.structuredContent.length, win.structuredContent.next_offset, win.structuredContent.size],
    [4, 4, 8, 12], 'the window\'s figures and where to go on');
  const rp = await toolCall(t, d, 'read_file', { session: 'f', path: 'out/plot.png' });
  const rimg = rp.content.find((c) => c.type === 'image');
  assert.equal(sha256(Buffer.from(rimg?.data ?? '', 'base64')), digest, 'read_file of the PNG gives the image');
  await d.call(t, 'run_python', { session: 'f', code: 'open("blob.bin", "wb").write(bytes(range(256)))' });
  const rb = await toolCall(t, d, 'read_file', { session: 'f', path: 'blob.bin' });
  const blob = rb.content.find((c) => c.type === 'resource')?.resource;
  assert.equal(rb.structuredContent.encoding, 'base64', 'bytes are base64');
  assert.deepEqual([...Buffer.from(blob?.blob ?? '', 'base64')], [...Array(256).keys()], 'as an embedded resource blob');
  const big = 'line\n'.repeat(300000); // 1.5 MB: over the default 1 MiB window
  await toolCall(t, d, 'write_file', { session: 'f', path: 'big.txt', content: big });
  const rbig = await toolCall(t, d, 'read_file', { session: 'f', path: 'big.txt' });
  assert.equal(rbig.structuredContent.length, 1048576, 'a large text comes in a 1 MiB window');
  assert.equal(rbig.structuredContent.truncated, true, '...marked truncated');
  const rest = await toolCall(t, d, 'read_file', { session: 'f', path: 'big.txt', offset: rbig.structuredContent.next_offset });
  assert.equal(rbig.content[0].text + rest.content[0].text, big, 'and next_offset reads the rest');

  // list_files
  const ls = await toolCall(t, d, 'list_files', { session: 'f', recursive: true });
  const entries = Object.fromEntries(ls.structuredContent.entries.map((e) => [e.path, e]));
  assert.equal(entries['data']?.type, 'dir', 'list_files shows directories');
  assert.equal(entries['data/in.csv']?.size, 12, '...files with their size');
  assert.equal(entries['out/plot.png']?.type, 'file');
  const top = await toolCall(t, d, 'list_files', { session: 'f', path: 'out' });
  assert.deepEqual(top.structuredContent.entries.map((e) => e.path).sort(), ['data.json', 'plot.png'], 'a subdirectory');
  const nosess = await toolCall(t, d, 'read_file', { session: 'never', path: 'x' });
  assert.equal(nosess.structuredContent.status, 'invalid_arguments', 'a session that does not exist');
  const missing = await toolCall(t, d, 'read_file', { session: 'f', path: 'nope.txt' });
  assert.equal(missing.structuredContent.error?.type, 'NotFound', 'a missing file: NotFound');
}, { timeoutMs: 120000 });

test('files: a file of file_max_bytes goes through write_file as base64, one byte more is refused with an answer; names with control characters are shown escaped', async (t) => {
  const d = await t.daemon('bigfile');
  const bytes = Buffer.alloc(16 * MiB);
  for (let i = 0; i < bytes.length; i += 4) bytes.writeUInt32LE((i * 2654435761) >>> 0, i);
  const w = await toolCall(t, d, 'write_file', { session: 'b', path: 'big.bin', content: bytes.toString('base64'), encoding: 'base64' }, 120000);
  assert.equal(w.isError, false, `16 MiB as base64 (a ~21.3 MiB line) is taken: ${clip(w.content[0].text, 300)}`);
  assert.equal(w.structuredContent.bytes, 16 * MiB, 'all of it');
  const h = await d.call(t, 'run_python', { session: 'b', code: 'import hashlib\nprint(hashlib.sha256(open("big.bin", "rb").read()).hexdigest())' });
  assert.equal(h.structuredContent.stdout.trim(), sha256(bytes), 'the same bytes in the sandbox');
  const over = await toolCall(t, d, 'write_file', { session: 'b', path: 'over.bin', content: Buffer.alloc(16 * MiB + 1).toString('base64'), encoding: 'base64' }, 120000);
  assert.equal(over.isError, true, 'one byte more is refused');
  assert.equal(over.structuredContent.status, 'invalid_arguments', `as invalid_arguments: ${clip(over.content[0].text, 300)}`);

  // A name is the sandbox's: in the text it must not move a terminal's
  // cursor, ring its bell, break a line or reorder what follows it.
  const names = ['red\x1b[31m\x1b[2J.txt', 'two\nlines\r.txt', 'bell\x07.txt', 'rlo\u202egnp.exe', 'back\\slash.txt'];
  await d.call(t, 'run_python', { session: 'b', code: `import json, os\nos.makedirs("out", exist_ok=True)\nfor n in json.loads(${JSON.stringify(JSON.stringify(names))}):\n    open("out/" + n, "w").write("x")` });
  const ls = await toolCall(t, d, 'list_files', { session: 'b', path: 'out' });
  const text = ls.content[0].text;
  assert.deepEqual(ls.structuredContent.entries.map((e) => e.path).sort(), [...names].sort(), 'structuredContent has the exact names');
  assert.doesNotMatch(text, /[\x00-\x08\x0b-\x1f\x7f\u202e]/, 'no control character in the text (newlines end its lines only)');
  for (const shown of ['red\\e[31m\\e[2J.txt', 'two\\nlines\\r.txt', 'bell\\a.txt', 'rlo\\u202egnp.exe', 'back\\\\slash.txt'])
    assert.ok(text.includes(shown), `the text shows ${shown}`);
  assert.equal(text.split('\n').length, names.length + 1, 'one line a name, and the footer');
  assert.match(text, /shown as C escapes/, 'and says how names are shown');
  // A run's files are listed the same way; one whose name corral cannot
  // fetch is listed with the reason, not dropped.
  const r = await d.call(t, 'run_python', { session: 'b', code: 'open("out/tab\\there.txt", "w").write("y")' });
  assert.ok(r.content[0].text.includes('[file out/tab\\there.txt: 1 bytes, not returned: '), `the result text escapes it: ${clip(r.content[0].text, 300)}`);
  assert.deepEqual(r.structuredContent.files.map((f) => [f.path, f.returned]), [['out/tab\there.txt', false]], 'its structuredContent has the exact name');
  assert.match(r.structuredContent.files[0].note, /control character.*rename/, 'and says why it was not returned');
}, { timeoutMs: 240000 });

test('files: a binary file through write_file and read_file keeps every byte (sha256), in several frames under a small max_frame; a FIFO and a directory are refused', async (t) => {
  // The smallest frames, 64 KiB: the file moves in chunks of 36 KiB each
  // way (a quarter of a frame is left for the rest of it).
  const d = await t.daemon('binary', { CORRAL_MAX_FRAME: '64k' });
  const bytes = Buffer.alloc(170000);
  for (let i = 0; i < bytes.length; i += 4) bytes.writeUInt32LE((i * 2246822519 + 7) >>> 0, i);
  const w = await toolCall(t, d, 'write_file', { session: 'bin', path: 'deep/er/blob.bin', content: bytes.toString('base64'), encoding: 'base64' });
  assert.equal(w.isError, false, `write_file takes it: ${clip(w.content[0].text, 300)}`);
  assert.equal(w.structuredContent.bytes, bytes.length, 'all of it');
  const h = await d.call(t, 'run_python', { session: 'bin', code: 'import hashlib, os\nprint(hashlib.sha256(open("deep/er/blob.bin", "rb").read()).hexdigest(), oct(os.stat("deep/er").st_mode & 0o777), os.stat("deep/er/blob.bin").st_uid)' });
  assert.equal(h.structuredContent.stdout.trim(), `${sha256(bytes)} 0o755 65534`, 'the same bytes in the sandbox, its directories made, the sandbox user\'s');
  const r = await toolCall(t, d, 'read_file', { session: 'bin', path: 'deep/er/blob.bin' });
  const blob = r.content.find((c) => c.type === 'resource')?.resource;
  assert.equal(r.structuredContent.encoding, 'base64', 'bytes come as base64');
  assert.equal(sha256(Buffer.from(blob?.blob ?? '', 'base64')), sha256(bytes), 'read_file gives back every byte (sha256)');
  // Written again, shorter: replaced, not overwritten in place.
  await toolCall(t, d, 'write_file', { session: 'bin', path: 'deep/er/blob.bin', content: 'short' });
  const again = await toolCall(t, d, 'read_file', { session: 'bin', path: 'deep/er/blob.bin' });
  assert.equal(again.content[0].text, 'short', 'a file written again holds only the new bytes');
  await d.call(t, 'run_python', { session: 'bin', code: 'import os\nos.mkfifo("pipe")' });
  const fifo = await toolCall(t, d, 'read_file', { session: 'bin', path: 'pipe' });
  assert.equal(fifo.isError, true, 'a FIFO is not read (nor waited on)');
  assert.match(fifo.content[0].text, /\/workspace\/pipe is not a regular file/, `saying so: ${clip(fifo.content[0].text, 200)}`);
  const dir = await toolCall(t, d, 'write_file', { session: 'bin', path: 'deep', content: 'x' });
  assert.equal(dir.isError, true, 'a directory is not written over');
  assert.match(dir.content[0].text, /\/workspace\/deep is a directory/, `saying so: ${clip(dir.content[0].text, 200)}`);
}, { timeoutMs: 120000 });

test('files: /workspace/out exists when code starts, one-shot and in a session (no mkdir needed)', async (t) => {
  const d = await t.daemon('outdir');
  const one = await d.call(t, 'run_python', { code: 'open("/workspace/out/x.txt", "w").write("one")' });
  assert.equal(one.structuredContent.status, 'ok', `a one-shot call writes there at once: ${clip(one.structuredContent.stderr, 400)}`);
  assert.deepEqual(one.structuredContent.files.map((f) => f.path), ['out/x.txt'], 'and the file comes back');
  const sh = await d.call(t, 'run_shell', { command: 'echo hi > /workspace/out/s.txt' });
  assert.equal(sh.structuredContent.status, 'ok', 'so does a shell');
  const a = await d.call(t, 'run_python', { session: 'o', code: 'open("/workspace/out/a.txt", "w").write("a")\nimport shutil\nshutil.rmtree("/workspace/out")' });
  assert.equal(a.structuredContent.status, 'ok', `a session's first call writes there, then removes the directory: ${clip(a.structuredContent.stderr, 400)}`);
  const b = await d.call(t, 'run_python', { session: 'o', code: 'open("/workspace/out/b.txt", "w").write("b")' });
  assert.equal(b.structuredContent.status, 'ok', 'the next call finds it again');
  assert.deepEqual(b.structuredContent.files.map((f) => f.path), ['out/b.txt'], 'and its file comes back');
}, { timeoutMs: 120000 });

test('mounts: host data read-only: files read, writes fail with EROFS, ro,nosuid,nodev, a symlink to /etc/passwd reads the container\'s; a missing path stops start-up', async (t) => {
  const host = mkdtempSync(path.join(tmpdir(), 'corral-mount-'));
  t.defer(() => rmSync(host, { recursive: true, force: true }));
  chmodSync(host, 0o755);
  mkdirSync(path.join(host, 'sub'));
  writeFileSync(path.join(host, 'sub', 'values.csv'), 'n\n1\n2\n', { mode: 0o644 });
  chmodSync(path.join(host, 'sub'), 0o755);
  symlinkSync('/etc/passwd', path.join(host, 'passwd-link'));
  const hostPasswd = readFileSync('/etc/passwd', 'utf8').split('\n')[0];
  const d = await t.daemon('mounts', { CORRAL_MOUNTS: `${host}:/data` });
  const rp = d.tools.find((x) => x.name === 'run_python');
  assert.match(rp.description, /Read-only host data: \/data\./, 'the tool says what is mounted where');
  const r = await d.call(t, 'run_python', { code: [
    'import errno, json, os',
    'out = {"list": sorted(os.listdir("/data")), "csv": open("/data/sub/values.csv").read()}',
    'try:',
    '    open("/data/new.txt", "w")',
    'except OSError as e:',
    '    out["write"] = errno.errorcode[e.errno]',
    'try:',
    '    os.mkdir("/data/sub/d")',
    'except OSError as e:',
    '    out["mkdir"] = errno.errorcode[e.errno]',
    'out["link"] = open("/data/passwd-link").read().splitlines()[0]',
    'out["opts"] = [l.split()[5] for l in open("/proc/self/mountinfo") if l.split()[4] == "/data"]',
    'print(json.dumps(out))',
  ].join('\n') });
  assert.equal(r.structuredContent.status, 'ok', `the code ran: ${clip(r.structuredContent.stderr, 400)}`);
  const o = JSON.parse(r.structuredContent.stdout);
  t.note('seen', o);
  assert.deepEqual(o.list, ['passwd-link', 'sub'], 'the host directory is there');
  assert.equal(o.csv, 'n\n1\n2\n', 'its files read');
  // gVisor may check a file's permissions before the mount's read-only
  // flag (uid 65534 gets EACCES where it may not write; which call does
  // differs by engine), and its mount table is its own: `ro` alone under
  // Podman, `rw` under Docker, whose volume driver made the host's mount
  // read-only beneath it. The writes failing is what holds there.
  const refused = GVISOR ? ['EROFS', 'EACCES'] : ['EROFS'];
  assert.ok(refused.includes(o.write), `a write fails with ${refused.join(' or ')} (${o.write})`);
  assert.ok(refused.includes(o.mkdir), `so does mkdir (${o.mkdir})`);
  assert.ok(o.opts.length === 1 && (GVISOR || ['ro', 'nosuid', 'nodev'].every((f) => o.opts[0].split(',').includes(f))),
    `mounted ro,nosuid,nodev: ${o.opts}`);
  assert.notEqual(o.link, hostPasswd, 'the symlink does not reach the host\'s /etc/passwd');
  assert.match(o.link, /^root:\*:0:0:/, 'it reads the container\'s own');
  // A mount that cannot be: corral says so and does not start.
  const bad = await run(BIN, ['run', '-c', 'print(1)'], { env: corralEnv({ CORRAL_MOUNTS: `${host}/missing:/data` }) });
  assert.notEqual(bad.code, 0, 'a missing host path: corral run fails');
  assert.match(bad.stderr, /missing: No such file or directory/, `saying which: ${bad.stderr}`);
  const bad2 = await run(BIN, ['run', '-c', 'print(1)'], { env: corralEnv({ CORRAL_MOUNTS: `${host}:/etc` }) });
  assert.match(bad2.stderr, /would hide the image's \/etc/, 'a mount over a system directory is refused');
}, { timeoutMs: 120000 });

test('files: path escapes (.., absolute, symlinks out of /workspace) are refused with a clear error', async (t) => {
  const d = await t.daemon('escapes');
  await d.call(t, 'run_python', { session: 'e', code: [
    'import os',
    'os.makedirs("real")',
    'open("real/ok.txt", "w").write("inside")',
    'os.symlink("/etc", "etc-link")',
    'os.symlink("/etc/passwd", "pw")',
    'os.symlink("real/ok.txt", "alias.txt")',
    'os.symlink("../../tmp", "real/up")',
  ].join('\n') });
  const cases = [
    ['read_file', { path: '../etc/passwd' }, 'InvalidPath', /contains ".."/],
    ['read_file', { path: '/etc/passwd' }, 'InvalidPath', /outside \/workspace/],
    ['write_file', { path: '../x', content: 'x' }, 'InvalidPath', /contains ".."/],
    ['write_file', { path: '/tmp/x', content: 'x' }, 'InvalidPath', /outside \/workspace/],
    ['read_file', { path: 'pw' }, 'PathEscape', /pw is a symbolic link to \/etc\/passwd, outside \/workspace/],
    ['read_file', { path: 'etc-link/passwd' }, 'PathEscape', /etc-link is a symbolic link to \/etc, outside \/workspace/],
    ['write_file', { path: 'etc-link/x', content: 'x' }, 'PathEscape', /outside \/workspace/],
    ['write_file', { path: 'real/up/x', content: 'x' }, 'PathEscape', /outside \/workspace/],
    ['list_files', { path: 'etc-link' }, 'NotFound', /outside \/workspace/],
  ];
  for (const [tool, args, type, re] of cases) {
    const r = await toolCall(t, d, tool, { session: 'e', ...args });
    assert.equal(r.isError, true, `${tool} ${args.path}: refused`);
    assert.equal(r.structuredContent.status, 'invalid_arguments', `${tool} ${args.path}: invalid_arguments`);
    assert.equal(r.structuredContent.error?.type, type, `${tool} ${args.path}: ${type}`);
    assert.match(r.content[0].text, re, `${tool} ${args.path}: the message says why`);
  }
  const files = await d.call(t, 'run_python', { code: 'pass', files: [{ path: '../../etc/x', content: '' }] });
  assert.equal(files.structuredContent.status, 'invalid_arguments', 'files with ".." are refused too');
  // Nothing was written through the links. (Python lists them: under
  // gVisor here, ls and stat fail with EINVAL from statx.)
  const check = await d.call(t, 'run_python', { session: 'e', code: 'import os\nfor d in ("/tmp", "real"):\n    for n in sorted(os.listdir(d)):\n        print(n)' });
  assert.equal(check.structuredContent.stdout, 'ok.txt\nup\n', 'no file appeared in /tmp');
  // A symlink that stays inside /workspace is followed.
  const alias = await toolCall(t, d, 'read_file', { session: 'e', path: 'alias.txt' });
  assert.equal(alias.content[0].text, 'inside', 'a symlink inside /workspace works');
  assert.equal(alias.structuredContent.path, '/workspace/real/ok.txt', '...and says where it led');
}, { timeoutMs: 90000 });
