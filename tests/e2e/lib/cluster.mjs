// Three corral services, each in a network namespace of its own, behind
// HAProxy with the shipped contrib/haproxy/corral.cfg: the shape of
// issue "past one machine", made on one machine for tests/e2e/scaleout.mjs
// and tests/bench/scaleout.mjs. Needs root (ip netns), haproxy and a
// running engine; every host shares that engine (unix sockets cross
// network namespaces), each keeps its own pool and sessions.
//
//   const c = new Cluster({ bin, engine, image });
//   await c.start();            // namespaces, three services, HAProxy, all UP
//   c.url, c.token              // where clients go, and with what
//   await c.kill(1); await c.startHost(1); await c.term(2);
//   await c.stop();             // everything made, gone

import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './net.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../../..');
export const HAPROXY_CFG = path.join(ROOT, 'contrib/haproxy/corral.cfg');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// What a machine needs for the cluster; null when it has it, else why not.
export function clusterMissing() {
  if (process.getuid() !== 0) return 'needs root (network namespaces)';
  for (const tool of ['ip', 'haproxy']) {
    try {
      execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
    } catch {
      return `needs ${tool}`;
    }
  }
  return null;
}

const ip = (...args) => execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
const ipQuiet = (...args) => {
  try {
    ip(...args);
  } catch { /* already gone */ }
};

export class Cluster {
  constructor({ bin, engine, image, hosts = 3, env = {}, prefix = 'crl' }) {
    this.bin = bin;
    this.engine = engine;
    this.image = image;
    this.n = hosts;
    this.extraEnv = env;
    // Names short enough for interface names (15 bytes), unique per run.
    this.tag = `${prefix}${process.pid % 10000}`;
    this.bridge = `${this.tag}b`;
    this.subnet = `10.${200 + (process.pid % 50)}.${process.pid % 250}`;
    this.dir = mkdtempSync(path.join(tmpdir(), 'corral-cluster-'));
    this.token = randomBytes(32).toString('hex');
    this.lbHost = 'lb.corral.test';
    this.hosts = [];
    for (let i = 0; i < hosts; i++) {
      this.hosts.push({ i, name: `corral${i + 1}`, ns: `${this.tag}h${i + 1}`, veth: `${this.tag}v${i + 1}`,
        addr: `${this.subnet}.${11 + i}`, port: 8080, proc: null, pids: [], log: '' });
    }
  }

  hostAddr(h) { return `${h.addr}:${h.port}`; }

  network() {
    ip('link', 'add', this.bridge, 'type', 'bridge');
    ip('addr', 'add', `${this.subnet}.1/24`, 'dev', this.bridge);
    ip('link', 'set', this.bridge, 'up');
    for (const h of this.hosts) {
      ip('netns', 'add', h.ns);
      ip('link', 'add', h.veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', h.ns);
      ip('link', 'set', h.veth, 'master', this.bridge);
      ip('link', 'set', h.veth, 'up');
      ip('-n', h.ns, 'addr', 'add', `${h.addr}/24`, 'dev', 'eth0');
      ip('-n', h.ns, 'link', 'set', 'eth0', 'up');
      ip('-n', h.ns, 'link', 'set', 'lo', 'up');
    }
  }

  hostEnv(h) {
    const base = path.join(this.dir, h.name);
    mkdirSync(path.join(base, 'run'), { recursive: true, mode: 0o700 });
    const env = { ...process.env, XDG_RUNTIME_DIR: path.join(base, 'run'), XDG_CONFIG_HOME: path.join(base, 'config'),
      CORRAL_ENGINE: this.engine, CORRAL_IMAGE: this.image, CORRAL_IMAGES: this.image,
      CORRAL_HOST_SERVERS: 'false', CORRAL_AUDIT_LOG: 'off', CORRAL_TOKEN: this.token,
      CORRAL_HTTP_PUBLIC: 'true', CORRAL_HTTP_HOSTS: this.lbHost, CORRAL_LOG_LEVEL: 'info', ...this.extraEnv };
    return env;
  }

  // One host's corral, started in its namespace; resolves once it answers
  // /health (ready or not).
  async startHost(i) {
    const h = this.hosts[i];
    h.log = '';
    h.proc = spawn('ip', ['netns', 'exec', h.ns, this.bin, 'serve', '--listen', `tcp:${this.hostAddr(h)}`],
      { env: this.hostEnv(h), stdio: ['ignore', 'ignore', 'pipe'] });
    h.proc.stderr.on('data', (d) => { h.log += d; });
    h.exited = new Promise((r) => h.proc.on('exit', (code, sig) => r({ code, sig })));
    // `ip netns exec` execs corral: the same pid.
    h.pids.push(h.proc.pid);
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      const r = await this.health(i).catch(() => null);
      if (r) return h;
      if (h.proc.exitCode !== null) break;
      await sleep(100);
    }
    throw new Error(`${h.name} did not start: ${h.log.slice(-2000)}`);
  }

  // GET /health on one host straight (not through the balancer).
  health(i) {
    const h = this.hosts[i];
    return new Promise((resolve, reject) => {
      const req = http.get({ host: h.addr, port: h.port, path: '/health', timeout: 3000,
        headers: { Authorization: `Bearer ${this.token}`, Host: this.lbHost } }, (res) => {
        let body = '';
        res.on('data', (d) => { body += d; });
        res.on('end', () => resolve({ status: res.statusCode, body: body ? JSON.parse(body) : null }));
      });
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
    });
  }

  async startBalancer() {
    this.lbPort = await freePort();
    this.admin = path.join(this.dir, 'haproxy.sock');
    const env = { ...process.env, CORRAL_LB_BIND: `127.0.0.1:${this.lbPort}`, CORRAL_TOKEN: this.token,
      CORRAL_LB_HOST: this.lbHost, CORRAL_LB_ADMIN: this.admin };
    for (const h of this.hosts) env[`CORRAL_${h.i + 1}`] = this.hostAddr(h);
    this.lbEnv = env;
    this.lbLog = '';
    this.lb = spawn('haproxy', ['-db', '-f', HAPROXY_CFG], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.lb.stdout.on('data', (d) => { this.lbLog += d; });
    this.lb.stderr.on('data', (d) => { this.lbLog += d; });
    this.url = new URL(`http://127.0.0.1:${this.lbPort}/mcp`);
  }

  // One command on HAProxy's admin socket, its answer.
  adminCmd(cmd) {
    return new Promise((resolve, reject) => {
      const s = net.connect(this.admin);
      let out = '';
      s.on('connect', () => s.end(cmd + '\n'));
      s.on('data', (d) => { out += d; });
      s.on('end', () => resolve(out));
      s.on('error', reject);
    });
  }

  // { corral1: 'UP', ... } as HAProxy's checks see them.
  async serverStates() {
    const csv = await this.adminCmd('show stat');
    const states = {};
    for (const line of csv.split('\n')) {
      const f = line.split(',');
      if (f[0] === 'corral' && f[1] !== 'BACKEND') states[f[1]] = f[17];
    }
    return states;
  }

  async waitStates(want, ms = 20000) {
    const deadline = Date.now() + ms;
    let states = {};
    while (Date.now() < deadline) {
      states = await this.serverStates().catch(() => ({}));
      if (Object.entries(want).every(([k, v]) => (states[k] || '').startsWith(v))) return states;
      await sleep(100);
    }
    throw new Error(`HAProxy's servers are ${JSON.stringify(states)}, not ${JSON.stringify(want)}`);
  }

  async start() {
    this.network();
    for (let i = 0; i < this.n; i++) await this.startHost(i);
    await this.startBalancer();
    await this.waitStates(Object.fromEntries(this.hosts.map((h) => [h.name, 'UP'])));
  }

  async kill(i, signal = 'SIGKILL') {
    const h = this.hosts[i];
    h.proc.kill(signal);
    return h.exited;
  }

  // The engine's containers labelled with one corral's pid.
  static async containersOfPid(pid, engineGet) {
    const filters = encodeURIComponent(JSON.stringify({ label: [`io.corral.pid=${pid}`] }));
    return (await engineGet(`/containers/json?all=1&filters=${filters}`)).length;
  }

  // The engine's containers labelled with a pid of this host's corrals.
  async containersOf(i, engineGet) {
    let n = 0;
    for (const pid of this.hosts[i].pids) n += await Cluster.containersOfPid(pid, engineGet);
    return n;
  }

  // Options for a StreamableHTTPClientTransport through the balancer, with
  // the token; `served.host` is the host that answered last (the
  // balancer's X-Corral-Server).
  // `name`: a Corral-Client name (its sessions belong to the name).
  clientOptions(name = null) {
    const served = { host: null };
    const fetchTap = async (url, init) => {
      const res = await fetch(url, init);
      served.host = res.headers.get('x-corral-server') || served.host;
      return res;
    };
    const headers = { Authorization: `Bearer ${this.token}`, ...(name ? { 'Corral-Client': name } : {}) };
    return { served, options: { fetch: fetchTap, requestInit: { headers } } };
  }

  async stop() {
    for (const h of this.hosts) {
      if (h.proc && h.proc.exitCode === null && h.proc.signalCode === null) {
        h.proc.kill('SIGINT');
        const t = setTimeout(() => h.proc.kill('SIGKILL'), 20000);
        await h.exited;
        clearTimeout(t);
      }
    }
    if (this.lb && this.lb.exitCode === null) {
      this.lb.kill('SIGTERM');
      await new Promise((r) => (this.lb.exitCode !== null ? r() : this.lb.on('exit', r)));
    }
    for (const h of this.hosts) ipQuiet('netns', 'del', h.ns);
    ipQuiet('link', 'del', this.bridge);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

// GET on a unix-socket engine (unix:///path), its JSON.
export function engineGetter(engine) {
  const socketPath = engine.replace(/^unix:\/\//, '');
  return (p) => new Promise((resolve, reject) => {
    http.get({ socketPath, path: p }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`engine ${p}: ${res.statusCode} ${body.slice(0, 200)}`));
        else resolve(JSON.parse(body));
      });
    }).on('error', reject);
  });
}
