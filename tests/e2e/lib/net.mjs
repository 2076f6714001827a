// Small network helpers shared by the e2e suites and the benchmarks.
import net from 'node:net';

// A TCP port on 127.0.0.1 that nothing listens on (now).
export async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}
