// Fixtures of the network tests (network.test.mjs) and the network
// benchmark (tests/bench/network.mjs): what sandboxed code reaches through
// corral's proxy, all on the host's loopback, made at test time.
//
//   makeCerts(dir)       a test CA and a server certificate for NAMES (and
//                        127.0.0.1), with the openssl CLI
//   buildWheel(dir, mark)  corral_testpkg 1.0 as a pure-Python wheel, built
//                        with Debian's python3 and zipfile
//   startNetServer(...)  one HTTPS server on 127.0.0.1:0 serving a big
//                        deterministic body, a header echo, a PEP 503 index
//                        and its wheel, an upload sink and a held endpoint
//   netPrelude(...)      Python that sandboxed code starts with: the CA
//                        trusted, and helpers that speak to the proxy
//
// No side effects on import.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import path from 'node:path';

// The names the server certificate holds; tests map them to 127.0.0.1 with
// corral's network_resolve setting.
export const NAMES = ['files.test', 'pypi.test', 'api.test', 'other.test', 'ask.test', 'denied.test'];

// Where sandboxed code writes the CA it is told to trust (code embeds the
// PEM: the sandbox sees nothing of the host's files).
export const SANDBOX_CA = '/tmp/corral-test-ca.pem';

// The big body: BIG_BYTES of a xorshift stream, the same every run.
export const BIG_BYTES = 50 * 1024 * 1024;

function openssl(args, cwd) {
  return execFileSync('openssl', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
}

// A CA (ca.pem, ca.key) and a server certificate signed by it (server.pem,
// server.key) for NAMES and 127.0.0.1, valid two days, under `dir`.
// P-256 keys: quick to make and to handshake with.
export function makeCerts(dir, names = NAMES) {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2',
    '-subj', '/CN=corral e2e test CA', '-addext', 'basicConstraints=critical,CA:TRUE',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-addext', 'subjectKeyIdentifier=hash'], dir);
  openssl(['req', '-new', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', `/CN=${names[0]}`], dir);
  const san = [...names.map((n) => `DNS:${n}`), 'IP:127.0.0.1'].join(',');
  writeFileSync(path.join(dir, 'server.ext'), [
    'basicConstraints=critical,CA:FALSE',
    'keyUsage=critical,digitalSignature',
    'extendedKeyUsage=serverAuth',
    `subjectAltName=${san}`,
    'subjectKeyIdentifier=hash',
    'authorityKeyIdentifier=keyid:always',
    '',
  ].join('\n'));
  openssl(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial',
    '-out', 'server.pem', '-days', '2', '-extfile', 'server.ext'], dir);
  const read = (f) => readFileSync(path.join(dir, f), 'utf8');
  return { dir, caFile: path.join(dir, 'ca.pem'), caPem: read('ca.pem'), cert: read('server.pem'), key: read('server.key') };
}

// Builds corral_testpkg-1.0-py3-none-any.whl under `dir`: one module whose
// MARK is `mark` (so an import shows it came from this run's index), with
// METADATA, WHEEL and a RECORD of sha256 entries. Returns { file, name,
// bytes, sha256 }.
export function buildWheel(dir, mark) {
  const name = 'corral_testpkg-1.0-py3-none-any.whl';
  const file = path.join(dir, name);
  const script = String.raw`
import base64, hashlib, sys, zipfile
out, mark = sys.argv[1], sys.argv[2]
info = "corral_testpkg-1.0.dist-info"
files = {
    "corral_testpkg/__init__.py": "MARK = %r\nANSWER = 42\n" % mark,
    info + "/METADATA": "Metadata-Version: 2.1\nName: corral-testpkg\nVersion: 1.0\n"
                        "Summary: a package corral's tests install from their own index\n",
    info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: corral-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    info + "/top_level.txt": "corral_testpkg\n",
}
record = []
for p, text in files.items():
    data = text.encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append("%s,sha256=%s,%d" % (p, digest, len(data)))
record.append(info + "/RECORD,,")
files[info + "/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for p, text in files.items():
        zi = zipfile.ZipInfo(p, date_time=(2020, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(zi, text)
`;
  execFileSync('/usr/bin/python3', ['-c', script, file, mark], { stdio: ['ignore', 'pipe', 'pipe'] });
  const bytes = readFileSync(file);
  return { file, name, bytes, sha256: createHash('sha256').update(bytes).digest('hex') };
}

// BIG_BYTES of xorshift32 output from a fixed seed, and its sha256.
let big = null;
export function bigBody() {
  if (!big) {
    const words = new Uint32Array(BIG_BYTES / 4);
    let x = 0x2545f491;
    for (let i = 0; i < words.length; i++) {
      x ^= x << 13; x >>>= 0;
      x ^= x >>> 17;
      x ^= x << 5; x >>>= 0;
      words[i] = x;
    }
    const buf = Buffer.from(words.buffer);
    big = { buf, sha256: createHash('sha256').update(buf).digest('hex') };
  }
  return big;
}

// Writes buf to res in 64 KiB pieces, waiting for 'drain': a reader that
// stops reading holds the server at its socket's buffer, not in memory.
function stream(res, buf) {
  let off = 0;
  const more = () => {
    while (off < buf.length) {
      const piece = buf.subarray(off, off + 65536);
      off += piece.length;
      if (!res.write(piece)) return res.once('drain', more);
    }
    res.end();
  };
  res.on('close', () => { off = buf.length; });
  more();
}

// One HTTPS server on 127.0.0.1:0 with `certs` (makeCerts) and `wheel`
// (buildWheel, optional). Paths:
//   GET  /big                 the big body (bigBody()), Content-Length set
//   GET  /bytes?n=N           N bytes of the big body (N <= BIG_BYTES)
//   GET  /headers             the request's method, url and headers as JSON;
//                             each request is kept in `seen`
//   GET  /simple/, /simple/corral-testpkg/   the PEP 503 index
//   GET  /packages/<wheel>    the wheel
//   POST /upload              counts the body's bytes, answers {"bytes": n};
//                             ?stall=1: never reads it
//   GET  /slow                answered when release() is called (or after
//                             ?ms=N, at most 120 s); `waiting` counts the
//                             requests held
// Every request's line and Host go into `log`.
export async function startNetServer({ certs, wheel = null }) {
  const st = {
    log: [], seen: [], uploads: [], held: new Set(), sockets: new Set(),
    get waiting() { return st.held.size; },
  };
  const server = https.createServer({ key: certs.key, cert: certs.cert }, (req, res) => {
    const url = new URL(req.url, 'https://x');
    st.log.push({ method: req.method, url: req.url, host: req.headers.host ?? null, at: Date.now() });
    const send = (code, type, body) => {
      res.writeHead(code, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
      res.end(body);
    };
    if (req.method === 'GET' && url.pathname === '/big') {
      const { buf } = bigBody();
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': buf.length });
      return stream(res, buf);
    }
    if (req.method === 'GET' && url.pathname === '/bytes') {
      const n = Math.min(Number(url.searchParams.get('n') ?? 1), BIG_BYTES);
      const buf = bigBody().buf.subarray(0, n);
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': buf.length });
      return stream(res, buf);
    }
    if (url.pathname === '/headers') {
      const rec = { method: req.method, url: req.url, headers: req.headers };
      st.seen.push(rec);
      return send(200, 'application/json', JSON.stringify(rec));
    }
    if (req.method === 'GET' && (url.pathname === '/simple/' || url.pathname === '/simple')) {
      return send(200, 'text/html', '<!DOCTYPE html>\n<html><body>\n' +
        '<a href="/simple/corral-testpkg/">corral-testpkg</a>\n</body></html>\n');
    }
    if (req.method === 'GET' && /^\/simple\/corral[-_.]testpkg\/?$/.test(url.pathname) && wheel) {
      return send(200, 'text/html', '<!DOCTYPE html>\n<html><body>\n' +
        `<a href="/packages/${wheel.name}#sha256=${wheel.sha256}">${wheel.name}</a>\n</body></html>\n`);
    }
    if (req.method === 'GET' && wheel && url.pathname === `/packages/${wheel.name}`) {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': wheel.bytes.length });
      return res.end(wheel.bytes);
    }
    if (req.method === 'POST' && url.pathname === '/upload') {
      const up = { bytes: 0, ended: false, closed: false, stalled: url.searchParams.get('stall') === '1' };
      st.uploads.push(up);
      req.on('close', () => { up.closed = true; });
      if (up.stalled) { req.pause(); return undefined; }
      req.on('data', (b) => { up.bytes += b.length; });
      req.on('end', () => { up.ended = true; send(200, 'application/json', JSON.stringify({ bytes: up.bytes })); });
      return undefined;
    }
    if (req.method === 'GET' && url.pathname === '/slow') {
      const ms = Math.min(Number(url.searchParams.get('ms') ?? 120000), 120000);
      const h = { answer: () => { clearTimeout(h.timer); st.held.delete(h); if (!res.destroyed) send(200, 'text/plain', 'slow: done\n'); } };
      h.timer = setTimeout(h.answer, ms);
      st.held.add(h);
      res.on('close', () => { clearTimeout(h.timer); st.held.delete(h); });
      return undefined;
    }
    return send(404, 'text/plain', 'no such path\n');
  });
  server.on('connection', (s) => { st.sockets.add(s); s.on('close', () => st.sockets.delete(s)); });
  server.on('tlsClientError', () => {});
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  st.port = server.address().port;
  st.server = server;
  st.release = () => { for (const h of [...st.held]) h.answer(); };
  st.close = () => new Promise((r) => {
    st.release();
    for (const s of st.sockets) s.destroy();
    server.close(() => r());
  });
  return st;
}

// Python run before the network tests' code (and the benchmark's): the CA
// written where the code trusts it (caPath), rec()/done() as in the bridge
// tests, and helpers that speak to the sandbox's proxy directly, so the
// code sees corral's own answers:
//   ask(head)          one request head to the proxy: {status, line,
//                      headers, body, ms}, and the socket
//   tunnel(host, port) CONNECT; on 200 the socket wrapped in TLS
//   refused(host, port, path)  a CONNECT and an absolute-form GET: both
//                      answers
export function netPrelude(caPem, port, caPath = SANDBOX_CA) {
  return String.raw`
import hashlib, json, os, socket, ssl, subprocess, sys, threading, time, urllib.request
CA = ${JSON.stringify(caPath)}
with open(CA, "w") as _f:
    _f.write(${JSON.stringify(caPem)})
P = ${port}
CTX = ssl.create_default_context(cafile=CA)
_out = {}
def rec(k, v):
    _out[k] = v
def done():
    print("@@RESULT@@" + json.dumps(_out, default=repr), flush=True)
def proxy_addr():
    u = os.environ["HTTPS_PROXY"].split("://", 1)[1].rstrip("/")
    h, p = u.rsplit(":", 1)
    return h, int(p)
def _answer(s, t0, body_expected):
    data = b""
    while b"\r\n\r\n" not in data:
        c = s.recv(65536)
        if not c:
            break
        data += c
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ", 2)
    status = int(first[1]) if len(first) > 1 and first[1].isdigit() else None
    headers = {}
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if body_expected or status != 200:
        n = int(headers.get("content-length", "-1"))
        while n < 0 or len(body) < n:
            try:
                c = s.recv(65536)
            except OSError:
                break
            if not c:
                break
            body += c
    return {"status": status, "line": lines[0], "headers": headers, "body": body.decode("utf-8", "replace"),
            "ms": round((time.monotonic() - t0) * 1000, 1)}
def ask(head, body_expected=True, timeout=30):
    t0 = time.monotonic()
    s = socket.create_connection(proxy_addr(), timeout=timeout)
    s.sendall(head.encode("latin-1"))
    return _answer(s, t0, body_expected), s
def tunnel(host, port, timeout=30):
    a, s = ask("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port), body_expected=False, timeout=timeout)
    if a["status"] != 200:
        s.close()
        return a, None
    return a, CTX.wrap_socket(s, server_hostname=host)
def refused(host, port, path="/headers"):
    """CONNECT and an absolute-form GET, each to the proxy: both answers."""
    a, s = ask("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port), body_expected=False)
    s.close()
    g, s = ask("GET http://%s:%d%s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (host, port, path, host, port))
    s.close()
    return {"connect": a, "get": g}
`;
}
