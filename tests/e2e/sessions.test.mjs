// Sessions: a named sandbox kept between calls (globals and files persist and
// stay private), session_list and session_close, the idle timeout and the
// count limit, time limits and job_cancel in a session, a session container
// killed behind corral's back, the one-shot limits inside a session, progress,
// session_max_s, file operations racing calls on one session, and the
// servers a session may call while its earlier code takes over later calls.
//
//   node run.mjs sessions      (sessions:)

import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { bridgeSetup, everythingServer, filesystemServer } from './lib/bridge.mjs';
import {
  CONFIG_HOME, checkResult, containerState, engineRequest, jobCall, sleep, test, toolCall, waitFor, waitGone, withTimeout,
} from './lib/harness.mjs';

test('sessions: globals and files persist within a session, other sessions and clients cannot see them, session_close removes the container', async (t) => {
  const d = await t.daemon('sessions');
  const a1 = await d.call(t, 'run_python', { session: 'alpha', code: 'import json\nx = 41\nopen("notes.txt", "w").write("kept")\nprint("set")' });
  assert.equal(a1.structuredContent.status, 'ok', 'the first call of a session runs');
  assert.deepEqual({ name: a1.structuredContent.session?.name, state: a1.structuredContent.session?.state },
    { name: 'alpha', state: 'kept' }, 'its result names the session, kept');
  const container = a1.structuredContent.container;
  const a2 = await d.call(t, 'run_python', { session: 'alpha', code: 'print(x + 1, json.dumps(open("notes.txt").read()))' });
  assert.equal(a2.structuredContent.stdout, '42 "kept"\n', 'the global, the import and the file are there in the next call');
  assert.equal(a2.structuredContent.container, container, 'the same container serves the session');
  const sh = await d.call(t, 'run_shell', { session: 'alpha', command: 'cat notes.txt; echo; ls' });
  assert.equal(sh.structuredContent.stdout, 'kept\nnotes.txt\nout\n', 'run_shell in the session sees its files (and out/, there from the start)');
  const a3 = await d.call(t, 'run_python', { session: 'alpha', code: 'print(x)' });
  assert.equal(a3.structuredContent.stdout, '41\n', 'a shell call leaves the Python state alone');

  const b = await d.call(t, 'run_python', { session: 'beta', code: 'import os\nprint("x" in globals(), os.path.exists("notes.txt"), os.listdir("."))' });
  assert.equal(b.structuredContent.stdout, "False False ['out']\n", 'another session sees neither the global nor the file (only its own empty out/)');
  assert.notEqual(b.structuredContent.container, container, 'another session has its own container');
  const plain = await d.call(t, 'run_python', { code: 'import os\nprint("x" in globals(), os.path.exists("notes.txt"))' });
  assert.equal(plain.structuredContent.stdout, 'False False\n', 'a call without a session sees nothing of it either');

  const list = await toolCall(t, d, 'session_list', {});
  const byName = Object.fromEntries(list.structuredContent.sessions.map((x) => [x.name, x]));
  assert.deepEqual(Object.keys(byName).sort(), ['alpha', 'beta'], 'session_list lists both sessions');
  assert.equal(byName.alpha.calls, 4, 'alpha served four calls');
  assert.equal(byName.alpha.state, 'idle', 'alpha is idle');
  assert.ok(Number.isInteger(byName.alpha.memory_bytes) && byName.alpha.memory_bytes > 1e6,
    `alpha reports its memory use (${byName.alpha.memory_bytes})`);
  assert.ok(byName.alpha.age_s >= 0 && byName.alpha.idle_s >= 0, 'age and idle time');
  assert.equal(byName.alpha.container, container, 'and its container');
  assert.equal(list.structuredContent.max_sessions, 4, 'the limit shows');
  assert.equal(await containerState(container), 'running', 'the session\'s container runs between calls');

  // Another MCP client (another corral process) has sessions of its own.
  const other = await t.daemon('sessions-other');
  const ol = await toolCall(t, other, 'session_list', {});
  assert.deepEqual(ol.structuredContent.sessions, [], 'another client sees no session of the first');
  const ob = await other.call(t, 'run_python', { session: 'alpha', code: 'print("x" in globals())' });
  assert.equal(ob.structuredContent.stdout, 'False\n', 'its session "alpha" is a different one');
  assert.notEqual(ob.structuredContent.container, container, '...in a different container');
  const denied = await toolCall(t, other, 'read_file', { session: 'beta', path: 'notes.txt' });
  assert.equal(denied.structuredContent.status, 'invalid_arguments', 'nor can it reach the first client\'s files');
  assert.match(denied.content[0].text, /no session "beta"/);

  const closed = await toolCall(t, d, 'session_close', { session: 'alpha' });
  assert.equal(closed.structuredContent.closed, true, 'session_close says closed');
  const gone = await waitGone(container);
  assert.ok(gone.done, `the closed session's container ${container} is removed`);
  const after = await toolCall(t, d, 'session_list', {});
  assert.deepEqual(after.structuredContent.sessions.map((x) => x.name), ['beta'], 'only beta is left');
  const again = await d.call(t, 'run_python', { session: 'alpha', code: 'import os\nprint("x" in globals(), os.path.exists("notes.txt"))' });
  assert.equal(again.structuredContent.stdout, 'False False\n', 'a new session of the same name starts empty');
  const twice = await toolCall(t, d, 'session_close', { session: 'nope' });
  assert.equal(twice.structuredContent.status, 'invalid_arguments', 'closing an unknown session is an error');
}, { timeoutMs: 120000 });

test('sessions: idle timeout and the session count limit are enforced and reported', async (t) => {
  // Without hibernation (on by default): an idle session is closed.
  const d = await t.daemon('session-limits', { CORRAL_MAX_SESSIONS: '2', CORRAL_SESSION_IDLE_S: '4', CORRAL_SESSION_HIBERNATE: 'false' });
  const a = await d.call(t, 'run_python', { session: 'a', code: 'x = 1' });
  const b = await d.call(t, 'run_python', { session: 'b', code: 'x = 2' });
  const c = await d.call(t, 'run_python', { session: 'c', code: 'x = 3' });
  assert.equal(c.structuredContent.status, 'busy', 'a third session over max_sessions 2 is refused');
  assert.equal(c.structuredContent.error.type, 'TooManySessions');
  assert.match(c.content[0].text, /2 sessions are open.*max_sessions.*session_close/, 'the message says what to do');
  const plain = await d.call(t, 'run_python', { code: 'print(1)' });
  assert.equal(plain.structuredContent.status, 'ok', 'calls without a session still run');
  // A session whose call runs is never evicted, however long it is idle of calls.
  const job = await d.call(t, 'run_python', { session: 'a', code: 'import time\ntime.sleep(7)\ny = x + 10\nprint("done")', sync_wait_s: 1, timeout_s: 20 });
  assert.equal(job.structuredContent.status, 'running', 'a long call in a session becomes a job');
  const busy = await d.call(t, 'run_python', { session: 'a', code: 'print(x)' });
  assert.equal(busy.structuredContent.status, 'busy', 'a second call to a busy session: busy');
  assert.equal(busy.structuredContent.error.type, 'SessionBusy');
  assert.match(busy.content[0].text, /running another call/);
  const done = await d.client.callTool({ name: 'job_result', arguments: { job_id: job.structuredContent.job_id, wait_s: 30 } },
    CallToolResultSchema, { timeout: 40000 });
  assert.equal(done.structuredContent.status, 'ok', 'the job ends normally after 7 s, past the 4 s idle limit');
  const still = await d.call(t, 'run_python', { session: 'a', code: 'print(y)' });
  assert.equal(still.structuredContent.stdout, '11\n', 'the busy session was kept');
  // Idle past session_idle_s: closed, containers removed, and said so once.
  const w = await waitFor(async () => {
    const l = await toolCall(t, d, 'session_list', {});
    return { done: l.structuredContent.sessions.length === 0, l: l.structuredContent };
  }, { timeoutMs: 15000, intervalMs: 500 });
  assert.ok(w.done, 'both sessions are closed after 4 s without calls');
  for (const x of [a, still, b]) {
    const g = await waitGone(x.structuredContent.container);
    assert.ok(g.done, `container ${x.structuredContent.container} removed`);
  }
  const lost = await d.call(t, 'run_python', { session: 'b', code: 'print(x)' });
  assert.equal(lost.structuredContent.status, 'session_lost', 'the next call to it says the session is gone');
  assert.equal(lost.structuredContent.error.type, 'SessionLost');
  assert.match(lost.content[0].text, /closed after 4 s without calls \(session_idle_s\)/, '...and why');
  const fresh = await d.call(t, 'run_python', { session: 'b', code: 'print("x" in globals())' });
  assert.equal(fresh.structuredContent.stdout, 'False\n', 'the call after that opens a new session');
}, { timeoutMs: 120000 });

test('sessions: a time limit or job_cancel stops the run but keeps the session; a container killed behind corral\'s back is reported', async (t) => {
  const d = await t.daemon('session-stops');
  const s1 = await d.call(t, 'run_python', { session: 's', code: 'kept = "yes"' });
  const container = s1.structuredContent.container;
  const slow = await d.call(t, 'run_python', { session: 's', code: 'import time\ntime.sleep(60)', timeout_s: 2 });
  assert.equal(slow.structuredContent.status, 'timeout', 'a session call past its time limit: timeout');
  assert.ok(slow.ms < 8000, `stopped soon after the limit (${slow.ms} ms)`);
  assert.match(slow.structuredContent.error.message, /the session and its state were kept/);
  const after = await d.call(t, 'run_python', { session: 's', code: 'print(kept)' });
  assert.equal(after.structuredContent.stdout, 'yes\n', 'the session\'s variables survive the timeout');
  assert.equal(after.structuredContent.container, container, '...in the same container');
  const stubborn = await d.call(t, 'run_python', { session: 's', timeout_s: 2, code:
    'import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)' });
  assert.equal(stubborn.structuredContent.status, 'timeout', 'code that ignores the interrupt still times out');
  assert.equal(stubborn.structuredContent.session.state, 'reset', '...its interpreter is replaced');
  const reset = await d.call(t, 'run_python', { session: 's', code: 'print("kept" in globals())' });
  assert.equal(reset.structuredContent.stdout, 'False\n', 'so its variables are gone');
  assert.equal(reset.structuredContent.container, container, '...but the session and its container stay');
  // job_cancel of a session job
  const job = await d.call(t, 'run_python', { session: 's', code: 'z = 1\nimport time\ntime.sleep(60)', sync_wait_s: 1, timeout_s: 90 });
  assert.equal(job.structuredContent.status, 'running');
  await jobCall(t, d, 'job_cancel', { job_id: job.structuredContent.job_id });
  const cancelled = await jobCall(t, d, 'job_result', { job_id: job.structuredContent.job_id, wait_s: 10 });
  assert.equal(cancelled.structuredContent.status, 'cancelled', 'job_cancel ends a session\'s job: cancelled');
  const z = await d.call(t, 'run_python', { session: 's', code: 'print(z)' });
  assert.equal(z.structuredContent.stdout, '1\n', 'and the session goes on');
  // The container removed by someone else between calls.
  const rm = await engineRequest('DELETE', `/v1.41/containers/${container}?force=1&v=1`, 30000);
  assert.ok([200, 204].includes(rm.status), `removed the container behind corral's back (${rm.status})`);
  const w = await waitFor(async () => {
    const l = await toolCall(t, d, 'session_list', {});
    return { done: l.structuredContent.sessions.length === 0 };
  }, { timeoutMs: 15000, intervalMs: 300 });
  assert.ok(w.done, 'the session is no longer listed');
  const lost = await d.call(t, 'run_python', { session: 's', code: 'print(z)' });
  assert.equal(lost.structuredContent.status, 'session_lost', 'the next call reports the session lost');
  assert.match(lost.content[0].text, /its sandbox ended/);
  const reopened = await d.call(t, 'run_python', { session: 's', code: 'print("reopened")' });
  assert.equal(reopened.structuredContent.status, 'ok', 'and it can be reopened');
  assert.notEqual(reopened.structuredContent.container, container, 'in a new container');
}, { timeoutMs: 150000 });

test('sessions: a call right after a cancel of the session\'s running call (notifications/cancelled or job_cancel) waits for the interrupt and runs', async (t) => {
  const d = await t.daemon('session-cancel-next');
  const s1 = await d.call(t, 'run_python', { session: 'c', code: 'kept = 7' });
  assert.equal(s1.structuredContent.status, 'ok');
  // The code reports progress once it runs: the cancel then interrupts
  // running code, not a call still on its way in.
  const ac = new AbortController();
  let running;
  const started = new Promise((r) => { running = r; });
  const slow = d.client.callTool({ name: 'run_python', arguments: { session: 'c', code:
    'import corral, time\ncorral.progress(1, 2, "sleeping")\ntime.sleep(60)' } }, CallToolResultSchema,
  { signal: ac.signal, timeout: 90000, onprogress: () => running() }).catch((e) => e);
  await withTimeout(started, 30000, 'progress of the running call');
  const t0 = Date.now();
  ac.abort('e2e: cancelled by the test');
  // Sent right behind the cancel, on the same stream.
  const next = await d.call(t, 'run_python', { session: 'c', code: 'print(kept)' });
  t.note('after_cancel_ms', Date.now() - t0);
  assert.equal(next.structuredContent.status, 'ok',
    `the next call waits for the interrupt instead of being refused (${next.content[0].text.slice(0, 200)})`);
  assert.equal(next.structuredContent.stdout, '7\n', '...and runs in the same session, its variables kept');
  assert.ok((await withTimeout(slow, 5000, 'the cancelled call')) instanceof Error, 'the cancelled call rejects');

  const job = await d.call(t, 'run_python', { session: 'c', code: 'import time\ntime.sleep(60)', sync_wait_s: 1, timeout_s: 90 });
  assert.equal(job.structuredContent.status, 'running');
  await jobCall(t, d, 'job_cancel', { job_id: job.structuredContent.job_id });
  const again = await d.call(t, 'run_python', { session: 'c', code: 'print(kept + 1)' });
  assert.equal(again.structuredContent.status, 'ok', `a call right after job_cancel runs too (${again.content[0].text.slice(0, 200)})`);
  assert.equal(again.structuredContent.stdout, '8\n');
}, { timeoutMs: 120000 });

test('sessions: the limits of a one-shot sandbox hold (memory, network, privileges, workspace size)', async (t) => {
  const d = await t.daemon('session-hardening', { CORRAL_MEMORY: '256m', CORRAL_WORKSPACE_SIZE: '2m' });
  const probe = await d.call(t, 'run_python', { session: 'h', code: [
    'import ctypes, os, socket',
    's = socket.socket()',
    's.settimeout(2)',
    'try:',
    '    s.connect(("1.1.1.1", 53)); net = "connected"',
    'except OSError as e:',
    '    net = type(e).__name__',
    'status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)',
    '# no_new_privs through prctl (PR_GET_NO_NEW_PRIVS): gVisor\'s status file has no NoNewPrivs line',
    'nnp = ctypes.CDLL(None).prctl(39, 0, 0, 0, 0)',
    'print(os.getuid(), status["CapEff"].strip(), nnp, net, sorted(os.listdir("/sys/class/net")))',
  ].join('\n') });
  assert.equal(probe.structuredContent.stdout, '65534 0000000000000000 1 OSError [\'lo\']\n',
    'a session runs as 65534, with no capabilities, no-new-privileges and no network');
  const oom = await d.call(t, 'run_python', { session: 'h', code: 'keep = 1\nb = bytearray(400 * 1024 * 1024)\nb[::4096] = b"x" * len(b[::4096])' });
  assert.equal(oom.structuredContent.status, 'oom', 'the memory limit holds in a session');
  const next = await d.call(t, 'run_python', { session: 'h', code: 'print("alive")' });
  assert.equal(next.structuredContent.stdout, 'alive\n', 'the session serves the next call');
  const full = await toolCall(t, d, 'write_file', { session: 'h', path: 'big.bin', content: Buffer.alloc(3 * 1024 * 1024).toString('base64'), encoding: 'base64' });
  assert.equal(full.isError, true, 'a file over workspace_size does not fit');
  assert.equal(full.structuredContent.error.type, 'NoSpace', 'NoSpace');
  assert.match(full.content[0].text, /no space left in \/workspace/);
  const fill = await d.call(t, 'run_shell', { session: 'h', command: 'head -c 3000000 /dev/zero > fill; echo $?' });
  assert.match(fill.structuredContent.stderr, /No space left on device/, 'code cannot write past workspace_size either');
}, { timeoutMs: 120000 });

test('sessions: progress of a session call, a child forked in a session, session_max_s, and read_file racing a symlink swap', async (t) => {
  const d = await t.daemon('session-more', { CORRAL_SESSION_MAX_S: '6' });
  // A long session name and a progressToken (the session wraps the call's callbacks).
  const name = 'a-rather-long-session-name-of-over-thirty-two-chars';
  const events = [];
  const p = await d.client.callTool({ name: 'run_python', arguments: { session: name, code:
    // (the sleep: the SDK runs notification handlers a tick late, so one
    // that comes in the same read as the result finds its request gone;
    // `corral` is in the globals, no import)
    'import time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.3)\ncorral.progress(2, 2, "all done")\ntime.sleep(0.4)' } },
  CallToolResultSchema, { timeout: 30000, onprogress: (e) => events.push(e) });
  checkResult(p);
  t.note('progress', events);
  assert.equal(p.structuredContent.status, 'ok');
  assert.ok(events.some((e) => /line 0/.test(e.message ?? '')), 'output lines reach the host as progress in a session');
  assert.ok(events.some((e) => e.message === 'all done' && e.progress === 2 && e.total === 2), 'and the code\'s own report');
  // A child forked without exec ends with its run; the session goes on.
  const f = await d.call(t, 'run_python', { session: name, timeout_s: 10, code:
    'import os\npid = os.fork()\nif pid == 0:\n    print("child", flush=True)\nelse:\n    os.waitpid(pid, 0)\n    print("parent", flush=True)\nforked = 1' });
  assert.equal(f.structuredContent.status, 'ok', 'the run with a fork ends normally');
  assert.ok(f.ms < 8000, `...promptly (${f.ms} ms)`);
  assert.match(f.structuredContent.stdout, /child/);
  const after = await d.call(t, 'run_python', { session: name, code: 'print(forked)' });
  assert.equal(after.structuredContent.stdout, '1\n', 'the parent\'s interpreter serves the next call');
  // read_file while code in the session keeps swapping a directory and a symlink to /etc.
  // A process of its own flips "t" between a directory and a symlink to /etc
  // as fast as renameat2(RENAME_EXCHANGE) goes.
  await d.call(t, 'run_python', { session: 'race', code: [
    'import os, subprocess, sys',
    'os.makedirs("t"); open("t/passwd", "w").write("SAFE\\n")',
    'os.symlink("/etc", "lnk")',
    'flip = "import ctypes\\nlibc = ctypes.CDLL(None)\\nwhile True:\\n    libc.renameat2(-100, b\'t\', -100, b\'lnk\', 2)"',
    'subprocess.Popen([sys.executable, "-c", flip])',
  ].join('\n') });
  let safe = 0, refused = 0, leaked = [];
  for (let i = 0; i < 150; i++) {
    const r = await d.client.callTool({ name: 'read_file', arguments: { session: 'race', path: 't/passwd' } }, CallToolResultSchema, { timeout: 30000 });
    const text = r.content?.[0]?.text ?? '';
    if (r.isError) refused++;
    else if (text === 'SAFE\n') safe++;
    else leaked.push(text.slice(0, 60));
  }
  t.note('race', { safe, refused, leaked: leaked.length });
  assert.deepEqual(leaked, [], 'read_file never returns a file from outside /workspace');
  assert.ok(safe + refused === 150, 'every call is answered');
  // session_max_s: the call that runs past it says the session ended.
  const old = await d.call(t, 'run_python', { session: 'old', code: 'import time\ntime.sleep(7)\nprint("late")', timeout_s: 20 });
  assert.equal(old.structuredContent.status, 'ok');
  assert.equal(old.structuredContent.session.state, 'ended', 'a call that ends past session_max_s reports the session ended');
  assert.match(old.content[0].text, /session "old" ended/);
  const fresh = await d.call(t, 'run_python', { session: 'old', code: 'print("new")' });
  assert.equal(fresh.structuredContent.status, 'ok', 'and the next call opens a new session at once');
  assert.notEqual(fresh.structuredContent.container, old.structuredContent.container);
}, { timeoutMs: 150000 });

test('sessions: file operations and calls on one session at the same time all finish', async (t) => {
  const d = await t.daemon('session-overlap');
  await d.call(t, 'run_python', { session: 'o', code: 'x = 1' });
  // A write and a call with over 64 KiB of code sent together: neither
  // waits for the other; both are frames to the session's runtime, which
  // answers the write's file request whether or not the call has begun.
  const big = 'y = 0\n' + '# padding line\n'.repeat(8000) + 'print(x + y)';
  const [w, r] = await Promise.all([
    toolCall(t, d, 'write_file', { session: 'o', path: 'a.txt', content: 'z'.repeat(200000) }),
    d.call(t, 'run_python', { session: 'o', code: big, timeout_s: 20 }),
  ]);
  assert.equal(w.isError, false, 'the write succeeds');
  assert.equal(r.structuredContent.status, 'ok', `the call succeeds (${r.structuredContent.error?.message ?? ''})`);
  assert.equal(r.structuredContent.stdout, '1\n', '...in the session\'s interpreter');
  // Reads while a call runs: the runtime answers them as the call goes on.
  const run = d.call(t, 'run_python', { session: 'o', timeout_s: 30, code:
    // (replaced whole: a write caught between truncate and write would read empty)
    'import os, time\nfor i in range(20):\n    open("tick.tmp", "w").write(str(i))\n    os.replace("tick.tmp", "tick.txt")\n' +
    '    time.sleep(0.1)\nprint("done", x)' });
  await sleep(300);
  const reads = [];
  await waitFor(async () => ({ done: !(await toolCall(t, d, 'read_file', { session: 'o', path: 'tick.txt' })).isError }),
    { timeoutMs: 5000, intervalMs: 50 });
  for (let i = 0; i < 5; i++) {
    reads.push(await toolCall(t, d, 'read_file', { session: 'o', path: 'tick.txt' }));
    await sleep(100);
  }
  const done = await run;
  assert.ok(reads.every((x) => !x.isError && /^\d+$/.test(x.content[0].text)), 'read_file works while the call runs');
  assert.equal(done.structuredContent.stdout, 'done 1\n', 'the call finishes with its state');
}, { timeoutMs: 90000 });

// The red team's takeover, for real: code of a session's first call walks
// the frames up to the runtime's worker loop, reads its run's token there,
// and wraps the function that reads each request, so that every later call
// of the session runs its code instead (the real code never runs, the
// result is ok, and it sees each later call's code and servers). That is
// the stated limit of a session (one principal); what the daemon holds is
// the servers: a later call naming one the session was not given is
// refused before the sandbox hears of it, and session_servers adds one
// knowingly (the earlier code gets it too, as its description says).
const TAKEOVER = readFileSync(new URL('../runtime/takeover.py', import.meta.url), 'utf8') + String.raw`FORGER = """import json
last = _seen[-1]
used = {}
for name in last['servers']:
    try:
        if name == 'fs':
            used[name] = call_tool('fs', 'list_allowed_directories').text
        else:
            used[name] = call_tool(name, 'echo', {'message': 'hijacked'}).text
    except Exception as e:
        used[name] = 'raised ' + type(e).__name__
print('FORGED ' + json.dumps({'seen': [x['code'] for x in _seen], 'servers': last['servers'],
                              'token': len(last['token'] or ''), 'used': used}))
"""
`;

test('sessions: earlier code takes over later calls (sys._getframe), but gets no server the session was not given; session_servers adds one knowingly, audited', async (t) => {
  const b = bridgeSetup(t, {
    servers: (root) => ({ everything: everythingServer(root), fs: filesystemServer(path.join(root, 'files')) }),
  });
  mkdirSync(path.join(b.root, 'files'));
  const d = await t.daemon('session-servers', b.env);
  const forged = (r) => {
    const line = r.structuredContent.stdout.split('\n').find((l) => l.startsWith('FORGED '));
    assert.ok(line, `the earlier code answered the call (stdout: ${r.structuredContent.stdout.slice(0, 500)})`);
    return JSON.parse(line.slice(7));
  };
  const open = await d.call(t, 'run_python', { session: 's', servers: ['everything'], code: TAKEOVER });
  assert.equal(open.structuredContent.status, 'ok', 'the session opens with servers [everything]');
  assert.equal(open.structuredContent.stdout, 'token of this run: 32\nplanted True\n',
    "its code finds the run's token in the worker's frame and hooks the loop");

  // The stated limit: the next call is the earlier code's.
  const real = 'print("the real code ran")\nraise SystemExit(3)';
  const two = await d.call(t, 'run_python', { session: 's', servers: ['everything'], code: real });
  assert.equal(two.structuredContent.status, 'ok', 'a later call is answered ok by the earlier code');
  assert.ok(!two.structuredContent.stdout.split('\n').includes('the real code ran'), 'its real code never ran');
  const f2 = forged(two);
  assert.deepEqual({ seen: f2.seen, token: f2.token }, { seen: [real], token: 32 },
    'the earlier code read its code and token');
  assert.match(f2.used.everything, /hijacked/, '...and used the server the session was given');

  // What the daemon holds: a server the session was not given.
  const refused = await d.call(t, 'run_python', { session: 's', servers: ['everything', 'fs'], code: 'print(mcp_fs.list_allowed_directories().text)' });
  assert.equal(refused.structuredContent.status, 'invalid_arguments',
    `a later call naming fs is refused (else the earlier code uses fs: ${refused.structuredContent.stdout?.slice(0, 300)})`);
  assert.equal(refused.structuredContent.error.type, 'ServerNotGranted');
  assert.equal(refused.isError, true);
  assert.match(refused.content[0].text,
    /session "s" may call only the MCP servers it was given \(everything\), and this call names fs\. Open a new session .*"session_servers", knowing that code its earlier calls ran can use them too/,
    'the message says what the session holds and what to do');

  // Knowingly: session_servers adds fs, and the earlier code gets it.
  const wide = await d.call(t, 'run_python', { session: 's', session_servers: ['fs'], code: 'print(mcp_fs.list_allowed_directories().text)' });
  assert.equal(wide.structuredContent.status, 'ok', 'a call with session_servers [fs] runs');
  const f3 = forged(wide);
  assert.deepEqual(f3.seen, [real, 'print(mcp_fs.list_allowed_directories().text)'],
    'the refused call never reached the sandbox: the earlier code saw only the calls that ran');
  assert.deepEqual(f3.servers, ['fs'], 'the call gets fs');
  assert.ok(f3.used.fs.includes(path.join(b.root, 'files')), `fs is callable, by the earlier code too (${f3.used.fs})`);
  const list = await toolCall(t, d, 'session_list', {});
  assert.deepEqual(list.structuredContent.sessions[0].servers, ['everything', 'fs'], 'session_list shows what the session may call');
  const audit = b.readAudit();
  const grant = audit.filter((l) => l.tool === 'session_servers');
  assert.equal(grant.length, 1, `one audit line for the widening (${JSON.stringify(grant)})`);
  assert.deepEqual({ server: grant[0].server, session: grant[0].session, decision: grant[0].decision, sandbox: grant[0].sandbox },
    { server: 'fs', session: 's', decision: 'allowed', sandbox: open.structuredContent.container }, 'it names the server, the session and its sandbox');
  assert.ok(audit.some((l) => l.server === 'fs' && l.tool === 'list_allowed_directories' && l.decision === 'allowed'),
    'and the call the earlier code made to fs is audited as any call');
}, { timeoutMs: 120000 });

// The store directory of the stdio client: the one owner directory a test's
// store holds, named for the program that started corral and its working
// directory ("h:" and a hash, in hex), the same for every corral a test
// starts.
function stdioOwnerDir(store) {
  const owners = readdirSync(store);
  assert.equal(owners.length, 1, `one client in the store (${owners})`);
  assert.match(Buffer.from(owners[0], 'hex').toString(), /^h:[0-9a-f]{16}$/, 'the stdio client is its host program here');
  return path.join(store, owners[0]);
}

test('sessions: an idle session hibernates to the store and the next call resumes it, in another corral too; what does not pickle is named; session_close removes the stored state', async (t) => {
  const store = mkdtempSync(path.join(CONFIG_HOME, 'store-'));
  const env = { CORRAL_IMAGE: 'corral-data:latest', CORRAL_SESSION_HIBERNATE: 'true', CORRAL_SESSION_IDLE_S: '3',
    CORRAL_SESSION_STORE: store, CORRAL_POOL_MIN: '1' };
  const d = await t.daemon('session-hibernate', env);
  const setup = await d.call(t, 'run_python', { session: 'eda', timeout_s: 120, code: [
    'import numpy as np, pandas as pd, socket',
    'from sklearn.linear_model import LinearRegression',
    'rng = np.random.default_rng(7)',
    'df = pd.DataFrame({"a": rng.random(1_000_000), "b": rng.integers(0, 100, 1_000_000)})',
    'model = LinearRegression().fit(df[["a"]].values[:1000], df["a"].values[:1000] * 2 + 1)',
    'square = lambda v: v * v',
    'sock = socket.socket()',
    'open("notes.txt", "w").write("kept on disk")',
    'print(df.shape)'].join('\n') }, { timeoutMs: 180000 });
  assert.equal(setup.structuredContent.status, 'ok', `the session loads its data (${setup.structuredContent.stderr?.slice(-300)})`);
  assert.equal(setup.structuredContent.stdout, '(1000000, 2)\n');
  const first = setup.structuredContent.container;
  // Idle past session_idle_s: saved, listed as hibernated, its container gone.
  const w = await waitFor(async () => {
    const l = await toolCall(t, d, 'session_list', {});
    const s = l.structuredContent.sessions.find((x) => x.name === 'eda');
    return { done: s?.state === 'hibernated', s };
  }, { timeoutMs: 60000, intervalMs: 500 });
  assert.ok(w.done, `the idle session is listed as hibernated (${JSON.stringify(w.s)})`);
  assert.ok(w.s.stored_bytes > 10e6, `with its stored size (${w.s.stored_bytes} bytes: the DataFrame's pickle)`);
  assert.ok((await waitGone(first)).done, `its container ${first} is removed`);
  const dir = path.join(stdioOwnerDir(store), 'eda');
  assert.ok(existsSync(path.join(dir, 'index.json')) && existsSync(path.join(dir, 'workspace.tar')), 'its state is on disk');
  await d.close();

  // A new corral on the same store (a restart): the next call resumes it.
  const d2 = await t.daemon('session-resume', env);
  const back = await d2.call(t, 'run_python', { session: 'eda', timeout_s: 120,
    code: 'print(df.shape, round(float(model.predict([[0.5]])[0]), 3), open("notes.txt").read())' }, { timeoutMs: 180000 });
  const s = back.structuredContent.session;
  assert.equal(back.structuredContent.status, 'ok', `the call after it runs (${back.structuredContent.stderr?.slice(-300)})`);
  assert.equal(back.structuredContent.stdout, '(1000000, 2) 2.0 kept on disk\n', 'its DataFrame, model and files are back');
  assert.equal(s.state, 'resumed', 'its result says resumed');
  assert.deepEqual([...s.not_restored].sort(), ['sock', 'square'], 'the socket and the lambda are named as not restored');
  assert.ok(Number.isInteger(s.resume_ms) && s.resume_ms > 0, `the time to resume is given (${s.resume_ms} ms)`);
  t.note('resume_ms', s.resume_ms);
  console.log(`# resume of a session holding a 1,000,000-row DataFrame and a model: ${s.resume_ms} ms (${w.s.stored_bytes} bytes stored)`);
  assert.match(back.content.map((c) => c.text).join(''), /resumed from hibernation in \d+ ms.*not restored: (sock, square|square, sock)/, 'the text says so too');
  assert.ok(!existsSync(dir), 'the stored copy goes once the session lives again');
  const again = await d2.call(t, 'run_python', { session: 'eda', code: 'print(int(df["b"].sum() > 0))' });
  assert.equal(again.structuredContent.session.state, 'kept', 'the next call is an ordinary session call');

  // Hibernated again, then closed: the stored state is removed from disk.
  const w2 = await waitFor(async () => ({ done: existsSync(path.join(dir, 'index.json')) }), { timeoutMs: 60000, intervalMs: 500 });
  assert.ok(w2.done, 'idle again, it is saved again');
  const other = await toolCall(t, d2, 'read_file', { session: 'eda', path: 'notes.txt' });
  assert.match(other.content[0].text, /hibernated: a call that runs code in it resumes it/, 'file tools say how to resume it');
  const closed = await toolCall(t, d2, 'session_close', { session: 'eda' });
  assert.equal(closed.structuredContent.closed, true, 'session_close closes a hibernated session');
  assert.ok(!existsSync(dir), 'and its stored state is gone from disk');
  const fresh = await d2.call(t, 'run_python', { session: 'eda', code: 'print("df" in globals())' });
  assert.equal(fresh.structuredContent.stdout, 'False\n', 'the next call opens a new, empty session');
}, { timeoutMs: 600000 });

test('sessions: session_save checkpoints or hibernates a session now, session_fork gives two sessions that diverge, session_close removes each stored copy', async (t) => {
  // Hibernation of idle sessions is off: saving is asked for.
  const store = mkdtempSync(path.join(CONFIG_HOME, 'store-'));
  const d = await t.daemon('session-save', { CORRAL_SESSION_STORE: store, CORRAL_SESSION_HIBERNATE: 'false' });
  const dirOf = (name) => path.join(stdioOwnerDir(store), name);
  const base = await d.call(t, 'run_python', { session: 'base',
    code: 'import socket\nx = 1\nsock = socket.socket()\nopen("data.txt", "w").write("loaded once")\nprint("ready")' });
  assert.equal(base.structuredContent.stdout, 'ready\n');
  const container = base.structuredContent.container;

  // A checkpoint: saved, and the session runs on in the same container.
  const cp = await toolCall(t, d, 'session_save', { session: 'base', keep_running: true });
  assert.ok(!cp.isError, JSON.stringify(cp));
  assert.equal(cp.structuredContent.state, 'checkpointed');
  assert.ok(cp.structuredContent.stored_bytes > 0, `its stored size is given (${cp.structuredContent.stored_bytes})`);
  assert.deepEqual(cp.structuredContent.not_saved, ['sock'], 'the socket is named as not saved');
  assert.match(cp.content[0].text, /checkpointed \(it runs on\).*Not saved.*sock/);
  assert.equal(cp.structuredContent.globals_saved, true);
  assert.ok(existsSync(path.join(dirOf('base'), 'index.json')), 'the checkpoint is on disk');
  const still = await d.call(t, 'run_python', { session: 'base', code: 'print(x, sock.fileno() > 0)' });
  assert.equal(still.structuredContent.stdout, '1 True\n', 'its globals, the socket too, are still live');
  assert.equal(still.structuredContent.container, container, 'in the same container');

  // A fork of the running session: two sessions that diverge.
  const fork = await toolCall(t, d, 'session_fork', { session: 'base', new_session: 'b2' });
  assert.ok(!fork.isError, JSON.stringify(fork));
  assert.deepEqual({ session: fork.structuredContent.session, from: fork.structuredContent.forked_from, state: fork.structuredContent.state },
    { session: 'b2', from: 'base', state: 'hibernated' });
  const again = await toolCall(t, d, 'session_fork', { session: 'base', new_session: 'b2' });
  assert.ok(again.isError && again.structuredContent.error.type === 'SessionExists', `a fork into a name in use is refused (${JSON.stringify(again.structuredContent)})`);
  const a = await d.call(t, 'run_python', { session: 'base', code: 'x += 10\nprint(x)' });
  const b = await d.call(t, 'run_python', { session: 'b2', code: 'x += 100\nprint(x, open("data.txt").read())' });
  assert.equal(a.structuredContent.stdout, '11\n');
  assert.equal(b.structuredContent.stdout, '101 loaded once\n', 'the fork has the globals and files of the checkpoint');
  assert.equal(b.structuredContent.session.state, 'resumed', 'its first call resumes it');
  assert.deepEqual(b.structuredContent.session.not_restored, ['sock']);
  assert.notEqual(b.structuredContent.container, container, 'in a sandbox of its own');
  const a2 = await d.call(t, 'run_python', { session: 'base', code: 'print(x)' });
  const b2 = await d.call(t, 'run_python', { session: 'b2', code: 'print(x)' });
  assert.deepEqual([a2.structuredContent.stdout, b2.structuredContent.stdout], ['11\n', '101\n'], 'each went its own way');

  // Hibernate now: its container goes, and it is listed as hibernated.
  const hib = await toolCall(t, d, 'session_save', { session: 'b2' });
  assert.ok(!hib.isError, JSON.stringify(hib));
  assert.equal(hib.structuredContent.state, 'hibernated');
  assert.ok((await waitGone(b2.structuredContent.container)).done, 'its container is removed');
  const listed = (await toolCall(t, d, 'session_list', {})).structuredContent.sessions;
  assert.equal(listed.find((s) => s.name === 'b2')?.state, 'hibernated', JSON.stringify(listed));
  const twice = await toolCall(t, d, 'session_save', { session: 'b2' });
  assert.ok(!twice.isError && twice.structuredContent.state === 'hibernated', 'saving a hibernated session again says so');
  // A fork of a hibernated session is a copy of its store.
  const f3 = await toolCall(t, d, 'session_fork', { session: 'b2', new_session: 'b3' });
  assert.ok(!f3.isError, JSON.stringify(f3));
  assert.ok(existsSync(path.join(dirOf('b3'), 'index.json')), 'the copy is on disk under its own name');
  const b3 = await d.call(t, 'run_python', { session: 'b3', code: 'print(x)' });
  assert.equal(b3.structuredContent.stdout, '101\n');
  const onLive = await toolCall(t, d, 'session_fork', { session: 'base', new_session: 'b3' });
  assert.ok(onLive.isError && onLive.structuredContent.error.type === 'SessionExists', `a fork into an open session's name is refused (${JSON.stringify(onLive.structuredContent)})`);
  const none = await toolCall(t, d, 'session_save', { session: 'nothing' });
  assert.ok(none.isError && none.structuredContent.error.type === 'NoSession', JSON.stringify(none.structuredContent));

  // session_close removes each stored copy from disk: a checkpoint of a
  // running session, a hibernated one.
  assert.ok(existsSync(dirOf('base')) && existsSync(dirOf('b2')), 'the checkpoint and the hibernated session are on disk');
  for (const name of ['base', 'b2', 'b3']) {
    const c = await toolCall(t, d, 'session_close', { session: name });
    assert.ok(!c.isError, `${name}: ${JSON.stringify(c)}`);
  }
  for (const name of ['base', 'b2', 'b3']) assert.ok(!existsSync(dirOf(name)), `${name}'s stored state is gone`);
}, { timeoutMs: 240000 });

test('sessions: a host that closes stdin has its idle sessions saved (hibernation is on by default); the next corral resumes them with their links and empty directories (a host in another directory does not), and evicts one older than session_keep_s at start', async (t) => {
  const store = mkdtempSync(path.join(CONFIG_HOME, 'store-'));
  const d = await t.daemon('session-stop', { CORRAL_SESSION_STORE: store });
  const set = await d.call(t, 'run_python', { session: 'draft', code: [
    'import os',
    'words = ["kept", "across", "a", "restart"]',
    'os.makedirs("empty/inner")',
    'open("notes.txt", "w").write("n")',
    'os.symlink("notes.txt", "latest")',
    'os.symlink("/usr/bin/python3", "py")',
    'print(len(words))'].join('\n') });
  assert.equal(set.structuredContent.stdout, '4\n');
  await d.call(t, 'run_python', { session: 'old', code: 'x = 1' });
  const how = await d.close();
  assert.match(d.log, /stopping: saving 2 session\(s\)/);
  assert.match(d.log, /session draft: saved as corral stopped/);
  assert.equal(how.code, 0, `it exits 0 before the host's SIGTERM (${JSON.stringify(how)})`);
  assert.ok((await waitGone(set.structuredContent.container)).done, 'its container is removed');
  // A host started in another directory (another project) on the same
  // store is another client: its "draft" is a new session.
  const elsewhere = mkdtempSync(path.join(CONFIG_HOME, 'project-'));
  const dx = await t.daemon('session-stop-elsewhere', { CORRAL_SESSION_STORE: store }, { cwd: elsewhere });
  const other = await dx.call(t, 'run_python', { session: 'draft', code: 'print("words" in globals())' });
  assert.equal(other.structuredContent.stdout, 'False\n', 'another project does not resume the session');
  assert.equal(other.structuredContent.session.state, 'kept');
  assert.deepEqual((await toolCall(t, dx, 'session_list', {})).structuredContent.sessions.map((x) => x.name), ['draft'],
    'and lists only its own');
  await toolCall(t, dx, 'session_close', { session: 'draft' });
  await dx.close();
  // One of them saved two days ago, as its index says: past a keep of one
  // day, the next corral removes it soon after it starts (5 s).
  const oldIndex = path.join(stdioOwnerDir(store), 'old', 'index.json');
  const idx = JSON.parse(readFileSync(oldIndex, 'utf8'));
  idx.saved_ms -= 2 * 86400 * 1000;
  writeFileSync(oldIndex, JSON.stringify(idx));
  const d2 = await t.daemon('session-stop-2', { CORRAL_SESSION_STORE: store, CORRAL_SESSION_KEEP_S: '86400' });
  const oldDir = path.join(stdioOwnerDir(store), 'old');
  const back = await d2.call(t, 'run_python', { session: 'draft',
    code: 'import os\nprint(" ".join(words), os.path.isdir("empty/inner"), os.readlink("latest"), open("latest").read(), os.readlink("py"))' });
  assert.equal(back.structuredContent.stdout, 'kept across a restart True notes.txt n /usr/bin/python3\n',
    'its globals, its empty directories and its links come back');
  assert.equal(back.structuredContent.session.state, 'resumed');
  const files = await toolCall(t, d2, 'list_files', { session: 'draft', recursive: true });
  assert.ok(!JSON.stringify(files.structuredContent).includes('.corral'), `the state file is gone once loaded (${JSON.stringify(files.structuredContent).slice(0, 300)})`);
  const swept = await waitFor(async () => ({ done: !existsSync(oldDir) }), { timeoutMs: 20000, intervalMs: 250 });
  assert.ok(swept.done, 'the session older than session_keep_s is gone');
  assert.match(d2.log, /evicted hibernated session "old".*older than the store keeps sessions/);
  await toolCall(t, d2, 'session_close', { session: 'draft' });
}, { timeoutMs: 120000 });
