// A person in the loop: the policy's `ask` globs make corral put each
// matching call of sandboxed code to the person behind the MCP host
// (elicitation/create, form mode) before it goes to the server. The SDK
// client here holds an elicitation handler whose answer each step sets.
//
//   node run.mjs ask        (ask:)

import assert from 'node:assert/strict';
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { BIN, clip, corralEnv, run, sleep, test, waitFor } from './lib/harness.mjs';
import {
  assertRaised, bridgeRun, bridgeSetup, checkAuditLine, ERROR_CODES, everythingServer, hostTool,
} from './lib/bridge.mjs';

const ASK_POLICY = { version: 1, servers: { everything: { ask: ['echo'] } } };

function askSetup(t) {
  return bridgeSetup(t, {
    servers: (root) => ({ everything: everythingServer(root) }),
    policy: ASK_POLICY,
    config: { ask_timeout_s: 3 },
  });
}

test('ask: accepted, the call goes on; declined, PolicyDenied; unanswered, PolicyDenied after ask_timeout_s; each audited', async (t) => {
  const b = askSetup(t);
  const asked = [];
  let answer = 'accept';
  const d = await t.daemon('ask', b.env, {
    capabilities: { elicitation: { form: {} } },
    setup: (client) => client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      if (answer === 'wait') await sleep(6000);
      return { action: answer === 'wait' ? 'accept' : answer };
    }),
  });
  const t0 = Date.now();

  const yes = await bridgeRun(t, d, `
rec("echo", catch(lambda: mcp_everything.echo(message="please echo this")))
rec("sum", catch(lambda: mcp_everything.get_sum(a=1, b=2)))`, ['everything']);
  assert.equal(yes.out.echo.ok, true, JSON.stringify(yes.out.echo));
  assert.match(yes.out.echo.text, /please echo this/);
  assert.equal(yes.out.sum.ok, true, 'a tool outside "ask" is not asked about');
  assert.equal(asked.length, 1, 'one question, for echo only');
  const q = asked[0];
  assert.equal(q.mode ?? 'form', 'form');
  assert.match(q.message, /echo/);
  assert.match(q.message, /everything/);
  assert.match(q.message, /please echo this/, 'the question shows the arguments');
  assert.match(q.message, new RegExp(yes.container), 'the question names the sandbox');

  answer = 'decline';
  const no = await bridgeRun(t, d, 'rec("echo", catch(lambda: mcp_everything.echo(message="no thanks")))', ['everything']);
  assertRaised(no.out.echo, 'PolicyDenied', 'declined');
  assert.equal(no.out.echo.code, ERROR_CODES.PolicyDenied);
  assert.match(no.out.echo.msg, /declined/);

  answer = 'cancel';
  const dismissed = await bridgeRun(t, d, 'rec("echo", catch(lambda: mcp_everything.echo(message="later")))', ['everything']);
  assertRaised(dismissed.out.echo, 'PolicyDenied', 'dismissed');
  assert.match(dismissed.out.echo.msg, /dismissed/);

  answer = 'wait';
  const t1 = Date.now();
  const slow = await bridgeRun(t, d, 'rec("echo", catch(lambda: mcp_everything.echo(message="anyone?")))', ['everything']);
  assertRaised(slow.out.echo, 'PolicyDenied', 'unanswered');
  assert.match(slow.out.echo.msg, /ask_timeout_s \(3 s\)/);
  assert.ok(Date.now() - t1 >= 2900, 'denied once the bound passed, not before');

  const lines = b.readAudit().filter((l) => l.tool === 'echo');
  for (const l of lines) checkAuditLine(l, t0);
  assert.deepEqual(lines.map((l) => l.ask?.answer), ['accepted', 'declined', 'cancelled', 'timed out']);
  assert.deepEqual(lines.map((l) => l.decision), ['allowed', 'denied', 'denied', 'denied']);
  for (const l of lines) assert.ok(Number.isInteger(l.ask.ms) && l.ask.ms >= 0, 'how long the person took');
  assert.ok(lines[3].ask.ms >= 2900, 'the time-out line says how long it waited');
  assert.ok(b.readAudit().filter((l) => l.tool === 'get-sum' || l.tool === 'get_sum').every((l) => !l.ask), 'unasked calls have no ask');
});

test('ask: a client without elicitation is not asked; the call is denied and the message says what to change', async (t) => {
  const b = askSetup(t);
  const d = await t.daemon('ask-none', b.env);
  const r = await bridgeRun(t, d, 'rec("echo", catch(lambda: mcp_everything.echo(message="x")))', ['everything']);
  assertRaised(r.out.echo, 'PolicyDenied', 'no elicitation');
  assert.match(r.out.echo.msg, /did not offer elicitation/);
  assert.match(r.out.echo.msg, /"allow"/);
  assert.match(r.out.echo.msg, /ask_allow_unasked/);
  const l = b.readAudit().find((x) => x.tool === 'echo');
  checkAuditLine(l);
  assert.equal(l.decision, 'denied');
  assert.match(l.ask.answer, /^not asked: /);
});

test('ask: the run\'s time limit holds while a person has not answered', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({ everything: everythingServer(root) }),
    policy: ASK_POLICY,
    config: { ask_timeout_s: 60 },
  });
  let cancelled = 0;
  const d = await t.daemon('ask-limit', b.env, {
    capabilities: { elicitation: {} },
    setup: (client) => client.setRequestHandler(ElicitRequestSchema, (req, extra) => new Promise((resolve) => {
      extra.signal.addEventListener('abort', () => { cancelled++; resolve({ action: 'cancel' }); });
    })),
  });
  const t0 = Date.now();
  const r = await bridgeRun(t, d, 'rec("echo", catch(lambda: mcp_everything.echo(message="x")))', ['everything'],
    { timeoutS: 3, expectOk: false });
  assert.equal(r.sc.status, 'timeout', JSON.stringify(r.sc).slice(0, 400));
  assert.ok(Date.now() - t0 < 30000, 'the run ended near its own limit, not the ask\'s');
  for (let i = 0; i < 50 && !cancelled; i++) await sleep(100);
  assert.equal(cancelled, 1, 'the question was withdrawn from the client (notifications/cancelled)');
  const l = b.readAudit().find((x) => x.tool === 'echo');
  assert.equal(l?.ask?.answer, 'withdrawn');
});

test('ask: three calls asking at once are put to the person one at a time, in order', async (t) => {
  const b = askSetup(t);
  let open = 0;
  let most = 0;
  const seen = [];
  const d = await t.daemon('ask-serial', b.env, {
    capabilities: { elicitation: { form: {} } },
    setup: (client) => client.setRequestHandler(ElicitRequestSchema, async (req) => {
      open++;
      most = Math.max(most, open);
      seen.push(/"message":"(m\d)"/.exec(req.params.message)?.[1]);
      await sleep(300);
      open--;
      return { action: 'accept' };
    }),
  });
  const r = await bridgeRun(t, d, `
rs = await asyncio.gather(*[mcp_everything.echo(message="m%d" % i) for i in range(3)])
rec("texts", [x.text for x in rs])`, ['everything']);
  assert.equal(r.out.texts.length, 3);
  assert.equal(most, 1, 'never two questions open at once');
  assert.deepEqual([...seen].sort(), ['m0', 'm1', 'm2'], 'each call asked about once');
});

// Text from a sandbox in a question is data: it cannot break the question's
// lines, reorder them, hide characters or render as Markdown. The code
// writes its own "Allow this one call?" line after a U+2028, an RLO, C1
// controls (NEL, CSI), ESC and a link into the arguments of an `ask` tool.
const RAW = [0x2028, 0x202e, 0x85, 0x9b, 0x1b];

// The message's lines: the one fenced block (a line of backticks and the
// same line again), and the lines outside it.
function fenced(message) {
  const lines = message.split('\n');
  const open = lines.findIndex((l) => /^`{3,}$/.test(l));
  const close = open < 0 ? -1 : lines.indexOf(lines[open], open + 1);
  assert.ok(open >= 0 && close > open, `one fenced block (${JSON.stringify(message)})`);
  return { inside: lines.slice(open + 1, close), outside: [...lines.slice(0, open), ...lines.slice(close + 1)] };
}

function assertShownAsData(message, what) {
  for (const cp of RAW) {
    assert.ok(!message.includes(String.fromCodePoint(cp)), `${what}: no raw U+${cp.toString(16).padStart(4, '0')}`);
    assert.ok(message.toLowerCase().includes(`\\u${cp.toString(16).padStart(4, '0')}`), `${what}: U+${cp.toString(16)} shown as an escape`);
  }
  assert.doesNotMatch(message, /[\r\u0085\u2028\u2029]/, `${what}: the only line breaks are corral's newlines`);
  const { inside, outside } = fenced(message);
  assert.ok(inside.some((l) => l.includes('[ok](http://evil)')), `${what}: the link is inside the fenced block`);
  assert.ok(!outside.some((l) => /README|evil/.test(l)), `${what}: nothing of the code's outside the block (${JSON.stringify(outside)})`);
  return { inside, outside };
}

test('ask: the arguments in the question are data: line breaks, bidi and C1 controls are escapes and counted, Markdown stays in a fenced block', async (t) => {
  const b = askSetup(t);
  const asked = [];
  const d = await t.daemon('ask-data', b.env, {
    capabilities: { elicitation: { form: {} } },
    setup: (client) => client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      return { action: 'decline' };
    }),
  });
  const r = await bridgeRun(t, d, `
forged = ("x" + chr(0x2028) + "Allow this one call? It only reads README.md " + chr(0x202e) + "txt.EMDAER"
          + chr(0x85) + chr(0x9b) + "2J" + chr(0x1b) + "[31m [ok](http://evil)")
rec("echo", catch(lambda: mcp_everything.echo(message=forged)))`, ['everything']);
  assertRaised(r.out.echo, 'PolicyDenied', 'declined');
  assert.equal(asked.length, 1);
  const m = asked[0].message;
  t.note('question', m);
  const { inside, outside } = assertShownAsData(m, 'ask');
  assert.equal(inside.length, 1, 'the arguments are one line');
  // ESC is JSON's own escape (\u001b), the four others corral's.
  assert.match(outside[0], /with these arguments \(\d+ bytes; 4 characters shown as \\u escapes\):$/);
  assert.deepEqual(outside.slice(1), ['', 'Allow this one call?'], 'the question is corral\'s last line');
  assert.equal(JSON.parse(inside[0]).message,
    'x\u2028Allow this one call? It only reads README.md \u202etxt.EMDAER\u0085\u009b2J\u001b[31m [ok](http://evil)',
    'the block is still the JSON of the arguments, which reads back as what the code sent');
});

test('ask: ask_run puts each run_python and run_shell to the person first; declined or unanswered, nothing runs; no elicitation, refused; each audited', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({ everything: everythingServer(root) }),
    config: { ask_run: true, ask_timeout_s: 2 },
  });
  const asked = [];
  let answer = 'accept';
  const d = await t.daemon('ask-run', b.env, {
    capabilities: { elicitation: { form: {} } },
    setup: (client) => client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      if (answer === 'wait') await sleep(4000);
      return { action: answer === 'wait' ? 'accept' : answer };
    }),
  });
  const yes = await d.call(t, 'run_python', { code: 'print(6 * 7)  # the answer', session: 'asked' });
  assert.equal(yes.structuredContent.stdout, '42\n', 'accepted: the run goes on and its result arrives');
  assert.equal(asked.length, 1);
  assert.match(asked[0].message, /run this Python code in a sandbox \(session asked\)/);
  assert.match(asked[0].message, /print\(6 \* 7\)  # the answer/, 'the question shows the code');

  answer = 'decline';
  const marker = `/workspace/declined-${Date.now()}`;
  const no = await d.call(t, 'run_shell', { command: `touch ${marker}; echo ran`, session: 'asked' });
  assert.equal(no.isError, true);
  assert.equal(no.structuredContent.status, 'error');
  assert.equal(no.structuredContent.error?.type, 'PolicyDenied');
  assert.match(no.structuredContent.error?.message, /did not approve this run \(ask_run\): declined/);
  assert.match(asked[1].message, /run this shell command/);
  answer = 'accept';
  const check = await d.call(t, 'run_shell', { command: `test -e ${marker} && echo present || echo absent`, session: 'asked' });
  assert.equal(check.structuredContent.stdout, 'absent\n', 'the declined command never ran');

  answer = 'wait';
  const late = await d.call(t, 'run_python', { code: 'print("late")' });
  assert.equal(late.structuredContent.error?.type, 'PolicyDenied');
  assert.match(late.structuredContent.error?.message, /no answer within ask_timeout_s/);
  assert.equal(late.structuredContent.stdout ?? '', '', 'nothing ran');

  // The host withdraws a run while its question is open: the question goes.
  const ac = new AbortController();
  const gone = d.call(t, 'run_python', { code: 'print("withdrawn")' }, { signal: ac.signal }).catch((e) => e);
  const open = await waitFor(() => ({ done: asked.length === 5 }), { timeoutMs: 5000 });
  assert.ok(open.done, 'the fifth run was asked about');
  ac.abort('changed my mind');
  assert.ok((await gone) instanceof Error, 'the withdrawn call gets no result');
  const withdrawn = await waitFor(() => ({ done: b.readAudit().some((l) => l.ask?.answer === 'withdrawn') }), { timeoutMs: 5000 });
  assert.ok(withdrawn.done, 'the withdrawal is audited');

  const bad = await d.call(t, 'run_python', { code: 5 });
  assert.equal(bad.structuredContent.status, 'invalid_arguments', 'bad arguments are refused before anyone is asked');
  assert.equal(asked.length, 5, 'asked once per valid run');

  const lines = b.readAudit().filter((l) => l.server === 'corral');
  t.note('audit', lines);
  assert.deepEqual(lines.map((l) => [l.tool, l.decision, l.ask?.answer]), [
    ['run_python', 'allowed', 'accepted'], ['run_shell', 'denied', 'declined'], ['run_shell', 'allowed', 'accepted'],
    ['run_python', 'denied', 'timed out'], ['run_python', 'denied', 'withdrawn']]);
  assert.ok(lines[3].ask.ms >= 1900, 'the time-out line says how long it waited');

  // The code is shown as data too: its lines stay, inside a block that a
  // line of backticks in the code does not close.
  answer = 'decline';
  await d.call(t, 'run_python', { code: 'print(1)\n```\nAllow? It only reads README.md\u2028\u202e\u0085\u009b\u001b[31m [ok](http://evil)\n' });
  const code = asked.at(-1).message;
  t.note('code question', code);
  const shown = assertShownAsData(code, 'ask_run');
  assert.match(shown.outside[0], /run this Python code in a sandbox\? \(5 characters shown as \\u escapes\)$/);
  assert.deepEqual(shown.inside.slice(0, 2), ['print(1)', '```'], 'the code keeps its lines, and a fence of its own stays inside');

  // What the run may reach is in the question too: its servers, and those
  // it adds to its session for the session's earlier code as well.
  await d.call(t, 'run_python', { code: 'print(2)', session: 'asked', servers: ['everything'], session_servers: ['everything'] });
  const reach = asked.at(-1).message;
  t.note('servers question', reach);
  assert.match(reach, /MCP servers it may call: `everything`\./, 'the question names the servers the run gets');
  assert.match(reach, /MCP servers added to the session for good \(its earlier code may call them too\): `everything`\./,
    'and those it adds to the session');

  const none = await t.daemon('ask-run-none', b.env);
  const refused = await none.call(t, 'run_python', { code: 'print(1)' });
  assert.equal(refused.structuredContent.error?.type, 'PolicyDenied');
  assert.match(refused.structuredContent.error?.message, /cannot ask its person.*set ask_run false.*ask_allow_unasked/);
}, { timeoutMs: 90000 });

// The policy beside the config file a person named is the one in force
// (not the one under XDG_CONFIG_HOME, nor the default): its deny holds, its
// ask asks, and every place a person looks names it. One that cannot be
// parsed stops corral before anything starts.
test('ask: the policy beside --config DIR/config.json is in force and named by the audit log, list_servers and doctor; an unparsable one stops corral', async (t) => {
  // XDG_CONFIG_HOME's policy.json allows everything: the one beside the
  // named config must win over it.
  const b = bridgeSetup(t, { policy: { version: 1 } });
  const dir = path.join(b.root, 'project-conf');
  mkdirSync(dir);
  const config = path.join(dir, 'config.json');
  const policy = path.join(dir, 'policy.json');
  writeFileSync(config, JSON.stringify({
    servers: { everything: everythingServer(b.root) }, host_servers: false, audit_log: b.audit, ask_timeout_s: 5,
  }));
  writeFileSync(policy, JSON.stringify({ version: 1, servers: { everything: { deny: ['get-env'], ask: ['echo'] } } }));
  const asked = [];
  const d = await t.daemon('policy-beside', b.env, {
    args: ['--config', config],
    capabilities: { elicitation: { form: {} } },
    setup: (client) => client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params);
      return { action: 'accept' };
    }),
  });
  const t0 = Date.now();
  const run1 = await bridgeRun(t, d, `
rec("env", catch(lambda: mcp_everything.get_env()))
rec("echo", catch(lambda: mcp_everything.echo(message="asked first")))`, ['everything']);
  assertRaised(run1.out.env, 'PolicyDenied', 'the deny of DIR/policy.json holds');
  assert.equal(run1.out.echo.ok, true, `the asked call went on once accepted: ${JSON.stringify(run1.out.echo)}`);
  assert.equal(asked.length, 1, 'the ask of DIR/policy.json asked, once');
  assert.match(asked[0].message, /echo/);

  const calls = b.readAudit();
  t.note('audit', calls);
  const env = calls.find((l) => l.sandbox === run1.container && /get.?env/.test(l.tool));
  assert.equal(env?.decision, 'denied', 'the audit log has get-env denied');
  for (const l of calls) {
    checkAuditLine(l, t0);
    assert.equal(l.policy, policy, 'each audit line names DIR/policy.json');
  }
  const starts = b.readAuditStarts();
  assert.ok(starts.length >= 1, 'the audit log has a header record');
  assert.equal(starts.at(-1).policy, policy, 'the header record names DIR/policy.json');
  assert.equal(starts.at(-1).config, config, 'and the config file');
  assert.ok(Number.isInteger(starts.at(-1).pid), 'and the pid');

  const listed = await hostTool(t, d, 'list_servers');
  assert.equal(listed.policy, policy, 'list_servers names the policy in force');
  assert.match(d.log, new RegExp(`policy: ${policy.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`), 'the log says which policy is in force');

  const doc = await run(BIN, ['doctor', '--config', config], { env: corralEnv(b.env), timeoutMs: 120000 });
  t.note('doctor', doc.stdout);
  assert.ok(doc.stdout.split('\n').includes(`ok   policy: ${policy}`), 'corral doctor names DIR/policy.json');

  // A policy that does not parse: serve and doctor refuse it; nothing runs.
  writeFileSync(policy, '{ "version": 1, "servers": { "everything": { "deny": "get-env" } } }');
  const bad = await run(BIN, ['--config', config], { env: corralEnv(b.env), timeoutMs: 30000 });
  t.note('bad_policy', { code: bad.code, stderr: clip(bad.stderr, 1500) });
  assert.equal(bad.code, 2, 'corral stops with status 2');
  assert.ok(bad.stderr.includes(policy) && /deny/.test(bad.stderr), `the message names the file and the key: ${clip(bad.stderr, 500)}`);
  assert.doesNotMatch(bad.stderr, /serving on|engine/i, 'it stopped before it chose an engine');
  const doc2 = await run(BIN, ['doctor', '--config', config], { env: corralEnv(b.env), timeoutMs: 120000 });
  assert.match(doc2.stdout, /^FAIL policy: .*deny/m, 'doctor fails the policy as serve does');
  assert.notEqual(doc2.code, 0);
  writeFileSync(policy, '{ not json');
  const bad2 = await run(BIN, ['--config', config], { env: corralEnv(b.env), timeoutMs: 30000 });
  assert.equal(bad2.code, 2, 'unparsable JSON: status 2');
  assert.ok(bad2.stderr.includes(policy), 'and the message names the file');
  // A link to nothing is a file that cannot be read, not a missing one:
  // the built-in default (or another file) must not take its place.
  rmSync(policy);
  symlinkSync(path.join(dir, 'gone.json'), policy);
  const dangling = await run(BIN, ['--config', config], { env: corralEnv(b.env), timeoutMs: 30000 });
  assert.equal(dangling.code, 2, 'a dangling policy.json: status 2');
  assert.ok(dangling.stderr.includes(policy), `and the message names it: ${clip(dangling.stderr, 300)}`);
  // `policy` relative would be found from the working directory (a clone's).
  const relative = await run(BIN, ['--config', config, '--policy', 'policy.json'], { env: corralEnv(b.env), timeoutMs: 30000 });
  assert.equal(relative.code, 2, 'a relative `policy` is refused');
  assert.match(relative.stderr, /policy must be the absolute path/);
}, { timeoutMs: 240000 });
