#!/usr/bin/env node
// End-to-end check of corral as a container (corral:latest, and
// corral-node:latest: the same plus Debian's Node and npm): an MCP host
// starts it over stdio as `docker run -i --rm -v SOCKET:/var/run/docker.sock
// corral:latest` (podman: /run/podman/podman.sock), the engine's socket
// mounted where corral looks for it, and its sandboxes are its
// siblings on that engine. The official SDK client drives it through the
// engine's own command line (the harness's Daemon with opts.command).
// Prints TAP version 13.
//
//   CORRAL_ENGINE=unix:///run/podman/podman.sock node container.mjs
//   CORRAL_ENGINE=unix:///var/run/docker.sock node container.mjs
//
// What it shows:
//   - calls: run_python answers; the sandbox is as hardened as from a host
//     corral (no network, uid 65534, read-only root, no capabilities); it is
//     a sibling on the engine with corral's labels, corral runs under the
//     reaper that is its container's pid 1;
//   - sessions: state kept between calls; a session hibernated with
//     session_save outlives its container, and a new container on the same
//     state volume resumes it;
//   - progress notifications of a call's output, before its result;
//   - `mounts` as the engine's paths: a host directory never mounted into
//     corral's container reaches the sandbox read-only, a missing one
//     fails with Docker's reason (Podman makes it, empty, as `podman run
//     -v` does);
//   - files (write_file, list_files, read_file), a background job
//     (job_status, job_result), an MCP task, resources of a session;
//   - approvals: a policy's `ask` put to the client (elicitation), accepted
//     and declined;
//   - the bridge: sandboxed code calls server-everything over streamable
//     HTTP on the host (corral:latest with --network host) and over stdio
//     inside corral's container (corral-node, its node, node_modules
//     mounted read-only);
//   - doctor says it runs in a container (its id), on Podman that the engine
//     can read the seccomp profile, and fails an `npx` server in the plain
//     image with advice naming corral-node;
//   - on Podman, a tmpfs on /tmp hides the seccomp profile from the engine:
//     calls fail closed with that reason, no sandbox is made without it (on
//     Docker, which takes the profile inline, the same container runs them);
//   - the bridge's stdio server leaves orphans behind (sh), and corral's
//     pid 1 reaps them: no zombie in its container;
//   - the service in a container (on Podman as the README gives it,
//     published on 127.0.0.1 only and listening on 0.0.0.0 with
//     http_public; on Docker, which has no bridge here, --network host and
//     127.0.0.1), the token on a volume: the SDK's streamable HTTP
//     client with the token runs code, a request without it gets 401, and
//     SIGTERM (docker stop) stops it cleanly;
//   - on Docker with corral-runsc, CORRAL_RUNTIME=runsc puts the sandboxes
//     of corral in a container under gVisor;
//   - what a corral in a container killed with SIGKILL left is removed by
//     the next corral in a container as it starts;
//   - every corral container of the suite ends with its host and leaves no
//     sandbox behind.
//
// Needs the engine's command line (docker for Docker, podman for Podman)
// and a unix socket; corral:latest on the engine (`corral image build
// --profile corral`; the suite bails out without it), corral-node:latest
// for the stdio bridge and the doctor control (skipped without it).
//
// Environment: CORRAL_ENGINE (required, unix:///PATH; exit 77 without it),
// CORRAL_IMAGE (the sandbox image corral in the container uses; default
// corral-python:latest), E2E_ONLY (a regex of test names), E2E_VERBOSE=1.
// Exit status: 0 passed, 1 failed (or bailed out), 77 skipped.

import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResultSchema, CreateTaskResultSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  checkResult, clip, CONFIG_HOME, CONNECT_PROBE, corralContainers, Daemon, engineRequest, ENGINE, HERE, jobCall, out, run, runSuite, sha256,
  brief, test, toolCall, waitFor, waitGone, waitPool, withTimeout,
} from './lib/harness.mjs';
import { freePort } from './lib/net.mjs';
import { serverEntry, startEverythingHttp } from './lib/servers.mjs';

const IMAGE = process.env.CORRAL_IMAGE || 'corral-python:latest'; // the sandboxes'
const CORRAL = 'corral:latest';
const CORRAL_NODE = 'corral-node:latest';
const text = (r) => (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');

// ---------------------------------------------------------------- the engine

// The engine's kind (GET /version names Podman among its Components; the
// socket's file name otherwise), its socket on this machine, where corral
// finds it by default in its container, and the command line that drives it.
const SOCK = ENGINE?.startsWith('unix://') ? ENGINE.slice('unix://'.length) : ENGINE?.startsWith('/') ? ENGINE : null;
let KIND = null;
let noNode = null; // why the corral-node tests are skipped, or null
if (ENGINE) await probeEngine();

async function probeEngine() {
  let version;
  try {
    version = await engineRequest('GET', '/version', 5000);
  } catch {
    return; // runSuite() says the engine does not answer
  }
  const bail = (why) => {
    rmSync(CONFIG_HOME, { recursive: true, force: true });
    out('TAP version 13');
    out(`Bail out! ${why}`);
    process.exit(1);
  };
  if (!SOCK) bail(`corral in a container needs the engine's unix socket to mount in, not ${ENGINE}`);
  const podman = (version.body?.Components ?? []).some((c) => /podman/i.test(c.Name ?? ''));
  KIND = podman || /podman/.test(path.basename(SOCK)) ? 'podman' : 'docker';
  try {
    execFileSync(KIND, ['--version'], { stdio: 'ignore' });
  } catch {
    bail(`the ${KIND} command is not installed: it starts corral's container here, as an MCP host would`);
  }
  const img = await engineRequest('GET', `/images/${encodeURIComponent(CORRAL)}/json`);
  if (img.status !== 200)
    bail(`${CORRAL} is not on the engine at ${ENGINE} (HTTP ${img.status}): build it with \`corral image build --profile corral\``);
  const node = await engineRequest('GET', `/images/${encodeURIComponent(CORRAL_NODE)}/json`);
  if (node.status !== 200) noNode = `${CORRAL_NODE} is not on the engine (\`corral image build --profile corral-node\`)`;
}

const CLI_ARGS = KIND === 'podman' ? ['--url', ENGINE] : ['-H', ENGINE];
// Where corral looks for the engine in its container, by default.
const INNER_SOCK = KIND === 'podman' ? '/run/podman/podman.sock' : '/var/run/docker.sock';
const cli = (args, opts = {}) => run(KIND, [...CLI_ARGS, ...args], { timeoutMs: 60000, ...opts });
const skipNode = (name) => (noNode ? `${name} # SKIP ${noNode}` : name);

// What this suite made on the engine: removed as each test ends (t.defer),
// and once more, whatever is left, as the process exits.
const made = { containers: new Set(), volumes: new Set(), instances: new Set(), children: new Set(), dirs: new Set() };
process.on('exit', () => {
  for (const c of made.children) c.kill('SIGKILL');
  for (const dir of made.dirs) rmSync(dir, { recursive: true, force: true });
  const rm = (args) => { try { execFileSync(KIND, [...CLI_ARGS, ...args], { stdio: 'ignore', timeout: 30000 }); } catch { /* gone */ } };
  if (made.containers.size) rm(['rm', '-f', ...made.containers]);
  for (const v of made.volumes) rm(['volume', 'rm', '-f', v]);
});

const unique = (what) => `corral-e2e-${what}-${randomBytes(4).toString('hex')}`;

async function removeContainer(name) {
  await cli(['rm', '-f', name]);
  made.containers.delete(name);
}

async function makeVolume(t, what) {
  const name = unique(what);
  const r = await cli(['volume', 'create', name]);
  assert.equal(r.code, 0, `volume create ${name}: ${r.stderr}`);
  made.volumes.add(name);
  t.defer(async () => {
    await cli(['volume', 'rm', '-f', name]);
    made.volumes.delete(name);
  });
  return name;
}

// A private config directory on this machine, mounted read-only at the same
// path in corral's container (XDG_CONFIG_HOME): corral/config.json and, if
// given, corral/policy.json. Removed when the test `t` ends (without one,
// as the process exits).
function configDir(t, config, policy) {
  const root = mkdtempSync(path.join(tmpdir(), 'corral-container-'));
  made.dirs.add(root);
  t?.defer(() => {
    rmSync(root, { recursive: true, force: true });
    made.dirs.delete(root);
  });
  mkdirSync(path.join(root, 'corral'));
  const conf = { host_servers: false, ...config };
  writeFileSync(path.join(root, 'corral/config.json'), JSON.stringify(conf, null, 2));
  if (policy) writeFileSync(path.join(root, 'corral/policy.json'), JSON.stringify(policy, null, 2));
  t?.note('config', conf);
  return { root, flags: ['-v', `${root}:${root}:ro`, '-e', `XDG_CONFIG_HOME=${root}`] };
}

// `run` arguments of corral's container: the engine's socket where corral
// looks for it, the sandbox image, then `flags` (more -v, -e, --network),
// the image and corral's own arguments. CORRAL_ENGINE is not passed: the
// path of this machine's socket means nothing in there.
function runArgs(name, { image = CORRAL, flags = [], args = [], interactive = true } = {}) {
  return [...CLI_ARGS, 'run', ...(interactive ? ['-i'] : []), '--rm', '--name', name,
    '-v', `${SOCK}:${INNER_SOCK}`, '-e', `CORRAL_IMAGE=${IMAGE}`, '-e', 'CORRAL_LOG_LEVEL=info', ...flags, image, ...args];
}

// corral in a container, started by the MCP host (the SDK's stdio client,
// through the engine's command line). With `t`, it is the test's (closed,
// then removed, as the test ends); without, a shared one (the shutdown
// test ends it). Its sandbox_status is read once: its instance names its
// sandboxes.
async function startCorral(t, label, opts = {}) {
  const name = unique(label);
  made.containers.add(name);
  const dopts = { command: KIND, args: runArgs(name, opts), capabilities: opts.capabilities, setup: opts.setup };
  let d;
  if (t) {
    t.defer(() => removeContainer(name)); // runs after the daemon's close
    d = await t.daemon(label, {}, dopts);
  } else {
    d = await new Daemon(label, {}, dopts).start();
  }
  d.container = name;
  const s = await d.status(t);
  d.instance = s.instance;
  made.instances.add(s.instance);
  return d;
}

// The host closes corral's stdin and waits for the engine's command line
// (so corral) to exit: { code, signal, ms }, or null past `ms`. Then the
// SDK's close, which has nothing left to do. (The SDK alone would send
// SIGTERM after 2 s, which an engine removing the container (--rm) under
// load can take.)
async function endHost(d, ms = 20000) {
  const proc = d.transport._process;
  const t0 = Date.now();
  const exited = proc.exitCode !== null || proc.signalCode !== null
    ? Promise.resolve({ code: proc.exitCode, signal: proc.signalCode })
    : new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  proc.stdin.end();
  const how = await withTimeout(exited, ms, 'exit').catch(() => null);
  await d.close();
  if (!how) return null;
  const took = Date.now() - t0;
  if (took > 2000) out(`# ${d.container}: exited ${took} ms after its stdin closed`);
  return { ...how, ms: took };
}

// The engine's view of a container by name: its inspect body, or null.
async function inspect(name) {
  const r = await engineRequest('GET', `/v1.41/containers/${encodeURIComponent(name)}/json`);
  return r.status === 200 ? r.body : null;
}

// Shared corrals, each started by the first test that needs it.
const shared = new Map();
function sharedCorral(key, start) {
  if (!shared.has(key)) {
    const p = start();
    p.catch(() => {});
    shared.set(key, p);
  }
  return shared.get(key);
}

// The plain container, as a host's MCP configuration would start it.
const mainCorral = () => sharedCorral('main', () => startCorral(null, 'main'));

// server-everything over streamable HTTP on this machine (its own node), on
// a free port; resolves once it listens.
async function everythingHttp() {
  const port = await freePort();
  const s = await startEverythingHttp(port);
  made.children.add(s.child);
  return { port, child: s.child, stop: () => { made.children.delete(s.child); return s.stop(); } };
}

// The bridge over HTTP, with a person asked about echo: corral:latest with
// --network host, so that 127.0.0.1 is this machine's loopback (on a
// laptop's Docker Desktop or Podman machine the URL would name
// host.docker.internal or host.containers.internal instead). The answer
// the client's elicitation handler gives is `asker.answer`.
const asker = { answer: 'accept', asked: [] };
const bridgeCorral = () => sharedCorral('bridge', async () => {
  const everything = await everythingHttp();
  shared.set('everything', everything);
  // Not tied to a test: the config lives as long as the process.
  const cfg = configDir(null, {
    servers: { everything: { type: 'http', url: `http://127.0.0.1:${everything.port}/mcp` } },
    ask_timeout_s: 20,
  }, { version: 1, servers: { everything: { ask: ['echo'] } } });
  return startCorral(null, 'bridge', {
    flags: ['--network', 'host', ...cfg.flags],
    capabilities: { elicitation: { form: {} } },
    setup: (client) => client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asker.asked.push(req.params);
      return { action: asker.answer };
    }),
  });
});

// run_python (code and `extra` arguments); its result asserted ok.
async function pyOk(t, d, code, extra = {}) {
  const r = await d.call(t, 'run_python', { code, ...extra }, { timeoutMs: 120000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'ok', `run_python is ok (error: ${clip(JSON.stringify(sc.error), 1500)}; stderr: ${clip(sc.stderr, 1500)})`);
  return r;
}

// Every process under `pid` on this host: {pid, comm, state}.
function processTree(pid) {
  const out = [];
  const walk = (p) => {
    let kids = [];
    try {
      kids = readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    } catch { return; }
    for (const k of kids) {
      try {
        const stat = readFileSync(`/proc/${k}/stat`, 'utf8');
        const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
        out.push({ pid: Number(k), comm, state: stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) });
      } catch { continue; }
      walk(k);
    }
  };
  walk(pid);
  return out;
}

// ------------------------------------------------------------------ tests

test('calls: run_python answers from corral in a container; the sandbox is hardened (no network, uid 65534, read-only root) and a sibling on the engine with corral\'s labels', async (t) => {
  const d = await mainCorral();
  t.daemons.push(d); // its stderr in the diagnostics
  const st = await d.status(t);
  // Pid 1 is corral's reaper (main.c), corral its child (whose number
  // depends on the threads the runtime's init had: runc's are Go).
  assert.ok(Number.isInteger(st.pid) && st.pid > 1, `corral is not pid 1 of its own container but under its reaper (${st.pid})`);
  const self = await inspect(d.container);
  assert.equal(self?.State?.Running, true, `corral's container ${d.container} runs on the engine`);
  t.note('corral_container', { id: self.Id.slice(0, 12), image: self.Config?.Image, mounts: self.Mounts?.map((m) => `${m.Source}:${m.Destination}`) });

  const hello = await d.call(t, 'run_python', { code: 'import sys\nprint("hello from a sibling")\nprint(6 * 7)\nprint("err", file=sys.stderr)' });
  assert.equal(hello.structuredContent.status, 'ok');
  assert.equal(hello.structuredContent.stdout, 'hello from a sibling\n42\n');
  assert.equal(hello.structuredContent.stderr, 'err\n');
  assert.match(text(hello), /hello from a sibling/, 'the text content has the output');

  // In a session, so that its sandbox stays for the engine to show.
  const probe = await d.call(t, 'run_python', { session: 'probe', timeout_s: 20, code: [
    'import errno, json, os, socket',
    ...CONNECT_PROBE,
    'res["ifaces"] = sorted(name for _, name in socket.if_nameindex())',
    'res["ids"] = [os.getuid(), os.geteuid(), os.getgid()]',
    'res["root_ro"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)',
    'try:',
    '    open("/probe", "w")',
    '    res["write_root"] = "written"',
    'except OSError as e:',
    '    res["write_root"] = errno.errorcode.get(e.errno, str(e.errno))',
    'status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)',
    'res["CapEff"] = status["CapEff"].strip()',
    'res["NoNewPrivs"] = status.get("NoNewPrivs", "?").strip()',
    // The container the code runs in, by the id in the source of its
    // /etc/hostname mount (.../containers/ID/... on both engines).
    'import re',
    'm = [l.split()[3] for l in open("/proc/self/mountinfo") if l.split()[4] == "/etc/hostname"]',
    'res["self"] = (re.findall(r"/([0-9a-f]{64})/", m[0] + "/") or ["?"])[0] if m else "?"',
    'print(json.dumps(res))',
  ].join('\n') });
  assert.equal(probe.structuredContent.status, 'ok', 'the probe ran');
  const res = JSON.parse(probe.structuredContent.stdout);
  t.note('probe', res);
  assert.notEqual(res['1.1.1.1'], 'connected', 'TCP to 1.1.1.1:53 fails');
  assert.notEqual(res['127.0.0.1'], 'connected', 'TCP to 127.0.0.1:8080 fails');
  assert.deepEqual(res.ifaces, ['lo'], 'the only interface is lo');
  assert.deepEqual(res.ids, [65534, 65534, 65534], 'uid, euid and gid are 65534');
  assert.equal(res.root_ro, true, 'the root filesystem is read-only');
  assert.equal(res.write_root, 'EROFS', 'writing / fails with EROFS');
  assert.equal(res.CapEff, '0000000000000000', 'no effective capabilities');
  assert.equal(res.NoNewPrivs, '1', 'no_new_privs is set');

  // The sandbox is a container of the engine beside corral's, not in it.
  const sb = probe.structuredContent.container;
  const mine = await corralContainers(`io.corral.instance=${d.instance}`);
  t.note('sandboxes', mine);
  const it = mine.find((c) => c.id.startsWith(sb));
  assert.ok(it, `the sandbox ${sb} is listed on the engine with io.corral.owner=corral and this corral's instance`);
  assert.equal(it.pid, String(st.pid), 'its io.corral.pid is corral\'s pid in its own container');
  assert.notEqual(it.id, self.Id, 'it is not corral\'s own container');
  const sbInfo = await inspect(sb);
  // Podman names images in full (docker.io/library/NAME).
  assert.equal(sbInfo?.Config?.Image.replace(/^(docker\.io\/library|localhost)\//, ''), IMAGE, `the sandbox runs ${IMAGE}`);
  assert.equal(res.self, sbInfo.Id, 'the code ran in that container');
  await toolCall(t, d, 'session_close', { session: 'probe' });
  assert.ok((await waitGone(sb)).done, `session_close removes the sandbox ${sb} from the engine`);
}, { timeoutMs: 90000 });

test('sessions: state kept across calls; session_save hibernates it to a volume, the container exits, and a new container on the same volume resumes it', async (t) => {
  // corral runs as root in its container: its state (the session store) is
  // under /root/.local/state, here a named volume.
  const vol = await makeVolume(t, 'state');
  const flags = ['-v', `${vol}:/root/.local/state`];
  const d1 = await startCorral(t, 'sessions-1', { flags });
  const a1 = await d1.call(t, 'run_python', { session: 'keep', code: 'x = 41\nopen("notes.txt", "w").write("kept")\nprint("set")' });
  assert.equal(a1.structuredContent.status, 'ok');
  assert.deepEqual({ name: a1.structuredContent.session?.name, state: a1.structuredContent.session?.state },
    { name: 'keep', state: 'kept' }, 'the result names the session, kept');
  const a2 = await d1.call(t, 'run_python', { session: 'keep', code: 'x += 1\nprint(x, open("notes.txt").read())' });
  assert.equal(a2.structuredContent.stdout, '42 kept\n', 'the global and the file are there in the next call');
  assert.equal(a2.structuredContent.container, a1.structuredContent.container, 'in the same sandbox');

  const saved = await toolCall(t, d1, 'session_save', { session: 'keep' });
  assert.ok(!saved.isError, JSON.stringify(saved.structuredContent));
  assert.equal(saved.structuredContent.state, 'hibernated', 'session_save hibernates it');
  assert.ok(saved.structuredContent.stored_bytes > 0, `its stored size is given (${saved.structuredContent.stored_bytes})`);
  assert.ok((await waitGone(a1.structuredContent.container)).done, 'its sandbox is removed');
  const how = await endHost(d1);
  t.note('close_1', how);
  assert.equal(how?.code, 0, `the host closed stdin: corral's container exits 0 (${JSON.stringify(how)})`);
  assert.match(d1.log, /stopping \(stdin closed\)/, 'because its stdin closed');
  const gone = await waitFor(async () => ({ done: (await inspect(d1.container)) === null }), { timeoutMs: 15000 });
  assert.ok(gone.done, `the container ${d1.container} is removed (--rm)`);

  // The same client: a stdio client is its parent program and working
  // directory, the same in every container (none, and /).
  const d2 = await startCorral(t, 'sessions-2', { flags });
  assert.notEqual(d2.instance, d1.instance, 'another corral');
  const listed = (await toolCall(t, d2, 'session_list', {})).structuredContent.sessions;
  assert.equal(listed.find((s) => s.name === 'keep')?.state, 'hibernated', `the new corral lists it hibernated (${JSON.stringify(listed)})`);
  const back = await d2.call(t, 'run_python', { session: 'keep', code: 'print(x, open("notes.txt").read())' });
  const s = back.structuredContent.session;
  assert.equal(back.structuredContent.status, 'ok', clip(back.structuredContent.stderr, 500));
  assert.equal(s?.state, 'resumed', 'its result says resumed');
  assert.deepEqual(s.not_restored, [], 'everything came back');
  assert.equal(back.structuredContent.stdout, '42 kept\n', 'the variable and the file are back');
  const closed = await toolCall(t, d2, 'session_close', { session: 'keep' });
  assert.equal(closed.structuredContent.closed, true);
}, { timeoutMs: 120000 });

test('files: write_file, list_files and read_file round trip in a session, text and bytes', async (t) => {
  const d = await mainCorral();
  t.daemons.push(d);
  const w = await toolCall(t, d, 'write_file', { session: 'files', path: 'data/in.csv', content: 'a,b\n1,2\n3,4\n' });
  assert.equal(w.isError, false, 'write_file succeeds (and opens the session)');
  assert.deepEqual(w.structuredContent, { session: 'files', path: '/workspace/data/in.csv', bytes: 12 });
  const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  const wb = await toolCall(t, d, 'write_file', { session: 'files', path: 'data/all.bin', content: bytes.toString('base64'), encoding: 'base64' });
  assert.equal(wb.structuredContent.bytes, 256, 'bytes through base64');
  const r = await pyOk(t, d, [
    'import csv, hashlib',
    'rows = list(csv.DictReader(open("data/in.csv")))',
    'total = sum(int(r["a"]) + int(r["b"]) for r in rows)',
    'open("out/total.txt", "w").write(str(total))',
    'print(total, hashlib.sha256(open("data/all.bin", "rb").read()).hexdigest())',
  ].join('\n'), { session: 'files' });
  assert.equal(r.structuredContent.stdout, `10 ${sha256(bytes)}\n`, 'the code reads both files');
  const ls = await toolCall(t, d, 'list_files', { session: 'files', recursive: true });
  const entries = Object.fromEntries(ls.structuredContent.entries.map((e) => [e.path, e]));
  t.note('entries', ls.structuredContent.entries);
  assert.equal(entries.data?.type, 'dir', 'list_files shows the directory');
  assert.equal(entries['data/in.csv']?.size, 12, 'the text file with its size');
  assert.equal(entries['data/all.bin']?.size, 256, 'the binary file with its size');
  assert.equal(entries['out/total.txt']?.size, 2, 'the file the code wrote');
  const rt = await toolCall(t, d, 'read_file', { session: 'files', path: 'out/total.txt' });
  assert.equal(rt.content[0].text, '10', 'read_file returns what the code wrote');
  assert.equal(rt.structuredContent.encoding, 'utf-8');
  const rb = await toolCall(t, d, 'read_file', { session: 'files', path: '/workspace/data/all.bin' });
  const blob = rb.content.find((c) => c.type === 'resource')?.resource;
  assert.equal(rb.structuredContent.encoding, 'base64');
  assert.deepEqual(Buffer.from(blob?.blob ?? '', 'base64'), bytes, 'every byte comes back');
  const closed = await toolCall(t, d, 'session_close', { session: 'files' });
  assert.equal(closed.structuredContent.closed, true);
});

test('progress: a call\'s output reaches the client as progress notifications before its result', async (t) => {
  const d = await mainCorral();
  t.daemons.push(d);
  const seen = [];
  let resultAt = 0;
  const r = await d.client.callTool({ name: 'run_python', arguments: {
    code: 'import time\nfor i in range(3):\n    print("step", i, flush=True)\n    time.sleep(0.4)' } },
  CallToolResultSchema, { timeout: 30000, onprogress: (e) => seen.push({ at: Date.now(), message: e.message ?? '', progress: e.progress }) });
  resultAt = Date.now();
  checkResult(r);
  t.note('progress', seen);
  assert.equal(r.structuredContent.status, 'ok');
  const steps = seen.filter((e) => /step \d/.test(e.message));
  assert.ok(steps.length >= 2, `the steps came as progress (${JSON.stringify(seen.map((e) => e.message))})`);
  assert.ok(steps[0].at < resultAt - 300, 'the first one well before the result');
  assert.ok(seen.every((e, i) => i === 0 || e.progress > seen[i - 1].progress), 'progress only grows');
});

test('jobs: a run past sync_wait_s becomes a background job; job_status while it runs, job_result with its output', async (t) => {
  const d = await mainCorral();
  t.daemons.push(d);
  const code = 'import time\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(1)\nprint("finished")';
  const first = await d.call(t, 'run_python', { code, sync_wait_s: 1, timeout_s: 60 });
  const sc = first.structuredContent;
  assert.equal(sc.status, 'running', 'the call answers "running"');
  assert.equal(first.isError, false);
  const job = sc.job_id;
  const st = await jobCall(t, d, 'job_status', { job_id: job });
  assert.equal(st.structuredContent.running, true, 'job_status: running');
  assert.match(st.structuredContent.stdout_tail, /tick 0/, 'with its newest output');
  const done = await jobCall(t, d, 'job_result', { job_id: job, wait_s: 30 }, 60000);
  checkResult(done);
  assert.equal(done.structuredContent.status, 'ok', 'job_result: the final result');
  assert.equal(done.structuredContent.stdout, 'tick 0\ntick 1\ntick 2\nfinished\n');
  assert.ok(done.structuredContent.duration_ms >= 2900, `it ran its 3 s (${done.structuredContent.duration_ms} ms)`);
  assert.equal((await jobCall(t, d, 'job_list', {})).structuredContent.jobs.find((j) => j.job_id === job)?.job_id, job,
    'job_list lists it');
});

test('tasks: a task-augmented tools/call runs as an MCP task: created, polled, its result; tasks/get and tasks/list', async (t) => {
  const d = await mainCorral();
  t.daemons.push(d);
  const tasks = d.client.experimental.tasks;
  const msgs = [];
  for await (const m of tasks.callToolStream({ name: 'run_python', arguments: { code: 'import time\ntime.sleep(1.5)\nprint(6 * 7)' } },
    CallToolResultSchema, { task: { ttl: 60000 }, timeout: 30000 }))
    msgs.push(m);
  t.note('stream', msgs.map((m) => ({ type: m.type, status: m.task?.status })));
  assert.equal(msgs[0]?.type, 'taskCreated', 'the call answers with a task first');
  const id = msgs[0].task.taskId;
  assert.equal(msgs[0].task.status, 'working');
  const last = msgs[msgs.length - 1];
  assert.equal(last.type, 'result', `the stream ends with the result (${last.type}: ${last.error?.message ?? ''})`);
  checkResult(last.result);
  assert.equal(last.result.structuredContent.stdout, '42\n', 'the run\'s output');
  assert.equal(last.result._meta?.['io.modelcontextprotocol/related-task']?.taskId, id, 'the result names its task');
  assert.equal((await tasks.getTask(id)).status, 'completed', 'tasks/get: completed');
  // A failing run: a failed task whose result says why.
  const created = await d.client.request({ method: 'tools/call', params: { name: 'run_python', arguments: { code: '1/0' }, task: {} } },
    CreateTaskResultSchema);
  const fres = await tasks.getTaskResult(created.task.taskId, CallToolResultSchema);
  assert.equal(fres.structuredContent.error?.type, 'ZeroDivisionError');
  assert.equal((await tasks.getTask(created.task.taskId)).status, 'failed');
  const listed = (await tasks.listTasks()).tasks.map((x) => x.taskId);
  assert.ok(listed.includes(id) && listed.includes(created.task.taskId), `tasks/list lists both (${listed})`);
});

test('approvals: a policy that asks puts the call to the client (elicitation): accepted, it goes on; declined, PolicyDenied', async (t) => {
  const d = await bridgeCorral();
  t.daemons.push(d);
  const code = 'import corral\ntry:\n    print(mcp_everything.echo(message="may I?").text)\nexcept corral.PolicyDenied as e:\n    print("DENIED", e)';
  const before = asker.asked.length;
  asker.answer = 'accept';
  const yes = await pyOk(t, d, code, { servers: ['everything'], timeout_s: 60 });
  assert.match(yes.structuredContent.stdout, /^Echo: may I\?$/m, 'accepted: the call went on');
  assert.equal(asker.asked.length, before + 1, 'the person was asked once');
  const q = asker.asked[before];
  assert.match(q.message, /echo/, 'the question names the tool');
  assert.match(q.message, /everything/, 'and the server');
  assert.match(q.message, /may I\?/, 'and shows the arguments');
  assert.ok(q.message.includes(yes.structuredContent.container), 'and names the sandbox');
  asker.answer = 'decline';
  try {
    const no = await pyOk(t, d, code, { servers: ['everything'], timeout_s: 60 });
    assert.match(no.structuredContent.stdout, /^DENIED .*declined/m, `declined: PolicyDenied (${no.structuredContent.stdout})`);
    assert.doesNotMatch(no.structuredContent.stdout, /Echo:/, 'and the server was not called');
    assert.equal(asker.asked.length, before + 2, 'asked again');
  } finally {
    asker.answer = 'accept';
  }
}, { timeoutMs: 90000 });

test('bridge over HTTP: sandboxed code calls server-everything on the host over streamable HTTP (corral:latest, --network host)', async (t) => {
  const d = await bridgeCorral();
  t.daemons.push(d);
  asker.answer = 'accept';
  const r = await pyOk(t, d, 'print(mcp_everything.echo(message="from a sibling").text)\nprint(mcp_everything.get_sum(a=2, b=3).text)',
    { servers: ['everything'], timeout_s: 60 });
  assert.match(r.structuredContent.stdout, /^Echo: from a sibling$/m, 'echo answered through corral\'s container');
  assert.match(r.structuredContent.stdout, /\b5\b/, 'get_sum answered');
  const ls = await toolCall(t, d, 'list_servers', {});
  const ev = ls.structuredContent.servers.find((s) => s.name === 'everything');
  assert.equal(ev?.transport, 'http', `list_servers: everything over http (${JSON.stringify(ev)})`);
  assert.equal(ev.status, 'connected');
}, { timeoutMs: 90000 });

test(skipNode('bridge over stdio: corral-node runs server-everything, named in the host\'s Cursor config mounted read-only, with its own node (Debian\'s 18) from the mounted node_modules; sandboxed code calls it; no zombie'), async (t) => {
  if (noNode) return;
  const modules = path.join(HERE, 'node_modules');
  const entry = serverEntry('server-everything');
  // The server comes from the host's own config file, mounted read-only
  // where corral looks in its container (Cursor's ~/.cursor/mcp.json, at
  // /root), as the README tells laptop users to. It is started through sh,
  // which leaves two children behind as npx and shell wrappers do: orphans
  // of corral's container, re-parented to its pid 1.
  const hostCfg = mkdtempSync(path.join(tmpdir(), 'corral-cursor-'));
  made.dirs.add(hostCfg);
  t.defer(() => { rmSync(hostCfg, { recursive: true, force: true }); made.dirs.delete(hostCfg); });
  writeFileSync(path.join(hostCfg, 'mcp.json'), JSON.stringify({ mcpServers: { everything: { command: 'sh',
    args: ['-c', `(sleep 0.3 &); (sleep 0.3 &); exec node ${entry} stdio`] } } }));
  const d = await startCorral(t, 'node', { image: CORRAL_NODE,
    flags: ['-v', `${modules}:${modules}:ro`, '-v', `${path.join(hostCfg, 'mcp.json')}:/root/.cursor/mcp.json:ro`] });
  const r = await d.call(t, 'run_python', {
    code: 'print(mcp_everything.echo(message="over stdio").text)\nprint(mcp_everything.get_sum(a=20, b=22).text)',
    servers: ['everything'], timeout_s: 60,
  }, { timeoutMs: 120000 });
  const sc = r.structuredContent;
  // Node 18 is what Debian bookworm ships: if server-everything needs a
  // newer one, corral's log says how it died.
  assert.equal(sc.status, 'ok', `run_python is ok (error: ${clip(JSON.stringify(sc.error), 1500)}; stderr: ${clip(sc.stderr, 800)}; corral: ${clip(d.tail(1500), 1500)})`);
  assert.match(sc.stdout, /^Echo: over stdio$/m, 'echo answered from corral\'s container');
  assert.match(sc.stdout, /\b42\b/, 'get_sum answered');
  const ls = await toolCall(t, d, 'list_servers', {});
  const ev = ls.structuredContent.servers.find((s) => s.name === 'everything');
  t.note('servers', ls.structuredContent.servers);
  assert.equal(ev?.transport, 'stdio');
  assert.match(JSON.stringify(ev), /\.cursor\/mcp\.json/, 'it came from the mounted Cursor file');
  assert.equal(ev.status, 'connected', JSON.stringify(ev));
  const node = await cli(['exec', d.container, 'node', '--version']);
  t.note('node', node);
  assert.match(node.stdout, /^v18\./, `the server ran on the image's node, Debian's 18 (${node.stdout.trim()})`);
  // Pid 1 of corral's container reaps them: no zombie in its process tree
  // (read from this host's /proc: the engine is local).
  const init = (await inspect(d.container))?.State?.Pid;
  assert.ok(init > 0, 'corral\'s container has a pid on this host');
  let tree = [];
  await waitFor(() => {
    tree = processTree(init);
    return { done: tree.length > 0 && !tree.some((p) => p.state === 'Z') };
  }, { timeoutMs: 5000 });
  t.note('process_tree', tree);
  assert.deepEqual(tree.filter((p) => p.state === 'Z'), [], 'no zombie under corral\'s pid 1');
  assert.ok(tree.some((p) => p.comm === 'corral'), 'corral runs under it');
}, { timeoutMs: 120000 });

test('mounts: a host path the engine sees, never mounted into corral\'s container, reaches the sandbox read-only; one Docker lacks fails with its reason (Podman makes it, empty)', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'corral-mount-'));
  t.defer(() => rmSync(dir, { recursive: true, force: true }));
  chmodSync(dir, 0o755); // the sandbox's uid 65534 reads it
  writeFileSync(path.join(dir, 'data.csv'), 'a,b\n1,2\n', { mode: 0o644 });
  const d = await startCorral(t, 'mounts', { flags: ['-e', `CORRAL_MOUNTS=${dir}:/data`] });
  assert.match(d.log, /is a path on the engine's machine \(corral runs in a container\)/, 'corral says whose path it is');
  const r = await pyOk(t, d, 'import os\nprint(open("/data/data.csv").read(), end="")\n'
    + 'try:\n    open("/data/new", "w")\nexcept OSError as e:\n    print("write:", e.errno)');
  assert.equal(r.structuredContent.stdout, 'a,b\n1,2\nwrite: 30\n', 'read, and read-only (EROFS)');
  const gone = path.join(dir, 'missing');
  const d2 = await startCorral(t, 'mounts-missing', { flags: ['-e', `CORRAL_MOUNTS=${gone}:/data`] });
  const bad = await d2.call(t, 'run_python', { code: 'import os\nprint(os.listdir("/data"))' }, { timeoutMs: 60000 });
  t.note('missing', bad.structuredContent);
  if (KIND === 'docker') {
    assert.equal(bad.structuredContent.status, 'engine_error', 'a path the engine lacks: the sandbox is not made');
    assert.match(JSON.stringify(bad.structuredContent), new RegExp(gone.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')),
      'and the error names the path, as the engine gave it');
  } else {
    // Podman makes a missing bind source, empty, as `podman run -v` does
    // (README says so): the sandbox sees an empty directory.
    assert.equal(bad.structuredContent.stdout, '[]\n', `Podman made ${gone} empty on its machine`);
    assert.ok(existsSync(gone), 'there it is');
  }
}, { timeoutMs: 120000 });

test('resources: a session\'s out/ files are listed and read as resources', async (t) => {
  const d = await mainCorral();
  t.daemons.push(d);
  await pyOk(t, d, 'open("out/report.csv", "w").write("a,b\\n1,2\\n")\nopen("out/data.bin", "wb").write(bytes(range(256)))\nopen("secret.txt", "w").write("x")',
    { session: 'res' });
  const list = (await d.client.listResources()).resources.filter((r) => r.uri.startsWith('corral://session/res/'));
  t.note('resources', list);
  assert.deepEqual(list.map((r) => r.uri).sort(), ['corral://session/res/out/data.bin', 'corral://session/res/out/report.csv'],
    'the files of out/, nothing else of /workspace');
  const csv = (await d.client.readResource({ uri: 'corral://session/res/out/report.csv' })).contents;
  assert.deepEqual(csv, [{ uri: 'corral://session/res/out/report.csv', mimeType: 'text/csv', text: 'a,b\n1,2\n' }]);
  const bin = (await d.client.readResource({ uri: 'corral://session/res/out/data.bin' })).contents[0];
  assert.deepEqual(Buffer.from(bin.blob, 'base64'), Buffer.from(Array.from({ length: 256 }, (_, i) => i)), 'binary as a base64 blob, exact');
  await toolCall(t, d, 'session_close', { session: 'res' });
  const after = (await d.client.listResources()).resources.filter((r) => r.uri.startsWith('corral://session/res/'));
  assert.deepEqual(after, [], 'a closed session\'s files are gone');
});

test('doctor: in a container it says so (its container id), on Podman that the engine reads the profile; an npx server fails in corral:latest with advice naming corral-node', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'corral-doctor-'));
  t.defer(() => rmSync(dir, { recursive: true, force: true }));
  const cidfile = path.join(dir, 'cid');
  const name = unique('doctor');
  made.containers.add(name);
  t.defer(() => removeContainer(name));
  const plain = await run(KIND, [...runArgs(name, { interactive: false, flags: ['--cidfile', cidfile], args: ['doctor'] })], { timeoutMs: 120000 });
  t.note('doctor', plain);
  const id = readFileSync(cidfile, 'utf8').trim();
  assert.match(plain.stdout, new RegExp(`^note container: corral runs in container ${id.slice(0, 12)}; its sandboxes are siblings on the engine at ${INNER_SOCK}$`, 'm'),
    'doctor says it runs in its container (the id the engine gave it)');
  assert.match(plain.stdout, /^ok {3}sandbox: a hardened sandbox ran Python as uid 65534$/m, 'and that a sandbox ran');
  if (KIND === 'podman')
    assert.match(plain.stdout, /^ok {3}container paths: Podman reads corral's seccomp profile/m, 'Podman can read the profile');
  else
    assert.doesNotMatch(plain.stdout, /container paths/, 'Docker takes the profile itself: no such check');
  assert.doesNotMatch(plain.stdout, /^FAIL/m, 'nothing fails');

  const cfg = configDir(t, { servers: { npxsrv: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-everything'] } } });
  const doctor = async (label, image) => {
    const n = unique(label);
    made.containers.add(n);
    t.defer(() => removeContainer(n));
    const r = await run(KIND, runArgs(n, { image, interactive: false, flags: cfg.flags, args: ['doctor'] }), { timeoutMs: 120000 });
    t.note(label, r);
    return r;
  };
  const npx = await doctor('doctor-npx', CORRAL);
  assert.match(npx.stdout, /^FAIL server npxsrv: its command npx is not in corral's container: stdio servers run there\n {5}fix: run the corral-node image, which has Node and npm$/m,
    'the npx server fails, with advice naming corral-node');
  assert.equal(npx.code, 1, 'doctor exits 1');
  if (!noNode) {
    const node = await doctor('doctor-node', CORRAL_NODE);
    assert.match(node.stdout, /^note container: corral runs in container/m);
    assert.match(node.stdout, /^note server npxsrv: from corral config$/m, 'the server is configured there too');
    assert.doesNotMatch(node.stdout, /^FAIL server npxsrv/m, 'in corral-node, npx is there: no complaint');
  }
}, { timeoutMs: 120000 });

test('seccomp: with a tmpfs on /tmp, on Podman a call fails closed saying the engine cannot read the profile, and no sandbox is made (Docker takes the profile inline and runs it)', async (t) => {
  const d = await startCorral(t, 'tmpfs', { flags: ['--tmpfs', '/tmp'] });
  const r = await d.call(t, 'run_python', { code: 'print("ran")' });
  const sc = r.structuredContent;
  if (KIND === 'docker') {
    assert.equal(sc.status, 'ok', `Docker runs it (${JSON.stringify(sc.error)})`);
    assert.equal(sc.stdout, 'ran\n');
    return;
  }
  assert.equal(sc.status, 'engine_error', `the call fails (${JSON.stringify(sc)})`);
  assert.equal(r.isError, true);
  assert.equal(sc.stdout, '', 'nothing ran');
  assert.match(sc.error.message, /Podman takes the seccomp profile as a path on its machine, and /, `it says why: ${sc.error.message}`);
  assert.match(text(r), /seccomp profile/, 'the text says it too');
  const again = await d.call(t, 'run_python', { code: 'print("ran")' });
  assert.equal(again.structuredContent.status, 'engine_error', 'every call, not only the first');
  const cs = await corralContainers(`io.corral.instance=${d.instance}`);
  assert.deepEqual(cs, [], 'no sandbox was created without the profile');
});

test('service: corral serve in a container (Podman: published on 127.0.0.1 only; Docker here: --network host; the token on a volume): the SDK\'s streamable HTTP client with the token runs code, without it 401, a foreign Host 403; SIGTERM stops it cleanly', async (t) => {
  const vol = await makeVolume(t, 'token');
  const port = await freePort();
  const name = unique('serve');
  made.containers.add(name);
  t.defer(() => removeContainer(name));
  // Podman: the README's form, published on the host's loopback only, corral
  // listening on all of its own namespace's addresses (http_public, with the
  // token). Docker here runs without a bridge, so it cannot publish: it
  // shares the host's network and listens on its loopback.
  const published = KIND === 'podman';
  const started = await run(KIND, runArgs(name, { interactive: false,
    flags: published
      ? ['-d', '-p', `127.0.0.1:${port}:${port}`, '-e', 'CORRAL_HTTP_PUBLIC=true', '-e', 'CORRAL_HTTP_HOSTS=localhost',
        '-v', `${vol}:/root/.config/corral`]
      : ['-d', '--network', 'host', '-v', `${vol}:/root/.config/corral`],
    args: ['serve', '--listen', `tcp:${published ? '0.0.0.0' : '127.0.0.1'}:${port}`] }));
  assert.equal(started.code, 0, `the service container starts: ${started.stderr}`);
  const logs = async () => { const r = await cli(['logs', name]); return r.stdout + r.stderr; };
  const up = await waitFor(async () => {
    const log = await logs();
    return { done: /listening on tcp:/.test(log) || (await inspect(name)) === null, log };
  }, { timeoutMs: 20000, intervalMs: 200 });
  t.note('service_log', up.log);
  assert.match(up.log, new RegExp(`listening on tcp:${published ? '0\\.0\\.0\\.0' : '127\\.0\\.0\\.1'}:${port}`),
    published ? 'it listens in its own namespace, published on the host\'s loopback' : 'it listens on the host\'s loopback');

  // The token corral made on first start, from the volume.
  let token = null;
  const vi = await cli(['volume', 'inspect', '--format', '{{.Mountpoint}}', vol]);
  const file = path.join(vi.stdout.trim(), 'token');
  if (vi.code === 0 && existsSync(file)) token = readFileSync(file, 'utf8').trim();
  else {
    const r = await cli(['run', '--rm', '--user', '0', '--entrypoint', 'python3', '-v', `${vol}:/v:ro`, IMAGE, '-c', 'print(open("/v/token").read())']);
    token = r.stdout.trim();
  }
  assert.ok(token && token.length >= 32, `a token is in the volume (${token?.length} characters)`);

  const url = `http://127.0.0.1:${port}/mcp`;
  const c = new Client({ name: 'container-http', version: '1' });
  await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  let instance;
  try {
    const r = await c.callTool({ name: 'run_python', arguments: { code: 'print(sum(range(10)))' } }, CallToolResultSchema, { timeout: 60000 });
    checkResult(r);
    assert.equal(r.structuredContent.status, 'ok', JSON.stringify(r.structuredContent));
    assert.equal(r.structuredContent.stdout, '45\n');
    const st = await c.callTool({ name: 'sandbox_status', arguments: {} }, CallToolResultSchema, { timeout: 15000 });
    instance = st.structuredContent.instance;
    made.instances.add(instance);
  } finally {
    await c.close().catch(() => {});
  }

  const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } };
  const post = (headers) => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/mcp', method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers } }, (res) => {
      let body = '';
      res.on('data', (b) => { body += b; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(INIT));
  });
  const no = await post({});
  assert.equal(no.status, 401, `no token: 401 (${no.body})`);
  assert.match(no.headers['www-authenticate'] ?? '', /Bearer/);
  const wrong = await post({ Authorization: `Bearer ${token}x` });
  assert.equal(wrong.status, 401, 'a wrong token: 401');
  // http_hosts naming a loopback name: another Host is refused even with
  // the token (DNS rebinding), on both ways of serving.
  const rebound = await post({ Authorization: `Bearer ${token}`, Host: `evil.example:${port}` });
  assert.equal(rebound.status, 403, `a foreign Host: 403 (${rebound.body})`);

  // SIGTERM (docker stop): it stops by itself, well within stop's 30 s.
  const waited = cli(['wait', name], { timeoutMs: 60000 });
  const t0 = Date.now();
  const stop = await cli(['stop', '-t', '30', name]);
  assert.equal(stop.code, 0, `stop: ${stop.stderr}`);
  const ms = Date.now() - t0;
  const w = await waited;
  t.note('stopped', { ms, wait: w, log: await logs().catch(() => '') });
  assert.ok(ms < 25000, `it stopped on SIGTERM, not on the KILL after 30 s (${ms} ms)`);
  assert.equal(w.code, 0, `wait: ${w.stderr}`);
  assert.equal(w.stdout.trim(), '0', 'and exited 0');
  const left = await waitFor(async () => ({ done: (await corralContainers(`io.corral.instance=${instance}`)).length === 0 }), { timeoutMs: 15000 });
  assert.ok(left.done, 'its sandboxes are removed');
}, { timeoutMs: 120000 });

test('gVisor: corral in a container runs its sandboxes under corral-runsc where the engine has it (Docker takes the runtime per container)', async (t) => {
  const info = await engineRequest('GET', '/v1.41/info');
  const runtimes = Object.keys(info.body?.Runtimes || {});
  if (KIND !== 'docker' || !runtimes.includes('corral-runsc')) {
    t.note('skipped', `${KIND} with runtimes ${runtimes.join(', ')}: Podman takes gVisor per service (tests/run's runsc suites)`);
    return;
  }
  const d = await startCorral(t, 'runsc', { flags: ['-e', 'CORRAL_RUNTIME=runsc'] });
  const r = await pyOk(t, d, 'import platform\nprint(platform.release())', { session: 'g' });
  const sb = r.structuredContent.container;
  const it = await inspect(sb);
  t.note('sandbox', { runtime: it?.HostConfig?.Runtime, release: r.structuredContent.stdout });
  assert.equal(it?.HostConfig?.Runtime, 'corral-runsc', 'the sandbox runs under gVisor');
  // gVisor's own kernel answers uname, not the host's.
  assert.notEqual(r.structuredContent.stdout.trim(), (await run('uname', ['-r'])).stdout.trim(), 'its kernel is gVisor\'s');
}, { timeoutMs: 120000 });

test('sweep: what a killed corral in a container left is removed by the next one, once it has ended', async (t) => {
  const a = await startCorral(t, 'killed');
  const r = await pyOk(t, a, 'x = 1', { session: 'left' });
  assert.equal(r.structuredContent.status, 'ok');
  // Its pool full and quiet, so that every sandbox it holds has started
  // (one killed mid-create stays "created": swept only well past the
  // start bound).
  const quiet = await waitPool(t, a, (p) => p.ready >= p.min && p.starting === 0);
  assert.ok(quiet.done, `its pool fills (${JSON.stringify(quiet.s?.pool)})`);
  const left = (await corralContainers(`io.corral.instance=${a.instance}`)).map((c) => c.id);
  t.note('left', left);
  assert.ok(left.length >= 2, 'it holds sandboxes (its session and its pool)');
  // Its pid namespace as the labels name it carries its container's id: the
  // kernel gives a freed namespace's number to a later container, whose
  // corral (at the same pid: runc starts them alike) would otherwise take
  // these for its own. Seen once here before the id was added.
  const aId = (await inspect(a.container))?.Id;
  const ns = (await inspect(left[0]))?.Config?.Labels?.['io.corral.pidns'];
  assert.match(ns ?? '', new RegExp(`^pid:\\[\\d+\\]@${aId?.slice(0, 12)}$`), `the pidns label names the container (${ns})`);
  // SIGKILL to its pid 1: no stop, no removal of its sandboxes. (Podman
  // may answer an error as --rm removes the container under the kill.)
  const killed = await cli(['kill', '--signal', 'KILL', a.container]);
  t.note('kill', killed);
  assert.ok(killed.code === 0 || (await inspect(a.container)) === null || !(await inspect(a.container))?.State?.Running,
    `killed: ${killed.stderr}`);
  a.closed = true; // the SDK's close has nothing to do
  // Their stdin was corral's attach stream: they end by themselves. The
  // next corral in a container (its own host name, its own pid namespace)
  // sweeps them as it starts, once they have ended.
  const ended = await waitFor(async () => {
    const cs = await corralContainers(`io.corral.instance=${a.instance}`);
    return { done: cs.every((c) => c.state !== 'running'), cs: brief(cs) };
  }, { timeoutMs: 20000, intervalMs: 250 });
  assert.ok(ended.done, `they end without corral (${JSON.stringify(ended.cs)})`);
  const b = await startCorral(t, 'sweeper');
  const gone = await waitFor(async () => {
    const still = (await corralContainers(`io.corral.instance=${a.instance}`)).map((c) => c.id);
    return { done: still.length === 0, still };
  }, { timeoutMs: 30000, intervalMs: 500 });
  t.note('sweeper_log', b.tail(2000));
  assert.ok(gone.done, `the killed corral's sandboxes are removed (${JSON.stringify(gone.still)})`);
}, { timeoutMs: 90000 });

test('shutdown: the shared corrals end when their host closes stdin; their containers go (--rm), and no sandbox of any corral of this suite is left', async (t) => {
  for (const key of ['main', 'bridge']) {
    if (!shared.has(key)) continue;
    const d = await shared.get(key);
    t.daemons.push(d);
    t.defer(() => removeContainer(d.container));
    const how = await endHost(d);
    t.note(`close_${key}`, how);
    assert.equal(how?.code, 0, `${key}: corral's container exits 0 when the host closes stdin (${JSON.stringify(how)})`);
    const gone = await waitFor(async () => ({ done: (await inspect(d.container)) === null }), { timeoutMs: 15000 });
    assert.ok(gone.done, `${key}: its container ${d.container} is removed`);
  }
  const everything = shared.get('everything');
  if (everything) await everything.stop();
  const left = await waitFor(async () => {
    const cs = [];
    for (const i of made.instances) cs.push(...await corralContainers(`io.corral.instance=${i}`));
    return { done: cs.length === 0, cs };
  }, { timeoutMs: 15000 });
  assert.ok(left.done, `no sandbox left: ${JSON.stringify(left.cs)}`);
}, { timeoutMs: 60000 });

await runSuite();
