#!/usr/bin/env python3
"""Seeded mutation fuzzing of the sandbox proxy's request-head parser,
printing TAP.

    fuzz_proxy_head.py [ITERATIONS [SEED]]     (default 5000 and 27)

The runtime is assembled as the build does (runtime/assemble.py) and
proxy_head is taken out of it, so the parser fuzzed is the one that ships.
Each iteration mutates heads of a small corpus (bit flips, bytes that matter
to HTTP put in, cuts, repeats, splices, runs long enough to cross the
16384-byte bound) and checks:

- proxy_head returns (0, 0) (more is needed), (200, n), (400, 0) or
  (431, 0), and raises nothing;
- an accepted head is the bytes up to the first CRLFCRLF, at most 16384 of
  them, its request line METHOD SP TARGET SP HTTP/1.d, each line after it
  NAME ":" value with a token name and no CR, LF or NUL in the value;
- it agrees with a second, regular-expression reading of the same rules;
- its answers are final: bytes that come later never change a 200, 400 or
  431, and every prefix of an accepted head is "more is needed" (the proxy
  never refuses what more bytes would have made a good head).
A failure prints the input (repr, cut) and the seed that found it.
"""
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_DIR = os.path.join(HERE, '..', '..', 'runtime')
sys.path.insert(0, RUNTIME_DIR)
import assemble  # noqa: E402

NS = {'__name__': 'corral_fuzz'}
exec(compile(assemble.assemble(os.path.join(RUNTIME_DIR, 'protocol.h'),
                               [os.path.join(RUNTIME_DIR, p) for p in assemble.PARTS]),
             'corral_runtime.py', 'exec'), NS)
proxy_head, MAX = NS['proxy_head'], NS['NET_HEAD_MAX']

TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
REQUEST_LINE = re.compile(TOKEN + rb' [\x21-\x7e]+ HTTP/1\.[0-9]\Z')
HEADER_LINE = re.compile(TOKEN + rb':[^\r\n\0]*\Z')

CORPUS = [
    b'GET http://files.test/x HTTP/1.1\r\nHost: files.test\r\n\r\n',
    b'POST http://api.test:8443/v1 HTTP/1.1\r\nHost: api.test:8443\r\nContent-Length: 5\r\n'
    b'Content-Type: application/json\r\n\r\n{"a":',
    b'CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nProxy-Connection: keep-alive\r\n\r\n',
    b'GET / HTTP/1.0\r\n\r\n',
    b'HEAD http://x/ HTTP/1.1\r\nX-Empty:\r\nX-Tab:\tv\t\r\nX-High: \xff\xfe\r\n\r\n',
    b'GET http://files.test/ HTTP/1.1\r\nX: ' + b'a' * (MAX - 40) + b'\r\n\r\n',
    b'GET /x\r\n\r\n',
    b'GET http://x/ HTTP/1.1\r\nHost',
]
SPECIAL = [b'\r', b'\n', b'\r\n', b'\r\n\r\n', b' ', b':', b'\0', b'\t', b'\x7f', b'\xff', b'/', b'HTTP/1.1']


def reference(buf):
    """The same rules read another way: what proxy_head should answer."""
    end = buf.find(b'\r\n\r\n', 0, MAX)
    first = buf.find(b'\r\n', 0, MAX)
    if first >= 0 and not REQUEST_LINE.match(buf[:first]):
        return 400, 0
    if end < 0:
        return (431, 0) if len(buf) >= MAX else (0, 0)
    lines = buf[first + 2:end].split(b'\r\n') if end > first else []
    if not all(HEADER_LINE.match(line) for line in lines):
        return 400, 0
    return 200, end + 4


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        at = rng.randint(0, len(data))
        if op == 0 and data:
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at:at] = rng.choice(SPECIAL)
        elif op == 2:
            data[at:at] = bytes([rng.randrange(256)])
        elif op == 3:
            del data[at:at + rng.randint(1, 16)]
        elif op == 4 and data:
            i = rng.randrange(len(data))
            data[at:at] = data[i:i + rng.randint(1, 64)]
        elif op == 5:
            del data[at:]
        elif op == 6:
            other = rng.choice(CORPUS)
            data[at:] = other[rng.randint(0, len(other)):]
        else:  # around the bound
            data[at:at] = bytes([rng.choice(b'ab \r\n:')]) * max(0, rng.choice((1, 100, MAX - len(data), MAX - len(data) + 1)))
    return bytes(data)


def main(argv):
    iterations = int(argv[0]) if argv else 5000
    seed = int(argv[1]) if len(argv) > 1 else 27
    rng = random.Random(seed)
    problems = {'raised': [], 'shape': [], 'accepted': [], 'reference': [], 'final': []}
    seen = {}

    def note(kind, buf, detail):
        if len(problems[kind]) < 3:
            problems[kind].append('%r (%d bytes): %s' % (buf[:120], len(buf), detail))

    def parse(buf, kind='raised'):
        try:
            return proxy_head(bytearray(buf) if rng.random() < 0.5 else buf)  # the runtime passes a bytearray
        except Exception as e:  # noqa: BLE001  anything raised is a finding
            note(kind, buf, '%s: %s' % (type(e).__name__, e))
            return None

    for _ in range(iterations):
        buf = mutate(rng, rng.choice(CORPUS))
        got = parse(buf)
        if got is None:
            continue
        seen[got[0]] = seen.get(got[0], 0) + 1
        if got not in ((0, 0), (400, 0), (431, 0)) and not (
                got[0] == 200 and isinstance(got[1], int) and 0 < got[1] <= MAX):
            note('shape', buf, got)
            continue
        if got != reference(buf):
            note('reference', buf, '%r, the rules say %r' % (got, reference(buf)))
        if got[0] == 200:
            n = got[1]
            head = buf[:n]
            lines = head[:-4].split(b'\r\n')
            if not head.endswith(b'\r\n\r\n') or head.find(b'\r\n\r\n') != n - 4 or b'\0' in head \
                    or not REQUEST_LINE.match(lines[0]) or len(lines[0].split(b' ')) != 3 \
                    or any(b'\r' in x or b'\n' in x or not HEADER_LINE.match(x) for x in lines[1:]):
                note('accepted', buf, 'head %r' % head[:200])
            for cut in {0, n - 1, n - 2, rng.randrange(n)}:
                if parse(buf[:cut], 'final') != (0, 0):
                    note('final', buf, 'its prefix of %d bytes is %r' % (cut, parse(buf[:cut])))
        if got[0]:
            more = buf + mutate(rng, rng.choice(CORPUS))
            if parse(more, 'final') != got:
                note('final', more, '%r once more came, %r before' % (parse(more), got))
    print('TAP version 13')
    print('# seed %d, %d inputs; answers: %s' % (seed, iterations, ', '.join(
        '%s %d' % ({0: 'more needed', 200: 'accepted'}.get(k, k), v) for k, v in sorted(seen.items()))))
    points = [
        ('raised', 'proxy_head never raises'),
        ('shape', 'it answers (0, 0), (200, n <= 16384), (400, 0) or (431, 0)'),
        ('accepted', 'an accepted head ends at the first CRLFCRLF, its request line and header lines well formed'),
        ('reference', 'it agrees with a second reading of the rules'),
        ('final', 'its answers are final, and every prefix of an accepted head is "more needed"'),
    ]
    failed = 0
    for i, (kind, name) in enumerate(points, 1):
        ok = not problems[kind]
        failed += not ok
        print('%s %d - %s' % ('ok' if ok else 'not ok', i, name))
        for p in problems[kind]:
            print('#   ' + p)
    covered = all(seen.get(k, 0) >= iterations // 100 for k in (0, 200, 400, 431))
    failed += not covered
    print('%s %d - the inputs reach every answer (at least 1%% each)' % ('ok' if covered else 'not ok',
                                                                        len(points) + 1))
    print('1..%d' % (len(points) + 1))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
