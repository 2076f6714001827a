// Limits a sandbox and a daemon hold: the pids limit against a fork bomb, the
// output limit, the CORRAL_* settings (time, output, pids, memory, slots), and
// status busy when every slot is taken and nothing may queue.
//
//   node run.mjs limits        (pids limit:, output limit:, settings:, busy:)

import assert from 'node:assert/strict';
import { GVISOR, MiB, sleep, startCall, test, waitGone, waitPool, withTimeout } from './lib/harness.mjs';

// Under gVisor a forked Python costs about 10 MiB of the sandbox's memory
// by gVisor's own count (126 forks of a run: 1375 MiB), so 128 of
// them do not fit the default 512 MiB: the tests of the pids limit give
// their sandboxes the memory to reach it, as the limit tested is pids.
const PIDS_MEMORY = GVISOR ? { CORRAL_MEMORY: '2500m' } : {};

test('pids limit: a fork bomb is contained and the daemon keeps serving', async (t) => {
  const d = GVISOR ? await t.daemon('pids', PIDS_MEMORY) : await t.main();
  // How many processes can we hold? Must stop well short of 1000 (limit 128).
  const count = await d.call(t, 'run_python', {
    code: [
      'import os, time',
      'kids = []',
      'err = None',
      'for i in range(1000):',
      '    try:',
      '        pid = os.fork()',
      '    except OSError as e:',
      '        err = e.errno',
      '        break',
      '    if pid == 0:',
      '        time.sleep(60)',
      '        os._exit(0)',
      '    kids.append(pid)',
      'for k in kids:',
      '    os.kill(k, 9)',
      'for k in kids:',
      '    os.waitpid(k, 0)',
      'print(len(kids), err)',
    ].join('\n'),
    timeout_s: 30,
  }, { timeoutMs: 60000 });
  assert.equal(count.structuredContent.status, 'ok', 'the counting run finished');
  const [held, errno] = count.structuredContent.stdout.trim().split(' ');
  assert.ok(Number(held) > 0 && Number(held) < 128, `fork stopped below the pids limit of 128 (held ${held}, errno ${errno})`);
  assert.equal(errno, '11', 'fork failed with EAGAIN');

  // A real fork bomb: every process keeps forking until the time runs out.
  const bomb = await d.call(t, 'run_python', {
    code: 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n',
    timeout_s: 5,
  }, { timeoutMs: 60000 });
  t.note('bomb', { status: bomb.structuredContent.status, ms: bomb.ms });
  assert.notEqual(bomb.structuredContent.status, 'ok', 'the fork bomb did not succeed');
  assert.ok(bomb.ms < 30000, `the fork bomb's result came within 30 s (took ${bomb.ms} ms)`);
  const after = await d.call(t, 'run_python', { code: 'print("still here")' }, { timeoutMs: 20000 });
  assert.equal(after.structuredContent.status, 'ok', 'the next call works');
  assert.equal(after.structuredContent.stdout, 'still here\n');
  assert.ok(after.ms < 15000, `the next call came back quickly (${after.ms} ms)`);
}, { timeoutMs: 150000 });

test('output limit: printing 5 MiB gives a result within result_max_chars, its first and last bytes shown, every byte counted', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: 'print("a" * (5 * 1024 * 1024 - 3) + "END")' }, { timeoutMs: 60000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'ok');
  assert.equal(sc.stdout_truncated, true, 'stdout_truncated');
  assert.equal(sc.stdout_bytes, 5 * MiB + 1, 'stdout_bytes counts every byte printed');
  assert.ok(r.content[0].text.length <= 20000, `the text is within result_max_chars (${r.content[0].text.length})`);
  assert.ok(sc.stdout.length <= 20000, `so is stdout (${sc.stdout.length})`);
  assert.match(sc.stdout, /^a{1000,}\n\[\.\.\. \d+ bytes of stdout left out \(5242881 in all\)/, 'the first bytes, then what is left out');
  assert.match(sc.stdout, /a{1000,}END\n$/, 'the last bytes, with the last line');
  assert.match(r.content[0].text, /left out/, 'the text content says so');
});

test('settings: CORRAL_TIMEOUT_S, CORRAL_OUTPUT_LIMIT, CORRAL_PIDS, CORRAL_MEMORY, CORRAL_MAX_SANDBOXES apply', async (t) => {
  const d = await t.daemon('settings', {
    CORRAL_TIMEOUT_S: '1', CORRAL_OUTPUT_LIMIT: '4k', CORRAL_PIDS: '32', CORRAL_MEMORY: '300m',
    CORRAL_MAX_SANDBOXES: '1', ...(GVISOR ? { CORRAL_MEMORY: '800m' } : {}),
  });
  const memory = GVISOR ? 800 : 300;
  // The pool stays on (defaults min 2, max 4), capped at the one slot; its
  // sandboxes get the same limits.
  const st = await d.status(t);
  assert.deepEqual([st.pool.enabled, st.pool.min, st.pool.max], [true, 1, 1],
    'CORRAL_MAX_SANDBOXES=1 caps the pool at min 1, max 1');
  const slow = await d.call(t, 'run_python', { code: 'import time\ntime.sleep(8)\nprint("done")' });
  assert.equal(slow.structuredContent.status, 'timeout', 'the default time limit is CORRAL_TIMEOUT_S=1');
  assert.ok(slow.ms < 6000, `timed out after about 1 s (${slow.ms} ms)`);
  const big = await d.call(t, 'run_python', { code: 'print("b" * 10000)', timeout_s: 20 });
  assert.equal(big.structuredContent.status, 'ok');
  assert.equal(big.structuredContent.stdout_truncated, true);
  // Memory keeps 4 KiB of the head and 4 KiB of the tail.
  assert.ok(big.structuredContent.stdout.startsWith('b'.repeat(4096) + '\n[... 1809 bytes of stdout left out'),
    `stdout shows the first CORRAL_OUTPUT_LIMIT=4k bytes: ${big.structuredContent.stdout.slice(4090, 4300)}`);
  assert.ok(big.structuredContent.stdout.endsWith('...]\n' + 'b'.repeat(4095) + '\n'), 'and the last 4k');
  assert.equal(big.structuredContent.stdout_bytes, 10001);
  const limits = await d.call(t, 'run_python', {
    code: [
      'import os, time',
      'kids, err = [], None',
      'while len(kids) < 200:',
      '    try:',
      '        pid = os.fork()',
      '    except OSError as e:',
      '        err = e.errno',
      '        break',
      '    if pid == 0:',
      '        time.sleep(30)',
      '        os._exit(0)',
      '    kids.append(pid)',
      'for k in kids:',
      '    os.kill(k, 9)',
      '    os.waitpid(k, 0)',
      'mem = None',
      'for p in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):',
      '    try:',
      '        mem = open(p).read().strip()',
      '        break',
      '    except OSError:',
      '        pass',
      '# gVisor has no cgroup files; its MemTotal is the limit',
      'for line in ([] if mem else open("/proc/meminfo")):',
      '    if line.startswith("MemTotal:"):',
      '        mem = str(int(line.split()[1]) * 1024)',
      'print(len(kids), err, mem)',
    ].join('\n'),
    timeout_s: 30,
  }, { timeoutMs: 60000 });
  assert.equal(limits.structuredContent.status, 'ok', 'the probe ran');
  const [held, errno, mem] = limits.structuredContent.stdout.trim().split(' ');
  assert.ok(Number(held) > 0 && Number(held) < 32, `fork stopped below CORRAL_PIDS=32 (held ${held}, errno ${errno})`);
  assert.equal(mem, String(memory * MiB), `the memory limit is CORRAL_MEMORY=${memory}m`);
  // With one sandbox slot, overlapping calls queue and run one after another.
  const code = 'import time\na = time.time()\ntime.sleep(0.7)\nprint(a, time.time())';
  const both = await Promise.all([0, 1].map(() => d.call(null, 'run_python', { code, timeout_s: 20 }, { timeoutMs: 60000 })));
  const spans = both.map((r) => r.structuredContent.stdout.trim().split(' ').map(Number));
  t.note('spans', spans);
  both.forEach((r) => assert.equal(r.structuredContent.status, 'ok'));
  spans.sort((x, y) => x[0] - y[0]);
  assert.ok(spans[1][0] >= spans[0][1] - 0.05, 'with CORRAL_MAX_SANDBOXES=1 the second call ran after the first');
}, { timeoutMs: 120000 });

test('busy: with one slot and no queue a second call gets status busy (pool off, and pool capped at 1)', async (t) => {
  // CORRAL_POOL_MAX=0: the first call starts the only sandbox. Pool on: it
  // is capped at the one slot, the first call takes the ready sandbox and
  // nothing else may start.
  for (const [label, pool] of [['nopool', { CORRAL_POOL_MAX: '0' }], ['pool1', {}]]) {
    const d = await t.daemon(`busy-${label}`, { CORRAL_MAX_SANDBOXES: '1', CORRAL_MAX_QUEUE: '0', ...pool });
    if (label === 'pool1') {
      const w = await waitPool(t, d, (p) => p.ready >= 1);
      assert.ok(w.done, `${label}: one sandbox is ready within 30 s`);
      assert.equal(w.s.pool.max, 1, `${label}: the pool is capped at CORRAL_MAX_SANDBOXES=1`);
    }
    // The first call holds the one slot once its code runs (it says so);
    // it sleeps long enough for the second to be refused meanwhile.
    const first = startCall(d, 'run_python', { code: 'import time\nprint("go", flush=True)\ntime.sleep(4)\nprint("first")' },
      { until: /go/, timeoutMs: 60000 });
    await withTimeout(first.running, 60000, `${label}: the first call running`);
    const second = await d.call(t, 'run_python', { code: 'print("second")' });
    assert.equal(second.structuredContent.status, 'busy', `${label}: the second call is busy`);
    assert.equal(second.isError, true);
    assert.equal(second.structuredContent.container, null, `${label}: no container for a refused call`);
    const { result: r, error } = await first.call;
    assert.ok(r, `${label}: the first call is answered (${error})`);
    assert.equal(r.structuredContent.stdout, 'go\nfirst\n', `${label}: the running call is unaffected`);
    // corral holds the slot until the engine has removed the container, which
    // may be a moment after the result: wait for that before the next call.
    const gone = await waitGone(r.structuredContent.container, 10000);
    assert.ok(gone.done, `${label}: the first call's container is removed`);
    // ...and for corral to hear of it: the slot is free (without a pool),
    // or holds a new ready sandbox (the pool of one refilled).
    const free = await waitPool(t, d, (p) => p.busy === 0 && (label === 'pool1' ? p.ready >= 1 : p.containers === 0), 30000);
    assert.ok(free.done, `${label}: corral has let the slot go (${JSON.stringify(free.s.pool)})`);
    const third = await d.call(t, 'run_python', { code: 'print("third")' }, { timeoutMs: 60000 });
    assert.equal(third.structuredContent.stdout, 'third\n', `${label}: the slot is free again`);
    const st = await d.status(t);
    assert.equal(st.pool.enabled, label === 'pool1', `${label}: pool.enabled`);
    await d.close();
  }
}, { timeoutMs: 120000 });
