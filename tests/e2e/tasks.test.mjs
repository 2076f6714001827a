// MCP tasks: a tools/call carrying a task runs as one (tasks/get,
// tasks/result, tasks/list, tasks/cancel).
//
//   node run.mjs tasks         (MCP tasks:)

import { CallToolResultSchema, CreateTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { checkResult, jobCall, sleep, test, waitGone } from './lib/harness.mjs';

test('MCP tasks: a tools/call with a task runs as one: tasks/get, tasks/result, tasks/list, tasks/cancel', async (t) => {
  const d = await t.daemon('tasks');
  assert.deepEqual(d.client.getServerCapabilities()?.tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } },
    'initialize declares the tasks capability for tools/call');
  for (const tool of d.tools)
    assert.equal(tool.execution?.taskSupport, ['run_python', 'run_shell'].includes(tool.name) ? 'optional' : undefined,
      `${tool.name}: taskSupport`);
  const tasks = d.client.experimental.tasks;
  // The SDK's stream: created, polled while working, then the result.
  const msgs = [];
  const t0 = Date.now();
  for await (const m of tasks.callToolStream({ name: 'run_python', arguments: { code: 'import time\ntime.sleep(2)\nprint(6 * 7)' } },
    CallToolResultSchema, { task: { ttl: 120000 }, timeout: 30000 }))
    msgs.push(m);
  t.note('stream', msgs.map((m) => ({ type: m.type, status: m.task?.status, ms: Date.now() - t0 })));
  assert.equal(msgs[0]?.type, 'taskCreated', 'the call answers with a task first');
  const id = msgs[0].task.taskId;
  assert.equal(msgs[0].task.status, 'working', 'a new task is working');
  assert.equal(msgs[0].task.ttl, 120000, 'with the ttl asked for');
  assert.ok(!Number.isNaN(Date.parse(msgs[0].task.createdAt)), 'createdAt is a timestamp');
  assert.ok(msgs.some((m) => m.type === 'taskStatus' && m.task.status === 'working'), 'polled while working');
  const last = msgs[msgs.length - 1];
  assert.equal(last.type, 'result', `the stream ends with the result (${last.type}: ${last.error?.message ?? ''})`);
  checkResult(last.result);
  assert.equal(last.result.structuredContent.stdout, '42\n', 'the run\'s output');
  assert.equal(last.result._meta?.['io.modelcontextprotocol/related-task']?.taskId, id, 'tasks/result names its task');
  const got = await tasks.getTask(id);
  assert.equal(got.status, 'completed', 'tasks/get: completed');
  assert.match(got.statusMessage ?? '', /^ok/);
  // A run that fails is a failed task; tasks/result still has its result.
  const created = await d.client.request({ method: 'tools/call', params: { name: 'run_python', arguments: { code: '1/0' }, task: {} } },
    CreateTaskResultSchema);
  const fid = created.task.taskId;
  const fres = await tasks.getTaskResult(fid, CallToolResultSchema);
  assert.equal(fres.structuredContent.status, 'error', 'tasks/result blocks until the end and gives the tool result');
  assert.equal(fres.structuredContent.error.type, 'ZeroDivisionError');
  const fget = await tasks.getTask(fid);
  assert.equal(fget.status, 'failed', 'a result with isError makes the task failed');
  assert.match(fget.statusMessage, /ZeroDivisionError/, 'the status message says why');
  // Cancel a long one: its container goes, it stays cancelled.
  const long = await d.client.request({ method: 'tools/call', params: { name: 'run_python', arguments: { code: 'import time\ntime.sleep(120)', timeout_s: 200 }, task: {} } },
    CreateTaskResultSchema);
  const lid = long.task.taskId;
  const listed = await tasks.listTasks();
  assert.deepEqual(listed.tasks.map((x) => x.taskId).sort(), [id, fid, lid].sort(), 'tasks/list lists all three');
  assert.equal(listed.tasks.find((x) => x.taskId === lid).status, 'working');
  await sleep(1000);
  const cancelled = await tasks.cancelTask(lid);
  assert.equal(cancelled.status, 'cancelled', 'tasks/cancel answers with the task cancelled');
  const lres = await tasks.getTaskResult(lid, CallToolResultSchema);
  assert.equal(lres.structuredContent.status, 'cancelled', 'its result: cancelled');
  assert.equal((await tasks.getTask(lid)).status, 'cancelled', 'it stays cancelled');
  const gone = await waitGone(lres.structuredContent.container);
  assert.ok(gone.done, `its container ${lres.structuredContent.container} is removed`);
  await assert.rejects(tasks.cancelTask(lid), (e) => e instanceof McpError && e.code === -32602,
    'cancelling a cancelled task: -32602');
  await assert.rejects(tasks.getTask('job-9999'), (e) => e instanceof McpError && e.code === -32602,
    'an unknown task: -32602');
  await assert.rejects(d.client.request({ method: 'tools/call', params: { name: 'session_list', arguments: {}, task: {} } }, CreateTaskResultSchema),
    (e) => e instanceof McpError && e.code === -32601, 'a tool without task support: -32601');
  const bad = await d.client.request({ method: 'tools/call', params: { name: 'run_python', arguments: { nope: 1 }, task: {} } },
    CreateTaskResultSchema);
  const bres = await tasks.getTaskResult(bad.task.taskId, CallToolResultSchema);
  assert.equal(bres.structuredContent.status, 'invalid_arguments', 'bad arguments: a task that failed at once, saying why');
  // Tasks are jobs: the job tools see them too.
  const js = await jobCall(t, d, 'job_status', { job_id: id });
  assert.equal(js.structuredContent.status, 'ok', 'job_status knows the task');
}, { timeoutMs: 120000 });
