// Long runs: a call still running after sync_wait_s becomes a job (job_status,
// job_result, job_cancel, job_list), and live output reaches a client that
// sent a progressToken (notifications/progress, corral.progress(), the
// heartbeat that keeps a resetting request timer alive).
//
//   node run.mjs jobs          (jobs:, live output:)

import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { checkResult, corralContainers, jobCall, sleep, test, waitFor } from './lib/harness.mjs';

test('jobs: a 60 s run with sync_wait_s 2 becomes a job at ~2 s; job_status, job_result; job_cancel kills another', async (t) => {
  const d = await t.main();
  const code = 'import time\nfor i in range(6):\n    print("tick", i, flush=True)\n    time.sleep(10)\nprint("finished")';
  const first = await d.call(t, 'run_python', { code, sync_wait_s: 2, timeout_s: 90 });
  const sc = first.structuredContent;
  t.note('first', { ms: first.ms, sc });
  assert.equal(sc.status, 'running', 'the call answers "running"');
  assert.ok(first.ms >= 1900 && first.ms < 8000, `...after about 2 s (${first.ms} ms)`);
  assert.equal(first.isError, false, 'a running job is not an error');
  assert.match(sc.stdout, /^tick 0\n/, 'with the output so far');
  assert.match(first.content.map((c) => c.text).join('\n'), new RegExp(sc.job_id), 'the text names the job');
  const job = sc.job_id;

  const st = await jobCall(t, d, 'job_status', { job_id: job });
  assert.equal(st.structuredContent.status, 'running', 'job_status: running');
  assert.equal(st.structuredContent.running, true);
  assert.match(st.structuredContent.stdout_tail, /tick 0/, 'job_status shows the newest output');

  // Another job, cancelled: its container goes.
  const other = await d.call(t, 'run_python', { code: 'import time\ntime.sleep(300)', sync_wait_s: 1, timeout_s: 400 });
  assert.equal(other.structuredContent.status, 'running');
  const otherId = other.structuredContent.job_id;
  const container = other.structuredContent.container;
  assert.match(container ?? '', /^[0-9a-f]{12}$/, 'the running result names its container');
  assert.notEqual(otherId, job, 'each job has its own id');
  const list = await jobCall(t, d, 'job_list', {});
  assert.deepEqual(list.structuredContent.jobs.map((j) => j.job_id).sort(), [job, otherId].sort(), 'job_list lists both');
  const cancel = await jobCall(t, d, 'job_cancel', { job_id: otherId });
  assert.equal(cancel.structuredContent.cancelled, true, 'job_cancel: cancelled');
  const gone = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.pid=${d.pid}`);
    return { done: !cs.some((c) => c.id.startsWith(container)), left: cs.map((c) => c.id.slice(0, 12)) };
  }, { timeoutMs: 15000 });
  assert.ok(gone.done, `the cancelled job's container ${container} is removed`);
  // The engine lists the container gone a moment before corral has its
  // answer to the DELETE, and the result waits for that answer.
  const cancelled = await waitFor(async () => {
    const r = await jobCall(t, d, 'job_result', { job_id: otherId });
    return { done: r.structuredContent.status !== 'running', r };
  }, { timeoutMs: 5000 });
  assert.equal(cancelled.r.structuredContent.status, 'cancelled', 'its result says cancelled');
  const again = await jobCall(t, d, 'job_cancel', { job_id: otherId });
  assert.equal(again.structuredContent.cancelled, false, 'cancelling an ended job does nothing');

  // The first job still runs, then its result arrives through job_result.
  const still = await jobCall(t, d, 'job_result', { job_id: job });
  assert.equal(still.structuredContent.status, 'running', 'job_result without wait_s: still running');
  const done = await jobCall(t, d, 'job_result', { job_id: job, wait_s: 90 }, 120000);
  checkResult(done);
  assert.equal(done.structuredContent.status, 'ok', 'job_result with wait_s: the final result');
  assert.equal(done.structuredContent.stdout, 'tick 0\ntick 1\ntick 2\ntick 3\ntick 4\ntick 5\nfinished\n');
  assert.ok(done.structuredContent.duration_ms >= 59000, 'the job ran its full minute');
  const kept = await jobCall(t, d, 'job_result', { job_id: job });
  assert.equal(kept.structuredContent.stdout, done.structuredContent.stdout, 'the result is kept for later asks');
  const unknown = await jobCall(t, d, 'job_result', { job_id: 'job-999' });
  assert.equal(unknown.structuredContent.status, 'invalid_arguments', 'an unknown job_id is invalid_arguments');
  assert.match(unknown.content[0].text, /no job "job-999"/);
  // A quick call does not become a job.
  const quick = await d.call(t, 'run_python', { code: 'print(1)', sync_wait_s: 5 });
  assert.equal(quick.structuredContent.status, 'ok');
  assert.equal(quick.structuredContent.job_id, undefined, 'a call that ends in time has no job_id');
}, { timeoutMs: 180000 });

test('live output: a progressToken gets notifications/progress with output lines and corral.progress() before the result', async (t) => {
  const d = await t.main();
  const events = [];
  const code = [
    'import time, corral',
    'for i in range(4):',
    '    print("step", i, flush=True)',
    '    time.sleep(0.4)',
    'corral.progress(3, 10, "three of ten")',
    'time.sleep(0.4)',
    'print("done")',
  ].join('\n');
  const t0 = Date.now();
  const r = await d.client.callTool({ name: 'run_python', arguments: { code } }, CallToolResultSchema,
    { timeout: 60000, onprogress: (p) => events.push({ ms: Date.now() - t0, ...p }) });
  const resultMs = Date.now() - t0;
  checkResult(r);
  t.note('progress', events);
  assert.equal(r.structuredContent.status, 'ok');
  assert.ok(events.length >= 3, `several notifications while the code ran (got ${events.length})`);
  assert.ok(events.every((e) => e.ms <= resultMs), 'every notification came before the result');
  assert.ok(events.some((e) => e.ms < resultMs - 1000), 'the first ones well before the end (live, not at the end)');
  for (let i = 1; i < events.length; i++)
    assert.ok(events[i].progress > events[i - 1].progress, `progress grows: ${events[i - 1].progress} -> ${events[i].progress}`);
  assert.ok(events.some((e) => /step 0/.test(e.message ?? '')), 'a message carries the first output line');
  assert.ok(events.some((e) => /step 2\nstep 3$/.test(e.message ?? '')), 'messages carry the newest lines, in order');
  const own = events.find((e) => e.message === 'three of ten');
  assert.ok(own, 'the code\'s own corral.progress() report arrives');
  assert.equal(own.progress, 3);
  assert.equal(own.total, 10);
  // Without a token, nothing: the SDK would report a notification for an
  // unknown token as an error.
  const before = d.errors.length;
  const plain = await d.call(t, 'run_python', { code: 'import corral\nprint("x")\ncorral.progress(1, 2)' });
  assert.equal(plain.structuredContent.status, 'ok');
  await sleep(300);
  assert.deepEqual(d.errors.slice(before).map((e) => String(e?.message)), [], 'no notification without a progressToken');
});

test('live output: a silent 7 s run outlives a 5.5 s request timeout that progress resets', async (t) => {
  // The heartbeat (every 5 s) keeps a host's per-request timer from expiring
  // when it resets on progress (the SDK's resetTimeoutOnProgress).
  const d = await t.main();
  const events = [];
  const r = await d.client.callTool({ name: 'run_python', arguments: { code: 'import time\ntime.sleep(7)\nprint("awake")' } },
    CallToolResultSchema, { timeout: 5500, resetTimeoutOnProgress: true, maxTotalTimeout: 60000, onprogress: (p) => events.push(p) });
  checkResult(r);
  t.note('progress', events);
  assert.equal(r.structuredContent.stdout, 'awake\n');
  assert.ok(events.length >= 1, 'at least one heartbeat during the silent run');
});
