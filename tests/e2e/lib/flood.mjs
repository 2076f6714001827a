// A slow-header flood, run by service.mjs as another uid:
//
//   node flood.mjs PORT COUNT DURATION_MS WAIT_MS
//
// COUNT TCP connections to 127.0.0.1:PORT, each sending a request line and
// headers one byte a second and never ending them. A connection the server
// closes is opened again a second later, until DURATION_MS has passed; then
// it waits up to WAIT_MS for the server to close the rest. Prints "flooding"
// once COUNT connections were made, and at the end one JSON line: {opened,
// closedByServer, stillOpen, maxLifeMs}, where a life runs from connect to
// the server's close. Uses node's own modules only
// (it runs as a user that cannot read node_modules).
import net from 'node:net';

const [port, count, durationMs, waitMs] = process.argv.slice(2).map(Number);
const REQUEST = 'POST /mcp HTTP/1.1\r\nHost: localhost\r\nX-Slow: ';
const start = Date.now();
const live = new Set();
let opened = 0;
let closedByServer = 0;
let maxLifeMs = 0;
let said = false;

function open() {
  const s = net.connect({ port, host: '127.0.0.1' });
  let t0 = 0;
  let i = 0;
  let timer = null;
  const tick = () => {
    if (s.destroyed) return;
    s.write(i < REQUEST.length ? REQUEST[i] : 'a');
    i++;
    timer = setTimeout(tick, 1000);
  };
  s.on('connect', () => {
    t0 = Date.now();
    opened++;
    live.add(s);
    if (!said && opened >= count) {
      said = true;
      process.stdout.write('flooding\n');
    }
    tick();
  });
  s.on('error', () => {});
  s.on('close', () => {
    clearTimeout(timer);
    if (t0 && live.delete(s)) {
      closedByServer++;
      maxLifeMs = Math.max(maxLifeMs, Date.now() - t0);
    }
    if (Date.now() - start < durationMs) setTimeout(open, 1000);
  });
}

for (let k = 0; k < count; k++) open();
await new Promise((r) => setTimeout(r, durationMs));
const end = Date.now() + waitMs;
while (live.size > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
const stillOpen = live.size;
for (const s of live) {
  live.delete(s);
  s.destroy();
}
process.stdout.write(JSON.stringify({ opened, closedByServer, stillOpen, maxLifeMs }) + '\n');
process.exit(0);
