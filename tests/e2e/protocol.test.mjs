// The protocol: tool-call argument errors through the SDK, and raw JSON lines
// on corral's stdin for what no SDK would send (malformed and oversized lines,
// requests before initialize, an id still in flight, invalid UTF-8, unknown
// methods, notifications, a cancelled call).
//
//   node run.mjs protocol      (tools/call argument errors:, raw protocol:)

import { McpError } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { brief, checkResult, clip, corralContainers, MiB, sleep, suiteStart, test, waitFor, waitNoContainers } from './lib/harness.mjs';

test('tools/call argument errors: unknown tool -32602, bad arguments invalid_arguments', async (t) => {
  const d = await t.main();
  await assert.rejects(d.client.callTool({ name: 'no_such_tool', arguments: {} }),
    (e) => e instanceof McpError && e.code === -32602, 'an unknown tool is a -32602 error');
  const bad = [
    { code: 5 },
    {},
    { code: 'print(1)', timeout_s: -1 },
    { code: 'print(1)', timeout_s: 'soon' },
    { code: 'print(1)', extra: true },
  ];
  for (const args of bad) {
    const r = await d.call(t, 'run_python', args);
    assert.equal(r.structuredContent.status, 'invalid_arguments', `${JSON.stringify(args)} is invalid_arguments`);
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.container, null, 'no container was started');
  }
  const r = await d.call(t, 'run_shell', { code: 'echo hi' });
  assert.equal(r.structuredContent.status, 'invalid_arguments', 'run_shell wants command, not code');
});

test('raw protocol: initialize echoes a supported version and offers its own for an unknown one', async (t) => {
  const raw = t.raw();
  const a = await raw.initialize(1, '2025-03-26');
  assert.equal(a.result?.protocolVersion, '2025-03-26', 'a supported older version is kept');
  assert.equal(a.result?.serverInfo?.name, 'corral');
  // Tasks came with 2025-11-25: an older client is offered none.
  assert.equal(a.result.capabilities.tasks, undefined, 'no tasks capability for 2025-03-26');
  await raw.send({ jsonrpc: '2.0', id: 10, method: 'tools/list' });
  const old = await raw.response(10);
  assert.ok(old.result.tools.every((x) => x.execution === undefined), 'no execution.taskSupport for 2025-03-26');
  await raw.send({ jsonrpc: '2.0', id: 11, method: 'tasks/list' });
  assert.equal((await raw.response(11)).error?.code, -32601, 'tasks/list: method not found for 2025-03-26');
  await raw.send({ jsonrpc: '2.0', id: 12, method: 'tools/list', params: { cursor: 'page-2' } });
  const cur = await raw.response(12);
  assert.equal(cur.error?.code, -32602, 'tools/list with an unknown cursor: -32602');
  await raw.send({ jsonrpc: '2.0', id: 2, method: 'initialize', params: {
    protocolVersion: '1999-01-01', capabilities: {}, clientInfo: { name: 'x', version: '1' } } });
  const b = await raw.response(2);
  assert.equal(typeof b.result?.protocolVersion, 'string', 'an unknown version gets a counter-offer');
  assert.notEqual(b.result.protocolVersion, '1999-01-01');
  assert.deepEqual(b.result.capabilities.tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } },
    'the latest version has tasks');
  const c = await raw.ping('string-id');
  assert.deepEqual(c, { jsonrpc: '2.0', id: 'string-id', result: {} }, 'ping with a string id');
  const exit = await raw.close();
  assert.equal(exit.code, 0, 'corral exits 0 when stdin closes');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
});

test('raw protocol: malformed JSON gets -32700 with id null', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send('{"jsonrpc": "2.0", "id": 7, "method": "ping"\n');
  const e = await raw.next((m) => 'error' in m, 10000, 'error reply');
  assert.equal(e.error.code, -32700);
  assert.equal(e.id, null, 'id is null');
  await raw.send('not json at all\n');
  const e2 = await raw.next((m) => 'error' in m, 10000, 'error reply');
  assert.equal(e2.error.code, -32700);
  assert.equal(e2.id, null);
  assert.deepEqual(await raw.ping(8), { jsonrpc: '2.0', id: 8, result: {} }, 'next ping answered');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
});

test('raw protocol: invalid requests get -32600', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  const cases = [
    ['{"jsonrpc":"2.0","id":11}\n', 11, 'no method'],
    ['{"jsonrpc":"1.0","id":12,"method":"ping"}\n', 12, 'wrong jsonrpc version'],
    ['{"jsonrpc":"2.0","id":13,"method":42}\n', 13, 'method not a string'],
    ['[]\n', null, 'empty batch'],
    ['[{"jsonrpc":"2.0","id":15,"method":"ping"}]\n', null, 'a batch'],
    ['{"jsonrpc":"2.0","id":16,"method":"ping","params":5}\n', 16, 'params not structured'],
  ];
  for (const [line, id, why] of cases) {
    await raw.send(line);
    const e = await raw.next((m) => 'error' in m, 10000, `error reply (${why})`);
    assert.equal(e.error.code, -32600, `${why}: -32600`);
    assert.equal(e.id, id, `${why}: id ${id}`);
  }
  assert.deepEqual(await raw.ping(14), { jsonrpc: '2.0', id: 14, result: {} }, 'next ping answered');
});

test('raw protocol: valid JSON that is not an object (42, "x", null, true) gets -32600', async (t) => {
  // JSON-RPC 2.0: -32700 is for text that is not JSON; well-formed JSON
  // that is not a request object is an Invalid Request (-32600).
  const raw = t.raw();
  await raw.initialize();
  const got = [];
  for (const line of ['42', '"x"', 'null', 'true']) {
    await raw.send(line + '\n');
    const e = await raw.next((m) => 'error' in m, 10000, `error reply to ${line}`);
    got.push({ sent: line, code: e.error.code, id: e.id, message: e.error.message });
  }
  t.note('replies', got);
  assert.deepEqual(got.map((g) => [g.sent, g.code, g.id]),
    [['42', -32600, null], ['"x"', -32600, null], ['null', -32600, null], ['true', -32600, null]]);
  assert.deepEqual(await raw.ping(17), { jsonrpc: '2.0', id: 17, result: {} }, 'next ping answered');
});

test('raw protocol: a line over the limit is refused under its id when the id can be read (first or last), else with id null; the next ping is answered', async (t) => {
  // The host's line limit is max_frame, raised to fit a write_file of
  // file_max_bytes (16 MiB) in base64: about 21.4 MiB by default.
  const raw = t.raw();
  await raw.initialize();
  const pad = 'a'.repeat(24 * MiB);
  await raw.send(`{"jsonrpc":"2.0","id":21,"method":"ping","params":{"pad":"${pad}"}}\n`);
  const e = await raw.next((m) => 'error' in m, 30000, 'error reply to the oversized line (id first)');
  assert.equal(e.error.code, -32600, 'oversized message: -32600');
  assert.equal(e.id, 21, 'answered under its id, read from the start of the line');
  assert.match(e.error.message, /larger than the limit/, `the message says why: ${e.error.message}`);
  // An SDK may write "id" last, after the large params.
  await raw.send(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"run_python","arguments":{"code":"${pad}"}},"id":"last-22"}\n`);
  const e2 = await raw.next((m) => 'error' in m, 30000, 'error reply to the oversized line (id last)');
  assert.equal(e2.id, 'last-22', 'answered under its id, read from the end of the line');
  // Not one JSON value (an unterminated string): no id can be trusted.
  await raw.send(`{"jsonrpc":"2.0","id":23,"method":"ping","params":{"pad":"${pad}}\n`);
  const e3 = await raw.next((m) => 'error' in m, 30000, 'error reply to the oversized broken line');
  assert.equal(e3.id, null, 'a line that is not one JSON value is answered with id null');
  // A notification gets no reply, even an oversized one.
  await raw.send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"pad":"${pad}"}}\n`);
  const p = await raw.ping(24, 15000);
  assert.deepEqual(p, { jsonrpc: '2.0', id: 24, result: {} }, 'the next ping is answered');
  await sleep(300);
  assert.deepEqual(raw.msgs, [], 'nothing else was sent (no reply to the notification, none to the oversized ping)');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
  // The limit is configurable: --max-frame / CORRAL_MAX_FRAME 64k with a
  // small file_max_bytes refuse a 100 KiB line and still take a 50 KiB one.
  for (const [env, args, how] of [[{ CORRAL_FILE_MAX_BYTES: '1k' }, ['--max-frame', '64k'], '--max-frame'],
    [{ CORRAL_MAX_FRAME: '64k', CORRAL_FILE_MAX_BYTES: '1k' }, [], 'CORRAL_MAX_FRAME']]) {
    const small = t.raw(env, args);
    await small.initialize();
    await small.send(`{"jsonrpc":"2.0","id":25,"method":"ping","params":{"pad":"${'b'.repeat(100 * 1024)}"}}\n`);
    const e4 = await small.next((m) => 'error' in m, 10000, `error reply under ${how} 64k`);
    assert.equal(e4.error.code, -32600, `${how} 64k refuses 100 KiB`);
    assert.equal(e4.id, 25, 'under its id');
    await small.send(`{"jsonrpc":"2.0","id":26,"method":"ping","params":{"pad":"${'c'.repeat(50 * 1024)}"}}\n`);
    assert.deepEqual(await small.response(26), { jsonrpc: '2.0', id: 26, result: {} }, `${how} 64k takes 50 KiB`);
  }
}, { timeoutMs: 90000 });

test('raw protocol: only ping is answered before initialize; a second request with an id still in flight is refused and the first is answered', async (t) => {
  const raw = t.raw();
  await raw.send({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  const e = await raw.response(1);
  assert.equal(e.error?.code, -32600, 'tools/list before initialize: -32600');
  assert.match(e.error.message, /initialize/, `the message says to initialize first: ${e.error?.message}`);
  await raw.send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'run_python', arguments: { code: 'print(1)' } } });
  assert.equal((await raw.response(2)).error?.code, -32600, 'tools/call before initialize: -32600');
  assert.deepEqual(await raw.ping(3), { jsonrpc: '2.0', id: 3, result: {} }, 'ping before initialize is answered');
  const init = await raw.initialize(4);
  assert.equal(init.result?.serverInfo?.name, 'corral', 'then initialize works');
  await raw.send({ jsonrpc: '2.0', id: 5, method: 'tools/list' });
  assert.ok((await raw.response(5)).result?.tools?.length > 0, 'and tools/list after it');

  // Duplicate ids: the second is refused at once, under the same id (JSON-RPC
  // has no other way to answer); the first one's own answer still comes.
  await raw.send({ jsonrpc: '2.0', id: 'dup', method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(2)\nprint("first")' } } });
  // Read after the first (one stream, in order): the first is in flight.
  await raw.send({ jsonrpc: '2.0', id: 'dup', method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'print("second")' } } });
  const d1 = await raw.response('dup', 15000);
  assert.equal(d1.error?.code, -32600, `the duplicate is refused: ${clip(JSON.stringify(d1), 300)}`);
  assert.match(d1.error.message, /still running/, 'saying why');
  const d2 = await raw.response('dup', 30000);
  assert.equal(d2.result?.structuredContent?.stdout, 'first\n', 'the first request is answered as if the second had not come');
  // 7 and 7.0 are one id; once answered, an id may be used again.
  await raw.send({ jsonrpc: '2.0', id: 7, method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(2)\nprint("seven")' } } });
  await raw.send('{"jsonrpc":"2.0","id":7.0,"method":"ping"}\n');
  const s1 = await raw.response(7, 15000);
  assert.equal(s1.error?.code, -32600, '7.0 while 7 runs: refused');
  assert.equal((await raw.response(7, 30000)).result?.structuredContent?.stdout, 'seven\n', 'and 7 is answered');
  assert.deepEqual(await raw.ping(7), { jsonrpc: '2.0', id: 7, result: {} }, 'an answered id may be used again');
  assert.deepEqual(raw.garbage, [], 'every stdout line was JSON');
}, { timeoutMs: 90000 });

test('raw protocol: invalid UTF-8 is refused and the next ping is answered', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send(Buffer.concat([
    Buffer.from('{"jsonrpc":"2.0","id":31,"method":"ping","params":{"x":"'),
    Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80]),
    Buffer.from('"}}\n'),
  ]));
  const e = await raw.next((m) => 'error' in m, 10000, 'error reply to invalid UTF-8');
  assert.ok([-32700, -32600].includes(e.error.code), `code ${e.error.code} is -32700 or -32600`);
  assert.ok(e.id === null || e.id === 31, 'id null (or the request id)');
  assert.deepEqual(await raw.ping(32), { jsonrpc: '2.0', id: 32, result: {} }, 'next ping answered');
  assert.deepEqual(raw.garbage, [], 'stdout stayed valid UTF-8 JSON');
});

test('raw protocol: unknown methods (incl. server/discover) get -32601', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  for (const [id, method] of [[41, 'server/discover'], [42, 'no/such/method'], [43, 'prompts/list']]) {
    await raw.send({ jsonrpc: '2.0', id, method, params: {} });
    const e = await raw.response(id);
    assert.equal(e.error?.code, -32601, `${method}: -32601`);
  }
});

test('raw protocol: tools/call with code 5 is a tool result with status invalid_arguments', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send({ jsonrpc: '2.0', id: 51, method: 'tools/call', params: { name: 'run_python', arguments: { code: 5 } } });
  const r = await raw.response(51);
  assert.equal(r.error, undefined, 'not a JSON-RPC error');
  assert.equal(r.result?.isError, true);
  assert.equal(r.result.structuredContent?.status, 'invalid_arguments');
  checkResult(r.result);
  await raw.send({ jsonrpc: '2.0', id: 52, method: 'tools/call', params: { name: 'nope', arguments: {} } });
  const u = await raw.response(52);
  assert.equal(u.error?.code, -32602, 'an unknown tool is -32602');
});

test('raw protocol: notifications get no reply', async (t) => {
  const raw = t.raw();
  await raw.initialize();
  await raw.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  await raw.send({ jsonrpc: '2.0', method: 'notifications/roots/list_changed' });
  await raw.send({ jsonrpc: '2.0', method: 'some/unknown/notification', params: { a: 1 } });
  await raw.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 999 } });
  await raw.send({ jsonrpc: '2.0', method: 'ping' });
  const p = await raw.ping(61);
  assert.deepEqual(p, { jsonrpc: '2.0', id: 61, result: {} });
  await sleep(300);
  assert.deepEqual(raw.msgs, [], 'nothing but the ping reply was sent');
});

test('raw protocol: a cancelled tools/call gets no response and its container is removed', async (t) => {
  // Pool off: the call's container is the only one this process creates
  // (the warm path is covered by the SDK cancellation test).
  const raw = t.raw({ CORRAL_POOL_MAX: '0' });
  await raw.initialize();
  await raw.send({ jsonrpc: '2.0', id: 71, method: 'tools/call',
    params: { name: 'run_python', arguments: { code: 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)' },
      _meta: { progressToken: 'p71' } } });
  const seen = await waitFor(async () => {
    const cs = (await corralContainers(`io.corral.pid=${raw.pid}`)).filter((c) => c.created >= suiteStart);
    return { done: cs.some((c) => c.state === 'running'), cs };
  }, { timeoutMs: 20000 });
  t.note('before_cancel', brief(seen.cs));
  assert.ok(seen.done, 'the call\'s container is running');
  const instance = seen.cs[0].instance;
  await raw.next((m) => m.method === 'notifications/progress' && /sleeping/.test(m.params?.message ?? ''),
    30000, 'progress saying the code runs');
  await raw.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 71, reason: 'test' } });
  assert.deepEqual(await raw.ping(72), { jsonrpc: '2.0', id: 72, result: {} }, 'the daemon answers a ping');
  const gone = await waitNoContainers(`io.corral.instance=${instance}`, { timeoutMs: 10000 });
  t.note('after_cancel', brief(gone.cs));
  assert.ok(gone.done, 'the container is removed within 10 s');
  await sleep(1000);
  assert.equal(raw.msgs.find((m) => m.id === 71), undefined, 'no response for the cancelled request');
  const exit = await raw.close();
  assert.equal(exit.code, 0, 'corral exits 0 on stdin EOF');
}, { timeoutMs: 60000 });
