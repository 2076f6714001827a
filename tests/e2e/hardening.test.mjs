// The hardening, checked from inside sandboxes and from outside: no network,
// a read-only root, an unprivileged user, the seccomp profile (with the
// engine's own profile as the control that shows the check can fail), the
// writable surface and masked /proc entries, corral's own confinement (with
// confine: false as the control), and forged end records written by the code.
//
//   node run.mjs hardening     (no network:, filesystem:, privileges:,
//                              seccomp:, surface:, confinement:, forged records:)

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { clip, CONNECT_PROBE, GVISOR, MiB, RUNTIME, test, toolCall } from './lib/harness.mjs';
import { bridgeSetup, everythingServer, hostTool } from './lib/bridge.mjs';

test('no network: connects to 1.1.1.1:53 and 127.0.0.1 fail; only interface is lo', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: [
      'import json, socket',
      ...CONNECT_PROBE,
      'try:',
      '    socket.getaddrinfo("example.com", 443)',
      '    res["dns"] = "resolved"',
      'except OSError as e:',
      '    res["dns"] = type(e).__name__',
      'res["ifaces"] = sorted(name for _, name in socket.if_nameindex())',
      'res["netdev"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])',
      'print(json.dumps(res))',
    ].join('\n'),
    timeout_s: 20,
  });
  assert.equal(r.structuredContent.status, 'ok', 'the probe ran');
  const res = JSON.parse(r.structuredContent.stdout);
  t.note('probe', res);
  assert.notEqual(res['1.1.1.1'], 'connected', 'TCP to 1.1.1.1:53 fails');
  assert.notEqual(res['127.0.0.1'], 'connected', 'TCP to 127.0.0.1:8080 fails');
  assert.notEqual(res.dns, 'resolved', 'DNS resolution fails');
  assert.deepEqual(res.ifaces, ['lo'], 'socket.if_nameindex() lists only lo');
  assert.deepEqual(res.netdev, ['lo'], '/proc/net/dev lists only lo');
});

test('filesystem: / is read-only; /tmp and /workspace are writable', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    code: [
      'import errno, json, os',
      'res = {}',
      'for p in ["/probe", "/etc/probe", "/usr/probe", "/tmp/probe", "/workspace/probe"]:',
      '    try:',
      '        with open(p, "w") as f:',
      '            f.write("x" * 4096)',
      '        res[p] = "written"',
      '    except OSError as e:',
      '        res[p] = errno.errorcode.get(e.errno, str(e.errno))',
      'res["root_ro"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)',
      'res["cwd"] = os.getcwd()',
      'm = {l.split()[1]: [l.split()[2], l.split()[3]] for l in open("/proc/mounts")}',
      'res["mounts"] = {k: m.get(k) for k in ("/tmp", "/workspace")}',
      'print(json.dumps(res))',
    ].join('\n'),
  });
  assert.equal(r.structuredContent.status, 'ok', 'the probe ran');
  const res = JSON.parse(r.structuredContent.stdout);
  t.note('probe', res);
  assert.equal(res.root_ro, true, 'the root filesystem is mounted read-only');
  for (const p of ['/probe', '/etc/probe', '/usr/probe'])
    assert.ok(['EROFS', 'EACCES'].includes(res[p]), `writing ${p} fails (got ${res[p]})`);
  assert.equal(res['/probe'], 'EROFS', 'writing / fails with EROFS');
  assert.equal(res['/tmp/probe'], 'written', '/tmp is writable');
  assert.equal(res['/workspace/probe'], 'written', '/workspace is writable');
  // The same memory-backed, capped, nosuid,nodev space on both engines
  // (on Docker /workspace is a tmpfs-backed volume, so that its archive
  // endpoints see the files).
  for (const [dir, kib] of [['/tmp', 64 * 1024], ['/workspace', 256 * 1024]]) {
    const [type, opts] = res.mounts[dir] ?? [];
    assert.equal(type, 'tmpfs', `${dir} is a tmpfs (${res.mounts[dir]})`);
    const o = opts.split(',');
    for (const want of ['rw', 'nosuid', 'nodev', `size=${kib}k`])
      assert.ok(o.includes(want), `${dir} is mounted ${want} (${opts})`);
  }
});

test('privileges: uid 65534, CapEff 0, NoNewPrivs 1', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', {
    // prctl as well as /proc: gVisor's status file has no CapAmb or
    // NoNewPrivs line (PR_GET_NO_NEW_PRIVS 39, PR_CAP_AMBIENT_IS_SET 47/1).
    code: 'import os, ctypes\nlibc = ctypes.CDLL(None)\nprint(os.getuid(), os.geteuid(), os.getgid())\n' +
      'print("prctl", libc.prctl(39, 0, 0, 0, 0), sum(libc.prctl(47, 1, c, 0, 0) == 1 for c in range(64)))\n' +
      'print(open("/proc/self/status").read())',
  });
  assert.equal(r.structuredContent.status, 'ok', 'the probe ran');
  const text = r.structuredContent.stdout;
  const field = (name) => (text.match(new RegExp(`^${name}:\\s*(.*)$`, 'm')) ?? [])[1]?.trim();
  assert.equal(text.split('\n')[0], '65534 65534 65534', 'uid, euid and gid are 65534');
  assert.deepEqual(field('Uid')?.split(/\s+/), ['65534', '65534', '65534', '65534'], 'Uid line');
  assert.equal(field('CapEff'), '0000000000000000', 'no effective capabilities');
  assert.equal(field('CapPrm'), '0000000000000000', 'no permitted capabilities');
  assert.equal(text.split('\n')[1], 'prctl 1 0', 'prctl: no_new_privs set, no ambient capability');
  if (!GVISOR) {
    assert.equal(field('CapAmb'), '0000000000000000', 'no ambient capabilities');
    assert.equal(field('NoNewPrivs'), '1', 'no_new_privs is set');
  }
});

// The calls policy/seccomp.policy closes, by number (x86_64 and aarch64),
// each made from Python with ctypes the way hostile code would.
const CLOSED_CALLS_PY = String.raw`
import ctypes, errno, json, platform
libc = ctypes.CDLL(None, use_errno=True)
X86 = dict(unshare=272, setns=308, clone=56, io_uring_setup=425, io_uring_enter=426,
    io_uring_register=427, keyctl=250, add_key=248, request_key=249, bpf=321, perf_event_open=298,
    userfaultfd=323, mount=165, umount2=166, fsopen=430, fsmount=432, move_mount=429, open_tree=428,
    pivot_root=155, chroot=161, open_by_handle_at=304, kexec_load=246, kexec_file_load=320,
    init_module=175, finit_module=313, delete_module=176, personality=135, acct=163, swapon=167,
    swapoff=168, reboot=169, syslog=103, quotactl=179, settimeofday=164, clock_settime=227,
    clock_adjtime=305, adjtimex=159, mq_open=240)
ARM = dict(unshare=97, setns=268, clone=220, io_uring_setup=425, io_uring_enter=426,
    io_uring_register=427, keyctl=219, add_key=217, request_key=218, bpf=280, perf_event_open=241,
    userfaultfd=282, mount=40, umount2=39, fsopen=430, fsmount=432, move_mount=429, open_tree=428,
    pivot_root=41, chroot=51, open_by_handle_at=265, kexec_load=104, kexec_file_load=294,
    init_module=105, finit_module=273, delete_module=106, personality=92, acct=89, swapon=224,
    swapoff=225, reboot=142, syslog=116, quotactl=60, settimeofday=170, clock_settime=112,
    clock_adjtime=266, adjtimex=171, mq_open=180)
NR = X86 if platform.machine() == "x86_64" else ARM
ARGS = {"unshare": (0x10000000,), "clone": (0x10000000 | 17, 0, 0, 0, 0),
        "personality": (0x0400000,), "io_uring_setup": (1, 0), "mq_open": (b"/q", 0o102, 0o600, 0)}
ONLY = globals().get("ONLY")
res = {}
for name, nr in NR.items():
    if ONLY and name not in ONLY:
        continue
    ctypes.set_errno(0)
    r = libc.syscall(nr, *ARGS.get(name, (0, 0, 0, 0, 0)))
    res[name] = "allowed" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
print(json.dumps(res))
`;

test('seccomp: every call the profile closes fails with EPERM from Python; unshare -U fails in run_shell; the engine\'s own profile differs', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: CLOSED_CALLS_PY });
  assert.equal(r.structuredContent.status, 'ok', `the probe ran (${clip(r.structuredContent.stderr, 600)})`);
  const got = JSON.parse(r.structuredContent.stdout);
  t.note('closed', got);
  assert.ok(Object.keys(got).length >= 38, 'every closed call was tried');
  const notEperm = Object.entries(got).filter(([, v]) => v !== 'EPERM');
  assert.deepEqual(notEperm, [], 'each closed call fails with EPERM');

  const sh = await d.call(t, 'run_shell', { command: 'unshare -U true; echo "exit=$?"' });
  t.note('unshare', sh.structuredContent);
  assert.match(sh.structuredContent.stdout, /exit=[1-9]/, 'unshare -U true fails');
  assert.match(sh.structuredContent.stderr, /Operation not permitted/, 'with "Operation not permitted"');

  // The attack this profile closes: with the engine's default profile
  // (seccomp: engine) one of these gets through on each engine (Podman
  // lets uid 65534 make a user namespace, Docker lets io_uring_setup reach
  // the kernel, which then complains about its arguments).
  const e = await t.daemon('seccomp-engine', { CORRAL_SECCOMP: 'engine', CORRAL_POOL_MAX: '0' });
  const c = await e.call(t, 'run_python', { code: `ONLY = ["unshare", "io_uring_setup"]\n${CLOSED_CALLS_PY}` });
  const open = JSON.parse(c.structuredContent.stdout);
  t.note('engine_profile', open);
  assert.ok(Object.values(open).some((v) => v !== 'EPERM'),
    `under the engine's own profile a closed call gets further than EPERM (${JSON.stringify(open)})`);
});

test('seccomp: a realistic workload passes under the profile (multiprocessing, subprocess, threads, asyncio, sqlite3, tarfile, a shell pipeline)', async (t) => {
  const d = await t.main();
  const code = String.raw`
import asyncio, hashlib, io, json, multiprocessing, os, shutil, sqlite3, subprocess, tarfile, threading
from multiprocessing import shared_memory
res = {}
with multiprocessing.Pool(2) as p:
    res["pool"] = p.starmap(pow, [(2, 2), (3, 2), (4, 2)])
q = multiprocessing.Queue(); lock = multiprocessing.Lock()
def child(q, lock):
    with lock:
        q.put(os.getpid() != os.getppid())
pr = multiprocessing.Process(target=child, args=(q, lock)); pr.start(); res["process"] = q.get(timeout=20); pr.join()
shm = shared_memory.SharedMemory(create=True, size=4096); shm.buf[:3] = b"abc"
other = shared_memory.SharedMemory(name=shm.name); res["shm"] = bytes(other.buf[:3]).decode()
other.close(); shm.close(); shm.unlink()
res["subprocess"] = subprocess.run(["sh", "-c", "echo sub $((6 * 7))"], capture_output=True, text=True).stdout.strip()
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i * i)) for i in range(8)]
[x.start() for x in ts]; [x.join() for x in ts]
res["threads"] = sorted(out)
async def amain():
    proc = await asyncio.create_subprocess_exec("echo", "async", stdout=asyncio.subprocess.PIPE)
    o, _ = await proc.communicate()
    async def handle(r, w):
        w.write((await r.readline()).upper()); await w.drain(); w.close()
    srv = await asyncio.start_unix_server(handle, "/tmp/a.sock")
    r, w = await asyncio.open_unix_connection("/tmp/a.sock")
    w.write(b"ping\n"); await w.drain(); line = await r.readline(); w.close(); srv.close()
    got = await asyncio.gather(*(asyncio.sleep(0.01, result=i) for i in range(5)))
    return [o.decode().strip(), line.decode().strip(), got]
res["asyncio"] = asyncio.run(amain())
db = sqlite3.connect("/workspace/t.db")
db.execute("create table t (x integer)")
db.executemany("insert into t values (?)", [(i,) for i in range(100)])
db.commit()
res["sqlite"] = db.execute("select sum(x) from t").fetchone()[0]
os.makedirs("/tmp/src/sub")
for i in range(5):
    open(f"/tmp/src/sub/f{i}", "wb").write(os.urandom(1000) * (i + 1))
with tarfile.open("/workspace/a.tar.gz", "w:gz") as tf:
    tf.add("/tmp/src", arcname="src")
with tarfile.open("/workspace/a.tar.gz") as tf:
    tf.extractall("/tmp/dst")
same = all(open(f"/tmp/src/sub/f{i}", "rb").read() == open(f"/tmp/dst/src/sub/f{i}", "rb").read() for i in range(5))
res["tarfile"] = same
res["tools"] = {n: bool(shutil.which(n)) for n in ("gcc", "cc", "gdb")}
print(json.dumps(res))
`;
  const r = await d.call(t, 'run_python', { code, timeout_s: 60 }, { timeoutMs: 90000 });
  const sc = r.structuredContent;
  assert.equal(sc.status, 'ok', `the workload ran (${clip(JSON.stringify(sc.error), 1500)} ${clip(sc.stderr, 1500)})`);
  const res = JSON.parse(sc.stdout);
  t.note('workload', res);
  assert.deepEqual(res.pool, [4, 9, 16], 'multiprocessing.Pool');
  assert.equal(res.process, true, 'multiprocessing.Process with a Queue and a Lock');
  assert.equal(res.shm, 'abc', 'multiprocessing.shared_memory in /dev/shm');
  assert.equal(res.subprocess, 'sub 42', 'subprocess');
  assert.deepEqual(res.threads, [0, 1, 4, 9, 16, 25, 36, 49], 'threads');
  assert.deepEqual(res.asyncio, ['async', 'PING', [0, 1, 2, 3, 4]], 'asyncio: subprocess, unix server, gather');
  assert.equal(res.sqlite, 4950, 'sqlite3');
  assert.equal(res.tarfile, true, 'tarfile round trip');
  if (!res.tools.gcc && !res.tools.gdb) t.note('compiler', 'the image has no gcc or gdb: not tried');

  const sh = await d.call(t, 'run_shell', {
    command: "seq 1 1000 | sort -rn | head -3 | tr '\\n' ' '; printf 'a\\nb\\n' | wc -l; echo x | sed s/x/y/ | cat",
  });
  assert.equal(sh.structuredContent.status, 'ok');
  assert.equal(sh.structuredContent.stdout, '1000 999 998 2\ny\n', 'a shell pipeline');
});

// Netlink is how the C library lists the local addresses (NETLINK_ROUTE);
// its other protocols are kernel interfaces a sandbox has no use for, and
// NETLINK_KOBJECT_UEVENT, bound to its group, hands out the host's device
// events from any network namespace.
const NETLINK_PY = String.raw`
import errno, json, socket
res = {}
for name, proto in (("uevent", 15), ("audit", 9), ("sock_diag", 4), ("xfrm", 6), ("connector", 11),
                    ("netfilter", 12), ("generic", 16)):
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto).close()
        res[name] = "opened"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
for kind in (socket.SOCK_RAW, socket.SOCK_DGRAM):
    s = socket.socket(socket.AF_NETLINK, kind | socket.SOCK_CLOEXEC, 0)
    s.bind((0, 0))
    s.close()
res["route"] = "opened"
res["getaddrinfo"] = sorted({a[4][0] for a in socket.getaddrinfo("localhost", 80)})
res["interfaces"] = [n for _, n in socket.if_nameindex()]
print(json.dumps(res))
`;

test('seccomp: netlink is NETLINK_ROUTE only: uevent, audit and the other protocols get EPERM; route sockets, getaddrinfo and if_nameindex work', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: NETLINK_PY });
  assert.equal(r.structuredContent.status, 'ok', `the probe ran (${clip(r.structuredContent.stderr, 800)})`);
  const res = JSON.parse(r.structuredContent.stdout);
  t.note('netlink', res);
  for (const p of ['uevent', 'audit', 'sock_diag', 'xfrm', 'connector', 'netfilter', 'generic'])
    assert.equal(res[p], 'EPERM', `a NETLINK ${p} socket is refused with EPERM`);
  assert.equal(res.route, 'opened', 'NETLINK_ROUTE sockets (raw and datagram) open and bind');
  assert.ok(res.getaddrinfo.some((a) => a === '127.0.0.1' || a === '::1'), `getaddrinfo('localhost', 80) works (${res.getaddrinfo})`);
  assert.ok(res.interfaces.includes('lo'), 'if_nameindex lists lo');
});

test('surface: only /tmp, /workspace and /dev/shm are writable, each capped; sensitive /proc entries are masked', async (t) => {
  const d = await t.main();
  const code = String.raw`
import errno, json, os
def creatable(d):
    p = os.path.join(d, ".corral-probe")
    try:
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(p)
    return True
cands = {l.split()[4] for l in open("/proc/self/mountinfo")}
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys"):
        dirs[:] = []
        continue
    cands.add(root)
writable = sorted(d for d in cands if not d.startswith(("/proc", "/sys")) and creatable(d))
# A directory inside a writable place, on its file system, is that place
# (/workspace/out, made by the runtime, is part of /workspace); another
# mount inside one still counts on its own.
dev = lambda p: os.stat(p).st_dev
writable = [d for d in writable if not any(d.startswith(w + "/") and dev(d) == dev(w) for w in writable)]
masked = {}
for p in ("/proc/config.gz", "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
          "/proc/kallsyms", "/proc/modules", "/proc/latency_stats"):
    try:
        masked[p] = len(open(p, "rb").read())
    except OSError as e:
        masked[p] = errno.errorcode.get(e.errno)
sizes = {}
for m in ("/tmp", "/workspace", "/dev/shm"):
    s = os.statvfs(m)
    sizes[m] = s.f_blocks * s.f_frsize
opts = {l.split()[4]: l.split()[5] for l in open("/proc/self/mountinfo")}
print(json.dumps({"writable": writable, "masked": masked, "sizes": sizes,
                  "ro": {m: opts.get(m, "")[:2] for m in ("/run", "/var/tmp", "/dev/mqueue", "/")},
                  "scanned": len(cands)}))
`;
  const r = await d.call(t, 'run_python', { code, timeout_s: 60 }, { timeoutMs: 90000 });
  assert.equal(r.structuredContent.status, 'ok', `the probe ran (${clip(r.structuredContent.stderr, 800)})`);
  const res = JSON.parse(r.structuredContent.stdout);
  t.note('surface', res);
  assert.ok(res.scanned > 100, 'the probe looked at every directory of the image');
  assert.deepEqual(res.writable, ['/dev/shm', '/tmp', '/workspace'], 'the writable places');
  for (const [p, v] of Object.entries(res.masked))
    assert.ok(v === 0 || v === 'ENOENT', `${p} is masked or absent (${v})`);
  assert.equal(res.sizes['/tmp'], 64 * MiB, '/tmp is 64 MiB');
  assert.equal(res.sizes['/workspace'], 256 * MiB, '/workspace is 256 MiB');
  assert.ok(res.sizes['/dev/shm'] > 0 && res.sizes['/dev/shm'] <= 64 * MiB, `/dev/shm is at most 64 MiB (${res.sizes['/dev/shm']})`);
  assert.deepEqual(res.ro, { '/run': 'ro', '/var/tmp': 'ro', '/dev/mqueue': 'ro', '/': 'ro' },
    '/run, /var/tmp and /dev/mqueue are read-only like the root');
});

// /proc/<pid>/status fields of a process.
function procStatus(pid) {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Object.fromEntries(text.split('\n').filter((l) => l.includes(':'))
    .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]));
}

// Descendants of pid, by /proc/*/stat's parent field.
function descendants(pid) {
  const parent = new Map();
  for (const ent of readdirSync('/proc')) {
    if (!/^\d+$/.test(ent)) continue;
    try {
      const stat = readFileSync(`/proc/${ent}/stat`, 'utf8');
      parent.set(Number(ent), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* gone */ }
  }
  const found = [];
  const walk = (p) => {
    for (const [c, pp] of parent) if (pp === p) { found.push(c); walk(c); }
  };
  walk(Number(pid));
  return found;
}

const ZERO_CAPS = '0000000000000000';

test('confinement: corral serve runs with NoNewPrivs 1, Seccomp 2 and no capabilities; so does an upstream server it spawns', async (t) => {
  const b = bridgeSetup(t, { servers: (root) => ({ everything: everythingServer(root) }) });
  const d = await t.daemon('confined', b.env);
  const st = procStatus(d.pid);
  t.note('corral', st);
  assert.equal(st.NoNewPrivs, '1', 'corral: NoNewPrivs 1');
  assert.equal(st.Seccomp, '2', 'corral: Seccomp 2 (a filter)');
  for (const k of ['CapEff', 'CapPrm', 'CapInh', 'CapAmb'])
    assert.equal(st[k], ZERO_CAPS, `corral: ${k} empty`);
  if (process.getuid() === 0) assert.equal(st.CapBnd, ZERO_CAPS, 'corral (root): the bounding set is empty too');
  assert.match(d.log, /confined: no-new-privileges, no capabilities/, 'corral says so in its log');

  // An upstream server: started by search_tools, a child of corral's.
  await hostTool(t, d, 'search_tools', { query: 'echo' });
  const kids = descendants(d.pid).filter((p) => {
    try { return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(b.root); } catch { return false; }
  });
  t.note('upstream_pids', kids);
  assert.ok(kids.length >= 1, 'the upstream server runs as corral\'s descendant');
  for (const p of kids) {
    const s = procStatus(p);
    assert.equal(s.NoNewPrivs, '1', `upstream ${p}: NoNewPrivs 1`);
    for (const k of ['CapEff', 'CapPrm', 'CapInh', 'CapAmb'])
      assert.equal(s[k], ZERO_CAPS, `upstream ${p}: ${k} empty`);
    if (process.getuid() === 0) assert.equal(s.CapBnd, ZERO_CAPS, `upstream ${p}: bounding set empty`);
  }
  // The sandbox calls still work under the daemon's filter.
  const r = await d.call(t, 'run_python', { code: 'print(6 * 7)' });
  assert.equal(r.structuredContent.stdout, '42\n');

  // Without confinement (confine: false) the same process keeps its rights:
  // the assertions above are about corral, not about this machine.
  if (process.getuid() === 0) {
    const u = await t.daemon('unconfined', { CORRAL_CONFINE: 'false', CORRAL_POOL_MAX: '0' });
    const us = procStatus(u.pid);
    t.note('unconfined', us);
    assert.equal(us.NoNewPrivs, '0', 'confine false: NoNewPrivs 0');
    assert.notEqual(us.CapEff, ZERO_CAPS, 'confine false: root keeps its capabilities');
    assert.match(u.log, /not confining corral itself/, 'and it warns');
  }
});

// Forged end records (every format the runtime has used, with the
// process's own pid and guessed tokens) and JSON-RPC frames (answers to
// the first execs with status ok and exit 0, output, a request), bare and
// behind a made-up tag, written on every descriptor the code has or can
// open, its own and PID 1's. Under runc PID 1's descriptors cannot be
// opened (it is not dumpable); gVisor does not apply that flag to
// /proc/1/fd, and there the forgeries reach the frame channel: corral must
// take none of them, and the runtime none written into its stdin
// (runtime/README.md, "Frame protocol").
const FORGE_PY = String.raw`
import json, os, time
me = os.getpid()
recs = [{'end': 0, 'signal': None, 'pid': me, 'token': t, 'error': None} for t in (None, '', '0' * 32, 'f' * 32)]
recs += [{'exit': 0, 'pid': me}, {'end': 0, 'pid': me}]
recs += [{'jsonrpc': '2.0', 'id': i, 'result': {'status': 'ok', 'exit_code': 0}} for i in range(1, 9)]
# Into the runtime's stdin, requests as the daemon writes them: a second
# exec with a run's id would be answered "already running", under that id.
recs += [{'jsonrpc': '2.0', 'id': i, 'method': 'sandbox/exec', 'params': {'language': 'python', 'code': 'print(1)'}}
         for i in range(1, 9)]
recs += [{'jsonrpc': '2.0', 'method': 'sandbox/output', 'params': {'stream': 'stdout', 'data': 'injected\n'}},
         {'jsonrpc': '2.0', 'id': 'x', 'method': 'tools/call', 'params': {'name': 'echo', 'arguments': {}}},
         {'language': 'python', 'code': 'print("injected")', 'servers': [], 'keep': True}]
lines = [json.dumps(r, separators=(',', ':')).encode() for r in recs]
junk = b''.join(l + b'\n' for l in lines) + b''.join(b'%064x ' % n + l + b'\n' for n, l in enumerate(lines))
fds = {int(n) for n in os.listdir('/proc/self/fd')}
paths = ['/proc/self/fd/%d' % n for n in sorted(fds)]
paths += ['/proc/1/fd/%d' % n for n in range(64)] + ['/dev/stdout', '/dev/stderr', '/dev/tty']
opened = 0
for p in paths:
    for mode in (os.O_WRONLY, os.O_RDWR):
        try:
            fds.add(os.open(p, mode | os.O_NONBLOCK))
            opened += 1
        except OSError:
            pass
wrote = 0
for fd in sorted(fds):
    try:
        os.set_blocking(fd, False)
        os.write(fd, junk)
        wrote += 1
    except OSError:
        pass
time.sleep(0.5)
print('after the forgery', len(fds), opened, wrote, flush=True)
time.sleep(0.5)
print('still mine')
`;

// What a run whose forgeries reached the channel must end with: not the
// forged ok, but the sandbox ended, and why.
function assertForgedEnded(sc, what) {
  assert.equal(sc.status, 'error', `${what}: status error, not a forged ok`);
  assert.equal(sc.error?.type, 'ChannelForged', `${what}: error type ChannelForged (${clip(JSON.stringify(sc.error), 400)})`);
  assert.match(sc.error?.message, /could not authenticate; it was ended/, `${what}: the message says why`);
  assert.notEqual(sc.exit_code, 0, `${what}: no forged exit code 0`);
  assert.doesNotMatch(sc.stdout, /^injected$/m, `${what}: no forged output (the code's own stdout may show its junk)`);
}

test('forged records: code writing end records and answers on every descriptor it can open neither ends its run nor reaches the next', async (t) => {
  const d = await t.daemon('forge');
  const one = await d.call(t, 'run_python', { code: FORGE_PY + 'raise SystemExit(3)' });
  const sc = one.structuredContent;
  t.note('one_shot', { status: sc.status, exit_code: sc.exit_code, error: sc.error,
    stdout_tail: sc.stdout.slice(-200) });
  if (GVISOR) {
    // The forgeries reach the channel: the sandbox is ended at the first.
    assertForgedEnded(sc, 'a one-shot run');
    assert.match(d.log, /(wrote a line without a tag on its frame channel|had a line on its runtime's input that corral did not write \(the runtime said so\)): corral ended it/, 'the log says so');
  } else {
    assert.equal(sc.exit_code, 3, 'a one-shot run ends with its own exit status');
    assert.equal(sc.status, 'error', 'and the status that goes with it');
    assert.match(sc.stdout, /after the forgery \d+ \d+ \d+\nstill mine\n$/, 'what it printed after the forgery is in its result');
    const w = /after the forgery (\d+) (\d+) (\d+)/.exec(sc.stdout);
    assert.ok(w && Number(w[3]) >= 3, `it wrote on several descriptors (${w && w[0]})`);
  }

  const s1 = await d.call(t, 'run_python', { code: 'x = 7', session: 'forge' });
  assert.equal(s1.structuredContent.status, 'ok', 'the session opens');
  const s2 = await d.call(t, 'run_python', { code: FORGE_PY + 'x = 8', session: 'forge' });
  t.note('session_forge', { status: s2.structuredContent.status, error: s2.structuredContent.error,
    stdout_tail: s2.structuredContent.stdout.slice(-200) });
  if (GVISOR) {
    assertForgedEnded(s2.structuredContent, 'a session run');
    const s3 = await d.call(t, 'run_python', { code: 'print("third", globals().get("x"))', session: 'forge' });
    t.note('session_next', s3.structuredContent);
    assert.doesNotMatch(s3.structuredContent.stdout ?? '', /^injected$|third 8/m, 'the next call sees neither forgeries nor the ended state');
    return;
  }
  assert.equal(s2.structuredContent.status, 'ok', 'the forging session run ends ok, by its own end');
  assert.match(s2.structuredContent.stdout, /after the forgery \d+ \d+ \d+\nstill mine\n$/, 'its output after the forgery is in its own result');
  const s3 = await d.call(t, 'run_python', { code: 'print("third", x)', session: 'forge' });
  t.note('session_next', s3.structuredContent);
  assert.equal(s3.structuredContent.stdout, 'third 8\n', 'the next call sees only its own output, in the same interpreter');
  assert.equal(s3.structuredContent.stderr, '', 'and nothing on stderr');
  assert.equal(s3.structuredContent.status, 'ok', 'and ends ok');
  await toolCall(t, d, 'session_close', { session: 'forge' });
}, { timeoutMs: 90000 });

// Requests written into the runtime's stdin only, as corral writes them:
// a second exec under each early id (the runtime would answer "already
// running" under the id of the run in flight, and that answer would have
// been the run's result), a list, a file write. Under runc PID 1's descriptors
// cannot be opened; under gVisor they can, and whatever takes the bytes,
// the run's result stays its own (the runtime refuses untagged lines).
const INJECT_PY = String.raw`
import json, os
reqs = [{'jsonrpc': '2.0', 'id': i, 'method': 'sandbox/exec', 'params': {'language': 'shell', 'code': 'true'}}
        for i in range(1, 9)]
reqs += [{'jsonrpc': '2.0', 'id': 99, 'method': 'sandbox/list', 'params': {'path': ''}},
         {'jsonrpc': '2.0', 'id': 98, 'method': 'sandbox/file/write',
          'params': {'path': 'forged', 'offset': 0, 'data': 'eAo='}}]
data = b''.join(json.dumps(r).encode() + b'\n' for r in reqs)
# PID 1 reads its frames on a copy of fd 0 (fd 0 itself is /dev/null):
# the descriptors it holds read-only, by their fdinfo flags.
targets = []
for n in range(64):
    try:
        flags = int(open('/proc/1/fdinfo/%d' % n).read().split('flags:')[1].split()[0], 8)
        if flags & 3 == 0 and not os.readlink('/proc/1/fd/%d' % n).startswith('/'):
            targets.append(n)
    except (OSError, IndexError, ValueError) as e:
        if n == 0:
            print('cannot open', e.errno, flush=True)
wrote = []
for n in targets:
    for mode in (os.O_WRONLY, os.O_RDWR):
        try:
            fd = os.open('/proc/1/fd/%d' % n, mode | os.O_NONBLOCK)
            os.write(fd, data)
            wrote.append(n)
            break
        except OSError:
            pass
print('injected into', targets, wrote, flush=True)
import time; time.sleep(1)
print('forged file:', os.path.exists('/workspace/forged'), flush=True)
`;

test('forged records: requests written into the runtime\'s stdin do not change the result of the run that wrote them', async (t) => {
  const d = await t.main();
  const r = await d.call(t, 'run_python', { code: INJECT_PY + 'raise SystemExit(3)' });
  const sc = r.structuredContent;
  t.note('inject', { status: sc.status, exit_code: sc.exit_code, error: sc.error, stdout: sc.stdout });
  assert.doesNotMatch(sc.stdout ?? '', /forged file: True/, 'the injected file write was not done');
  if (GVISOR) {
    // gVisor here reopens PID 1's read-only host descriptor read-only
    // (EBADF on write), and a worker pipe takes the bytes as the run's own
    // output; where a reopened stdin takes them, the runtime refuses them.
    if (sc.error?.type === 'ChannelForged') {
      assertForgedEnded(sc, 'a run that wrote into the runtime\'s stdin');
      assert.match(d.log, /had a line on its runtime's input that corral did not write \(the runtime said so\): corral ended it/, 'the log says the runtime reported it');
    } else {
      assert.equal(sc.exit_code, 3, 'the run ends with its own exit status, not an answer to an injected exec');
      assert.equal(sc.error, null, 'and no error of the runtime\'s');
    }
  } else {
    assert.match(sc.stdout, /^cannot open 13\ninjected into \[\] \[\]\n/, 'under runc PID 1\'s descriptors cannot be opened (EACCES)');
    assert.equal(sc.exit_code, 3, 'and the run ends with its own exit status');
  }
}, { timeoutMs: 60000 });


// host's; under runc, the host's. dmesg (syslog) is closed by corral's
// profile either way; with a profile that opens it, gVisor's own log shows.
test('kernel: uname -r and dmesg show gVisor under runsc and the host kernel under runc', async (t) => {
  const { release } = await import('node:os');
  const probe = 'uname -r; dmesg 2>&1 | head -n 2';
  const d = await t.main();
  const r = await d.call(t, 'run_shell', { command: probe });
  const [kernel, ...log] = r.structuredContent.stdout.split('\n');
  t.note('kernel', { runtime: RUNTIME, host: release(), sandbox: kernel, dmesg: log.join(' | ') });
  assert.equal(r.structuredContent.status, 'ok', 'the probe ran');
  if (GVISOR)
    assert.notEqual(kernel, release(), `the sandbox's kernel (${kernel}) is not the host's`);
  else
    assert.equal(kernel, release(), "under runc the sandbox shares the host's kernel");
  assert.match(log.join('\n'), /Operation not permitted/, "dmesg is closed by corral's profile");
  // A profile that allows syslog (Docker's default denies it without
  // CAP_SYSLOG): gVisor's own log then shows; under runc, never gVisor.
  const { mkdtempSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const file = `${mkdtempSync(`${tmpdir()}/corral-kernel-`)}/allow.json`;
  writeFileSync(file, JSON.stringify({ defaultAction: 'SCMP_ACT_ALLOW', syscalls: [] }));
  const e = await t.daemon('kernel-open-seccomp', { CORRAL_SECCOMP: file, CORRAL_POOL_MAX: '0' });
  const r2 = await e.call(t, 'run_shell', { command: probe });
  t.note('engine_profile', r2.structuredContent.stdout);
  if (GVISOR)
    assert.match(r2.structuredContent.stdout, /gVisor/, "with syslog allowed, dmesg shows gVisor's log");
  else
    assert.doesNotMatch(r2.structuredContent.stdout, /gVisor/, 'no gVisor under runc');
}, { timeoutMs: 60000 });
