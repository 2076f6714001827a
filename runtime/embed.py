#!/usr/bin/env python3
"""Embed the sandbox runtime in the daemon as a C string (build step)."""
import sys

src = open(sys.argv[1], encoding="utf-8").read()
if "\0" in src:
    sys.exit("runtime source must not contain NUL")
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.write("/* Generated from runtime/corral_runtime.py; do not edit. */\n")
    out.write("const char corral_runtime_src[] =\n")
    for line in src.splitlines(keepends=True):
        esc = "".join(
            c if 32 <= ord(c) < 127 and c not in '"\\?' else "\\%03o" % ord(c)
            for c in line.encode("utf-8").decode("latin-1")
        )
        out.write('    "%s"\n' % esc)
    out.write(";\n")
