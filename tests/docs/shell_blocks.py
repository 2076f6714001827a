#!/usr/bin/env python3
"""Runs the shell blocks of the READMEs that are marked for it, as a fresh
account would, and fails when one fails.

A block is marked by the word `test` after its language in the fence's info
string (```sh test); hosts render it as sh all the same. Mark a block only
when a fresh account can run it as written with no effect on the machine
beyond its home directory: here the home is a new temporary directory, with
nothing in ~/.config, and the working directory is a checkout (`build/corral`
is the binary under test, `contrib/` the repository's).

`systemctl --user` needs the user's service manager, and enabling a unit
there would change the account for good; so in a block `systemctl` is a
stand-in that checks what a real one would need: for enable, start and
status (with --user), the units are installed under ~/.config/systemd/user,
have an [Install] section, and pass `systemd-analyze --user verify` (with
ExecStart pointed at the binary under test, where /usr/local/bin/corral
belongs to an install step that needs root); daemon-reload passes. Any
other use of systemctl fails the block.

    python3 tests/docs/shell_blocks.py [--corral build/corral] [FILE.md ...]

Prints TAP; exit status 0 when every marked block ran, 1 when one failed or
none was found.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FENCE = re.compile(r'^(`{3,})\s*(\S+)?(.*)$')
TIMEOUT_S = 120

SYSTEMCTL = r'''#!/bin/sh
# The README test's stand-in for systemctl (tests/docs/shell_blocks.py).
user=0
verb=
units=
for a in "$@"; do
    case "$a" in
    --user) user=1 ;;
    --now|--quiet|--no-pager) ;;
    -*) echo "systemctl (test stand-in): option $a is not known here" >&2; exit 2 ;;
    *) if [ -z "$verb" ]; then verb=$a; else units="$units $a"; fi ;;
    esac
done
if [ "$user" != 1 ]; then
    echo "systemctl (test stand-in): only --user is for a fresh account" >&2
    exit 2
fi
echo "systemctl --user $verb$units" >>"$STAND_IN_LOG"
case "$verb" in
daemon-reload) exit 0 ;;
enable|start|status|restart) ;;
*) echo "systemctl (test stand-in): --user $verb is not known here" >&2; exit 2 ;;
esac
dir="$HOME/.config/systemd/user"
[ -n "$units" ] || { echo "systemctl --user $verb: no unit named" >&2; exit 1; }
copy=$(mktemp -d)
for u in $units; do
    if [ ! -f "$dir/$u" ]; then
        echo "Failed to $verb unit: Unit file $u does not exist (not in $dir)" >&2
        exit 1
    fi
    if [ "$verb" = enable ] && ! grep -q '^\[Install\]' "$dir/$u"; then
        echo "systemctl --user enable $u: the unit has no [Install] section" >&2
        exit 1
    fi
done
if command -v systemd-analyze >/dev/null; then
    for f in "$dir"/*; do
        sed "s|/usr/local/bin/corral|$CORRAL_UNDER_TEST|g" "$f" >"$copy/${f##*/}"
    done
    set --
    for u in $units; do set -- "$@" "$copy/$u"; done
    case "$units" in
    *corral.socket*) [ -f "$copy/corral.service" ] && set -- "$@" "$copy/corral.service" ;;
    esac
    if ! out=$(systemd-analyze --user verify "$@" 2>&1) || [ -n "$out" ]; then
        echo "systemd-analyze --user verify:$units: $out" >&2
        rm -rf "$copy"
        exit 1
    fi
fi
rm -rf "$copy"
exit 0
'''


def marked_blocks(path):
    """(line, text) of each ```sh test block in the file."""
    blocks = []
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, rest = m.group(1), m.group(2) or '', m.group(3).split()
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        if lang in ('sh', 'bash', 'shell') and 'test' in rest:
            blocks.append((start + 1, '\n'.join(body) + '\n'))
    return blocks


def run_block(text, corral):
    """Runs one block in a fresh account's setting: (ok, what it printed)."""
    root = tempfile.mkdtemp(prefix='corral-readme-')
    try:
        home, work, shim = (os.path.join(root, d) for d in ('home', 'work', 'bin'))
        run_dir, tmp = os.path.join(root, 'run'), os.path.join(root, 'tmp')
        for d in (home, work, shim, run_dir, tmp):
            os.mkdir(d, 0o700)
        os.mkdir(os.path.join(work, 'build'))
        os.symlink(corral, os.path.join(work, 'build', 'corral'))
        for d in ('contrib', 'images', 'policy'):
            os.symlink(os.path.join(TOP, d), os.path.join(work, d))
        with open(os.path.join(shim, 'systemctl'), 'w') as f:
            f.write(SYSTEMCTL)
        os.chmod(os.path.join(shim, 'systemctl'), 0o755)
        log = os.path.join(root, 'stand-in.log')
        env = {
            'PATH': shim + ':/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
            'HOME': home,
            'USER': os.environ.get('USER', 'user'),
            'LANG': 'C.UTF-8',
            'TMPDIR': tmp,
            'XDG_RUNTIME_DIR': run_dir,
            'STAND_IN_LOG': log,
            'CORRAL_UNDER_TEST': corral,
        }
        try:
            p = subprocess.run(['bash', '-euo', 'pipefail', '-c', text], cwd=work, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
            out, ok = p.stdout.decode('utf-8', 'replace'), p.returncode == 0
            if not ok:
                out += '(exit status %d)\n' % p.returncode
        except subprocess.TimeoutExpired:
            out, ok = 'no end within %d s\n' % TIMEOUT_S, False
        if os.path.exists(log):
            with open(log) as f:
                out += ''.join('stand-in: ' + x for x in f)
        return ok, out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--corral', default=os.path.join(TOP, 'build', 'corral'))
    ap.add_argument('files', nargs='*', default=[os.path.join(TOP, 'README.md')])
    args = ap.parse_args()
    corral = os.path.abspath(args.corral)
    todo = [(f, line, text) for f in args.files for line, text in marked_blocks(f)]
    print('TAP version 13')
    if not todo:
        print('1..1')
        print('not ok 1 - no shell block is marked for the test (```sh test) in %s'
              % ', '.join(args.files))
        return 1
    print('1..%d' % len(todo))
    failed = 0
    for n, (f, line, text) in enumerate(todo, 1):
        ok, out = run_block(text, corral)
        name = '%s:%d runs as written on a fresh account' % (os.path.relpath(f, TOP), line)
        print('%s %d - %s' % ('ok' if ok else 'not ok', n, name))
        if not ok:
            failed += 1
        for x in (text.rstrip('\n').split('\n') if not ok else []) + out.rstrip('\n').split('\n'):
            if x:
                print('#   ' + x)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
