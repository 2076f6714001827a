#!/usr/bin/env python3
"""Assemble the sandbox runtime from its parts (a build step).

    assemble.py [--pad BYTES] [--check-only] OUTPUT.c PROTOCOL.h PART.py...

The parts (runtime/base.py, worker.py, api.py, files.py, supervisor.py,
in that order) are one program split by concern: they share one namespace,
so a part uses the names of those before it at its top level, and any
name inside its functions. The assembler puts the RT_* constants of
PROTOCOL.h first (without the prefix), then the parts, drops comments and
blank lines (never inside a string), compiles the result to check it, and
writes into OUTPUT.c the C string corral_runtime_src, its length
corral_runtime_len, and corral_runtime_loader: the loader, the short
program the container's command runs (python3 -I -S -B -c LOADER). The
daemon writes the runtime's bytes first on the container's stdin; the
loader reads exactly that many, checks their SHA-256 against the one
built into it, and runs them (loader() below). So the runtime's size is
bounded by nothing but the time it takes to send; the build prints it.
--pad makes the runtime at least BYTES long (a comment at its end), to
test a large one. tests/runtime/test_runtime.py assembles the same way
(assemble(), loader()), so the runtime it tests is the one that ships.
"""
import hashlib
import io
import re
import sys
import tokenize

# The loader's exit status when the bytes on its stdin are short or not
# this build's runtime (EX_SOFTWARE).
LOADER_FAILED = 70
# The parts, in the order they are joined (meson.build passes the same).
PARTS = ('base.py', 'worker.py', 'api.py', 'files.py', 'supervisor.py')
EXPR = re.compile(r'^[0-9 ()*<]+$')


def constants(header):
    """NAME = value lines from the RT_NAME defines of a C header."""
    out = []
    for line in header.splitlines():
        m = re.match(r'#define\s+RT_([A-Z0-9_]+)\s+(.+?)\s*(/\*.*\*/)?\s*$', line)
        if not m:
            continue
        expr = m.group(2)
        if not EXPR.match(expr) or '<' in expr.replace('<<', ''):
            raise ValueError('RT_%s: %r is not an integer expression of literals, * and <<'
                             % (m.group(1), expr))
        out.append('%s = %d' % (m.group(1), eval(expr, {'__builtins__': {}})))
    if not out:
        raise ValueError('no RT_ constants in the protocol header')
    return out


def strip(source):
    """The source without comments and blank lines; strings untouched."""
    lines = source.splitlines(keepends=True)
    cut = {}             # line number -> column where its comment starts
    in_string = set()    # lines that lie inside a multi-line string
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            cut[tok.start[0]] = tok.start[1]
        elif tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
            in_string.update(range(tok.start[0] + 1, tok.end[0] + 1))
    out = []
    for n, line in enumerate(lines, 1):
        if n in in_string:
            out.append(line)
            continue
        if n in cut:
            line = line[:cut[n]].rstrip() + '\n'
        if line.strip():
            out.append(line.rstrip() + '\n')
    return ''.join(out)


def assemble(header_path, part_paths):
    """The runtime's source, as the daemon sends it."""
    with open(header_path, encoding='utf-8') as f:
        parts = ['\n'.join(constants(f.read())) + '\n']
    for p in part_paths:
        with open(p, encoding='utf-8') as f:
            parts.append(strip(f.read()))
    source = ''.join(parts)
    compile(source, '<corral runtime>', 'exec')
    return source


def pad(source, size):
    """source made at least size bytes long by comment lines at its end."""
    short = size - len(source.encode('utf-8'))
    if short <= 0:
        return source
    line = '#' * 99 + '\n'
    return source + line * (short // 100) + '#' * (short % 100)


def loader(source):
    """The program the container runs: it reads the runtime, exactly its
    length, from fd 0 with os.read (a buffered sys.stdin would take the
    frames behind it too), checks its SHA-256, and runs it in __main__
    under the name `-c` code has, '<string>', so that it behaves as it did
    when it was the -c argument itself.  Short or wrong: one line on
    stderr and exit status LOADER_FAILED.

    A pool sandbox with page merging (CORRAL_MERGE=1) first executes
    itself again, once (the new one is not -I), with address randomization
    off (personality ADDR_NO_RANDOMIZE) and hash seed 0, so that the heaps
    its preloads build are the same, byte for byte, in every such sandbox;
    the interpreter's PYTHON* variables are passed renamed CORRAL_KEPT_*
    (the runtime puts them back: ignored, as under -I).  Refused (no
    personality syscall) or before Python 3.11 (no -P): it goes on as it
    is, merging less."""
    data = source.encode('utf-8')
    return ('def _l():\n'
            ' import os,sys,hashlib\n'
            ' del globals()["_l"]\n'
            ' if sys.flags.isolated and os.environ.get("CORRAL_MERGE")=="1" and sys.version_info>=(3,11):\n'
            '  try:\n'
            '   import ctypes\n'
            '   if ctypes.CDLL(None).personality(0x40000)!=-1:\n'
            '    a=open("/proc/self/cmdline","rb").read().split(b"\\0")\n'
            '    e={("CORRAL_KEPT_"+k if k[:6]=="PYTHON" else k):v for k,v in os.environ.items()}\n'
            '    e["PYTHONHASHSEED"]="0"\n'
            '    os.execve(sys.executable,[sys.executable,"-s","-S","-B","-P","-c",a[a.index(b"-c")+1]],e)\n'
            '  except Exception:pass\n'
            ' b=bytearray()\n'
            ' while len(b)<%d:\n'
            '  c=os.read(0,%d-len(b))\n'
            '  if not c:break\n'
            '  b+=c\n'
            ' if hashlib.sha256(b).hexdigest()!="%s":\n'
            '  sys.stderr.write("corral-loader: the runtime on stdin is %%s\\n"%%("short"if len(b)<%d else"not this build\'s"))\n'
            '  sys.exit(%d)\n'
            ' return bytes(b)\n'
            'exec(compile(_l(),"<string>","exec"))\n'
            % (len(data), len(data), hashlib.sha256(data).hexdigest(), len(data), LOADER_FAILED))


def c_literal(text):
    out = []
    for line in text.splitlines(keepends=True):
        esc = ''.join(c if 32 <= ord(c) < 127 and c not in '"\\?' else '\\%03o' % ord(c)
                      for c in line.encode('utf-8').decode('latin-1'))
        out.append('    "%s"\n' % esc)
    return ''.join(out)


def c_source(source):
    return ''.join([
        '/* Generated by runtime/assemble.py; do not edit. */\n',
        '#include <stddef.h>\n',
        'const char corral_runtime_src[] =\n', c_literal(source), ';\n',
        'const size_t corral_runtime_len = %d;\n' % len(source.encode('utf-8')),
        'const char corral_runtime_loader[] =\n', c_literal(loader(source)), ';\n'])


def main(argv):
    at_least, check_only = 0, False
    while argv and argv[0].startswith('--'):
        if argv[0] == '--pad' and len(argv) > 1:
            at_least, argv = int(argv[1]), argv[2:]
        elif argv[0] == '--check-only':
            check_only, argv = True, argv[1:]
        else:
            break
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out, header, parts = argv[0], argv[1], argv[2:]
    if tuple(p.rsplit('/', 1)[-1] for p in parts) != PARTS:
        sys.stderr.write('assemble.py: the parts must be %s, in that order\n' % ', '.join(PARTS))
        return 1
    try:
        source = pad(assemble(header, parts), at_least)
    except (OSError, ValueError, SyntaxError) as e:
        sys.stderr.write('assemble.py: %s\n' % e)
        return 1
    if '\0' in source:
        sys.stderr.write('assemble.py: the runtime must not contain NUL\n')
        return 1
    print('assemble.py: the runtime is %d bytes (sha256 %s), its loader %d'
          % (len(source.encode('utf-8')), hashlib.sha256(source.encode('utf-8')).hexdigest()[:16],
             len(loader(source))))
    if not check_only:
        with open(out, 'w', encoding='utf-8') as f:
            f.write(c_source(source))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
