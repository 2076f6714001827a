// The command line (`corral run -c`, `corral run --shell`, `corral doctor`),
// the MCP Inspector CLI as a second client (tools/list and tools/call), and
// a stdio corral with no settings relaying to the user's service.
//
// Advice said once, fit to how the image setting was given.
//
//   node run.mjs cli           (cli:, MCP Inspector CLI:)

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { BIN, clip, CONFIG_HOME, CORRAL_TOOLS, corralEnv, Daemon, ENGINE, inspectorCli, knownPids, run, sleep,
  startService, test } from './lib/harness.mjs';

test('cli: `corral run -c` prints output and returns the exit code', async (t) => {
  const env = corralEnv();
  const a = await run(BIN, ['run', '-c', 'print(6*7)'], { env });
  t.note('run_a', a);
  assert.equal(a.code, 0);
  assert.equal(a.stdout, '42\n');
  const b = await run(BIN, ['run', '-c', 'import sys\nprint("x")\nsys.exit(5)'], { env });
  t.note('run_b', b);
  assert.equal(b.code, 5, 'the code\'s exit status');
  assert.equal(b.stdout, 'x\n');
  const c = await run(BIN, ['run', '--shell', '-c', 'echo shell; exit 4'], { env });
  t.note('run_c', c);
  assert.equal(c.code, 4);
  assert.equal(c.stdout, 'shell\n');
  // A killed instance leaves its status file, and its pid may be another
  // program's by now: here a live `sleep` that runs unconfined.
  const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
  const dir = env.XDG_RUNTIME_DIR ? path.join(env.XDG_RUNTIME_DIR, 'corral') : `/tmp/corral-${process.getuid()}`;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const stale = path.join(dir, `status-${sleeper.pid}.json`);
  writeFileSync(stale, JSON.stringify({ pid: sleeper.pid, instance: 'gone' }));
  try {
    const doc = await run(BIN, ['doctor'], { env, timeoutMs: 60000 });
    t.note('doctor', doc);
    assert.equal(doc.code, 0, 'corral doctor passes against the live engine');
    assert.doesNotMatch(doc.stdout, new RegExp(`pid ${sleeper.pid}\\b`), 'doctor does not take a reused pid for a corral');
    const st = await run(BIN, ['status', '--json'], { env });
    assert.doesNotMatch(st.stdout, /"instance":\s*"gone"/, 'corral status does not list it either');
    assert.ok(!existsSync(stale), 'corral status removes the stale file');
  } finally {
    sleeper.kill();
    rmSync(stale, { force: true });
  }
}, { timeoutMs: 120000 });

test('MCP Inspector CLI: tools/list shows the 16 tools and tools/call returns 42', async (t) => {
  const env = { CORRAL_ENGINE: ENGINE, XDG_CONFIG_HOME: CONFIG_HOME };
  if (process.env.CORRAL_IMAGE) env.CORRAL_IMAGE = process.env.CORRAL_IMAGE;
  const list = await inspectorCli([BIN, '--method', 'tools/list'], env);
  t.note('inspector', { version: list.version, node: list.node });
  t.note('tools_list', { code: list.code, stdout: clip(list.stdout, 1500), stderr: clip(list.stderr, 1500) });
  assert.equal(list.code, 0, 'inspector tools/list exits 0');
  const tools = JSON.parse(list.stdout).tools.map((x) => x.name).sort();
  assert.deepEqual(tools, CORRAL_TOOLS);
  const call = await inspectorCli([BIN, '--method', 'tools/call',
    '--tool-name', 'run_python', '--tool-arg', 'code=print(6*7)'], env);
  t.note('tools_call', { code: call.code, stdout: clip(call.stdout, 1500), stderr: clip(call.stderr, 1500) });
  assert.equal(call.code, 0, 'inspector tools/call exits 0');
  const res = JSON.parse(call.stdout);
  assert.equal(res.structuredContent?.stdout, '42\n');
  assert.equal(res.isError, false);
  assert.match(res.content?.[0]?.text ?? '', /^42\n/);
}, { timeoutMs: 150000 });

// An engine the user named is the one used: when it does not answer, that
// is the error, not a quiet switch to whatever else answers (or a private
// Podman service started in its place).
test('cli: a DOCKER_HOST that does not answer is an error naming it, never a fall-through to another engine', async (t) => {
  const env = corralEnv({ DOCKER_HOST: 'unix:///nonexistent/corral-e2e/docker.sock' });
  delete env.CORRAL_ENGINE;
  delete env.CONTAINER_HOST;
  const r = await run(BIN, ['run', '-c', 'print(6*7)'], { env, timeoutMs: 60000 });
  t.note('run', r);
  assert.notEqual(r.code, 0, 'the run fails');
  assert.doesNotMatch(r.stdout, /42/, 'nothing ran on another engine');
  assert.match(r.stderr, /DOCKER_HOST names the engine at \/nonexistent\/corral-e2e\/docker\.sock, which does not answer/,
    'the message names the variable and its socket');
  assert.doesNotMatch(r.stderr, /private|podman system service/i, 'no private Podman service was started');
  const ssh = await run(BIN, ['run', '-c', 'print(6*7)'], { env: { ...env, DOCKER_HOST: 'ssh://user@host' }, timeoutMs: 60000 });
  assert.notEqual(ssh.code, 0);
  assert.match(ssh.stderr, /DOCKER_HOST is ssh:\/\/user@host: corral speaks to engines at unix:\/\/ and tcp:\/\/ addresses only/);
}, { timeoutMs: 150000 });

// What to do is said once: in the result, not again in the log; and it
// names the setting the way it was given.
test('cli: advice comes once, and names the image setting as it was given (--image, CORRAL_IMAGE, the config file)', async (t) => {
  const count = (s, re) => (s.match(new RegExp(re.source, 'g')) || []).length;
  // No engine answers: a stdio corral, through the SDK.
  const env = { CONTAINER_HOST: 'unix:///nonexistent/corral-e2e/podman.sock', CORRAL_ENGINE: undefined, DOCKER_HOST: undefined };
  const d = await t.daemon('advice-no-engine', env);
  const r = await d.call(t, 'run_python', { code: 'print(1)' }, { timeoutMs: 30000 });
  assert.equal(r.structuredContent.status, 'engine_error');
  const advice = /unset CONTAINER_HOST/;
  t.note('log', d.log);
  assert.equal(count(r.content[0].text, advice), 1, 'the result says what to do');
  assert.equal(count(d.log, advice), 0, 'the log does not say it again');

  const conf = mkdtempSync(path.join(CONFIG_HOME, 'advice-'));
  const file = path.join(conf, 'config.json');
  writeFileSync(file, JSON.stringify({ image: 'corral-e2e-missing:1' }));
  const ways = [
    { how: '--image', args: ['--image', 'corral-e2e-missing:1'], env: {}, want: /or give --image an image that has python3/ },
    { how: 'CORRAL_IMAGE', args: [], env: { CORRAL_IMAGE: 'corral-e2e-missing:1' }, want: /or set CORRAL_IMAGE to an image that has python3/ },
    { how: 'the config file', args: ['--config', file], env: {}, want: new RegExp(`or set "image" in ${file.replace(/[.]/g, '\\.')} to an image`) },
  ];
  for (const w of ways) {
    const e = corralEnv(w.env);
    if (!w.env.CORRAL_IMAGE) delete e.CORRAL_IMAGE;
    const x = await run(BIN, ['run', ...w.args, '-c', 'print(1)'], { env: e, timeoutMs: 60000 });
    t.note(w.how, x.stderr);
    assert.notEqual(x.code, 0, `${w.how}: the run fails`);
    assert.match(x.stderr, /ImageMissing/, `${w.how}: ImageMissing`);
    assert.match(x.stderr, w.want, `${w.how}: the advice names ${w.how}`);
    assert.match(x.stderr, /`corral image build --image corral-e2e-missing:1`/, `${w.how}: and builds that image`);
    assert.equal(count(x.stderr, /corral image build/), 1, `${w.how}: said once`);
    if (w.how !== 'CORRAL_IMAGE') assert.doesNotMatch(x.stderr, /CORRAL_IMAGE/, `${w.how}: no variable that was not used`);
  }
}, { timeoutMs: 150000 });

// A read-only mount is no wall for what the host keeps in /, /proc, /sys,
// /dev and /run, nor for the engine's socket (connect needs no write
// permission on a read-only mount): such mounts need mounts_unsafe.
test('cli: mounts of the host\'s /, /proc, /run or the engine\'s socket are refused unless mounts_unsafe', async (t) => {
  const env = corralEnv();
  const sock = ENGINE.startsWith('unix://') ? ENGINE.slice(7) : null;
  const cases = [['/', /the host's whole file system/], ['/proc', /kernel interfaces/], ['/run', /kernel interfaces/]];
  if (sock) cases.push([path.dirname(sock), /engine's socket/]);
  for (const [host, why] of cases) {
    const r = await run(BIN, ['run', '--mounts', `${host}:/data`, '-c', 'print(6*7)'], { env, timeoutMs: 60000 });
    t.note(`mount ${host}`, { code: r.code, stderr: clip(r.stderr, 800) });
    assert.notEqual(r.code, 0, `a mount of ${host} is refused`);
    assert.doesNotMatch(r.stdout, /42/, `nothing ran with ${host} mounted`);
    assert.match(r.stderr, why, `the reason is given for ${host}`);
    assert.match(r.stderr, /mounts_unsafe/, 'and the setting that would allow it');
  }
  // Through a symbolic link, the same: the check is on where it leads.
  const link = path.join(CONFIG_HOME, 'to-proc');
  rmSync(link, { force: true });
  symlinkSync('/proc', link);
  const viaLink = await run(BIN, ['run', '--mounts', `${link}:/data`, '-c', 'print(6*7)'], { env, timeoutMs: 60000 });
  assert.notEqual(viaLink.code, 0, 'a link to /proc is refused too');
  assert.match(viaLink.stderr, /kernel interfaces/);
  rmSync(link, { force: true });
  // Mounts are outside the gVisor subset (tests/e2e/README.md): the refusals
  // above hold there too, the mount itself is checked under runc.
  if (sock && process.env.CORRAL_RUNTIME !== 'runsc') {
    const ok = await run(BIN, ['run', '--mounts', `${path.dirname(sock)}:/data`, '--mounts-unsafe', 'true', '-c',
      'import os; print(6*7, os.path.exists("/data"))'], { env, timeoutMs: 60000 });
    t.note('unsafe', { code: ok.code, stdout: ok.stdout, stderr: clip(ok.stderr, 800) });
    assert.equal(ok.code, 0, 'with mounts_unsafe the run goes on');
    assert.equal(ok.stdout, '42 True\n');
    assert.match(ok.stderr, /allowed by mounts_unsafe/, 'and corral says what it let through');
  }
}, { timeoutMs: 200000 });

// doctor checks what run and serve would meet: where no engine socket
// answers, they start a private Podman service, and so does doctor.
test('cli: doctor with no engine socket starts the private Podman service as run does, and passes the engine check', async (t) => {
  const xdg = mkdtempSync(path.join(CONFIG_HOME, 'xdg-run-'));
  const env = corralEnv({ XDG_RUNTIME_DIR: xdg });
  for (const k of ['CORRAL_ENGINE', 'CONTAINER_HOST', 'DOCKER_HOST']) delete env[k];
  const system = ['/run/podman/podman.sock', '/var/run/docker.sock'].filter((p) => existsSync(p));
  const doc = await run(BIN, ['doctor'], { env, timeoutMs: 120000 });
  t.note('doctor', { code: doc.code, stdout: doc.stdout, stderr: clip(doc.stderr, 1500) });
  assert.match(doc.stdout, /^ok {3}engine: /m, 'the engine check passes');
  if (system.length) {
    t.note('system_sockets', system);
    assert.doesNotMatch(doc.stdout, /started its own Podman/, 'a system socket answered: no private service');
  } else {
    assert.match(doc.stdout, /^note engine: no engine socket answered: corral started its own Podman service/m,
      'doctor says it started the private service');
    assert.match(doc.stdout, /^ok {3}sandbox: a hardened sandbox ran Python as uid 65534/m, 'and a sandbox ran on it');
  }
}, { timeoutMs: 150000 });

// A user of its own: HOME, config and runtime directories, and no corral
// setting at all (no CORRAL_* variable, no flag, no config file). Only
// DOCKER_HOST, which is not corral's, names the engine for a corral that
// serves alone. The service gets the suite's settings (engine, image).
test('cli: a stdio corral with no settings relays to the running service; `service: false`, any setting or a refused socket keeps it standalone', async (t) => {
  const dir = mkdtempSync(path.join(CONFIG_HOME, 'user-'));
  t.defer(() => rmSync(dir, { recursive: true, force: true }));
  const user = { HOME: path.join(dir, 'home'), XDG_CONFIG_HOME: path.join(dir, 'config'), XDG_RUNTIME_DIR: path.join(dir, 'run') };
  for (const d of Object.values(user)) mkdirSync(d, { mode: 0o700 });
  const bare = { DOCKER_HOST: ENGINE, ...user };
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('CORRAL_') && !['CONTAINER_HOST', 'DOCKER_HOST', ...Object.keys(user)].includes(k)) bare[k] = v;
  const hostOf = (name, env) => {
    const d = new Daemon(name);
    d.env = env;
    t.daemons.push(d);
    t.defer(() => d.close());
    return d.start();
  };

  const sock = path.join(user.XDG_RUNTIME_DIR, 'corral', 'corral.sock');
  const svc = await startService(t, ['--listen', 'unix'],
    corralEnv({ ...user, CORRAL_HOST_SERVERS: 'false', CORRAL_AUDIT_LOG: 'off' }), sock);

  // No settings: the host's corral relays, and its calls run in the
  // service's pool (sandbox_status names the service's process).
  const a = await hostOf('relayed', bare);
  const r = await a.call(t, 'run_python', { code: 'print(6*7)' });
  t.note('relayed_log', clip(a.log, 1500));
  assert.equal(r.structuredContent.status, 'ok', JSON.stringify(r).slice(0, 500));
  assert.equal(r.structuredContent.stdout, '42\n');
  assert.equal((a.log.match(/relaying to the corral service at \S+corral\.sock/g) || []).length, 1,
    'the log says once that it relays');
  assert.doesNotMatch(a.log, /serving on stdio|private podman/, 'it starts no engine or pool of its own');
  assert.equal((await a.status(t)).pid, svc.pid, "the calls run in the service's pool");
  assert.deepEqual(await a.close().then(({ code, signal }) => ({ code, signal })), { code: 0, signal: null },
    'the relay exits 0 when its host closes');
  assert.doesNotMatch(a.log, /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: /);

  // `service: false`, alone in the config file: standalone.
  mkdirSync(path.join(user.XDG_CONFIG_HOME, 'corral'), { mode: 0o700 });
  writeFileSync(path.join(user.XDG_CONFIG_HOME, 'corral', 'config.json'), '{"service": false}\n');
  const b = await hostOf('service-false', bare);
  assert.equal((await b.status(t)).pid, b.transport.pid, 'service: false serves this host alone');
  t.note('standalone_log', clip(b.log, 1500));
  assert.match(b.log, /serving on stdio/);
  assert.doesNotMatch(b.log, /relaying/);
  await b.close();
  rmSync(path.join(user.XDG_CONFIG_HOME, 'corral', 'config.json'));

  // Any setting of its own (here a variable) keeps it standalone too.
  const c = await hostOf('own-setting', { ...bare, CORRAL_LOG_LEVEL: 'info' });
  assert.equal((await c.status(t)).pid, c.transport.pid, 'a CORRAL_ variable keeps it standalone');
  assert.doesNotMatch(c.log, /relaying/);
  await c.close();

  const how = await svc.stop();
  t.note('service_log', clip(svc.log, 3000));
  assert.deepEqual(how, { code: 0, signal: null }, 'the service stops cleanly');
  assert.match(svc.log, /MCP session \w+\.\.\. opened/, 'the service saw the relayed host');

  // A socket left behind, that nothing listens on: refused, so the host's
  // corral serves alone at once.
  rmSync(sock, { force: true });
  const bound = await run('/usr/bin/python3', ['-c', 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', sock]);
  assert.equal(bound.code, 0, bound.stderr);
  const d = await hostOf('refused', bare);
  assert.equal((await d.status(t)).pid, d.transport.pid, 'a refused socket: standalone');
  assert.doesNotMatch(d.log, /relaying/);
  await d.close();
}, { timeoutMs: 180000 });

test('cli: `corral connect` with no service answers initialize with how to start one, and exits', async (t) => {
  const xdg = mkdtempSync(path.join(CONFIG_HOME, 'xdg-run-'));
  t.defer(() => rmSync(xdg, { recursive: true, force: true }));
  const p = spawn(BIN, ['connect'], { env: corralEnv({ XDG_RUNTIME_DIR: xdg }), stdio: ['pipe', 'pipe', 'pipe'] });
  knownPids.add(String(p.pid));
  let stdout = '', stderr = '';
  p.stdout.on('data', (d) => { stdout += d; });
  p.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => p.once('exit', (code) => r(code)));
  const t0 = Date.now();
  p.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'e2e', version: '1' } } }) + '\n');
  const code = await Promise.race([exited, sleep(8000).then(() => 'running')]);
  t.note('connect', { code, ms: Date.now() - t0, stdout: clip(stdout), stderr: clip(stderr) });
  if (code === 'running') p.kill('SIGKILL');
  assert.equal(code, 1, 'it exits 1 once it answered');
  const answer = JSON.parse(stdout.trim().split('\n')[0]);
  assert.equal(answer.id, 7, 'the answer is to the initialize');
  assert.equal(answer.error?.code, -32603);
  assert.match(answer.error.message, /no corral service at \S+corral\.sock: start it with `systemctl --user start corral\.socket`.*`corral serve --listen unix &`/);
  assert.match(stderr, /no corral service at/, 'and says so in its log');
});
