// The basics, through the SDK client and the shared daemon (t.main()):
// initialize and tools/list (and its size as sent, with a server
// configured), what run_python and run_shell return (output,
// exceptions with tracebacks, time limits, OOM, top-level await), ten
// overlapping calls, a call aborted by the client, and progress.
//
//   node run.mjs basics        (tests named initialize:, tools/list:,
//                              run_python:, run_shell:, concurrency:,
//                              cancellation:, progress:)

import { CallToolResultSchema, LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import {
  brief, CORRAL_TOOLS, corralContainers, out, sleep, startCall, STATUSES, test, twoReady, waitFor, waitPool, withTimeout,
} from './lib/harness.mjs';
import { bridgeSetup, everythingServer } from './lib/bridge.mjs';

test('initialize: server corral, protocol version negotiated', async (t) => {
  const d = await t.main();
  const info = d.client.getServerVersion();
  assert.equal(info?.name, 'corral', 'serverInfo.name');
  assert.equal(typeof info.version, 'string', 'serverInfo.version is a string');
  assert.equal(d.transport.negotiatedVersion, LATEST_PROTOCOL_VERSION,
    `corral accepts the SDK's latest protocol version ${LATEST_PROTOCOL_VERSION}`);
  const caps = d.client.getServerCapabilities();
  assert.ok(caps?.tools, 'server declares the tools capability');
  assert.equal(typeof d.client.getInstructions(), 'string', 'server gives instructions');
  // The SDK's ping goes through the same dispatch.
  assert.deepEqual(await d.client.ping(), {}, 'ping returns an empty result');
});

test('tools/list: run_python and run_shell with input and output schemas, sandbox_status, list_servers, search_tools', async (t) => {
  const d = await t.main();
  const { tools } = await d.client.listTools();
  assert.deepEqual(tools.map((x) => x.name).sort(), CORRAL_TOOLS, 'tool names');
  // sandbox_status: read-only, takes no arguments, returns an object.
  const st = tools.find((x) => x.name === 'sandbox_status');
  assert.equal(typeof st.description, 'string', 'sandbox_status has a description');
  assert.equal(st.inputSchema?.type, 'object', 'sandbox_status inputSchema is an object schema');
  assert.deepEqual(st.inputSchema.required ?? [], [], 'sandbox_status requires no argument');
  assert.deepEqual(Object.keys(st.inputSchema.properties ?? {}), [], 'sandbox_status takes no argument');
  assert.equal(st.annotations?.readOnlyHint, true, 'sandbox_status is annotated read-only');
  assert.equal(st.annotations?.openWorldHint, false, 'sandbox_status reaches nothing outside');
  for (const name of ['run_python', 'run_shell'])
    assert.notEqual(tools.find((x) => x.name === name).annotations?.readOnlyHint, true, `${name} is not read-only`);
  for (const [name, arg] of [['run_python', 'code'], ['run_shell', 'command']]) {
    const tool = tools.find((x) => x.name === name);
    assert.equal(typeof tool.description, 'string', `${name} has a description`);
    const inp = tool.inputSchema;
    assert.equal(inp?.type, 'object', `${name} inputSchema is an object schema`);
    assert.equal(inp.properties?.[arg]?.type, 'string', `${name}.${arg} is a string`);
    assert.equal(inp.properties?.timeout_s?.type, 'number', `${name}.timeout_s is a number`);
    assert.deepEqual(inp.required, [arg], `${name} requires ${arg}`);
    const outp = tool.outputSchema;
    assert.equal(outp?.type, 'object', `${name} declares an outputSchema`);
    assert.deepEqual([...(outp.properties?.status?.enum ?? [])].sort(), [...STATUSES].sort(),
      `${name} outputSchema lists every status`);
    for (const f of ['status', 'exit_code', 'stdout', 'stderr', 'duration_ms'])
      assert.ok(outp.required?.includes(f), `${name} outputSchema requires ${f}`);
    for (const f of ['stdout_bytes', 'stderr_bytes', 'stdout_truncated', 'stderr_truncated', 'container', 'error'])
      assert.ok(f in (outp.properties ?? {}), `${name} outputSchema describes ${f}`);
  }
});

// A host pays for tools/list in every conversation: the whole result, as
// corral writes it (schemas, annotations and all), stays within 9 KiB with
// a server configured, and a host still lists and calls as before.
test('tools/list: the whole result is at most 9 KiB as sent; a host lists and calls run_python and run_shell as before', async (t) => {
  const b = bridgeSetup(t, { servers: (root) => ({ everything: everythingServer(root) }) });
  const d = await t.daemon('lean', b.env);
  // The bytes on corral's stdout, beside the SDK's own reading of them
  // (the process is the transport's, as in Daemon.close).
  const stdout = d.transport._process.stdout;
  let raw = '';
  const tap = (chunk) => { raw += chunk.toString('utf8'); };
  stdout.on('data', tap);
  const { tools } = await d.client.listTools();
  stdout.off('data', tap);
  const line = raw.split('\n').find((l) => l.includes('"tools"') && JSON.parse(l).result?.tools);
  assert.ok(line, 'the tools/list answer was read off the wire');
  // corral writes the result last in its answer: cut it out, and check
  // that the cut is the result the SDK parsed.
  const at = line.indexOf('"result":');
  const result = line.slice(at + '"result":'.length, -1);
  assert.deepEqual(JSON.parse(result), JSON.parse(line).result, 'the cut is the whole result');
  const bytes = Buffer.byteLength(result, 'utf8');
  out(`# tools/list result: ${bytes} bytes as sent (${Buffer.byteLength(line)} with its JSON-RPC envelope), ${tools.length} tools`);
  t.note('tools_list_bytes', bytes);
  assert.ok(bytes <= 9216, `tools/list result is ${bytes} bytes, over 9216`);
  assert.deepEqual(tools.map((x) => x.name).sort(), CORRAL_TOOLS, 'every tool is still there');
  const rp = tools.find((x) => x.name === 'run_python');
  assert.match(rp.description, /Servers: everything\./, 'run_python names the configured server');
  assert.match(rp.description, /corral:\/\/guide/, 'and where the guide is');
  for (const arg of ['code', 'timeout_s', 'sync_wait_s', 'servers', 'session', 'session_servers', 'files'])
    assert.ok(arg in rp.inputSchema.properties, `run_python still takes ${arg}`);
  // As a host calls: arguments from the schema, the SDK checking each
  // structuredContent against the outputSchema.
  const py = await d.call(t, 'run_python', {
    code: 'print(mcp_everything.echo(message="lean").text)\ncorral.progress(1, 1)', servers: ['everything'],
  });
  assert.equal(py.structuredContent.status, 'ok', JSON.stringify(py.structuredContent));
  assert.match(py.structuredContent.stdout, /lean/);
  const sh = await d.call(t, 'run_shell', { command: 'echo "$((6 * 7))"', timeout_s: 10 });
  assert.equal(sh.structuredContent.status, 'ok', JSON.stringify(sh.structuredContent));
  assert.equal(sh.structuredContent.stdout, '42\n');
}, { timeoutMs: 90000 });

test('run_python: print output comes back in stdout and the text content', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: 'import sys\nprint("hello from corral")\nprint(2 + 3)\nprint("to stderr", file=sys.stderr)\n',
  });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'ok');
  assert.equal(r.isError, false);
  assert.equal(sc.exit_code, 0);
  assert.equal(sc.stdout, 'hello from corral\n5\n');
  assert.equal(sc.stdout_bytes, Buffer.byteLength('hello from corral\n5\n'));
  assert.equal(sc.stderr, 'to stderr\n');
  assert.equal(sc.stdout_truncated, false);
  assert.ok(/^[0-9a-f]{12}$/.test(sc.container), 'a container ran it');
  assert.ok(r.content[0].text.includes('hello from corral\n5\n'), 'stdout is in the text content');
  assert.ok(r.content[0].text.includes('to stderr'), 'stderr is in the text content');
});

test('run_python: an exception gives status error, ZeroDivisionError and a traceback with the line', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: 'x = 1\ny = 0\nprint("before")\nz = x / y\nprint("after")\n',
  });
  const sc = r.structuredContent;
  assert.equal(r.isError, true);
  assert.equal(sc.status, 'error');
  assert.equal(sc.stdout, 'before\n', 'output before the exception is kept');
  assert.notEqual(sc.exit_code, 0, 'exit code is not 0');
  assert.equal(sc.error?.type, 'ZeroDivisionError');
  assert.match(sc.error.message, /division by zero/);
  assert.equal(typeof sc.error.traceback, 'string', 'a traceback is given');
  assert.match(sc.error.traceback, /line 4\b/, 'the traceback names line 4');
  assert.match(sc.error.traceback, /z = x \/ y/, 'the traceback shows the source line');
  assert.match(r.content[0].text, /ZeroDivisionError/, 'the text content names the exception');
});

test('run_python: `while True: pass` with timeout_s 2 times out and its container is gone', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: 'while True:\n    pass\n', timeout_s: 2 }, { timeoutMs: 30000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'timeout');
  assert.equal(r.isError, true);
  assert.ok(r.ms >= 1900, `it ran about 2 s, not ${r.ms} ms`);
  assert.ok(r.ms < 10000, `the timeout result came within 10 s (took ${r.ms} ms)`);
  assert.ok(/^[0-9a-f]{12}$/.test(sc.container), 'the result names the container');
  const left = (await corralContainers()).filter((c) => c.id.startsWith(sc.container));
  t.note('containers_after_result', brief(left));
  assert.equal(left.length, 0, `container ${sc.container} is removed when the timeout result arrives`);
});

test('run_python: allocating 2 GiB with CORRAL_MEMORY=256m ends with status oom', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: 'b = bytearray(2 * 1024**3)\nb[::4096] = b"x" * len(b[::4096])\nprint("survived", len(b))\n',
    timeout_s: 60,
  }, { timeoutMs: 90000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'oom');
  assert.equal(r.isError, true);
  assert.ok(!sc.stdout.includes('survived'), 'the allocation did not succeed');
}, { timeoutMs: 120000 });

test('concurrency: ten overlapping calls each get their own output', async (t) => {
  const d = await t.main();
  const t0 = Date.now();
  const results = await Promise.all(Array.from({ length: 10 }, (_, i) => d.call(null, 'run_python', {
    code: `import time\ntime.sleep(0.5)\nprint("call-${i}")\n`,
  }, { timeoutMs: 90000 })));
  const wall = Date.now() - t0;
  t.note('wall_ms', wall);
  results.forEach((r, i) => {
    assert.equal(r.structuredContent.status, 'ok', `call ${i} ok`);
    assert.equal(r.structuredContent.stdout, `call-${i}\n`, `call ${i} got its own output`);
  });
  const ids = new Set(results.map((r) => r.structuredContent.container));
  assert.equal(ids.size, 10, 'each call ran in its own container');
  const serial = results.reduce((s, r) => s + r.ms, 0);
  assert.ok(wall < serial, `the calls overlapped (wall ${wall} ms < sum ${serial} ms)`);
}, { timeoutMs: 120000 });

test('cancellation: aborting a time.sleep(60) call removes its container', async (t) => {
  // With the warm pool (min 2) the call runs in one of the ready
  // sandboxes: the one of them that disappears after the abort is its.
  const d = await t.daemon('cancel');
  const { instance, ready, status: warm } = await twoReady(t, d);
  const ac = new AbortController();
  const t0 = Date.now();
  const { call: outcome, running } = startCall(d, 'run_python',
    { code: 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)\n' },
    { until: /sleeping/, signal: ac.signal, timeoutMs: 90000 });
  const taken = await waitPool(t, d, (p) => p.busy >= 1, 20000);
  assert.ok(taken.done, 'the call is running');
  assert.equal(taken.s.pool.hits, warm.pool.hits + 1, 'the call took a ready sandbox');
  await withTimeout(running, 30000, 'the code reaching time.sleep');
  const abortedAt = Date.now();
  ac.abort('e2e: cancelled by the test');
  const o = await withTimeout(outcome, 5000, 'callTool after abort');
  assert.ok(o.error, `callTool rejects after abort (got ${o.result ? 'a result' : 'nothing'})`);
  const gone = await waitFor(async () => {
    const now = new Set((await corralContainers(`io.corral.instance=${instance}`)).map((c) => c.id));
    const removed = ready.filter((c) => !now.has(c.id));
    return { done: removed.length >= 1, removed, now: [...now].map((id) => id.slice(0, 12)) };
  }, { timeoutMs: 10000 });
  t.note('after_cancel', gone);
  assert.equal(gone.removed.length, 1, 'the call\'s container (one of the ready ones) is removed within 10 s of the abort');
  t.note('removed_after_ms', Date.now() - abortedAt);
  const idle = await waitPool(t, d, (p) => p.busy === 0, 10000);
  assert.ok(idle.done, 'sandbox_status shows no busy sandbox after the abort');
  // The daemon goes on serving, and sent no response for the cancelled id.
  const r = await d.call(t, 'run_python', { code: 'print("after cancel")' });
  assert.equal(r.structuredContent.stdout, 'after cancel\n');
  const stray = d.errors.filter((e) => /unknown message ID|response/i.test(String(e?.message)));
  assert.deepEqual(stray.map((e) => e.message), [], 'no response arrived for the cancelled request');
  assert.ok(Date.now() - t0 < 30000, 'well before the 60 s sleep would have ended');
  assert.match(d.log, /cancel/i, 'corral logged the cancellation');
}, { timeoutMs: 90000 });

test('progress: notifications grow and never show more done than their total', async (t) => {
  const d = await t.main();
  const events = [];
  // Output between the code's reports steps the value; near the total
  // (2.9999 of 3) and after it (3 of 3, then 4 of 3) it must not pass it.
  const r = await d.client.callTool({ name: 'run_python', arguments: { code: [
    'import corral, time',
    'def lines(tag):',
    '    for i in range(3):',
    '        print(tag, i, flush=True)',
    '        time.sleep(0.25)',
    'corral.progress(1, 3, "one")', 'lines("a")',
    'corral.progress(2.9999, 3, "almost")', 'lines("b")',
    'corral.progress(3, 3, "done")', 'time.sleep(0.3)', 'lines("c")',
    'corral.progress(4, 3, "over")', 'time.sleep(0.4)',
  ].join('\n') } }, CallToolResultSchema, { timeout: 30000, onprogress: (e) => events.push(e) });
  t.note('progress', events);
  assert.equal(r.structuredContent.status, 'ok');
  assert.ok(events.length >= 6, `notifications came (${events.length})`);
  for (let i = 1; i < events.length; i++) {
    assert.ok(events[i].progress > events[i - 1].progress, `progress grows (${events[i - 1].progress} then ${events[i].progress})`);
  }
  for (const e of events) {
    if (e.total !== undefined) assert.ok(e.progress <= e.total, `progress ${e.progress} is not past its total ${e.total}`);
  }
  assert.ok(events.some((e) => e.progress === 3 && e.total === 3), 'the code\'s report of its total shows as 3 of 3');
  assert.ok(events.some((e) => e.progress > 2.9999 && e.progress < 3 && e.total === 3), 'output near the total stays below it');
  assert.ok(events.some((e) => e.progress > 3), 'output after the total still comes as progress (without a total)');
}, { timeoutMs: 60000 });

test('run_python: a timeout_s far below 1 ms still limits the code', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: 'import time\ntime.sleep(5)\nprint("slept")', timeout_s: 0.0001 },
    { timeoutMs: 30000 });
  assert.equal(r.structuredContent.status, 'timeout', 'a sub-millisecond limit is not "no limit"');
  assert.ok(!r.structuredContent.stdout.includes('slept'));
});

test('run_shell: `echo hi; exit 3` gives exit_code 3 and status error', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_shell', { command: 'echo hi; exit 3' });
  const sc = r.structuredContent;
  assert.equal(sc.stdout, 'hi\n');
  assert.equal(sc.exit_code, 3);
  assert.equal(sc.status, 'error');
  assert.equal(r.isError, true);
  const ok = await d.call(t, 'run_shell', { command: 'id -u; echo "$((6 * 7))"; echo err >&2' });
  assert.equal(ok.structuredContent.status, 'ok');
  assert.equal(ok.structuredContent.exit_code, 0);
  assert.equal(ok.structuredContent.stdout, '65534\n42\n');
  assert.equal(ok.structuredContent.stderr, 'err\n');
});

test('run_python: top-level await works', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: [
      'import asyncio',
      'async def double(x):',
      '    await asyncio.sleep(0.05)',
      '    return 2 * x',
      'print(await double(21))',
      'print(await asyncio.gather(double(1), double(2)))',
    ].join('\n'),
  });
  assert.equal(r.structuredContent.status, 'ok');
  assert.equal(r.structuredContent.stdout, '42\n[2, 4]\n');
});
