// The network on a leash: sandboxed code granted hosts with `network`
// reaches them through corral's proxy (HTTP_PROXY/HTTPS_PROXY in the
// sandbox), under the policy's network section, with credentials added
// outside the sandbox by network_routes. The servers are this file's own,
// on the host's loopback (lib/netfixtures.mjs): an HTTPS server with a test
// CA the code is told to trust, and a PyPI "simple" index serving a wheel
// built at test time. network_resolve maps their names to 127.0.0.1, and
// the test policy allows that address explicitly.
//
//   node run.mjs network        (network:)
//
// One corral on the data image (pip, curl) serves most tests, with an
// elicitation handler whose answer the ask test sets; the address test and
// the limits test have corrals of their own (another policy, other limits).

import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { bridgeSetup } from './lib/bridge.mjs';
import { clip, corralEnv, Daemon, MiB, sha256, startCall, startService, test, waitFor } from './lib/harness.mjs';
import { BIG_BYTES, bigBody, buildWheel, makeCerts, NAMES, netPrelude, startNetServer } from './lib/netfixtures.mjs';

const DATA_IMAGE = 'corral-data:latest';

// ---------------------------------------------------------------- shared fixtures

// What lives for the whole file: a directory (certificates, wheel), the
// HTTPS server, and the shared corral. Made by the first test that needs
// them; the directory goes when the process exits, the corral is closed by
// cleanup.test.mjs with the other open daemons.
let shared = null;
const atExit = [];
process.on('exit', () => { for (const fn of atExit) try { fn(); } catch { /* best effort */ } });

// bridgeSetup wants a test context; shared set-ups live past the test that
// makes them, so theirs removes the directory at exit.
const keeper = { defer: (fn) => atExit.push(fn), note: () => {} };

function fixtures() {
  if (!shared) {
    shared = (async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'corral-net-'));
      atExit.push(() => rmSync(dir, { recursive: true, force: true }));
      const certs = makeCerts(dir);
      const mark = randomBytes(8).toString('hex');
      const wheel = buildWheel(dir, mark);
      bigBody();
      const srv = await startNetServer({ certs, wheel });
      srv.server.unref();
      return { dir, certs, wheel, mark, srv, port: srv.port };
    })();
  }
  return shared;
}

const resolveAll = (names = NAMES) => Object.fromEntries(names.map((n) => [n, '127.0.0.1']));

// The shared corral: every name allowed but ask.test (asked) and
// denied.test (denied), localhost too (the one name not in
// network_resolve: corral looks it up), 127.0.0.1 allowed as an address, 169.254.169.254
// allowed as a name (so that only the address check can refuse it), a route
// to api.test carrying $TOKEN, and the test index as pip_index.
const TOKEN = `tok-${randomBytes(18).toString('hex')}`;
const ask = { answer: 'accept', asked: [] };
let mainNet = null;
function netDaemon() {
  if (!mainNet) {
    mainNet = (async () => {
      const f = await fixtures();
      const P = f.port;
      const b = bridgeSetup(keeper, {
        policy: {
          version: 1,
          network: {
            allow: ['files.test', 'pypi.test', 'api.test', 'other.test', '169.254.169.254', 'localhost'],
            ask: ['ask.test'],
            deny: ['denied.test'],
            addresses: ['127.0.0.1'],
          },
        },
        config: {
          network_resolve: resolveAll(),
          network_routes: {
            [`https://api.test:${P}`]: { headers: { Authorization: 'Bearer ${TOKEN}' }, ca_file: f.certs.caFile },
          },
          pip_index: `https://pypi.test:${P}/simple/`,
        },
      });
      const d = new Daemon('net', { ...b.env, TOKEN, CORRAL_IMAGE: DATA_IMAGE, CORRAL_TIMEOUT_S: '60' }, {
        capabilities: { elicitation: { form: {} } },
        setup: (client) => client.setRequestHandler(ElicitRequestSchema, async (req) => {
          ask.asked.push(req.params);
          return { action: ask.answer };
        }),
      });
      await d.start();
      return { d, b, f, P };
    })();
  }
  return mainNet;
}

// The shared corral for test t: its stderr goes into t's diagnostics.
async function shared_(t) {
  const s = await netDaemon();
  if (!t.daemons.includes(s.d)) t.daemons.push(s.d);
  t.note('server_port', s.P);
  return s;
}

// ---------------------------------------------------------------- code helpers

// run_python with the prelude; the parsed rec() values.
async function netRun(t, d, f, body, args = {}, { expectOk = true, timeoutMs = 180000 } = {}) {
  const a = { code: `${netPrelude(f.certs.caPem, f.port)}\n${body}\ndone()\n`, timeout_s: 120, ...args };
  const r = await d.call(t, 'run_python', a, { timeoutMs });
  const sc = r.structuredContent;
  if (expectOk)
    assert.equal(sc.status, 'ok', `run_python is ok (error: ${clip(JSON.stringify(sc.error), 1500)}; stderr: ${clip(sc.stderr, 2500)})`);
  const line = sc.stdout.split('\n').find((l) => l.startsWith('@@RESULT@@'));
  if (expectOk) assert.ok(line, `the code printed its result line (stdout: ${clip(sc.stdout, 800)})`);
  const out = line ? JSON.parse(line.slice('@@RESULT@@'.length)) : null;
  t.note('code_result', out && clip(JSON.stringify(out), 3000));
  return { r, sc, out };
}

// ---------------------------------------------------------------- audit

function networkAudit(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => {
    try { return JSON.parse(l); } catch { return null; }
  }).filter((l) => l && l.event === 'network');
}

// The audit line contract of a connection.
function checkNetLine(l) {
  const what = `network audit line ${clip(JSON.stringify(l), 500)}`;
  assert.match(String(l.sandbox), /^[0-9a-f]{12}$/, `${what}: sandbox is a short container id`);
  assert.ok(l.run !== undefined && l.run !== null, `${what}: names its run`);
  assert.ok('client' in l, `${what}: has client`);
  assert.equal(typeof l.host, 'string', `${what}: host`);
  assert.ok(Number.isInteger(l.port) && l.port > 0, `${what}: port`);
  assert.ok(l.address === null || typeof l.address === 'string', `${what}: address is a string or null`);
  assert.ok(['allowed', 'accepted', 'denied'].includes(l.decision), `${what}: decision`);
  assert.ok(l.reason === null || typeof l.reason === 'string', `${what}: reason is a string or null`);
  if (l.decision === 'denied') assert.ok(l.reason, `${what}: a denial says why`);
  assert.ok(l.route === null || /^https:\/\//.test(l.route), `${what}: route is null or an https origin`);
  for (const k of ['bytes_out', 'bytes_in', 'duration_ms'])
    assert.ok(Number.isInteger(l[k]) && l[k] >= 0, `${what}: ${k} is a non-negative integer`);
}

// Waits (bounded) until the audit log holds lines matching pred for at
// least `n` connections: a connection is written when it ends.
async function auditLines(b, pred, n, timeoutMs = 10000) {
  const w = await waitFor(() => {
    const ls = networkAudit(b.audit).filter(pred);
    return { done: ls.length >= n, ls };
  }, { timeoutMs, intervalMs: 100 });
  return w.ls;
}

// The 403 the proxy answers for a refusal, with its one-line reason.
function assertRefused(a, re, what) {
  assert.equal(a.status, 403, `${what}: 403 (got ${clip(JSON.stringify(a), 600)})`);
  assert.match(a.body, /^corral: [^\n]+\n$/, `${what}: the body is one line "corral: <reason>"`);
  assert.match(a.headers['content-type'] ?? '', /^text\/plain/, `${what}: text/plain`);
  assert.equal(Number(a.headers['content-length']), Buffer.byteLength(a.body), `${what}: Content-Length`);
  if (re) assert.match(a.body, re, `${what}: the reason`);
}

// ---------------------------------------------------------------- tests

test('network: pip install of the test wheel from the index in a session; the next call imports it; a later call may not change the hosts', async (t) => {
  const { d, f, P } = await shared_(t);
  const before = f.srv.log.length;
  const first = await netRun(t, d, f, String.raw`
rec("env", {k: os.environ.get(k) for k in ["HTTPS_PROXY", "http_proxy", "NO_PROXY", "PIP_USER", "PYTHONUSERBASE",
    "PIP_INDEX_URL", "PIP_CACHE_DIR"]})
r = subprocess.run(["pip", "install", "--cert", CA, "corral-testpkg"], capture_output=True, text=True, timeout=100)
rec("rc", r.returncode)
rec("pip", (r.stdout + r.stderr)[-3000:])
import corral_testpkg
rec("now", [corral_testpkg.MARK, corral_testpkg.__file__])`, { session: 'net-pip', network: [`pypi.test:${P}`] });
  const o = first.out;
  assert.equal(o.rc, 0, `pip install succeeded: ${o.pip}`);
  assert.match(o.env.HTTPS_PROXY ?? '', /^http:\/\/127\.0\.0\.1:\d+\/?$/, 'HTTPS_PROXY is the sandbox\'s loopback proxy');
  assert.equal(o.env.http_proxy, o.env.HTTPS_PROXY, 'both cases are set');
  assert.match(o.env.NO_PROXY ?? '', /localhost/, 'NO_PROXY keeps loopback direct');
  assert.equal(o.env.PIP_INDEX_URL, `https://pypi.test:${P}/simple/`, 'pip_index becomes PIP_INDEX_URL');
  assert.equal(o.env.PYTHONUSERBASE, '/workspace/.local');
  assert.equal(o.now[0], f.mark, 'the package imports at once, and it is this run\'s wheel');
  assert.match(o.now[1], /^\/workspace\/\.local\/lib\/python3\.\d+\/site-packages\/corral_testpkg\/__init__\.py$/,
    'installed in the user site under /workspace');
  const got = f.srv.log.slice(before);
  t.note('server_requests', got);
  assert.ok(got.some((x) => /^\/simple\/corral[-_.]testpkg\/?$/.test(x.url) && x.host === `pypi.test:${P}`),
    'pip read the index page through the proxy, for pypi.test');
  assert.ok(got.some((x) => x.url === `/packages/${f.wheel.name}`), 'and fetched the wheel');

  const next = await netRun(t, d, f, `
import corral_testpkg
rec("later", [corral_testpkg.MARK, corral_testpkg.ANSWER])`, { session: 'net-pip' });
  assert.deepEqual(next.out.later, [f.mark, 42], 'the next call of the session imports it');
  // The session's way out is its first call's: another list is refused.
  const other = await d.call(t, 'run_python', { session: 'net-pip', code: 'print(1)', network: [`files.test:${P}`] });
  assert.notEqual(other.structuredContent.status, 'ok', 'a later call may not name other hosts');
  assert.match(JSON.stringify(other.structuredContent.error), /network/, 'and is told why');
  await d.client.callTool({ name: 'session_close', arguments: { session: 'net-pip' } });
}, { timeoutMs: 240000 });

test('network: urllib (run_python) and curl (run_shell) download 50 MB through the proxy, the sha256 intact', async (t) => {
  const { d, b, f, P } = await shared_(t);
  const url = `https://files.test:${P}/big`;
  const r = await netRun(t, d, f, String.raw`
t0 = time.monotonic()
h, n = hashlib.sha256(), 0
with urllib.request.urlopen(${JSON.stringify(url)}, context=CTX, timeout=60) as resp:
    rec("status", resp.status)
    while True:
        c = resp.read(1 << 20)
        if not c:
            break
        h.update(c)
        n += len(c)
rec("urllib", [n, h.hexdigest(), round(time.monotonic() - t0, 3)])`, { network: [`files.test:${P}`] });
  // run_shell: curl, its bytes hashed by sha256sum, its count and exit status on stderr.
  const sh = await d.call(t, 'run_shell', {
    network: [`files.test:${P}`], timeout_s: 120,
    command: `cat > /tmp/ca.pem <<'EOF'\n${f.certs.caPem}EOF\n` +
      `{ curl -sS --fail --cacert /tmp/ca.pem -w '%{stderr}size %{size_download}\\n' ${url}; echo "curl exit $?" >&2; } | sha256sum`,
  }, { timeoutMs: 180000 });
  t.note('shell', { stdout: sh.structuredContent.stdout, stderr: clip(sh.structuredContent.stderr, 1000) });
  const { sha256 } = bigBody();
  const o = r.out;
  assert.equal(o.status, 200);
  assert.deepEqual(o.urllib.slice(0, 2), [BIG_BYTES, sha256], 'urllib: every byte, in order');
  assert.equal(sh.structuredContent.status, 'ok', 'run_shell with curl is ok');
  assert.equal(sh.structuredContent.stdout.split(/\s/)[0], sha256, 'curl: every byte, in order');
  assert.match(sh.structuredContent.stderr, /^curl exit 0$/m, 'curl exits 0');
  assert.match(sh.structuredContent.stderr, new RegExp(`^size ${BIG_BYTES}$`, 'm'), 'curl: the whole length');
  t.note('urllib_seconds', o.urllib[2]);
  const lines = [];
  for (const c of [r.sc.container, sh.structuredContent.container])
    lines.push(...await auditLines(b, (l) => l.host === 'files.test' && l.sandbox === c, 1));
  t.note('audit', lines);
  assert.equal(lines.length, 2, 'one audit line per connection');
  for (const l of lines) {
    checkNetLine(l);
    assert.equal(l.port, P);
    assert.equal(l.decision, 'allowed');
    assert.equal(l.address, '127.0.0.1', 'the address corral connected to');
    assert.equal(l.route, null);
    assert.ok(l.bytes_in >= BIG_BYTES, `bytes_in counts the body (${l.bytes_in})`);
  }
}, { timeoutMs: 240000 });

test('network: a host outside the grant gets 403 with the reason at once; a name resolving to 127.0.0.1 without the address allowed, and 169.254.169.254, are refused', async (t) => {
  const { d, b, f, P } = await shared_(t);
  const seenBefore = f.srv.log.length;
  const r = await netRun(t, d, f, String.raw`
rec("outside", refused("other.test", P))
rec("denied", refused("denied.test", P))
rec("metadata", refused("169.254.169.254", 80, "/latest/meta-data/"))
t0 = time.monotonic()
try:
    urllib.request.urlopen("https://other.test:%d/headers" % P, context=CTX, timeout=30)
    rec("urllib", "no error")
except Exception as e:
    rec("urllib", [type(e).__name__, str(e), round((time.monotonic() - t0) * 1000)])
t0 = time.monotonic()
c = subprocess.run(["curl", "-sS", "--cacert", CA, "https://other.test:%d/headers" % P], capture_output=True, text=True)
rec("curl", [c.returncode, c.stderr.strip(), round((time.monotonic() - t0) * 1000)])`,
  { network: [`files.test:${P}`, `denied.test:${P}`, '169.254.169.254'] });
  const o = r.out;
  assertRefused(o.outside.connect, /other\.test/, 'CONNECT to a host outside the grant');
  assertRefused(o.outside.get, /other\.test/, 'GET of a host outside the grant');
  for (const a of [o.outside.connect, o.outside.get]) assert.ok(a.ms < 2000, `answered at once (${a.ms} ms)`);
  assertRefused(o.denied.connect, /denied\.test/, 'CONNECT to a host the policy denies');
  assertRefused(o.metadata.connect, /169\.254\.169\.254/, 'CONNECT to the metadata address');
  assertRefused(o.metadata.get, /169\.254\.169\.254/, 'GET of the metadata address');
  assert.match(String(o.urllib), /403/, 'urllib\'s error carries the 403');
  assert.equal(o.curl[0], 56, `curl: the tunnel failed (${o.curl[1]})`);
  assert.match(o.curl[1], /403/);
  assert.ok(o.curl[2] < 2000 && o.urllib[2] < 2000, 'both fail at once');
  assert.equal(f.srv.log.slice(seenBefore).length, 0, 'no request reached the server');

  // Lines per connection, each denied with its reason.
  const lines = await auditLines(b, (l) => l.sandbox === r.sc.container, 8);
  t.note('audit', lines);
  for (const l of lines) {
    checkNetLine(l);
    assert.equal(l.decision, 'denied');
    assert.equal(l.bytes_in, 0, 'nothing came in');
  }
  assert.ok(lines.some((l) => l.host === '169.254.169.254' && l.address === '169.254.169.254'),
    'the metadata refusal names the address it refused');

  // A corral whose policy allows files.test but names no address: the name
  // resolves to 127.0.0.1, which is refused after resolution.
  const nb = bridgeSetup(t, {
    policy: { version: 1, network: { allow: ['files.test'] } },
    config: { network_resolve: resolveAll() },
  });
  const d2 = await t.daemon('net-noaddr', { ...nb.env, CORRAL_POOL_MAX: '0' });
  const r2 = await netRun(t, d2, f, String.raw`
rec("loop", refused("files.test", P, "/big"))
try:
    urllib.request.urlopen("https://files.test:%d/headers" % P, context=CTX, timeout=30)
    rec("urllib", "no error")
except Exception as e:
    rec("urllib", [type(e).__name__, str(e)])`, { network: [`files.test:${P}`] });
  assertRefused(r2.out.loop.connect, /127\.0\.0\.1/, 'CONNECT to an allowed name resolving to 127.0.0.1');
  assertRefused(r2.out.loop.get, /127\.0\.0\.1/, 'GET of an allowed name resolving to 127.0.0.1');
  assert.match(String(r2.out.urllib), /403/);
  assert.equal(f.srv.log.slice(seenBefore).length, 0, 'no request reached the server');
  const l2 = await auditLines(nb, (l) => l.host === 'files.test', 3);
  for (const l of l2) {
    checkNetLine(l);
    assert.equal(l.decision, 'denied');
    assert.equal(l.address, '127.0.0.1', 'the line names the refused address');
  }

  // Without `network` nothing is set up: no proxy in the environment.
  const none = await netRun(t, d, f, 'rec("proxy", [k for k in os.environ if "proxy" in k.lower()])');
  assert.deepEqual(none.out.proxy, [], 'a call without network has no proxy variables');
}, { timeoutMs: 240000 });

test('network: a name corral resolves itself (localhost, not in network_resolve) connects; the audit names the address', async (t) => {
  const { d, b, f, P } = await shared_(t);
  const seenBefore = f.srv.log.length;
  const r = await netRun(t, d, f, String.raw`
t0 = time.monotonic()
a, s = ask("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % (P, P), body_expected=False)
rec("connect", [a["status"], a["line"], round((time.monotonic() - t0) * 1000)])
if a["status"] == 200:
    s = CTX.wrap_socket(s, server_hostname="files.test")
    s.sendall(b"GET /bytes?n=5 HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        data += c
    rec("answer", data.decode("latin-1"))
s.close()`, { network: [`localhost:${P}`] });
  const o = r.out;
  assert.equal(o.connect[0], 200, `the tunnel opened (${o.connect[1]})`);
  assert.ok(o.connect[2] < 5000, `at once (${o.connect[2]} ms)`);
  assert.match(o.answer, /^HTTP\/1\.1 200 /, 'the server answered through it');
  assert.ok(f.srv.log.length > seenBefore, 'the request reached the server');
  const [l] = await auditLines(b, (l) => l.sandbox === r.sc.container && l.host === 'localhost', 1);
  checkNetLine(l);
  assert.equal(l.decision, 'allowed');
  assert.ok(['127.0.0.1', '::1'].includes(l.address), `the address corral looked up and connected to (${l.address})`);
}, { timeoutMs: 240000 });

test('network: ask, accepted and declined through the client\'s elicitation handler, each audited', async (t) => {
  const { d, b, f, P } = await shared_(t);
  ask.asked.length = 0;
  ask.answer = 'accept';
  const code = String.raw`
a, s = tunnel("ask.test", P)
rec("connect", a)
if s:
    s.sendall(b"GET /headers HTTP/1.1\r\nHost: ask.test\r\nConnection: close\r\n\r\n")
    rec("get", _answer(s, time.monotonic(), True))
    s.close()`;
  const yes = await netRun(t, d, f, code, { network: [`ask.test:${P}`] });
  assert.equal(yes.out.connect.status, 200, `accepted: the tunnel opens (${clip(JSON.stringify(yes.out.connect), 400)})`);
  assert.equal(yes.out.get?.status, 200, 'and the server answers');
  assert.equal(ask.asked.length, 1, 'the person was asked once');
  const q = ask.asked[0];
  t.note('question', q);
  assert.match(q.message, /ask\.test/, 'the question names the host');
  assert.match(q.message, new RegExp(yes.sc.container), 'and the sandbox');

  ask.answer = 'decline';
  const no = await netRun(t, d, f, code, { network: [`ask.test:${P}`] });
  assertRefused(no.out.connect, /declin/, 'declined: 403');
  assert.equal(ask.asked.length, 2, 'asked again for the second run');

  const lines = await auditLines(b, (l) => l.host === 'ask.test', 2);
  t.note('audit', lines);
  for (const l of lines) checkNetLine(l);
  const of = (c) => lines.filter((l) => l.sandbox === c).map((l) => l.decision);
  assert.deepEqual(of(yes.sc.container), ['accepted'], 'the accepted connection is audited as accepted');
  assert.deepEqual(of(no.sc.container), ['denied'], 'the declined one as denied');
  assert.match(lines.find((l) => l.sandbox === no.sc.container).reason, /declin/);
  ask.answer = 'accept';
}, { timeoutMs: 180000 });

test('network: a route adds the Authorization header outside; the environment, /proc/self/environ and the response never show the token', async (t) => {
  const { d, b, f, P } = await shared_(t);
  const before = f.srv.seen.length;
  const r = await netRun(t, d, f, String.raw`
print(dict(os.environ))
with open("/proc/self/environ", "rb") as fh:
    print(fh.read())
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open("/proc/%s/environ" % pid, "rb") as fh:
                print(pid, fh.read())
        except OSError as e:
            print(pid, e)
req = urllib.request.Request("http://api.test:%d/headers" % P, headers={"Authorization": "Bearer the-code-s-own"})
with urllib.request.urlopen(req, timeout=30) as resp:
    rec("status", resp.status)
    hs = dict(resp.headers.items())
    body = resp.read().decode()
print(hs)
print(body)
rec("headers", hs)
rec("body", body)`, { network: [`api.test:${P}`] });
  const o = r.out;
  assert.equal(o.status, 200);
  const seen = f.srv.seen.slice(before);
  t.note('server_saw', seen);
  assert.equal(seen.length, 1, 'one request reached the server');
  assert.equal(seen[0].headers.authorization, `Bearer ${TOKEN}`, 'the server received the route\'s header, not the code\'s');
  const echoed = JSON.parse(o.body);
  assert.equal(echoed.headers.authorization.length, `Bearer ${TOKEN}`.length, 'the echo is masked at the same length');
  assert.match(echoed.headers.authorization, /^[^]*\*{8,}$/, 'the echoed value is masked with *');
  const whole = r.sc.stdout + r.sc.stderr + JSON.stringify(r.r.content);
  assert.ok(r.sc.stdout.includes('/proc') || r.sc.stdout.includes("b'"), 'the code printed its environment');
  for (let i = 0; i + 8 <= TOKEN.length; i += 4)
    assert.ok(!whole.includes(TOKEN.slice(i, i + 8)), `no piece of the token shows in the result (${TOKEN.slice(i, i + 8)})`);
  assert.ok(!d.log.includes(TOKEN), 'nor in corral\'s log');
  const lines = await auditLines(b, (l) => l.sandbox === r.sc.container, 1);
  t.note('audit', lines);
  checkNetLine(lines[0]);
  assert.equal(lines[0].host, 'api.test');
  assert.equal(lines[0].route, `https://api.test:${P}`, 'the audit line names the route');
  assert.ok(!readFileSync(b.audit, 'utf8').includes(TOKEN), 'the token is not in the audit log');
}, { timeoutMs: 120000 });

test('network: a run that becomes a job keeps its way out', async (t) => {
  const { d, f, P } = await shared_(t);
  const held = f.srv.waiting;
  const first = await netRun(t, d, f, String.raw`
a, s = tunnel("files.test", P)
s.sendall(b"GET /slow HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n")
rec("slow", _answer(s, time.monotonic(), True)["body"])
with urllib.request.urlopen("https://files.test:%d/bytes?n=1000" % P, context=CTX, timeout=30) as resp:
    rec("after", hashlib.sha256(resp.read()).hexdigest())`,
  { network: [`files.test:${P}`], sync_wait_s: 1 }, { expectOk: false });
  assert.equal(first.sc.status, 'running', 'the call became a job');
  const w = await waitFor(() => ({ done: f.srv.waiting > held }), { timeoutMs: 20000 });
  assert.ok(w.done, 'the job\'s request is held at the server');
  f.srv.release();
  const r = await d.client.callTool({ name: 'job_result', arguments: { job_id: first.sc.job_id, wait_s: 60 } },
    undefined, { timeout: 90000 });
  const sc = r.structuredContent;
  t.note('job_result', { ...sc, stdout: clip(sc?.stdout, 1500), stderr: clip(sc?.stderr, 1500) });
  assert.equal(sc.status, 'ok', 'the job ended ok');
  const line = sc.stdout.split('\n').find((l) => l.startsWith('@@RESULT@@'));
  const o = JSON.parse(line.slice('@@RESULT@@'.length));
  assert.equal(o.slow, 'slow: done\n', 'the connection opened before it became a job got its answer');
  assert.equal(o.after, sha256(bigBody().buf.subarray(0, 1000)), 'a connection opened after works too');
}, { timeoutMs: 120000 });

// GET PATH of a service on its unix socket (no token needed there).
function unixGet(sock, pathName) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: sock, path: pathName, headers: { Host: 'localhost' }, timeout: 10000 }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${pathName} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

// A sample of the Prometheus text: its value, 0 when absent.
function sample(text, name, labels) {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line ? Number(line.split(' ').pop()) : 0;
}

test('network: through the service (corral serve, corral connect) a grant works the same; /metrics counts connections by decision and bytes', async (t) => {
  const f = await fixtures();
  const P = f.port;
  const b = bridgeSetup(t, {
    policy: { version: 1, network: { allow: ['files.test'], addresses: ['127.0.0.1'] } },
    config: { network_resolve: resolveAll() },
  });
  const sock = path.join(b.root, 'corral.sock');
  const svc = await startService(t, ['--listen', `unix:${sock}`], corralEnv({ ...b.env, CORRAL_POOL_MAX: '0' }), sock);
  const d = await t.daemon('net-connect', {}, { args: ['connect', '--socket', sock] });
  t.defer(() => t.note('service_log', clip(svc.log, 3000)));
  const r = await netRun(t, d, f, String.raw`
a, s = tunnel("files.test", P)
s.sendall(b"GET /bytes?n=100000 HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n")
got = _answer(s, time.monotonic(), True)
rec("got", [got["status"], len(got["body"].encode("utf-8", "surrogateescape"))])
rec("outside", refused("other.test", P))`, { network: [`files.test:${P}`] });
  assert.equal(r.out.got[0], 200, 'the granted host answers through the service');
  assertRefused(r.out.outside.connect, /other\.test/, 'a host outside the grant, through the service');
  const w = await waitFor(async () => {
    const m = await unixGet(sock, '/metrics');
    const v = {
      status: m.status,
      allowed: sample(m.body, 'corral_network_connections_total', 'decision="allowed"'),
      denied: sample(m.body, 'corral_network_connections_total', 'decision="denied"'),
      in: sample(m.body, 'corral_network_bytes_total', 'direction="in"'),
      out: sample(m.body, 'corral_network_bytes_total', 'direction="out"'),
    };
    return { done: v.allowed >= 1 && v.denied >= 2, v, text: m.body };
  }, { timeoutMs: 10000 });
  t.note('metrics', w.v);
  t.note('metrics_network_lines', w.text.split('\n').filter((l) => l.includes('network')));
  assert.equal(w.v.status, 200, '/metrics answers on the unix socket');
  assert.equal(w.v.allowed, 1, 'one allowed connection counted');
  assert.equal(w.v.denied, 2, 'the two refusals counted');
  assert.ok(w.v.in >= 100000, `bytes in counted (${w.v.in})`);
  assert.ok(w.v.out > 0, `bytes out counted (${w.v.out})`);
}, { timeoutMs: 120000 });

// The limits test's code: a stalled reader, 64 connections at once held
// by /slow (it prints @@HELD@@ once each is through or refused), then 2 GB
// offered to the upload sink.
export const STRESS = String.raw`
# A stalled reader: 50 MB asked for, nothing read.
a, stalled = tunnel("files.test", P)
rec("stalled", a["status"])
stalled.sendall(b"GET /big HTTP/1.1\r\nHost: files.test\r\n\r\n")
# 64 connections at once, each held by /slow until the test releases it.
got = [None] * 64
settled = [threading.Event() for _ in range(64)]
def one(i):
    try:
        a, s = tunnel("files.test", P, timeout=100)
        if s is None:
            got[i] = a
            settled[i].set()
            return
        s.sendall(b"GET /slow HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n")
        got[i] = {"status": 200, "held": True}
        settled[i].set()
        got[i] = _answer(s, time.monotonic(), True)
        s.close()
    except Exception as e:
        got[i] = {"error": repr(e)}
        settled[i].set()
ts = [threading.Thread(target=one, args=(i,)) for i in range(64)]
for x in ts:
    x.start()
for e in settled:
    e.wait(60)
held = sum(1 for g in got if g and g.get("held"))
print("@@HELD@@ %d" % held, flush=True)
for x in ts:
    x.join(100)
rec("conns", got)
# 2 GB offered to the upload sink, 1 MiB at a time. A connection counts
# until both ends are done with it: one whose client has read its answer
# may still be open toward the host for a moment, so a refusal naming the
# limit is tried again (for 10 s at most).
retries = 0
for _ in range(100):
    a, s = tunnel("files.test", P)
    if a["status"] != 403 or "network_max_connections" not in str(a):
        break
    retries += 1
    time.sleep(0.1)
rec("upload_tunnel", a["status"])
rec("upload_retries", retries)
sent, err, t0 = 0, None, time.monotonic()
try:
    s.sendall(b"POST /upload HTTP/1.1\r\nHost: files.test\r\nContent-Length: 2147483648\r\n\r\n")
    chunk = bytes(1 << 20)
    while sent < (2 << 30):
        s.sendall(chunk)
        sent += len(chunk)
except Exception as e:
    err = repr(e)
rec("upload", [sent, err, round(time.monotonic() - t0, 2)])
done()
`;

// corral's resident memory, from outside.
function status(pid) {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1]);
  return { rss: kib('VmRSS') * 1024, hwm: kib('VmHWM') * 1024 };
}
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };

test('network: 64 connections at once, a stalled reader and a 2 GB upload: the limits answer, corral\'s RSS stays under 64 MiB, other calls keep their latency', async (t) => {
  const f = await fixtures();
  const P = f.port;
  const MAXCONN = 32;
  const MAXBYTES = 16 * MiB;
  const b = bridgeSetup(t, {
    policy: { version: 1, network: { allow: ['files.test'], addresses: ['127.0.0.1'] } },
    config: { network_resolve: resolveAll(), network_max_connections: MAXCONN, network_max_bytes: MAXBYTES },
  });
  const d = await t.daemon('net-limits', b.env);
  const pid = d.pid;
  // A session's call is a frame round trip: what a busy proxy would slow.
  const plain = async () => (await d.call(t, 'run_python', { session: 'lat', code: 'print(1)' })).ms;
  await plain();
  const before = [];
  for (let i = 0; i < 7; i++) before.push(await plain());

  const uploadsBefore = f.srv.uploads.length;
  const { call, running } = startCall(d, 'run_python', {
    timeout_s: 120,
    network: [`files.test:${P}`],
    code: `${netPrelude(f.certs.caPem, P)}\n${STRESS}`,
  }, { until: /@@HELD@@/, timeoutMs: 180000 });
  await running;
  // The server holds what went through; the rest were answered.
  const w = await waitFor(() => ({ done: f.srv.waiting >= MAXCONN - 1, n: f.srv.waiting }), { timeoutMs: 20000 });
  t.note('held_at_server', w.n);
  const during = [];
  const rssDuring = [status(pid).rss];
  for (let i = 0; i < 7; i++) {
    during.push(await plain());
    rssDuring.push(status(pid).rss);
  }
  t.note('latency_ms', { before, during });
  f.srv.release();
  const res = await call;
  assert.ok(res.result, `the stress run answered (${res.error})`);
  const sc = res.result.structuredContent;
  assert.equal(sc.status, 'ok', `the stress run is ok (${clip(sc.stderr, 2000)})`);
  const o = JSON.parse(sc.stdout.split('\n').find((l) => l.startsWith('@@RESULT@@')).slice('@@RESULT@@'.length));
  const after = status(pid);
  t.note('rss', { during: rssDuring, after });

  assert.equal(o.stalled, 200, 'the stalled reader\'s tunnel opened');
  const ok = o.conns.filter((c) => c?.status === 200);
  const no = o.conns.filter((c) => c?.status === 403);
  t.note('conns', { ok: ok.length, refused: no.length, other: o.conns.filter((c) => ![200, 403].includes(c?.status)) });
  assert.equal(ok.length, MAXCONN - 1, `network_max_connections: ${MAXCONN - 1} besides the stalled reader went through`);
  assert.equal(no.length, 64 - (MAXCONN - 1), 'the rest were refused');
  for (const c of no) assertRefused(c, null, 'a connection over the limit');
  assert.ok(no.every((c) => c.ms < 5000), 'each refusal came at once');
  assert.ok(ok.every((c) => /slow: done/.test(c.body)), 'the held ones got their answers when released');

  assert.equal(o.upload_tunnel, 200);
  const [sent, err] = o.upload;
  t.note('upload', { sent, err, at_server: f.srv.uploads.slice(uploadsBefore) });
  assert.ok(err, 'the 2 GB upload was stopped');
  assert.ok(sent < 64 * MiB, `it stopped near network_max_bytes, not later (${sent} bytes sent)`);
  const up = f.srv.uploads.slice(uploadsBefore);
  assert.equal(up.length, 1);
  assert.ok(up[0].bytes <= MAXBYTES, `the server got at most network_max_bytes (${up[0].bytes})`);

  assert.ok(after.hwm < 64 * MiB, `corral's peak RSS stayed under 64 MiB (${(after.hwm / MiB).toFixed(1)} MiB)`);
  const b50 = median(before), d50 = median(during);
  assert.ok(d50 <= 4 * b50 + 250, `plain calls kept their latency: median ${d50} ms during, ${b50} ms before`);

  const lines = await auditLines(b, (l) => l.sandbox === sc.container, 64 + 2 + o.upload_retries);
  t.note('audit_reasons', [...new Set(lines.map((l) => `${l.decision}: ${l.reason}`))]);
  for (const l of lines) checkNetLine(l);
  assert.equal(lines.filter((l) => l.decision === 'denied').length, 64 - (MAXCONN - 1) + o.upload_retries,
    'each refusal is audited (the upload tunnel\'s retries among them)');
  assert.ok(lines.some((l) => l.bytes_out >= MAXBYTES - MiB && l.bytes_out <= MAXBYTES + MiB && l.reason),
    'the upload\'s line says why it ended');
}, { timeoutMs: 300000 });
