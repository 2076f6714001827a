// The last test of every run: it closes the shared daemon and every daemon
// still open, then checks that no container labelled io.corral.owner=corral is
// left on the engine (containers that existed before the run, and those of
// live corral processes the suite did not start, are ignored). run.mjs always
// runs this file last, also when only some feature files are named.

import assert from 'node:assert/strict';
import {
  brief, corralAlive, corralContainers, engineRequest, knownPids, mainDaemon, openDaemons, out, preexisting,
  suiteStart, test, waitFor,
} from './lib/harness.mjs';

test('cleanup: no corral container is left on the engine', async (t) => {
  // Close every client properly: corral removes its sandboxes on stdin EOF.
  if (mainDaemon) {
    const d = await mainDaemon.catch(() => null);
    if (d) {
      t.daemons.push(d);
      t.note('main_close', await d.close());
    }
  }
  // Any other daemon still open (one a feature file shares among its
  // tests): its stderr is judged too, sanitizer leak reports come at exit.
  for (const d of [...openDaemons]) {
    t.daemons.push(d);
    await d.close();
  }
  // Containers of a corral still running that this suite did not start
  // (someone else's, on a shared engine) are not leaks of this run.
  const others = new Set();
  const left = await waitFor(async () => {
    const cs = (await corralContainers()).filter((c) => !preexisting.has(c.id));
    for (const c of cs) if (!knownPids.has(c.pid) && corralAlive(c.pid)) others.add(c.id);
    const leaked = cs.filter((c) => !others.has(c.id));
    return { done: leaked.length === 0, cs: leaked };
  }, { timeoutMs: 10000, intervalMs: 250 });
  if (others.size) out(`# note: ignored ${others.size} container(s) of corral processes this suite did not start`);
  if (!left.done) {
    t.note('left_behind', brief(left.cs));
    t.note('left_by_this_suite', left.cs.filter((c) => knownPids.has(c.pid)).length);
    // Remove what this suite leaked (exited containers created since it
    // started) so the engine stays clean; the failure is reported anyway.
    const removed = [];
    for (const c of left.cs)
      if (c.created >= suiteStart && c.state === 'exited') {
        const r = await engineRequest('DELETE', `/v1.41/containers/${c.id}?force=1&v=1`).catch((e) => ({ status: e.message }));
        removed.push(`${c.id.slice(0, 12)}: ${r.status}`);
      }
    t.note('removed_by_the_suite', removed);
  }
  assert.deepEqual(brief(left.cs), [], 'no container labelled io.corral.owner=corral remains');
}, { timeoutMs: 60000 });
