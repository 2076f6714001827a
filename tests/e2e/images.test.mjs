// Images: the data image (pandas, matplotlib PNGs that decode, plt.show()),
// choosing an image per call, an image not offered refused, a session keeping
// its image, and `corral image list`. Needs corral-data:latest on the engine.
//
//   node run.mjs images        (images:)

import assert from 'node:assert/strict';
import { inflateSync } from 'node:zlib';
import { BIN, clip, corralEnv, engineRequest, run, test, toolCall } from './lib/harness.mjs';

// A PNG decoded far enough to know it is one: the signature, IHDR, and the
// IDAT stream inflating to exactly height rows of (filter byte + pixels).
function decodePng(buf) {
  assert.deepEqual([...buf.subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10], 'the PNG signature');
  let off = 8, ihdr = null;
  const idat = [];
  while (off + 12 <= buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    if (type === 'IHDR') ihdr = { width: data.readUInt32BE(0), height: data.readUInt32BE(4), depth: data[8], color: data[9] };
    if (type === 'IDAT') idat.push(data);
    off += 12 + len;
  }
  assert.ok(ihdr && ihdr.width > 0 && ihdr.height > 0, 'an IHDR with a size');
  const channels = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 }[ihdr.color];
  const raw = inflateSync(Buffer.concat(idat));
  assert.equal(raw.length, ihdr.height * (1 + Math.ceil(ihdr.width * channels * ihdr.depth / 8)),
    'the pixel data inflates to width x height');
  return ihdr;
}

test('images: the data image: pandas reads a CSV given in files, a matplotlib PNG comes back as an image that decodes, plt.show() gives pictures too', async (t) => {
  const d = await t.daemon('data', { CORRAL_IMAGE: 'corral-data:latest' });
  const rp = d.tools.find((x) => x.name === 'run_python');
  t.note('description', rp.description.slice(-600));
  assert.match(rp.description, /Images: data \(numpy, pandas, .*matplotlib.*\); python\./, 'the tool says what the image holds');
  const guide = (await d.client.readResource({ uri: 'corral://guide' })).contents[0].text;
  assert.match(guide, /Images: data \(numpy [\d.]+, pandas [\d.]+.*matplotlib [\d.]+/, 'the guide gives the packages\' versions');
  assert.equal(rp.inputSchema.properties.image?.enum?.[0], 'data', 'and offers images, the default first');
  assert.ok(rp.inputSchema.properties.image.enum.includes('python'), '...python among them');
  const csv = 'city,temp\nOslo,3\nRome,17\nCairo,29\n';
  const r = await d.call(t, 'run_python', {
    files: [{ path: 'in/temps.csv', content: csv }],
    code: [
      'import pandas as pd, matplotlib.pyplot as plt',
      'df = pd.read_csv("in/temps.csv")',
      'print(df.temp.sum(), len(df))',
      'df.plot.bar(x="city", y="temp")',
      'plt.savefig("/workspace/out/temps.png", dpi=50)',
      'plt.figure()',
      'plt.plot([1, 4, 9])',
      'plt.show()',
      'plt.plot([2, 3])',
      'plt.show()',
    ].join('\n'),
  }, { timeoutMs: 120000 });
  assert.equal(r.structuredContent.status, 'ok', `the code ran: ${clip(r.structuredContent.stderr, 800)}`);
  assert.equal(r.structuredContent.stdout, '49 3\n', 'pandas read the CSV');
  // show() saves every open figure (the bar plot is still open) and closes
  // them, so the second show() has only the new one.
  assert.deepEqual(r.structuredContent.files.map((f) => [f.path, f.mime_type, f.returned]).sort(),
    [['out/figure-1.png', 'image/png', true], ['out/figure-2.png', 'image/png', true],
      ['out/figure-3.png', 'image/png', true], ['out/temps.png', 'image/png', true]],
    'the saved plot and the shown figures come back');
  const imgs = r.content.filter((c) => c.type === 'image');
  assert.equal(imgs.length, 4, 'as four pictures');
  const sizes = imgs.map((c) => decodePng(Buffer.from(c.data, 'base64')));
  t.note('png', sizes);
  assert.ok(sizes.some((x) => x.width === 320 && x.height === 240), 'the 50 dpi plot is 320x240');
}, { timeoutMs: 180000 });

test('images: a call may choose the python image, an image not offered is refused, a session keeps its image; corral image list', async (t) => {
  const d = await t.daemon('choose', { CORRAL_IMAGE: 'corral-data:latest' });
  const py = await d.call(t, 'run_python', { image: 'python', code: 'import sys\nprint(sys.version_info[0])\nimport pandas' });
  assert.equal(py.structuredContent.stdout, '3\n', 'the python image runs the code');
  assert.equal(py.structuredContent.error?.type, 'ModuleNotFoundError', 'and has no pandas');
  const bad = await d.call(t, 'run_python', { image: 'ubuntu:22.04', code: '1' });
  assert.equal(bad.structuredContent.status, 'invalid_arguments', 'an image not offered is refused');
  assert.match(bad.content[0].text, /data \(the default\), python/, `naming what is offered: ${bad.content[0].text}`);
  // corral's own image (io.corral.daemon, tests/run builds it) runs corral,
  // not code: never offered, even though it has a profile label.
  if ((await engineRequest('GET', '/v1.41/images/corral:latest/json')).status === 200) {
    const own = await d.call(t, 'run_python', { image: 'corral:latest', code: '1' });
    assert.equal(own.structuredContent.status, 'invalid_arguments', 'corral\'s own image is not a sandbox image');
    const offered = own.content[0].text.match(/offers: ([^.]*)\./)?.[1];
    assert.ok(offered && !/corral/.test(offered), `nor named among those offered: ${own.content[0].text}`);
  } else {
    t.note('own_image', 'corral:latest is not on this engine: its exclusion is not checked');
  }
  const s1 = await d.call(t, 'run_python', { session: 'img', image: 'corral-python:latest', code: 'x = 1' });
  assert.equal(s1.structuredContent.status, 'ok', 'a session opens on the python image');
  const sl = await toolCall(t, d, 'session_list', {});
  assert.equal(sl.structuredContent.sessions.find((x) => x.name === 'img')?.image, 'corral-python:latest', 'session_list shows its image');
  const s2 = await d.call(t, 'run_python', { session: 'img', image: 'data', code: 'print(x)' });
  assert.equal(s2.structuredContent.status, 'invalid_arguments', 'another image for an open session is refused');
  assert.match(s2.content[0].text, /keeps the image it opened with/);
  const s3 = await d.call(t, 'run_python', { session: 'img', code: 'print(x)' });
  assert.equal(s3.structuredContent.stdout, '1\n', 'without `image` the session goes on');
  const list = await run(BIN, ['image', 'list'], { env: corralEnv() });
  t.note('image_list', list.stdout);
  assert.equal(list.code, 0, `corral image list exits 0: ${list.stderr}`);
  assert.match(list.stdout, /corral-data:latest +data .*numpy [\d.]+, pandas/, 'it lists the data image with its packages');
  assert.match(list.stdout, /corral-python:latest +python/, 'and the python image');
}, { timeoutMs: 180000 });
